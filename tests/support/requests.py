"""SGLang's finished-request lines (``--log-requests``), written by SGLang's own rules.

``RequestLogger.log_finished_request`` writes through its own logger
(``[%(asctime)s] %(message)s``, no rank list) either ``Finish: obj=<request>, headers=<dict>,
out=<dict>`` (each value rendered by ``_dataclass_to_string_truncated``: strings and lists over
the level's ``max_length`` keep their two halves around `` ... ``) or, with
``--log-requests-format json``, ``json.dumps`` of ``{"timestamp", "event": "request.finished",
"rid", "obj", "headers", "out"}`` (``ensure_ascii=False``; long strings keep their halves around
``...``). Levels 0 and 1 drop the text and token ids of request and output; level 2 keeps them
cut to 2048; level 3 keeps them whole. ``meta_info`` is filled in the tokenizer manager's order:
id, finish_reason, prompt_tokens, ..., completion_tokens, cached_tokens, e2e_latency, then the
speculation figures.
"""

from __future__ import annotations

import json
from typing import Any

# Text a user sent and a model wrote: none of it may leave specwatch.
PROMPT = "Tell me about Lake Bled; my card is 4111-1111-1111-1111"
OUTPUT = "Lake Bled lies in the Julian Alps ... SECRET-OUTPUT-7f3a"
RID = "rid-9c1b2e7d5a"

_CUT = {0: None, 1: None, 2: 2048, 3: 1 << 30}
_REQUEST_SKIPPED = {0: {"text", "input_ids", "sampling_params"}, 1: {"text", "input_ids"}}
_OUT_SKIPPED = {"text", "output_ids"}


def meta_info(
    accept_length: float | None,
    verify_ct: int,
    *,
    draft_tokens: int = 4,
    stop: str | None = None,
) -> dict[str, Any]:
    """A finished request's ``meta_info``: ``completion_tokens`` is ``accept_length`` times the
    verify rounds, as the engine computes the length; no figures when ``accept_length`` is None
    (a server without speculation)."""
    completion = round((accept_length or 1.0) * max(verify_ct, 1))
    finish: dict[str, Any] = (
        {"type": "length", "length": completion}
        if stop is None
        else {"type": "stop", "matched": stop}
    )
    info: dict[str, Any] = {
        "id": RID,
        "finish_reason": finish,
        "prompt_tokens": 812,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": completion,
        "cached_tokens": 256,
        "e2e_latency": 3.25,
    }
    if accept_length is not None:
        proposed = verify_ct * (draft_tokens - 1)
        # Each verify round commits its accepted drafts and the bonus token; the first token
        # of the output came from the prefill.
        correct = max(0, completion - verify_ct - 1)
        info.update(
            spec_accept_rate=correct / proposed,
            spec_accept_length=completion / verify_ct,
            spec_num_correct_drafts=correct,
            spec_num_proposed_drafts=proposed,
            spec_verify_ct=verify_ct,
        )
    info["response_sent_to_client_ts"] = 1771805673.25
    return info


def finish_line(
    accept_length: float | None = 2.4,
    verify_ct: int = 50,
    *,
    level: int = 2,
    json_format: bool = False,
    prompt: str = PROMPT,
    output: str = OUTPUT,
    headers: dict[str, str] | None = None,
    time_text: str = "2026-02-23 00:14:33",
    stop: str | None = None,
    info: dict[str, Any] | None = None,
) -> str:
    """One finished request as SGLang logs it at ``--log-requests-level`` ``level``."""
    request: dict[str, Any] = {
        "rid": RID,
        "text": prompt,
        "input_ids": None,
        "sampling_params": {"temperature": 0.7, "max_new_tokens": 512},
        "stream": False,
    }
    out: dict[str, Any] = {
        "text": output,
        "output_ids": [1734, 2201, 88, 13],
        "meta_info": info if info is not None else meta_info(accept_length, verify_ct, stop=stop),
    }
    request = {k: v for k, v in request.items() if k not in _REQUEST_SKIPPED.get(level, set())}
    if level < 2:
        out = {k: v for k, v in out.items() if k not in _OUT_SKIPPED}
    cut = _CUT[level]
    if json_format:
        data: dict[str, Any] = {
            "timestamp": time_text.replace(" ", "T") + ".123456",
            "event": "request.finished",
            "rid": RID,
            "obj": _json_cut(request, cut),
        }
        if headers:
            data["headers"] = headers
        data["out"] = _json_cut(out, cut)
        return f"[{time_text}] {json.dumps(data, ensure_ascii=False)}"
    fields = ", ".join(f"{k}={_text_cut(v, cut)}" for k, v in request.items())
    head = f", headers={headers}" if headers else ""
    return f"[{time_text}] Finish: obj=GenerateReqInput({fields}){head}, out={_text_cut(out, cut)}"


def _text_cut(value: Any, cut: int | None) -> str:
    """``_dataclass_to_string_truncated``'s rendering of ``value``."""
    limit = 1 << 30 if cut is None else cut
    if isinstance(value, str):
        if len(value) > limit:
            half = limit // 2
            return f"{value[:half]!r} ... {value[-half:]!r}"
        return repr(value)
    if isinstance(value, list):
        if len(value) > limit:
            half = limit // 2
            return f"{value[:half]} ... {value[-half:]}"
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"'{k}': {_text_cut(v, cut)}" for k, v in value.items()) + "}"
    return str(value)


def _json_cut(value: Any, cut: int | None) -> Any:
    """``_transform_data_for_logging``'s rendering of ``value``."""
    limit = 1 << 30 if cut is None else cut
    if isinstance(value, str) and len(value) > limit:
        half = limit // 2
        return value[:half] + "..." + value[-half:]
    if isinstance(value, list):
        items = [_json_cut(v, cut) for v in value]
        if len(items) > limit:
            half = limit // 2
            return [*items[:half], "...", *items[-half:]]
        return items
    if isinstance(value, dict):
        return {k: _json_cut(v, cut) for k, v in value.items()}
    return value
