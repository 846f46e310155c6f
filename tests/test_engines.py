"""Engines are plug-ins: one registry, read by everything that offers or tries an engine."""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from exporter.analysis.algorithms import engine_fix
from exporter.analysis.findings.configuration import graphs_off_by_configuration
from exporter.cli import build_parser
from exporter.config import build_config
from exporter.engines import registry, sglang_startup
from exporter.engines.engine import Engine
from exporter.engines.server_config import ServerConfig
from exporter.mixin.render import render
from exporter.mixin_config import MixinConfig
from exporter.settings import ConfigError
from exporter.simulate import ENGINES as SIMULATED
from tests.support.docs import all_docs, doc
from tests.support.tools import REPO

FIX_CHANGES = ("eagle3_algorithm", "speculative_tokens", "draft_tokens", "log_stats")


def test_the_registry_finds_each_engine_module() -> None:
    """Each module of engines/ that sets ENGINE, found here by reading the files."""
    modules = (REPO / "exporter" / "engines").glob("*.py")
    defining = [path for path in modules if re.search(r"^ENGINE = ", path.read_text(), re.M)]
    assert len(registry.ENGINES) == len(defining) >= 2
    assert all(path.stem.endswith("_engine") for path in defining)
    assert tuple(sorted(registry.NAMES)) == registry.NAMES
    assert all(isinstance(engine, Engine) for engine in registry.ENGINES)


@pytest.mark.parametrize("engine", registry.ENGINES, ids=registry.NAMES)
def test_every_engine_names_each_fix_in_its_own_flags(engine: Engine) -> None:
    own = OWN_CHANGES.get(engine.name, set())
    assert own <= set(engine.fixes)
    assert set(engine.fixes) - set(FIX_CHANGES) - own in (set(), set(LOG_CHANGES))
    for change in FIX_CHANGES:
        assert f"{engine.title} {engine.fixes[change]}" in engine_fix(change)


# What only an engine whose log specwatch reads says: its graphs switch, its DP ranks' lines,
# the GPU memory its crash needs, what stays running while its drafting is off.
LOG_CHANGES = (
    "cuda_graphs_off",
    "cuda_graphs_on",
    "rank_lines",
    "gpu_headroom",
    "graph_headroom",
    "drafting_off_cost",
)
# What one engine alone says: vLLM's API servers, which log no stats when there are several;
# SGLang 0.5.23's resolved decode backend, which turns graphs off where its flag does not.
# Words one engine has of its own: vLLM counts the tokens it drafts ("4 speculative tokens"),
# where SGLang and the default count verified positions ("5 draft tokens"). The n-gram match
# window: the engines that serve n-gram lookup.
OWN_CHANGES = {
    "vllm": {"api_servers", "draft_count", "ngram_window", "schedule_entry"},
    # SGLang's running cap and graph batch size: the only ones a configuration specwatch
    # reads states, so the only ones the capped and eager-batch findings name.
    # And the cap it picks itself when none is given, and its block drafters' block sizes.
    "sglang": {
        "cuda_graphs_off_backend",
        "running_cap",
        "graph_batch_cap",
        "ngram_window",
        "running_cap_default",
        "dflash_block",
        "dspark_block",
    },
}


@pytest.mark.parametrize(
    ("engine", "seen", "fix"),
    [
        ("sglang", "disable_cuda_graph=True", "--disable-cuda-graph"),
        ("vllm", "enforce_eager=True", "--enforce-eager"),
        # /server_info's, which names no engine: that of the engine serving it.
        (None, "disable_cuda_graph=True", "--disable-cuda-graph"),
    ],
)
def test_graphs_turned_off_by_configuration_read_in_the_engines_own_flags(
    engine: str | None, seen: str, fix: str
) -> None:
    said, restart = graphs_off_by_configuration(ServerConfig(engine=engine))
    assert said.startswith(seen) and fix in restart
    other = "--enforce-eager" if fix == "--disable-cuda-graph" else "--disable-cuda-graph"
    assert other not in restart


