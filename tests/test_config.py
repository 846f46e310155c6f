"""Configuration: file < environment < flags, and every error names its key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.config import build_config, load_config
from exporter.settings import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "specwatch.yaml"
    path.write_text(text)
    return path


def test_flags_alone_define_one_target_with_defaults() -> None:
    config = load_config(None, {"log_files": ["/var/log/sglang.log"]}, environ={})
    assert config.listen == "0.0.0.0:9477"
    assert config.stale_after == 60
    assert config.max_line_bytes == 1 << 20
    [target] = config.targets
    assert target.name == "default"
    assert target.log_files == ["/var/log/sglang.log"]


def test_flags_win_over_environment_which_wins_over_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "listen: 127.0.0.1:1000\nstale_after: 10\nmax_line_bytes: 4096\n"
        "targets: [{name: a, log_files: [x.log]}]\n",
    )
    env = {"SPECWATCH_STALE_AFTER": "20", "SPECWATCH_LISTEN": "127.0.0.1:2000"}
    config = load_config(path, {"listen": "127.0.0.1:3000"}, environ=env)
    assert config.listen == "127.0.0.1:3000"
    assert config.stale_after == 20
    assert config.max_line_bytes == 4096


def test_target_flags_update_the_only_file_target(tmp_path: Path) -> None:
    path = write(tmp_path, "targets: [{name: node-a, log_files: [a.log]}]\n")
    config = load_config(path, {"baseline_tok_s": 90.0, "expected_accept_length": 3.0}, {})
    [target] = config.targets
    assert target.name == "node-a"
    assert target.baseline is not None and target.baseline.tok_s == 90.0
    assert target.expected_accept_length == 3.0


def test_named_flag_target_is_added_beside_file_targets(tmp_path: Path) -> None:
    path = write(tmp_path, "targets: [{name: a, log_files: [a.log]}, {name: b, log_files: []}]\n")
    config = load_config(path, {"name": "c", "log_files": ["c.log"]}, environ={})
    assert [t.name for t in config.targets] == ["a", "b", "c"]


def test_environment_log_file_is_a_path_list() -> None:
    config = load_config(None, None, environ={"SPECWATCH_LOG_FILE": "a.log:b.log"})
    assert config.targets[0].log_files == ["a.log", "b.log"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("listen: nowhere\ntargets: [{log_files: [a]}]\n", "listen"),
        ("stale_after: -1\ntargets: [{log_files: [a]}]\n", "stale_after"),
        ("targets: [{log_files: [a], colour: blue}]\n", "targets.0.colour"),
        ("bogus: 1\ntargets: [{log_files: [a]}]\n", "bogus"),
        ("targets: [{name: 'a b', log_files: [a]}]\n", "targets.0.name"),
        ("targets: [{log_files: [a], metrics_url: 'ftp://x'}]\n", "targets.0.metrics_url"),
        ("targets: [{log_files: [a], baseline: {tok_s: 1, curve: '1:2'}}]\n", "targets.0.baseline"),
        ("targets: [{name: a, log_files: [a]}, {name: a, log_files: [b]}]\n", "targets"),
        ("targets: [{log_files: [a], expected_accept_length: 0.5}]\n", "expected_accept_length"),
        ("max_dp_ranks: 0\ntargets: [{log_files: [a]}]\n", "max_dp_ranks"),
        ("max_traffic_classes: 0\ntargets: [{log_files: [a]}]\n", "max_traffic_classes"),
        (
            "targets: [{log_files: [a], request_label_header: 'X-Tenant: evil'}]\n",
            "targets.0.request_label_header",
        ),
        ("targets: [{metrics_url: 'http://x/', scrape_interval: 1e-9}]\n", "scrape_interval"),
        ("targets: [{metrics_url: 'http://x/', scrape_interval: 1e9}]\n", "scrape_interval"),
        ("targets: [{log_files: [a, ./a]}]\n", "log file ./a is given twice"),
        (
            "targets: [{name: x, log_files: [a]}, {name: y, log_files: [b/../a]}]\n",
            "targets x and y",
        ),
        (
            "targets: [{log_files: [a]}]\ntargets: [{log_files: [b]}]\n",
            "line 2, column 1: not valid YAML: key 'targets' given twice",
        ),
        ("targets: [{log_files: [a], name: x, name: y}]\n", "'name' given twice"),
        # An endless window shows a dead server's values as current for good; an infinite grace
        # never reports a missing log; an infinite expectation pages on every healthy node.
        ("stale_after: .inf\ntargets: [{log_files: [a]}]\n", "stale_after"),
        ("log_missing_grace: .inf\ntargets: [{log_files: [a]}]\n", "log_missing_grace"),
        ("log_missing_grace: 1e12\ntargets: [{log_files: [a]}]\n", "log_missing_grace"),
        ("targets: [{log_files: [a], expected_accept_length: .inf}]\n", "expected_accept_length"),
        ("targets: [{log_files: [a], expected_accept_length: 1e9}]\n", "expected_accept_length"),
        # One 200 MB line under a 1 GB cap took 359 MB and stalled reading for minutes.
        ("max_line_bytes: 1000000000\ntargets: [{log_files: [a]}]\n", "max_line_bytes"),
    ],
)
def test_bad_file_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(write(tmp_path, text), None, environ={})


def test_more_targets_or_log_paths_than_one_process_can_hold_are_refused() -> None:
    """3,000 targets, a 160 KB config, took 3,005 threads and 140 MB (over the 128 MiB the
    manifests allow) and a 4 s, 6 MB scrape."""
    targets = [{"name": f"t{i}", "log_files": [f"{i}.log"]} for i in range(257)]
    with pytest.raises(ConfigError, match=r"^targets: at most 256 targets per process"):
        build_config({"targets": targets})
    build_config({"targets": targets[:256]})
    paths = [f"{i}.log" for i in range(257)]
    with pytest.raises(ConfigError, match=r"^targets: at most 256 log paths per process"):
        build_config({"targets": [{"log_files": paths}]})


@pytest.mark.parametrize("other", ["link", "glob", "hardlink"])
def test_one_file_named_twice_through_a_link_or_glob_is_refused(tmp_path: Path, other: str) -> None:
    """The same file as a path and as a symlink or glob match had every line counted twice
    (100 lines appended read as 200); only the same spelling was refused."""
    log = tmp_path / "logs" / "server.log"
    log.parent.mkdir()
    log.touch()
    second = tmp_path / "server-link.log"
    if other == "link":
        second.symlink_to(log)
    elif other == "hardlink":
        second.hardlink_to(log)
    else:
        second = tmp_path / "logs" / "*.log"
    targets = [{"name": "a", "log_files": [str(log)]}, {"name": "b", "log_files": [str(second)]}]
    with pytest.raises(ConfigError, match=re.escape(f"{second} names the file {log} does too")):
        build_config({"targets": targets})
    (tmp_path / "logs" / "other.txt").touch()
    other_file = str(tmp_path / "logs" / "*.txt")
    build_config({"targets": [targets[0], {"name": "b", "log_files": [other_file]}]})


def test_unknown_environment_variable_is_named() -> None:
    with pytest.raises(ConfigError, match="SPECWATCH_STALE_AFTR"):
        load_config(None, {"log_files": ["a"]}, environ={"SPECWATCH_STALE_AFTR": "5"})


def test_bad_environment_value_names_key_and_source() -> None:
    with pytest.raises(ConfigError, match=r"stale_after.*environment"):
        load_config(
            None, None, environ={"SPECWATCH_STALE_AFTER": "soon", "SPECWATCH_LOG_FILE": "a"}
        )


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("SPECWATCH_STALE_AFTER", "inf"),
        ("SPECWATCH_LOG_MISSING_GRACE", "1e400"),
        ("SPECWATCH_EXPECTED_ACCEPT_LENGTH", "inf"),
        ("SPECWATCH_MAX_LINE_BYTES", "1000000000"),
    ],
)
def test_unbounded_environment_values_name_the_variable(var: str, value: str) -> None:
    with pytest.raises(ConfigError, match=rf"\(environment variable {var}\)"):
        load_config(None, None, environ={var: value, "SPECWATCH_LOG_FILE": "a"})


def test_invalid_yaml_and_missing_file_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "targets: [\n"), None, environ={})
    with pytest.raises(ConfigError, match=r"missing\.yaml"):
        load_config(tmp_path / "missing.yaml", None, environ={})


def test_nothing_to_watch_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="targets"):
        load_config(None, None, environ={})
    # A file of custom rules alone (a fragment pasted on its own) names what it lacks.
    with pytest.raises(ConfigError, match="targets in the config"):
        load_config(write(tmp_path, "custom_rules: []\n"), None, environ={})


@pytest.mark.parametrize("var", ["SPECWATCH_NAME", "SPECWATCH_LOG_FILES"])
def test_aliased_key_answers_only_to_its_documented_variable(var: str) -> None:
    """SPECWATCH_TARGET and SPECWATCH_LOG_FILE are the names; the key's own spelling is a typo."""
    with pytest.raises(ConfigError, match=var):
        load_config(None, {"log_files": ["a"]}, environ={var: "x"})


