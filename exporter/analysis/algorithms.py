"""Each speculative algorithm's own standard: what is low for it, what a collapse means, and
what to do about either (docs/metrics.md, "Algorithms").

An NGRAM drafter looks up the prompt and needs no training; an MTP head drafts one or two
tokens; an EAGLE-3 draft reaches three and more. Judging every one by an EAGLE floor pages
people for healthy nodes, so each algorithm is judged by its family's floor and fixes, kept
here once under a neutral name. Which name an algorithm an engine logs is judged as, the
engine says in its own module (``Engine.judged_as``), in its own spellings: this module
names none. The daemon exports the floor (``specwatch_accept_length_floor``), so one alert
rule serves every algorithm, and ``doctor`` and ``report`` judge by the same number. An
algorithm no engine knows is judged on speed only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from exporter.engines import registry
from exporter.engines.server_config import ServerConfig

# Never more than this share of the active steps' drafts is asked for: with one draft step
# the accept length cannot pass 2.0, and an EAGLE floor of 1.8 would call 80 % acceptance low.
STEP_SHARE = 0.5


def engine_fix(change: str, engine: str | None = None) -> str:
    """The way to make ``change`` in the flags of ``engine`` ("vLLM ..."), the engine that
    logged the run; every engine's ("SGLang ...; vLLM ...", the ``fixes`` of each ``Engine``)
    while that is not known, or for a text that serves a fleet of mixed engines."""
    own = registry.BY_NAME.get(engine or "")
    if own is not None and change in own.fixes:
        return f"{own.title} {own.fixes[change]}"
    return "; ".join(
        f"{engine.title} {engine.fixes[change]}"
        for engine in registry.ENGINES
        if change in engine.fixes
    )


def off_cause(engine: str | None) -> str:
    """What turned drafting off, in the words of ``engine`` (its ``off_cause``); each engine's
    that can, while it is not known."""
    own = registry.BY_NAME.get(engine or "")
    if own is not None and own.off_cause:
        return own.off_cause
    return " or ".join(each.off_cause for each in registry.ENGINES if each.off_cause)


# The engine fixes a Standard's texts name as ``{change}``, filled for the run's engine.
_STANDARD_CHANGES = ("eagle3_algorithm", "speculative_tokens", "draft_tokens", "ngram_window")


def engine_words(change: str, engine: str | None) -> str:
    """``change`` in the flags (or words) of ``engine`` alone, where it has them; else every
    engine's, each named (``engine_fix``)."""
    own = registry.BY_NAME.get(engine or "")
    if own is not None and change in own.fixes:
        return own.fixes[change]
    return engine_fix(change)


def own_fix(config: ServerConfig, change: str) -> str:
    """The way to make ``change`` in the flags (or words) of the engine that logged this run.
    A configuration that names no engine was read from ``/server_info``: the flags are those
    of the engine that serves it; every engine's, each named, if that one has none."""
    engine = config.engine
    if engine is None:
        engine = next((each.name for each in registry.ENGINES if each.server_info_paths), None)
    return engine_words(change, engine)


@dataclass(frozen=True, slots=True)
class Standard:
    """How one family of drafters is judged."""

    family: str
    # Below this mean accept length (bonus token included) the drafter underperforms.
    floor: float
    has_draft_model: bool
    # What an accept length of 1.00 says about this drafter.
    collapse: str
    collapse_fix: str
    low_fix: str
    # How to draft fewer tokens when most are rejected, in the algorithm's own settings: a
    # template of ``count`` (verified positions a round) and ``steps`` (drafted tokens).
    fewer_tokens: str

    @functools.lru_cache(maxsize=64)  # noqa: B019 (the standards are few and live for good)
    def for_engine(self, engine: str | None) -> Standard:
        """This standard with its fixes in the flags of ``engine`` (every engine's while it is
        not known); one object per standard and engine, as every judgement asks."""

        def filled(text: str) -> str:
            for change in _STANDARD_CHANGES:
                text = text.replace(f"{{{change}}}", engine_fix(change, engine))
            return text

        return replace(
            self,
            collapse_fix=filled(self.collapse_fix),
            low_fix=filled(self.low_fix),
            fewer_tokens=filled(self.fewer_tokens),
        )


