"""The edges scenario's check: traffic at the shapes production sends (specgate.run.edges) must give what the
plain engine gives.

Per request of each class (block, context_edge, split, eos):
  - against the baseline engine's same request: token ids (a near-tie the tie-aware rule forgives, by the
    baseline's own top-k logprobs, is equal), text, finish and stop reason, usage, and where the request asks
    for logprobs (context_edge) the emitted tokens' logprobs within [scenarios.edges] logprob_atol;
  - against itself (completions.inconsistencies): text vs ids under the stop rule, the cap, the finish
    reason; a context-edge request must end at max_model_len with finish reason 'length';
  - its counters against its output, from vLLM's per-request figures: accepted <= drafted, and no token counted
    past the end of the output: 1 (the prefill's token) + verification steps + accepted tokens may not exceed
    the tokens it emitted (a step without drafts emits a token and counts none, so this is a lower bound of
    what was counted past the end, never a false alarm). vLLM counts the drafts a step accepted before the
    stop check trims what follows an EOS, a stop token or the cap (vllm-project/vllm#56101): the case
    `counted_past_end`, which the profile's [known_issues] may explain.
The split class's requests also against the same prompts prefilled whole on the same engine: the same token ids
(the same tie-aware rule, by the baseline engine's top-k logprobs where its output agrees up to there).
Per class, the batch's counters: accepted <= drafted, and the mean acceptance length stored and held to
[scenarios.edges] acceptance_rtol (the steps right after a split prefill are the split class's).

Verdict per class: equal / differs / inconsistent (rows `<class>.<status>`, `<class>.counted_past_end`); the
first difference of each failing class is quoted with its case, position and both tokens.
"""

from __future__ import annotations

from specgate.checks import Context, Judgement, Row, Verdict
from specgate.checks.known import settle
from specgate.figures.completions import Completion, inconsistencies
from specgate.figures.equivalence import first_divergence
from specgate.gates import EDGES, Key
from specgate.profile import BASELINE

EQUAL, DIFFERS, INCONSISTENT = "equal", "differs", "inconsistent"
STATUSES = (EQUAL, DIFFERS, INCONSISTENT)
PAST_END = "counted_past_end"  # the known-issue case of a request whose counters count tokens it never emitted
ACCEPTANCE = "mean_acceptance_length"


def counted_past_end(out: Completion, spec: tuple[int, ...] | None) -> int:
    """Tokens vLLM's per-request figures count that the output does not hold: 1 + steps + accepted - emitted
    (0 when they agree; a step without drafts makes it a lower bound)."""
    if not spec or len(spec) < 3 or not out.token_ids:
        return 0
    accepted, _, steps = spec[:3]
    return max(0, 1 + steps + accepted - len(out.token_ids))


