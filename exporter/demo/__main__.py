"""``python -m exporter.demo``: run the stack, narrate until the deadline or Ctrl-C, clean up.

Environment: ``DEMO_SECONDS`` (stop after this many seconds), ``DEMO_SCENARIO`` (another
simulator scenario), ``DEMO_ENGINE`` (another engine whose log the simulator writes).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from exporter.demo.console import say
from exporter.demo.loopback import fetch
from exporter.demo.narrator import Narrator, read_metrics
from exporter.demo.prometheus import alert_states
from exporter.demo.stack import Demo
from exporter.simulate import DEFAULT_ENGINE, ENGINES, playable

POLL_SECONDS = 3.0


def watch(demo: Demo, deadline: float | None) -> int:
    """Print what specwatch sees until the deadline; a child that dies ends the demo."""
    if deadline is None:
        say("  Ctrl-C stops the demo and everything it started")
    else:
        say(f"  stopping by itself in {_left(deadline):.0f} s (DEMO_SECONDS); Ctrl-C: sooner")
    narrator = Narrator()
    while deadline is None or time.monotonic() < deadline:
        dead = demo.processes.dead()
        if dead is not None:
            say(f"{dead.name} exited with status {dead.proc.returncode}; its output:")
            say(dead.tail())
            return 1
        text = fetch(demo.metrics_url)
        if text is not None:
            narrator.metrics(read_metrics(text))
        if demo.prometheus_url:
            states = alert_states(demo.prometheus_url)
            if states is not None:
                narrator.prometheus_alerts(states)
        time.sleep(POLL_SECONDS if deadline is None else min(POLL_SECONDS, _left(deadline)))
    return 0


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)


def _deadline() -> float | None:
    raw = os.environ.get("DEMO_SECONDS")
    if not raw:
        return None
    seconds = float(raw)
    if seconds <= 0:
        raise ValueError(raw)
    return time.monotonic() + seconds


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> int:
    try:
        deadline = _deadline()
    except ValueError:
        print("demo: DEMO_SECONDS must be a positive number of seconds", file=sys.stderr)
        return 2
    scenario = os.environ.get("DEMO_SCENARIO", "recovery")
    engine = os.environ.get("DEMO_ENGINE", DEFAULT_ENGINE)
    if engine not in ENGINES:
        print(f"demo: DEMO_ENGINE must be one of {', '.join(ENGINES)}", file=sys.stderr)
        return 2
    known = playable(engine)
    if scenario not in known:
        print(f"demo: DEMO_SCENARIO must be one of {', '.join(known)}", file=sys.stderr)
        return 2
    # Ctrl-C as well: a shell that starts the demo in the background (or a CI runner) passes
    # SIGINT on ignored, and Python then leaves it ignored, so Ctrl-C stopped nothing.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    with tempfile.TemporaryDirectory(prefix="specwatch-demo-") as workdir:
        demo = Demo(Path(workdir), scenario, engine)
        try:
            status = watch(demo, deadline) if demo.start() else _failed(demo)
        except KeyboardInterrupt:
            say("interrupted")
            status = 0
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not orphan
            demo.stop()
        say("demo stopped; every process it started has exited")
    return status


def _failed(demo: Demo) -> int:
    say("the exporter did not come up; its output:")
    for child in demo.processes.children:
        say(child.tail())
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
