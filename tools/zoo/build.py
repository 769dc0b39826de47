"""The zoo's tokenizer and checkpoint writers (one per format), and a random-weight builder.

    python -m tools.zoo.build [--out fixtures/zoo] [--random]

The committed zoo is trained by `python -m tools.zoo.train` (minutes on 2 cores, local data
only; see fixtures/zoo/MODEL_CARD.md). This command does nothing when the zoo is complete, names
the missing or corrupt file otherwise (ci/setup-cpu.sh runs the same check as `python -m
specgate.models`), and with `--random` replaces the zoo by seeded random weights in seconds (formats
and plumbing only).

Formats, as vLLM 0.32 loads them:
  target/, draft/, target_perturbed/  LlamaForCausalLM (+ the BPE tokenizer trained on the stdlib)
  eagle/   EAGLE-1 for EagleLlamaForCausalLM      eagle3/  EAGLE-3 for Eagle3LlamaForCausalLM
  medusa/  vLLM's Medusa                           mlp_speculator/  vLLM's MLPSpeculator
  mtp_target/  the target's own weights as a MiMo (Qwen2-style) model plus one MTP layer (method mtp)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import sysconfig
import time
from pathlib import Path

from specgate.errors import ZooError
from specgate.models import TARGET_LINK, ZOO_MODELS, check_model_dir, zoo_dir

SEED = 1234
VOCAB_SIZE = 2048
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
# The suite applies this template itself (prompts.py) so every method sees identical token ids.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
STORE_DTYPE_NAME = "float16"  # checkpoints store float16; profiles compute in float32 (exact upcast)
# Shapes. On the CPU engine a decode step costs about the same per layer whatever the width, and a
# drafter adds one layer (EAGLE) or none (Medusa). Measured at C=1 with random weights, per step:
# 6 x 192 target 2.6 ms, + EAGLE 4.8, + Medusa 4.2, + draft model 6.4 (break-even acceptance length
# 1.8 / 1.6 / 2.4); 12 x 128 target 4.7 ms, + EAGLE 6.6, + Medusa 5.0, + draft 7.4 (1.4 / 1.1 / 1.6).
# So the target is deep and narrow: speculation can pay off as it does on real models.
TARGET = dict(
    hidden_size=128, intermediate_size=384, num_hidden_layers=12, num_attention_heads=2, num_key_value_heads=1
)
DRAFT = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
# EAGLE-3 reads the target's residual stream entering these layers (low, middle, high). Named in the
# head's config (vLLM's Llama default, (2, n // 2, n - 3), is the same for 12 layers) so that a
# change of depth here cannot silently point it elsewhere.
EAGLE3_AUX_LAYERS = [2, 6, 9]
MEDUSA_HEADS = 3  # one per speculative token the profile asks for
MLP_SPECULATOR = dict(n_predict=3, inner_dim=64)  # tied stages keep the file small
MTP_LAYERS = 1  # vLLM's MiMo MTP predicts one token per step
# Random builds only: relative noise of target_perturbed (train.py tunes it on the trained target).
PERTURB = 0.02
INIT_STD = 0.08  # random builds: wider than HF's 0.02 so random-weight logits are decisive


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


def _llama_config(shape: dict, tokenizer, **extra) -> dict:
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
        torch_dtype="float32",  # the dtype to compute in; the file stores float16 (exact in float32)
        **shape,
        **extra,
    ).to_dict()


# --------------------------------------------------------------------------------------------------
# Writers: one per checkpoint format, for random and trained weights alike.


def _store_dtype():
    import torch

    return getattr(torch, STORE_DTYPE_NAME)


def _save(out: Path, config: dict, tensors: dict, tokenizer=None, name: str = "model.safetensors") -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    save_file({k: v.detach().to(_store_dtype()).contiguous() for k, v in sorted(tensors.items())}, str(out / name))
    if tokenizer is not None:
        tokenizer.save_pretrained(out)


def write_llama(out: Path, shape: dict, tokenizer, tensors: dict) -> None:
    """A LlamaForCausalLM checkpoint (target, draft, target_perturbed) with the zoo tokenizer."""
    config = _llama_config(shape, tokenizer)
    config["architectures"] = ["LlamaForCausalLM"]
    _save(out, config, tensors, tokenizer)


def write_eagle(out: Path, tokenizer, tensors: dict) -> None:
    """EAGLE-1 (fc.weight, layers.0.* without input_layernorm); embed/lm_head are the target's."""
    config = _llama_config(dict(TARGET, num_hidden_layers=1), tokenizer)
    config["architectures"] = ["LlamaForCausalLM"]  # vLLM maps it to EagleLlamaForCausalLM
    _save(out, config, tensors)


