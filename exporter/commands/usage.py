"""How a command says its input is wrong: one line, exit status 2.

Scripts, systemd and log collectors read the last line of a failed start, so every usage
problem, from argparse or from a command's own checks, ends as one line naming the option.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from exporter.suggest import nearest


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
        self.exit(
            2, f"{self.prog}: error: {message}{self._nearest(message)} (see {self.prog} --help)\n"
        )

    def unrecognized(self, extra: list[str]) -> NoReturn:
        """Arguments none of this command's flags take, said by this command (not the top
        level, whose help lists no flag of it)."""
        self.error(f"unrecognized arguments: {' '.join(extra)}")

    def _nearest(self, message: str) -> str:
        """The flag meant by the first unrecognised one, for a typo (``--log-fil``)."""
        if not message.startswith("unrecognized arguments: "):
            return ""
        first = message.removeprefix("unrecognized arguments: ").split()[0].partition("=")[0]
        if not first.startswith("--"):
            return ""
        flags = [flag for flag in self._option_string_actions if flag.startswith("--")]
        return nearest(first, flags)
