"""A node of many servers for the daemon bench: live logs and loopback upstreams.

Each target has a log that gets one SGLang decode line a second (its own accept length and
load, so targets differ), and, with ``upstream``, its own ``/metrics`` and ``/server_info``
on one loopback server that plays SGLang for every target (its path names the target).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from benchlib import serving

GAUGES = (
    ("num_running_reqs", "The number of running requests."),
    ("num_queue_reqs", "The number of requests in the waiting queue."),
    ("gen_throughput", "The generation throughput (token/s)."),
    ("token_usage", "The token usage."),
    ("spec_accept_length", "The average acceptance length."),
    ("spec_accept_rate", "The average acceptance rate."),
)


def exposition(number: int, passes: int) -> bytes:
    """SGLang's scheduler gauges of target ``number``'s server (one DP rank)."""
    labels = f'engine_type="unified",model_name="qwen-{number}",tp_rank="0"'
    values = (str(8 + number % 40), "2", "600.5", "0.3", f"{2.0 + number % 10 / 10:.2f}", "0.5")
    out = []
    for (name, doc), value in zip(GAUGES, values, strict=True):
        out += [f"# HELP sglang:{name} {doc}", f"# TYPE sglang:{name} gauge"]
        out.append(f"sglang:{name}{{{labels}}} {value}")
    out += [
        "# HELP sglang:cuda_graph_passes_total Total number of forward passes.",
        "# TYPE sglang:cuda_graph_passes_total counter",
        f'sglang:cuda_graph_passes_total{{mode="decode_cuda_graph",model_name="q"}} {passes}',
    ]
    return ("\n".join(out) + "\n").encode()


def server_info(number: int) -> bytes:
    args = {
        "model_path": f"Qwen/Qwen3-{number}B",
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "Tengyunw/qwen3-eagle3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "disable_cuda_graph": False,
    }
    state = {**args, "effective_max_running_requests_per_dp": 48}
    return json.dumps({**args, "status": "ready", "internal_states": [state]}).encode()


@contextlib.contextmanager
def upstreams() -> Iterator[str]:
    """One loopback server answering ``/<n>/metrics`` and ``/<n>/server_info`` for any n."""
    served = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            _, number, endpoint = self.path.split("/", 2)
            served[0] += 1
            if endpoint == "metrics":
                body, kind = exposition(int(number), 1000 * served[0]), "text/plain"
            else:
                body, kind = server_info(int(number)), "application/json"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving(Handler) as url:
        yield url


def decode_line(number: int, rng: random.Random) -> bytes:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    length = 2.0 + number % 10 / 10 + rng.uniform(-0.2, 0.2)
    running = 8 + number % 40
    return (
        f"[{stamp} TP0] Decode batch, #running-req: {running}, #token: 6460, "
        f"token usage: 0.30, accept len: {length:.2f}, accept rate: {length / 4:.2f}, "
        f"cuda graph: True, gen throughput (token/s): {rng.uniform(500, 700):.2f}, "
        "#queue-req: 2\n"
    ).encode()


def config(folder: Path, targets: int, url: str | None) -> Path:
    """A config of ``targets`` targets, each with its log and, given ``url``, its upstream."""
    lines = ["targets:"]
    for number in range(targets):
        lines += [f"  - name: node-{number}", f"    log_files: [{folder / f'{number}.log'}]"]
        if url is not None:
            lines += [f"    url: {url}/{number}", "    engine: sglang"]
    path = folder / "specwatch.yaml"
    path.write_text("\n".join(lines) + "\n")
    for number in range(targets):
        (folder / f"{number}.log").touch()
    return path


class Writers:
    """Appends a decode line to every target's log once a second, spread over the second."""

    def __init__(self, folder: Path, targets: int) -> None:
        self._paths = [folder / f"{number}.log" for number in range(targets)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        rng = random.Random(7)
        fds = [os.open(path, os.O_WRONLY | os.O_APPEND) for path in self._paths]
        gap = 1.0 / len(fds)
        try:
            while not self._stop.is_set():
                for number, fd in enumerate(fds):
                    os.write(fd, decode_line(number, rng))
                    if self._stop.wait(gap):
                        return
        finally:
            for fd in fds:
                os.close(fd)
