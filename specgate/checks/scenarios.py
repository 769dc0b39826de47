"""The scenarios' checks: off the gate's plain path, where vLLM's spec-decode regressions were filed.

    preemption   the load preempted requests (vLLM's counter; none = not exercised, a failure), every
                 output equals the baseline engine's unpressured greedy output under the profile's
                 equivalence rule, mean acceptance length stays within acceptance_rtol of the method's
                 own unpressured pass over the same prompts, the KV cache is empty after, the scenario
                 engine's processes are gone
    prefix_soak  no output changes between rounds (beyond a near-tie the rule forgives), the last
                 round's mean acceptance length is not more than the soak's acceptance_rtol below the
                 first (cold) round's; per round: acceptance and prefix-cache hit rate
    structured   every output equals the baseline engine's constrained output; the finished ones (not
                 cut by max_tokens) parse and validate against the schema; acceptance on these prompts
                 is stored and judged like a category of the acceptance gate

Their measurements are taken by specgate.run.scenarios; every bound is here.
"""

from __future__ import annotations

import json

from specgate.checks import Basis, Context, Judgement, Row, Verdict
from specgate.checks.acceptance import acceptance_floors
from specgate.figures.acceptance import AcceptanceResult, SpecCounters
from specgate.figures.equivalence import compare_all
from specgate.gates import PREEMPTION, PREFIX_SOAK, STRUCTURED, Key
from specgate.profile import BASELINE

SHOW = 5  # failing prompts listed in a message


def _merged(batches) -> SpecCounters:
    total = SpecCounters()
    for batch in batches:
        total = total + batch.counters
    return total


def _listed(lines: list[str]) -> str:
    more = f"\n... and {len(lines) - SHOW} more" if len(lines) > SHOW else ""
    return "\n".join(lines[:SHOW]) + more


class PreemptionCheck:
    gate = PREEMPTION

    def __init__(self, ctx: Context, store, runs, inputs):
        self.ctx, self.store, self.runs, self.inputs = ctx, store, runs, inputs

    def judge(self, method: str, key: Key) -> Judgement:
        profile, rtol = self.ctx.profile, self.ctx.tolerance(method).acceptance_rtol
        unpressured = _merged(self.store.category_runs(method).values()).mean_acceptance_length
        run = self.runs.preemption(method)
        prompts = self.inputs.tokenized()
        outputs = {pid: out.token_ids for pid, out in run.batch.outputs.items()}
        result = compare_all(
            self.store.greedy_outputs(BASELINE),
            outputs,
            prompts,
            profile.equivalence,
            self.inputs.decode,
            lambda p: f"prompt {p.id} ({p.category})",
        )
        pressured = run.batch.counters.mean_acceptance_length
        floor = None if unpressured is None else unpressured * (1 - rtol)
        problems = []
        what = (
            f"method '{method}' with {run.kv_blocks} KV blocks for a load needing {run.blocks_needed} "
            f"(kv_share {profile.scenarios.preemption.kv_share})"
        )
        if run.stats.preemptions == 0:
            problems.append(
                f"{what}: vLLM preempted no request, so the scenario was not exercised; lower "
                f"[scenarios.preemption] kv_share in {profile.path}"
            )
        if result.failures:
            problems.append(
                f"{what}: {result.diverged} of {result.compared} prompts diverge from the baseline engine's "
                f"unpressured greedy output after {run.stats.preemptions} preemptions:\n{_listed(result.failures)}"
            )
        if forgiving := result.too_forgiving(profile.equivalence):
            problems.append(f"{what}: {forgiving}")
        if floor is not None and (pressured is None or pressured < floor):
            shown = "none" if pressured is None else f"{pressured:.4g}"
            problems.append(
                f"{what}: mean acceptance length {shown} under preemption against {unpressured:.4g} "
                f"unpressured in this run (floor {floor:.4g}, acceptance_rtol {rtol})"
            )
        if run.stats.usage > 0:
            problems.append(
                f"{what}: the KV cache is {run.stats.usage:.1%} in use after every request finished (blocks leaked)"
            )
        if run.shutdown is not None and run.shutdown.leftover_pids:
            problems.append(
                f"{what}: the scenario engine's processes {run.shutdown.leftover_pids} outlived its shutdown"
            )
        j = Judgement(self.gate, method, key, Verdict.FAIL if problems else Verdict.PASS, problems)
        j.rows = [
            Row("preemptions", run.stats.preemptions, bound=1, headline=True),
            Row("identical", result.identical),
            Row("forgiven", len(result.forgiven)),
            Row("diverged", result.diverged, bound=0, failing=bool(result.failures)),
            Row(
                "mean_acceptance_length",
                pressured,
                unpressured,
                floor,
                failing=floor is not None and (pressured is None or pressured < floor),
            ),
            Row("kv_blocks", run.kv_blocks),
            Row("kv_usage_after", run.stats.usage, bound=0.0),
        ]
        return j


