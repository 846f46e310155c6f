"""Record a real engine serving with speculative decoding, for replay in specwatch's tests.

Runs on a machine with one NVIDIA GPU and no network, once the engine is installed and the
tiny models are made (``make_models.py``). For each scenario it starts the server with
speculative decoding and stats logging, waits for ``/health``, drives bounded greedy traffic,
waits for the engine to log its last interval, and writes to ``OUT/ENGINE-VERSION/SCENARIO/``:

- ``server.log.gz``: everything the server wrote (stdout and stderr, as an operator's log);
- ``metrics.jsonl.gz``: ``/metrics`` every few seconds from ready to stop, one JSON object a
  line (``t``: seconds since the server was started, ``status``, ``body``);
- ``info.json``: what the server's info endpoints answered (``/version``, ``/v1/models``,
  ``/server_info`` or its equivalent), with any API key blanked;
- ``manifest.json``: the scenario, the exact command and environment, versions, the traffic
  sent, the expected verdict, and the engine's own final counters (its last ``/metrics``).

Paths of the machine (the models, the installed engine, Python) are replaced by placeholders
such as ``$MODELS`` in everything written, so a recording says nothing about where it was made.

Usage:
  python3 record.py --engine {vllm,sglang} --models DIR --out DIR [--scenario NAME ...]
                    [--duration 60] [--tail S] [--port N] [--left-out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PORT = 8321
HOST = "127.0.0.1"
READY_TIMEOUT_S = 300.0
CONCURRENCY = 16
MAX_TOKENS = 48
# Keys whose values are secrets: an API key, a token (hf_token), a password. Not a key that
# counts tokens (max_total_tokens): the configuration a recording keeps must stay readable.
SECRET_KEYS = re.compile(r"(api_key|secret|password|(^|_)token$)", re.IGNORECASE)


@dataclass(frozen=True)
class Scenario:
    """One way of serving: the flags that make it, and the verdict a reader should reach."""

    name: str
    flags: list[str]
    # The warning and critical verdict and finding codes a reader of the whole log should
    # reach: what the scenario was made to show, decided before it was recorded.
    expected: tuple[str, ...]
    about: str
    env: dict[str, str] = field(default_factory=dict)


def vllm_spec(config: dict[str, Any]) -> list[str]:
    return ["--speculative-config", json.dumps(config, separators=(",", ":"))]


def vllm_scenarios(models: str) -> list[Scenario]:
    draft_same = {"method": "draft_model", "model": f"{models}/draft-same"}
    draft_other = {"method": "draft_model", "model": f"{models}/draft-other"}
    ngram = {"method": "ngram", "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    k = {"num_speculative_tokens": 4}
    return [
        Scenario(
            "healthy",
            vllm_spec(draft_same | k),
            (),
            "a draft with the target's weights: under greedy sampling every drafted token "
            "is accepted (accept length k+1)",
        ),
        Scenario(
            "collapsed",
            vllm_spec(draft_other | k),
            ("accept_length_collapsed",),
            "a draft of the same shape with other random weights: almost nothing is accepted "
            "(accept length about 1.0)",
        ),
        Scenario(
            "ngram",
            vllm_spec(ngram | k),
            ("accept_length_low",),
            "n-gram prompt lookup on prompts of random words: the lookup seldom finds a match, "
            "so few drafts are made, and those it makes are seldom accepted: below the n-gram "
            "floor, though not a collapse",
        ),
        Scenario(
            "cuda-graphs-off",
            [*vllm_spec(draft_same | k), "--enforce-eager"],
            ("cuda_graph_disabled",),
            "the healthy draft with --enforce-eager: CUDA graphs (and torch.compile) off",
        ),
    ]


def vllm_command(python: str, models: str, scenario: Scenario) -> list[str]:
    return [
        python,
        "-m",
        "vllm.entrypoints.cli.main",  # what the `vllm` script runs: `vllm serve TARGET ...`
        "serve",
        f"{models}/target",
        "--served-model-name",
        "tiny-llama",
        "--host",
        HOST,
        "--port",
        str(PORT),
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "1024",
        "--max-num-seqs",
        "32",
        "--gpu-memory-utilization",
        "0.3",
        "--seed",
        "0",
        *scenario.flags,
    ]


VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
}


def sglang_spec(algorithm: str, draft: str | None = None) -> list[str]:
    """Three draft steps of one token each, four tokens verified: k = 3 drafted per round."""
    flags = ["--speculative-algorithm", algorithm]
    if draft:
        flags += ["--speculative-draft-model-path", draft]
    return [
        *flags,
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    ]


def sglang_scenarios(models: str) -> list[Scenario]:
    same = sglang_spec("STANDALONE", f"{models}/draft-same")
    return [
        Scenario(
            "healthy",
            same,
            (),
            "a draft model (STANDALONE) with the target's weights: under greedy sampling the "
            "draft proposes what the target picks",
        ),
        Scenario(
            "collapsed",
            sglang_spec("STANDALONE", f"{models}/draft-other"),
            ("accept_length_collapsed",),
            "a draft model of the same shape with other random weights: almost nothing is "
            "accepted (accept length about 1.0)",
        ),
        Scenario(
            "eagle3",
            sglang_spec("EAGLE3", f"{models}/eagle3-head"),
            ("accept_length_collapsed",),
            "an EAGLE-3 head with random weights served as EAGLE3, as it should be: the head "
            "loads and runs, and its random guesses are rejected (accept length about 1.0)",
        ),
        Scenario(
            "eagle3-as-eagle",
            sglang_spec("EAGLE", f"{models}/eagle3-head"),
            ("eagle3_draft_with_eagle_algorithm", "accept_length_collapsed"),
            "the same EAGLE-3 head served with --speculative-algorithm EAGLE, the wrong flag: "
            "recorded to see whether the engine refuses, crashes or runs at 1.00",
        ),
        Scenario(
            "cuda-graphs-off",
            [*same, "--disable-cuda-graph"],
            ("cuda_graph_disabled",),
            "the healthy draft with --disable-cuda-graph",
        ),
        Scenario(
            "ngram",
            [
                "--speculative-algorithm",
                "NGRAM",
                "--speculative-num-draft-tokens",
                "4",
                "--speculative-ngram-max-bfs-breadth",
                "1",
            ],
            ("accept_length_collapsed",),
            "n-gram lookup over the tokens seen so far, on prompts of random words. SGLang "
            "verifies on every decode step whether or not the lookup matched, so its own "
            "counters give accept length 1.00 (a collapse), not vLLM's few drafts below the floor",
        ),
    ]


def sglang_command(python: str, models: str, scenario: Scenario) -> list[str]:
    graphs = (
        [] if "--disable-cuda-graph" in scenario.flags else ["--cuda-graph-max-bs-decode", "16"]
    )
    return [
        python,
        "-m",
        "sglang.launch_server",
        "--model-path",
        f"{models}/target",
        "--served-model-name",
        "tiny-llama",
        "--host",
        HOST,
        "--port",
        str(PORT),
        "--dtype",
        "bfloat16",
        "--context-length",
        "1024",
        "--max-running-requests",
        "32",
        # Several servers may share the GPU; the cap keeps each one's KV pool small.
        "--mem-fraction-static",
        "0.5",
        "--max-total-tokens",
        "65536",
        "--disable-radix-cache",
        # FlashAttention 3, FlashInfer and the grammar engines are left out of what is carried.
        "--attention-backend",
        "triton",
        "--sampling-backend",
        "pytorch",
        "--grammar-backend",
        "none",
        "--enable-metrics",
        "--decode-log-interval",
        "40",
        "--random-seed",
        "0",
        *graphs,
        *scenario.flags,
    ]


SGLANG_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
}

ENGINES = {
    "sglang": {
        "package": "sglang",
        "scenarios": sglang_scenarios,
        "command": sglang_command,
        "env": SGLANG_ENV,
        # SGLang logs a decode line every --decode-log-interval batches, not on a clock.
        "stats_interval_env": None,
        "info": ["/get_model_info", "/v1/models", "/server_info", "/get_server_info"],
        # Its own running figures (the accept length it averages), read again at the end.
        "final_info": ["/server_info"],
        "counters": re.compile(
            r"^sglang:(spec_\w+|generation_tokens_total|prompt_tokens_total|num_requests_total"
            r"|cuda_graph\w*)"
        ),
    },
    "vllm": {
        "package": "vllm",
        "scenarios": vllm_scenarios,
        "command": vllm_command,
        "env": VLLM_ENV,
        "stats_interval_env": "VLLM_LOG_STATS_INTERVAL",
        "info": ["/version", "/v1/models", "/server_info", "/get_server_info"],
        "counters": re.compile(
            r"^vllm:(spec_decode_\w+|generation_tokens_total|request_success_total)"
        ),
    },
}


def http_get(path: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{PORT}{path}", timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", "replace")
    except (OSError, urllib.error.URLError) as err:
        return 0, repr(err)


def http_post(path: str, body: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    data = json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://{HOST}:{PORT}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


class Snapshots(threading.Thread):
    """Scrape /metrics every ``every`` seconds until stopped, keeping each body."""

    def __init__(self, started: float, every: float) -> None:
        super().__init__(daemon=True)
        self.started = started
        self.every = every
        self.items: list[dict[str, Any]] = []
        self.halt = threading.Event()

    def take(self) -> dict[str, Any]:
        status, body = http_get("/metrics")
        item = {"t": round(time.monotonic() - self.started, 3), "status": status, "body": body}
        self.items.append(item)
        return item

    def run(self) -> None:
        while not self.halt.wait(self.every):
            self.take()


@dataclass
class Traffic:
    requests: int = 0
    failures: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0


def drive(seconds: float, seed: int) -> Traffic:
    """CONCURRENCY clients sending greedy completions of random word prompts for SECONDS.

    ``ignore_eos`` makes every request generate exactly MAX_TOKENS tokens, so the counts do
    not depend on where a random model happens to emit its end token.
    """
    sys.path.insert(0, str(Path(__file__).parent))
    from make_models import words

    vocab = words()[4:]
    traffic = Traffic()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(idx: int) -> None:
        rnd = random.Random(seed * 1000 + idx)
        while time.monotonic() < deadline:
            prompt = " ".join(rnd.choice(vocab) for _ in range(rnd.randint(16, 64)))
            body = {
                "model": "tiny-llama",
                "prompt": prompt,
                "max_tokens": MAX_TOKENS,
                "temperature": 0.0,
                "ignore_eos": True,
            }
            try:
                usage = http_post("/v1/completions", body).get("usage") or {}
            except (OSError, ValueError):
                with lock:
                    traffic.failures += 1
                time.sleep(0.5)
                continue
            with lock:
                traffic.requests += 1
                traffic.completion_tokens += int(usage.get("completion_tokens", 0))
                traffic.prompt_tokens += int(usage.get("prompt_tokens", 0))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CONCURRENCY)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return traffic


def read_json(path: str) -> dict[str, Any]:
    """An info endpoint's answer: its status and JSON body, secrets blanked."""
    status, body = http_get(path)
    try:
        return {"status": status, "body": blank_secrets(json.loads(body))}
    except ValueError:
        return {"status": status, "body": body[:2000]}


