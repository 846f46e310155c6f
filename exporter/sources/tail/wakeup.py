"""Filesystem notifications used only as a wake-up hint for polling tailers.

Polling stays the source of truth: inotify drops events when its queue overflows, never sees
writes made over NFS, and a watch on the file itself follows the inode away after a rename. So
each tailer registers the *parent directory* of what it follows together with a
``threading.Event``; any change in that directory sets the event, which only makes the tailer's
next poll pass happen now instead of at the end of its sleep. One watchdog observer (one
inotify instance) serves every tailer in the process.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from watchdog.events import (
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

log = logging.getLogger(__name__)

# Events that can mean "new bytes or a new file". Opened/closed-without-write are left out so
# the tailer's own reads never wake it.
_WAKING_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    FileClosedEvent,
    FileAttribEvent,
]


class _Waker(FileSystemEventHandler):
    """Sets every registered event; setting an already-set event is how wake-ups coalesce."""

    def __init__(self) -> None:
        self.wakes: frozenset[threading.Event] = frozenset()

    def dispatch(self, event: FileSystemEvent) -> None:
        for wake in self.wakes:
            wake.set()


@dataclass
class _DirWatch:
    watch: ObservedWatch
    waker: _Waker


class WakeupObserver:
    """A shared watchdog observer; a tailer falls back to pure polling when it is unavailable."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._observer: BaseObserver | None = None
        self._dirs: dict[str, _DirWatch] = {}

    @property
    def active(self) -> bool:
        """True while the observer thread runs (watches can be added)."""
        return self._observer is not None

    def start(self) -> None:
        """Start the observer thread; on failure stay inactive so tailers just poll."""
        with self._lock:
            if self._observer is not None:
                return
            observer = Observer()
            observer.daemon = True
            try:
                observer.start()
            except (OSError, RuntimeError) as exc:
                log.warning("file notifications unavailable, polling only: %s", exc)
                return
            self._observer = observer

    def stop(self) -> None:
        """Stop the observer thread; idempotent."""
        with self._lock:
            observer, self._observer = self._observer, None
            self._dirs.clear()
        if observer is not None:
            observer.stop()
            observer.join(timeout=5.0)

    def watch(self, directory: str, wake: threading.Event) -> bool:
        """Set ``wake`` on changes in ``directory``; False when that cannot be arranged.

        A missing directory or exhausted inotify limits (ENOSPC/EMFILE) are not errors here:
        the caller keeps polling and may ask again later.
        """
        with self._lock:
            if self._observer is None:
                return False
            entry = self._dirs.get(directory)
            if entry is None:
                waker = _Waker()
                try:
                    watch = self._observer.schedule(
                        waker, directory, recursive=False, event_filter=_WAKING_EVENTS
                    )
                except OSError as exc:
                    log.debug("cannot watch %s: %s", directory, exc)
                    return False
                entry = self._dirs[directory] = _DirWatch(watch, waker)
            entry.waker.wakes = entry.waker.wakes | {wake}
            return True

    def unwatch(self, directory: str, wake: threading.Event) -> None:
        """Forget ``wake`` for ``directory``; the directory watch ends with its last user."""
        with self._lock:
            entry = self._dirs.get(directory)
            if entry is None:
                return
            entry.waker.wakes = entry.waker.wakes - {wake}
            if entry.waker.wakes or self._observer is None:
                return
            del self._dirs[directory]
            try:
                self._observer.unschedule(entry.watch)
            except KeyError:
                log.debug("watch on %s already gone", directory)