def write_eagle3(out: Path, tokenizer, tensors: dict) -> None:
    """EAGLE-3 (fc over the aux states, midlayer.*, norm, own lm_head); the embedding is the target's."""
    config = _llama_config(dict(TARGET, num_hidden_layers=1), tokenizer)
    config.update(
        architectures=["LlamaForCausalLMEagle3"],
        draft_vocab_size=VOCAB_SIZE,
        target_hidden_size=TARGET["hidden_size"],
        eagle_config={"eagle_aux_hidden_state_layer_ids": EAGLE3_AUX_LAYERS, "use_aux_hidden_state": True},
    )
    _save(out, config, tensors)


def write_medusa(out: Path, tensors: dict) -> None:
    """Medusa: blocks.N.layers.0 (x + SiLU(W x) on the target's last state) and one shared LM head
    (`original_lm_head`), stored as `lm_heads.0` as vLLM's loader expects."""
    config = dict(
        model_type="medusa",
        architectures=["MedusaModel"],
        hidden_size=TARGET["hidden_size"],
        vocab_size=VOCAB_SIZE,
        num_heads=MEDUSA_HEADS,
        num_hidden_layers=1,  # residual blocks per head
        original_lm_head=True,
        torch_dtype="float32",
    )
    _save(out, config, tensors)


def write_mlp_speculator(out: Path, tensors: dict) -> None:
    """IBM's MLP speculator with tie_weights (emb.0, proj.0/1, ln.0, head.N)."""
    n, inner = MLP_SPECULATOR["n_predict"], MLP_SPECULATOR["inner_dim"]
    config = dict(
        model_type="mlp_speculator",
        architectures=["MLPSpeculatorPreTrainedModel"],
        vocab_size=VOCAB_SIZE,
        emb_dim=TARGET["hidden_size"],
        inner_dim=inner,
        n_predict=n,
        top_k_tokens_per_head=[1] * n,
        n_candidates=1,
        tie_weights=True,
        scale_input=True,  # ln0: parameter-free normalisation of the target's hidden state
        torch_dtype="float32",
    )
    _save(out, config, tensors)


def write_mtp_target(out: Path, tokenizer, mtp_tensors: dict) -> None:
    """The target with its own MTP layer, as vLLM's MiMo loads it (MiMoForCausalLM + MiMoMTP).

    MiMo is Qwen2 (q/k/v with bias) plus `num_nextn_predict_layers` MTP layers under
    `model.mtp_layers.N.` (token/hidden norms, input_proj over [hidden; embed], one decoder layer,
    final norm). The main model is the zoo target's file itself (`target.safetensors`, a symlink to
    ../target/model.safetensors: verbatim, and stored once); `model.safetensors` holds the MTP layer
    and zero q/k/v biases, so this model computes the target's function and its greedy output.
    vLLM picks the model by `architectures`; the config keeps model_type "llama" (MiMo's own "mimo"
    type needs remote code) because with "qwen2" transformers swaps in Qwen2Tokenizer, whose
    pre-tokenizer splits text differently from the zoo tokenizer."""
    import torch

    h, heads, kv = TARGET["hidden_size"], TARGET["num_attention_heads"], TARGET["num_key_value_heads"]
    head_dim = h // heads
    tensors = {f"model.mtp_layers.0.{k}": v for k, v in mtp_tensors.items()}
    for p in [f"model.layers.{i}." for i in range(TARGET["num_hidden_layers"])] + ["model.mtp_layers.0."]:
        for proj, rows in (("q_proj", heads * head_dim), ("k_proj", kv * head_dim), ("v_proj", kv * head_dim)):
            tensors[f"{p}self_attn.{proj}.bias"] = torch.zeros(rows)
    config = _llama_config(TARGET, tokenizer, num_nextn_predict_layers=MTP_LAYERS)
    config["architectures"] = ["MiMoForCausalLM"]  # vLLM maps method mtp on it to MiMoMTPModel
    _save(out, config, tensors, tokenizer)
    link = out / TARGET_LINK
    link.unlink(missing_ok=True)
    link.symlink_to(Path("..") / "target" / "model.safetensors")


