"""An SGLang log line before it has a time: what was said, by which process, how far in.

Lines are made on a simulated clock and stamped only when written (``SimulatedLine``), so the
same sequence serves a reproducible file (fixed start) and a live, paced log (wall-clock
stamps).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

READY = "The server is fired up and ready to roll!"


@dataclass(frozen=True, slots=True)
class LogEvent:
    offset: float  # seconds since the first line of the log
    message: str
    rank: str | None = None  # scheduler prefix such as "TP0"; None for the main process
    bare: bool = False  # printed before SGLang configured its logger: no prefix at all
    stream: str = "stderr"  # SGLang logs to stderr, uvicorn's access log to stdout
    json_stamp: bool = False  # a JSON record whose empty "timestamp" gets the time it is written

    @property
    def ready(self) -> bool:
        return self.message == READY

    def render(self, moment: datetime) -> str:
        """The line as SGLang's formatter prints it: ``[%Y-%m-%d %H:%M:%S TP0] message``."""
        if self.bare:
            return self.message
        stamp = moment.strftime("%Y-%m-%d %H:%M:%S")
        if self.json_stamp:  # SGLang's log_json: datetime.now().isoformat()
            message = self.message.replace(
                '"timestamp": ""', f'"timestamp": "{moment.replace(tzinfo=None).isoformat()}"', 1
            )
            return f"[{stamp}] {message}"
        if self.rank:
            stamp = f"{stamp} {self.rank}"
        return f"[{stamp}] {self.message}"


def access(offset: float, client: str, request: str, status: str) -> LogEvent:
    """A uvicorn access line in the format SGLang rewrites uvicorn's logger to."""
    return LogEvent(offset, f'INFO:     {client} - "{request} HTTP/1.1" {status}', stream="stdout")
