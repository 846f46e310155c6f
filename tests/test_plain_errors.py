"""A user's mistake gets one line that names the key and, for a typo, the nearest valid one.

Never the validation library's own words ("Input should be a valid dictionary or instance of
BaselineConfig"): the line says what shape the key wants.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.cli import main
from exporter.config import load_config
from exporter.mixin_config import load_mixin_config
from exporter.settings import ConfigError


def write(tmp_path: Path, text: str, name: str = "specwatch.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), None, environ={})
    return str(caught.value)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "targets: [{log_files: [a], baseline: 1500}]\n",
            "targets.0.baseline: must be a mapping of keys (tok_s, curve, bench_file, log), "
            "e.g. baseline: {tok_s: 1500}",
        ),
        (
            "targets: [{log_files: [a], baseline: '1:82,48:1500'}]\n",
            "targets.0.baseline: must be a mapping of keys (tok_s, curve, bench_file, log), e.g. "
            'baseline: {curve: "1:82,48:1500,128:2370"}',
        ),
        (
            "targets: [{log_files: [a], expected_accept_lenght: 3}]\n",
            "targets.0.expected_accept_lenght: unknown key (did you mean expected_accept_length?)",
        ),
        (
            "stale_afer: 10\ntargets: [{log_files: [a]}]\n",
            "unknown key (did you mean stale_after?)",
        ),
        (
            "targets: [{log_files: [a], baseline: {tok: 3}}]\n",
            "targets.0.baseline.tok: unknown key (did you mean tok_s?)",
        ),
        ("stale_after: soon\ntargets: [{log_files: [a]}]\n", "stale_after: must be a number"),
        ("stale_after: -1\ntargets: [{log_files: [a]}]\n", "stale_after: must be more than 0"),
        ("from_beginning: maybe\ntargets: [{log_files: [a]}]\n", "must be true or false"),
        ("targets: {log_files: [a]}\n", "targets: must be a list"),
        ("targets: [{engine: sglan, log_files: [a]}]\n", "(did you mean sglang?)"),
    ],
)
def test_a_config_mistake_is_said_in_plain_words(tmp_path: Path, text: str, said: str) -> None:
    message = refusal(tmp_path, text)
    assert said in message
    assert "Input should" not in message and "instance of" not in message


def test_a_single_log_path_is_taken_as_a_list_of_one(tmp_path: Path) -> None:
    path = write(tmp_path, "targets: [{log_files: /var/log/sglang/server.log}]\n")
    (target,) = load_config(path, None, environ={}).targets
    assert target.log_files == ["/var/log/sglang/server.log"]


def test_the_engine_is_taken_in_any_case(tmp_path: Path) -> None:
    path = write(tmp_path, "targets: [{engine: SGLang, log_files: [a]}]\n")
    assert load_config(path, None, environ={}).targets[0].engine == "sglang"
    flags = {"engine": "vLLM", "log_files": ["a"]}
    assert load_config(None, flags, environ={}).targets[0].engine == "vllm"


def test_a_mistyped_environment_variable_suggests_the_real_one() -> None:
    with pytest.raises(ConfigError, match=r"SPECWATCH_LOG_FIL: unknown setting \(did you mean "):
        load_config(None, None, environ={"SPECWATCH_LOG_FIL": "a"})


def test_the_mixin_config_says_unknown_key_as_run_does(tmp_path: Path) -> None:
    path = write(tmp_path, "selectr: 'job=\"x\"'\n", "mixin.yaml")
    with pytest.raises(ConfigError) as caught:
        load_mixin_config(path)
    assert str(caught.value).endswith("selectr: unknown key (did you mean selector?)")


def refused_flags(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    try:
        status = main(list(argv))
    except SystemExit as exc:  # argparse's own refusals
        status = int(exc.code or 0)
    assert status == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err


def test_a_flag_typo_under_run_names_the_flag_and_runs_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = refused_flags(capsys, "run", "--log-fil", "/var/log/x.log")
    assert err.startswith("specwatch run: error: unrecognized arguments: --log-fil")
    assert "(did you mean --log-file?)" in err
    assert err.rstrip().endswith("(see specwatch run --help)")


def test_a_flag_typo_under_doctor_suggests_its_own_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = refused_flags(capsys, "doctor", "--ulr", "http://127.0.0.1:30000")
    assert "specwatch doctor: error:" in err and "(did you mean --url?)" in err


def test_the_engine_flag_is_taken_in_any_case(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused_flags(capsys, "run", "--engine", "SGLang", "--listen", "nowhere")
    assert "invalid choice" not in err
    assert "listen" in err