def test_config_accepts_the_registered_engines_and_names_the_key_otherwise() -> None:
    for name in ("auto", *registry.NAMES):
        assert build_config({"targets": [{"engine": name}]}).targets[0].engine == name
    with pytest.raises(ConfigError, match=r"targets\.0\.engine: must be auto or one of sglang"):
        build_config({"targets": [{"engine": "tgi"}]})


# An engine's value where the docs give one: a flag, a config key, a variable.
_ENGINE_VALUE = re.compile(r"(?:--engine[ =]|\bengine: |_ENGINE=)`?([a-z][\w-]*)")


def test_the_docs_name_only_engines_there_are() -> None:
    """A value copied from the docs is accepted: each engine they name is a registered one.
    Which engines there are is the registry's to say (``specwatch run --help`` lists them
    under ``--engine``, and the docs send readers there), so adding an engine edits no page
    for this check; what the new engine gives is its author's column of docs/engines.md."""
    named = {value for text in all_docs().values() for value in _ENGINE_VALUE.findall(text)}
    row = re.search(r"^\| `engine:` \|(.*)\|$", doc("engines.md"), re.MULTILINE)
    assert row is not None, "docs/engines.md no longer gives each column's engine: value"
    columns = [cell.strip().strip("`") for cell in row.group(1).split("|")]
    assert len(named) >= 3, "the pattern no longer finds the docs' engine values"
    assert set(named) | set(columns) <= {"auto", *registry.NAMES}
    reference = re.search(r"^\| `targets\[\]\.engine` \|.*$", doc("configuration.md"), re.M)
    assert reference is not None and "(engines.md)" in reference.group(0)
    assert "the help of `specwatch run` lists them" in reference.group(0)


def _engine_words() -> re.Pattern[str]:
    """An engine's name or title as a word of a text (``vLLM's``, ``sglang:num_running_reqs``,
    ``--engine trtllm``), with the token it stands in."""
    words = sorted({w for e in registry.ENGINES for w in (e.name, e.title)}, key=len, reverse=True)
    either = "|".join(map(re.escape, words))
    return re.compile(rf"[\w.:-]*(?<![A-Za-z0-9])(?:{either})(?![A-Za-z0-9])[\w.:-]*", re.I)


ENGINE_WORD = _engine_words()


def _an_engines_own(module: str | None) -> bool:
    """A module of one engine (``engines/sglang_sim/``, ``engines/vllm_upstream.py``), not one
    of the shapes every engine shares (``engines/record.py``)."""
    parts = (module or "").split(".")
    return parts[:2] == ["exporter", "engines"] and any(
        len(parts) > 2 and parts[2].startswith(name) for name in registry.NAMES
    )


def naming(source: str) -> list[tuple[int, str]]:
    """Where ``source`` names an engine, and what it names: its name or title in a string (a
    branch, a default, a metric name of its own, a text a user reads), or an import of a
    module of its own. Documentation, a string standing alone as a statement, is the
    developer's and may explain by an engine's example."""
    tree = ast.parse(source)
    return _naming(tree, _strings(tree))


def _naming(tree: ast.Module, strings: list[tuple[int, str]]) -> list[tuple[int, str]]:
    found = _texts(strings, ENGINE_WORD)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and _imports_an_engines_own(node):
            found.append((node.lineno, ast.unparse(node)))
    return found


def _imports_an_engines_own(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.Import):
        return any(_an_engines_own(a.name) for a in node.names)
    base = node.module or ""
    return _an_engines_own(base) or any(_an_engines_own(f"{base}.{a.name}") for a in node.names)


@pytest.mark.parametrize(
    "source",
    [
        'if config.engine == "sglang":\n    pass',
        'def run(engine: str = "vllm") -> None: ...',
        'WORDS = {"auto": "TensorRT-LLM"}',
        'NAME = "sglang:num_running_reqs"',
        'WHY = f"{count} requests; SGLang caps EAGLE at 48"',
        'help="seconds between scrapes when accept length comes from counters (vLLM)"',
        "from exporter.engines.vllm_sim import FORMATS",
        "from exporter.engines import sglang_engine",
        "import exporter.engines.sglang_sim.eras",
    ],
)
def test_a_module_that_names_an_engine_is_caught(source: str) -> None:
    assert [line for line, _ in naming(f"x = 1\n{source}\n")] == [2]


