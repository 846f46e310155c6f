"""The recorder (``tools/record/``) run end to end against a stand-in engine and wheel.

The real run needs a GPU; what the recorder itself does does not: start the server with the
scenario's command, wait for it, drive traffic, keep the log and ``/metrics`` over time, take
the engine's final counters, and write nothing of the machine or of a secret into what gets
committed. The stand-in is a ``vllm`` package whose ``vllm.entrypoints.cli.main`` serves vLLM's
endpoints on loopback, counting drafts as requests arrive, and logs its arguments and host name.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.tools import REPO, free_port

pytestmark = pytest.mark.e2e

SECRET = "sk-recorder-test-0123456789"
FAKE_MAIN = """
import http.server, json, socket, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
drafts = [0]
print("INFO 12-02 00:00:00 [api_utils.py:1] args:", sys.argv, "on", socket.gethostname(),
      flush=True)

def exposition():
    n = drafts[0]
    return "".join([
        "# TYPE vllm:spec_decode_num_drafts counter\\n",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {n}.0\\n',
        f'vllm:spec_decode_num_drafts_created{{engine="0",model_name="m"}} 1.7e9\\n',
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {4 * n}.0\\n',
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {2 * n}.0\\n',
        f'vllm:num_requests_running{{engine="0",model_name="m"}} 1.0\\n',
    ]).encode()

class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        print("INFO 12-02 00:00:01 [access] " + fmt % args, flush=True)

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        bodies = {
            "/health": b"",
            "/metrics": exposition(),
            "/version": b'{"version": "9.9.9"}',
            "/server_info": json.dumps({"api_key": "SECRET", "hf_token": "SECRET", "port": port,
                "speculative_num_draft_tokens": 4}).encode(),
        }
        self.answer(200, bodies[self.path]) if self.path in bodies else self.answer(404, b"{}")

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        drafts[0] += 1
        self.answer(200, b'{"usage": {"completion_tokens": 48, "prompt_tokens": 20}}')

class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 64  # the recorder's 16 clients at once

