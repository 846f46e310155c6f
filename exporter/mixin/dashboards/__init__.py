"""Grafana dashboards for specwatch, built in code with grafana-foundation-sdk.

The JSON in this folder is generated: edit the Python modules and run ``make mixin``.
Keeping the dashboards as code lets tests lint them, validate them against Grafana's schema
and run every panel query against a real Prometheus, so a renamed metric breaks a test
instead of a dashboard someone opens during an incident.
"""

import warnings

# grafana-foundation-sdk warns, when its classic (v1) dashboard modules are imported, that v2 is
# preferred. specwatch renders both on purpose (v2.py derives the v2 resources from the classic
# JSON, which Grafana 11 and older need), so the notice would only repeat on every build.
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", "Prefer using dashboardv2.Dashboard instead.", DeprecationWarning
    )
    from grafana_foundation_sdk.builders import dashboard as _classic_builders  # noqa: F401
    from grafana_foundation_sdk.builders import timeseries as _panel_builders  # noqa: F401
    from grafana_foundation_sdk.models import dashboard as _classic_models  # noqa: F401
