"""fixtures/zoo/MODEL_CARD.md from training.json (train.py) and measured.json (measure.py)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from specgate.models import REBUILD, ZOO_MODELS
from tools.zoo import LOOP_MAX_PERIOD, LOOP_MIN_TURNS

CATEGORIES = ["code_continuation", "code_editing", "doc_prose", "structured_output", "repetitive_lists"]


def _self_distillation_lines(sd: dict | None) -> list[str]:
    if not sd:
        return []
    return [
        f"  {sd['share']:.0%} of their windows come from the target's own greedy continuations ({sd['tokens']} tokens "
        f"each, in vLLM's CPU engine) of {sd['prompts']} corpus windows of {sd['prompt_len'][0]}-{sd['prompt_len'][1]} "
        f"tokens ({sd['stream_tokens']} tokens, {sd['seconds']:.0f} s): what they draft at test time.",
    ]


def _mtp_lines(t: dict) -> list[str]:
    what = "one token ahead from the target's state and the next token's embedding"
    mtp = t.get("mtp")
    if mtp is None:  # zoos before MTP_STEPS trained it with the other drafters
        return [f"  The MTP layer (MiMo) predicts {what}."]
    return [
        f"- MTP layer (MiMo), alone: {mtp['steps']} steps x {t['batch']} x {t['seq']}, {mtp['precision']}, "
        f"{mtp['seconds'] / 60:.1f} min; loss {mtp['final_loss']:.3f} (the same soft cross-entropy, same data mix).",
        f"  It predicts {what}. It trains longer than the heads above because its speculative step is",
        "  the cheapest of the learned methods on the CPU engine, so its acceptance decides whether one beats the "
        "baseline.",
    ]


def _params(zoo: Path, name: str) -> tuple[int, int]:
    """(parameters, bytes) of the model's own files (links to other models' files not counted)."""
    params = size = 0
    for f in sorted((zoo / name).glob("*.safetensors")):
        if f.is_symlink():
            continue
        size += f.stat().st_size
        with f.open("rb") as fh:
            header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
        for k, v in header.items():
            if k != "__metadata__":
                n = 1
                for d in v["shape"]:
                    n *= d
                params += n
    return params, size


def _table(rows: dict, fmt: str = "{:.2f}", first: str = "method") -> list[str]:
    lines = [f"| {first} | " + " | ".join(CATEGORIES) + " |", "| --- |" + " --- |" * len(CATEGORIES)]
    for name, per_cat in rows.items():
        cells = [fmt.format(per_cat[c]) if per_cat.get(c) is not None else "-" for c in CATEGORIES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _copy_probe_lines(probe: dict | None) -> list[str]:
    if not probe:
        return []
    return [
        f"  Copy probe ({probe['passages']} passages of {probe['tokens']} tokens from prose and code, each repeated "
        f"once): loss {probe['passage_loss']:.2f} nats/token on a passage, {probe['repeat_loss']:.2f} on its verbatim "
        "repeat.",
    ]


def _unlikelihood_lines(ul: dict | None) -> list[str]:
    if not ul or not ul["weight"]:
        return []
    return [
        f"  From step {ul['from_step']} on, {' / '.join(ul['sources'])} windows also pay {ul['weight']:g} x token-level"
        " unlikelihood (Welleck et al. 2019) on repeating a context token that is not the next one"
        + (f" (last 50 steps: {ul['final']:.3f})." if ul["final"] is not None else "."),
    ]


def stable_share(target: dict) -> float:
    """The share of the target's steps at the peak lr; zoos before --target-stable used a plain cosine."""
    return target.get("stable_share", 0.0)


def _schedule_label(target: dict) -> str:
    stable = stable_share(target)
    held = f"held for {stable:.0%} of the steps, then" if stable else "with"
    return f"lr {target['lr']:g} {held} a cosine to 0.1 x"


def _precision(phase: dict) -> str:
    """How a phase trained; zoos before --precision trained the target and joint drafters in bf16 autocast."""
    return phase.get("precision", "bfloat16")


