"""Directory notifications (Linux inotify, through libc), used only as a wake-up hint.

Polling stays the source of truth: inotify drops events when its queue overflows, never sees
writes made over NFS, and a watch on the file itself follows the inode away after a rename. So
the tail loop watches the *parent directory* of each followed file; any change there only
makes that file's next pass happen sooner. Where inotify is missing (not Linux, no libc
symbol, limits exhausted), tailers poll alone.

Called directly rather than through watchdog: watchdog turns every write into Python event
objects passed between two threads (a live node's log is written a line at a time, so that
was 30 to 44% of the daemon's CPU). Here the loop reads whatever piled up in one ``read`` when
it is about to make a pass anyway, and only the directory and file name of each event are
looked at: a hundred logs in one directory each wake for their own writes, not for all.

A second instance (``Inotify.open(OPENING)``) hears only files being opened. Logrotate's
``copytruncate`` opens the log to copy it before truncating it, so an open by another process
is the one warning that unread lines are about to go; the loop always listens to it. The
tailer keeps its file open, so its own reads never open it again.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import struct

log = logging.getLogger(__name__)

# inotify(7). Opens, reads and closes without a write are left out, so the tailer's own reads
# never wake it.
IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_OPEN = 0x020
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
WAKING = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)
OPENING = IN_OPEN
"""Opens of a file in a watched directory (the directory's own, by a listing, are left out)."""
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
_READ_BYTES = 64 << 10


class Inotify:
    """One inotify instance: directories watched by name, changes read as the names of the
    files that changed in each."""

    def __init__(self, fd: int, libc: ctypes.CDLL, mask: int = WAKING) -> None:
        self.fd = fd
        self._libc = libc
        self._mask = mask
        self._wd_of: dict[str, int] = {}
        self._dirs_of: dict[int, set[str]] = {}  # two names of one directory share a wd

    @classmethod
    def open(cls, mask: int = WAKING) -> Inotify | None:
        """A non-blocking instance hearing the events in ``mask``, or None (logged) where
        inotify cannot be had."""
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            init = libc.inotify_init1
        except (OSError, AttributeError) as exc:
            log.warning("file notifications unavailable, polling only: %s", exc)
            return None
        fd = init(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            reason = os.strerror(ctypes.get_errno())
            log.warning("file notifications unavailable, polling only: %s", reason)
            return None
        return cls(fd, libc, mask)

    def watch(self, directory: str) -> bool:
        """Watch ``directory``; False when that cannot be arranged (missing, or the inotify
        limits exhausted): the caller polls and may ask again later."""
        if directory in self._wd_of:
            return True
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(directory), self._mask | IN_ONLYDIR)
        if wd < 0:
            code = ctypes.get_errno()
            log.debug("cannot watch %s: %s", directory, os.strerror(code))
            return False
        self._wd_of[directory] = wd
        self._dirs_of.setdefault(wd, set()).add(directory)
        return True

    def unwatch(self, directory: str) -> None:
        wd = self._wd_of.pop(directory, None)
        if wd is None:
            return
        names = self._dirs_of.get(wd, set())
        names.discard(directory)
        if not names:
            self._dirs_of.pop(wd, None)
            self._libc.inotify_rm_watch(self.fd, wd)  # EINVAL when already gone: no matter

    def watching(self, directory: str) -> bool:
        return directory in self._wd_of

    def changed(self) -> dict[str, set[bytes] | None] | None:
        """Per watched directory with changes since the last call, the names of the files
        that changed in it (None: the directory itself, so anything in it); None when the
        queue overflowed (anything anywhere). A directory whose watch ended (it was removed)
        is forgotten, so asking to watch it again adds it anew."""
        changed: dict[str, set[bytes] | None] = {}
        while True:
            try:
                data = os.read(self.fd, _READ_BYTES)
            except BlockingIOError:
                return changed
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            if not data:
                return changed
            if not self._parse(data, changed):
                return None

    def _parse(self, data: bytes, changed: dict[str, set[bytes] | None]) -> bool:
        """Adds the changes ``data`` holds; False on a queue overflow."""
        offset, end = 0, len(data)
        while offset < end:
            wd, mask, _, length = _HEADER.unpack_from(data, offset)
            start, offset = offset + _HEADER.size, offset + _HEADER.size + length
            if mask & IN_Q_OVERFLOW:
                return False
            names = self._dirs_of.get(wd)
            if not names or mask & (IN_OPEN | IN_ISDIR) == IN_OPEN | IN_ISDIR:
                continue  # a directory listed (a glob's own listing among them) reads nothing
            name = data[start:offset].rstrip(b"\0") if length else None
            for directory in names:
                files = changed.setdefault(directory, set())
                if files is not None and name is not None:
                    files.add(name)
                else:
                    changed[directory] = None
            if mask & IN_IGNORED:
                for gone in self._dirs_of.pop(wd):
                    del self._wd_of[gone]
        return True

    def close(self) -> None:
        os.close(self.fd)
        self._wd_of.clear()
        self._dirs_of.clear()