def test_a_settings_file_over_a_mebibyte_is_refused_unread(tmp_path: Path) -> None:
    """A 100 MB config took 40 s and 231 MB before its error."""
    big = tmp_path / "big.yaml"
    big.write_text("targets: [{log_files: [a]}]\n" + "# padding\n" * 200_000)
    with pytest.raises(ConfigError, match=r"big\.yaml: larger than 1048576 bytes"):
        load_config(big, None, environ={})


def test_a_check_across_a_targets_keys_names_where_the_refused_key_came_from() -> None:
    """Not "(defaults)": the user gave --log-file, and that is what to change."""
    with pytest.raises(ConfigError, match=r"log_files: .* \(--log-file\)$"):
        load_config(None, {"engine": "trtllm", "log_files": ["server.log"]}, environ={})
    with pytest.raises(ConfigError, match=r"log_files: .* \(environment variable SPECWATCH_LOG_"):
        load_config(None, {"engine": "trtllm"}, environ={"SPECWATCH_LOG_FILE": "server.log"})


@pytest.mark.parametrize(
    ("value", "meant"),
    [("yes", True), ("On", True), ("t", True), ("1", True), ("no", False), ("off", False)],
)
def test_a_flag_variable_takes_the_usual_words_for_true_and_false(value: str, meant: bool) -> None:
    env = {"SPECWATCH_FROM_BEGINNING": value, "SPECWATCH_LOG_FILE": "a"}
    assert load_config(None, None, environ=env).from_beginning is meant


def test_a_word_for_true_is_no_value_of_a_key_that_is_not_a_flag() -> None:
    with pytest.raises(ConfigError, match=r"^max_dp_ranks: must be a whole number \(environment"):
        load_config(
            None, None, environ={"SPECWATCH_MAX_DP_RANKS": "yes", "SPECWATCH_LOG_FILE": "a"}
        )