def test_the_shared_shapes_and_documentation_name_no_engine() -> None:
    source = (
        '"""Read the way SGLang writes it."""\n'
        "from exporter.engines import registry\n"
        "from exporter.engines.simulation import Phase\n"
        'TEXT = "the engine logs one only while it speculates"\n'
        '"""What vLLM says of it."""\n'
        "def f() -> None:\n"
        '    """TensorRT-LLM too."""\n'
    )
    assert naming(source) == []


# What may name an engine outside engines/, each for a reason of its own.
ALLOWED = {
    # Ray Serve's start of vLLM's metric names: an example value of --metrics-prefix, a
    # bridge's prefix that a user types, not an engine's branch or text.
    ("commands/run.py", "ray_vllm_"),
    ("config.py", "ray_vllm_"),
    # The benchmark whose results --baseline-bench reads, whichever engine it measured.
    ("commands/__init__.py", "sglang.benchmark.serving"),
}


def test_no_module_outside_engines_names_an_engine() -> None:
    """An engine's name or title, a metric name of its own or one of its modules, in any
    other module, is a branch, a default or a text that the next engine would have to edit:
    a text speaks of the engine, or asks the registry for the engine's own words."""
    found = {
        (module, word)
        for module, tree, strings in _shared_modules()
        for _, word in _naming(tree, strings)
    }
    assert sorted(found - ALLOWED) == []
    assert found >= ALLOWED, "an allowed name is gone: drop it from ALLOWED"


def _engines_flags() -> set[str]:
    """Every command-line flag an engine's own texts give (its fixes, its metrics switch) that
    is not also specwatch's (``--url``, ``--log-level``)."""
    texts = [text for e in registry.ENGINES for text in (*e.fixes.values(), e.metrics_switch)]
    given = {flag for text in texts if text for flag in re.findall(r"--[a-z][\w-]*", text)}
    return given - _specwatch_flags(build_parser())


def _specwatch_flags(parser: argparse.ArgumentParser) -> set[str]:
    """The long options of ``parser`` and of each of its subcommands."""
    flags = set()
    for action in parser._actions:
        flags |= {option for option in action.option_strings if option.startswith("--")}
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                flags |= _specwatch_flags(command)
    return flags


def test_no_module_outside_engines_gives_an_engines_flag() -> None:
    """A flag of one engine in a shared text is wrong for every other: the text asks the
    engine for its words (``engine_fix``, ``own_fix``, ``engine_words``) instead."""
    flags = _engines_flags()
    assert {"--enable-metrics", "--enforce-eager", "--speculative-num-steps"} <= flags
    pattern = re.compile(rf"(?<![\w-])(?:{'|'.join(map(re.escape, flags))})(?![\w-])")
    found = [
        f"{module}:{line} {word}"
        for module, _, strings in _shared_modules()
        for line, word in _texts(strings, pattern)
    ]
    assert found == []


@cache
def _shared_modules() -> tuple[tuple[str, ast.Module, list[tuple[int, str]]], ...]:
    """Each module outside ``engines/`` (its path under ``exporter/``), its syntax tree and
    its strings that are not documentation, parsed and walked once for the two tests that
    read them all (half their CPU). Only read."""
    paths = sorted((REPO / "exporter").rglob("*.py"))
    modules = ((path.relative_to(REPO / "exporter").as_posix(), path) for path in paths)
    trees = (
        (module, ast.parse(path.read_text(encoding="utf-8")))
        for module, path in modules
        if not module.startswith("engines/")
    )
    return tuple((module, tree, _strings(tree)) for module, tree in trees)


