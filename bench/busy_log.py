"""A busy DP-attention SGLang node's log, the input of the end-to-end benchmarks.

One server with ``--enable-dp-attention`` over 8 GPUs (tp 8, dp 8): every logged second each
DP rank writes its own decode line (``[... DP3 TP3 EP3] Decode batch, ...``), prefills land on
random ranks, Prometheus and clients leave uvicorn access lines, and ``--log-requests`` writes
request logs with long prompts, some of which quote a stats line's text. The startup block
(``server_args``, weights, ``fired up``) is the simulator's, so ``report`` knows the flags.
Every line is in SGLang's Feb 2026 format; timestamps change every second, as on a real node.

    .venv/bin/python bench/busy_log.py OUT [--lines 1000000] [--ranks 8] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
from datetime import datetime, timedelta
from pathlib import Path

from exporter.engines.sglang_sim.eras import DEFAULT_ERA, ERAS
from exporter.engines.sglang_sim.startup import startup
from exporter.simulate.scenarios import SCENARIOS

# Prompt words; "decode" and "batch" appear, so prompts brush against the stats markers.
PROMPT = (
    "the model should summarise decode batch throughput and explain why speculative "
    "acceptance drops when the draft was trained on another chat template for long "
    "contexts with tool calls and retrieval results from the vector store"
)
WORDS = PROMPT.split(" ")


def _prefix(moment: datetime, rank: int | None) -> str:
    stamp = moment.strftime("%Y-%m-%d %H:%M:%S")
    return f"[{stamp} DP{rank} TP{rank} EP{rank}]" if rank is not None else f"[{stamp}]"


def _decode(rng: random.Random, accept: float) -> str:
    running = rng.randint(20, 48)
    length = max(1.0, rng.gauss(accept, 0.15))
    return (
        f"Decode batch, #running-req: {running}, #token: {rng.randint(20000, 110000)}, "
        f"token usage: {rng.uniform(0.2, 0.95):.2f}, accept len: {length:.2f}, "
        f"accept rate: {length / 4:.2f}, cuda graph: True, "
        f"gen throughput (token/s): {running * length * rng.uniform(16, 19):.2f}, "
        f"#queue-req: {rng.randint(0, 12)}"
    )


def _prefill(rng: random.Random) -> str:
    return (
        f"Prefill batch, #new-seq: {rng.randint(1, 4)}, #new-token: {rng.randint(64, 8192)}, "
        f"#cached-token: {rng.randint(0, 6000)}, token usage: {rng.uniform(0.2, 0.95):.2f}, "
        f"#running-req: {rng.randint(20, 48)}, #queue-req: {rng.randint(0, 12)}, "
        f"input throughput (token/s): {rng.uniform(2000, 40000):.2f}, cuda graph: False"
    )


def _access(rng: random.Random) -> str:
    client = f"10.0.{rng.randint(0, 3)}.{rng.randint(2, 250)}:{rng.randint(30000, 60000)}"
    request = rng.choice(("GET /metrics", "POST /v1/chat/completions", "GET /health"))
    return f'INFO:     {client} - "{request} HTTP/1.1" 200 OK'


def _prompt(rng: random.Random) -> str:
    text = " ".join(rng.choices(WORDS, k=rng.randint(40, 160)))
    if rng.random() < 0.2:  # a user pasting a stats line into the prompt
        text += " Decode batch, #running-req: 1, accept len: 9.99, gen throughput (token/s): 1"
    return text


def _request(rng: random.Random) -> str:
    rid = f"{rng.getrandbits(64):016x}"
    if rng.random() < 0.5:
        return (
            f"Receive: obj=GenerateReqInput(rid='{rid}', text='{_prompt(rng)}', "
            f"sampling_params={{'max_new_tokens': {rng.randint(64, 2048)}}}, stream=True)"
        )
    return (
        f"Finish: obj=GenerateReqInput(rid='{rid}', text='{_prompt(rng)}'), out={{'meta_info': "
        f"{{'completion_tokens': {rng.randint(10, 2000)}, "
        f"'spec_verify_ct': {rng.randint(1, 500)}}}}}"
    )


def _second(rng: random.Random, moment: datetime, ranks: int, accept: float) -> list[str]:
    """One logged second: a decode line per rank, interleaved with everything else."""
    return second_of(rng, moment, ranks, accept, ranks, rng.randint(8, 14), rng.randint(2, 6))


def second_of(
    rng: random.Random,
    moment: datetime,
    ranks: int,
    accept: float,
    prefills: int,
    accesses: int,
    requests: int,
) -> list[str]:
    """One logged second of a node whose load is given by counts: a decode line per rank,
    then that many prefill, uvicorn access and ``--log-requests`` lines, shuffled."""
    lines = [f"{_prefix(moment, rank)} {_decode(rng, accept)}" for rank in range(ranks)]
    lines += [f"{_prefix(moment, rng.randrange(ranks))} {_prefill(rng)}" for _ in range(prefills)]
    lines += [f"{_prefix(moment, None)} {_access(rng)}" for _ in range(accesses)]
    lines += [f"{_prefix(moment, None)} {_request(rng)}" for _ in range(requests)]
    rng.shuffle(lines)
    return lines


def write_busy_log(path: Path, lines: int, ranks: int = 8, seed: int = 7) -> int:
    """Write ``lines`` lines (the startup block included); returns how many decode lines."""
    rng = random.Random(seed)
    era = ERAS[DEFAULT_ERA]
    phase = SCENARIOS["healthy"].phases[0]
    base = era.base_time
    written = 0
    decode = 0
    with path.open("w", encoding="utf-8") as out:
        boot = startup(phase.deployment, era, rng, 0.0, warm=False)
        for event in boot:
            out.write(event.render(base + timedelta(seconds=event.offset)) + "\n")
            written += 1
        second = int(boot[-1].offset) + 1
        while written < lines:
            moment = base + timedelta(seconds=second)
            for line in _second(rng, moment, ranks, phase.behaviour.accept_length):
                if written == lines:
                    break
                out.write(line + "\n")
                written += 1
                decode += "] Decode batch" in line
            second += 1
    return decode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    decode = write_busy_log(args.out, args.lines, args.ranks, args.seed)
    print(f"{args.out}: {args.lines} lines, {decode} decode lines")


if __name__ == "__main__":
    main()