_CHECK_ALGORITHM = "an EAGLE-3 draft needs the EAGLE3 algorithm: {eagle3_algorithm}"
_FEWER_STEPS = "Lower the draft steps to about {steps} ({speculative_tokens})"
_EAGLE = Standard(
    family="EAGLE",
    floor=1.8,
    has_draft_model=True,
    collapse="the target rejects every token the EAGLE draft proposes",
    collapse_fix=(
        f"Check the draft matches the target ({_CHECK_ALGORITHM}; a draft trained for another "
        "model version accepts nothing), or serve without speculation until it does."
    ),
    low_fix=(
        "Check the draft was trained for this target model and version, and its prompt "
        "distribution; compare with the drafter's published accept length."
    ),
    fewer_tokens="Lower {draft_tokens}",
)
# A run served with the EAGLE3 algorithm already has the flag an EAGLE-3 head needs.
_EAGLE3 = replace(
    _EAGLE,
    collapse_fix=(
        "Check the EAGLE-3 draft was trained for this target model and version (a draft "
        "trained for another model version accepts nothing), or serve without speculation "
        "until it does."
    ),
)
_MTP = Standard(
    family="MTP",
    floor=1.4,
    has_draft_model=True,
    collapse="the model's own multi-token-prediction layers predict nothing the target keeps",
    collapse_fix=(
        "Check the checkpoint's MTP (NextN) layers were loaded and belong to this model "
        "version (a quantised or pruned checkpoint may drop them), or serve without "
        "speculation."
    ),
    low_fix=(
        "Check the MTP layers come from the same checkpoint as the target; MTP drafts well "
        "for one or two steps, so keep the draft steps at 1-2 ({speculative_tokens})."
    ),
    fewer_tokens=_FEWER_STEPS,
)
_DRAFT_MODEL = Standard(
    family="DRAFT_MODEL",
    floor=1.5,
    has_draft_model=True,
    collapse="the small draft model's tokens are all rejected by the target",
    collapse_fix=(
        "Check the draft model shares the target's tokenizer and vocabulary and is an "
        "instruct model of the same family, or serve without speculation."
    ),
    low_fix=(
        "Pick a draft model of the target's own family and tokenizer (a smaller sibling), "
        "or a trained EAGLE or MTP drafter."
    ),
    fewer_tokens=_FEWER_STEPS,
)
_NGRAM = Standard(
    family="NGRAM",
    floor=1.2,
    has_draft_model=False,
    collapse="no n-gram of the output is found in the prompt or earlier output",
    collapse_fix=(
        "This traffic does not repeat its context (n-gram lookup finds nothing to copy): "
        "serve it without speculation, or with a trained drafter."
    ),
    low_fix=(
        "N-gram lookup pays on traffic that repeats its context (code edits, RAG, "
        "summaries); narrow its match window ({ngram_window}) or serve this traffic without "
        "speculation."
    ),
    fewer_tokens="Lower {draft_tokens}, and narrow the match window ({ngram_window})",
)
_SUFFIX = Standard(
    family="SUFFIX",
    floor=1.2,
    has_draft_model=False,
    collapse="suffix decoding finds no earlier output or prompt continuing the text",
    collapse_fix=(
        "This traffic does not repeat earlier outputs: serve it without speculation, or with "
        "a trained drafter."
    ),
    low_fix=(
        "Suffix decoding pays on repetitive traffic (agents, code edits); lower "
        "suffix_decoding_max_spec_factor or raise suffix_decoding_min_token_prob so it "
        "speculates only on long matches, or serve this traffic without speculation."
    ),
    fewer_tokens="Lower suffix_decoding_max_spec_factor so about {steps} tokens are drafted",
)
_BLOCK = Standard(
    family="BLOCK_DRAFT",
    floor=1.8,
    has_draft_model=True,
    collapse="the block drafter's proposals are all rejected by the target",
    collapse_fix=(
        "Check the block draft model was trained for this target model and version, or "
        "serve without speculation until it is."
    ),
    low_fix=(
        "Check the block draft was trained for this target and version; compare with its "
        "published accept length."
    ),
    fewer_tokens="Lower the block size: {draft_tokens}",
)
_UNO = Standard(
    family="UNO",
    floor=1.5,
    has_draft_model=True,
    collapse="the target's drafting adapter proposes nothing the target keeps",
    collapse_fix=(
        "Check the UNO draft adapter was trained for this target version and loaded, or "
        "serve without speculation."
    ),
    low_fix="Check the UNO draft adapter was trained for this target model and version.",
    fewer_tokens=_FEWER_STEPS,
)

