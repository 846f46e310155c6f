"""Two servers writing one log file are told apart and named, never judged as one.

Before, two SGLang servers (accept length 1.00 and 3.40) in one file made the daemon's accept
length flip at every scrape with no finding, and ``doctor`` on an SGLang and a vLLM server in
one file read only the engine it met first and said "nothing wrong" while the vLLM one had
collapsed. Now ``interleaved_servers`` (a warning) says so, the judge gives the state
``interleaved`` instead of a verdict on the mix, and the daemon exports no accept length for
it. One server with DP ranks, a restart (with or without an end logged), a server killed while
starting and a node moved from SGLang to vLLM stay one server. Logs from the simulator, mixed
line by line as two processes appending to one file would; real ``doctor``, ``report`` and
``specwatch run`` over loopback.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.engines.record import StatsRecord
from exporter.simulate.scenarios import SCENARIOS
from exporter.state.feed import LogFeed
from exporter.state.streams import StreamWatch
from exporter.state.target_state import TargetState
from tests.support.daemon import RunningDaemon, run_daemon, specwatch_cmd
from tests.support.files import append, interleaved
from tests.support.loglines import crashed, decode_line, stamp, startup
from tests.support.metrics import Scrape
from tests.support.recordings import Recording, recordings
from tests.support.waiting import PROCESS_TIMEOUT, wait_for

READY = "The server is fired up and ready to roll!"
SCENARIOS_CURVE = SCENARIOS["healthy"].baseline_flag()


def simulated(scenario: str, engine: str = "sglang", seed: int = 0) -> list[str]:
    """Three minutes of ``specwatch simulate``'s log of ``scenario``."""
    return list(_simulated(scenario, engine, seed))


@cache
def _simulated(scenario: str, engine: str, seed: int) -> tuple[str, ...]:
    """Simulated once a module: the tests mix the same few logs in different ways."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "server.log"
        flags = ["--scenario", scenario, "--engine", engine, "--seed", str(seed)]
        assert main(["simulate", *flags, "--duration", "180", "--out", str(out)]) == 0
        return tuple(out.read_text().splitlines())


def serving(lines: list[str], decodes: int = 20) -> int:
    """The index just past the ``decodes``-th decode line: the server is up and serving."""
    seen = [i for i, line in enumerate(lines) if "Decode batch" in line]
    return seen[decodes - 1] + 1


def doctor(capsys: pytest.CaptureFixture[str], log: Path) -> dict[str, object]:
    main(["doctor", "--log-file", str(log), "--json"])
    answer: dict[str, object] = json.loads(capsys.readouterr().out)
    return answer


def report(capsys: pytest.CaptureFixture[str], log: Path) -> dict[str, object]:
    assert main(["report", str(log), "--json"]) == 0
    answer: dict[str, object] = json.loads(capsys.readouterr().out)
    return answer


def codes(answer: dict[str, object]) -> set[str]:
    findings = answer["findings"]
    assert isinstance(findings, list)
    return {finding["code"] for finding in findings}


def finding(answer: dict[str, object], code: str) -> dict[str, str]:
    findings = answer["findings"]
    assert isinstance(findings, list)
    found: dict[str, str] = next(f for f in findings if f["code"] == code)
    return found


def state(answer: dict[str, object]) -> str:
    verdict = answer["verdict"]
    assert isinstance(verdict, dict)
    return str(verdict["state"])


def write(tmp: Path, lines: list[str]) -> Path:
    log = tmp / "server.log"
    log.write_text("\n".join(lines) + "\n")
    return log


@pytest.mark.parametrize("later", ["together", "while serving"])
def test_two_sglang_servers_one_collapsed_are_named_and_not_judged_as_one(
    later: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A healthy server (about 3.2) and a collapsed one (1.00): started together, both say
    they are ready; started while the first serves, the first's decode lines go on while the
    second is still loading."""
    healthy, collapsed = simulated("healthy"), simulated("collapsed", seed=1)
    alone = 0 if later == "together" else serving(healthy)
    log = write(tmp_path, interleaved(healthy, collapsed, alone))
    said = doctor(capsys, log)
    assert said["status"] == 1  # a warning: never "nothing wrong", never a collapse
    assert state(said) == "interleaved"
    verdict = said["verdict"]
    assert isinstance(verdict, dict) and verdict["accept_length"] is None
    assert codes(said) == {"interleaved_servers"}
    seen = finding(said, "interleaved_servers")["seen"]
    assert "2 SGLang server starts" in seen and "no end logged between them" in seen
    sign = "both servers said they were ready" if later == "together" else "still starting"
    assert sign in seen
    assert "accept length 1.00 to 3." in seen  # both levels, never their mean as the node's
    assert (
        "own log file" not in seen
        and "log file of its own" in finding(said, "interleaved_servers")["fix"]
    )
    written = report(capsys, log)
    assert state(written) == "interleaved"
    assert "interleaved_servers" in codes(written)


