"""The load gate: correctness and acceptance at every concurrency level, from what the speedup trials
already produced (no extra request; what the timed trials measure is untouched).

    outputs     every request of every timed trial at level C (a prompt is sent several times) against the
                baseline engine's load reference pass (its warm-up: each prompt of the load once, with top-k
                logprobs; specgate.run.measurements) under the profile's equivalence rule, exact or tie-aware;
                a failure names the level, the prompt, how many of its requests differ and the position
    acceptance  the spec-decode counters the level's trials moved: mean acceptance length, acceptance rate
                and per-position rates against the stored figures (portable, as the acceptance gate's), with
                load_acceptance_rtol (0: the method's acceptance_rtol, for profiles whose A/A runs show the
                figure deterministic)

At the top level a method engine's warm-up (a closed loop there, untimed) is held to the reference too. When
the engine stops during a level's trials (dies, or makes no progress), what they streamed until then is still
compared: a bug that writes wrong tokens in large batches and then wedges the engine reads as the tokens it
wrote (level, prompt, position, both tokens), then the stall, not only as a stall. The gate's tests run after
the stop (the registry's `after_stop`: they do not ask for the engine again), so the levels that ended are
judged as usual; a level is "not judged" only where nothing was streamed. At T > 0 (`[speedup] temperature`)
the outputs are samples: only acceptance is judged, and the judgement says so. The baseline engine's own trial
outputs are held to its reference pass the same way (a batch-size dependence of the target's own path shows
there).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specgate.checks import Basis, Context, Judgement, Row, Verdict
from specgate.checks.acceptance import acceptance_floors
from specgate.errors import EngineDied
from specgate.figures.acceptance import AcceptanceResult
from specgate.figures.equivalence import Divergence, GreedyOutput, compare
from specgate.gates import LOAD, Key
from specgate.profile import BASELINE, Equivalence

SHOW = 5  # prompts listed in a failure message


@dataclass
class LevelOutputs:
    """Every request of one level's trials held to the reference, grouped by prompt."""

    requests: int = 0
    identical: int = 0
    missing: list[str] = field(default_factory=list)  # prompt ids the reference pass does not hold
    # prompt id -> (requests of it, [(trial or warm-up, request index, divergence)]) for prompts with a divergence
    diverging: dict[str, tuple[int, list[tuple[str, int, Divergence]]]] = field(default_factory=dict)

    def prompts(self, numerical: bool) -> list[str]:
        """Prompts whose every divergence is a near-tie the rule forgives (numerical), or that have a real one."""
        return [pid for pid, (_, found) in self.diverging.items() if all(d.numerical for _, _, d in found) is numerical]


def held_to(reference: dict[str, GreedyOutput], runs, rule: Equivalence, warmup=None) -> LevelOutputs:
    """Each request's streamed tokens (figures.load.RequestTrace.token_ids) against the reference for its prompt, the
    level's trials and a method engine's warm-up (`warmup`); a request of an interrupted run (one the engine did not
    finish) only as far as it got."""
    out = LevelOutputs()
    sent: dict[str, int] = {}
    labelled = [(f"trial {i}", run) for i, run in enumerate(runs, start=1)]
    for label, run in labelled + ([("warm-up", warmup)] if warmup is not None else []):
        label += ", cut short by the stop" if run.interrupted else ""
        for request in run.requests:
            ref = reference.get(request.prompt_id)
            if ref is None:
                out.missing.append(request.prompt_id)
                continue
            out.requests += 1
            sent[request.prompt_id] = sent.get(request.prompt_id, 0) + 1
            if run.interrupted:
                got = len(request.token_ids)
                ref = GreedyOutput(ref.token_ids[:got], ref.top_logprobs[:got])
            found = compare(ref, request.token_ids, rule)
            if found is None:
                out.identical += 1
            else:
                out.diverging.setdefault(request.prompt_id, (0, []))[1].append((label, request.index, found))
    out.diverging = {pid: (sent[pid], found) for pid, (_, found) in out.diverging.items()}
    return out


