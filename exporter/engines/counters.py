"""Reading an engine's counters from ``/metrics``: sums over its ranks, increases between two
scrapes, and per-position series.

Every engine that exports speculation counters (vLLM and the servers writing its schema,
TensorRT-LLM) needs the same three things, and the same care: a counter that went down is a
restart, not a negative rate, and a position label is hostile input until it is a small number.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from exporter.engines.engine import Samples

# Accepted tokens per verify round: 0 without speculation, else at least 1 (the target's own
# token) and at most one more than the longest draft a real drafter makes.
MAX_ACCEPT_LENGTH = 64.0
# Positions beyond this are not a real drafter (k is single-digit in practice); each position
# is a series of specwatch's own, so the label's values stay bounded whatever the server says.
MAX_POSITIONS = 32
# A target's metrics_prefix as the config takes it and detection accepts it: a metric name's
# start, where a server writes an engine's schema under names of its own.
PREFIX_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_:]{0,62}[_:]$")


def total(samples: Samples, names: Iterable[str]) -> float | None:
    """The first of ``names`` the exposition has, summed over its series; None without one."""
    for name in names:
        values = [value for _, value in samples.get(name, [])]
        if values:
            return sum(values)
    return None


def model_name(samples: Samples, names: Iterable[str]) -> str | None:
    """The ``model_name`` label an engine puts on its series (the served model), from the
    first of ``names`` that carries one; TensorRT-LLM's own server writes ``undefined``."""
    for name in names:
        for labels, _ in samples.get(name, []):
            if labels.get("model_name") not in (None, "", "undefined"):
                return labels["model_name"]
    return None


def increase(before: float | None, now: float | None) -> float | None:
    """Increase of a counter; None when unknown or when it went down (a restart)."""
    if before is None or now is None or now < before:
        return None
    return now - before


def by_position(
    samples: Samples, names: Iterable[str], label: str, upto: int | None = None
) -> tuple[float, ...]:
    """A per-position counter summed over ranks, positions 0..k-1 (a gap ends the list).

    With ``upto``, positions 0..upto-1 and 0 for a position without a series: an engine that
    writes a position's series at its first count (TensorRT-LLM) has none for a position
    whose drafts were never accepted.
    """
    series = next((samples[name] for name in names if samples.get(name)), [])
    found: dict[int, float] = {}
    for labels, value in series:
        position = labels.get(label, "")
        if position.isdigit() and int(position) < MAX_POSITIONS:
            found[int(position)] = found.get(int(position), 0.0) + value
    if upto is not None:
        return tuple(found.get(position, 0.0) for position in range(upto))
    out: list[float] = []
    while len(out) in found:
        out.append(found[len(out)])
    return tuple(out)


def position_increases(
    before: tuple[float, ...], now: tuple[float, ...]
) -> tuple[float, ...] | None:
    """Each position's increase; None when the positions changed or a counter went down."""
    if not now or len(now) != len(before):
        return None
    deltas = tuple(b - a for a, b in zip(before, now, strict=True))
    return None if any(delta < 0 for delta in deltas) else deltas


@dataclass(frozen=True, slots=True)
class Rates:
    """What one scrape window says; every field None when the window says nothing."""

    accept_length: float | None = None
    accept_rate: float | None = None
    accept_rate_by_position: tuple[float, ...] | None = None
    gen_throughput: float | None = None
    # Which counters disagreed, when the window's accept length or ratio could not be true
    # (and so is None).
    disagreement: str | None = None


def accept_length(
    accepted: tuple[str, float], rounds: tuple[str, float]
) -> tuple[float | None, str | None]:
    """``1 + accepted / rounds`` over a window, or None and which counters disagreed.

    Each counter can be in range while the two together cannot be true: 1,000 tokens accepted
    in one round exported an accept length of 1,001 (1e15 with larger steps).
    """
    (accepted_name, tokens), (rounds_name, count) = accepted, rounds
    length = 1.0 + tokens / count
    if length <= MAX_ACCEPT_LENGTH:
        return length, None
    return None, (
        f"{accepted_name} rose by {tokens:g} in {count:g} {rounds_name} (an accept length of "
        f"{length:.4g}, above {MAX_ACCEPT_LENGTH:g})"
    )


def accept_ratio(
    accepted: tuple[str, float], drafted: tuple[str, float]
) -> tuple[float | None, str | None]:
    """``accepted / drafted`` tokens over a window, or None and which counters disagreed:
    more tokens accepted than drafted exported an accept ratio of 333."""
    (accepted_name, tokens), (drafted_name, count) = accepted, drafted
    if tokens <= count:
        return tokens / count, None
    return None, f"{accepted_name} rose by {tokens:g}, more than {drafted_name}'s {count:g}"


def disagreements(*problems: str | None) -> str | None:
    """The problems of one window, in one line; None when there is none."""
    said = [problem for problem in problems if problem]
    return "; ".join(said) or None
