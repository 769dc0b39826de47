"""Where the speedup's drift between engine sessions comes from: per boot, or per time?

    python -m tools.speedup_drift [--profile cpu-tiny-calibration] [--blocks 6] [--env KEY=VALUE ...]
                                  [--mode session|boots|both] [--out results/drift]

The same measurement block, repeated: at every concurrency level of the profile, `trials` paired
closed-loop trials (baseline engine, then each method, the same requests) giving each method's
speedup, and one trial with the worker's step timers per engine giving the step costs (draft_cost:
a drafting call over a verification forward of the same engine; verify_cost: a verification forward
over a plain one of the baseline engine). `session` measures N blocks on one boot of every engine,
spread over the same time the `boots` mode takes; `boots` boots every engine afresh for each block.
If one boot measured N times spreads as much as N boots, the drift is per time (the host); if far
less, it is per boot (what the processes got at start: thread placement, memory layout).

Each block records the machine's steal and iowait time (/proc/stat) while it ran, the disturbance
signal. `--env` sets engine environment for every engine (e.g. OMP_WAIT_POLICY=PASSIVE) to try a
knob; `--nice N` lowers this driver's priority. Prints per method and level the blocks' values and
their spread (max - min over the median), for the speedup and for both step costs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

from specgate.figures import stats
from specgate.figures.load import trial_prompts
from specgate.profile import BASELINE, find_profile, load_profile
from specgate.prompts.inputs import PromptInputs


def cpu_times() -> dict[str, float]:
    """Seconds of steal and iowait on the whole machine so far (/proc/stat, USER_HZ ticks)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    hz = os.sysconf("SC_CLK_TCK")
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return {n: int(v) / hz for n, v in zip(names, fields)}


class Engines:
    """The baseline engine and the profile's methods, booted together (as the interleaved gate does)."""

    def __init__(self, profile, root: Path, out: Path):
        from specgate.engines.engine import boot_engine

        self.order = [profile.baseline, *profile.methods.values()]
        self.engines = {m.name: boot_engine(profile, m, root, out / "engines" / f"{m.name}.log") for m in self.order}

    def close(self) -> None:
        for engine in self.engines.values():
            engine.shutdown()


def block(profile, engines: Engines, prompts, warm: bool) -> dict:
    """One measurement block: per level, speedups from paired trials and step costs from timed ones."""
    cfg, max_tokens = profile.speedup, profile.speedup.max_tokens or profile.max_tokens
    before, started = cpu_times(), time.monotonic()
    out: dict = {}
    for c in profile.concurrency:
        batch = trial_prompts(prompts, c, cfg.num_requests(c), profile.seed)
        if warm:
            for engine in engines.engines.values():
                engine.closed_loop(trial_prompts(prompts, c, 2 * c, profile.seed + 1), c, max_tokens)
        runs: dict[str, list[float]] = {name: [] for name in engines.engines}
        for _ in range(cfg.trials):
            for name, engine in engines.engines.items():
                runs[name].append(engine.closed_loop(batch, c, max_tokens)[0].throughput)
        timed = {
            name: engine.timed_steps(lambda e=engine, b=batch, c=c: e.closed_loop(b, c, max_tokens)) or {}
            for name, engine in engines.engines.items()
        }
        base_fwd = _per_call(timed[BASELINE], "forward")
        level = {}
        for name in engines.engines:
            if name == BASELINE:
                level[name] = {"throughput": statistics.median(runs[name])}
                continue
            est = stats.ratio_estimate(runs[name], runs[BASELINE], seed=profile.seed)
            fwd, draft = _per_call(timed[name], "forward"), _per_call(timed[name], "propose")
            level[name] = {
                "speedup": est.value,
                "ci_low": est.low,
                "ci_high": est.high,
                "draft_cost": draft / fwd if draft and fwd else None,
                "verify_cost": fwd / base_fwd if fwd and base_fwd else None,
            }
        out[f"C={c}"] = level
    after = cpu_times()
    out["_machine"] = {
        "seconds": time.monotonic() - started,
        "steal_s": after["steal"] - before["steal"],
        "iowait_s": after["iowait"] - before["iowait"],
    }
    return out


def _per_call(t: dict, name: str) -> float | None:
    return t[f"{name}_s"] / t[f"{name}_calls"] if t.get(f"{name}_calls") else None


def spread(values: list[float]) -> float:
    values = [v for v in values if v is not None]
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else float("nan")


def report(label: str, blocks: list[dict]) -> None:
    print(
        f"\n{label}: {len(blocks)} blocks; steal {sum(b['_machine']['steal_s'] for b in blocks):.1f} s, "
        f"iowait {sum(b['_machine']['iowait_s'] for b in blocks):.1f} s in all"
    )
    for level in [k for k in blocks[0] if k.startswith("C=")]:
        for name in blocks[0][level]:
            if name == BASELINE:
                tput = [b[level][name]["throughput"] for b in blocks]
                print(
                    f"  {level:<5} {name:<14} throughput {', '.join(f'{v:.0f}' for v in tput)} tok/s; spread "
                    f"{spread(tput):.1%}"
                )
                continue
            for metric in ("speedup", "draft_cost", "verify_cost"):
                vals = [b[level][name][metric] for b in blocks]
                shown = ", ".join("-" if v is None else f"{v:.3f}" for v in vals)
                print(f"  {level:<5} {name:<14} {metric:<11} {shown}; spread {spread(vals):.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.speedup_drift", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="cpu-tiny-calibration")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--mode", choices=("session", "boots", "both"), default="both")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="engine environment (a knob)")
    parser.add_argument("--nice", type=int, default=0, help="lower this driver's priority by N")
    parser.add_argument("--gap", type=float, default=-1, help="seconds between session blocks (default: a boot's time)")
    parser.add_argument("--out", type=Path, default=Path("results/drift"))
    args = parser.parse_args(argv)
    root = Path.cwd()
    profile = load_profile(find_profile(args.profile, root), root)
    extra = dict(kv.split("=", 1) for kv in args.env)
    profile = replace(profile, engine_env={**profile.engine_env, **extra})
    if args.nice:
        os.nice(args.nice)
    prompts = PromptInputs(profile, root).speedup_inputs().tokenized()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list] = {}
    boot_s = 60.0
    if args.mode in ("boots", "both"):
        results["boots"] = []
        for i in range(args.blocks):
            start = time.monotonic()
            engines = Engines(profile, root, args.out / f"boots-{i}")
            try:
                results["boots"].append(block(profile, engines, prompts, warm=True))
            finally:
                engines.close()
            boot_s = time.monotonic() - start - results["boots"][-1]["_machine"]["seconds"]
            print(f"boots block {i + 1}: {results['boots'][-1]['_machine']}", flush=True)
    if args.mode in ("session", "both"):
        results["session"] = []
        engines = Engines(profile, root, args.out / "session")
        try:
            for i in range(args.blocks):
                if i:
                    time.sleep(args.gap if args.gap >= 0 else boot_s)  # the same span as the boots take
                results["session"].append(block(profile, engines, prompts, warm=(i == 0)))
                print(f"session block {i + 1}: {results['session'][-1]['_machine']}", flush=True)
        finally:
            engines.close()
    (args.out / "drift.json").write_text(json.dumps({"env": extra, "nice": args.nice, **results}, indent=1))
    for label, blocks in results.items():
        report(
            f"{label} ({'one boot' if label == 'session' else 'a boot per block'}; env {extra or 'profile'})", blocks
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
