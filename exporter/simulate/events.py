"""A log line before it has a time: what was said, by which process, how far into the log.

Lines are generated on a simulated clock and stamped only when written, so the same sequence
serves a reproducible file (fixed start) and a live, paced log (wall-clock stamps).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

VLLM_TAG = "\x1b[0;36m(APIServer pid=1)\x1b[0;0m "


@dataclass(frozen=True, slots=True)
class LogEvent:
    offset: float  # seconds since the first line of the log
    message: str
    rank: str | None = None  # scheduler prefix such as "TP0"; None for the main process
    bare: bool = False  # printed before SGLang configured its logger: no prefix at all
    stream: str = "stderr"  # SGLang logs to stderr, uvicorn's access log to stdout
    vllm_file: str | None = None  # vLLM's formatter and this ``file:line``, instead of SGLang's
    json_stamp: bool = False  # a JSON record whose empty "timestamp" gets the time it is written

    def render(self, moment: datetime) -> str:
        """The line as SGLang's formatter prints it: ``[%Y-%m-%d %H:%M:%S TP0] message``.

        A vLLM line reads ``(APIServer pid=1) INFO 05-06 06:11:23 [metrics.py:101] message``,
        its process tag in ANSI cyan as vLLM writes it even into files.
        """
        if self.bare:
            return self.message
        if self.vllm_file is not None:
            stamp = moment.strftime("%m-%d %H:%M:%S")
            return f"{VLLM_TAG}INFO {stamp} [{self.vllm_file}] {self.message}"
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
