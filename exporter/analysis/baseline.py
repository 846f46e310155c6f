"""What the server does *without* speculation, as a function of load.

Speculative decoding pays off at low concurrency and fades (or hurts) as the batch grows and
verification turns compute-bound, so "is speculation helping?" can only be answered against a
non-speculative throughput measured at the same number of running requests. A single tok/s
figure is accepted for convenience; a curve (hand-written or built from
``python -m sglang.bench_serving --output-file`` results) is the honest form.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.analysis.load_bands import band_of
from exporter.smallfile import read_small_file

# Where a baseline came from, in precedence order: the values of the ``source`` label of
# ``specwatch_baseline_*`` and the words doctor and report name it by. A fleet's plain peers
# are compared in Prometheus (the mixin's rules), an estimate only in doctor and report.
CONFIGURED = "configured"
OWN_LOG = "own_log"
FLEET = "fleet"
DRAFTING_OFF = "drafting_off"
ESTIMATE = "estimate"
SOURCES = (CONFIGURED, OWN_LOG, FLEET, DRAFTING_OFF, ESTIMATE)
SOURCE_WORDS = {
    CONFIGURED: "configured",
    OWN_LOG: "learned from a log of this model served without speculation",
    FLEET: "the fleet's peers without speculation",
    DRAFTING_OFF: "learned from this node's windows with drafting off",
    ESTIMATE: "estimated from the accept length, not measured",
}

# bench_serving writes a line per run, with every request's timings: some MB for long runs.
MAX_BENCH_BYTES = 64 << 20


class BaselineError(ValueError):
    """A baseline that cannot be used; the caller names the flag or key that gave it."""


@dataclass(frozen=True, slots=True)
class Baseline:
    """Non-speculative generation throughput (tok/s) against running requests.

    ``points`` are ``(running_requests, tok_s)`` pairs, strictly increasing in running
    requests. Between points the curve is linear; outside them it is clamped to the nearest
    end, because extrapolating a throughput curve beyond what was measured invents numbers.
    ``source`` describes the figures for humans; ``kind`` is where they came from (one of
    :data:`SOURCES`). A learned baseline speaks only for the load ``bands`` it saw enough of
    (``None``: every load, as a configured one does).
    """

    points: tuple[tuple[float, float], ...]
    source: str
    kind: str = CONFIGURED
    bands: frozenset[int] | None = None
    _xs: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.points:
            raise BaselineError("a baseline needs at least one point")
        # Cached so at() stays cheap: the report calls it once per decode window.
        object.__setattr__(self, "_xs", tuple(x for x, _ in self.points))

    def at(self, running_requests: float) -> float:
        """Baseline tok/s at ``running_requests`` (piecewise linear, clamped at both ends)."""
        xs = self._xs
        if running_requests <= xs[0]:
            return self.points[0][1]
        if running_requests >= xs[-1]:
            return self.points[-1][1]
        right = bisect.bisect_right(xs, running_requests)
        (x0, y0), (x1, y1) = self.points[right - 1], self.points[right]
        return y0 + (y1 - y0) * (running_requests - x0) / (x1 - x0)

    def covers(self, running_requests: float) -> bool:
        """Whether the baseline speaks for this load (a learned one: only its bands)."""
        return self.bands is None or band_of(running_requests) in self.bands

    def describe(self) -> str:
        """One line for humans: where the numbers came from and what they are."""
        if len(self.points) == 1:
            return f"{_fmt_tok_s(self.points[0][1])} tok/s ({self.source})"
        curve = ", ".join(f"{_fmt_num(x)}:{_fmt_tok_s(y)}" for x, y in self.points)
        return f"curve {curve} ({self.source})"

    def to_json_dict(self) -> dict[str, Any]:
        """The figures and where they came from, for JSON readers."""
        return {
            "source": self.kind,
            "description": self.describe(),
            "points": [{"running": x, "tok_s": y} for x, y in self.points],
        }

    @classmethod
    def from_tok_s(cls, tok_s: float) -> Baseline:
        """The same throughput at every load: fine for single-stream benchmarks."""
        value = _positive(tok_s, "baseline tok/s")
        return cls(points=((1.0, value),), source="single value")

    @classmethod
    def from_curve(cls, text: str) -> Baseline:
        """Parse ``"1:82,48:1500,128:2370"`` (running requests : tok/s, ascending)."""
        items = [item.strip() for item in text.split(",")]
        if not text.strip() or any(not item for item in items):
            raise BaselineError(
                f"curve {text!r} is empty or has an empty point; expected e.g. "
                '"1:82,48:1500,128:2370"'
            )
        points = [_curve_point(item) for item in items]
        for (x0, _), (x1, _) in itertools.pairwise(points):
            if x1 <= x0:
                raise BaselineError(
                    f"curve {text!r}: running requests must be strictly increasing "
                    f"({_fmt_num(x1)} follows {_fmt_num(x0)})"
                )
        return cls(points=tuple(points), source="curve")

    @classmethod
    def from_bench_file(cls, path: str | Path) -> Baseline:
        """Build a curve from a non-speculative ``sglang.bench_serving --output-file`` run.

        Each JSON line is one benchmark run; its concurrency (``max_concurrency``, or the
        measured ``concurrency`` when no cap was set) and ``output_throughput`` give one point.
        Repeated runs at the same concurrency are averaged.
        """
        path = Path(path)
        try:
            text = read_small_file(path, MAX_BENCH_BYTES).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BaselineError(f"cannot read bench file {path}: {exc}") from exc
        samples: dict[float, list[float]] = defaultdict(list)
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                concurrency, tok_s = _bench_point(path, number, line)
                samples[concurrency].append(tok_s)
        if not samples:
            raise BaselineError(f"bench file {path} has no benchmark results")
        points = tuple((x, sum(ys) / len(ys)) for x, ys in sorted(samples.items()))
        return cls(points=points, source=f"bench_serving file {path.name}")

    @classmethod
    def from_options(
        cls,
        tok_s: float | None = None,
        curve: str | None = None,
        bench_file: str | Path | None = None,
    ) -> Baseline | None:
        """The configured baseline, or ``None`` when none is set; more than one is an error."""
        given = [name for name, value in _options(tok_s, curve, bench_file) if value is not None]
        if len(given) > 1:
            raise BaselineError(f"at most one baseline may be given, got {' and '.join(given)}")
        if tok_s is not None:
            return cls.from_tok_s(tok_s)
        if curve is not None:
            return cls.from_curve(curve)
        if bench_file is not None:
            return cls.from_bench_file(bench_file)
        return None


def _options(tok_s: Any, curve: Any, bench_file: Any) -> list[tuple[str, Any]]:
    return [("tok_s", tok_s), ("curve", curve), ("bench_file", bench_file)]


def _positive(value: Any, what: str) -> float:
    """A finite number above zero; bools are rejected because JSON ``true`` is not a count."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BaselineError(f"{what} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise BaselineError(f"{what} must be a positive number, got {value!r}")
    return number


