"""Measure the zoo in vLLM's CPU engine, as the `cpu-tiny` profile runs it, for the model card.

    python -m tools.zoo.measure [--methods a,b] [--rounds 15] [--merge]

Boots the baseline engine, keeps it alive, and boots one method engine at a time next to it
(two engines alive, ~3.3 GiB each), recording:
- mean acceptance length per prompt category (the engine's spec-decode counters around each
  category's batch, as the acceptance gate measures it) and whether every greedy output equals the
  baseline's;
- the baseline engine's greedy output for the first prompt of each category (the card shows it);
- how much of the baseline engine's greedy output per category only repeats a loop it ends in (looped_share),
  and the same on the prompts' own text;
- speed at concurrency 1: the wall time of the timing set (2 prompts per category, sent one at a
  time, `max_tokens` each), in `--rounds` pairs: a baseline round, then the method's round. The
  speedup is the median of the pairs' baseline time / method time with its 95 % bootstrap interval
  (specgate.figures.stats.ratio_estimate, as the speedup gate computes it).
Writes fixtures/zoo/measured.json and re-renders fixtures/zoo/MODEL_CARD.md. Took 37 min on 2 cores with 6
rounds, 49 min with 15 (12-13 ms per baseline token).
With --merge, only the methods measured are replaced in the existing measured.json (after retraining one
drafter); it must have been measured on the same machine type, prompt set and number of rounds.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from specgate.models import zoo_dir
from specgate.store.baselines import write_text_atomic
from tools.zoo import LOOP_MAX_PERIOD, LOOP_MIN_TOKENS, LOOP_MIN_TURNS, prompts_digest

PROFILE = "fixtures/profiles/cpu-tiny.toml"
DEFAULT_METHODS = [
    "ngram",
    "suffix",
    "draft_model",
    "eagle",
    "eagle3",
    "medusa",
    "mtp",
    "draft_self",
    "draft_perturbed",
]
TIMING_PROMPTS_PER_CATEGORY = 2


def _timed_round(engine, timing: list, max_tokens: int) -> tuple[float, int]:
    """Send the timing set one prompt at a time: (seconds, output tokens)."""
    start = time.perf_counter()
    tokens = sum(len(o.token_ids) for p in timing for o in engine.run_batch([p], max_tokens).outputs.values())
    return time.perf_counter() - start, tokens


def looped_share(tokens: list[int]) -> float:
    """Share of `tokens` that only repeat, verbatim, the cycle they end in: the longest p-periodic tail
    (p <= LOOP_MAX_PERIOD) that qualifies as a loop, less its first period. 0.0 for text that does not loop."""
    n, best = len(tokens), 0
    for period in range(1, min(LOOP_MAX_PERIOD, n) + 1):
        tail = period
        while tail < n and tokens[n - 1 - tail] == tokens[n - 1 - tail + period]:
            tail += 1
        if tail >= max(LOOP_MIN_TURNS * period, LOOP_MIN_TOKENS):
            best = max(best, tail - period)
    return best / n if n else 0.0


def looped_shares(outputs: dict, prompts: list) -> dict[str, float]:
    """Mean looped_share of `outputs` (prompt id -> tokens) per prompt category."""
    per: dict[str, list[float]] = {}
    for p in prompts:
        per.setdefault(p.category, []).append(looped_share(list(outputs[p.id])))
    return {c: sum(v) / len(v) for c, v in sorted(per.items())}


def _generate(engine, prompts: list, categories: list[str], max_tokens: int, k: int) -> tuple[dict, dict, dict]:
    """Greedy outputs of every prompt, one batch per category: (outputs, acceptance, per-position rates)."""
    from specgate.figures.acceptance import AcceptanceResult

    outputs, acceptance, per_position = {}, {}, {}
    for cat in categories:
        batch = engine.run_batch([p for p in prompts if p.category == cat], max_tokens)
        outputs.update({key: list(v.token_ids) for key, v in batch.outputs.items()})
        if k:
            acc = AcceptanceResult.from_batch(batch.counters, batch.tokens_per_step, k)
            acceptance[cat] = acc.counters.mean_acceptance_length
            per_position[cat] = list(acc.counters.per_position_rates)
    return outputs, acceptance, per_position


def measure(root: Path, methods: list[str], rounds: int, log_dir: Path) -> dict:
    from transformers import AutoTokenizer

    from specgate.engines.engine import boot_engine
    from specgate.figures.stats import ratio_estimate
    from specgate.machine import cpu_name, detect_device, hardware_key
    from specgate.profile import load_profile
    from specgate.prompts import load_prompts
    from specgate.prompts.inputs import tokenize

    profile = load_profile(root / PROFILE, root)
    tokenizer = AutoTokenizer.from_pretrained(zoo_dir(root) / "target")
    prompts = tokenize(load_prompts(profile.prompts), tokenizer, profile.max_model_len - profile.max_tokens)
    categories = sorted({p.category for p in prompts})
    timing = [p for c in categories for p in [q for q in prompts if q.category == c][:TIMING_PROMPTS_PER_CATEGORY]]
    # The same weights run at other speeds on another machine: the record says where it was measured
    # and how fast the baseline engine ran there.
    results: dict = {
        "methods": {},
        "baseline_rounds_s": [],
        "rounds": rounds,
        "timing_prompts": len(timing),
        "machine": hardware_key(*detect_device(profile.hardware)),
        "cpu": cpu_name(),
    }
    baseline = boot_engine(profile, profile.baseline, root, log_dir / "baseline.log")
    try:
        baseline_outputs, _, _ = _generate(baseline, prompts, categories, profile.max_tokens, 0)
        firsts = {c: next(p for p in prompts if p.category == c) for c in categories}
        results["samples"] = {c: tokenizer.decode(baseline_outputs[p.id]) for c, p in firsts.items()}
        results["looped_share"] = looped_shares(baseline_outputs, prompts)
        # the same measure on real text of each category: the prompts' own last max_tokens tokens
        results["looped_share_prompts"] = looped_shares(
            {p.id: p.token_ids[-profile.max_tokens :] for p in prompts}, prompts
        )
        baseline.run_batch(timing[:1], profile.max_tokens)  # warm-up
        for name in methods:
            method = profile.methods[name]
            engine = boot_engine(profile, method, root, log_dir / f"{name}.log")
            try:
                outputs, acceptance, per_position = _generate(
                    engine, prompts, categories, profile.max_tokens, method.num_speculative_tokens
                )
                engine.run_batch(timing[:1], profile.max_tokens)  # warm-up
                # Each method round is paired with a baseline round taken right before it: this
                # machine's speed drifted by 25 % within one run, which unpaired rounds turn into spread.
                base_s, method_s = [], []
                for _ in range(rounds):
                    seconds, results["timing_tokens"] = _timed_round(baseline, timing, profile.max_tokens)
                    base_s.append(seconds)
                    method_s.append(_timed_round(engine, timing, profile.max_tokens)[0])
            finally:
                engine.shutdown()
            speed = ratio_estimate(base_s, method_s)
            results["baseline_rounds_s"] += base_s
            results["methods"][name] = {
                "acceptance": acceptance,
                "per_position": per_position,
                "outputs_equal_baseline": outputs == baseline_outputs,
                "rounds_s": method_s,
                "baseline_rounds_s": base_s,
                "speedup_c1": {"median": speed.value, "low": speed.low, "high": speed.high, "n": speed.n},
                "date": time.strftime("%Y-%m-%d"),
            }
            print(
                f"{name}: acceptance {json.dumps({c: round(v or 0, 3) for c, v in acceptance.items()})} "
                f"speedup at C=1 {speed.describe()}, outputs equal: {outputs == baseline_outputs}",
                flush=True,
            )
    finally:
        baseline.shutdown()
    return results


def pooled_baseline_rounds(record: dict) -> list[float]:
    """Every method's paired baseline rounds, in method order (the card's ms per baseline token)."""
    return [s for r in record["methods"].values() for s in r["baseline_rounds_s"]]


def write_measured(path: Path, record: dict) -> None:
    """measured.json, atomically (a run that stops half-way leaves the previous file)."""
    write_text_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


def merge_into(previous: dict, new: dict, path: Path) -> dict:
    """`previous` with `new`'s methods replaced or added; the two must describe comparable runs."""
    for key in ("machine", "prompts_sha256", "rounds", "timing_prompts", "timing_tokens"):
        if previous.get(key) != new.get(key):
            raise SystemExit(
                f"--merge: {path} was measured with {key} = {previous.get(key)!r}, this run with "
                f"{new.get(key)!r}; its figures would not compare. Measure every method without --merge."
            )
    merged = dict(previous, methods={**previous["methods"], **new["methods"]}, date=new["date"])
    merged["baseline_rounds_s"] = pooled_baseline_rounds(merged)
    return merged


def main(argv: list[str] | None = None) -> int:
    from tools.zoo.card import write_card

    parser = argparse.ArgumentParser(prog="python -m tools.zoo.measure", description=__doc__.split("\n")[0])
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="methods of cpu-tiny to measure")
    parser.add_argument("--rounds", type=int, default=15, help="paired timing rounds per method (default: 15)")
    parser.add_argument("--merge", action="store_true", help="replace only these methods in the existing measured.json")
    parser.add_argument(
        "--logs", type=Path, default=Path("results/zoo-measure"), help="engine logs (default: results/zoo-measure)"
    )
    args = parser.parse_args(argv)
    root = Path.cwd()
    path = zoo_dir(root) / "measured.json"
    previous = None
    if args.merge:  # read before measuring: a missing or broken file should not cost a 30-minute run
        try:
            previous = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SystemExit(f"--merge: cannot read {path} ({exc}); measure every method without --merge.") from None
    results = measure(root, [m for m in args.methods.split(",") if m], args.rounds, args.logs)
    results["date"] = time.strftime("%Y-%m-%d")
    results["prompts_sha256"] = prompts_digest(root)
    if previous is not None:
        results = merge_into(previous, results, path)
    write_measured(path, results)
    write_card(zoo_dir(root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
