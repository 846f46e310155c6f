"""Findings about what the drafter gets accepted: a DP rank behind the others, adaptive
speculation that gave up, requests the window average hides, an algorithm without a standard."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean, median

from exporter.analysis.algorithms import config_floor, config_standard, own_fix
from exporter.analysis.findings.shapes import (
    DecodeSample,
    Finding,
    Observations,
    mean_accept_length,
)
from exporter.analysis.ranks import RankAccept
from exporter.analysis.request_share import NO_BENEFIT_ACCEPT_LENGTH, RecentShare, logged_time
from exporter.analysis.thresholds import DEFAULT, MIN_WINDOWS

LOW_RANK_SHARE = 0.7  # a DP rank below this share of the other ranks' median accept length
# With drafting off in at least this share of recent windows (adaptive speculation), the few
# windows with drafting on are its probes: judged by whether they accept anything, never as a
# collapse or a low accept length.
OFF_SHARE = 0.5
# Probes that accept this little (accept length; EMA of accepted drafts per round) show a
# drafter adaptive has given up on.
GIVEN_UP_ACCEPT_LENGTH = 1.15
GIVEN_UP_EMA = 0.15


def dp_rank_accept_length(obs: Observations) -> Finding | None:
    """DP ranks whose drafter collapsed, or accepts far less than the other ranks' drafters,
    named one by one: the node's mean hides one bad rank among healthy ones."""
    ranks = [rank for rank in obs.ranks if rank.windows >= MIN_WINDOWS]
    if len(ranks) < 2:
        return None
    limit = obs.thresholds.collapsed_accept_length
    collapsed = [rank for rank in ranks if rank.accept_length <= limit]
    if collapsed and len(collapsed) < len(ranks):
        bad, code = collapsed, "dp_rank_collapsed"
        summary = f"DP rank{_plural(bad)} {_numbers(bad)} collapsed: no draft token accepted"
    else:
        bad = [rank for rank in ranks if rank.accept_length < LOW_RANK_SHARE * _others(rank, ranks)]
        if not bad or len(bad) == len(ranks):
            return None
        code = "dp_rank_accept_length_low"
        summary = f"DP rank{_plural(bad)} {_numbers(bad)} accept{'s' if len(bad) == 1 else ''} "
        summary += "far less than the other ranks"
    good = [rank for rank in ranks if rank not in bad]
    return Finding(
        code=code,
        summary=summary,
        seen=(
            "; ".join(
                f"DP rank {r.dp_rank}: accept length {r.accept_length:.2f} over {r.windows} windows"
                for r in bad
            )
            + f"; the other {len(good)} rank{_plural(good)}: "
            + ", ".join(f"{r.accept_length:.2f}" for r in good)
            + "."
        ),
        why=(
            "Each DP rank drafts for its own requests; one rank's bad drafter slows every "
            "request it serves while the node's mean accept length barely moves."
        ),
        fix=(
            f"Look at the log lines of DP rank {bad[0].dp_rank} "
            f"({own_fix(obs.config, 'rank_lines').format(rank=bad[0].dp_rank)}) for errors or "
            "a reload; restart the server if the rank does not recover, and check that every "
            "rank loads the same draft."
        ),
    )


def _others(rank: RankAccept, ranks: Sequence[RankAccept]) -> float:
    """The median accept length of the ranks other than ``rank``."""
    return float(median(r.accept_length for r in ranks if r is not rank))


def _plural(items: Sequence[object]) -> str:
    return "" if len(items) == 1 else "s"


def _numbers(ranks: Sequence[RankAccept]) -> str:
    return ", ".join(str(rank.dp_rank) for rank in ranks)


def drafting_off_share(windows: Sequence[DecodeSample]) -> float | None:
    """Share of ``windows`` with drafting off (adaptive), or ``None`` for too few windows."""
    if len(windows) < MIN_WINDOWS:
        return None
    return sum(w.drafting_off for w in windows) / len(windows)


