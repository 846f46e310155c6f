"""The served model on ``specwatch_target_info``: what a fleet view groups by.

The name clients ask for comes from the server itself (SGLang's ``served_model_name`` in its
``server_args`` line or ``/server_info``, vLLM's in its engine configuration line or the
``model_name`` label of its ``/metrics``), or from the target's config, which wins. It is a label
value from hostile input, so it is bounded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.simulate import ENGINES as SIMULATED
from tests.support.daemon import run_daemon, simulated_log
from tests.support.loglines import decode, startup
from tests.support.metrics import Scrape
from tests.support.tools import free_port
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e


def served_model(log: Path, *flags: str) -> str:
    """The served_model label of the target's info series once the whole log is read."""
    lines = sum(1 for _ in log.open(encoding="utf-8"))
    args = ["--log-file", str(log), "--from-beginning", *flags]
    with run_daemon(args, free_port()) as daemon:

        def read_through() -> Scrape | None:
            scrape = daemon.scrape()
            return scrape if (scrape.value("specwatch_log_lines_total") or 0) >= lines else None

        scrape = wait_for(read_through, timeout=30)
    (info,) = [s for s in scrape.samples if s.name == "specwatch_target_info"]
    return info.labels.get("served_model", "")


@pytest.mark.parametrize("engine", SIMULATED)
def test_the_served_model_is_the_servers_own_name(engine: str, tmp_path: Path) -> None:
    assert served_model(simulated_log(tmp_path, "healthy", engine)) == "moonshotai/Kimi-K2.5"


def test_the_configured_name_wins(tmp_path: Path) -> None:
    log = simulated_log(tmp_path, "healthy")
    config = tmp_path / "specwatch.yaml"
    config.write_text(
        f"targets:\n  - name: kimi\n    log_files: [{log}]\n    served_model: kimi-prod\n"
    )
    assert served_model(log, "--config", str(config)) == "kimi-prod"


def with_served_name(name: str) -> list[str]:
    """SGLang's startup, its ServerArgs line naming ``name`` as the served model."""
    lines = startup()
    lines[0] = lines[0].replace(
        "tokenizer_mode='auto'", f"served_model_name='{name}', tokenizer_mode='auto'"
    )
    return [*lines, decode(60, 3.0, 0.67)]


def test_a_local_path_keeps_its_last_two_components(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(with_served_name("/mnt/nvme0/team-a/ckpt/kimi-k25-sft/")) + "\n")
    assert served_model(log) == "ckpt/kimi-k25-sft"


def test_a_hostile_name_is_bounded(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(with_served_name("org/" + "m" * 5000)) + "\n")
    label = served_model(log)
    assert label.startswith("org/mmm") and len(label) == 128