class LoadCheck:
    gate = LOAD

    def __init__(self, ctx: Context, store):
        self.ctx, self.store = ctx, store

    def judge(self, method: str, key: Key) -> Judgement:
        concurrency = int(key.split("=", 1)[1])
        try:
            runs = self.store.load_runs(method, concurrency)
        except EngineDied as stopped:
            return self._stopped(method, concurrency, stopped)
        j = Judgement(self.gate, method, key, Verdict.PASS)
        always, rows = self._outputs(method, concurrency, runs, self._warmup(method, concurrency))
        if method == BASELINE:  # the reference engine: its outputs only
            j.rows = rows
            if always:
                j.verdict, j.messages = Verdict.FAIL, always
            return j
        ctx, tol = self.ctx, self.ctx.tolerance(method, self.gate)
        rtol, rtol_name = (
            (tol.load_acceptance_rtol, "load_acceptance_rtol")
            if tol.load_acceptance_rtol
            else (tol.acceptance_rtol, "acceptance_rtol")
        )
        k = ctx.method(method).num_speculative_tokens
        steps = {f"{t}/{r.index}": [n for _, n in r.arrivals] for t, run in enumerate(runs) for r in run.requests}
        result = AcceptanceResult.from_batch(self.store.load_trials(method, concurrency).counters, steps, k)
        full = result.record()
        j.record = {m: full[m] for m in ("mean_acceptance_length", "acceptance_rate", "per_position") if m in full}
        found = ctx.lookup(method, self.gate, key)  # portable: another machine's serves too
        stored, source = (found.values, found.source) if found else (None, "")
        j.basis = Basis.PORTABLE if found and not found.own else Basis.OWN
        checks = acceptance_floors(result, stored, rtol, tol.position_rtol, {}, source)
        said = {"mean acceptance length": f"{rtol_name} {rtol}"}
        against = [
            f"method '{method}', C={concurrency}: {msg} ({said.get(c.what, f'position_rtol {tol.position_rtol}')})"
            for c in checks
            if (msg := c.fails())
        ]
        base = stored or {}
        length, stored_length = j.record.get("mean_acceptance_length"), base.get("mean_acceptance_length")
        bound = None if stored_length is None else stored_length * (1 - rtol)
        rows.append(Row("mean_acceptance_length", length, stored_length, bound, concurrency=concurrency, headline=True))
        if "acceptance_rate" in j.record:
            rows.append(
                Row(
                    "acceptance_rate", j.record["acceptance_rate"], base.get("acceptance_rate"), concurrency=concurrency
                )
            )
        stored_pos = base.get("per_position", [])
        for i, rate in enumerate(j.record.get("per_position", []), start=1):
            b = stored_pos[i - 1] if i - 1 < len(stored_pos) else None
            floor = None if b is None else b * (1 - tol.position_rtol)
            rows.append(
                Row(
                    "position_rate",
                    rate,
                    b,
                    floor,
                    position=i,
                    concurrency=concurrency,
                    failing=floor is not None and rate < floor,
                )
            )
        j.rows = rows
        return ctx.decide(j, stored, always, against)

    def _warmup(self, method: str, concurrency: int):
        """At the top level, a method engine's warm-up (its requests ran at that concurrency, untimed); else None."""
        top = concurrency == max(self.ctx.profile.concurrency)
        return self.store.warmup_run(method) if method != BASELINE and top else None

    def _stopped(self, method: str, concurrency: int, stopped: EngineDied) -> Judgement:
        """The engine stopped (died, or made no progress) before this level's trials ended: what they streamed
        until then is still held to the reference, so a bug that wrote wrong tokens and then wedged the engine
        reads as the outputs it wrote, then the stop. With nothing wrong in them the stop stands (not judged:
        the level's acceptance has no figure), saying what was compared; with nothing streamed, it alone."""
        runs = self.store.interrupted_runs(method, concurrency)
        warm = self._warmup(method, concurrency)
        problems, rows = self._outputs(method, concurrency, runs, warm)
        if not problems:
            said = {row.metric: row.value for row in rows}
            if not said.get("identical"):  # nothing streamed, or nothing compared (T > 0, no reference pass)
                raise stopped
            raise type(stopped)(
                f"{stopped}. The {said['requests']} requests it streamed at C={concurrency} before it stopped match "
                "the baseline engine's output as far as they got",
                stopped.method,
                stopped.reason,
                repeat=stopped.repeat,
            )
        problems.append(
            f"method '{method}', C={concurrency}: then the engine stopped ({stopped.reason}): the level's acceptance "
            "is not judged"
        )
        return Judgement(self.gate, method, f"C={concurrency}", Verdict.FAIL, problems, rows)

    def _outputs(self, method: str, concurrency: int, runs, warm=None) -> tuple[list[str], list[Row]]:
        """(failures, rows) of the level's outputs (its trials', and `warm`: the warm-up's at the top level) against
        the baseline engine's reference pass."""
        runs_and_warm = [*runs, *([warm] if warm is not None else [])]
        requests = sum(len(run.requests) for run in runs_and_warm)
        if self.ctx.profile.speedup.temperature:
            why = f"not compared: the load samples at T {self.ctx.profile.speedup.temperature:g} (acceptance only)"
            return [], [Row("requests", requests, concurrency=concurrency), Row("identical", None, unit=why)]
        reference = self.store.load_reference()
        if reference is None:
            why = "not compared: the baseline engine's load reference pass was not taken in this run"
            return [], [Row("requests", requests, concurrency=concurrency), Row("identical", None, unit=why)]
        rule = self.ctx.profile.equivalence
        held = held_to(reference, runs, rule, warm)
        failing, forgiven = held.prompts(numerical=False), held.prompts(numerical=True)
        where = f"method '{method}', C={concurrency}"
        problems = []
        if held.missing:
            problems.append(
                f"{where}: {len(held.missing)} requests of prompts the baseline engine's reference pass does not hold "
                f"({', '.join(sorted(set(held.missing))[:SHOW])})"
            )
        if failing:
            diverged = sum(len(held.diverging[pid][1]) for pid in failing)
            lines = [self._line(pid, held, rule) for pid in failing]
            more = f"\n... and {len(lines) - SHOW} more prompts" if len(lines) > SHOW else ""
            problems.append(
                f"{where}: {diverged} of {held.requests} requests ({len(failing)} prompts) diverge from the baseline "
                f"engine's output for the same prompt:\n" + "\n".join(lines[:SHOW]) + more
            )
        prompts = len({r.prompt_id for run in runs_and_warm for r in run.requests})
        if rule.mode == "tie-aware" and len(forgiven) > rule.max_forgiven_share * prompts:
            problems.append(
                f"{where}: {len(forgiven)} of {prompts} prompts diverge only at near-ties, more than "
                f"max_forgiven_share {rule.max_forgiven_share:g} allows: honest bf16 near-ties are rare, a verifier "
                "that emits the wrong token under load is not"
            )
        rows = [
            Row("requests", held.requests, concurrency=concurrency),
            Row("identical", held.identical, concurrency=concurrency),
            Row("diverged", len(failing), bound=0, concurrency=concurrency, headline=True, failing=bool(failing)),
        ]
        if rule.mode == "tie-aware":
            rows.append(
                Row("forgiven", len(forgiven), bound=rule.max_forgiven_share * prompts, concurrency=concurrency)
            )
        return problems, rows

    def _line(self, pid: str, held: LevelOutputs, rule: Equivalence) -> str:
        sent, found = held.diverging[pid]
        trial, index, first = min(found, key=lambda f: f[2].position)
        category = self.store.load_inputs.category_of(pid)
        where = first.describe(self.store.inputs.decode, rule.logprob_margin, rule.mode)
        return (
            f"prompt {pid}{f' ({category})' if category else ''}: {len(found)} of its {sent} requests differ; first "
            f"({trial}, request {index}) {where}"
        )