# --------------------------------------------------------------------------------------------------
# Random weights (structure only): `python -m tools.zoo.build --random`


def init_weights(module, std: float = 0.02) -> None:
    """Normal(0, std) for every matrix, ones for norm weights, zeros for biases (seed torch first)."""
    import torch

    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim >= 2:
                p.normal_(0.0, std)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.fill_(1.0)


def _random(module, seed: int) -> dict:
    import torch

    torch.manual_seed(seed)
    init_weights(module, INIT_STD)
    return module.state_dict()


def random_mlp_speculator(seed: int) -> dict:
    from tools.zoo.modules import MlpSpeculatorLayout

    module = MlpSpeculatorLayout(
        TARGET["hidden_size"], VOCAB_SIZE, MLP_SPECULATOR["inner_dim"], MLP_SPECULATOR["n_predict"]
    )
    return _random(module, seed)


def build_random(tmp: Path, tokenizer) -> None:
    """Every zoo model with seeded random weights: checks formats and plumbing in seconds, but every
    method sees the same degenerate loops; the committed zoo is trained (train.py)."""
    import torch

    from tools.zoo import modules as m

    target = _random(m.Llama(TARGET, VOCAB_SIZE), SEED)
    write_llama(tmp / "target", TARGET, tokenizer, target)
    gen = torch.Generator().manual_seed(SEED + 7)
    noisy = {
        k: v + torch.randn(v.shape, generator=gen) * v.std() * PERTURB if v.ndim == 2 else v for k, v in target.items()
    }
    write_llama(tmp / "target_perturbed", TARGET, tokenizer, noisy)
    write_llama(tmp / "draft", DRAFT, tokenizer, _random(m.Llama(DRAFT, VOCAB_SIZE), SEED + 1))
    head_shape = dict(TARGET, num_hidden_layers=1)
    write_eagle(tmp / "eagle", tokenizer, _random(m.EagleHead(head_shape), SEED + 2))
    write_eagle3(
        tmp / "eagle3", tokenizer, _random(m.Eagle3Head(head_shape, VOCAB_SIZE, len(EAGLE3_AUX_LAYERS)), SEED + 3)
    )
    write_medusa(tmp / "medusa", _random(m.MedusaHeads(TARGET["hidden_size"], VOCAB_SIZE, MEDUSA_HEADS), SEED + 4))
    write_mlp_speculator(tmp / "mlp_speculator", random_mlp_speculator(SEED + 5))
    write_mtp_target(tmp / "mtp_target", tokenizer, _random(m.MtpLayer(TARGET), SEED + 6))


def install(tmp: Path, out: Path, names: list[str], extra: tuple[str, ...] = ()) -> None:
    """Check the models built in `tmp`, then move them (and `extra` files) into `out`: an interrupted
    build leaves no half-written model behind."""
    for name in names:
        check_model_dir(tmp / name)
    out.mkdir(parents=True, exist_ok=True)
    for name in [*names, *extra]:
        dst = out / name
        if dst.is_dir() and not dst.is_symlink():
            shutil.rmtree(dst)
        elif dst.exists() or dst.is_symlink():
            dst.unlink()
        (tmp / name).rename(dst)
    shutil.rmtree(tmp, ignore_errors=True)


def build(out: Path, random_weights: bool = False) -> list[str]:
    """Nothing when the zoo is complete; random weights with `random_weights`; else ZooError."""
    missing = [n for n in ZOO_MODELS if not _complete(out / n)]
    if not missing and not random_weights:
        return []
    if not random_weights:
        check_model_dir(out / missing[0])  # raises, naming the file and the command that rebuilds it
    tmp = out.with_name(out.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    build_random(tmp, build_tokenizer(tmp / "target"))
    install(tmp, out, list(ZOO_MODELS))
    return list(ZOO_MODELS)


def _complete(path: Path) -> bool:
    try:
        check_model_dir(path)
        return True
    except Exception:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.zoo.build", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=zoo_dir(Path.cwd()), help="zoo directory (default: fixtures/zoo)")
    parser.add_argument(
        "--random", action="store_true", help="replace the zoo with seeded random weights (formats only, seconds)"
    )
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        built = build(args.out, random_weights=args.random)
    except ZooError as exc:
        sys.exit(f"zoo: {exc}")
    took = time.monotonic() - start
    print(
        f"zoo: built {', '.join(built)} (random weights) in {took:.1f} s" if built else f"zoo: {args.out} is complete"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
