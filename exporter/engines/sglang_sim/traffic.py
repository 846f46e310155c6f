"""Serving traffic after startup: decode windows, prefills, access lines and warnings.

The values hang together the way they do on a real server: one decode line per
``decode_log_interval`` draft+verify rounds, each round gains ``accept length`` tokens per running
request, so a window's tokens and its duration fix ``gen throughput`` and the spacing of the
lines. Requests finish and are replaced, which is where prefill and access lines come from.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from exporter.engines.sglang import DECODE_LOG_INTERVAL
from exporter.engines.sglang_sim.eras import Era, PrefillBatch, Window
from exporter.engines.sglang_sim.finished import CLASSES, NO_BENEFIT_CLASS, finish_event
from exporter.engines.sglang_sim.lines import LogEvent, access
from exporter.engines.sglang_sim.startup import CHUNKED_PREFILL_SIZE, MAX_TOTAL_NUM_TOKENS
from exporter.engines.simulation import Phase

ADAPTIVE_OFF_FROM = 64  # SGLang's default adaptive tiers: candidate steps [0] from here on
HEALTH_PROBE_SECONDS = 10.0  # a kubelet-style liveness probe on /health
SCRAPE_SECONDS = 15.0  # a Prometheus scrape of /metrics
SERVER_INFO_SECONDS = 60.0  # an old client still polling the deprecated /get_server_info
CLIENT_GAP_SECONDS = 0.15  # a single-stream benchmark client's pause between requests
SHARED_PREFIX_TOKENS = 96  # the system prompt every request shares: the radix cache hits it
PREFILL_TOKENS_PER_SECOND = 12000.0


@dataclass(slots=True)
class _Request:
    prompt: int
    output: int
    generated: float = 0.0
    no_benefit: bool = False  # of the class of traffic the drafter does not fit


@dataclass(slots=True)
class _Periodic:
    """Timers for the requests that arrive on their own schedule, not the benchmark's."""

    health: float
    scrape: float
    server_info: float


