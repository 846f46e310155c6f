"""How a command says its input is wrong: one line, exit status 2.

Scripts, systemd and log collectors read the last line of a failed start, so every usage
problem, from argparse or from a command's own checks, ends as one line naming the option.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn


class UsageError(Exception):
    """A bad flag or config value: reported on one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """Report usage errors on one line: scripts and log collectors read the last line only.

    Abbreviated options are refused: ``--baseline-curv`` silently taken as ``--baseline-curve``
    works until another flag shares the prefix, and then a deployment stops starting.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def format_help(self) -> str:
        # Descriptions come from docstrings, whose ``literal`` markup means nothing in a terminal.
        return super().format_help().replace("``", "")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
