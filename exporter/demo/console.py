"""The demo's one way to print: whole lines, from the main loop and the webhook thread alike."""

from __future__ import annotations

import os
import sys
import threading

_print_lock = threading.Lock()


def say(text: str) -> None:
    """One line to the user; the webhook thread prints too, so lines must not interleave."""
    with _print_lock:
        try:
            print(text, flush=True)
        except BrokenPipeError:
            # The reader went away (`make demo | head`): keep running quietly, stop cleanly.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