class EdgesCheck:
    gate = EDGES

    def __init__(self, ctx: Context, runs):
        self.ctx, self.runs = ctx, runs

    def _tok(self, t: int | None) -> str:
        return "<end of output>" if t is None else f"{self.runs.decode([t])!r} (id {t})"

    def _differs(self, case, mine: Completion, base: Completion) -> tuple[str, bool]:
        """(how `mine` differs from the baseline's `base`, whether that is a near-tie the rule forgives)."""
        i = first_divergence(base.token_ids, mine.token_ids)
        if i is not None:
            a = base.token_ids[i] if i < len(base.token_ids) else None
            b = mine.token_ids[i] if i < len(mine.token_ids) else None
            gap, forgiven = self._near_tie(base.logprobs[i] if base.logprobs and i < len(base.logprobs) else {}, a, b)
            around = self.runs.decode(list(base.token_ids[max(0, i - 6) : i]))
            said = f"; logprob gap {gap:.4g} nats" if gap is not None else ""
            return f"at token {i} (after {around!r}): baseline {self._tok(a)} vs method {self._tok(b)}{said}", forgiven
        if mine.text != base.text:
            return f"the same ids, other text: baseline {base.text[-60:]!r} vs method {mine.text[-60:]!r}", False
        if (mine.finish_reason, mine.stop_reason) != (base.finish_reason, base.stop_reason):
            return (
                f"finish reason {mine.finish_reason!r} (stop_reason {mine.stop_reason!r}) against the baseline's "
                f"{base.finish_reason!r} ({base.stop_reason!r})"
            ), False
        if mine.usage != base.usage:
            return f"usage {mine.usage} completion tokens against the baseline's {base.usage}", False
        if case.params.get("logprobs") and mine.logprobs is not None and base.logprobs is not None:
            atol = self.ctx.profile.scenarios.edges.logprob_atol
            for pos, (t, ours, theirs) in enumerate(zip(mine.token_ids, mine.logprobs, base.logprobs)):
                if t in ours and t in theirs and abs(ours[t] - theirs[t]) > atol + 1e-9:
                    return (
                        f"the logprob of token {pos} ({self._tok(t)}) is {ours[t]:.9g} against the baseline's "
                        f"{theirs[t]:.9g}, {abs(ours[t] - theirs[t]):.3g} off (logprob_atol {atol:g})"
                    ), False
        return "", False

    def _near_tie(self, top: dict[int, float], a: int | None, b: int | None) -> tuple[float | None, bool]:
        """(the logprob gap between tokens a and b in the baseline's top-k `top`, whether the profile's tie-aware
        rule forgives it)."""
        rule = self.ctx.profile.equivalence
        gap = top[a] - top[b] if a in top and b in top else None
        return gap, rule.mode == "tie-aware" and gap is not None and gap <= rule.logprob_margin

    def _own(self, case, out: Completion) -> list[str]:
        problems = inconsistencies(out, case.params, self.runs.decode, self.runs.eos())
        if case.klass == "context_edge":
            total = len(case.token_ids) + len(out.token_ids)
            edge = self.ctx.profile.max_model_len
            if out.finish_reason != "length" or total != edge:
                problems.append(
                    f"ended with finish reason {out.finish_reason!r} at {total} tokens (prompt {len(case.token_ids)} + "
                    f"output {len(out.token_ids)}), not 'length' at max_model_len {edge}"
                )
        return problems

    def judge(self, method: str, key: Key) -> Judgement:
        run = self.runs.edges(method)  # (the baseline's first: it builds the plan from its engine)
        base = self.runs.edges(BASELINE) if method != BASELINE else None
        plan = self.runs.edge_plan()
        counts: dict[str, dict[str, int]] = {}
        past: dict[str, int] = {}
        firsts: dict[str, str] = {}
        equal: set[str] = set()  # the cases counted equal to the baseline engine's
        first_past: str = ""
        for case in plan.cases:
            tally = counts.setdefault(case.klass, dict.fromkeys(STATUSES, 0))
            past.setdefault(case.klass, 0)
            where = f"method '{method}', {case.klass}: case {case.id}"
            reply = run.replies.get(case.id)
            mine = reply.first if reply is not None and not reply.refused else None
            if mine is None:
                tally[INCONSISTENT] += 1
                firsts.setdefault(
                    case.klass, f"{where}: {'refused: ' + reply.refused if reply is not None else 'no reply'}"
                )
                continue
            spec = reply.spec_counts[0] if reply.spec_counts else None
            if extra := counted_past_end(mine, spec):
                past[case.klass] += 1
                first_past = first_past or (
                    f"{where}: vLLM's per-request figures count {extra} token(s) past the end of its output (1 + "
                    f"{spec[2]} steps + {spec[0]} accepted > {len(mine.token_ids)} emitted; finish reason "
                    f"{mine.finish_reason!r}, last chunk {mine.chunks[-1] if mine.chunks else '?'} tokens)"
                )
            if spec and spec[0] > spec[1]:
                past[case.klass] += 1
                first_past = first_past or f"{where}: {spec[0]} tokens accepted of {spec[1]} drafted"
            if own := self._own(case, mine):
                tally[INCONSISTENT] += 1
                firsts.setdefault(case.klass, f"{where}: {'; '.join(own)}")
                continue
            theirs = base.replies.get(case.id) if base is not None else None
            if base is not None and (theirs is None or theirs.first is None):
                tally[INCONSISTENT] += 1
                firsts.setdefault(case.klass, f"{where}: the baseline engine gave no output to compare with")
                continue
            said, forgiven = self._differs(case, mine, theirs.first) if theirs is not None else ("", False)
            if said and not forgiven:
                tally[DIFFERS] += 1
                firsts.setdefault(case.klass, f"{where} differs from the baseline engine's: {said}")
            else:
                tally[EQUAL] += 1
                equal.add(case.id)
        failing: dict[str, list[str]] = {}
        for klass, tally in counts.items():
            if klass in firsts:
                bad = ", ".join(f"{tally[s]} {s}" for s in (DIFFERS, INCONSISTENT) if tally[s])
                failing[klass] = [f"{bad} of {sum(tally.values())} cases; the first: {firsts[klass]}"]
        if first_past:
            n = sum(past.values())
            failing[PAST_END] = [f"{n} requests counted tokens past the end of their output; the first: {first_past}"]
        for klass, counters in run.counters.items():
            if counters.num_accepted_tokens > counters.num_draft_tokens:
                failing.setdefault(klass, []).append(
                    f"method '{method}', {klass}: the counters say {counters.num_accepted_tokens} tokens accepted of "
                    f"{counters.num_draft_tokens} drafted"
                )
        split_notes = self._split_whole(method, plan, run, failing, counts, equal) if run.whole else []
        passing = {klass for klass in counts if klass not in failing}
        if not first_past and counts:
            passing.add(PAST_END)
        rows = [Row("cases", float(len(plan.cases)), headline=True)]
        for klass in counts:  # in the plan's order
            rows += [Row(f"{klass}.{s}", float(n), failing=s != EQUAL and n > 0) for s, n in counts[klass].items()]
            rows.append(Row(f"{klass}.{PAST_END}", float(past[klass]), bound=0))
        record = None
        if method != BASELINE:
            record = self._acceptance(method, key, run, failing, rows)
        notes = [f"{klass}: {note}" for klass, note in plan.notes.items()] + split_notes
        j = Judgement(self.gate, method, key, Verdict.PASS, [], rows, record)
        release = self.ctx.release_of(method) if self.ctx.release_of else ""
        settle(self.ctx.profile.known_issues, j, failing, passing, release, str(self.ctx.profile.path))
        j.messages += notes + ["time: " + ", ".join(f"{klass} {s:.1f} s" for klass, s in run.seconds.items())]
        return j

    def _split_whole(self, method: str, plan, run, failing: dict[str, list[str]], counts, equal: set[str]) -> list[str]:
        """The split class against its own prompts sent one at a time first (prefilled whole): the same tokens, and
        as many draft tokens accepted after the split prefills, within [scenarios.edges] acceptance_rtol. A case
        that differs here moves from `equal` to differs (one counted different from the baseline's stays one); a
        near-tie the profile's tie-aware rule forgives, by the baseline engine's top-k logprobs there, is noted."""
        forgiven: list[str] = []
        base = self.runs.edges(BASELINE) if method != BASELINE else None
        for case in plan.of("split"):
            mine, whole = run.replies.get(case.id), run.whole.get(case.id)
            if mine is None or whole is None or mine.first is None or whole.first is None:
                continue
            ours, theirs = mine.first.token_ids, whole.first.token_ids
            i = first_divergence(theirs, ours)
            if i is None:
                continue
            if (gap := self._whole_gap(base, case.id, theirs, ours, i)) is not None:
                said = f"method '{method}', split: case {case.id} after a split prefill differs from the same prompt "
                forgiven.append(f"{said}prefilled whole at token {i}, a near-tie (logprob gap {gap:.4g} nats)")
                continue
            if case.id in equal:
                counts["split"][DIFFERS] += 1
                counts["split"][EQUAL] -= 1
            said = f"method '{method}', split: case {case.id} after a split prefill differs from the same prompt "
            failing.setdefault("split", []).append(f"{said}prefilled whole at token {i}")
        together, alone = run.counters.get("split"), run.whole_counters
        if together is None or alone is None:
            return forgiven
        rtol = self.ctx.profile.scenarios.edges.acceptance_rtol
        floor = alone.num_accepted_tokens * (1 - rtol)
        said = (
            f"split: {together.num_accepted_tokens} draft tokens accepted after split prefills, "
            f"{alone.num_accepted_tokens} with the same prompts prefilled whole"
        )
        if together.num_accepted_tokens < floor - 1e-9:
            failing.setdefault("split_acceptance", []).append(
                f"method '{method}', {said} (floor {floor:.1f}, [scenarios.edges] acceptance_rtol {rtol}): the drafts "
                "lose acceptance after a split prefill"
            )
        return [said, *forgiven]

    def _whole_gap(self, base, case_id: str, whole: tuple[int, ...], split: tuple[int, ...], i: int) -> float | None:
        """The logprob gap between the two tokens at position i where the split reply first leaves the whole one, if
        the tie-aware rule forgives it by the baseline engine's top-k logprobs there (its output the same as the whole
        one's up to i, so they are the same context's); None when it does not."""
        reply = base.replies.get(case_id) if base is not None else None
        theirs = reply.first if reply is not None else None
        if theirs is None or not theirs.logprobs or i >= len(theirs.logprobs):
            return None
        if tuple(theirs.token_ids[:i]) != tuple(whole[:i]):
            return None
        a, b = (whole[i] if i < len(whole) else None), (split[i] if i < len(split) else None)
        gap, forgiven = self._near_tie(theirs.logprobs[i], a, b)
        return gap if forgiven else None

    def _acceptance(self, method: str, key: str, run, failing: dict[str, list[str]], rows: list[Row]) -> dict:
        """Each class's mean acceptance length, held to its stored figure (acceptance_rtol); returns the record an
        update stores (flat: `<class>.mean_acceptance_length`)."""
        found = self.ctx.lookup(method, self.gate, key)
        stored = (found.values or {}) if found else {}
        rtol = self.ctx.profile.scenarios.edges.acceptance_rtol
        record = {}
        for klass, counters in run.counters.items():
            now = counters.mean_acceptance_length
            if now is None:
                continue
            record[f"{klass}.{ACCEPTANCE}"] = round(now, 6)
            then = stored.get(f"{klass}.{ACCEPTANCE}")
            floor = None if then is None else then * (1 - rtol)
            low = floor is not None and now < floor - 1e-6
            rows.append(Row(f"{klass}.{ACCEPTANCE}", now, then, floor, failing=low))
            if low and not self.ctx.update:
                failing.setdefault(f"{klass}_acceptance", []).append(
                    f"method '{method}', {klass}: mean acceptance length {now:.4g} against {then:.4g} stored (floor "
                    f"{floor:.4g}, [scenarios.edges] acceptance_rtol {rtol}; {found.source})"
                )
        if not stored and self.ctx.strict and not self.ctx.update:
            failing.setdefault("acceptance", []).append(
                self.ctx.baselines.missing(method, self.gate, key) + f" ({self.ctx.say('strict')})"
            )
        return record