def _strings(tree: ast.Module) -> list[tuple[int, str]]:
    """The strings of ``tree`` that are not documentation, with their lines."""
    documentation = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in documentation
    ]


def _texts(strings: list[tuple[int, str]], pattern: re.Pattern[str]) -> list[tuple[int, str]]:
    """What ``pattern`` finds in ``strings`` (``_strings``)."""
    return [(line, word) for line, text in strings for word in pattern.findall(text)]


def test_the_simulator_writes_each_engine_that_logs() -> None:
    assert tuple(e.name for e in registry.ENGINES if e.markers) == SIMULATED


def test_sglang_event_reader_leaves_vllm_engine_lines_alone() -> None:
    message = (
        "Initializing a V1 LLM engine (v0.11.0) with config: model='m', speculative_config="
        "SpeculativeConfig(method='eagle3', model='d', num_spec_tokens=3), enforce_eager=False"
    )
    assert sglang_startup.parse_event(message) is None
    assert registry.engine("vllm").parse_event(message) is not None


def test_no_other_engine_owns_a_line_of_sglangs_own_prefix() -> None:
    """A batch whose every line has SGLang's prefix is read whole without a scan for other
    engines' lines (``LogReader.read_whole``): no other engine may own a line starting so,
    even one quoting its own lines whole."""
    sglang = registry.engine("sglang")
    others = [engine for engine in registry.ENGINES if engine is not sglang]
    owned = []
    for log in sorted((REPO / "tests" / "recordings").glob("vllm-*/*/server.log.gz")):
        with gzip.open(log, "rt") as lines:
            owned += [line.rstrip("\n") for line in lines if registry.owner(line, line.encode())]
    assert len(owned) > 20  # engine starts, stats lines, configurations
    for line in owned:
        for prefix in ("[2026-02-23 00:14:33 DP3 TP3 EP3] ", "[2026-02-23 00:14:33] "):
            quoted = prefix + line
            assert not [e.name for e in others if e.owns(quoted)], quoted


def test_vllm_judges_every_mtp_method_as_mtp() -> None:
    vllm = registry.engine("vllm")
    methods = ("eagle3", "deepseek_mtp", "mtp", "ngram")
    assert [vllm.judged_as(m, None) for m in methods] == ["EAGLE3", "MTP", "MTP", "NGRAM"]


# A whole engine in one module: a grammar of one line kind, its detection, its events and
# its fixes. Dropped into a copy of the package, nothing else is edited.
_TOY_ENGINE = """
from __future__ import annotations

from datetime import datetime, timezone

from exporter.engines.events import ServerArgsEvent
from exporter.engines.record import LogLine, StatsRecord
from exporter.engines.server_config import ServerConfig

_PREFIX = "toyllm| "


class _Reader:
    cuttable = False

    def __init__(self, sink, clean):
        self._sink = sink

    def read(self, lines, blob, tidy):
        for line in lines:
            text = line.decode("utf-8", "replace")
            if text.startswith(_PREFIX + "accept="):
                value = float(text.split("=", 1)[1])
                self._sink.on_record(StatsRecord("decode", None, "toyllm", accept_length=value))
            elif text.startswith(_PREFIX + "start "):
                self._sink.on_event(LogLine(None, None, None, text[len(_PREFIX):], "toyllm"))

    def read_whole(self, framed, tidy, foreign):
        return None

    def finish(self):
        pass


class _Line:
    stream = "stderr"

    def __init__(self, offset, text, ready=False):
        self.offset, self.text, self.ready = offset, text, ready

    def render(self, moment):
        return f"{_PREFIX}{self.text}"


class _Simulation:
    formats = {"toy-1": "every ToyLLM release"}
    default_format = "toy-1"

    def base_time(self, fmt):
        return datetime(2026, 1, 1, tzinfo=timezone.utc)

    def cannot(self, phase):
        return "ToyLLM logs no requests" if phase.deployment.log_requests else None

    def lines(self, phases, *, seed, fmt):
        at = 0.0
        for phase in phases:
            yield _Line(at, f"start {phase.deployment.algorithm}", ready=True)
            end = None if phase.traffic_seconds is None else at + phase.traffic_seconds
            while end is None or at < end:
                at += 1.0
                yield _Line(at, f"accept={phase.behaviour.accept_length}")

    def window_seconds(self, phase):
        return 1.0


class Toy:
    name = "toyllm"
    title = "ToyLLM"
    markers = (b"toyllm| ",)
    start_markers = markers
    metrics_paths = ("/toy/metrics",)
    server_info_paths = ()
    metrics_switch = "--toy-metrics"
    draft_settings = {"draft_len": "num_steps"}
    fixes = {"eagle3_algorithm": "--algo eagle3"}
    off_cause = "toy throttle"
    metric_name_folds = {}
    decode_log_interval = 25

    def simulation(self):
        return _Simulation()

    def no_accept_length(self, algorithm, started):
        return "ToyLLM prints one only while it speculates"

    def owns(self, text):
        return text.startswith(_PREFIX)

    def starts(self, text):
        return text.startswith(_PREFIX + "start ")

    def log_reader(self, sink, clean):
        return _Reader(sink, clean)

    def parse_event(self, message):
        if message.startswith("start "):
            return ServerArgsEvent(ServerConfig(engine=self.name, algorithm=message.split()[1]))
        return None

    def read_server_info(self, info):
        return None

    def upstream_reader(self, prefix=None):
        return None

    def judged_as(self, algorithm, draft_architecture):
        return {"EAGLE3": "EAGLE3", "LOOKUP": "NGRAM"}.get(algorithm.upper())

    def schedule(self, steps, algorithm):
        return None


ENGINE = Toy()
"""

