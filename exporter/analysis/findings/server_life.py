"""Findings about the server's life rather than its speculation: it ended or crashed, its
decode stats are not logged, its log format drifted, its /metrics endpoint is off, two servers
write its log."""

from __future__ import annotations

from exporter.analysis.algorithms import engine_fix, own_fix
from exporter.analysis.findings.shapes import Finding, Observations, Stream
from exporter.engines import registry
from exporter.engines.ending import Ending
from exporter.engines.engine import Engine
from exporter.engines.server_config import ServerConfig

SILENT_PREFILLS = 3  # real prefill batches with no decode line since
SILENT_SECONDS = 120.0
HIDING_LOG_LEVELS = frozenset({"warning", "error", "critical"})


# What to do about each cause ``engines.ending`` names; anything else: read the traceback.
_CRASH_FIXES = {
    # In the flags of the run's own engine (its ``graph_headroom`` and ``gpu_headroom`` fixes).
    "CUDA graph capture failed: out of GPU memory at start-up": (
        "Leave the CUDA graphs room: lower {graphs}; then restart the server."
    ),
    "CUDA out of memory": "Leave the GPU more headroom: lower {headroom}; then restart the server.",
    "NCCL error (GPU communication)": (
        "Check the GPUs and their links (nvidia-smi, NCCL_DEBUG=INFO names the failing rank), "
        "then restart the server."
    ),
}


def ending_summary(end: Ending, served: bool) -> str:
    """How a server run ended, in one phrase: the crash finding's summary, and what an
    earlier run's line says when a restart followed."""
    when = f" at {end.time.replace('T', ' ')}" if end.time else ""
    if end.stopped:
        return f"The server was stopped{when}"
    if not _crashed(end):
        return "The server logged a traceback and no decode window since"
    cause = f": {end.cause}" if end.cause else ""
    return f"{'The server crashed' if served else 'The server failed to start'}{when}{cause}"


def _crashed(end: Ending) -> bool:
    return end.final or end.cause in _CRASH_FIXES


def server_ended(obs: Observations) -> Finding | None:
    """The log says the server died, or logged a traceback and no decode window since; a
    server stopped on purpose (its interrupted processes' tracebacks, then its own end) is
    no finding."""
    end = obs.ending
    if end is None or end.stopped:
        return None
    crashed = _crashed(end)
    when = f" at {end.time.replace('T', ' ')}" if end.time else ""
    cause = f": {end.cause}" if end.cause else ""
    served = (
        f"after {len(obs.windows)} recent decode windows"
        if obs.windows
        else "before any decode window of this run (it failed at start-up)"
    )
    summary = ending_summary(end, bool(obs.windows))
    if crashed:
        why = (
            "A dead server serves nothing and writes no stats lines: every alert that rests on "
            "them goes quiet just when the node is down."
        )
    else:
        why = (
            "A traceback with no window after it is how a dying server looks from its log; one "
            "failed request looks the same until the next decode window shows the node serving."
        )
    return Finding(
        code="server_crashed" if crashed else "server_failing",
        summary=summary,
        seen=f"{end.kind}{when}{cause}, {served}.",
        why=why,
        fix=_CRASH_FIXES.get(end.cause or "", "").format(
            headroom=own_fix(obs.config, "gpu_headroom"),
            graphs=own_fix(obs.config, "graph_headroom"),
        )
        or (
            "Read the traceback just before this point in the log, fix its cause and restart "
            "the server."
        ),
    )


