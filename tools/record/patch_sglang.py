"""Guard the one import SGLang 0.5.15 makes of a kernel stack a tiny dense model never uses.

SGLang's EAGLE-family worker (EAGLE, EAGLE3, STANDALONE share it) imports its DeepSeek
sparse-attention backend at start only to ask whether the draft's attention backend is one:
an ``isinstance`` check. That import pulls in the CUTLASS DSL (a 75 MB wheel), which is left
out of what is carried. The patch wraps the import so that, without the DSL, the check is made
against the other backends; nothing else changes. It is printed, so a recording can say which
engine file was changed and how.

Usage: python3 patch_sglang.py SITE_DIR   (the folder the engine was installed into)
"""

from __future__ import annotations

import sys
from pathlib import Path

EAGLE_FILE = "sglang/srt/speculative/eagle_worker_v2.py"
EAGLE_BEFORE = """\
            from sglang.srt.layers.attention.dsa_backend import (
                DeepseekSparseAttnBackend,
            )

            graph_supported_backend_types.append(DeepseekSparseAttnBackend)
"""
EAGLE_AFTER = """\
            try:
                from sglang.srt.layers.attention.dsa_backend import (
                    DeepseekSparseAttnBackend,
                )

                graph_supported_backend_types.append(DeepseekSparseAttnBackend)
            except ImportError:
                pass
"""
SAMPLER_FILE = "sglang/srt/layers/sampler.py"
SAMPLER_BEFORE = """\
if is_cuda():
    from flashinfer.sampling import (
        min_p_sampling_from_probs,
        top_k_top_p_sampling_from_probs,
    )
"""
SAMPLER_AFTER = """\
if is_cuda():
    try:
        from flashinfer.sampling import (
            min_p_sampling_from_probs,
            top_k_top_p_sampling_from_probs,
        )
    except ImportError:
        pass
"""
VISION_FILE = "sglang/srt/layers/attention/vision.py"
VISION_BEFORE = """\
if _is_cuda:
    from flashinfer.prefill import cudnn_batch_prefill_with_kv_cache
"""
VISION_AFTER = """\
if _is_cuda:
    try:
        from flashinfer.prefill import cudnn_batch_prefill_with_kv_cache
    except ImportError:
        pass
"""
PATCHES = [
    (EAGLE_FILE, EAGLE_BEFORE, EAGLE_AFTER, "the DeepseekSparseAttnBackend import (CUTLASS DSL)"),
    (SAMPLER_FILE, SAMPLER_BEFORE, SAMPLER_AFTER, "the FlashInfer sampling import"),
    (VISION_FILE, VISION_BEFORE, VISION_AFTER, "the FlashInfer cuDNN prefill import"),
]


def patch(site: Path, file: str, before: str, after: str, what: str) -> bool:
    path = site / file
    text = path.read_text()
    if after in text:
        print(f"{file}: already guarded")
        return True
    if text.count(before) != 1:
        print(f"{file}: the import to guard is not there; another SGLang version?", file=sys.stderr)
        return False
    path.write_text(text.replace(before, after))
    print(f"{file}: {what} guarded by ImportError")
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    done = [patch(Path(argv[1]), *args) for args in PATCHES]
    return 0 if all(done) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