def test_the_mix_sizes_no_drafts_where_one_server_alone_is_sized(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The judge says two servers' windows size no drafts (``Judgement.sizes_drafts``), so the
    report gives the mix no draft-token count and no draft steps by load, where the healthy
    server alone gets both."""
    healthy, collapsed = simulated("healthy"), simulated("collapsed", seed=1)

    def advice(lines: list[str]) -> tuple[object, object]:
        log = write(tmp_path, lines)
        assert main(["report", str(log), "--json", "--baseline-curve", SCENARIOS_CURVE]) == 0
        answer = json.loads(capsys.readouterr().out)
        return answer["breakeven"], answer["schedule"]

    assert None not in advice(healthy)
    assert advice(interleaved(healthy, collapsed, 0)) == (None, None)


@pytest.mark.parametrize("first", ["sglang", "vllm"])
def test_sglang_healthy_and_vllm_collapsed_in_one_file_are_both_seen(
    first: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whichever engine's server wrote first (before, the one read first was judged alone:
    "nothing wrong" one way round, a collapse of the whole node the other)."""
    sglang, vllm = simulated("healthy"), simulated("collapsed", "vllm")
    lines = interleaved(sglang, vllm) if first == "sglang" else interleaved(vllm, sglang)
    log = write(tmp_path, lines)
    assert main(["doctor", "--log-file", str(log)]) == 1
    text = capsys.readouterr().out
    assert "WARNING  interleaved_servers: Two servers write to this one log file" in text
    assert "nothing wrong" not in text and "CRITICAL" not in text
    said = doctor(capsys, log)
    assert state(said) == "interleaved"
    seen = finding(said, "interleaved_servers")["seen"]
    assert "are vLLM's (accept length 1.00)" in seen
    assert "are SGLang's (accept length" in seen and "mean 3." in seen
    assert state(report(capsys, log)) == "interleaved"


def test_two_vllm_servers_one_collapsed_take_turns_and_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM says no word when it is ready: its two servers show by their windows alone, two
    levels taking turns after the later start."""
    healthy = simulated("healthy", "vllm")
    collapsed = simulated("collapsed", "vllm", seed=2)
    said = doctor(capsys, write(tmp_path, interleaved(healthy, collapsed, 40)))
    assert said["status"] == 1
    assert state(said) == "interleaved"
    seen = finding(said, "interleaved_servers")["seen"]
    assert "2 vLLM server starts" in seen and "take turns between two accept-length levels" in seen


def one_server_logs() -> dict[str, list[str]]:
    """Logs of one server each, however often it started: none is two servers."""
    healthy, collapsed = simulated("healthy"), simulated("collapsed", seed=1)
    vllm = simulated("healthy", "vllm")
    ready = collapsed.index(next(line for line in collapsed if READY in line))
    return {
        # Killed without a word, started again with another drafter: says ready once more.
        "restarted without an end": [*collapsed, *healthy],
        "restarted after a crash": [*collapsed, *crashed()[-5:], *healthy],
        "killed while starting": [*collapsed[: ready - 5], *healthy],
        "moved from SGLang to vLLM": [*collapsed, *vllm],
        "vLLM restarted without an end": [*simulated("collapsed", "vllm", seed=2), *vllm],
        # Drafting off (1.00) and on (about 3) take turns by design under adaptive speculation.
        "adaptive restarted without an end": [
            *simulated("adaptive"),
            *simulated("adaptive", seed=3),
        ],
        "the simulator's recovery": simulated("recovery"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "restarted without an end",
        "restarted after a crash",
        "killed while starting",
        "moved from SGLang to vLLM",
        "vLLM restarted without an end",
        "adaptive restarted without an end",
        "the simulator's recovery",
    ],
)
def test_one_server_however_often_it_started_is_never_two(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write(tmp_path, one_server_logs()[case])
    said = doctor(capsys, log)
    assert "interleaved_servers" not in codes(said)
    assert state(said) != "interleaved"


@pytest.mark.parametrize("recording", recordings(), ids=lambda each: each.id)
def test_real_engines_logs_are_one_server(
    recording: Recording, capsys: pytest.CaptureFixture[str]
) -> None:
    """SGLang 0.5.15 and vLLM 0.24 serving, as recorded on a GPU."""
    said = doctor(capsys, recording.log)
    assert "interleaved_servers" not in codes(said)
    assert state(said) != "interleaved"


def test_vllm_data_parallel_ranks_with_their_own_api_servers_are_one_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each DP rank's engine core logs its configuration, each API server its rank's pair of
    stats lines: ranks of one server, one of them collapsed (``dp_rank_collapsed``'s case)."""
    config = (
        "INFO 05-06 06:00:02 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
        "model='m', speculative_config=SpeculativeConfig(method='eagle3', model='d', "
        "num_spec_tokens=3), enforce_eager=False"
    )
    lines = [f"(EngineCore_DP{rank} pid={90 + rank}) {config}" for rank in range(2)]
    for second in range(10, 130, 10):
        stamp = f"05-06 06:{second // 60:02d}:{second % 60:02d}"
        for rank, accepted in ((0, 1800), (1, 0)):
            tag = f"(APIServer_DP{rank} pid={300 + rank})"
            lines += [
                f"{tag} INFO {stamp} [loggers.py:336] Engine {rank:03d}: Avg prompt throughput: "
                "120.0 tokens/s, Avg generation throughput: 900.0 tokens/s, Running: 20 reqs, "
                "Waiting: 0 reqs, GPU KV cache usage: 40.0%",
                f"{tag} INFO {stamp} [metrics.py:120] SpecDecoding metrics: Mean acceptance "
                f"length: {1 + accepted / 1000:.2f}, Accepted throughput: {accepted / 10:.2f} "
                "tokens/s, Drafted throughput: 300.00 tokens/s, Accepted: "
                f"{accepted} tokens, Drafted: 3000 tokens, Per-position acceptance rate: "
                f"{', '.join([f'{accepted / 3000:.3f}'] * 3)}, Avg Draft acceptance rate: "
                f"{accepted / 30:.1f}%",
            ]
    said = doctor(capsys, write(tmp_path, lines))
    assert "interleaved_servers" not in codes(said)
    assert "dp_rank_collapsed" in codes(said)


def test_a_dp_server_with_a_collapsed_rank_restarted_without_an_end_is_one_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its ranks' windows take turns between 3.00 and 1.00 line by line, as two servers' would;
    they are ranks of one server (``dp_rank_collapsed``), each rank at one level."""

    def serving(start: float) -> list[str]:
        return [
            decode_line(accept, ranks=f" DP{rank} TP{rank}", time_text=f"{stamp(start + i)[1:20]}")
            for i in range(40)
            for rank, accept in ((0, 3.0), (1, 1.0))
        ]

    lines = [*startup(), *serving(60), *startup(), *serving(200)]
    said = doctor(capsys, write(tmp_path, lines))
    assert "interleaved_servers" not in codes(said)
    assert "dp_rank_collapsed" in codes(said)


ENDS = {
    "crashed": crashed()[-5:],
    # Stopped on purpose (Ctrl-C, a container stop): uvicorn's last line, as SGLang logs it.
    "stopped": [
        f"{stamp(300)} INFO:     Shutting down",
        f"{stamp(300)} INFO:     Finished server process [1765]",
    ],
}


@pytest.mark.parametrize("end", list(ENDS))
def test_an_end_logged_ends_the_second_server_and_with_it_the_mix(end: str) -> None:
    """Once one of the two logs its end, the lines that follow are one server's again."""
    healthy, collapsed = simulated("healthy"), simulated("collapsed", seed=1)
    state = TargetState("node")
    feed = LogFeed(state)
    feed.on_lines([line.encode() for line in interleaved(healthy, collapsed)])
    assert state.interleaving() is not None
    feed.on_lines([line.encode() for line in ENDS[end]])
    assert state.interleaving() is None


# What an on-call reads as the node's present: none of it may be one server's, then the other's.
CURRENT = (
    "specwatch_accept_length",
    "specwatch_running_requests",
    "specwatch_gen_throughput_tokens_per_second",
)


@pytest.mark.e2e
def test_the_daemon_shows_the_finding_and_no_flipping_accept_length(
    tmp_path: Path, port: int
) -> None:
    """Lines of both servers appended while ``specwatch run`` follows the file: over several
    scrapes, ``interleaved_servers`` and the ``interleaved`` state, and no accept length,
    running requests or throughput that is either server's in turn."""
    healthy, collapsed = simulated("healthy"), simulated("collapsed", seed=1)
    lines = interleaved(healthy, collapsed)
    log = tmp_path / "server.log"
    log.write_text("")
    with run_daemon(["--log-file", str(log)], port) as daemon:
        # Started together: two servers are told from one once the second says it is ready
        # (before, the first may have been killed while starting).
        head = max(i for i, line in enumerate(lines) if READY in line) + 1
        append(log, *lines[:head])

        def shown() -> Scrape | None:
            s = daemon.scrape()
            return s if s.value("specwatch_finding", code="interleaved_servers") == 1 else None

        wait_for(shown, what="interleaved_servers")
        step = (len(lines) - head) // 6
        for start in range(head, head + 6 * step, step):
            append(log, *lines[start : start + step])
            s = read(daemon, start + step)
            assert s.value("specwatch_finding", code="interleaved_servers") == 1
            assert s.value("specwatch_verdict", state="interleaved") == 1
            for name in CURRENT:
                assert s.values(name) == [], name


def after_more_windows(daemon: RunningDaemon, before: Scrape) -> Scrape:
    """The first scrape once the daemon has read decode windows that ``before`` did not show."""
    seen = sum(before.values("specwatch_decode_windows_total"))

    def check() -> Scrape | None:
        s = daemon.scrape()
        return s if sum(s.values("specwatch_decode_windows_total")) > seen else None

    return wait_for(check, timeout=30, what="more decode windows")


def read(daemon: RunningDaemon, lines: int) -> Scrape:
    """The scrape once the daemon counted ``lines`` lines."""

    def check() -> Scrape | None:
        s = daemon.scrape()
        return s if s.value("specwatch_log_lines_total") == lines else None

    return wait_for(check, what=f"{lines} lines read")


@pytest.mark.e2e
def test_two_live_servers_appending_to_one_file_are_named_within_seconds(
    tmp_path: Path, port: int
) -> None:
    """Two ``specwatch simulate`` servers, healthy and collapsed, each appending its output
    to one file as it serves (``>> server.log``), started a moment apart: nothing shows two
    servers but their windows taking turns between two levels (before: the accept length
    followed whichever wrote last, scrape after scrape)."""
    log = tmp_path / "server.log"
    log.write_text("")
    with run_daemon(["--log-file", str(log)], port) as daemon, log.open("ab") as out:
        servers = [
            subprocess.Popen(
                specwatch_cmd(
                    "simulate", "--scenario", scenario, "--seed", str(seed), "--rate", "4"
                ),
                stdout=out,
                stderr=subprocess.DEVNULL,
            )
            for seed, scenario in enumerate(("healthy", "collapsed"))
        ]
        try:
            s = daemon.wait_metric("specwatch_finding", bool, 30, code="interleaved_servers")
            for _ in range(5):  # each scrape after more of the servers' windows were read
                assert s.value("specwatch_finding", code="interleaved_servers") == 1
                assert s.value("specwatch_verdict", state="interleaved") == 1
                for name in CURRENT:
                    assert s.values(name) == [], name
                s = after_more_windows(daemon, s)
        finally:
            for server in servers:
                server.terminate()
                server.wait(timeout=PROCESS_TIMEOUT)


def test_hostile_accept_lengths_never_break_a_scrape_of_the_mix() -> None:
    """Records built from hostile input may carry any float: the finding's figures leave out
    what cannot be an accept length (before: an infinity and its negative raised in the
    scrape, from ``fmean``)."""
    watch = StreamWatch()
    lengths = [math.inf, -math.inf, math.nan, 1e308, 0.0, 3.2]
    records = [
        StatsRecord("decode", engine=engine, accept_length=length)
        for length in lengths
        for engine in ("sglang", "vllm")
    ]
    watch.add(records)
    seen = watch.interleaving()
    assert seen is not None and seen.sign == "engines"
    assert {(s.engine, s.accept_low, s.accept_high) for s in seen.streams} == {
        ("sglang", 3.2, 3.2),
        ("vllm", 3.2, 3.2),
    }