# The neutral algorithms, each with the standard it is judged by: what ``Engine.judged_as``
# answers. EAGLE3 is the EAGLE family served with the algorithm an EAGLE-3 head needs.
STANDARDS: dict[str, Standard] = {
    "EAGLE": _EAGLE,
    "EAGLE3": _EAGLE3,
    "MTP": _MTP,
    "DRAFT_MODEL": _DRAFT_MODEL,
    "NGRAM": _NGRAM,
    "SUFFIX": _SUFFIX,
    "BLOCK_DRAFT": _BLOCK,
    "UNO": _UNO,
    "MEDUSA": Standard(
        family="MEDUSA",
        floor=1.5,
        has_draft_model=True,
        collapse="the Medusa heads' proposals are all rejected by the target",
        collapse_fix="Check the Medusa heads were trained for this target model and version.",
        low_fix="Check the Medusa heads were trained for this target model and version.",
        fewer_tokens=_FEWER_STEPS,
    ),
}

LOWEST_FLOOR = min(standard.floor for standard in STANDARDS.values())
"""A collapse must sit below every algorithm's floor, or a low drafter would be called collapsed."""

UNKNOWN_METHOD = Standard(
    family="unknown method",
    floor=LOWEST_FLOOR,
    has_draft_model=True,  # as most drafters: judged as if drafting costs a pass
    collapse="the target rejects every token drafted, whatever the method",
    collapse_fix=(
        "Nothing read names the speculative method (not every engine's /metrics does): read the "
        "server's start-up log (doctor --log-file) or its draft config (--draft-config) for "
        "the method's own fixes; whatever it is, check the drafter matches this target model "
        "and version, or serve without speculation."
    ),
    low_fix=(
        "Nothing read names the speculative method, so it is held only to the lowest floor "
        "of any method: give the server's log (--log-file) or --draft-config to judge it by "
        "its own, and --expected-accept-length for what this drafter should reach."
    ),
    fewer_tokens=_FEWER_STEPS,
)
"""The standard while nothing names the method (no start-up line, no ``/server_info``, vLLM's
/metrics): only what holds for every method is judged, a collapse and the lowest floor."""
DEFAULT = UNKNOWN_METHOD
MOST_COMMON = _EAGLE
"""The drafter most nodes run: the dashboards colour accept length by its floor."""


def standard_for(
    algorithm: str | None, draft_architecture: str | None = None, engine: str | None = None
) -> Standard | None:
    """The standard ``algorithm`` is judged by, as ``engine`` (the one that named it) judges
    it; as the first engine that knows it while that is not known. ``None`` for an algorithm
    no engine knows (a plugin's), which is judged on speed only."""
    if algorithm is None:
        return DEFAULT
    own = registry.BY_NAME.get(engine or "")
    asked = registry.ENGINES if own is None else (own,)
    judged = (each.judged_as(algorithm, draft_architecture) for each in asked)
    return STANDARDS.get(next((name for name in judged if name is not None), ""))


def config_standard(config: ServerConfig) -> Standard | None:
    """The standard of the configured algorithm, its fixes in the run's engine's flags."""
    return _engine_standard(config.algorithm, config.draft_architecture, config.engine)


@functools.lru_cache(maxsize=256)
def _engine_standard(
    algorithm: str | None, draft_architecture: str | None, engine: str | None
) -> Standard | None:
    """``config_standard`` by the three names it reads: a render asks it four times per
    target, each time asking every engine; the engines' names and standards live for good."""
    standard = standard_for(algorithm, draft_architecture, engine)
    return None if standard is None else standard.for_engine(engine)


def config_floor(config: ServerConfig) -> float | None:
    """The floor of the configured drafter at its draft steps; ``None``: not judged."""
    standard = config_standard(config)
    steps = config.steps_now or config.num_steps  # drafting off (0) caps nothing
    return None if standard is None else floor_for(standard, steps)


def floor_for(standard: Standard, active_steps: int | None) -> float:
    """The standard's floor, capped for few draft steps: one step cannot yield more than two
    tokens a round, so at most half of the steps' drafts are asked to be accepted."""
    if active_steps is None:
        return standard.floor
    return min(standard.floor, 1.0 + STEP_SHARE * active_steps)
