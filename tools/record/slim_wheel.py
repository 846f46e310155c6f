"""Rewrite a wheel without the members a tiny dense model never loads.

A GPU machine with no network gets its engine as wheels carried in, and what can be carried
per transfer is often bounded. vLLM's wheel is mostly compiled kernels for hardware or model
kinds a small dense Llama does not touch; leaving them out makes it fit. The members left out
are named by glob patterns on the command line and listed on stdout, so a recording can say
exactly which kernels its engine ran without. RECORD loses their rows, so the wheel still
installs with pip.

Usage: python3 slim_wheel.py IN.whl OUT.whl PATTERN [PATTERN ...]
"""

from __future__ import annotations

import csv
import fnmatch
import io
import sys
import zipfile


def _dropped(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _record_without(text: str, dropped: set[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in csv.reader(io.StringIO(text)):
        if row and row[0] not in dropped:
            writer.writerow(row)
    return out.getvalue()


def slim(source: str, target: str, patterns: list[str]) -> list[str]:
    """Copy SOURCE to TARGET leaving out members matching PATTERNS; return those left out."""
    with zipfile.ZipFile(source) as zin:
        names = zin.namelist()
        dropped = {name for name in names if _dropped(name, patterns)}
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zout:
            for info in zin.infolist():
                if info.filename in dropped:
                    continue
                data = zin.read(info)
                if info.filename.endswith(".dist-info/RECORD"):
                    data = _record_without(data.decode(), dropped).encode()
                zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    return sorted(dropped)


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    for name in slim(argv[1], argv[2], argv[3:]):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