class PrefixSoakCheck:
    gate = PREFIX_SOAK

    def __init__(self, ctx: Context, runs, store, inputs):
        self.ctx, self.runs, self.store, self.inputs = ctx, runs, store, inputs

    def judge(self, method: str, key: Key) -> Judgement:
        profile, soak = self.ctx.profile, self.ctx.profile.scenarios.prefix_soak
        rounds = self.runs.soak(method)
        prompts = self.runs.soak_prompts()
        reference = self.store.greedy_outputs(BASELINE)
        first = {pid: out.token_ids for pid, out in rounds[0].batch.outputs.items()}
        changed = []
        for n, r in enumerate(rounds[1:], start=2):
            moved = [p for p in prompts if r.batch.outputs[p.id].token_ids != first[p.id]]
            # a change between rounds is held to the baseline's greedy output under the profile's rule
            held = compare_all(
                reference,
                {p.id: r.batch.outputs[p.id].token_ids for p in moved},
                moved,
                profile.equivalence,
                self.inputs.decode,
                lambda p, n=n: f"round {n}, prompt {p.id} ({p.category})",
            )
            changed += held.failures
            if forgiving := held.too_forgiving(profile.equivalence, of=len(prompts)):
                changed.append(f"round {n}: {forgiving}")
        lengths = [r.batch.counters.mean_acceptance_length for r in rounds]
        cold, last = lengths[0], lengths[-1]
        floor = None if cold is None else cold * (1 - soak.acceptance_rtol)
        problems = []
        if changed:
            problems.append(f"method '{method}': outputs changed between prefix-cache rounds:\n{_listed(changed)}")
        if floor is not None and (last is None or last < floor):
            shown = ", ".join("none" if x is None else f"{x:.4g}" for x in lengths)
            problems.append(
                f"method '{method}': mean acceptance length fell from {cold:.4g} (round 1, cold prefix cache) to "
                f"{'none' if last is None else f'{last:.4g}'} (round {len(rounds)}) as the prefix cache "
                f"served its prompts (rounds: {shown}; floor {floor:.4g}, acceptance_rtol {soak.acceptance_rtol})"
            )
        j = Judgement(self.gate, method, key, Verdict.FAIL if problems else Verdict.PASS, problems)
        j.rows = [
            Row(
                "mean_acceptance_length",
                last,
                cold,
                floor,
                headline=True,
                failing=floor is not None and (last is None or last < floor),
            )
        ]
        for n, r in enumerate(rounds, start=1):
            j.rows += [
                Row("round_acceptance_length", r.batch.counters.mean_acceptance_length, position=n),
                Row("round_prefix_hit_rate", r.stats.hit_rate, position=n),
            ]
        j.rows.append(Row("changed_outputs", len(changed), bound=0, failing=bool(changed)))
        return j


