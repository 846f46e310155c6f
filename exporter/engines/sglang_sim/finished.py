"""SGLang's finished-request lines (``--log-requests``), for the requests the traffic serves.

SGLang's request logger writes through its own logger to stdout, ``[date time] message``
without a rank. Level 1 (the level simulated) drops the prompt and output text and token ids
but keeps the sampling parameters; the text form renders the request dataclass and the output
dict, the JSON form is one ``request.finished`` object. The speculation figures come last in
``meta_info``, after the timing the request accumulated.
"""

from __future__ import annotations

import json
import random
from typing import Any

from exporter.engines.sglang_sim.lines import LogEvent

# The routing header SGLang logs by default; a class of traffic the drafter does not fit.
ROUTING_HEADER = "x-smg-routing-key"
CLASSES = ("chat-en", "code", "chat-de")
NO_BENEFIT_CLASS = "chat-ja"


def finish_event(
    offset: float,
    rng: random.Random,
    *,
    form: str,
    prompt_tokens: int,
    completion_tokens: int,
    accept_length: float | None,
    num_draft_tokens: int,
    traffic_class: str,
) -> LogEvent:
    """One finished request, with ``accept_length`` None meaning no draft was accepted."""
    rid = f"{rng.getrandbits(128):032x}"
    if accept_length is None:  # every round yields the bonus token only
        rounds = max(1, completion_tokens - 1)
    else:
        rounds = max(1, round(completion_tokens / accept_length))
    correct = max(0, completion_tokens - rounds - 1)
    proposed = rounds * (num_draft_tokens - 1)
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": {"type": "stop", "matched": 163586},
        "prompt_tokens": prompt_tokens,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": completion_tokens,
        "cached_tokens": min(prompt_tokens, 96),
        "e2e_latency": round(completion_tokens / 40.0, 4),
        "spec_accept_rate": correct / proposed,
        "spec_accept_length": completion_tokens / rounds,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": proposed,
        "spec_verify_ct": rounds,
    }
    sampling = {"temperature": 0.6, "max_new_tokens": 2048}
    headers = {ROUTING_HEADER: traffic_class}
    if form == "json":
        record = {
            "timestamp": "",  # the time it is written (LogEvent.json_stamp)
            "event": "request.finished",
            "rid": rid,
            "obj": {"rid": rid, "sampling_params": sampling, "stream": True},
            "headers": headers,
            "out": {"meta_info": meta},
        }
        message = json.dumps(record, ensure_ascii=False)
    else:
        request = f"GenerateReqInput(rid={rid!r}, sampling_params={sampling}, stream=True)"
        message = f"Finish: obj={request}, headers={headers}, out={dict(meta_info=meta)}"
    return LogEvent(offset, message, stream="stdout", json_stamp=form == "json")