@dataclass(slots=True)
class Traffic:
    """The running batch of one server run and the lines it produces."""

    phase: Phase
    era: Era
    rng: random.Random
    now: float
    requests: list[_Request] = field(default_factory=list)
    # Per-request draws (classes, request logs) come from their own generator, so logging
    # requests leaves the stats lines of the same seed as they were.
    request_rng: random.Random = field(default_factory=lambda: random.Random(23))
    steps: int | None = None  # adaptive speculation's draft steps in force
    windows: int = 0
    # The KV cache's tokens: each running request's prompt and the whole tokens it generated,
    # kept as requests start, grow and finish. Summing them at every prefill was most of
    # simulating a busy run: a prefill per finished request, each over the whole batch.
    kv_tokens: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        """The KV cache of the requests it starts with: kept from here on, never summed."""
        self.kv_tokens = sum(request.prompt + int(request.generated) for request in self.requests)

    def events(self, until: float | None) -> Iterator[LogEvent]:
        """Lines in time order until the simulated clock passes ``until`` (None: forever)."""
        admitted = self._admit(self.phase.behaviour.running, self.now)
        yield from admitted
        self.now = admitted[-1].offset  # decoding starts once the first batch is prefilled
        timers = _Periodic(self.now + 2.0, self.now + 5.0, self.now + 30.0)
        while until is None or self.now < until:
            window = sorted(self._window(timers), key=lambda event: event.offset)
            yield from window

    def _window(self, timers: _Periodic) -> list[LogEvent]:
        behaviour = self.phase.behaviour
        deployment = self.phase.deployment
        start = self.now
        events = self._adapt(start)
        accept = self._accept_length() if self.steps != 0 else 1.0
        step = behaviour.step_seconds * self.rng.gauss(1.0, 0.03)
        seconds = DECODE_LOG_INTERVAL * step
        self.now = start + seconds
        events += self._advance(accept, start, seconds)
        events += self._periodic(timers)
        rate = self.era.accept_rate(accept, deployment.num_steps, deployment.num_draft_tokens)
        running = len(self.requests)
        tokens = self.kv_tokens
        window = Window(
            running=running,
            tokens=tokens,
            token_usage=tokens / MAX_TOTAL_NUM_TOKENS,
            accept_length=accept,
            cuda_graph=self._cuda_graph(running),
            gen_throughput=DECODE_LOG_INTERVAL * running * accept / seconds,
            queued=behaviour.queued,
        )
        events.append(LogEvent(self.now, self.era.decode_line(window, rate), rank="TP0"))
        return events

    def _adapt(self, at: float) -> list[LogEvent]:
        """Adaptive speculation's choice of draft steps for the coming window, and its lines.

        SGLang's default tiers draft nothing from 64 running requests on; a drafter adaptive
        has given up on is probed with one step every ``probe_every`` windows and turned off
        again, with an EMA of accepted drafts near 0.
        """
        deployment, behaviour = self.phase.deployment, self.phase.behaviour
        if not deployment.adaptive:
            return []
        self.windows += 1
        if behaviour.probe_every is not None:
            probing = self.windows % behaviour.probe_every == 0
            target = 1 if probing else 0
        else:
            target = 0 if len(self.requests) >= ADAPTIVE_OFF_FROM else deployment.num_steps
        current = deployment.num_steps if self.steps is None else self.steps
        self.steps = target
        if target == current:
            return []
        ema = max(0.0, behaviour.accept_length - 1.0) if target == 0 else 0.0
        events = []
        if behaviour.probe_every is not None:
            events.append(
                LogEvent(
                    at,
                    f"Adaptive spec params updated: steps {current} -> {target} "
                    f"(ema_accept_len={ema:.2f})",
                    rank="TP0",
                )
            )
        events.append(
            LogEvent(
                at + 0.001,
                f"Switch adaptive runtime state: steps {current} -> {target}, "
                f"draft_tokens {current + 1} -> {target + 1}",
                rank="TP0",
            )
        )
        return events

    def _accept_length(self) -> float:
        """Per-window accept length: never below 1 (the bonus token) nor above the draft size."""
        behaviour = self.phase.behaviour
        ceiling = float(self.phase.deployment.num_steps + 1)
        value = self.rng.gauss(behaviour.accept_length, behaviour.accept_jitter)
        return min(max(value, 1.0), ceiling)

    def _cuda_graph(self, running: int) -> bool:
        """SGLang reports whether the verify pass ran in a graph: off, or batch too large."""
        deployment = self.phase.deployment
        return not deployment.disable_cuda_graph and running <= deployment.cuda_graph_max_bs

    def _advance(self, accept: float, start: float, seconds: float) -> list[LogEvent]:
        """Grow every request by the window's tokens; replace the ones that finish.

        A finished request's replacement takes its place in the batch, so the requests after
        it keep their indexes while the loop walks them: the batch is never copied or
        searched (``list.remove`` compared every request before it, field by field)."""
        events: list[LogEvent] = []
        gained = DECODE_LOG_INTERVAL * accept
        requests = self.requests
        for index in range(len(requests)):
            request = requests[index]
            before = request.generated
            request.generated = before + gained
            self.kv_tokens += int(request.generated) - int(before)
            if request.generated < request.output:
                continue
            left = request.output - before
            finished_at = start + seconds * min(left / gained, 1.0)
            events.append(
                access(finished_at, self._client(), "POST /v1/chat/completions", "200 OK")
            )
            if self.phase.deployment.log_requests is not None:
                events.append(self._finished(request, finished_at))
            self.kv_tokens -= request.prompt + int(request.generated)
            gap = 0.0 if self.phase.behaviour.queued else CLIENT_GAP_SECONDS
            events.append(self._replace(index, min(finished_at + gap, self.now)))
        return events

    def _replace(self, index: int, at: float) -> LogEvent:
        """The finished request at ``index`` gives its place to a new one, prefilled alone at
        ``at`` beside the others still running."""
        request = self._new_request()
        running = len(self.requests) - 1  # the finished one no longer runs
        self.requests[index] = request
        self.kv_tokens += request.prompt  # nothing generated yet
        return LogEvent(at, self.era.prefill_line(self._prefill([request], running)), rank="TP0")

    def _admit(self, count: int, at: float) -> list[LogEvent]:
        """Start ``count`` requests; SGLang prefills them in chunks of ``chunked_prefill_size``."""
        new = [self._new_request() for _ in range(count)]
        events: list[LogEvent] = []
        for batch in _chunked(new):
            running = len(self.requests)
            self.requests.extend(batch)
            self.kv_tokens += sum(request.prompt for request in batch)  # none generated yet
            events.append(
                LogEvent(at, self.era.prefill_line(self._prefill(batch, running)), rank="TP0")
            )
            at += _prefill_seconds(sum(request.prompt for request in batch))
        return events

    def _prefill(self, batch: list[_Request], running: int) -> PrefillBatch:
        cached = sum(min(request.prompt, SHARED_PREFIX_TOKENS) for request in batch)
        new_tokens = sum(request.prompt for request in batch) - cached
        return PrefillBatch(
            new_seq=len(batch),
            new_tokens=new_tokens,
            cached_tokens=cached,
            token_usage=self.kv_tokens / MAX_TOTAL_NUM_TOKENS,
            running=running,
            queued=self.phase.behaviour.queued,
            input_throughput=new_tokens / _prefill_seconds(new_tokens),
        )

    def _new_request(self) -> _Request:
        request = _Request(prompt=self.rng.randint(120, 900), output=self.rng.randint(200, 1200))
        share = self.phase.behaviour.no_benefit_share
        request.no_benefit = share > 0 and self.request_rng.random() < share
        return request

    def _finished(self, request: _Request, at: float) -> LogEvent:
        """The request logger's line: the class the drafter does not fit accepts nothing, the
        rest make up the window's accept length between them."""
        behaviour, deployment = self.phase.behaviour, self.phase.deployment
        rng = self.request_rng
        share = behaviour.no_benefit_share
        if request.no_benefit:
            length, name = None, NO_BENEFIT_CLASS
        else:
            usual = (behaviour.accept_length - share) / (1 - share)
            ceiling = float(deployment.num_steps + 1)
            length = min(max(rng.gauss(usual, 0.2), 1.2), ceiling)
            name = rng.choice(CLASSES)
        return finish_event(
            at + 0.001,
            rng,
            form=deployment.log_requests or "text",
            prompt_tokens=request.prompt,
            completion_tokens=request.output,
            accept_length=length,
            num_draft_tokens=deployment.num_draft_tokens,
            traffic_class=name,
        )

    def _client(self) -> str:
        return f"10.0.3.{self.rng.randint(2, 40)}:{self.rng.randint(32768, 60999)}"

    def _periodic(self, timers: _Periodic) -> list[LogEvent]:
        """Probes, scrapes and an old client: their lines fall wherever their timers do."""
        events: list[LogEvent] = []
        while timers.health < self.now:
            events += self._health_probe(timers.health)
            timers.health += HEALTH_PROBE_SECONDS
        while timers.scrape < self.now:
            status = "200 OK" if self.phase.deployment.enable_metrics else "404 Not Found"
            events.append(access(timers.scrape, "10.0.1.5:49822", "GET /metrics", status))
            timers.scrape += SCRAPE_SECONDS
        while timers.server_info < self.now:
            events += _deprecated_server_info(timers.server_info, self._client())
            timers.server_info += SERVER_INFO_SECONDS * self.rng.uniform(0.8, 1.2)
        return events

    def _health_probe(self, at: float) -> list[LogEvent]:
        """``/health`` runs a one-token generation, which SGLang logs as a prefill batch."""
        batch = PrefillBatch(
            1,
            1,
            0,
            self.kv_tokens / MAX_TOTAL_NUM_TOKENS,
            len(self.requests),
            self.phase.behaviour.queued,
            0.05,
        )
        return [
            LogEvent(at, self.era.prefill_line(batch), rank="TP0"),
            access(at + 0.004, "127.0.0.1:40122", "GET /health", "200 OK"),
        ]


def _chunked(requests: list[_Request]) -> Iterator[list[_Request]]:
    """Group requests into prefill batches of at most ``CHUNKED_PREFILL_SIZE`` prompt tokens."""
    batch: list[_Request] = []
    for request in requests:
        if batch and sum(r.prompt for r in batch) + request.prompt > CHUNKED_PREFILL_SIZE:
            yield batch
            batch = []
        batch.append(request)
    if batch:
        yield batch


def _prefill_seconds(tokens: int) -> float:
    """Forward time of a prefill: a fixed launch cost plus the node's prefill speed."""
    return 0.02 + tokens / PREFILL_TOKENS_PER_SECOND


def _deprecated_server_info(at: float, client: str) -> list[LogEvent]:
    return [
        LogEvent(
            at,
            "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead.",
        ),
        access(at + 0.002, client, "GET /get_server_info", "200 OK"),
    ]
