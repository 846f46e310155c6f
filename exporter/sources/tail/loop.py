"""One thread that makes every followed file's passes, woken by directory notifications.

A thread per file made 100 logs 100 threads taking turns at the interpreter lock, each woken
by every line its server wrote. Here each file (a ``Job``: ``step()`` makes one pass and says
how soon it wants the next) has a due time, and one thread sleeps until the earliest, or until
inotify (``wakeup.Inotify``) says a watched directory changed. A woken file's pass comes at
most once per ``COALESCE`` seconds: a server writing a line at a time is read a batch at a
time, and while a woken pass waits, further notifications are left queued in the kernel and
read together before it.

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

from exporter.sources.tail.wakeup import Inotify

log = logging.getLogger(__name__)

COALESCE = 0.1
"""Least seconds from the start of one pass of a file to a pass woken by a notification.
Passes that a full read budget asks for, and polls, are not held back."""


class Job(Protocol):
    def step(self) -> float:
        """One pass; returns the seconds until the next one is wanted (``inf``: never)."""
        ...


class TailLoop:
    """Runs every added job's passes in one thread; notifications only bring them forward."""

    def __init__(self, notify: bool = True) -> None:
        self._notify = notify
        self._lock = threading.Lock()
        self._due: dict[Job, float] = {}
        self._started: dict[Job, float] = {}  # when each job's last pass began
        self._woken: set[Job] = set()  # brought forward by a notification, pass not made yet
        self._dir_of: dict[Job, str] = {}
        self._names_of: dict[Job, frozenset[bytes] | None] = {}  # None: any file there
        self._jobs_in: dict[str, set[Job]] = {}
        self._inotify: Inotify | None = None
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
            self._started.pop(job, None)
            self._woken.discard(job)
            self._leave_dir(job)

    def watch(self, job: Job, directory: str | None, names: frozenset[bytes] | None = None) -> bool:
        """Have changes to the files ``names`` (None: any) of ``directory`` bring ``job``'s
        next pass forward (``directory`` None: nothing does); True while a notification will
        come, so the job may sleep longer between polls."""
        with self._lock:
            if self._dir_of.get(job) != directory:
                self._leave_dir(job)
            inotify = self._inotify
            if directory is None or inotify is None or job not in self._due:
                return False
            if not inotify.watch(directory):
                return False
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
            if self._inotify is not None:
                self._inotify.unwatch(directory)

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
        inotify = self._inotify
        listening = False
        try:
            while True:
                with self._lock:
                    if self._stopping:
                        return
                    # While a woken pass waits, more notifications change nothing: they stay
                    # in the kernel's queue and are read together before that pass.
                    listen = inotify is not None and not self._woken
                    wait = min(self._due.values(), default=math.inf) - time.monotonic()
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
                if inotify is not None:
                    self._take_notifications(inotify)
                self._run_due()
        finally:
            self._close(inotify, control)

    def _take_notifications(self, inotify: Inotify) -> None:
        """Bring forward the passes of the jobs in every changed directory."""
        with self._lock:  # a tailer stopping elsewhere may be unwatching meanwhile
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
            for job in jobs:
                due = self._due.get(job)
                if due is None:
                    continue
                soonest = self._started.get(job, -math.inf) + COALESCE
                if soonest < due:
                    self._due[job] = soonest
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
        """Make the pass of every job that is due, earliest first."""
        now = time.monotonic()
        with self._lock:
            due = sorted((at, id(job), job) for job, at in self._due.items() if at <= now)
        for _, _, job in due:
            with self._lock:
                if job not in self._due or self._stopping:
                    continue
                self._woken.discard(job)
                self._started[job] = time.monotonic()
            delay = self._step(job)
            with self._lock:
                if job in self._due:
                    self._due[job] = time.monotonic() + delay

    @staticmethod
    def _step(job: Job) -> float:
        try:
            return job.step()
        except Exception:  # a job keeps its own counts; the loop must outlive any of them
            log.exception("tail pass failed")
            return 1.0

    def _close(self, inotify: Inotify | None, control: tuple[int, int]) -> None:
        """Release this thread's notifications and pipe (a later start() makes its own)."""
        with self._lock:
            if inotify is not None:
                inotify.close()
            if self._inotify is inotify:
                self._inotify = None
                self._dir_of.clear()
                self._jobs_in.clear()
            if self._control is control:
                self._control = None
        for fd in control:
            os.close(fd)