def _precision_label(phase: dict) -> str:
    return {"float32": "float32", "bfloat16": "bf16 autocast"}[_precision(phase)]


def in_bf16(t: dict) -> bool:
    return "bfloat16" in (_precision(t["target"]), _precision(t["drafters"]))


def _rebuild_command(t: dict) -> str:
    """training.json records the recipe's command; zoos before it differed from the defaults in precision only."""
    return t.get("command") or REBUILD + (" --precision bfloat16" if in_bf16(t) else "")


def _precision_lines(t: dict) -> list[str]:
    if not in_bf16(t):
        return []
    return [
        "The target and the joint drafters here trained in bf16 autocast on a CPU with native bf16 (the time above); "
        "on an",
        "AMD EPYC without AVX512-BF16 a bf16-autocast target step took 15.8 s against 1.22 s in float32 (the default).",
    ]


def _machine_lines(m: dict) -> list[str]:
    """Where the speeds were measured: the same weights run at other speeds on another machine."""
    if "machine" not in m or "timing_tokens" not in m:
        return []
    per_token = statistics.median(m["baseline_rounds_s"]) / m["timing_tokens"] * 1000
    return [
        f"Measured on `{m['machine']}` ({m['cpu']}): the baseline engine took {per_token:.1f} ms per output token"
        " (median round, prefill included). Machines sold under one CPU name run it at quite different"
        " speeds (README, *Speedup gate*): compare speedups measured in one run, not across cards."
    ]


def _loop_lines(m: dict) -> list[str]:

    return [
        "Share of its greedy output tokens (baseline engine, every prompt) that only repeat, verbatim, a cycle of at "
        "most"
        f" {LOOP_MAX_PERIOD} tokens the output ends in (turned {LOOP_MIN_TURNS}+ times); the same measure on the last "
        "48 tokens of the prompts themselves (real text) for comparison:",
        "",
        *_table({"target output": m["looped_share"], "prompts' own text": m["looped_share_prompts"]}, "{:.0%}", "text"),
        "",
    ]


