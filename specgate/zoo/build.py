"""Deterministic builder of the embedded zoo (no hub, no download).

    python -m specgate.zoo.build [--out fixtures/zoo] [--force]

Makes, from local data only:
  target/  a BPE tokenizer trained on the Python standard library's sources, and a tiny Llama
  draft/   a smaller Llama sharing that tokenizer (method draft_model)
  eagle/   an EAGLE-1 head in the checkpoint layout vLLM's EagleLlamaForCausalLM loads
  eagle3/  an EAGLE-3 head in the layout Eagle3LlamaForCausalLM loads
The same Python, torch and seed give the same files. Weights are seeded random initialisations.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import sysconfig
import time
from pathlib import Path

from specgate.zoo import ZOO_MODELS, check_model_dir, zoo_dir

SEED = 1234
VOCAB_SIZE = 2048
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
# The suite applies this template itself (prompts.py) so every method sees identical token ids.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Shapes: small enough to build in seconds and boot fast on 2 CPU cores.
TARGET = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2)
DRAFT = dict(hidden_size=96, intermediate_size=256, num_hidden_layers=1, num_attention_heads=3, num_key_value_heads=1)
# EAGLE-3 reads the target's hidden states entering these layers (outputs of layers 0, 1, 2). vLLM's
# default for Llama assumes a deep target, so a 4-layer target must name them.
EAGLE3_AUX_LAYERS = [1, 2, 3]
INIT_STD = 0.08  # wider than HF's 0.02 so random-weight logits are decisive (few near-ties)


def training_text_files() -> list[Path]:
    """Local text the tokenizer learns from: the standard library's own sources, sorted."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p
        for p in stdlib.rglob("*.py")
        if not any(part in {"test", "tests", "idlelib", "site-packages", "lib2to3"} for part in p.parts)
    )
    if not files:
        sys.exit(f"zoo build: no Python sources found under {stdlib}; cannot train the tokenizer.")
    return files


def build_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def lines():
        for f in training_text_files():
            yield f.read_text(encoding="utf-8", errors="replace")

    tok.train_from_iterator(lines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(out)
    return fast


def _llama_config(shape: dict, tokenizer, **extra):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=INIT_STD,
        torch_dtype="float32",
        **shape,
        **extra,
    )


def build_llama(out: Path, shape: dict, tokenizer, seed: int) -> None:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(_llama_config(shape, tokenizer))
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _randn(gen, *shape):
    import torch

    return torch.randn(*shape, generator=gen) * INIT_STD


def _decoder_layer(gen, prefix: str, hidden: int, heads: int, kv_heads: int, inter: int, q_in: int) -> dict:
    import torch

    head_dim = hidden // heads
    return {
        f"{prefix}self_attn.q_proj.weight": _randn(gen, heads * head_dim, q_in),
        f"{prefix}self_attn.k_proj.weight": _randn(gen, kv_heads * head_dim, q_in),
        f"{prefix}self_attn.v_proj.weight": _randn(gen, kv_heads * head_dim, q_in),
        f"{prefix}self_attn.o_proj.weight": _randn(gen, hidden, heads * head_dim),
        f"{prefix}post_attention_layernorm.weight": torch.ones(hidden),
        f"{prefix}mlp.gate_proj.weight": _randn(gen, inter, hidden),
        f"{prefix}mlp.up_proj.weight": _randn(gen, inter, hidden),
        f"{prefix}mlp.down_proj.weight": _randn(gen, hidden, inter),
    }


def _save_head(out: Path, config: dict, tensors: dict) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"))


def build_eagle(out: Path, tokenizer, seed: int) -> None:
    """EAGLE-1: fc([embed; hidden]) -> one decoder layer without input norm; shares embed/lm_head."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    h = TARGET["hidden_size"]
    shape = dict(TARGET, num_hidden_layers=1)
    tensors = {"fc.weight": _randn(gen, h, 2 * h)}
    tensors.update(_decoder_layer(gen, "layers.0.", h, shape["num_attention_heads"], shape["num_key_value_heads"], shape["intermediate_size"], h))
    config = _llama_config(shape, tokenizer).to_dict()
    config["architectures"] = ["LlamaForCausalLM"]  # vLLM maps it to EagleLlamaForCausalLM
    _save_head(out, config, tensors)


def build_eagle3(out: Path, tokenizer, seed: int) -> None:
    """EAGLE-3: fc over 3 target hidden states, one layer on [embed; hidden], its own norm and lm_head."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    h = TARGET["hidden_size"]
    shape = dict(TARGET, num_hidden_layers=1)
    tensors = {
        "fc.weight": _randn(gen, h, len(EAGLE3_AUX_LAYERS) * h),
        "midlayer.input_layernorm.weight": torch.ones(h),
        "midlayer.hidden_norm.weight": torch.ones(h),
        "norm.weight": torch.ones(h),
        "lm_head.weight": _randn(gen, VOCAB_SIZE, h),
    }
    tensors.update(_decoder_layer(gen, "midlayer.", h, shape["num_attention_heads"], shape["num_key_value_heads"], shape["intermediate_size"], 2 * h))
    config = _llama_config(shape, tokenizer).to_dict()
    config.update(
        architectures=["LlamaForCausalLMEagle3"],
        draft_vocab_size=VOCAB_SIZE,
        target_hidden_size=h,
        eagle_config={"eagle_aux_hidden_state_layer_ids": EAGLE3_AUX_LAYERS, "use_aux_hidden_state": True},
    )
    _save_head(out, config, tensors)


def build(out: Path, force: bool = False) -> list[str]:
    """Build every zoo model that is missing (or all with force); return the names built."""
    from transformers import AutoTokenizer

    todo = [n for n in ZOO_MODELS if force or not _complete(out / n)]
    if not todo:
        return []
    tmp = out.with_name(out.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if "target" in todo or not (out / "target" / "tokenizer.json").is_file():
        tokenizer = build_tokenizer(tmp / "target")
        todo = list(ZOO_MODELS)  # a new tokenizer invalidates every model built on it
    else:
        tokenizer = AutoTokenizer.from_pretrained(out / "target")
    builders = {
        "target": lambda d: build_llama(d, TARGET, tokenizer, SEED),
        "draft": lambda d: build_llama(d, DRAFT, tokenizer, SEED + 1),
        "eagle": lambda d: build_eagle(d, tokenizer, SEED + 2),
        "eagle3": lambda d: build_eagle3(d, tokenizer, SEED + 3),
    }
    for name in todo:
        builders[name](tmp / name)
        check_model_dir(tmp / name)
    # Move finished models into place only now, so an interrupted build leaves no half-written model.
    out.mkdir(parents=True, exist_ok=True)
    for name in todo:
        shutil.rmtree(out / name, ignore_errors=True)
        (tmp / name).rename(out / name)
    shutil.rmtree(tmp, ignore_errors=True)
    return todo


def _complete(path: Path) -> bool:
    try:
        check_model_dir(path)
        return True
    except Exception:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specgate.zoo.build", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=zoo_dir(Path.cwd()), help="zoo directory (default: fixtures/zoo)")
    parser.add_argument("--force", action="store_true", help="rebuild every model, even complete ones")
    args = parser.parse_args(argv)
    start = time.monotonic()
    built = build(args.out, force=args.force)
    took = time.monotonic() - start
    print(f"zoo: built {', '.join(built)} in {took:.1f} s" if built else f"zoo: {args.out} is complete")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
