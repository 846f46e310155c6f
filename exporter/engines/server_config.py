"""What the watched server was configured to do, in specwatch's terms, whoever told it.

Each engine reads its own sources into this one shape (SGLang's ``server_args`` line and
``/server_info`` in ``engines/sglang_config.py``, vLLM's engine configuration line in
``engines/vllm.py``), and the draft model's own ``config.json`` is read per target
(``engines/draft_config.py``); findings judge the merged view, and must work when any source
is missing (a server without a metrics endpoint; a sidecar started after the server: no
startup lines). Only non-secret, whitelisted facts are kept: the server's API key never
enters this object.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The speculative-decoding relevant configuration; ``None`` means "not known yet".

    Each field is a fact specwatch judges, whichever engine stated it and in whatever words
    (``draft_settings`` of each engine names its own flag for the draft count); the names
    are specwatch's, kept as ``doctor --json`` and ``report --json`` print them.
    """

    engine: str | None = None  # the engine whose start line told this configuration
    algorithm: str | None = None  # speculative algorithm, as specwatch names it (EAGLE3, MTP)
    draft_model_path: str | None = None
    served_model: str | None = None  # the name clients ask for
    num_steps: int | None = None  # draft steps a round (vLLM's speculative tokens)
    eagle_topk: int | None = None  # drafts kept per step: 1 is a chain, more a tree
    num_draft_tokens: int | None = None  # positions verified a round, the bonus one included
    disable_cuda_graph: bool | None = None  # CUDA graphs off for decoding (vLLM: eager)
    # The resolved decode backend where an engine states one (SGLang 0.5.23's
    # cuda_graph_config), which says graphs are off where the switch does not: what a finding
    # quotes as seen.
    decode_graph_backend: str | None = None
    cuda_graph_max_bs: int | None = None  # the largest batch run in a CUDA graph
    log_level: str | None = None
    decode_log_interval: int | None = None  # decode rounds between two stats lines
    # Running requests each scheduler admits at most: the node's cap shared by its
    # attention data-parallel ranks, each scheduler's share.
    max_running_requests: int | None = None
    # Whether the operator set that cap or the engine chose it (SGLang lowers it to 48 for
    # EAGLE when unset): only a chosen cap is worth questioning.
    max_running_requests_set: bool | None = None
    enable_metrics: bool | None = None  # the server's arguments turn its /metrics on
    # Prefill/decode disaggregation: "prefill" servers decode nothing, "decode" servers do.
    disaggregation_mode: str | None = None
    # Pipeline stages: above 1 a stats line's running requests are one micro-batch's, and
    # its throughput the whole pipeline's.
    pipeline_stages: int | None = None
    target_architecture: str | None = None
    draft_architecture: str | None = None
    draft_has_eagle_config: bool | None = None
    draft_vocab_size: int | None = None
    # The draft's config.json on this machine: "read", or why not (``DRAFT_CONFIG_REASONS``).
    draft_config: str | None = None
    # Adaptive speculation: the draft steps in force now (0: drafting off), the candidates of
    # the first batch-size tier, and the EMA of accepted drafts per round when adaptive last
    # turned drafting off (how little its probes accepted).
    adaptive: bool | None = None
    active_steps: int | None = None
    candidate_steps: tuple[int, ...] | None = None
    off_ema_accept: float | None = None
    # Draft steps scheduled by batch size (vLLM's dynamic speculation): (first, last batch
    # size, steps) ranges.
    schedule: tuple[tuple[int, int, int], ...] | None = None
    # Why the engine writes no stats lines this run, in its words (vLLM's API servers).
    stats_not_logged: str | None = None

    @property
    def prefill_only(self) -> bool:
        """A prefill server of PD disaggregation: it hands every request to a decode server,
        so it writes no decode stats line and nothing of speculation is judged here."""
        return self.disaggregation_mode == "prefill"

    @property
    def pipelined(self) -> bool:
        """Pipeline parallelism: no baseline at a line's load (one micro-batch's requests)
        says how fast the node is, so speed is not judged against one."""
        return (self.pipeline_stages or 1) > 1

    @property
    def probes(self) -> bool:
        """Whether windows that draft amid drafting-off ones are probes: SGLang's adaptive
        speculation turns drafting off when drafts are rejected and drafts now and then to
        see if they still are; vLLM's schedule turns it off by batch size and drafts every
        round at the batch sizes it drafts at, so those windows are the drafter's level."""
        return bool(self.adaptive) and self.schedule is None

    @property
    def steps_now(self) -> int | None:
        """The draft steps in force: adaptive's newest choice, else the configured count."""
        return self.active_steps if self.active_steps is not None else self.num_steps

    @property
    def draft_tokens_now(self) -> int | None:
        """Verified positions a round now: adaptive runs a chain (top-k 1) of ``steps + 1``;
        a fixed setup (its steps perhaps read from ``/metrics``) may verify a tree."""
        if self.adaptive and self.active_steps is not None:
            return self.active_steps + 1
        return self.num_draft_tokens

    def merged(self, newer: ServerConfig) -> ServerConfig:
        """This config with every field ``newer`` knows taking precedence.

        The same two configs give the same object: every scrape and judgement merges each
        target's sources again, which rarely change, and a merge rebuilt all 30 fields."""
        key = (id(self), id(newer))
        kept = _MERGES.get(key)
        if kept is not None and kept[0] is self and kept[1] is newer:
            return kept[2]
        known = {name: value for name in _NAMES if (value := getattr(newer, name)) is not None}
        result = replace(self, **known) if known else self
        if len(_MERGES) >= MAX_MERGES:
            _MERGES.clear()
        _MERGES[key] = (self, newer, result)
        return result

    def to_json_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_NAMES = tuple(f.name for f in fields(ServerConfig))
# Merges remembered, by the identity of both configs (held here, so an id is not reused while
# remembered): a few per target and source; cleared when full.
MAX_MERGES = 1024
_MERGES: dict[tuple[int, int], tuple[ServerConfig, ServerConfig, ServerConfig]] = {}


def coerce(value: Any, kind: type) -> Any:
    """``value`` as ``kind``, or ``None`` when it is missing or of another shape.

    A raw string from an unparsable repr value must not turn into a wrong number.
    """
    if value is None:
        return None
    if kind is bool:
        return value if isinstance(value, bool) else None
    if kind is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return value if isinstance(value, str) else None
