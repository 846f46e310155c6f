"""The README's configuration and metrics reference against the program, both ways.

A user copies flag and variable names from the README and looks metrics up in it: a name the
program does not know stops the start (exit 2), and a name the README leaves out is one nobody
finds. Each list is read from the program as a user would meet it: ``specwatch run --help``,
the names an unknown ``SPECWATCH_*`` variable's error lists, and the collector's families.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from exporter.cli import main
from exporter.config import ConfigError, build_config, env_overrides
from exporter.exposition.collector import FAMILIES

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
ENV_NAME = re.compile(r"\bSPECWATCH_[A-Z_]*[A-Z]\b")
FLAG = re.compile(r"`(--[a-z][a-z.-]*[a-z])")
METRIC = re.compile(r"\bspecwatch_[a-z0-9_]*[a-z0-9]\b")


def section(heading: str) -> str:
    """The README text under ``heading`` (any level), up to the next heading of that level."""
    level, _, _ = heading.partition(" ")
    start = README.index(f"\n{heading}\n") + len(heading) + 2
    end = README.find(f"\n{level} ", start)
    return README[start:] if end == -1 else README[start:end]


def run_flags(capsys: pytest.CaptureFixture[str]) -> set[str]:
    """The long options ``specwatch run --help`` prints."""
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    found = re.findall(r"(?<![\w-])(--[a-z][a-z.-]*[a-z])", capsys.readouterr().out)
    return set(found) - {"--help"}


def known_env_names() -> set[str]:
    """The names the error for an unknown variable offers: what the program answers to."""
    with pytest.raises(ConfigError) as caught:
        env_overrides({"SPECWATCH_NO_SUCH_SETTING": "1"})
    known = str(caught.value).split("known:", 1)[1]
    return set(ENV_NAME.findall(known))


CONFIG_REFERENCE = section("### Flags, environment variables and the config file")


def test_the_run_flags_in_the_readme_are_exactly_the_programs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = "\n".join(line for line in CONFIG_REFERENCE.splitlines() if line.startswith("|"))
    flags = run_flags(capsys)
    assert len(flags) > 10, "the help no longer lists the flags"
    assert set(FLAG.findall(table)) == flags


def test_the_environment_variables_in_the_readme_are_exactly_the_programs() -> None:
    known = known_env_names()
    assert len(known) > 10, "the error no longer lists the known names"
    assert set(ENV_NAME.findall(CONFIG_REFERENCE)) == known


def test_each_variable_named_anywhere_in_the_readme_is_accepted() -> None:
    for name in sorted(set(ENV_NAME.findall(README))):
        env_overrides({name: "1"})  # raises ConfigError for an unknown name


def exported_names() -> set[str]:
    suffix = {"counter": "_total", "gauge": "", "histogram": ""}
    return {f"specwatch_{short}{suffix[kind]}" for short, (kind, _) in FAMILIES.items()}


def test_every_exported_metric_is_in_the_metrics_section_and_nothing_else() -> None:
    metrics = section("## Metrics").split("### Findings", 1)[0]
    listed = set(METRIC.findall(metrics)) - {"specwatch_custom"}  # `specwatch_custom_<name>`
    assert listed == exported_names()


def test_metric_names_elsewhere_in_the_readme_exist() -> None:
    """Every name outside the changelog (the one place old names are quoted) is exported."""
    text = README.replace(section("## Changelog"), "")
    histogram = {f"{n}_{s}" for n in exported_names() for s in ("bucket", "count", "sum")}
    custom = {m for m in METRIC.findall(text) if m.startswith("specwatch_custom_")}
    unknown = set(METRIC.findall(text)) - exported_names() - histogram - custom
    assert not unknown


def test_changelog_renames_are_complete() -> None:
    """A renamed metric is gone from the exporter, and its new name is exported."""
    renames = re.findall(r"`(specwatch_\w+)` is now `(specwatch_\w+)`", section("## Changelog"))
    assert renames
    for old, new in renames:
        assert old not in exported_names() and new in exported_names(), (old, new)


def test_the_readme_config_file_is_valid() -> None:
    block = CONFIG_REFERENCE.split("```yaml\n", 1)[1].split("```", 1)[0]
    config = build_config(yaml.safe_load(block))
    assert [t.name for t in config.targets] == ["sglang-0"]