def decode_stats_not_logged(obs: Observations) -> Finding | None:
    if obs.config.stats_not_logged is not None:
        return _stats_off_by_engine(obs)
    level = (obs.config.log_level or "").lower()
    if level in HIDING_LOG_LEVELS:
        writer = _logger(obs.config)
        seen = f"The log level is {level}: {writer} logs decode stats at INFO, so none are written."
    elif _requests_without_decode(obs):
        interval = obs.config.decode_log_interval
        note = f" (a stats line due every {interval} decode rounds)" if interval is not None else ""
        if _prefills_without_decode(obs):
            traffic, seconds = (
                f"{obs.prefills_without_decode} prefill batches",
                obs.seconds_without_decode,
            )
        else:
            traffic, seconds = "/metrics shows running requests", obs.seconds_watched_without_decode
        seen = f"{traffic} and no decode stats line in the log for {seconds:.0f} s{note}."
    else:
        return None
    return Finding(
        code="decode_stats_not_logged",
        summary="Decode stats are not in the log",
        seen=seen,
        why=(
            "Accept length, CUDA-graph use and throughput per window come from the decode "
            "stats lines; without them specwatch cannot tell whether speculation helps."
        ),
        fix=f"Have the server log its stats: {engine_fix('log_stats', obs.config.engine)}.",
    )


def _stats_off_by_engine(obs: Observations) -> Finding | None:
    """The engine said in its log that it logs no stats this run (vLLM's API servers): a
    problem only while its ``/metrics``, which still counts everything, is not read."""
    if obs.metrics_endpoint == "ok":
        return None
    return Finding(
        code="decode_stats_not_logged",
        summary="Decode stats are not in the log",
        seen=f"The server said at start: '{obs.config.stats_not_logged}'.",
        why=(
            "Accept length, CUDA-graph use and throughput per window come from the stats "
            "lines; without them, and without the server's /metrics, specwatch cannot tell "
            "whether speculation helps."
        ),
        fix=f"{engine_fix('api_servers', obs.config.engine)}.",
    )


def _requests_without_decode(obs: Observations) -> bool:
    """Requests flow (prefill lines, or running requests upstream) yet no decode line comes.

    A decode line is due every log interval of decode rounds (``decode_log_interval``, else
    the engine's own), a second or two under load, so minutes of traffic without one means
    they are filtered or disabled.
    """
    if obs.config.prefill_only:
        return False  # its decode servers decode (and log) what it prefills
    busy = obs.upstream_busy and obs.seconds_watched_without_decode >= SILENT_SECONDS
    return obs.log_watched and (_prefills_without_decode(obs) or busy)


def _prefills_without_decode(obs: Observations) -> bool:
    """Prefill lines kept coming, for a while by the log's own clock, and no decode line."""
    silent = obs.seconds_without_decode >= SILENT_SECONDS
    return obs.prefills_without_decode >= SILENT_PREFILLS and silent


def _logger(config: ServerConfig) -> str:
    """Who wrote the log, in its own name: the engine whose start named it."""
    engine = registry.BY_NAME.get(config.engine or "")
    return "The server" if engine is None else engine.title


def log_format_unrecognized(obs: Observations) -> Finding | None:
    if obs.unrecognized_lines <= 0:
        return None
    return Finding(
        code="log_format_unrecognized",
        summary="Stats lines in an unknown format",
        seen=(
            f"{obs.unrecognized_lines} of the last {obs.stats_lines} stats-like lines could "
            "not be parsed."
        ),
        why=(
            "The log format drifted (usually an engine upgrade); windows from those lines are "
            "missing, so gauges and alerts may be blind."
        ),
        fix=(
            "Upgrade specwatch, or report the line with the engine's version; meanwhile a "
            "custom_rules entry in the config can extract the fields you need."
        ),
    )


def metrics_left_off(config: ServerConfig) -> Engine | None:
    """The engine whose switch for ``/metrics`` this server may have left off: the one that
    logged its run, where that engine serves ``/metrics`` only when told (its
    ``metrics_switch``) and the server's arguments do not say it was told. Elsewhere a 404 at
    ``/metrics`` is a wrong URL, and the server has nothing to fix. Arguments that name no
    engine yet say their metrics are off only in an engine that has such a switch."""
    if config.enable_metrics:
        return None
    engine = registry.BY_NAME.get(config.engine or "")
    if engine is None and config.enable_metrics is False:
        engine = next((each for each in registry.ENGINES if each.metrics_switch), None)
    return engine if engine is not None and engine.metrics_switch else None