def render(zoo: Path) -> str:
    t = json.loads((zoo / "training.json").read_text(encoding="utf-8"))
    probe = t["target"].get("copy_probe")  # absent in zoos trained before the probe existed
    measured_path = zoo / "measured.json"
    m = json.loads(measured_path.read_text(encoding="utf-8")) if measured_path.is_file() else None
    total = sum(f.stat().st_size for f in zoo.rglob("*") if f.is_file() and not f.is_symlink())
    out = [
        "# The embedded model zoo (`cpu-tiny`)",
        "",
        "Tiny models trained on this machine's own text so that speculative decoding on CPU behaves more",
        "like it does on real models than with random weights: drafters that learned the target agree with",
        "it, acceptance differs by prompt category, speculation can beat the baseline at concurrency 1.",
        "Their numbers describe these toy models only (see Limits).",
        "",
        f"Rebuild: `{_rebuild_command(t)}` (seeded; {t['total_seconds'] / 60:.0f} min on 2 CPU cores; "
        f"Python {t['python']}, torch {t['torch']}; no download). Measure: `python -m tools.zoo.measure` (boots vLLM "
        "engines).",
        *_precision_lines(t),
        "",
        "## Data",
        "",
        "All from the interpreter that runs the script (tokens after the zoo's 2048-token BPE, which is",
        "trained on the standard library's sources):",
        "",
        f"- code: the standard library's `.py` sources ({t['corpus']['code']:,} tokens)",
        f"- prose: pydoc's topic pages and the stdlib's docstrings of >= 300 characters ({t['corpus']['prose']:,})",
        f"- structured: JSON / JSON lines / CSV / INI renderings of tables the stdlib carries (HTTP statuses, MIME"
        f" types, codec aliases, errno, HTML entities, locales, Unicode names, ...) ({t['corpus']['structured']:,})",
        f"- editing: stdlib functions and classes followed by `# Same function, with the variable `a` renamed to"
        f" `b`:` and the renamed copy ({t['corpus']['editing']:,})",
        *(
            [
                f"- repeat (no stream of its own): windows of passages of {t['repeat_len'][0]}-{t['repeat_len'][1]} "
                "tokens drawn from code, prose and",
                "  structured, each followed by itself verbatim, so that copying from the context pays off in training",
            ]
            if "repeat" in t["mix"]
            else []
        ),
        "",
        f"Training windows of {t['seq']} tokens are drawn from these with shares {t['mix']}.",
        "",
        "## Models",
        "",
        "| model | what | parameters (stored) | file size |",
        "| --- | --- | --- | --- |",
    ]
    for name, what in ZOO_MODELS.items():
        params, size = _params(zoo, name)
        out.append(f"| `{name}` | {what} | {params / 1e6:.2f} M | {size / 2**20:.1f} MiB |")
    d = t["drafters"]
    out += [
        "",
        f"Weights are stored as float16 ({total / 2**20:.1f} MiB in all); `cpu-tiny` computes in float32. `mtp_target`",
        "reads the target's own file through the link `target.safetensors` (verbatim weights, stored once).",
        "",
        "## Training",
        "",
        f"- target: {t['target']['steps']} steps x {t['batch']} x {t['seq']} tokens, AdamW, "
        f"{_schedule_label(t['target'])}, "
        f"{_precision_label(t['target'])}; "
        f"final loss {t['target']['final_loss']:.3f} nats/token (mean of the last 50 steps); "
        f"{t['target']['seconds'] / 60:.1f} min"
        + (
            " (trained by an earlier run of the same recipe; this run reused it with `--target-from` and trained what "
            "follows)."
            if t.get("target_reused_from")
            else "."
        ),
        *_unlikelihood_lines(t["target"].get("unlikelihood")),
        *_copy_probe_lines(probe),
        f"- drafters, jointly on one target forward per step: {d['steps']} steps x {t['batch']} x {t['seq']}, "
        f"{_precision_label(d)}, {d['seconds'] / 60:.1f} min. Loss against the target's distribution (soft "
        f"cross-entropy, nats; EAGLE terms summed over {t['unroll']} unrolled steps): "
        + ", ".join(f"{k} {v:.3f}" for k, v in d["final_loss"].items())
        + (
            ". Trained by an earlier run of the same recipe, kept by this one (`--mtp-only`)."
            if t.get("drafters_reused_from")
            else "."
        ),
        *_self_distillation_lines(d.get("self_distillation")),
        "  EAGLE-1 / EAGLE-3 are unrolled over the profile's 3 speculative steps, each step reading the previous",
        "  step's own output state as vLLM feeds it; EAGLE-1 also regresses the target's next hidden state.",
        "  Medusa head k on the target's last state predicts the token k+2 ahead.",
        *_mtp_lines(t),
        f"- target_perturbed: the trained target + {t['perturb']['scale']:.4f} x (per-matrix std) Gaussian noise; "
        "greedy",
        f"  agreement with the target {t['perturb']['agreement']:.1%} (teacher-forced on its own greedy continuations "
        "of",
        "  the embedded prompts). The gate's canary: it must fail `draft_self`'s acceptance baseline.",
        "- `mlp_speculator` keeps seeded random weights: vLLM 0.32 cannot run the method at all.",
        "",
        "## Acceptance",
        "",
    ]
    if m:
        out += [
            f"Measured in vLLM's CPU engine with `cpu-tiny` (k = 3, max_tokens 48, 12 prompts per category; "
            f"{m['date']}): mean acceptance length (1 + accepted drafts per verification step).",
            "",
        ]
        out += _table({k: r["acceptance"] for k, r in m["methods"].items() if r["acceptance"]})
        out += [
            "",
            "### Speed at concurrency 1",
            "",
            f"{m['timing_prompts']} prompts (2 per category) sent one at a time; {m['rounds']} pairs of rounds per"
            " method, each a round of the baseline engine (kept alive next to the method's) right before the"
            " method's. Speedup = baseline time / method time: median over the pairs [95 % bootstrap interval]."
            " Every method's greedy outputs equal the baseline's unless noted.",
            *_machine_lines(m),
            "",
            "| method | speedup at C=1 | outputs equal baseline |",
            "| --- | --- | --- |",
        ]
        for k, r in m["methods"].items():
            s = r["speedup_c1"]
            out.append(
                f"| {k} | {s['median']:.2f} [{s['low']:.2f}, {s['high']:.2f}] | "
                f"{'yes' if r['outputs_equal_baseline'] else 'NO'} |"
            )
        out.append("")
    stale = m is not None and t.get("prompts_sha256") != m.get("prompts_sha256")
    out += [
        "Offline estimate at training time (teacher-forced on the target's float32 greedy continuations of the",
        "embedded prompts, every continuation position taken as a verification point"
        + (
            "; computed on an earlier version of the prompt set, which has changed since: the trainer recomputes it):"
            if stale
            else "):"
        ),
        "",
    ]
    out += _table({k: v for k, v in t["offline"].items() if k != "perturbed_agreement"})
    if m:
        out += ["", "## Limits", ""]
        copy_heavy = ["code_editing", "repetitive_lists", "structured_output"]
        for name in ("ngram", "suffix"):
            acc = m["methods"].get(name, {}).get("acceptance", {})
            if acc.get("doc_prose") is not None:
                heavy = sum(acc[c] for c in copy_heavy) / len(copy_heavy)
                out.append(
                    f"- {name}: mean acceptance length {heavy:.2f} on the copy-heavy categories "
                    f"({', '.join(copy_heavy)})"
                    f" vs {acc['doc_prose']:.2f} on doc_prose."
                )
        copies = (
            f" It has learned to copy from its context (loss {probe['repeat_loss']:.2f} on a repeated passage vs"
            f" {probe['passage_loss']:.2f} on its first occurrence), which is what the copy-heavy prompts ask of it."
            if probe and probe["repeat_loss"] < 0.5 * probe["passage_loss"]
            else ""
        )
        out += [
            f"- The target is small and briefly trained (loss {t['target']['final_loss']:.2f} nats/token on its "
            "training mix): its",
            "  continuations are locally plausible fragments of Python / prose / JSON that often fall into repetition",
            f"  (see below), and prompt-lookup methods (ngram, suffix) accept repetition in whatever category.{copies}",
        ]
        mtp = m["methods"].get("mtp")
        if mtp and mtp["acceptance"]:
            length = sum(mtp["acceptance"].values()) / len(mtp["acceptance"])
            speed = mtp["speedup_c1"]["median"]
            out += [
                "- A speculative step costs more than a plain one on vLLM's CPU engine: with MTP (one draft token per",
                f"  step from a one-layer head) it costs about {length / speed:.2f} baseline steps (mean acceptance "
                "length"
                f" {length:.2f} / speedup {speed:.2f}), so a drafter pays off here only above that acceptance length.",
            ]
    # vLLM's baseline engine's output when measured (the prompts of today), else the trainer's own
    samples, source = (
        (m["samples"], "vLLM's baseline engine") if m and "samples" in m else (t["samples"], "the trainer")
    )
    out += ["", "## What the target writes", ""]
    if m and "looped_share" in m:
        out += _loop_lines(m)
    out += [f"Greedy continuation (48 tokens) of the first prompt of each category, from {source}:", ""]
    for cat in CATEGORIES:
        if cat in samples:
            out += [f"- {cat}:", "", "  ```", *["  " + line for line in samples[cat].splitlines()], "  ```", ""]
    return "\n".join(out).rstrip() + "\n"


def write_card(zoo: Path) -> Path:
    path = zoo / "MODEL_CARD.md"
    path.write_text(render(zoo), encoding="utf-8")
    return path
