"""``specwatch run``: wires sources, per-target state, the collector and the HTTP server.

Data flows one way: source -> LineProcessor -> TargetState -> snapshot -> Collector. The
daemon only starts and stops these parts; it holds no metric logic of its own.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from exporter import clock
from exporter.config import Config, parse_listen
from exporter.exposition.collector import SpecwatchCollector
from exporter.exposition.foresight import Foresight
from exporter.exposition.insight import inspect_now
from exporter.exposition.landing import landing_page
from exporter.exposition.server import LeanMetrics, WebServer, make_app
from exporter.exposition.setup import setup_text
from exporter.parse import ranges
from exporter.sources import FileTailer, StdinSource, TailLoop
from exporter.sources.scrape_pool import ScrapePool
from exporter.state.feed import LogFeed
from exporter.target import Target

if TYPE_CHECKING:
    from exporter.exposition.webreload import LiveWebConfig

log = logging.getLogger("specwatch")

# Targets whose start-up summary is logged (all are on the landing page); a node serves a few.
SETUP_LOGGED = 8
# Rounds of reads and renders in a foreseen scrape's preparation (see Daemon._prepare).
PREPARATION_ROUNDS = 2
# How long a scrape waits for the lines written before it to be read (a pass stuck on a hung
# mount must not hold every scrape); past it, the scrape shows what was read.
SYNC_SECONDS = 0.5


class Source(Protocol):
    ready: threading.Event  # set once lines written from then on are read as new

    def start(self) -> None: ...
    def stop(self) -> None: ...


class Daemon:
    """Everything ``specwatch run`` keeps alive between start() and stop()."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.stopping = threading.Event()
        self.exit_status = 0
        self._told: dict[str, str] = {}  # each target's setup as last logged
        self.fault: str | None = None  # a thread that died: the process must not go on
        self.signals_taken_by: int | None = None  # the thread in serve(), signals blocked
        self.targets = [
            Target.from_config(
                t, config.custom_rules, config.max_dp_ranks, config.max_traffic_classes
            )
            for t in config.targets
        ]
        # Our collector has no fixed names to describe; without this, /metrics?name[]=...
        # filtered it out whole.
        self.registry = CollectorRegistry(
            auto_describe=False, support_collectors_without_names=True
        )
        process = CollectorRegistry()  # the process's own series, before specwatch's
        for extra in (ProcessCollector, PlatformCollector, GCCollector):
            self.registry.register(extra(registry=process))
        self._foresight = Foresight()
        collector = SpecwatchCollector(
            self.targets,
            config.stale_after,
            judge_every=JUDGE_SECONDS,
            prepared=lambda: self._foresight.made,
        )
        self.registry.register(collector)
        self._collector = collector
        self._tail_loop = TailLoop()  # one thread follows every log file
        self._scrapes = ScrapePool([t.upstream for t in self.targets if t.upstream is not None])
        self._sources: list[Source] = list(self._build_sources())
        host, port = parse_listen(config.listen)
        web: LiveWebConfig | None = None
        if config.web_config:
            # Only a node that serves TLS or asks for passwords pays for bcrypt, ssl contexts
            # and the web config's models: a tenth of a plain start's import time.
            from exporter.exposition.webreload import LiveWebConfig

            web = LiveWebConfig(config.web_config)
        app = make_app(
            self.registry,
            functools.partial(landing_page, self.targets, config.stale_after, view=collector.view),
            web.guard if web else None,
            content=functools.partial(self._content, collector),
            not_ready=self.not_ready,
            lean=LeanMetrics(functools.partial(self._exposition, collector), process),
            page_content=functools.partial(self._renders, collector),
            foresee=self._foresight.heard,
        )
        self.web = WebServer(host, port, app, web if web and web.serves_tls else None)
        self._ahead = threading.Thread(target=self._work_ahead, name="ahead", daemon=True)

    def _content(self, collector: SpecwatchCollector) -> object:
        """What a scrape or the landing page shows, once every line written before it was
        read: the tail loop reads a written file at its next tick, or now, for a scrape."""
        self._tail_loop.sync(SYNC_SECONDS)
        return list(collector.collect())

    def _renders(self, collector: SpecwatchCollector) -> object:
        """What the landing page shows, as ``_content``, told by the targets' renders."""
        self._tail_loop.sync(SYNC_SECONDS)
        return collector.renders()

    def _exposition(self, collector: SpecwatchCollector, form: str) -> bytes:
        """The specwatch families of a scrape, once every line written before it was read."""
        self._tail_loop.sync(SYNC_SECONDS)
        return collector.exposition(form)

    def _build_sources(self) -> Iterator[Source]:
        for target in self.targets:
            for pattern in target.config.log_files:
                feed = LogFeed(target.state, target.custom_rules, target.config.engine)
                status = functools.partial(target.state.set_log_source, pattern)
                if pattern == "-":
                    status("ok")
                    yield StdinSource(
                        feed, max_line_bytes=self.config.max_line_bytes, on_end=self._input_ended
                    )
                    continue
                yield FileTailer(
                    pattern,
                    feed,
                    from_beginning=self.config.from_beginning,
                    max_line_bytes=self.config.max_line_bytes,
                    loop=self._tail_loop,
                    on_status=status,
                    missing_grace=self.config.log_missing_grace,
                    backlog=feed.read_backlog,
                )

    def _input_ended(self) -> None:
        """Standard input is the server's output: when it ends, the server is gone, and a
        service manager should restart the pair rather than keep a sidecar watching nothing."""
        log.warning("standard input ended (the server's output closed); exiting with status 1")
        self.exit_status = 1
        self._stop_soon()

    def thread_died(self, args: threading.ExceptHookArgs) -> None:
        """A thread ended by an exception: specwatch stops with status 70 (EX_SOFTWARE).

        A dead accept loop, tailer or scraper leaves a process that looks alive and says
        nothing (before, a dead accept loop answered nothing again, and SIGTERM still exited
        0, so no supervisor restarted it). Until the stop, /healthz names the thread.
        """
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "?"
        log.critical(
            "thread %s died; stopping with status %d so a supervisor restarts specwatch",
            name,
            THREAD_DIED_STATUS,
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),  # type: ignore[arg-type]
        )
        self.fault = f"thread {name} died: {args.exc_type.__name__}"
        self.exit_status = THREAD_DIED_STATUS
        self._stop_soon()

    def _stop_soon(self) -> None:
        """Another thread asks the process to stop: the thread waiting for signals in
        serve(), if any, is woken by one of its own."""
        self.stopping.set()
        waiting = self.signals_taken_by
        if waiting is not None:
            with contextlib.suppress(OSError):  # it has ended meanwhile
                signal.pthread_kill(waiting, _WAKE)

    def not_ready(self) -> str | None:
        """Why /healthz must not answer 200, or None once every log source follows.

        Until a tailer's first pass, a line appended now could be taken for old history (read
        into the start-up bootstrap instead of counted); ready means nothing is lost from here.
        A reader that keeps failing on a file that is there, or a thread that died, is broken in
        this process, and a restart is the cure; a path that is missing or unreadable is not, so
        it stays 200.
        """
        if self.fault is not None:
            return f"broken: {self.fault}"
        waiting = sum(1 for source in self._sources if not source.ready.is_set())
        if waiting:
            return f"starting: {waiting} of {len(self._sources)} log sources not followed yet"
        stuck = sorted(
            path
            for target in self.targets
            for path, reason in target.state.log_sources().items()
            if reason == "stuck"
        )
        if stuck:
            return f"stuck: reading {', '.join(stuck)} keeps failing"
        return None

    def start(self) -> None:
        problem = ranges.spool_problem()
        if problem is not None and any(isinstance(s, FileTailer) for s in self._sources):
            log.warning(
                "cannot spool in %s: a long stretch of a log (catching up) is read in one "
                "process; give specwatch a writable TMPDIR or /tmp to use the other cores",
                problem,
            )
        self._tail_loop.start()
        for source in self._sources:
            source.start()
        self.web.start()
        names = ", ".join(t.name for t in self.targets)
        log.info("listening on %s (port %d), targets: %s", self.config.listen, self.web.port, names)
        # What each target knows before its server is asked, then its scrapes: the first
        # setup line is the configured one, not whatever a first scrape raced it to.
        self.tell_setup()
        self._scrapes.start()
        self._ahead.start()

    def tell_setup(self) -> None:
        """Log what each target found (engine, algorithm, draft count, endpoints, baseline)
        at start and whenever it changes: the first minute after pointing specwatch at a
        server is when a wrong URL or a missing baseline is cheapest to see.

        Only the first ``SETUP_LOGGED`` targets are told: a DaemonSet's sixty targets wrote
        over 100 kB of these lines in their first seconds (a full stderr pipe stalls the
        process); the landing page shows every target's."""
        if not self._told and len(self.targets) > SETUP_LOGGED:
            log.info(
                "%d targets: the setup of the first %d is logged, every one's is on the landing "
                "page",
                len(self.targets),
                SETUP_LOGGED,
            )
        for target in self.targets[:SETUP_LOGGED]:
            text = setup_text(target)
            if self._told.get(target.name) != text:
                self._told[target.name] = text
                log.info("target %s: %s", target.name, text)

    def _work_ahead(self) -> None:
        """What the daemon does ahead of the scrapes, in one thread: it prepares each foreseen
        scrape (``Foresight``: the lines written so far read, the targets that moved rendered,
        so the scrape finds little left), and judges every target every ``JUDGE_SECONDS``
        (``_judge_round``). A failure is logged, never fatal."""
        judge_at = time.monotonic() + JUDGE_SECONDS
        while not self.stopping.is_set():
            now = time.monotonic()
            if self._foresight.take(now):
                self._prepare()
                self._foresight.took(time.monotonic() - now)
            elif now >= judge_at:
                self._judge_round()
                judge_at = time.monotonic() + JUDGE_SECONDS
            else:
                due = self._foresight.due()
                self._foresight.wait(judge_at if due is None else min(due, judge_at))

    def _prepare(self) -> None:
        """A foreseen scrape's reads and renders, made now (those of the landing page's, which
        keep the renders a scrape reuses while its targets have not moved), twice: the second
        round reads and renders what moved during the first (which takes 20 to 30 ms of wall,
        nearly all CPU, for 100 moved targets on a quiet 2-core machine), a few targets."""
        try:
            for _ in range(PREPARATION_ROUNDS):
                self._renders(self._collector)
        except Exception:
            log.exception("preparing a foreseen scrape failed")

    def _judge_round(self) -> None:
        """Judge every target, so a change of verdict is logged when it happens, not when
        someone next scrapes, and a scrape shows this judgement instead of judging again (the
        collector's ``judge_every``); one judged within ``JUDGE_SECONDS`` (a scrape found this
        round late) is left for the next round. Then log any target's setup that changed (an
        engine found in the log, an endpoint answering)."""
        for target in self.targets:
            now = clock.now()
            judged = target.state.verdict.observed_at
            if judged is not None and 0 <= now - judged < JUDGE_SECONDS:
                continue  # a scrape or the landing page judged it since the last round
            try:
                inspect_now(target, now, self.config.stale_after)
            except Exception:
                log.exception("judging target %s failed", target.name)
        self.tell_setup()

    def stop(self) -> None:
        self.stopping.set()
        self._foresight.wake()
        self.web.stop()
        self._scrapes.stop(timeout=1.0)  # a scrape in flight ends by its own timeout
        for source in self._sources:
            source.stop()
        self._tail_loop.stop()
        log.info("stopped")