def wait_ready(proc: subprocess.Popen[bytes], timeout: float) -> float | None:
    """Seconds until /health answers 200, or None when the server died or never answered."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            return None
        if http_get("/health", timeout=2.0)[0] == 200:
            return time.monotonic() - started
        time.sleep(1.0)
    return None


def final_counters(body: str, pattern: re.Pattern[str]) -> dict[str, float]:
    """The engine's own counters from one exposition: each sample line that PATTERN selects."""
    out: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith("#") or not pattern.match(line):
            continue
        name, _, value = line.rpartition(" ")
        if name.split("{")[0].endswith("_created"):
            continue
        out[name] = float(value)
    return out


class Scrubber:
    """Replaces the machine's own paths and host name with placeholders.

    Paths are replaced wherever they occur, longest first; one of four characters or fewer
    (``/usr``) is left, as it names nothing of this machine. The host name, often short, is
    replaced only as a whole word.
    """

    def __init__(self, paths: dict[str, str], host: str) -> None:
        pairs = [(k, v) for k, v in paths.items() if k and len(k) > 4]
        self.pairs = sorted(pairs, key=lambda kv: -len(kv[0]))
        self.host = re.compile(rf"(?<![\w.-]){re.escape(host)}(?![\w-])") if host else None

    def __call__(self, text: str) -> str:
        for old, new in self.pairs:
            text = text.replace(old, new)
        return self.host.sub("$HOST", text) if self.host else text


