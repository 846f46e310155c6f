"""A server's text ``/metrics`` is read to exactly the samples prometheus-client's own text
parser gives, or refused as it refuses it: on every recorded exposition of a real engine, and
on generated ones, plain and not (escapes, quotes and spaces in labels, odd comments, counters
without ``_total``, bad numbers, families broken by other names).

specwatch reads plain lines itself, with a regular expression a line, and hands any body with a
line of another form to prometheus-client whole (``exporter/sources/upstream.py``); the reference
below is prometheus-client alone, as the reading was before.
"""

from __future__ import annotations

import io
import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from prometheus_client.parser import text_fd_to_metric_families

from exporter.engines import registry
from exporter.sources import upstream
from exporter.sources.upstream import ScrapeError, parse_metrics
from tests.support.recordings import Recording, recordings
from tests.support.sweep import sweep

TEXT = "text/plain; version=0.0.4"

Outcome = tuple[str, object]


def reference(body: bytes) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The samples as prometheus-client's text parser gives them, named as specwatch names
    them (an engine's other spellings folded)."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_fd_to_metric_families(io.StringIO(body.decode("utf-8"))):
        for sample in family.samples:
            name = sample.name
            for old, new in registry.NAME_FOLDS:
                name = name.replace(old, new, 1)
            samples.setdefault(name, []).append((dict(sample.labels), float(sample.value)))
    return samples


# What parse_metrics takes for a body it cannot parse ("garbage"): prometheus-client's own
# errors, and its OverflowError for an integer too large for a float ("9" * 320), which
# specwatch refuses as garbage too rather than reading as infinity.
UNPARSABLE = (ValueError, TypeError, IndexError, KeyError, OverflowError)


def outcome(read: object) -> Outcome:
    """What a reading came to, comparable: its samples in order, each value by its ``repr``
    (NaN equals NaN), or the kind of its refusal."""
    if isinstance(read, ScrapeError):
        return ("refused", read.reason)
    if isinstance(read, Exception):
        return ("refused", "garbage" if isinstance(read, UNPARSABLE) else type(read))
    assert isinstance(read, dict)
    return (
        "read",
        [
            (name, labels, repr(value))
            for name, samples in read.items()
            for labels, value in samples
        ],
    )


def both(body: bytes) -> tuple[Outcome, Outcome]:
    """specwatch's reading of ``body`` and the reference's."""
    got: object
    want: object
    try:
        got = parse_metrics(body, TEXT)
    except Exception as exc:  # an error is an outcome, compared
        got = exc
    try:
        body.decode("utf-8")  # parse_metrics refuses what does not decode, as garbage
        want = reference(body)
    except Exception as exc:
        want = exc
    return outcome(got), outcome(want)


# make unit reads a recording of each engine (a fifth of a CPU-second each), make test them all.
RECORDED = sweep(
    recordings(),
    [r for r in recordings() if r.id in ("sglang-0.5.15/healthy", "vllm-0.24.0/collapsed")],
    id=lambda recording: recording.id,
)


@pytest.mark.parametrize("recording", RECORDED)
def test_every_recorded_exposition_reads_as_prometheus_client_reads_it(
    recording: Recording,
) -> None:
    bodies = [s.body.encode() for s in recording.snapshots if s.status == 200 and s.body]
    assert bodies
    for body in bodies:
        got, want = both(body)
        assert got == want
        assert got[0] == "read"
        # Real engines write the plain form: none of these needs prometheus-client.
        assert upstream._plain_samples(body.decode(), math.inf) is not None


NAMES = st.sampled_from(
    ["foo", "foo_total", "foo_bucket", "foo_count", "foo_sum", "sglang:x_total", "vllm:y", "b"]
)
ODD_NAMES = st.sampled_from(["1foo", "fo-o", '"foo"', "", "foo{", "f\\o", "_total"])
LABEL_NAMES = st.sampled_from(["a", "le", "b_1", "__name__", "__x", "1a", "a:b", '"a"'])
PLAIN_VALUES = st.text(alphabet="ab ,={}#:\t\r\xe9", max_size=5)
ODD_VALUES = st.text(alphabet='ab",=}\\n\r \xe9', max_size=5)
NUMBERS = st.sampled_from(
    ["1", "1.5", "-0", "+3", "+Inf", "-Inf", "NaN", "nan", "1e3", "007", "9" * 320, "9" * 4400]
)
ODD_NUMBERS = st.sampled_from(["0x1", "1_0", "abc", "", "1e", "1..2", "\u0663", "1\x0b2"])
TIMESTAMPS = st.sampled_from(["", " 1700000000000", " 1.5", " x", " 1 2", "\t1"])


@st.composite
def label_sets(draw: st.DrawFn) -> str:
    names = draw(st.lists(LABEL_NAMES, max_size=3))
    values = [draw(PLAIN_VALUES | ODD_VALUES) for _ in names]
    separator = draw(st.sampled_from([",", ",", ", "]))
    inner = separator.join(f'{name}="{value}"' for name, value in zip(names, values, strict=True))
    return "{" + inner + draw(st.sampled_from(["", "", ","])) + "}"


@st.composite
def sample_lines(draw: st.DrawFn) -> str:
    name = draw(NAMES | ODD_NAMES) if draw(st.booleans()) else draw(NAMES)
    labels = draw(st.sampled_from(["", "{}"]) | label_sets())
    value = draw(NUMBERS | ODD_NUMBERS) if draw(st.booleans()) else draw(NUMBERS)
    gap = draw(st.sampled_from([" ", " ", "  ", "\t"]))
    return f"{name}{labels}{gap}{value}{draw(TIMESTAMPS)}"


COMMENTS = st.builds(
    "# {} {} {}".format,
    st.sampled_from(["HELP", "TYPE", "help", "EOF"]),
    NAMES | ODD_NAMES,
    st.sampled_from(
        ["counter", "gauge", "histogram", "summary", "untyped", "info", "counter x", "Gauge", ""]
    ),
) | st.sampled_from(["#", "# HELP", "# TYPE foo", "#\tTYPE foo counter", '# HELP foo say "hi"'])
LINES = st.one_of(
    sample_lines(),
    sample_lines(),
    COMMENTS,
    st.sampled_from(["", "  ", " foo 1 ", "foo 1\r", "\x1cfoo 2"]),
)


@given(st.lists(LINES, max_size=12), st.sampled_from(["\n", "\r\n"]))
@example(["# HELP foo counter", "foo " + "9" * 320], "\n")  # both refuse it
def test_any_exposition_reads_or_is_refused_as_prometheus_client_does(
    lines: list[str], end: str
) -> None:
    body = end.join(lines).encode()
    got, want = both(body)
    assert got == want


@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "# TYPE foo counter",
                    "# HELP foo x",
                    "# TYPE foo_total counter",
                    "# TYPE foo histogram",
                ]
            ),
            st.lists(
                st.tuples(NAMES, st.sampled_from(["", '{a="1"}', '{le="+Inf",b=""}'])), max_size=4
            ),
        ),
        max_size=4,
    )
)
def test_plain_families_read_as_prometheus_client_reads_them(
    families: list[tuple[str, list[tuple[str, str]]]],
) -> None:
    """Plain lines only, each read here and not by prometheus-client: which samples a family
    takes, a counter's ``_total``, a family broken by a sample of another name."""
    lines = []
    for comment, samples in families:
        lines.append(comment)
        lines += [f"{name}{labels} 1" for name, labels in samples]
    body = "\n".join(lines).encode()
    assert upstream._plain_samples(body.decode(), math.inf) is not None
    got, want = both(body)
    assert got == want