def adaptive_drafter_given_up(obs: Observations) -> Finding | None:
    """Adaptive speculation keeps drafting off, and its probes accept almost nothing.

    Drafting off at high concurrency is adaptive working as designed; off in nearly every
    window, with the short steps > 0 probes accepting nothing, is a drafter that is paid for
    (its memory, its graphs, every probe) and does nothing.
    """
    share = drafting_off_share(obs.windows)
    if not obs.config.probes or share is None or share < OFF_SHARE:
        return None
    probes = [w.accept_length for w in obs.windows if w.accept_length is not None]
    probe_length = fmean(probes) if probes else None
    ema = obs.config.off_ema_accept
    if probe_length is None and ema is None:
        return None  # no probe seen: a node at a load where adaptive never drafts
    if (probe_length or 1.0) > GIVEN_UP_ACCEPT_LENGTH or (ema or 0.0) > GIVEN_UP_EMA:
        return None
    running = [w.running for w in obs.windows if w.running is not None]
    spread = f"{min(running)}-{max(running)}" if running and min(running) < max(running) else ""
    load = f" at {spread or running[0]} running requests" if running else ""
    evidence = []
    if probe_length is not None:
        evidence.append(f"its {len(probes)} windows with drafting on averaged {probe_length:.2f}")
    if ema is not None:
        evidence.append(f"ema_accept_len={ema:.2f} when it last turned drafting off")
    off = sum(w.drafting_off for w in obs.windows)
    return Finding(
        code="adaptive_drafter_given_up",
        summary="Adaptive speculation has given up on the drafter",
        seen=(
            f"drafting off (adaptive) in {off} of {len(obs.windows)} recent decode "
            f"windows{load}; {'; '.join(evidence)}."
        ),
        why=(
            "Adaptive speculation turns drafting off when drafts are rejected: the node runs "
            "at plain-decoding speed, but still pays for the drafter's memory and graphs and "
            "for every probe that finds it still accepts nothing."
        ),
        fix=(
            "Fix the drafter (it must be trained for this target model and version; an "
            "EAGLE-3 draft needs the EAGLE3 algorithm), or restart without speculation to "
            "free what it holds."
        ),
    )


def requests_without_benefit(obs: Observations) -> Finding | None:
    """A share of requests at accept length 1 that the window average hides."""
    share = obs.requests
    average = obs.accept_length
    if average is None:
        average = mean_accept_length(obs.windows)
    floor = config_floor(obs.config)  # None: accept length is not judged, nor low
    if (
        share is None
        or share.requests < DEFAULT.no_benefit_min_requests
        or share.share <= DEFAULT.no_benefit_share
        or average is None
        or (floor is not None and average < floor)
    ):
        return None
    span = ""
    if share.first and share.last:
        span = f" between {logged_time(share.first)} and {logged_time(share.last)}"
    return Finding(
        code="requests_without_benefit",
        summary=f"{share.share:.0%} of requests get nothing from the drafter",
        seen=(
            f"{share.no_benefit} of {share.requests} speculative requests ({share.share:.0%}) "
            f"finished at accept length <= {NO_BENEFIT_ACCEPT_LENGTH}{span}, while decode "
            f"windows averaged {average:.2f}.{_worst_class(share)}"
        ),
        why=(
            "A window's accept length averages over all its requests, weighted by tokens, so "
            "it hides a class of traffic the drafter does not fit. Those requests pay for "
            "drafting and verification and gain nothing: they run slower than without "
            "speculation."
        ),
        fix=(
            "Find what those requests share: one tenant or task in the traffic mix, a LoRA "
            "adapter the drafter was not trained with, a language, a high sampling temperature, "
            "structured output (JSON schema, grammar). Set request_label_header to split the "
            "histogram by a logged header, then serve that class without speculation or with a "
            "drafter trained on it."
        ),
    )


def _worst_class(share: RecentShare) -> str:
    if share.worst_class is None:
        return ""
    return (
        f" Traffic class {share.worst_class} has the largest share: "
        f"{share.worst_class_share:.0%} of its requests since the start."
    )


def algorithm_unknown(obs: Observations) -> Finding | None:
    algorithm = obs.config.algorithm
    if algorithm is None or config_standard(obs.config) is not None:
        return None
    return Finding(
        code="algorithm_unknown",
        summary=f"No accept-length standard for {algorithm[:40]}: judged on speed only",
        seen=f"speculative algorithm '{algorithm[:40]}', which specwatch has no standard for.",
        why=(
            "What counts as a low or collapsed accept length depends on the algorithm; "
            "specwatch judges only what it knows, so this node gets no accept-length verdict "
            "or alert, only the speed verdict against the baseline."
        ),
        fix=(
            "Configure a baseline (--baseline-curve) so the speed verdict applies; compare "
            "the exported accept length with the algorithm's published one by hand."
        ),
    )