def blank_secrets(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: ("<blanked>" if SECRET_KEYS.search(k) and v else blank_secrets(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [blank_secrets(v) for v in value]
    return value


def versions(python: str, package: str) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, platform\n"
        "out = {'python': platform.python_version()}\n"
        f"for p in ({package!r}, 'torch', 'transformers', 'tokenizers', 'triton'):\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: pass\n"
        "try:\n"
        "    import torch\n"
        "    out.update(cuda=str(torch.version.cuda), gpu=torch.cuda.get_device_name(0))\n"
        "except Exception as err:\n"
        "    out['gpu'] = f'unknown: {err!r}'[:200]\n"
        "print(json.dumps(out))\n"
    )
    found = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    result: dict[str, str] = json.loads(found.stdout) if found.returncode == 0 else {}
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return result
    if smi.returncode == 0:
        result["driver"] = smi.stdout.strip()
    return result


def stop(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGINT, as an operator's Ctrl-C or a container stop; SIGKILL if it lingers."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


def write_gz(path: Path, text: str) -> None:
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as out:
        out.write(text)


def record(args: argparse.Namespace, engine: dict[str, Any], scenario: Scenario) -> None:
    models = str(Path(args.models).resolve())
    vers = versions(args.python, engine["package"])
    version = vers.get(engine["package"], "unknown")
    out = Path(args.out) / f"{args.engine}-{version}" / scenario.name
    out.mkdir(parents=True, exist_ok=True)
    raw_log = out / "server.log"
    command = engine["command"](args.python, models, scenario)
    engine_env = dict(engine["env"])
    if engine["stats_interval_env"]:
        engine_env[engine["stats_interval_env"]] = str(args.stats_interval)
    env = dict(os.environ) | engine_env | scenario.env
    print(f"[record] {scenario.name}: {' '.join(command)}", flush=True)
    started = time.monotonic()
    with raw_log.open("wb") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=args.workdir,
            start_new_session=True,
        )
    snaps = Snapshots(started, args.snapshot_every)
    ready_s = wait_ready(proc, args.ready_timeout)
    info: dict[str, Any] = {}
    traffic = Traffic()
    if ready_s is not None:
        snaps.take()
        snaps.start()
        info = {path: read_json(path) for path in engine["info"]}
        traffic = drive(args.duration, seed=len(scenario.name))
        # the last busy interval and one idle one
        time.sleep(args.tail if args.tail is not None else 2 * args.stats_interval + 2)
        snaps.halt.set()
        snaps.join()
    else:
        tail = raw_log.read_text("utf-8", "replace").splitlines()[-40:]
        print("[record] the server never became ready; its log ends:", *tail, sep="\n")
    final = snaps.take() if ready_s is not None else None
    final_info = {path: read_json(path) for path in engine.get("final_info", [])} if final else {}
    returncode = stop(proc)
    scrub = Scrubber(
        {
            models: "$MODELS",
            args.site or "": "$SITE",
            sys.prefix: "$PYTHON_PREFIX",
            str(Path.home()): "$HOME",
            tempfile.gettempdir() + "/": "$TMP/",
        },
        socket.gethostname(),
    )
    write_gz(out / "server.log.gz", scrub(raw_log.read_text("utf-8", "replace")))
    raw_log.unlink()
    with gzip.open(out / "metrics.jsonl.gz", "wt", encoding="utf-8", compresslevel=9) as fh:
        for item in snaps.items:
            fh.write(json.dumps(item | {"body": scrub(item["body"])}) + "\n")
    (out / "info.json").write_text(scrub(json.dumps(info, indent=2, sort_keys=True)) + "\n")
    manifest = {
        "engine": args.engine,
        "version": version,
        "scenario": scenario.name,
        "about": scenario.about,
        "expected": list(scenario.expected),
        "command": [scrub(part) for part in command],
        "env": {k: env[k] for k in sorted(engine_env | scenario.env)},
        "versions": vers,
        "left_out": args.left_out_list,
        "ready_after_s": None if ready_s is None else round(ready_s, 1),
        "server_exit_code": returncode,
        "traffic": {
            "seconds": args.duration,
            "concurrency": CONCURRENCY,
            "max_tokens": MAX_TOKENS,
            "temperature": 0.0,
            "ignore_eos": True,
            **traffic.__dict__,
        },
        "snapshots": {"every_s": args.snapshot_every, "count": len(snaps.items)},
        "stats_interval_s": args.stats_interval,
        "final_counters": None
        if final is None
        else final_counters(final["body"], engine["counters"]),
        "final_info": final_info,
    }
    (out / "manifest.json").write_text(scrub(json.dumps(manifest, indent=2)) + "\n")
    print(f"[record] {scenario.name}: ready {ready_s}, traffic {traffic}, exit {returncode}")


def main(argv: list[str]) -> int:
    global PORT  # one server at a time, on this port: the helpers above all talk to it
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=sorted(ENGINES), required=True)
    parser.add_argument("--models", required=True, help="the folder make_models.py wrote")
    parser.add_argument("--out", required=True)
    parser.add_argument("--scenario", action="append", help="default: every scenario")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of traffic")
    parser.add_argument("--stats-interval", type=int, default=10, help="the engine's, seconds")
    parser.add_argument("--snapshot-every", type=float, default=5.0, help="seconds")
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT_S, help="seconds")
    parser.add_argument(
        "--tail", type=float, help="seconds to wait after traffic (default: two stats intervals)"
    )
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--site", help="where the engine was installed (scrubbed from logs)")
    parser.add_argument("--workdir", default="/tmp", help="the server's working directory")
    parser.add_argument("--left-out", help="file listing the wheel members left out")
    args = parser.parse_args(argv[1:])
    PORT = args.port
    args.left_out_list = Path(args.left_out).read_text().split() if args.left_out else []
    engine = ENGINES[args.engine]
    scenarios = engine["scenarios"](str(Path(args.models).resolve()))
    wanted = args.scenario or [s.name for s in scenarios]
    unknown = set(wanted) - {s.name for s in scenarios}
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    for scenario in scenarios:
        if scenario.name in wanted:
            record(args, engine, scenario)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
