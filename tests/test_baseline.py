"""Baselines: interpolation, clamping, validation, and bench_serving result files.

Expected numbers are worked out by hand from the curve definitions and from the values
written into ``tests/data/bench_serving_*.jsonl`` (the ``--output-file`` JSON-lines format of
``python -m sglang.bench_serving``: one object per run, ``max_concurrency``,
``concurrency``, ``output_throughput``, ``server_info``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.analysis.baseline import Baseline, BaselineError

DATA = Path(__file__).parent / "data"
CURVE = "1:82,48:1500,128:2370"


def test_single_value_is_the_same_at_every_load() -> None:
    baseline = Baseline.from_tok_s(90)
    assert [baseline.at(r) for r in (0, 1, 17.5, 500)] == [90.0, 90.0, 90.0, 90.0]


@pytest.mark.parametrize(
    ("running", "expected"),
    [
        (1, 82.0),
        (48, 1500.0),
        (128, 2370.0),
        # halfway between 48 and 128: 1500 + 870 / 2
        (88, 1935.0),
        # 24.5 is halfway between 1 and 48: (82 + 1500) / 2
        (24.5, 791.0),
    ],
)
def test_curve_interpolates_linearly_between_points(running: float, expected: float) -> None:
    assert Baseline.from_curve(CURVE).at(running) == pytest.approx(expected)


@pytest.mark.parametrize(("running", "expected"), [(0, 82.0), (0.5, 82.0), (129, 2370.0)])
def test_curve_clamps_outside_measured_range(running: float, expected: float) -> None:
    assert Baseline.from_curve(CURVE).at(running) == expected


def test_curve_tolerates_spaces_and_float_values() -> None:
    baseline = Baseline.from_curve(" 1 : 82.5 , 10:100 ")
    assert baseline.points == ((1.0, 82.5), (10.0, 100.0))


@given(
    st.lists(st.floats(1, 1e4), min_size=1, max_size=8, unique=True),
    st.floats(0, 2e4),
)
def test_curve_value_always_lies_between_neighbouring_points(
    xs: list[float], running: float
) -> None:
    xs = sorted(xs)
    ys = [float(10 + 7 * i) for i in range(len(xs))]
    baseline = Baseline(points=tuple(zip(xs, ys, strict=True)), source="test")
    value = baseline.at(running)
    assert min(ys) <= value <= max(ys)


@pytest.mark.parametrize(
    ("curve", "fragment"),
    [
        ("", "empty"),
        ("1:82,,48:1500", "empty"),
        ("48:1500,1:82", "strictly increasing"),
        ("1:82,1:90", "strictly increasing"),
        ("1-82", "RUNNING:TOK_S"),
        ("1:fast", "RUNNING:TOK_S"),
        ("0:82", "positive"),
        ("1:-5", "positive"),
        ("1:nan", "positive"),
    ],
)
def test_bad_curve_is_rejected_with_a_clear_message(curve: str, fragment: str) -> None:
    with pytest.raises(BaselineError, match=fragment):
        Baseline.from_curve(curve)


@pytest.mark.parametrize("value", [0, -1, float("inf"), True])
def test_bad_single_value_is_rejected(value: float) -> None:
    with pytest.raises(BaselineError):
        Baseline.from_tok_s(value)


def test_bench_file_builds_curve_from_non_speculative_runs() -> None:
    baseline = Baseline.from_bench_file(DATA / "bench_serving_baseline.jsonl")
    # Two runs at max_concurrency 1 (89.8 and 90.6) are averaged; the run without a cap
    # (max_concurrency null) uses its measured concurrency 24.0.
    expected: tuple[tuple[float, object], ...] = (
        (1.0, pytest.approx(90.2)),
        (8.0, 610.5),
        (24.0, 1100.0),
        (48.0, 1560.0),
        (128.0, 2370.0),
    )
    assert baseline.points == expected
    assert baseline.at(36) == pytest.approx(1330.0)


def test_bench_file_from_a_speculative_run_is_rejected() -> None:
    path = DATA / "bench_serving_speculative.jsonl"
    with pytest.raises(BaselineError, match=r"line 1: .*speculative_algorithm='EAGLE3'") as info:
        Baseline.from_bench_file(path)
    assert str(path) in str(info.value)


def test_speculative_algorithm_found_in_per_rank_internal_states(tmp_path: Path) -> None:
    line = {
        "max_concurrency": 4,
        "output_throughput": 300.0,
        "server_info": {"internal_states": [{"speculative_algorithm": "NGRAM"}]},
    }
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(BaselineError, match="NGRAM"):
        Baseline.from_bench_file(path)


@pytest.mark.parametrize(
    ("second_line", "fragment"),
    [
        ('{"max_concurrency": 8, "output_throughput": 61', "line 2: not valid JSON"),
        ("[1, 2]", "line 2: expected a JSON object"),
        ('{"max_concurrency": 8}', "line 2: needs output_throughput"),
        ('{"output_throughput": 600.0}', "line 2: needs output_throughput"),
        ('{"max_concurrency": 8, "output_throughput": "fast"}', "line 2: output_throughput"),
        ('{"max_concurrency": 0, "output_throughput": 600.0}', "line 2: max_concurrency"),
    ],
)
def test_malformed_bench_file_names_file_and_line(
    tmp_path: Path, second_line: str, fragment: str
) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text('{"max_concurrency": 1, "output_throughput": 90.0}\n' + second_line + "\n")
    with pytest.raises(BaselineError, match=fragment) as info:
        Baseline.from_bench_file(path)
    assert str(path) in str(info.value)


def test_empty_or_missing_bench_file_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(BaselineError, match="no benchmark results"):
        Baseline.from_bench_file(empty)
    with pytest.raises(BaselineError, match="cannot read"):
        Baseline.from_bench_file(tmp_path / "absent.jsonl")


def test_from_options_picks_the_one_given() -> None:
    assert Baseline.from_options() is None
    flat = Baseline.from_options(tok_s=90)
    assert flat is not None and flat.at(5) == 90.0
    curve = Baseline.from_options(curve=CURVE)
    assert curve is not None and curve.at(48) == 1500.0
    bench = Baseline.from_options(bench_file=DATA / "bench_serving_baseline.jsonl")
    assert bench is not None and bench.at(128) == 2370.0


def test_from_options_rejects_more_than_one() -> None:
    with pytest.raises(BaselineError, match=r"at most one baseline.*tok_s and curve"):
        Baseline.from_options(tok_s=90, curve=CURVE)


def test_describe_says_where_the_numbers_come_from() -> None:
    assert Baseline.from_tok_s(2370).describe() == "2,370 tok/s (single value)"
    assert Baseline.from_curve("1:82,48:1500").describe() == "curve 1:82, 48:1,500 (curve)"
