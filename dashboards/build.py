"""Write the generated dashboards: ``python -m dashboards.build [OUT_DIR]`` (``make dashboards``).

The committed JSON must equal this output byte for byte (a test checks), so the encoding is
fixed: sorted keys, two-space indent, trailing newline.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from dashboards import fleet, node
from dashboards.common import FLEET_UID, NODE_UID

HERE = Path(__file__).resolve().parent
BUILDERS: dict[str, Callable[[], db.Dashboard]] = {
    f"{NODE_UID}.json": node.build,
    f"{FLEET_UID}.json": fleet.build,
}


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard, exactly as committed."""
    encoder = JSONEncoder(sort_keys=True, indent=2)
    # Round-trip through json so the text does not depend on the SDK's encoder whitespace.
    return {
        name: json.dumps(json.loads(encoder.encode(build().build())), indent=2, sort_keys=True)
        + "\n"
        for name, build in BUILDERS.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the specwatch Grafana dashboards.")
    parser.add_argument("out_dir", nargs="?", type=Path, default=HERE, help="default: dashboards/")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (args.out_dir / name).write_text(text, encoding="utf-8")
        print(f"wrote {args.out_dir / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
