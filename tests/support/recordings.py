"""The recordings of real engines under ``tests/recordings/``, read for replay.

Each folder ``ENGINE-VERSION/SCENARIO/`` holds what ``tools/record/record.py`` kept of one
server run (docs/recording.md): the log, ``/metrics`` every few seconds, and a manifest with the
engine's own final counters. The engine's figures here are computed from those counters only,
never from specwatch, so a test comparing the two compares specwatch with the engine.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent / "recordings"
# vLLM's own line prefix: "INFO 12-02 00:56:34 [file.py:12] ..." (month-day, no year).
VLLM_TIME = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d) ")
# SGLang's: "[2026-12-02 02:17:22] ..." or "[2026-12-02 02:17:22 TP0] ...".
SGLANG_TIME = re.compile(r"^\[\d{4}-(\d\d-\d\d \d\d:\d\d:\d\d)[\] .,]")
SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?$")


@dataclass(frozen=True)
class Counters:
    """Speculative-decoding counters, as the engine counts them."""

    drafts: float
    draft_tokens: float | None  # None: the engine does not count them (SGLang)
    accepted: float
    accepted_at: tuple[float, ...]  # empty: the engine does not count by position (SGLang)

    @property
    def accept_length(self) -> float | None:
        """Tokens per verify round: the accepted drafted tokens plus the target's own one."""
        return 1 + self.accepted / self.drafts if self.drafts else None

    def minus(self, earlier: Counters) -> Counters:
        tokens = None
        if self.draft_tokens is not None and earlier.draft_tokens is not None:
            tokens = self.draft_tokens - earlier.draft_tokens
        return Counters(
            self.drafts - earlier.drafts,
            tokens,
            self.accepted - earlier.accepted,
            tuple(a - b for a, b in zip(self.accepted_at, earlier.accepted_at, strict=True)),
        )


def _labels(text: str | None) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', text or ""))


def vllm_counters(samples: dict[str, float]) -> Counters:
    """vLLM's ``spec_decode`` counters from sample lines (``name{labels}`` -> value), summed
    over engines; per position in position order."""
    totals: dict[str, float] = {}
    at: dict[int, float] = {}
    for key, value in samples.items():
        match = SAMPLE.match(key)
        assert match, key
        name = match["name"].removeprefix("vllm:")
        if name == "spec_decode_num_accepted_tokens_per_pos_total":
            position = int(_labels(match["labels"])["position"])
            at[position] = at.get(position, 0.0) + value
        else:
            totals[name] = totals.get(name, 0.0) + value
    return Counters(
        totals.get("spec_decode_num_drafts_total", 0.0),
        totals.get("spec_decode_num_draft_tokens_total", 0.0),
        totals.get("spec_decode_num_accepted_tokens_total", 0.0),
        tuple(at[p] for p in sorted(at)),
    )


def sglang_counters(samples: dict[str, float]) -> Counters:
    """SGLang's counters from sample lines: verify calls are its drafts; of the tokens it
    generated, each request's first comes from prefill and each verify call yields one of
    the target's own, so the rest are accepted drafts. It counts no drafted tokens and
    nothing by position."""
    totals: dict[str, float] = {}
    for key, value in samples.items():
        match = SAMPLE.match(key)
        assert match, key
        name = match["name"].removeprefix("sglang:")
        totals[name] = totals.get(name, 0.0) + value
    verify = totals.get("spec_verify_calls_total", 0.0)
    generated = totals.get("generation_tokens_total", 0.0)
    requests = totals.get("num_requests_total", 0.0)
    return Counters(verify, None, generated - verify - requests, ())


COUNTERS = {"vllm": vllm_counters, "sglang": sglang_counters}
COUNTER_NAMES = {
    "vllm": re.compile(r"^vllm:spec_decode_"),
    "sglang": re.compile(r"^sglang:(spec_verify_calls|generation_tokens|num_requests)_total"),
}


def exposition_samples(body: str) -> dict[str, float]:
    """Every sample line of an exposition, ``name{labels}`` -> value."""
    out: dict[str, float] = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


@dataclass(frozen=True)
class Snapshot:
    t: float  # seconds since the server was started
    status: int
    body: str