_USE_IT = """
import contextlib
import io
import json
import os
import sys
from exporter.analysis.algorithms import config_floor, engine_fix, off_cause
from exporter.analysis.findings import Observations, evaluate
from exporter.cli import main
from exporter.config import build_config
from exporter.demo.__main__ import main as demo
from exporter.engines import registry
from exporter.engines.server_config import ServerConfig
from exporter.parse.pipeline import LineProcessor
from exporter.simulate import DEFAULT_ENGINE, generate, playable
from exporter.sources.endpoints import find_endpoints, split_base
from exporter.state.runs import RunTracker
from tests.support.sinks import ListSink
from tests.test_engines import rendering

sink = ListSink()
processor = LineProcessor(sink)
processor.process([b"noise", b"toyllm| start EAGLE3", b"toyllm| accept=2.5"])
tracker = RunTracker()
started = [tracker.observe(event) for event in sink.events]
print(registry.NAMES)
print(processor.engine, [r.accept_length for r in sink.records], started, tracker.config.algorithm)
print(build_config({"targets": [{"engine": "toyllm"}]}).targets[0].engine)
print(engine_fix("eagle3_algorithm"))
print(off_cause("toyllm"), "|", off_cause(None))
# Its /metrics path, tried from a base URL after those more engines serve.
print(find_endpoints("http://h:8000").metrics, split_base("http://h:8000/toy/metrics"))
# Its simulation, written by `specwatch simulate` and read back as its own.
main(["simulate", "--engine", "toyllm", "--scenario", "recovery", "--duration", "70",
      "--out", "toy.log"])
sink = ListSink()
processor = LineProcessor(sink)
processor.process(open("toy.log", "rb").read().splitlines())
read = sorted({r.accept_length for r in sink.records})
print(processor.engine, read, len(sink.events), DEFAULT_ENGINE)
print(len(playable("toyllm")), "hidden-share" in playable("toyllm"))
# Its finding texts: its /metrics switch, left off.
toy = ServerConfig(engine="toyllm")
(finding,) = evaluate(Observations(config=toy, metrics_endpoint="missing"))
print(finding.summary, "|", finding.fix)
# Its own spelling of an algorithm, judged by that algorithm's standard (n-gram lookup's
# floor and fixes), each window weighed by its own log interval: 25 rounds of its one request.
print(config_floor(ServerConfig(engine="toyllm", algorithm="LOOKUP")))
with open("lookup.log", "w") as log:
    log.write("toyllm| start LOOKUP\\n" + "toyllm| accept=1.0\\n" * 8)
with contextlib.redirect_stdout(io.StringIO()) as out:
    status = main(["doctor", "--log-file", "lookup.log", "--json"])
judged = json.loads(out.getvalue())
verdict, (collapse,) = judged["verdict"], judged["verdicts"]
print(status, verdict["state"], verdict["method"]["family"], verdict["drafts"])
print("does not repeat its context" in collapse["fix"])
os.environ.update(DEMO_ENGINE="toyllm", DEMO_SCENARIO="hidden-share")
print("demo", demo())
print("simulate", main(["simulate", "--engine", "toyllm", "--scenario", "hidden-share"]))
# The shipped alerts, rules and dashboards, rendered with it there.
print("rendering", rendering())
sys.exit(main(["run", "--engine", "nosuch"]))
"""


