"""The README and ``docs/`` against the program, both ways.

A user copies flag and variable names from the documentation and looks metrics and alerts up
in it: a name the program does not know stops the start (exit 2) or finds nothing, and a name
the documentation leaves out is one nobody finds. Each list is read from the program as a user
would meet it: each command's ``--help``, the names an unknown ``SPECWATCH_*`` variable's error
lists, the collector's families and the rendered alert and recording rules.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from exporter.cli import build_parser, main
from exporter.commands.run import effective_config
from exporter.config import build_config, env_overrides
from exporter.exposition.families import FAMILIES
from exporter.settings import ConfigError
from tests.support.docs import DOC_PAGES, README, RUNBOOK, all_docs, doc, section
from tests.support.tools import parse_yaml, shipped_rules, speed_budget_rendering

ENV_NAME = re.compile(r"\bSPECWATCH_[A-Z_]*[A-Z]\b")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z.-]*[a-z])")
METRIC = re.compile(r"\bspecwatch_[a-z0-9_]*[a-z0-9]\b")
ALERT = re.compile(r"\b(?:SpecDecode|Specwatch)[A-Z][A-Za-z]+\b")
RECORDED = re.compile(r"\b(?:target|job|cluster):specwatch_[a-z0-9_]+:[a-z0-9_]+\b")
# A specwatch command line inside code: the command and what follows it up to a pipe.
COMMAND_LINE = re.compile(r"(?:^|[/(]|\$ |\| |\|)specwatch ([a-z]+)\b([^|`\n]*)", re.MULTILINE)
CODE = re.compile(r"```[a-z]*\n(.*?)```|`([^`\n]+)`", re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")

DOCS = all_docs()
CONFIG_REFERENCE = section(
    doc("configuration.md"), "## Flags, environment variables and the config file"
)
RENAMED = section(doc("metrics.md"), "## Renamed metrics")


def help_flags(command: str, capsys: pytest.CaptureFixture[str]) -> set[str]:
    """The long options ``specwatch COMMAND --help`` prints; fails for an unknown command."""
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0, f"specwatch {command} is not a command"
    return set(FLAG.findall(capsys.readouterr().out)) - {"--help"}


def known_env_names() -> set[str]:
    """The names the error for an unknown variable offers: what the program answers to."""
    with pytest.raises(ConfigError) as caught:
        env_overrides({"SPECWATCH_NO_SUCH_SETTING": "1"})
    known = str(caught.value).split("known:", 1)[1]
    return set(ENV_NAME.findall(known))


def code_text(text: str) -> str:
    """Every code block and code span of a page, continuation lines joined."""
    pieces = [block or span for block, span in CODE.findall(text)]
    return "\n".join(pieces).replace("\\\n", " ")


def exported_names() -> set[str]:
    suffix = {"counter": "_total", "gauge": "", "histogram": "", "summary": ""}
    return {f"specwatch_{short}{suffix[kind]}" for short, (kind, _) in FAMILIES.items()}


def rule_names(key: str) -> set[str]:
    """Names in the shipped rules and in the optional speed-budget rendering."""
    files = speed_budget_rendering()
    optional = [
        g
        for name in ("prometheus_rules.yaml", "prometheus_alerts.yaml")
        for g in parse_yaml(files[name])["groups"]
    ]
    groups = shipped_rules()["groups"] + optional
    return {r[key] for g in groups for r in g["rules"] if key in r}


def test_the_run_flags_in_the_configuration_reference_are_exactly_the_programs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = "\n".join(line for line in CONFIG_REFERENCE.splitlines() if line.startswith("|"))
    flags = help_flags("run", capsys)
    assert len(flags) > 10, "the help no longer lists the flags"
    assert set(FLAG.findall(table)) == flags


def test_the_demo_page_names_every_flag_of_the_simulator(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    # The options themselves, not the engine flags their descriptions mention.
    flags = set(re.findall(r"^ {2}(--[a-z-]+)", capsys.readouterr().out, re.MULTILINE)) - {"--help"}
    assert "--scenario" in flags, "the help no longer lists the flags"
    assert flags <= set(FLAG.findall(doc("demo.md")))


def test_every_flag_given_to_a_specwatch_command_in_the_docs_exists(
    capsys: pytest.CaptureFixture[str],
) -> None:
    used: dict[str, set[str]] = {}
    for text in DOCS.values():
        for command, rest in COMMAND_LINE.findall(code_text(text)):
            used.setdefault(command, set()).update(FLAG.findall(rest))
    assert {"run", "doctor", "report"} <= set(used), "the pattern no longer finds the commands"
    unknown = {c: flags - help_flags(c, capsys) for c, flags in used.items()}
    assert not {c: f for c, f in unknown.items() if f}


def test_the_environment_variables_in_the_reference_are_exactly_the_programs() -> None:
    known = known_env_names()
    assert len(known) > 10, "the error no longer lists the known names"
    assert set(ENV_NAME.findall(CONFIG_REFERENCE)) == known


def test_each_variable_named_anywhere_in_the_docs_is_accepted() -> None:
    for name in sorted({n for text in DOCS.values() for n in ENV_NAME.findall(text)}):
        env_overrides({name: "1"})  # raises ConfigError for an unknown name


def test_every_exported_metric_is_in_the_metrics_table_and_nothing_else() -> None:
    metrics = doc("metrics.md").split("## Findings", 1)[0]
    listed = set(METRIC.findall(metrics)) - {"specwatch_custom"}  # `specwatch_custom_<name>`
    assert listed == exported_names()


def test_metric_names_anywhere_in_the_docs_exist() -> None:
    """Every name outside the renamed-metrics list (the one place old names are quoted)."""
    histogram = {f"{n}_{s}" for n in exported_names() for s in ("bucket", "count", "sum")}
    for path, text in DOCS.items():
        # Recording rule names are checked against the rules, below.
        names = set(METRIC.findall(RECORDED.sub("", text.replace(RENAMED, ""))))
        custom = {m for m in names if m.startswith("specwatch_custom_")}
        unknown = names - exported_names() - histogram - custom
        assert not unknown, (path.name, unknown)


def test_alerts_and_recording_rules_named_in_the_docs_exist() -> None:
    alerts, recorded = rule_names("alert"), rule_names("record")
    named_alerts = {a for text in DOCS.values() for a in ALERT.findall(text)}
    named_records = {
        r for text in DOCS.values() for r in RECORDED.findall(text.replace(RENAMED, ""))
    }
    assert len(named_alerts) >= 10 and named_records, "the patterns no longer find the names"
    assert named_alerts - alerts == set()
    assert named_records - recorded == set()


NUMBER_WORDS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty",
]  # fmt: skip


def test_the_alerts_page_counts_the_shipped_alerts() -> None:
    stated = re.search(r"`alerts/prometheus_alerts.yaml` holds (\w+) alerts", doc("alerts.md"))
    assert stated is not None, "the alerts page no longer says how many alerts ship"
    shipped = [r for g in shipped_rules()["groups"] for r in g["rules"] if "alert" in r]
    assert NUMBER_WORDS.index(stated[1]) == len(shipped)


def test_renamed_metrics_are_gone_and_their_new_names_exported() -> None:
    renames = re.findall(r"`(specwatch_\w+)` is now `(specwatch_\w+)`", RENAMED)
    assert renames
    for old, new in renames:
        assert new in exported_names(), (old, new)
        # An old name kept for a release says so in its HELP, and its rename says until when.
        if old in exported_names():
            assert FAMILIES[old.removeprefix("specwatch_")][1].startswith("Deprecated"), old
            assert f"`{old}` is now `{new}`" in RENAMED and "for this release only" in RENAMED


def test_the_reference_config_file_is_valid() -> None:
    block = CONFIG_REFERENCE.split("```yaml\n", 1)[1].split("```", 1)[0]
    config = build_config(yaml.safe_load(block))
    assert [t.name for t in config.targets] == ["sglang-0"]


def test_every_yaml_example_on_the_configuration_page_is_a_valid_config() -> None:
    """Each block is what a user pastes into the file ``--config`` reads."""
    blocks = re.findall(r"```yaml\n(.*?)```", doc("configuration.md"), re.DOTALL)
    assert len(blocks) >= 3, "the pattern no longer finds the examples"
    for block in blocks:
        build_config(yaml.safe_load(block))  # raises ConfigError naming the key


def test_the_command_table_lists_exactly_the_commands_of_the_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = set(re.findall(r"^ {4}([a-z]+) ", capsys.readouterr().out, re.MULTILINE))
    table = section(doc("configuration.md"), "## Running it on a real server")
    documented = set(re.findall(r"^\| `specwatch ([a-z]+)", table, re.MULTILINE))
    assert len(listed) >= 6, "the help no longer lists the commands"
    assert documented == listed


def anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_links_between_the_pages_lead_somewhere() -> None:
    checked = 0
    for path in DOC_PAGES:
        for target in LINK.findall(DOCS[path]):
            if "://" in target:
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            assert dest.exists(), (path.name, target)
            if anchor:
                assert anchor in anchors(dest.read_text(encoding="utf-8")), (path.name, target)
            checked += 1
    assert checked > 10


def test_the_readme_links_every_docs_page() -> None:
    readme = README.read_text(encoding="utf-8")
    for page in DOC_PAGES[1:]:
        assert f"(docs/{page.name})" in readme, page.name
    assert len(readme.splitlines()) < 150, "the README is for what a user needs first"


def console_examples() -> list[str]:
    """The ``console`` blocks of the docs: ``$``-commands followed by what they print."""
    return [b for t in DOCS.values() for b in re.findall(r"```console\n(.*?)```", t, re.DOTALL)]


def printed_in_order(shown: list[str], printed: list[str]) -> list[str]:
    """The shown lines the output lacks, in order; ``...`` cuts a line, or stands for lines."""
    lines = iter(printed)
    missing = []
    for line in (s for s in shown if s.strip() and s.strip() != "..."):
        head = line.removesuffix(" ...")
        matches = (p.startswith(head) if head != line else p == line for p in lines)
        if not any(matches):
            missing.append(line)
    return missing


@pytest.mark.parametrize("example", console_examples(), ids=lambda e: e.split("\n")[1][:40])
def test_a_console_example_prints_what_the_docs_show(
    example: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    steps = [part.splitlines() for part in re.split(r"^\$ ", example, flags=re.MULTILINE)[1:]]
    *setup, (command, *shown) = steps
    for step in setup:
        assert main(shlex.split(step[0])[1:]) == 0, step[0]
    capsys.readouterr()
    main(shlex.split(command)[1:])
    assert not printed_in_order(shown, capsys.readouterr().out.splitlines())


SHELL_BLOCK = re.compile(r"```(?:sh|console)\n(.*?)```", re.DOTALL)
SPECWATCH_LINE = re.compile(r"(?:\S*/)?specwatch ")


def shell_specwatch_lines() -> list[list[str]]:
    """Each ``specwatch`` command line of the shell blocks of the docs and the runbook, as the
    shell splits it (continuations joined, comments and what it pipes into dropped)."""
    found = []
    for text in [*DOCS.values(), RUNBOOK.read_text(encoding="utf-8")]:
        for block in SHELL_BLOCK.findall(text):
            for line in block.replace("\\\n", " ").splitlines():
                command = line.removeprefix("$ ")
                if not SPECWATCH_LINE.match(command):
                    continue  # another program, or what a command printed
                argv = shlex.split(command, comments=True)
                found.append(argv[1 : argv.index("|")] if "|" in argv else argv[1:])
    return found


def test_every_specwatch_command_line_in_a_shell_example_is_accepted() -> None:
    """Names alone are not enough: a value out of its choices, a flag without its value or
    a run whose flags make no valid configuration stops a user who pastes the line."""
    lines = shell_specwatch_lines()
    assert len(lines) >= 10, "the pattern no longer finds the examples"
    for argv in lines:
        try:
            args = build_parser(argv).parse_args(argv)
        except SystemExit:
            pytest.fail(f"specwatch {shlex.join(argv)} is refused")
        if args.command == "run":
            effective_config(args)  # raises ConfigError naming the key
