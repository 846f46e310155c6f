"""One thread that makes every followed file's passes, woken by directory notifications.

A thread per file made 100 logs 100 threads taking turns at the interpreter lock, each woken
by every line its server wrote. Here each file (a ``Job``: ``step()`` makes one pass and says
how soon it wants the next) has a due time, and one thread sleeps until the earliest, or until
inotify (``wakeup.Inotify``) says a watched directory changed.

A pass costs the same for one line as for a hundred (most of it is waking a thread on a busy
node and walking code gone cold since the last), so passes are few: a notification brings a
file's pass forward only to the loop's next tick (every ``COALESCE`` seconds), where every
file written since the last tick is read, one after another; while a tick is pending, further
notifications are left queued in the kernel and read together at it. After a tick that read
files, the loop does not listen for the next write: it looks at the queued notifications at
the following tick itself, so a server writing steadily costs one wake-up a second, not two.

What a scrape shows is still current: ``sync()``, called before rendering, reads the queued
notifications and makes the pass of every file written since its last, at once, and waits for
them.

Nor does a copy: logrotate's ``copytruncate`` opens the log, copies it and truncates it, and
what was written since the last pass and not read before the truncation is gone. An open of a
followed file by another process (heard on a second inotify instance, which the loop always
listens to: opens are rare, writes are not) makes that file's pass at once, before the copy
ends, so the lines lost are those of the copy's own milliseconds, not of up to a tick.

Passes of different files run one after another, each bounded by the tailer's read budget.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import threading
import time
from typing import Protocol

from exporter.sources.tail.wakeup import OPENING, Inotify

log = logging.getLogger(__name__)

COALESCE = 1.0
"""Seconds between the loop's ticks: a file written to is read at the next tick (or at the
next ``sync()``, whichever comes first). Passes that a full read budget asks for, and polls,
are not held back."""

GRID = 0.05
"""Other passes (polls, idle checks) are due on multiples of this many seconds, so that the
files whose passes fell due together stay together and share one wake-up."""


class Job(Protocol):
    def step(self) -> float:
        """One pass; returns the seconds until the next one is wanted (``inf``: never)."""
        ...


class TailLoop:
    """Runs every added job's passes in one thread; notifications only bring them forward."""

    def __init__(self, notify: bool = True, coalesce: float = COALESCE) -> None:
        self._notify = notify
        self._coalesce = coalesce
        self._lock = threading.Lock()
        self._passed = threading.Condition(self._lock)  # a pass ended (for sync())
        self._due: dict[Job, float] = {}
        self._woken: set[Job] = set()  # written to (a notification said), pass not begun
        self._running: Job | None = None  # the job whose pass is in progress
        self._passes = 0  # passes begun so far
        self._begun: dict[Job, int] = {}  # the number of each job's latest pass
        self._syncing = 0  # sync() calls waiting
        # The tick at which the loop reads the queued notifications itself instead of
        # listening for them (files were written to lately); None: it listens.
        self._look_at: float | None = None
        self._dir_of: dict[Job, str] = {}
        self._names_of: dict[Job, frozenset[bytes] | None] = {}  # None: any file there
        self._jobs_in: dict[str, set[Job]] = {}
        self._inotify: Inotify | None = None
        self._opens: Inotify | None = None  # opens of the watched files: read them at once
        self._control: tuple[int, int] | None = None  # a pipe that ends the loop's sleep
        self._thread: threading.Thread | None = None
        self._stopping = False

    @property
    def active(self) -> bool:
        """Whether directory notifications are available (else every job polls alone)."""
        return self._inotify is not None

    def start(self) -> None:
        """Start the thread (idempotent); without inotify, jobs are polled only."""
        with self._lock:
            if self._thread is not None:
                return
            self._stopping = False
            self._inotify = Inotify.open() if self._notify else None
            self._opens = Inotify.open(OPENING) if self._inotify is not None else None
            read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self._control = (read_end, write_end)
            self._thread = threading.Thread(target=self._run, name="specwatch-tail", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread after the pass in progress (idempotent)."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stopping = True
            self._poke()
            self._passed.notify_all()
        if thread is not None:
            thread.join(timeout)

    def add(self, job: Job) -> None:
        """Make ``job``'s first pass now."""
        with self._lock:
            self._due[job] = 0.0
            self._poke()

    def remove(self, job: Job) -> None:
        """Make no further pass of ``job`` (one in progress ends on its own)."""
        with self._lock:
            self._due.pop(job, None)
            self._begun.pop(job, None)
            self._woken.discard(job)
            self._leave_dir(job)
            self._passed.notify_all()

    def sync(self, timeout: float) -> bool:
        """Read what was written to any followed file before this call, now: the pass of
        every file a notification named since its last pass, waited for (at most ``timeout``
        seconds; False when that ran out). A scrape calls it before rendering, so what it
        shows never waits for the next tick. Files followed by polling alone (no
        notifications) are read on their own schedule."""
        with self._lock:
            if self._thread is None or self._stopping or threading.current_thread() is self._thread:
                return True
            if self._inotify is not None:
                self._take_notifications(self._inotify)
            # A pass under way may be the one the loop began for a write before this call
            # (its notification taken at the tick): it is waited for too, or the scrape showed
            # the lines before that write.
            running = self._running
            ongoing = self._begun.get(running) if running is not None else None
            if not self._woken and running is None:
                return True
            wanted = set(self._woken)
            for job in wanted:
                self._due[job] = 0.0
            asked = self._passes
            self._poke()
            deadline = time.monotonic() + timeout
            self._syncing += 1
            try:
                while not self._stopping and (
                    self._under_way(running, ongoing)
                    or any(self._pending(job, asked) for job in wanted)
                ):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._passed.wait(left)
            finally:
                self._syncing -= 1
            return True

    def _under_way(self, job: Job | None, number: int | None) -> bool:
        """Whether ``job``'s pass numbered ``number`` has yet to end."""
        return job is not None and self._running is job and self._begun.get(job) == number

    def _pending(self, job: Job, asked: int) -> bool:
        """Whether ``job`` has yet to end a pass begun after ``asked`` passes."""
        if job not in self._due:
            return False
        return self._running is job or self._begun.get(job, 0) <= asked

    def watch(self, job: Job, directory: str | None, names: frozenset[bytes] | None = None) -> bool:
        """Have changes to the files ``names`` (None: any) of ``directory`` bring ``job``'s
        next pass forward (``directory`` None: nothing does); True while a notification will
        come, so the job may sleep longer between polls."""
        watched = directory is not None and self._dir_of.get(job) == directory
        if watched and self._names_of.get(job) == names:  # as every pass asks: nothing to do
            return True
        with self._lock:
            if self._dir_of.get(job) != directory:
                self._leave_dir(job)
            inotify = self._inotify
            if directory is None or inotify is None or job not in self._due:
                return False
            if not inotify.watch(directory):
                return False
            if self._opens is not None:
                self._opens.watch(directory)  # failing, a copy waits for the tick as writes do
            self._dir_of[job] = directory
            self._names_of[job] = names
            self._jobs_in.setdefault(directory, set()).add(job)
            return True

    def _leave_dir(self, job: Job) -> None:
        self._names_of.pop(job, None)
        directory = self._dir_of.pop(job, None)
        if directory is None:
            return
        jobs = self._jobs_in.get(directory, set())
        jobs.discard(job)
        if not jobs:
            self._jobs_in.pop(directory, None)
            for instance in (self._inotify, self._opens):
                if instance is not None:
                    instance.unwatch(directory)

    def _poke(self) -> None:
        """End the loop's sleep (called with the lock held)."""
        if self._control is not None:
            with contextlib.suppress(BlockingIOError):  # already poked
                os.write(self._control[1], b"x")

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        control = self._control
        assert control is not None
        poller = select.poll()
        poller.register(control[0], select.POLLIN)
        inotify, opens = self._inotify, self._opens
        if opens is not None:
            poller.register(opens.fd, select.POLLIN)
        listening = False
        try:
            while True:
                with self._lock:
                    if self._stopping:
                        return
                    # While a tick is pending, more notifications change nothing: they stay
                    # in the kernel's queue and are read together at it.
                    listen = inotify is not None and not self._woken and self._look_at is None
                    wake = min(self._due.values(), default=math.inf)
                    wait = min(wake, self._look_at or math.inf) - time.monotonic()
                if listen != listening and inotify is not None:
                    if listen:
                        poller.register(inotify.fd, select.POLLIN)
                    else:
                        poller.unregister(inotify.fd)
                    listening = listen
                if wait > 0:
                    ready = poller.poll(None if math.isinf(wait) else math.ceil(wait * 1000))
                    if any(fd == control[0] for fd, _ in ready):
                        with contextlib.suppress(BlockingIOError):
                            os.read(control[0], 4096)
                    if opens is not None and any(fd == opens.fd for fd, _ in ready):
                        with self._lock:
                            self._take_opens(opens)
                if inotify is not None:
                    with self._lock:  # a tailer stopping elsewhere may be unwatching meanwhile
                        self._look(inotify)
                self._run_due()
        finally:
            self._close(inotify, opens, control)

    def _look(self, inotify: Inotify) -> None:
        """Take the queued notifications; at the tick the loop was to look at them, the files
        they name are read now (called with the lock held)."""
        look_at, now = self._look_at, time.monotonic()
        at_tick = look_at is not None and now >= look_at
        if at_tick:
            self._look_at = None
        self._take_notifications(inotify, now if at_tick else None)

    def _take_notifications(self, inotify: Inotify, at: float | None = None) -> None:
        """Bring the passes of the jobs in every changed directory forward to the next tick
        (or to ``at``), and look again at the tick after (called with the lock held)."""
        try:
            changed = inotify.changed()
        except OSError:
            log.debug("reading notifications failed", exc_info=True)
            changed = None
        if changed is None:  # overflowed: anything may have changed
            jobs = set(self._due)
        else:
            jobs = self._concerned(changed)
            for name in changed:
                if not inotify.watching(name):  # removed: forget it, the job asks again
                    for job in self._jobs_in.pop(name, set()):
                        self._dir_of.pop(job, None)
                        self._names_of.pop(job, None)
        if not jobs:
            return
        tick = self._tick_after(time.monotonic()) if at is None else at
        self._look_at = self._tick_after(tick)
        for job in jobs:
            due = self._due.get(job)
            if due is None:
                continue
            # Mid-pass, it may have read before the write: the pass after it is due.
            self._due[job] = tick if self._running is job else min(tick, due)
            self._woken.add(job)

    def _take_opens(self, opens: Inotify, ran: Job | None = None) -> None:
        """Make the pass of every job whose file another process opened (a copy may be about
        to truncate it) now; ``ran``, the job whose pass just ended, is left out: its own
        opens (a new file followed) are no news, and it has just read (called with the lock
        held)."""
        try:
            changed = opens.changed()
        except OSError:
            log.debug("reading open notifications failed", exc_info=True)
            changed = None
        for job in set(self._due) if changed is None else self._concerned(changed):
            if job in self._due and job is not ran:
                self._due[job] = 0.0  # mid-pass: the pass after it, at once
                self._woken.add(job)

    def _concerned(self, changed: dict[str, set[bytes] | None]) -> set[Job]:
        """The jobs watching a file that changed, or a directory that did."""
        jobs: set[Job] = set()
        for directory, files in changed.items():
            for job in self._jobs_in.get(directory, ()):
                names = self._names_of.get(job)
                if files is None or names is None or not names.isdisjoint(files):
                    jobs.add(job)
        return jobs

    def _run_due(self) -> None:
        """Make the pass of every job that is due, earliest first; a ``sync()`` waiting is
        woken once they are made, not after each (a scrape of 100 logs written to was woken
        a hundred times, to look at the passes of all of them each time)."""
        now = time.monotonic()
        with self._lock:
            due = sorted((at, id(job), job) for job, at in self._due.items() if at <= now)
        for _, _, job in due:
            with self._lock:
                if job not in self._due or self._stopping:
                    continue
                self._woken.discard(job)
                self._passes += 1
                self._begun[job] = self._passes
                self._running = job
            delay = self._step(job)
            with self._lock:
                self._running = None
                if self._opens is not None:
                    self._take_opens(self._opens, ran=job)
                if job in self._due:
                    after = self._after(delay)
                    # Woken again while it ran: the notification's tick stands, if sooner.
                    woken = job in self._woken
                    self._due[job] = min(after, self._due[job]) if woken else after
        if due:
            with self._lock:
                if self._syncing:
                    self._passed.notify_all()

    def _tick_after(self, moment: float) -> float:
        return (math.floor(moment / self._coalesce) + 1) * self._coalesce

    @staticmethod
    def _after(delay: float) -> float:
        """When a pass asked for ``delay`` seconds from now is due: at once, never, or on
        the grid."""
        if delay <= 0 or math.isinf(delay):
            return time.monotonic() + delay
        return math.ceil((time.monotonic() + delay) / GRID) * GRID

    @staticmethod
    def _step(job: Job) -> float:
        try:
            return job.step()
        except Exception:  # a job keeps its own counts; the loop must outlive any of them
            log.exception("tail pass failed")
            return 1.0

    def _close(
        self, inotify: Inotify | None, opens: Inotify | None, control: tuple[int, int]
    ) -> None:
        """Release this thread's notifications and pipe (a later start() makes its own)."""
        with self._lock:
            for instance in (inotify, opens):
                if instance is not None:
                    instance.close()
            if self._opens is opens:
                self._opens = None
            if self._inotify is inotify:
                self._inotify = None
                self._dir_of.clear()
                self._jobs_in.clear()
            if self._control is control:
                self._control = None
            self._passed.notify_all()
        for fd in control:
            os.close(fd)