class StructuredCheck:
    gate = STRUCTURED

    def __init__(self, ctx: Context, runs):
        self.ctx, self.runs = ctx, runs

    def judge(self, method: str, key: Key) -> Judgement:
        profile, tol = self.ctx.profile, self.ctx.tolerance(method)
        inputs = self.runs.structured_inputs()
        prompts = inputs.tokenized()
        batch = self.runs.structured(method)
        invalid = self._invalid(batch, prompts, inputs)
        finished = sum(len(batch.outputs[p.id].token_ids) < inputs.max_tokens for p in prompts)
        problems = (
            [
                f"method '{method}': {len(invalid)} finished outputs do not follow the schema "
                f"{profile.scenarios.structured.schema}:\n{_listed(invalid)}"
            ]
            if invalid
            else []
        )
        if method == BASELINE:
            j = Judgement(self.gate, method, key, Verdict.FAIL if problems else Verdict.PASS, problems)
            j.rows = [
                Row("finished", finished, headline=True),
                Row("invalid", len(invalid), bound=0, failing=bool(invalid)),
            ]
            return j
        outputs = {pid: out.token_ids for pid, out in batch.outputs.items()}
        result = compare_all(
            self.runs.structured(BASELINE).outputs,
            outputs,
            prompts,
            profile.equivalence,
            inputs.decode,
            lambda p: f"prompt {p.id}",
        )
        if result.failures:
            problems.append(
                f"method '{method}': {result.diverged} of {result.compared} prompts diverge from the baseline "
                f"engine's output under the schema:\n{_listed(result.failures)}"
            )
        if forgiving := result.too_forgiving(profile.equivalence):
            problems.append(f"method '{method}', structured prompts: {forgiving}")
        k = profile.methods[method].num_speculative_tokens
        acceptance = AcceptanceResult.from_batch(batch.counters, batch.tokens_per_step, k, batch.step_histograms)
        found = self.ctx.lookup(method, self.gate, key)
        stored, source = (found.values, found.source) if found else (None, "")
        against = [
            f"method '{method}', structured prompts: {msg}"
            for f in acceptance_floors(acceptance, stored, tol.acceptance_rtol, tol.position_rtol, {}, source)
            if (msg := f.fails())
        ]
        j = Judgement(
            self.gate,
            method,
            key,
            Verdict.PASS,
            record=acceptance.record(),
            basis=Basis.PORTABLE if found and not found.own else Basis.OWN,
        )
        base = stored or {}
        length = j.record.get("mean_acceptance_length")
        bound = (
            None
            if base.get("mean_acceptance_length") is None
            else base["mean_acceptance_length"] * (1 - tol.acceptance_rtol)
        )
        j.rows = [
            Row("mean_acceptance_length", length, base.get("mean_acceptance_length"), bound, headline=True),
            Row("identical", result.identical),
            Row("forgiven", len(result.forgiven)),
            Row("diverged", result.diverged, bound=0, failing=bool(result.failures)),
            Row("finished", finished),
            Row("invalid", len(invalid), bound=0, failing=bool(invalid)),
        ]
        return self.ctx.decide(j, stored, problems, against)

    def _invalid(self, batch, prompts, inputs) -> list[str]:
        """Finished outputs (shorter than max_tokens) that do not parse as JSON or break the schema."""
        import jsonschema

        schema, tokenizer = self.runs.schema(), inputs.tokenizer()
        out = []
        for p in prompts:
            ids = batch.outputs[p.id].token_ids
            if len(ids) >= inputs.max_tokens:
                continue  # cut by max_tokens: nothing to parse
            text = tokenizer.decode(list(ids), skip_special_tokens=True)
            try:
                jsonschema.validate(json.loads(text), schema)
            except (ValueError, jsonschema.ValidationError) as exc:
                reason = exc.message if isinstance(exc, jsonschema.ValidationError) else f"not JSON ({exc})"
                out.append(f"prompt {p.id}: {reason}: {text[:200]!r}")
        return out
