"""How many draft tokens pay at each load: a schedule per concurrency band, not one count.

Verification is nearly free while a batch is small (memory-bound) and costs more as it grows,
so the number of draft tokens that pays falls with concurrency, to none at all on a busy node.
specwatch alone knows both sides per band: the baseline at that concurrency gives the cost of
a round (``analysis.breakeven``), the accept length what a round yields. The answer is written
in the engine's own terms: vLLM's ``num_speculative_tokens_per_batch_size`` and SGLang's
adaptive ``candidate_steps`` per batch-size tier. Chains only (top-k 1): a tree's count is not
a number of steps, and neither engine schedules trees by load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from exporter.analysis.algorithms import Standard, engine_words
from exporter.analysis.breakeven import assess, assess_positions
from exporter.analysis.thresholds import MIN_WINDOWS
from exporter.engines import registry


@dataclass(frozen=True, slots=True)
class BandDrafting:
    """What speculation did in one concurrency band of a server run."""

    band: tuple[str, int, int | None]  # label, lowest and highest running requests (None: open)
    windows: int  # decode windows that drafted
    off_windows: int  # windows adaptive speculation ran with drafting off
    accept_length: float | None  # mean over the windows that drafted
    speedup: float | None  # their throughput over the baseline at their concurrency
    steps: int | None  # the draft steps adaptive had in force there, in most windows


@dataclass(frozen=True, slots=True)
class BandAdvice:
    band: tuple[str, int, int | None]
    ran: int | None  # draft steps the server ran here (0: drafting off)
    suggested: int | None  # draft steps that pay here (0: none); None: not measurable
    expected_speedup: float | None


def advise_bands(
    bands: Sequence[BandDrafting],
    configured_steps: int | None,
    rates: tuple[float, ...] | None = None,
) -> list[BandAdvice]:
    """The draft steps that pay in each band the run drafted in or turned drafting off in.

    ``rates``: the run's acceptance by draft position where the engine logs it (vLLM); a band
    that ran that many steps is judged on it, scaled to the band's accept length, instead of
    on a curve fitted to that length alone."""
    advice = []
    for band in bands:
        ran = band.steps if band.steps is not None else configured_steps
        if band.windows == 0:
            ran = 0 if band.off_windows else None
        suggested = expected = None
        if band.windows >= MIN_WINDOWS and band.accept_length is not None and band.speedup and ran:
            if rates and len(rates) == ran and sum(rates) > 0:
                scale = (band.accept_length - 1.0) / sum(rates)
                measured = assess_positions(tuple(min(1.0, r * scale) for r in rates), band.speedup)
                suggested, expected = measured.suggested, measured.expected_speedup
            else:
                assessment = assess(band.accept_length, ran + 1, band.speedup)
                suggested = assessment.suggested_num_draft_tokens - 1
                expected = assessment.expected_speedup
            # Below the baseline no count pays, however small plain decoding's gain.
            if expected < 1.0:
                suggested, expected = 0, 1.0
        if ran is not None or suggested is not None:
            advice.append(BandAdvice(band.band, ran, suggested, expected))
    return advice


def schedule_text(
    advice: Sequence[BandAdvice],
    engine: str | None,
    standard: Standard | None,
    algorithm: str | None,
    adaptive: bool,
    by_load: bool = True,
) -> str | None:
    """The schedule in plain words and in the engine's own setting; None without advice.

    ``by_load`` False: the log is from a release of the engine older than its schedule by
    batch size, so only its single count is offered."""
    measured = [a for a in advice if a.suggested is not None]
    if not measured:
        return None
    parts = [_band_words(a) for a in advice]
    text = (
        "Draft steps by load (break-even estimate per concurrency band, from its measured "
        f"speedup): {'; '.join(parts)}."
    )
    if all(a.suggested == a.ran for a in measured):
        return f"{text} The steps it runs pay at every load measured."
    steps = [(a.band[1], a.band[2], n) for a in advice if (n := _steps(a)) is not None]
    found = registry.BY_NAME.get(engine or "")
    if found is not None and not by_load:
        return f"{text} {_older_release(advice, found.title, found.fixes['speculative_tokens'])}"
    setting = None if found is None else found.schedule(steps, algorithm)
    if setting is None:
        return f"{text} {_static(advice, standard, algorithm, engine)}"
    return f"{text} {_judged(advice, adaptive)}{setting}."


def _band_words(advice: BandAdvice) -> str:
    label = f"{advice.band[0]} running"
    ran = "drafting off" if advice.ran == 0 else f"{advice.ran} now"
    if advice.suggested is None:
        return f"{label}: {ran}, not measured"
    if advice.suggested == 0:
        return f"{label}: 0, speculation does not pay ({ran})"
    return f"{label}: {advice.suggested} ({ran}, est. {advice.expected_speedup:.2f}x)"


def _steps(advice: BandAdvice) -> int | None:
    """What to run in the band: the measured suggestion, else what the server ran."""
    return advice.suggested if advice.suggested is not None else advice.ran


def _judged(advice: Sequence[BandAdvice], adaptive: bool) -> str:
    """With a schedule already running (adaptive), where it differs from what pays."""
    if not adaptive:
        return ""
    differ = [a.band[0] for a in advice if a.suggested is not None and a.ran != a.suggested]
    if not differ:
        return "The server's schedule already runs the steps that pay. "
    return f"The server's schedule runs other steps than pay at {', '.join(differ)} running. "


def _static(
    advice: Sequence[BandAdvice],
    standard: Standard | None,
    algorithm: str | None,
    engine: str | None,
) -> str:
    """An engine that schedules no steps by load for this algorithm: one count, where it
    does best."""
    measured = [a for a in advice if a.suggested is not None]
    best = _best(advice)
    idle = [a.band[0] for a in measured if a.suggested == 0]
    count = _one_count(best.suggested or 0, standard, algorithm, engine)
    found = registry.BY_NAME.get(engine or "")
    text = f"{found.title if found else 'The engine'} schedules no steps by load here: {count}"
    if idle:
        text += f"; at {', '.join(idle)} running, speculation does not pay at all"
    return text + "."


def _best(advice: Sequence[BandAdvice]) -> BandAdvice:
    """The measured band where speculation does best."""
    measured = [a for a in advice if a.suggested is not None]
    return max(measured, key=lambda a: a.expected_speedup or 0.0)


def _older_release(advice: Sequence[BandAdvice], engine: str, count_setting: str) -> str:
    """A release without a schedule by batch size: the one count where it does best."""
    best = _best(advice)
    steps = best.suggested or 0
    count = "serve without speculation" if steps == 0 else f"{steps} ({count_setting})"
    return (
        f"This {engine} release drafts one count at every load: {count}; a per-batch-size "
        f"schedule needs a newer {engine}."
    )


def _one_count(
    steps: int, standard: Standard | None, algorithm: str | None, engine: str | None
) -> str:
    """``steps`` drafted tokens in the setting of ``engine`` (every engine's while it is not
    known): a block drafter's block size (its ``<algorithm>_block``), an n-gram lookup's draft
    tokens, else its draft steps."""
    if steps == 0:
        return "serve without speculation"
    said = engine_words(f"{(algorithm or '').lower()}_block", engine)
    if not said and standard is not None and not standard.has_draft_model:
        said = (
            f"{engine_words('draft_tokens', engine)}, and keep n-gram matches long "
            f"({engine_words('ngram_window', engine)}) rather than drafting wider"
        )
    if not said:
        said = f"{steps} draft steps ({engine_words('speculative_tokens', engine)})"
    return said.format(count=steps + 1, steps=steps)
