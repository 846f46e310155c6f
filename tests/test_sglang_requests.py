"""SGLang's finished-request lines read for their speculation figures, and nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.engines.record import RequestRecord
from exporter.engines.sglang_requests import TAIL_BYTES, read_request
from tests.support.loglines import decode_line
from tests.support.requests import OUTPUT, PROMPT, finish_line, meta_info

FORMS = [pytest.param(False, id="text"), pytest.param(True, id="json")]


@pytest.mark.parametrize("json_format", FORMS)
@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_every_level_and_form_gives_the_requests_figures(json_format: bool, level: int) -> None:
    line = finish_line(2.4, 50, level=level, json_format=json_format)

    record = read_request(line.encode())

    assert record == RequestRecord("2026-02-23T00:14:33", 2.4, (120 - 50 - 1) / 150, 50, 120)


@pytest.mark.parametrize("json_format", FORMS)
def test_a_request_without_figures_is_a_finish_without_accept_length(json_format: bool) -> None:
    line = finish_line(None, 0, json_format=json_format)

    record = read_request(line.encode())

    assert record is not None
    assert (record.accept_length, record.verify_rounds, record.completion_tokens) == (None, None, 1)


@pytest.mark.parametrize("json_format", FORMS)
@pytest.mark.parametrize("where", ["prompt", "output", "stop"])
def test_figures_quoted_by_the_user_are_never_read(json_format: bool, where: str) -> None:
    """A prompt, an output or a stop string may quote the keys; the real ones follow them."""
    forged = str(meta_info(1.0, 999))
    forged = forged.replace("'", '"') if json_format else forged
    texts = {"prompt": PROMPT, "output": OUTPUT, "stop": None}
    texts[where] = forged
    for real in (3.0, None):
        line = finish_line(
            real,
            40,
            level=3,
            json_format=json_format,
            prompt=texts["prompt"] or PROMPT,
            output=texts["output"] or OUTPUT,
            stop=texts["stop"],
        )

        record = read_request(line.encode())

        assert record is not None
        assert record.accept_length == real
        assert record.verify_rounds in (40, None)


@pytest.mark.parametrize("json_format", FORMS)
def test_a_level_3_line_of_megabytes_is_read_from_its_tail(json_format: bool) -> None:
    prompt = "ű" * (3 << 20)
    line = finish_line(1.0, 64, level=3, json_format=json_format, prompt=prompt, output=prompt)

    record = read_request(line.encode())

    assert record is not None and (record.accept_length, record.verify_rounds) == (1.0, 64)


@pytest.mark.parametrize("json_format", FORMS)
def test_a_clipped_line_keeps_its_figures_when_its_tail_does(json_format: bool) -> None:
    raw = finish_line(1.5, 20, level=3, json_format=json_format, output="x" * 100_000).encode()
    clipped = raw[:512] + raw[-TAIL_BYTES:]

    record = read_request(clipped, clipped=True)

    assert record is not None and (record.accept_length, record.clipped) == (1.5, True)


@pytest.mark.parametrize("json_format", FORMS)
def test_a_line_cut_before_its_figures_has_none(json_format: bool) -> None:
    """A line cut short (a writer killed mid-line) has no ``completion_tokens`` after the
    output: the figures quoted in the output are not taken for the request's."""
    raw = finish_line(2.0, 20, level=3, json_format=json_format, output=str(meta_info(1.0, 9)))
    cut = raw[: raw.index("'meta_info'" if not json_format else '"meta_info"')].encode()

    record = read_request(cut)

    assert record is not None and record.accept_length is None


@pytest.mark.parametrize("json_format", FORMS)
def test_only_label_shaped_header_values_are_kept(json_format: bool) -> None:
    headers = {"x-smg-routing-key": "tenant-a", "x-note": "hello world; drop table"}
    line = finish_line(2.0, 10, json_format=json_format, headers=headers)

    record = read_request(line.encode())

    assert record is not None and record.headers == (("x-smg-routing-key", "tenant-a"),)


@pytest.mark.parametrize(
    "line",
    [
        decode_line(2.0),
        "[2026-02-23 00:14:33] Receive: obj=GenerateReqInput(text='Finish: obj=')",
        "[2026-02-23 00:14:33 TP0] Finish: obj=GenerateReqInput()",
        '[2026-02-23 00:14:33] {"timestamp": "x", "event": "request.received", "rid": "1"}',
        "Finish: obj=GenerateReqInput(), out={'meta_info': {'completion_tokens': 9}}",
    ],
)
def test_other_lines_are_not_finished_requests(line: str) -> None:
    assert read_request(line.encode()) is None


def test_a_garbage_figure_is_no_figure() -> None:
    info = meta_info(2.0, 10)
    info["spec_accept_length"] = "nan"
    line = finish_line(info=info).replace("'nan'", "nan")

    record = read_request(line.encode())

    assert record is not None and record.accept_length is None


@given(
    prompt=st.text(max_size=300),
    output=st.text(max_size=300),
    real=st.one_of(st.none(), st.floats(1.0, 8.0)),
    json_format=st.booleans(),
    level=st.sampled_from([0, 1, 2, 3]),
)
def test_whatever_the_user_wrote_the_figures_are_the_engines(
    prompt: str, output: str, real: float | None, json_format: bool, level: int
) -> None:
    """Text with quotes, braces, keys and numbers in prompt and output never changes what is
    read, and never makes the reader raise."""
    line = finish_line(
        real, 40, level=level, json_format=json_format, prompt=prompt, output=output
    ).encode()

    record = read_request(line)

    assert record is not None
    expected = None if real is None else round(real * 40) / 40
    assert record.accept_length == expected


@given(garbage=st.binary(max_size=400), json_format=st.booleans())
def test_a_record_head_followed_by_garbage_never_raises(garbage: bytes, json_format: bool) -> None:
    head = finish_line(2.0, 10, json_format=json_format).encode()[:60]

    record = read_request(head + garbage)

    assert record is None or record.accept_length is None or record.accept_length >= 0


@pytest.mark.parametrize("json_format", FORMS)
@pytest.mark.parametrize("length", [1e308, 0.0, 0.5, 500.0])
def test_an_accept_length_no_verify_round_gives_is_no_figure(
    json_format: bool, length: float
) -> None:
    """1e308 left ``specwatch_request_accept_length_sum`` at +Inf for good; 0 and 500 entered
    the histogram. A request's accept length is 1 to 64, as a window's."""
    info = meta_info(2.4, 50)
    info["spec_accept_length"] = length
    line = finish_line(info=info, json_format=json_format)

    record = read_request(line.encode())

    assert record is not None
    assert (record.accept_length, record.accept_rate) == (None, None)
    assert record.completion_tokens == 120  # still a finished request


@pytest.mark.parametrize("json_format", FORMS)
def test_an_accept_rate_above_one_is_no_figure(json_format: bool) -> None:
    info = meta_info(2.4, 50)
    info["spec_accept_rate"] = 3.5
    record = read_request(finish_line(info=info, json_format=json_format).encode())
    assert record is not None and record.accept_length == 2.4 and record.accept_rate is None
