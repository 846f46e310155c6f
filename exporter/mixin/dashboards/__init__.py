"""Grafana dashboards for specwatch, built in code with grafana-foundation-sdk.

The JSON in this folder is generated: edit the Python modules and run ``make mixin``.
Keeping the dashboards as code lets tests lint them, validate them against Grafana's schema
and run every panel query against a real Prometheus, so a renamed metric breaks a test
instead of a dashboard someone opens during an incident.
"""
