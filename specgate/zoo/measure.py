"""Measure the zoo in vLLM's CPU engine, as the `cpu-tiny` profile runs it, for the model card.

    python -m specgate.zoo.measure [--methods a,b] [--rounds 5]

Boots one engine per method (the baseline first and again last), one at a time, and records:
- mean acceptance length per prompt category (the engine's spec-decode counters around each
  category's batch, as the acceptance gate measures it) and whether every greedy output equals the
  baseline's;
- the baseline engine's greedy output for the first prompt of each category (the card shows it);
- speed at concurrency 1: the wall time of the timing set (2 prompts per category, sent one at a
  time, `max_tokens` each), repeated `--rounds` times. The speedup is baseline time / method time
  with the median over all pairs of rounds and its 10th-90th percentile spread.
Writes fixtures/zoo/measured.json and re-renders fixtures/zoo/MODEL_CARD.md. Takes ~15 min on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from specgate.zoo import prompts_digest, zoo_dir

PROFILE = "fixtures/profiles/cpu-tiny.toml"
DEFAULT_METHODS = ["ngram", "suffix", "draft_model", "eagle", "eagle3", "medusa", "mtp", "draft_self", "draft_perturbed"]
TIMING_PROMPTS_PER_CATEGORY = 2


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    pos = (len(values) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def speedup(baseline_rounds: list[float], method_rounds: list[float]) -> dict:
    ratios = [b / m for b in baseline_rounds for m in method_rounds]
    return {"median": statistics.median(ratios), "p10": _percentile(ratios, 0.1), "p90": _percentile(ratios, 0.9)}


def measure(root: Path, methods: list[str], rounds: int, log_dir: Path) -> dict:
    from transformers import AutoTokenizer

    from specgate.acceptance import AcceptanceResult
    from specgate.engine import boot_engine
    from specgate.profile import load_profile
    from specgate.prompts import load_prompts, tokenize

    profile = load_profile(root / PROFILE, root)
    tokenizer = AutoTokenizer.from_pretrained(zoo_dir(root) / "target")
    prompts = tokenize(load_prompts(profile.prompts), tokenizer, profile.max_model_len - profile.max_tokens)
    categories = sorted({p.category for p in prompts})
    timing = [p for c in categories for p in [q for q in prompts if q.category == c][:TIMING_PROMPTS_PER_CATEGORY]]
    results: dict = {"methods": {}, "baseline_rounds_s": [], "rounds": rounds, "timing_prompts": len(timing)}
    baseline_outputs: dict = {}
    for name in ["baseline", *methods, "baseline"]:
        method = profile.baseline if name == "baseline" else profile.methods[name]
        engine = boot_engine(profile, method, root, log_dir / f"{name}.log")
        try:
            rec: dict = {"acceptance": {}, "per_position": {}}
            outputs = {}
            for cat in categories:
                batch = engine.run_batch([p for p in prompts if p.category == cat], profile.max_tokens)
                outputs.update({k: list(v.token_ids) for k, v in batch.outputs.items()})
                if method.num_speculative_tokens:
                    acc = AcceptanceResult.from_batch(batch.counters, batch.tokens_per_step, method.num_speculative_tokens)
                    rec["acceptance"][cat] = acc.counters.mean_acceptance_length
                    rec["per_position"][cat] = list(acc.counters.per_position_rates)
            if name == "baseline" and not baseline_outputs:
                baseline_outputs = outputs
                firsts = {c: next(p for p in prompts if p.category == c) for c in categories}
                results["samples"] = {c: tokenizer.decode(outputs[p.id]) for c, p in firsts.items()}
            rec["outputs_equal_baseline"] = outputs == baseline_outputs
            engine.run_batch(timing[:1], profile.max_tokens)  # warm-up
            times = []
            for _ in range(rounds):
                start = time.perf_counter()
                for p in timing:
                    engine.run_batch([p], profile.max_tokens)
                times.append(time.perf_counter() - start)
        finally:
            engine.shutdown()
        if name == "baseline":
            results["baseline_rounds_s"] += times
            print(f"baseline: rounds {[round(t, 2) for t in times]} s", flush=True)
            continue
        rec["rounds_s"] = times
        results["methods"][name] = rec
        print(f"{name}: acceptance {json.dumps({c: round(v or 0, 3) for c, v in rec['acceptance'].items()})} "
              f"rounds {[round(t, 2) for t in times]} s, outputs equal: {rec['outputs_equal_baseline']}", flush=True)
    for rec in results["methods"].values():
        rec["speedup_c1"] = speedup(results["baseline_rounds_s"], rec["rounds_s"])
    return results


def main(argv: list[str] | None = None) -> int:
    from specgate.zoo.card import write_card

    parser = argparse.ArgumentParser(prog="python -m specgate.zoo.measure", description=__doc__.split("\n")[0])
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="methods of cpu-tiny to measure")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds per engine (default: 5)")
    parser.add_argument("--logs", type=Path, default=Path("results/zoo-measure"), help="engine logs (default: results/zoo-measure)")
    args = parser.parse_args(argv)
    root = Path.cwd()
    results = measure(root, [m for m in args.methods.split(",") if m], args.rounds, args.logs)
    results["date"] = time.strftime("%Y-%m-%d")
    results["prompts_sha256"] = prompts_digest(root)
    (zoo_dir(root) / "measured.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    write_card(zoo_dir(root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
