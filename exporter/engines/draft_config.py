"""The draft model's own ``config.json``, read where a target learns its path.

A sidecar usually mounts the same model volume as the server, and the server names the draft
only by path: reading the file turns a guess into proof. The path comes from the watched
server, so it is hostile input: every answer of the file system is a reason, never a crash,
and each target keeps its own few answers (``DraftLookups``), bounded, so no path of one
target is read or counted for another.
"""

from __future__ import annotations

import errno
import json
import threading
from collections import Counter, OrderedDict
from pathlib import Path

from exporter.engines.server_config import ServerConfig, coerce
from exporter.smallfile import FileRefused, read_small_file


class DraftConfigError(ValueError):
    """The draft config path names no readable draft ``config.json``; ``reason`` is one of
    ``DRAFT_CONFIG_REASONS``."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


DRAFT_CONFIG_REASONS = (
    "absent",  # nothing at the path here (a hub id, or a volume this container lacks)
    "permission",
    "name_too_long",
    "bad_name",  # a NUL byte, or text no file name can hold (a lone surrogate)
    "not_regular",
    "too_large",
    "invalid",  # not a JSON object
    "io",  # any other error of the file system
)
# Linux's PATH_MAX; a longer path cannot name a file, and is not worth a system call.
MAX_PATH_CHARS = 4096
_SHOWN_PATH_CHARS = 200
_ERRNO_REASONS = {
    errno.ENOENT: "absent",
    errno.ENOTDIR: "absent",
    errno.EACCES: "permission",
    errno.EPERM: "permission",
    errno.ENAMETOOLONG: "name_too_long",
}


def from_draft_config(path: str | Path) -> ServerConfig:
    """A config from a draft model's ``config.json`` (or the folder holding it).

    Total: the path may come from the watched server, so whatever the file system answers
    (no permission on a parent, a name too long, a FIFO) is a ``DraftConfigError``.
    """
    file = Path(path)
    if len(str(path)) > MAX_PATH_CHARS:
        raise DraftConfigError(f"{_shown(file)}: path too long", "name_too_long")
    try:
        if file.is_dir():
            file = file / "config.json"
        data = json.loads(read_small_file(file, MAX_DRAFT_CONFIG_BYTES))
    except FileRefused as exc:  # a FIFO or device, or a file of more than a config
        raise DraftConfigError(f"{_shown(file)} is {exc}", exc.reason) from exc
    except OSError as exc:
        reason = _ERRNO_REASONS.get(exc.errno or 0, "io")
        raise DraftConfigError(f"cannot read {_shown(file)}: {exc.strerror}", reason) from exc
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise DraftConfigError(f"{_shown(file)} is not valid JSON: {exc}", "invalid") from exc
    except ValueError as exc:  # the path itself: a NUL byte, a lone surrogate
        raise DraftConfigError(f"{_shown(file)!r} cannot name a file: {exc}", "bad_name") from exc
    if not isinstance(data, dict):
        raise DraftConfigError(f"{_shown(file)} is not a JSON object", "invalid")
    architectures = data.get("architectures")
    arch = architectures[0] if isinstance(architectures, list) and architectures else None
    return ServerConfig(
        draft_architecture=arch if isinstance(arch, str) else None,
        draft_has_eagle_config=isinstance(data.get("eagle_config"), dict),
        draft_vocab_size=coerce(data.get("draft_vocab_size"), int),
        draft_config="read",
    )


def _shown(file: Path) -> str:
    """A path for a message: a hostile one can be megabytes long."""
    text = str(file)
    return text if len(text) <= _SHOWN_PATH_CHARS else text[:_SHOWN_PATH_CHARS] + "..."


# A draft's config.json is a few kB.
MAX_DRAFT_CONFIG_BYTES = 1 << 20


def with_local_draft(config: ServerConfig, drafts: DraftLookups) -> ServerConfig:
    """``config`` plus the draft's own ``config.json`` when its path exists on this machine,
    asked of the target's own ``drafts``.

    Unreadable or remote paths (hub ids) leave the config as it was, whatever the file system
    answers. Called where the path is learnt (the upstream scraper, the tailer), never while
    rendering.
    """
    path = config.draft_model_path
    if not path or config.draft_architecture is not None:
        return config
    return config.merged(drafts.get(path))


def draft_seen(config: ServerConfig) -> str | None:
    """Where the draft's kind was learnt, in words: its ``config.json`` read here (the model
    files are mounted), the server's log, or only the algorithm (they are not). None while no
    draft is named."""
    path, arch = config.draft_model_path, config.draft_architecture
    if path is None:
        return None
    # The path is the server's text, said in a log line and a page: one printable line.
    shown = "".join(c if c.isprintable() else "?" for c in _shown(Path(path)))
    if config.draft_config == "read" and arch is not None:
        return f"{shown}: {arch}, read from its config.json here"
    if arch is not None:
        return f"{shown}: {arch}, as the server's log names it"
    if config.draft_config is None:
        return None
    algorithm = config.algorithm or "not known"
    if config.draft_config == "absent" and not path.startswith("/"):
        return (
            f"{shown}: a hub id, no file here to read, so its kind is known only from the "
            f"algorithm ({algorithm}); set draft_config to its config.json (docs/deployment.md)"
        )
    why = (
        "no config.json at that path here (the model files are not mounted)"
        if config.draft_config == "absent"
        else f"its config.json could not be read here ({config.draft_config})"
    )
    return (
        f"{shown}: {why}, so its kind is known only from the algorithm ({algorithm}); "
        "mount the model files read-only at the same path (docs/deployment.md)"
    )


class DraftLookups:
    """One target's newest few draft paths' answers, keyed by a digest: its scraper asks on
    each of its scrapes and a draft does not change, and a hostile path can be megabytes long.
    Each failure is counted once per path, by reason (``DRAFT_CONFIG_REASONS`` less
    ``absent``, the normal case of a hub id). Its tailer and scraper share it; two targets
    never do."""

    SIZE = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: OrderedDict[bytes, ServerConfig] = OrderedDict()
        self._failures: Counter[str] = Counter()

    def get(self, path: str) -> ServerConfig:
        # Imported here: hashlib loads OpenSSL's libcrypto, a cost of every start of the
        # one-shot commands, which never look a draft up.
        import hashlib

        key = hashlib.blake2b(path.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
        answer = self._read(path)
        with self._lock:
            self._answers[key] = answer
            if len(self._answers) > self.SIZE:
                self._answers.popitem(last=False)
        return answer

    def _read(self, path: str) -> ServerConfig:
        try:
            return from_draft_config(path)
        except DraftConfigError as exc:
            if exc.reason != "absent":
                with self._lock:
                    self._failures[exc.reason] += 1
            return ServerConfig(draft_config=exc.reason)

    def failure_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._failures)