THREAD_DIED_STATUS = 70  # EX_SOFTWARE: an internal error, not the operator's
# Taken by the main thread alone; see serve(). Each stopping signal with its exit status:
# SIGXCPU is the CPU-time limit's first warning (SIGKILL follows), a restart clears it.
_STOPPING = {
    signal.SIGTERM: 0,
    signal.SIGINT: 0,
    signal.SIGQUIT: 0,
    signal.SIGXCPU: 1,
}
# Signals whose default action would kill the process without a word: said and ignored.
_IGNORED = {
    signal.SIGHUP: "specwatch reads its configuration at start; restart it to apply",
    signal.SIGUSR1: "specwatch has no use for it",
    signal.SIGUSR2: "specwatch has no use for it",
    signal.SIGALRM: "specwatch sets no alarm",
}
# Sent by the daemon to its own main thread when another thread asks it to stop (standard
# input ended, a thread died); taken like the others, so the main thread sleeps until a signal
# instead of waking a few times a second to look.
_WAKE = signal.SIGRTMIN
_SIGNALS = {*_STOPPING, *_IGNORED, _WAKE}
# A last resort only: how often the main thread looks whether it should stop unwoken.
_STOP_CHECK_SECONDS = 5.0
_IGNORED_NOTE_SECONDS = 60.0
# How often the daemon judges each target on its own (and logs a change of verdict), and
# looks whether a target's setup changed, to log it.
JUDGE_SECONDS = 5.0


