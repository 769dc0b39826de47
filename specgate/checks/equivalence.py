"""Greedy equivalence: every speculative method reproduces the baseline engine's greedy tokens.

Exact match is the rule; under `tie-aware` a divergence counts as numerical only when the baseline's
own top-k logprobs at that position hold both tokens within the margin (specgate/figures/equivalence.py).
"""

from __future__ import annotations

from specgate.checks import Basis, Judgement, Row, Verdict
from specgate.figures.equivalence import compare_all
from specgate.gates import EQUIVALENCE, Key
from specgate.profile import BASELINE

SHOW = 10  # divergences listed in a failure message


class EquivalenceCheck:
    gate = EQUIVALENCE

    def __init__(self, ctx, store, inputs):
        self.ctx, self.store, self.inputs = ctx, store, inputs

    def judge(self, method: str, key: Key) -> Judgement:
        if method == BASELINE:
            return self._reference()
        rule = self.ctx.profile.equivalence
        prompts = self.inputs.tokenized()
        outputs = {pid: out.token_ids for pid, out in self.store.greedy_outputs(method).items()}
        result = compare_all(
            self.store.greedy_outputs(BASELINE),
            outputs,
            prompts,
            rule,
            self.inputs.decode,
            lambda p: f"method '{method}', prompt {p.id} ({p.category})",
        )
        failures, numerical, gaps, identical = result.failures, len(result.forgiven), result.gaps, result.identical
        allowed = self.ctx.method(method).lossy.get("max_diverged_share")
        lossy = allowed is not None
        broken = len(failures) > (allowed * len(prompts) if lossy else 0)
        forgiving = None if lossy else result.too_forgiving(rule)
        j = Judgement(
            self.gate,
            method,
            key,
            Verdict.FAIL if broken or forgiving else Verdict.PASS,
            basis=Basis.LOSSY if lossy else Basis.OWN,
        )
        more = f"\n... and {len(failures) - SHOW} more" if len(failures) > SHOW else ""
        if broken:
            j.messages = [
                f"{len(failures)} of {len(prompts)} prompts diverge from the baseline"
                + (f" (more than the declared lossy max_diverged_share {allowed})" if lossy else "")
                + ":\n"
                + "\n".join(failures[:SHOW])
                + more
            ]
        elif lossy:
            j.messages = [
                f"lossy method: judged on its declared tolerance, not greedy equivalence: {len(failures)} of "
                f"{len(prompts)} prompts diverge (max_diverged_share {allowed})"
            ]
        if forgiving:
            j.messages.append(f"method '{method}': {forgiving}")
        j.rows = [
            Row("identical", identical, headline=True),
            Row("compared", len(prompts), headline=True),
            Row("diverged", len(failures), bound=int(allowed * len(prompts)) if lossy else 0, headline=True),
        ]
        if rule.mode == "tie-aware":
            j.rows.append(
                Row("forgiven", numerical, bound=rule.max_forgiven_share * len(prompts), failing=bool(forgiving))
            )
        # every divergence's logprob gap in the baseline's top-k (tie-aware's margin is calibrated on these)
        j.rows += [
            Row(
                "logprob_gap",
                gap,
                bound=rule.logprob_margin if rule.mode == "tie-aware" else None,
                unit="nats",
                position=pos,
            )
            for pos, gap in gaps
        ]
        return j

    def _reference(self) -> Judgement:
        """The baseline engine's outputs are the reference: every prompt got tokens and top-k logprobs."""
        outputs = self.store.greedy_outputs(BASELINE)
        prompts = self.inputs.tokenized()
        problems = []
        if empty := [p.id for p in prompts if not outputs[p.id].token_ids]:
            problems.append(f"the baseline engine produced no tokens for prompts {empty}")
        if missing := [p.id for p in prompts if len(outputs[p.id].top_logprobs) != len(outputs[p.id].token_ids)]:
            problems.append(f"the baseline engine returned no top-k logprobs for prompts {missing}")
        return Judgement(self.gate, BASELINE, "greedy", Verdict.FAIL if problems else Verdict.PASS, problems)