Server(("127.0.0.1", port), Handler).serve_forever()
""".replace("SECRET", SECRET)


def stand_in_vllm(site: Path) -> None:
    package = site / "vllm" / "entrypoints" / "cli"
    package.mkdir(parents=True)
    for folder in (site / "vllm", site / "vllm" / "entrypoints", package):
        (folder / "__init__.py").write_text("")
    (package / "main.py").write_text(FAKE_MAIN)
    info = site / "vllm-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("recorder")
    site, models, out = base / "site", base / "models", base / "out"
    stand_in_vllm(site)
    models.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "record" / "record.py"),
            *("--engine", "vllm", "--models", str(models), "--out", str(out)),
            *("--site", str(site), "--scenario", "collapsed", "--duration", "2"),
            *("--stats-interval", "1", "--snapshot-every", "0.5", "--port", str(free_port())),
            *("--workdir", str(base)),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out / "vllm-9.9.9" / "collapsed"


def texts(folder: Path) -> dict[str, str]:
    out = {}
    for path in folder.iterdir():
        raw = path.read_bytes()
        out[path.name] = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
    return out


def test_a_recording_holds_the_log_snapshots_info_and_manifest(recorded: Path) -> None:
    assert sorted(texts(recorded)) == [
        "info.json",
        "manifest.json",
        "metrics.jsonl.gz",
        "server.log.gz",
    ]
    manifest = json.loads((recorded / "manifest.json").read_text())
    assert manifest["scenario"] == "collapsed" and manifest["version"] == "9.9.9"
    assert manifest["expected"] == ["accept_length_collapsed"]
    assert manifest["env"]["VLLM_LOG_STATS_INTERVAL"] == "1"
    assert manifest["traffic"]["requests"] > 0 and manifest["traffic"]["failures"] == 0


def test_the_final_counters_are_the_engines_last_metrics(recorded: Path) -> None:
    manifest = json.loads((recorded / "manifest.json").read_text())
    requests = manifest["traffic"]["requests"]
    labels = '{engine="0",model_name="m"}'
    # each request made one draft of 4 tokens, 2 accepted; _created and gauges are left out
    assert manifest["final_counters"] == {
        f"vllm:spec_decode_num_drafts_total{labels}": requests,
        f"vllm:spec_decode_num_draft_tokens_total{labels}": 4 * requests,
        f"vllm:spec_decode_num_accepted_tokens_total{labels}": 2 * requests,
    }


def test_snapshots_are_kept_in_order_from_ready_to_stop(recorded: Path) -> None:
    lines = texts(recorded)["metrics.jsonl.gz"].splitlines()
    snapshots = [json.loads(line) for line in lines]
    assert len(snapshots) >= 4
    times = [s["t"] for s in snapshots]
    assert times == sorted(times) and all(s["status"] == 200 for s in snapshots)
    requests = json.loads((recorded / "manifest.json").read_text())["traffic"]["requests"]
    drafts = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"}'
    assert f"{drafts} 0.0" in snapshots[0]["body"]  # ready, before any traffic
    assert f"{drafts} {requests}.0" in snapshots[-1]["body"]  # after all of it


def test_nothing_of_the_machine_or_a_secret_is_kept(recorded: Path) -> None:
    kept = texts(recorded)
    for name, text in kept.items():
        assert SECRET not in text, name
        assert str(recorded.parents[2]) not in text, name  # the models, site and output
        assert re.search(rf"\b{re.escape(socket.gethostname())}\b", text) is None, name
    server_info = json.loads(kept["info.json"])["/server_info"]["body"]
    assert server_info["api_key"] == server_info["hf_token"] == "<blanked>"
    # a count of tokens is no secret: the replay's doctor --url reads the configuration
    assert server_info["speculative_num_draft_tokens"] == 4
    manifest = json.loads(kept["manifest.json"])
    assert "$MODELS/target" in manifest["command"]
    assert "$MODELS/target" in kept["server.log.gz"] and "$HOST" in kept["server.log.gz"]


def small_wheel(path: Path) -> None:
    """A wheel as pip builds them: a package, a heavy extension, and RECORD listing both."""
    files = {
        "tiny/__init__.py": b"VALUE = 1\n",
        "tiny/_heavy.abi3.so": b"\0" * 4096,
        "tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n",
        "tiny-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{name},,\n" for name in files) + "tiny-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("tiny-1.0.dist-info/RECORD", record)


def test_a_slimmed_wheel_split_in_parts_installs_without_what_was_left_out(
    tmp_path: Path,
) -> None:
    source, wheels = tmp_path / "tiny-1.0-py3-none-any.whl", tmp_path / "wheels"
    small_wheel(source)
    wheels.mkdir()
    slim = wheels / source.name
    left = subprocess.run(
        [sys.executable, str(REPO / "tools/record/slim_wheel.py"), str(source), str(slim), "*.so"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert left == ["tiny/_heavy.abi3.so"]
    record = zipfile.ZipFile(slim).read("tiny-1.0.dist-info/RECORD").decode()
    assert "_heavy" not in record and "tiny/__init__.py" in record
    # carried in two parts with the whole's hash, as install.sh expects them
    data = slim.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    (wheels / f"{slim.name}.sha256").write_text(f"{digest}  {slim.name}\n")
    (wheels / f"{slim.name}.part-aa").write_bytes(data[:100])
    (wheels / f"{slim.name}.part-ab").write_bytes(data[100:])
    slim.unlink()
    site = tmp_path / "site"
    done = subprocess.run(
        ["bash", str(REPO / "tools/record/install.sh"), str(wheels), str(site)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert (site / "tiny" / "__init__.py").exists()
    assert not (site / "tiny" / "_heavy.abi3.so").exists()
    assert not list(wheels.glob("*.part-*"))


def test_a_part_that_does_not_match_its_hash_stops_the_install(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    small_wheel(tmp_path / "tiny-1.0-py3-none-any.whl")
    data = (tmp_path / "tiny-1.0-py3-none-any.whl").read_bytes()
    name = "tiny-1.0-py3-none-any.whl"
    (wheels / f"{name}.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  {name}\n")
    (wheels / f"{name}.part-aa").write_bytes(data[:-1])  # the last byte lost on the way
    done = subprocess.run(
        ["bash", str(REPO / "tools/record/install.sh"), str(wheels), str(tmp_path / "site")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    )
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr
    assert not (tmp_path / "site" / "tiny").exists()