def serve(daemon: Daemon) -> int:
    """Run until a stopping signal (status 0; 1 for SIGXCPU), the end of standard input
    (status 1) or a thread's death (status 70), then stop every thread cleanly.

    The signals are blocked before any thread starts (threads inherit the mask) and taken by
    the main thread with ``sigtimedwait``. With a Python handler instead, the kernel may hand
    the signal to a busy worker thread, and the handler then waits until the main thread
    next wakes up. SIGHUP, SIGUSR1, SIGUSR2 and SIGALRM are ignored (each said at most once a
    minute; before, all but SIGHUP killed the daemon without a log line): the configuration
    is read once, at start. SIGQUIT logs every thread's stack, then stops. Another thread
    that asks to stop wakes the main thread with SIGRTMIN, so it sleeps until a signal comes.
    They stay blocked after the stop: the process is ending, and a supervisor's second
    SIGTERM (or a SIGHUP) taken with the default action would kill it with status 143 or 129.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    daemon.signals_taken_by = threading.get_ident()
    threading.excepthook = daemon.thread_died
    ignored = _IgnoredSignals()
    try:
        daemon.start()
        while not daemon.stopping.is_set():
            received = signal.sigtimedwait(_SIGNALS, _STOP_CHECK_SECONDS)
            if received is None or received.si_signo not in _SIGNALS or received.si_signo == _WAKE:
                continue  # timed out, woken to stop, or with no signal (a profiler attaching)
            if not ignored.take(received):
                _stopping_signal(daemon, signal.Signals(received.si_signo))
                break
    finally:
        daemon.signals_taken_by = None
        daemon.stop()
        threading.excepthook = threading.__excepthook__
    return daemon.exit_status


def _stopping_signal(daemon: Daemon, signum: signal.Signals) -> None:
    if signum == signal.SIGQUIT:
        log.warning("SIGQUIT received; the stack of each thread:\n%s", _thread_stacks())
    status = _STOPPING[signum]
    if status:
        log.error(
            "%s received (CPU time limit reached), stopping with status %d", signum.name, status
        )
        daemon.exit_status = status
    else:
        log.info("%s received, stopping", signum.name)


def _thread_stacks() -> str:
    """Where every thread is: what an operator sending SIGQUIT to a stuck process asks for."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    return "\n".join(
        f"thread {names.get(ident, ident)}:\n{''.join(traceback.format_stack(frame))}"
        for ident, frame in sys._current_frames().items()
    )


class _IgnoredSignals:
    """Says that a signal is ignored at most once a minute per signal, with how many came
    since: a loop of ``kill -HUP`` wrote a line per signal."""

    def __init__(self) -> None:
        self._quiet_until: dict[int, float] = {}
        self._unsaid: dict[int, int] = {}

    def take(self, received: signal.struct_siginfo) -> bool:
        """Whether ``received`` is one of the ignored signals (and so taken here)."""
        signum = received.si_signo
        if signum not in _IGNORED:
            return False
        self._unsaid[signum] = self._unsaid.get(signum, 0) + 1
        now = time.monotonic()
        if now >= self._quiet_until.get(signum, 0.0):
            count = self._unsaid[signum]
            since = f" ({count} since the last such line)" if count > 1 else ""
            name = signal.Signals(signum).name
            log.warning("%s ignored%s: %s", name, since, _IGNORED[signal.Signals(signum)])
            self._unsaid[signum] = 0
            self._quiet_until[signum] = now + _IGNORED_NOTE_SECONDS
        return True