def rendering() -> str:
    """A digest of the default mixin rendering (`make mixin`'s files, which a test holds equal
    to the committed ones)."""
    return hashlib.sha256(json.dumps(render(MixinConfig()), sort_keys=True).encode()).hexdigest()


DOCS_CHECK = "tests/test_engines.py::test_the_docs_name_only_engines_there_are"


def _in_copy(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.e2e
def test_an_engine_is_added_by_adding_its_module(tmp_path: Path) -> None:
    for package in ("exporter", "tests", "docs"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__py*"))
    shutil.copy(REPO / "README.md", tmp_path)
    (tmp_path / "exporter" / "engines" / "toyllm_engine.py").write_text(
        _TOY_ENGINE, encoding="utf-8"
    )
    result = _in_copy(tmp_path, "-c", _USE_IT)
    # The docs' engine check passes in the copy too: no page names every engine, so none
    # is edited (what ToyLLM gives is its author's to write in docs/engines.md).
    docs = _in_copy(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", DOCS_CHECK)
    assert docs.returncode == 0 and "1 passed" in docs.stdout, docs.stdout
    lines = result.stdout.splitlines()
    assert lines == [
        "('sglang', 'toyllm', 'trtllm', 'vllm')",
        "toyllm [2.5] [True] EAGLE3",
        "toyllm",
        "SGLang --speculative-algorithm EAGLE3; ToyLLM --algo eagle3; TensorRT-LLM "
        'decoding_type: Eagle3 in speculative_config; vLLM "method": "eagle3" in '
        "--speculative-config",
        "toy throttle | adaptive or toy throttle or per-batch-size schedule",
        "('http://h:8000/metrics', 'http://h:8000/toy/metrics', "
        "'http://h:8000/prometheus/metrics') ('http://h:8000', '/toy/metrics')",
        # recovery: a collapsed run for 60 s, then a healthy one, each started.
        "toyllm [1.0, 3.2] 2 sglang",
        "10 False",
        "ToyLLM's /metrics endpoint is off | Restart the server with --toy-metrics.",
        # LOOKUP is n-gram lookup: its floor is 1.2 (EAGLE's is 1.8), and its collapse over
        # 8 windows is 200 draft rounds (8 x 25), told with n-gram lookup's fix.
        "1.2",
        "3 collapsed NGRAM 200",
        "True",
        "demo 2",
        "simulate 2",
        # Texts that serve every engine name none, so the shipped rendering is unchanged:
        # a new engine regenerates nothing.
        f"rendering {rendering()}",
    ], result.stderr
    assert result.returncode == 2
    errors = result.stderr.splitlines()
    assert "DEMO_SCENARIO must be one of healthy, collapsed, eagle-flag" in errors[0]
    assert errors[1].startswith(
        "specwatch simulate: error: --scenario hidden-share: ToyLLM logs no requests; "
        "with toyllm: healthy, collapsed,"
    )
    assert "(choose from 'auto', 'sglang', 'toyllm', 'trtllm', 'vllm')" in errors[-1]