@dataclass(frozen=True)
class Recording:
    folder: Path

    @property
    def id(self) -> str:
        return f"{self.folder.parent.name}/{self.folder.name}"

    @cached_property
    def manifest(self) -> dict[str, Any]:
        return json.loads((self.folder / "manifest.json").read_text())  # type: ignore[no-any-return]

    @property
    def engine(self) -> str:
        return str(self.manifest["engine"])

    @property
    def log(self) -> Path:
        return self.folder / "server.log.gz"

    @property
    def expected(self) -> set[str]:
        """The warning and critical codes the scenario was made to show."""
        return set(self.manifest["expected"])

    @property
    def k(self) -> int:
        """Draft tokens proposed per round, as the command line asked (vLLM), or draft steps
        per round, as SGLang said it runs them (its ``spec_num_steps``)."""
        if self.engine == "sglang":
            steps = exposition_samples(self.snapshots[-1].body)
            return int(
                next(v for key, v in steps.items() if key.startswith("sglang:spec_num_steps"))
            )
        command = self.manifest["command"]
        config = json.loads(command[command.index("--speculative-config") + 1])
        return int(config["num_speculative_tokens"])

    @cached_property
    def final(self) -> Counters:
        """The engine's own counters at the end of the run (its last ``/metrics``)."""
        return self.counters(self.manifest["final_counters"])

    def counters(self, samples: dict[str, float]) -> Counters:
        wanted = COUNTER_NAMES[self.engine]
        return COUNTERS[self.engine](
            {k: v for k, v in samples.items() if wanted.match(k) and "_created" not in k}
        )

    @property
    def engine_accept_length(self) -> float | None:
        """The run's accept length as the engine itself gives it: vLLM's from its counters;
        SGLang's own running average from ``/server_info`` at the end, which counts the
        drafts it accepted, also those past a request's last token that its token counters
        never see."""
        if self.engine != "sglang":
            return self.final.accept_length
        body = self.manifest["final_info"]["/server_info"]["body"]
        return float(body["internal_states"][0]["avg_spec_accept_length"])

    @cached_property
    def info(self) -> dict[str, dict[str, Any]]:
        """What the info endpoints answered when the server was ready."""
        return json.loads((self.folder / "info.json").read_text())  # type: ignore[no-any-return]

    @cached_property
    def snapshots(self) -> list[Snapshot]:
        with gzip.open(self.folder / "metrics.jsonl.gz", "rt", encoding="utf-8") as lines:
            return [Snapshot(**json.loads(line)) for line in lines]

    def counters_at(self, snapshot: Snapshot) -> Counters:
        return self.counters(exposition_samples(snapshot.body))

    def log_lines(self) -> list[str]:
        with gzip.open(self.log, "rt", encoding="utf-8") as text:
            return text.read().splitlines(keepends=True)


def recordings() -> list[Recording]:
    return [Recording(path.parent) for path in sorted(ROOT.glob("*/*/manifest.json"))]


def line_times(lines: list[str]) -> list[float]:
    """Each line's time in seconds from the first stamped line, by the engine's own stamps; a
    line without one (a progress bar, a traceback) is as old as the line before it."""
    times: list[float] = []
    first: datetime | None = None
    last = 0.0
    for line in lines:
        match = VLLM_TIME.search(line) or SGLANG_TIME.search(line)
        if match:
            stamp = datetime.strptime(f"2000-{match[1]}", "%Y-%m-%d %H:%M:%S")
            first = first or stamp
            last = (stamp - first).total_seconds()
        times.append(last)
    return times


def write_paced(logs: dict[Path, list[str]], speedup: float) -> None:
    """Append each log's lines to its file at the pace of their own stamps, ``speedup`` times
    faster, every log at once from a common start, as engines side by side wrote them (a
    flushed write per line; a log's lines in their order)."""
    paced = sorted(
        (at, n, i, path)
        for n, (path, lines) in enumerate(logs.items())
        for i, at in enumerate(line_times(lines))
    )
    with contextlib.ExitStack() as stack:
        files = {path: stack.enter_context(path.open("a", encoding="utf-8")) for path in logs}
        started = time.monotonic()
        for at, _, i, path in paced:
            delay = started + at / speedup - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            files[path].write(logs[path][i])
            files[path].flush()


@dataclass
class SnapshotServer:
    """A loopback server answering ``/metrics`` with a recording's snapshots in order, the
    next one on each request and the last one from then on."""

    url: str
    served: list[int]
    # requests answered so far, by path prefix
    requests: dict[str, int]


@contextmanager
def serve_snapshots(
    routes: dict[str, list[Snapshot]], info: dict[str, dict[str, Any]] | None = None
) -> Iterator[SnapshotServer]:
    """``routes``: a path prefix (``/healthy``) -> the snapshots its ``/metrics`` answers;
    ``info``: a path (``/server_info``) -> the recorded status and JSON body it answers, as the
    engine's own info endpoints did (404 for any other path)."""
    answers = {
        path: (int(item["status"]), json.dumps(item["body"]).encode())
        for path, item in (info or {}).items()
    }
    state = {prefix: 0 for prefix in routes}
    lock = threading.Lock()
    served: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path in answers:
                status, payload = answers[self.path]
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            prefix, _, rest = self.path.rpartition("/")
            if rest != "metrics" or prefix not in routes:
                self.send_error(404)
                return
            with lock:
                index = min(state[prefix], len(routes[prefix]) - 1)
                state[prefix] += 1
                served.append(index)
            snapshot = routes[prefix][index]
            body = snapshot.body.encode()
            self.send_response(snapshot.status)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield SnapshotServer(f"http://127.0.0.1:{server.server_port}", served, state)
    finally:
        server.shutdown()
        server.server_close()
