"""Make the tiny models a recording serves, with no download.

A recording needs an engine doing real speculative decoding, not a good model: a random-weight
Llama is enough, and it is made on the machine because a machine with no network cannot fetch
one. What each draft is for:

- ``target``: a random ``LlamaForCausalLM`` (vocabulary 4096, hidden 256, 4 layers) and a
  word-level fast tokenizer of exactly that vocabulary (bos 1, eos 2, pad 3);
- ``draft-same``: a copy of the target. Under greedy sampling it proposes exactly what the
  target would pick, so every drafted token is accepted: the healthy case;
- ``draft-other``: the same shape with other random weights. It proposes what the target
  almost never picks: the collapsed case;
- ``eagle3-head``: a random EAGLE-3 head for this target (one decoder layer over the target's
  hidden states of three layers), for engines that load one.

Usage: python3 make_models.py OUT_DIR   (needs torch, transformers, tokenizers, safetensors)
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

VOCAB = 4096
HIDDEN = 256
LAYERS = 4
HEADS = 4
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


def words() -> list[str]:
    """The tokenizer's vocabulary: the specials, then plain words, VOCAB in all."""
    return SPECIALS + [f"w{i}" for i in range(VOCAB - len(SPECIALS))]


def save_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(words())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(path))


def llama_config() -> object:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=4 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=2048,
        initializer_range=0.1,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )


def save_llama(path: Path, seed: int) -> None:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config()).to(torch.bfloat16)  # type: ignore[arg-type]
    model.save_pretrained(str(path), safe_serialization=True)
    save_tokenizer(path)


def save_eagle3_head(path: Path, seed: int) -> None:
    """A random EAGLE-3 head in the layout EAGLE-3 checkpoints use (``midlayer``, ``fc``).

    ``eagle_aux_hidden_state_layer_ids`` is set: on a 4-layer target the engines' default
    capture layers repeat and the head's input shape would not match.
    """
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    std = 0.1
    hid, inter, head_dim = HIDDEN, 4 * HIDDEN, HIDDEN // HEADS

    def rnd(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape) * std).to(torch.bfloat16)

    tensors = {
        "fc.weight": rnd(hid, 3 * hid),
        "midlayer.input_layernorm.weight": torch.ones(hid, dtype=torch.bfloat16),
        "midlayer.hidden_norm.weight": torch.ones(hid, dtype=torch.bfloat16),
        "midlayer.post_attention_layernorm.weight": torch.ones(hid, dtype=torch.bfloat16),
        "midlayer.self_attn.q_proj.weight": rnd(HEADS * head_dim, 2 * hid),
        "midlayer.self_attn.k_proj.weight": rnd(HEADS * head_dim, 2 * hid),
        "midlayer.self_attn.v_proj.weight": rnd(HEADS * head_dim, 2 * hid),
        "midlayer.self_attn.o_proj.weight": rnd(hid, HEADS * head_dim),
        "midlayer.mlp.gate_proj.weight": rnd(inter, hid),
        "midlayer.mlp.up_proj.weight": rnd(inter, hid),
        "midlayer.mlp.down_proj.weight": rnd(hid, inter),
        "norm.weight": torch.ones(hid, dtype=torch.bfloat16),
        "lm_head.weight": rnd(VOCAB, hid),
        "d2t": torch.zeros(VOCAB, dtype=torch.int64),
        "t2d": torch.ones(VOCAB, dtype=torch.bool),
    }
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model.safetensors"))
    config = llama_config().to_dict()  # type: ignore[attr-defined]
    config.update(
        architectures=["LlamaForCausalLMEagle3"],
        num_hidden_layers=1,
        draft_vocab_size=VOCAB,
        target_hidden_size=hid,
        eagle_aux_hidden_state_layer_ids=[0, 1, 2],
        eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 2]},
    )
    (path / "config.json").write_text(json.dumps(config, indent=2))
    save_tokenizer(path)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    save_llama(out / "target", seed=0)
    shutil.copytree(out / "target", out / "draft-same", dirs_exist_ok=True)
    save_llama(out / "draft-other", seed=1)
    save_eagle3_head(out / "eagle3-head", seed=2)
    for name in ("target", "draft-same", "draft-other", "eagle3-head"):
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