def _curve_point(item: str) -> tuple[float, float]:
    running, sep, tok_s = item.partition(":")
    try:
        if not sep:
            raise ValueError
        x, y = float(running), float(tok_s)
    except ValueError:
        raise BaselineError(f"curve point {item!r} is not RUNNING:TOK_S (e.g. 48:1500)") from None
    return (
        _positive(x, f"running requests in curve point {item!r}"),
        _positive(y, f"tok/s in curve point {item!r}"),
    )


def _bench_point(path: Path, number: int, line: str) -> tuple[float, float]:
    where = f"{path} line {number}"
    try:
        result = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BaselineError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(result, dict):
        raise BaselineError(f"{where}: expected a JSON object")
    algorithm = _speculative_algorithm(result.get("server_info"))
    if algorithm:
        raise BaselineError(
            f"{where}: this run used speculative decoding (speculative_algorithm="
            f"{algorithm!r} in its server_info); a baseline must come from a server started "
            "without speculative decoding"
        )
    concurrency = result.get("max_concurrency")
    key = "max_concurrency"
    if concurrency is None:
        concurrency, key = result.get("concurrency"), "concurrency"
    if "output_throughput" not in result or concurrency is None:
        raise BaselineError(
            f"{where}: needs output_throughput and max_concurrency (or concurrency)"
        )
    try:
        return (
            _positive(concurrency, key),
            _positive(result["output_throughput"], "output_throughput"),
        )
    except BaselineError as exc:
        raise BaselineError(f"{where}: {exc}") from None


def _speculative_algorithm(server_info: Any) -> str | None:
    """``speculative_algorithm`` from a ``/server_info`` copy (top level or per DP rank)."""
    if not isinstance(server_info, dict):
        return None
    candidates = [server_info, *(server_info.get("internal_states") or [])]
    for state in candidates:
        if isinstance(state, dict) and state.get("speculative_algorithm"):
            return str(state["speculative_algorithm"])
    return None


def _fmt_num(value: float) -> str:
    return f"{value:g}"


def _fmt_tok_s(value: float) -> str:
    return f"{value:,.0f}"
