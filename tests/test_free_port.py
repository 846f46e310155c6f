"""The tests' ports: one handed out by any test process on the machine is handed out by no
other, so two xdist workers (or two runs) never start servers on one port."""

from __future__ import annotations

import os
import time

from tests.support.tools import _CLAIM_DAYS, _CLAIMS, _claim, free_port


def test_a_handed_out_port_is_claimed_for_every_test_process() -> None:
    port = free_port()
    assert (_CLAIMS / str(port)).exists()
    assert not _claim(port)  # as another worker asking for it finds


def test_a_port_another_process_claimed_is_not_claimed_until_its_claim_is_gone() -> None:
    port = free_port()
    claim = _CLAIMS / str(port)
    assert not _claim(port)
    old = time.time() - _CLAIM_DAYS * 86400 - 60  # left by a run that was killed
    os.utime(claim, (old, old))
    assert _claim(port)
    assert claim.exists() and time.time() - claim.stat().st_mtime < 86400
