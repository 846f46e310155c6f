"""The dashboards as JSON text for one mixin config (``make mixin`` writes them).

The committed JSON must equal the default rendering byte for byte (a test checks), so the
encoding is fixed: sorted keys, two-space indent, trailing newline.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import table

from exporter.mixin.dashboards import fleet, node
from exporter.mixin.dashboards.common import rendering
from exporter.mixin.dashboards.v2 import to_v2
from exporter.mixin_config import MixinConfig

# File names stay fixed whatever the uid prefix, so provisioning paths survive a re-render.
BUILDERS: dict[str, Callable[[], db.Dashboard]] = {
    "specwatch-node.json": node.build,
    "specwatch-fleet.json": fleet.build,
}


def without_table_footers(dashboard: dm.Dashboard) -> dm.Dashboard:
    """Grafana 13's table has no ``options.footer`` (it moved into the field config), and the
    SDK writes one, hidden, on every table. Left out, every Grafana shows no footer, as the
    hidden one did."""
    for panel in dashboard.panels or []:
        options = getattr(panel, "options", None)
        if isinstance(options, table.Options):
            options.footer = None
    return dashboard


def render(config: MixinConfig | None = None) -> dict[str, str]:
    """File name -> JSON text of every dashboard (the committed files: default config)."""
    encoder = JSONEncoder(sort_keys=True, indent=2)
    with rendering(config or MixinConfig()):
        # Round-trip through json so the text does not depend on the SDK's encoder whitespace.
        return {
            name: json.dumps(
                json.loads(encoder.encode(without_table_footers(build().build()))),
                indent=2,
                sort_keys=True,
            )
            + "\n"
            for name, build in BUILDERS.items()
        }


def render_v2(classic: dict[str, str]) -> dict[str, str]:
    """File name -> JSON text of each dashboard of ``render`` as a Grafana v2 resource."""
    return {
        name: json.dumps(to_v2(json.loads(text)), indent=2, sort_keys=True) + "\n"
        for name, text in classic.items()
    }
