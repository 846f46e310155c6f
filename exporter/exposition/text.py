"""The exposition's text, written by a lean writer where prometheus_client's costs the scrape.

A scrape of 100 targets is about 6,000 samples; prometheus_client's ``generate_latest`` spent
60% of such a scrape escaping names it validated on every call (bench/README.md, "A node of
many servers"). Every name specwatch exports is a valid legacy metric or label name (declared
in ``families.py``, or a custom rule's, checked at start), so under the two escapings that
leave such names alone a sample's line is the same in the text format and in OpenMetrics 1.0,
and only label values need escaping. This writer writes those lines; the HELP and TYPE lines
and every other format are left to prometheus_client, and ``tests/test_exposition_reuse.py``
holds the two writers to the same bytes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

# Escapings that write a legacy-valid name as it is (prometheus_client's names for them).
PLAIN_ESCAPINGS = (openmetrics.UNDERSCORES, openmetrics.ALLOWUTF8)
EOF = "# EOF\n"


def lean_format(content_type: str) -> str | None:
    """``"text"`` or ``"openmetrics"`` when the lean writer can write the format that
    prometheus_client chose for a request (its Content-Type), else None."""
    kind, *params = (part.strip() for part in content_type.split(";"))
    options = dict(p.split("=", 1) for p in params if "=" in p)
    if options.get("escaping", openmetrics.UNDERSCORES) not in PLAIN_ESCAPINGS:
        return None
    if kind == "text/plain" and options.get("version") in ("0.0.4", "1.0.0"):
        return "text"
    if kind == "application/openmetrics-text" and options.get("version") == "1.0.0":
        return "openmetrics"
    return None


def sample_lines(samples: Iterable[Sample]) -> str:
    """The lines of ``samples`` as prometheus_client writes them (no timestamps, exemplars
    or native histograms: specwatch exports none)."""
    return "".join(map(_line, samples))


def template(names: Sequence[str], labels: Sequence[dict[str, str]]) -> str:
    """The lines of the series of these sample names and labels, each value a ``%s`` (a
    ``%`` of a label value doubled): ``filled`` with values, the lines ``sample_lines``
    writes, without writing the names and labels again."""
    heads = [_head(name, each) for name, each in zip(names, labels, strict=True)]
    return "".join([head.replace("%", "%%") + "%s\n" for head in heads])


def filled(written: str, values: Sequence[float]) -> str:
    """The lines of a ``template`` with ``values`` (one per series)."""
    if len(values) == 1:  # most families of a target: one series
        return written % _number(values[0])
    return written % tuple(map(_number, values))


def _head(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return f"{name} "
    pairs = ",".join([f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())])
    return f"{name}{{{pairs}}} "


def _line(sample: Sample) -> str:
    return f"{_head(sample.name, sample.labels)}{_number(sample.value)}\n"


def _number(value: float) -> str:
    """``floatToGoString``, without its conversion and checks where they change nothing: the
    counts most samples are (an integer Go writes without an exponent), and any float below
    1e6, which Go writes as Python's ``repr`` does (Go switches to an exponent from 1e6 up,
    Python from 1e16; NaN and the infinities fail the comparison and are left to it)."""
    if type(value) is int and -(10**15) < value < 10**6:
        return f"{value}.0"
    if type(value) is float and -math.inf < value < 1e6:
        return repr(value)
    text: str = floatToGoString(value)
    return text


def _escape(value: str) -> str:
    if "\\" not in value and "\n" not in value and '"' not in value:
        return value
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


@functools.lru_cache(maxsize=1024)
def header(name: str, kind: str, doc: str, form: str) -> str:
    """The HELP and TYPE lines of a family, written by prometheus_client itself."""
    metric = Metric(name, doc, kind)
    if form == "text":
        written: bytes = generate_latest(_One(metric))
        return written.decode()
    written = openmetrics.generate_latest(_One(metric))
    return written.decode().removesuffix(EOF)


class _One:
    """A registry of one metric, as prometheus_client's writers take one."""

    def __init__(self, metric: Metric) -> None:
        self._metrics: Sequence[Metric] = (metric,)

    def collect(self) -> Iterable[Metric]:
        return self._metrics
