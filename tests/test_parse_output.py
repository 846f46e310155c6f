"""What `specwatch parse` prints for its records, table and JSON.

Rows are made from cached templates, a read's records printed together; whatever the records,
the text is the one the table's definition gives a cell at a time (``reference_row``), and
the JSON is ``json.dumps`` of each record's ``to_json_dict``.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from exporter.commands.parse import PrintingSink, header_row
from exporter.engines.record import StatsRecord
from tests.support.records import decode, draft_counts

# (record attribute, width, decimals) of each column: text is left-aligned, numbers right.
COLUMNS: tuple[tuple[str, int, int | None], ...] = (
    ("time", 23, None),
    ("kind", 7, None),
    ("dp_rank", 3, 0),
    ("tp_rank", 3, 0),
    ("running_requests", 5, 0),
    ("queued_requests", 5, 0),
    ("token_usage", 5, 2),
    ("accept_length", 7, 2),
    ("accept_rate", 8, 2),
    ("cuda_graph", 5, None),
    ("gen_throughput", 10, 2),
    ("new_tokens", 7, 0),
    ("cached_tokens", 7, 0),
    ("input_throughput", 10, 2),
)


def reference_row(record: StatsRecord) -> str:
    """A cell at a time: None is ``-``, a boolean a lower-case word, a float in a column
    with decimals has that many, anything else is its ``str``."""
    cells = []
    for attr, width, places in COLUMNS:
        value = getattr(record, attr)
        if value is None:
            text = "-"
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float) and places:
            text = f"{value:.{places}f}"
        else:
            text = str(value)
        cells.append(text.ljust(width) if places is None else text.rjust(width))
    return " ".join(cells)


def printed(records: list[StatsRecord], as_json: bool = False) -> tuple[str, PrintingSink]:
    out = io.StringIO()
    sink = PrintingSink(out, as_json)
    sink.on_records(records)
    return out.getvalue(), sink


TEXT = st.text(max_size=30)  # "%" and wide characters included
ODD_FLOATS = st.sampled_from([1e20, -1e20, 5e-324, -0.0, 0.005, 0.015, 2.675, math.inf, math.nan])
FLOATS = st.one_of(st.floats(), ODD_FLOATS)
# What the fields' types allow, beyond what the parser makes: an int where a float is
# declared, a bool (an int) where an int is.
INTS = st.one_of(st.none(), st.integers(), st.booleans())
REALS = st.one_of(st.none(), FLOATS, st.integers(), st.booleans())
EXTRA_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), FLOATS, TEXT)
RECORDS = st.builds(
    StatsRecord,
    kind=st.one_of(st.sampled_from(["decode", "prefill"]), TEXT),
    time=st.one_of(st.none(), st.just("2026-02-23T00:14:33"), TEXT),
    engine=st.sampled_from(["sglang", "vllm"]),
    dp_rank=INTS,
    tp_rank=INTS,
    running_requests=INTS,
    queued_requests=INTS,
    token_usage=REALS,
    accept_length=REALS,
    accept_rate=REALS,
    cuda_graph=st.one_of(st.none(), st.booleans()),
    gen_throughput=REALS,
    new_tokens=INTS,
    cached_tokens=INTS,
    input_throughput=REALS,
    draft_counts=draft_counts(st.one_of(st.none(), st.tuples(FLOATS, FLOATS))),
    extra=st.dictionaries(st.one_of(TEXT, st.sampled_from(["time", "new_seqs"])), EXTRA_VALUES),
)

# Any: each field is given values of its own type at run time, as ``alike`` picks them.
BY_TYPE: dict[type, st.SearchStrategy[Any]] = {
    type(None): st.none(),
    bool: st.booleans(),
    int: st.integers(),
    float: FLOATS,
    str: TEXT,
}


def alike(record: StatsRecord) -> st.SearchStrategy[StatsRecord]:
    """Records whose printed fields have the types of ``record``'s, with any values."""
    fields = {attr: BY_TYPE[type(getattr(record, attr))] for attr, _, _ in COLUMNS}
    return st.fixed_dictionaries(fields).map(lambda values: StatsRecord(**values))


def test_rows_of_a_decode_and_a_prefill_record_are_aligned_under_the_header() -> None:
    text, _ = printed(
        [
            decode(time="2026-02-23T00:14:33", tp_rank=0, gen_throughput=637.19),
            StatsRecord(
                kind="prefill",
                time="2026-02-23T00:14:31",
                dp_rank=3,
                tp_rank=3,
                running_requests=11,
                queued_requests=0,
                token_usage=0.09,
                cuda_graph=False,
                new_tokens=2048,
                cached_tokens=512,
                input_throughput=8123.4,
            ),
        ]
    )
    assert [header_row(), *text.splitlines()] == [
        "time                    kind     dp  tp   run queue usage acc_len acc_rate graph "
        " gen_tok/s new_tok  cached   in_tok/s",
        "2026-02-23T00:14:33     decode    -   0    48    32  0.06    1.00     0.25 true  "
        "    637.19       -       -          -",
        "2026-02-23T00:14:31     prefill   3   3    11     0  0.09       -        - false "
        "         -    2048     512    8123.40",
    ]


@given(st.lists(RECORDS, max_size=20))
def test_every_row_is_the_one_its_cells_make(records: list[StatsRecord]) -> None:
    text, _ = printed(records)
    assert text == "".join(reference_row(record) + "\n" for record in records)


@given(RECORDS.flatmap(lambda first: st.lists(alike(first), min_size=2, max_size=20)))
def test_rows_alike_in_types_differ_in_text_as_their_values_do(records: list[StatsRecord]) -> None:
    text, _ = printed(records)
    assert text == "".join(reference_row(record) + "\n" for record in records)


@given(st.lists(RECORDS, max_size=20))
def test_every_json_line_is_the_records_json_dict(records: list[StatsRecord]) -> None:
    text, _ = printed(records, as_json=True)
    assert text == "".join(json.dumps(record.to_json_dict()) + "\n" for record in records)


def test_records_are_counted_by_kind_and_printed_in_order_one_by_one_or_together() -> None:
    records = [decode(running_requests=n) for n in range(5)]
    records[1:3] = [record._replace(kind="prefill") for record in records[1:3]]
    together, sink = printed(records)
    assert together == "".join(reference_row(record) + "\n" for record in records)
    assert sink.records == {"decode": 3, "prefill": 2}
    out = io.StringIO()
    one_by_one = PrintingSink(out, as_json=False)
    for record in records:
        one_by_one.on_record(record)
        assert out.getvalue().endswith(reference_row(record) + "\n")  # at once, not held
    assert out.getvalue() == together and one_by_one.records == sink.records