def metrics_endpoint_disabled(obs: Observations) -> Finding | None:
    """The server's metrics are off: its arguments say so, or its ``/metrics`` answers 404 (or
    holds none of its series) while its engine serves them only when switched on (the
    endpoint's own error says what was tried and what to give otherwise)."""
    engine = metrics_left_off(obs.config)
    if engine is None or engine.metrics_switch is None:
        return None
    if obs.config.enable_metrics is False:
        seen = f"The server's arguments leave {engine.metrics_switch} off."
    elif obs.metrics_endpoint in ("missing", "empty"):
        seen = f"/metrics is {obs.metrics_endpoint}."
    else:
        return None
    return Finding(
        code="metrics_endpoint_disabled",
        summary=f"{engine.title}'s /metrics endpoint is off",
        seen=seen,
        why=(
            f"specwatch still works from the log, but {engine.title}'s own gauges are a "
            "second source when the log is quiet or rotated away."
        ),
        fix=f"Restart the server with {engine.metrics_switch}.",
    )


# How each sign of two servers of one engine in one log reads in a finding's evidence.
_SAME_ENGINE_SIGNS = {
    "serving_while_starting": (
        "decode lines went on while the later one was still starting (a server decodes "
        "nothing before it says it is ready), so the earlier one is still serving"
    ),
    "both_ready": "both servers said they were ready",
    "alternating_levels": (
        "since the later one started, the decode windows take turns between two "
        "accept-length levels far apart, as two servers' do"
    ),
}


def interleaved_servers(obs: Observations) -> Finding | None:
    """One log file carries two servers' lines: no figure of it is one server's."""
    seen = obs.interleaving
    if seen is None:
        return None
    if seen.sign == "engines":
        parts = [f"{s.lines} are {_title(s.engine)}'s{_lengths(s)}" for s in seen.streams]
        evidence = (
            f"Of the newest {seen.recent} stats lines, {' and '.join(parts)}, alternating: "
            "each engine's own stats lines keep coming between the other's."
        )
    else:
        engine = _title(seen.starts[-1][0]) if seen.starts else "server"
        times = ", ".join(time.replace("T", " ") if time else "?" for _, time in seen.starts)
        lines = "; ".join(f"{s.lines} {_title(s.engine)}'s{_lengths(s)}" for s in seen.streams)
        evidence = (
            f"{len(seen.starts)} {engine} server starts ({times}) with no end logged between "
            f"them, and {_SAME_ENGINE_SIGNS.get(seen.sign, seen.sign)}. The newest "
            f"{seen.recent} stats lines: {lines}."
        )
    return Finding(
        code="interleaved_servers",
        summary="Two servers write to this one log file",
        seen=evidence,
        why=(
            "specwatch reads a log as one server's: two servers' lines in one file make one "
            "accept length and throughput that flip between theirs at every line, so a "
            "collapsed drafter can read as healthy and a healthy one as collapsed. While both "
            "write here, no accept length, throughput or verdict is given for this log."
        ),
        fix=(
            "Give each server a log file of its own (its own --log-file or redirection per "
            "process; each container's own log, not one shared file) and point a specwatch "
            "target at each (targets: in the config file, one per server)."
        ),
    )


def _title(engine: str) -> str:
    known = registry.BY_NAME.get(engine)
    return known.title if known is not None else engine


def _lengths(stream: Stream) -> str:
    """A stream's accept lengths, as a parenthesis: one value, or their range and mean."""
    low, high, mean = stream.accept_low, stream.accept_high, stream.accept_mean
    if low is None or high is None or mean is None:
        return ""
    if high - low < 0.01:
        return f" (accept length {mean:.2f})"
    return f" (accept length {low:.2f} to {high:.2f}, mean {mean:.2f})"
