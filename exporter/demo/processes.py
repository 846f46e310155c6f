"""The demo's child processes: started with their output in a file, stopped as a group."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from exporter.demo.console import say
from exporter.demo.loopback import wait_until

STOP_GRACE_SECONDS = 5.0


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        """The end of its output: what explains an exit without flooding the terminal."""
        return self.log.read_text(errors="replace")[-2000:]

    def listening(self, line: re.Pattern[str], seconds: float) -> int | None:
        """The port it says it listens on, in the first group of ``line`` in its output; None
        once it has exited without saying so (a port taken), or after ``seconds``."""
        found: list[int] = []

        def said() -> bool:
            exited = self.proc.poll() is not None  # before reading: its last words count
            match = line.search(self.log.read_text(errors="replace"))
            if match is not None:
                found.append(int(match.group(1)))
            return match is not None or exited

        wait_until(said, seconds)
        return found[0] if found and self.proc.poll() is None else None


@dataclass
class Processes:
    """The demo's children, each in its own session so one signal reaches its whole group."""

    workdir: Path
    children: list[Child] = field(default_factory=list)
    ended: list[Child] = field(default_factory=list)  # dropped: their output still explains

    def spawn(self, name: str, argv: list[str]) -> Child:
        tries = sum(1 for child in (*self.children, *self.ended) if child.name == name)
        log = self.workdir / (f"{name}.out" if not tries else f"{name}-{tries + 1}.out")
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        child = Child(name, proc, log)
        self.children.append(child)
        say(f"  started {name} (pid {proc.pid})")
        return child

    def stop(self) -> None:
        """Terminate every group, give them a moment, then kill what is left."""
        for child in self.children:
            _signal_group(child.proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for child in self.children:
            try:
                child.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _signal_group(child.proc, signal.SIGKILL)
                child.proc.wait()
        self.children.clear()

    def drop(self, child: Child) -> None:
        """Stop a child that did not come up (its port taken, say) and keep only its output:
        the demo goes on without it."""
        _signal_group(child.proc, signal.SIGKILL)
        child.proc.wait()
        self.children.remove(child)
        self.ended.append(child)

    def dead(self) -> Child | None:
        return next((c for c in self.children if c.proc.poll() is not None), None)


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group already exited
        os.killpg(proc.pid, signum)
