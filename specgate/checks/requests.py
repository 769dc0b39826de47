"""The requests scenario's check: requests as users send them must give what the plain engine gives.

For each case of the matrix (specgate.run.request_matrix) the method's reply is held to
  - itself (completions.inconsistencies): text vs ids under the stop rule, a logprob entry per token,
    the cap, usage, the finish reason, banned tokens; a streamed case against its final-only twin;
  - the baseline engine's reply to the same request: token ids, text, finish and stop reason, usage,
    logprobs (the same tokens; values within [scenarios.requests] logprob_atol) and prompt logprobs;
  - for the seeded class, its own repeat (the same seed twice gives the same outputs);
and a case that must change the output (penalties, bans) must change the baseline's own output against
its prompt's plain request, or it tests nothing and fails. A request vLLM refuses under speculation is
reported as refused, in vLLM's words. The engine's counters must agree with themselves (accepted <=
drafted; vLLM's per-request figures sum to the counters' deltas).

At T > 0 the method's seeded samples and the baseline's must come from one distribution
(two_sample.differ at the scenario's level): as shipped, and where vllm#55005's probe fails also with
the repair in the worker, which must pass (the shipped samples are then taken in two looks, each judged at
half the level: run.scenario_records.Sampled). Acceptance over the samples is stored per category and held
to acceptance_rtol like the greedy pass's. The profile's [known_issues] settle what they explain
(checks.known).

Verdict per class: equal / differs / inconsistent / refused (rows `<class>.<status>`); the first
difference of each failing class is quoted with its case, parameters, position, both tokens and the text
around them.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgate.checks import Context, Judgement, Row, Verdict
from specgate.checks.known import settle
from specgate.figures.completions import Completion, Reply, bad_word_tokens, inconsistencies
from specgate.figures.equivalence import first_divergence
from specgate.figures.two_sample import differ
from specgate.gates import REQUESTS, Key
from specgate.profile import BASELINE

EQUAL, DIFFERS, INCONSISTENT, REFUSED, VACUOUS = "equal", "differs", "inconsistent", "refused", "vacuous"
FAILING = (DIFFERS, INCONSISTENT, VACUOUS)
STATUSES = (EQUAL, DIFFERS, INCONSISTENT, REFUSED)
SAMPLED, REPAIRED, SAMPLED_ACCEPTANCE, COUNTERS = "sampled", "sampled_repaired", "sampled_acceptance", "counters"


@dataclass(frozen=True)
class CaseResult:
    case: object  # request_matrix.RequestCase
    status: str
    detail: str = ""

    def line(self, method: str) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.case.params.items() if k not in ("temperature",))
        how = "streamed" if self.case.stream else "final-only"
        return f"method '{method}', {self.case.klass}: case {self.case.id} ({how}; {params}): {self.detail}"


def _tok(decode, t: int | None) -> str:
    return "<end of output>" if t is None else f"{decode([t])!r} (id {t})"


def difference(mine: Completion, base: Completion, decode, atol: float) -> str:
    """How `mine` differs from the baseline's `base` ('' when it does not): the first field that differs."""
    i = first_divergence(base.token_ids, mine.token_ids)
    if i is not None:
        a = base.token_ids[i] if i < len(base.token_ids) else None
        b = mine.token_ids[i] if i < len(mine.token_ids) else None
        around = decode(list(base.token_ids[max(0, i - 6) : i]))
        return f"at token {i} (after {around!r}): baseline {_tok(decode, a)} vs method {_tok(decode, b)}"
    if mine.text != base.text:
        return f"the same ids, other text: baseline {base.text[-60:]!r} vs method {mine.text[-60:]!r}"
    if (mine.finish_reason, mine.stop_reason) != (base.finish_reason, base.stop_reason):
        return (
            f"finish reason {mine.finish_reason!r} (stop_reason {mine.stop_reason!r}) against the baseline's "
            f"{base.finish_reason!r} ({base.stop_reason!r})"
        )
    if mine.usage != base.usage:
        return f"usage {mine.usage} completion tokens against the baseline's {base.usage}"
    for name, ours, theirs in (
        ("logprobs", mine.logprobs, base.logprobs),
        ("prompt logprobs", mine.prompt_logprobs, base.prompt_logprobs),
    ):
        if (ours is None) != (theirs is None):
            ours_said, theirs_said = ("missing", "given") if ours is None else ("given", "missing")
            return f"{name} {ours_said}, the baseline's {theirs_said}"
        for pos, (x, y) in enumerate(zip(ours or (), theirs or ())):
            if (x is None) != (y is None) or (x is not None and set(x) != set(y)):
                return f"{name} at token {pos}: tokens {sorted(x or ())} against the baseline's {sorted(y or ())}"
            worst = max((abs(x[t] - y[t]) for t in x), default=0.0) if x else 0.0
            if worst > atol:
                return f"{name} at token {pos}: a value {worst:.3g} off the baseline's (logprob_atol {atol:g})"
        if ours is not None and len(ours) != len(theirs):
            return f"{len(ours)} {name} entries against the baseline's {len(theirs)}"
    return ""


def _contains(ids, seq) -> bool:
    n = len(seq)
    return any(list(ids[i : i + n]) == seq for i in range(len(ids) - n + 1))


class RequestsCheck:
    gate = REQUESTS

    def __init__(self, ctx: Context, runs, store):
        self.ctx, self.runs, self.store = ctx, runs, store

    # -- one reply against itself ----------------------------------------------------------------
    def _own_problems(self, case, reply: Reply, replies: dict[str, Reply]) -> list[str]:
        decode, eos = self.runs.decode, self.runs.eos()
        problems = []
        streamed = None
        if not case.stream and case.twin and (twin := replies.get(case.twin)) and twin.first and not twin.refused:
            streamed = twin.first
        for out in reply.outputs:
            problems += inconsistencies(out, case.params, decode, eos, streamed if out.index == 0 else None)
            for t, bias in (case.params.get("logit_bias") or {}).items():
                if bias <= -100 and int(t) in out.token_ids:
                    problems.append(f"token {t}, biased by {bias:g}, emitted at token {out.token_ids.index(int(t))}")
            for seq in bad_word_tokens(case.params.get("bad_words") or (), self.runs.encode):
                if _contains(out.token_ids, seq):
                    problems.append(f"bad word tokens {seq} emitted")
        n = case.samples
        if len(reply.outputs) != n:
            problems.append(f"{len(reply.outputs)} outputs for n = {n}")
        return problems

    def _case(self, case, mine: dict[str, Reply], base: dict[str, Reply] | None) -> CaseResult:
        reply = mine.get(case.id)
        if reply is None:
            return CaseResult(case, INCONSISTENT, "no reply")
        theirs = base.get(case.id) if base is not None else None
        if reply.refused:
            said = f"refused: {reply.refused}"
            if theirs is not None and not theirs.refused:
                said += " (the plain engine accepts it)"
            return CaseResult(case, REFUSED, said)
        if problems := self._own_problems(case, reply, mine):
            return CaseResult(case, INCONSISTENT, "; ".join(problems[:3]))
        if case.repeat_of:
            first = mine.get(case.repeat_of)
            if first is not None and not first.refused:
                for a, b in zip(first.outputs, reply.outputs):
                    if a.token_ids != b.token_ids or a.text != b.text:
                        return CaseResult(
                            case,
                            DIFFERS,
                            f"output {a.index}: the same seed gave another output the second time: "
                            + difference(b, a, self.runs.decode, 0.0),
                        )
        if case.klass == "seeded" or theirs is None:
            return CaseResult(case, EQUAL)
        if theirs.refused:
            return CaseResult(case, DIFFERS, f"accepted where the plain engine refuses it ({theirs.refused})")
        atol = self.ctx.profile.scenarios.requests.logprob_atol
        for a, b in zip(reply.outputs, theirs.outputs):
            if what := difference(a, b, self.runs.decode, atol):
                if self._forgiven(case, a, b):
                    return CaseResult(case, EQUAL, "a near-tie the equivalence rule forgives")
                return CaseResult(case, DIFFERS, what)
        return CaseResult(case, EQUAL)

    def _forgiven(self, case, mine: Completion, base: Completion) -> bool:
        """Under the tie-aware rule (bf16), a token divergence at a near-tie of the baseline's own
        logprobs (the request's, or its prompt's plain greedy pass where the outputs agree up to there)."""
        rule = self.ctx.profile.equivalence
        if rule.mode != "tie-aware":
            return False
        i = first_divergence(base.token_ids, mine.token_ids)
        if i is None or i >= len(base.token_ids) or i >= len(mine.token_ids):
            return False
        tops = base.logprobs
        if tops is None:
            plain = self.store.greedy_outputs(BASELINE).get(case.prompt_id)
            if plain is None or tuple(plain.token_ids[:i]) != tuple(base.token_ids[:i]):
                return False
            tops = plain.top_logprobs
        if i >= len(tops or ()):
            return False
        top = tops[i]
        a, b = base.token_ids[i], mine.token_ids[i]
        return a in top and b in top and top[a] - top[b] <= rule.logprob_margin

    def _vacuous(self, case, base: dict[str, Reply]) -> str:
        """Why a case that must change the output does not change the baseline's own output ('' if it does)."""
        reply, plain = base.get(case.id), base.get(f"plain@{case.prompt_id}")
        if reply is None or reply.refused or plain is None or not reply.first or not plain.first:
            return ""
        if reply.first.token_ids == plain.first.token_ids:
            return (
                f"it changes nothing on prompt {case.prompt_id}: the baseline engine's output equals its plain "
                "request's, so the case tests nothing (choose stronger parameters in specgate/run/request_matrix.py)"
            )
        return ""

    def _seeded_basis(self, results, run, sampler_broken: bool, notes: list[str]) -> list[CaseResult]:
        """A seeded repeat says something only on a sound sampler. Where vllm#55005's repair was in the worker,
        the repaired sends are judged and the shipped ones shown; where the shipped samples fail the two-sample
        test and nothing could be repaired (an endpoint), the repeats are shown, not judged."""
        seeded = [r for r in results if r.case.klass == "seeded"]
        shipped = [r for r in seeded if r.status in FAILING]
        said = f"{len(shipped)} of {len(seeded)} differ or disagree with themselves" + (
            f" (the first: {shipped[0].detail})" if shipped else ""
        )
        if run.repaired_replies:
            notes.append(f"seeded repeats as shipped: {said}; judged with the sampler repaired")
            return [self._case(r.case, run.repaired_replies, None) if r.case.klass == "seeded" else r for r in results]
        if sampler_broken and seeded:
            notes.append(f"seeded repeats not judged: the samples fail the two-sample test (as shipped: {said})")
            return [r for r in results if r.case.klass != "seeded"]
        return results

    def _vacuous_cases(self, results: list[CaseResult], base: dict[str, Reply], notes: list[str]) -> list[CaseResult]:
        """A parameter that must change the output (a penalty, a ban) and changed the baseline's own output on
        no prompt tests nothing: its cases fail. Where it changed some prompts' outputs, those are the test,
        and the prompts it left alone are named in a note."""
        idle: dict[str, list[str]] = {}  # parameter -> prompts where it changed nothing
        tried: dict[str, int] = {}
        why: dict[str, str] = {}
        for r in results:
            if r.case.must_change and r.status == EQUAL:
                name = r.case.id.split("@", 1)[0]
                tried[name] = tried.get(name, 0) + 1
                if reason := self._vacuous(r.case, base):
                    idle.setdefault(name, []).append(r.case.prompt_id)
                    why[r.case.id] = reason
        out = []
        for r in results:
            name = r.case.id.split("@", 1)[0]
            if r.case.id in why and len(idle[name]) == tried[name]:
                out.append(CaseResult(r.case, VACUOUS, why[r.case.id]))
            else:
                out.append(r)
        notes += [
            f"{name} changed nothing on {', '.join(prompts)} (its other prompts are the test)"
            for name, prompts in idle.items()
            if len(prompts) < tried[name]
        ]
        return out

    # -- the engine's counters ---------------------------------------------------------------------
    @staticmethod
    def _counter_rows(run) -> list[Row]:
        """The counters' deltas over the matrix and, where vLLM gave them for every output, its per-request sums."""
        c = run.counters
        rows = [
            Row("counters.drafted", float(c.num_draft_tokens)),
            Row("counters.accepted", float(c.num_accepted_tokens)),
        ]
        spec = [s for reply in run.replies.values() for s in reply.spec_counts]
        if spec and len(spec) == sum(len(reply.outputs) for reply in run.replies.values()):
            rows += [
                Row("counters.per_request_drafted", float(sum(s[1] for s in spec)), float(c.num_draft_tokens)),
                Row("counters.per_request_accepted", float(sum(s[0] for s in spec)), float(c.num_accepted_tokens)),
            ]
        return rows

    @staticmethod
    def _counter_problems(run) -> list[str]:
        c, problems = run.counters, []
        if c.num_accepted_tokens > c.num_draft_tokens:
            problems.append(f"the counters say {c.num_accepted_tokens} tokens accepted of {c.num_draft_tokens} drafted")
        for pos, n in enumerate(c.accepted_per_pos):
            if n > c.num_drafts:
                problems.append(f"{n} drafts accepted at position {pos} of {c.num_drafts} drafts")
        spec = [s for reply in run.replies.values() for s in reply.spec_counts]
        outputs = sum(len(reply.outputs) for reply in run.replies.values())
        if spec and len(spec) == outputs:
            accepted, drafted = sum(s[0] for s in spec), sum(s[1] for s in spec)
            if (accepted, drafted) != (c.num_accepted_tokens, c.num_draft_tokens):
                problems.append(
                    f"vLLM's per-request figures sum to {accepted} accepted of {drafted} drafted, its counters moved "
                    f"by {c.num_accepted_tokens} of {c.num_draft_tokens}"
                )
        return problems

    # -- T > 0 -------------------------------------------------------------------------------------
    def _sampled(self, method: str, run, base, failing, passing, rows) -> None:
        config = self.ctx.profile.scenarios.requests
        for klass, samples in ((SAMPLED, run.sampled), (REPAIRED, run.repaired)):
            if samples is None:
                continue
            test = differ(samples.tokens, base.sampled.tokens, config.sampled_tokens, seed=self.ctx.profile.seed)
            level = samples.level(config.level)
            rows.append(Row(f"{klass}.p_value", test.p_value, bound=level, failing=test.rejects(level)))
            if test.rejects(level):
                repaired = ", with vllm#55005's repair in the worker," if klass == REPAIRED else ""
                look = f", the {samples.look} of two looks" if samples.look else ""
                failing.setdefault(klass, []).append(
                    f"method '{method}', {klass}: its samples at T {config.temperature:g}{repaired} are not the plain "
                    f"engine's distribution (two-sample test over {test.samples[0]} + {test.samples[1]} samples, "
                    f"{config.sampled_tokens} tokens each{look}: p = {test.p_value:.2g} < level {level:g}); "
                    f"most apart: {test.worst}"
                )
            else:
                passing.add(klass)

    def _sampled_acceptance(self, method: str, run) -> dict[str, float]:
        """Mean acceptance length over the samples per category: the repaired run's where the shipped sampler
        is broken."""
        samples = run.repaired or run.sampled
        out = {}
        for category, counters in samples.counters.items():
            if (length := counters.mean_acceptance_length) is not None:
                out[category] = round(length, 6)
        return out

    def _held_acceptance(
        self, method: str, key: str, run, failing: dict[str, list[str]], rows: list[Row], notes: list[str]
    ):
        """The acceptance at T > 0 held to its stored floor: its rows appended, its failures noted; returns
        the record an update stores (None, said in `notes`, where the samples measure a broken sampler)."""
        profile = self.ctx.profile
        if run.repaired is None and SAMPLED in failing:
            # samples of a sampler shown broken (the two-sample test) that nothing repaired: their acceptance
            # measures the bug
            notes.append(
                "acceptance at T > 0 not judged nor stored: the samples failed the two-sample test and could not "
                "be taken again with vllm#55005's repair (an endpoint specgate did not start, or a worker that would "
                "not take the repair)"
            )
            return None
        acceptance = self._sampled_acceptance(method, run)
        # a baseline record is flat (field -> number): sampled_acceptance.<category> -> mean acceptance length
        record = {f"{SAMPLED_ACCEPTANCE}.{category}": now for category, now in acceptance.items()}
        found = self.ctx.lookup(method, self.gate, key)
        values = (found.values or {}) if found else {}
        stored = {f: v for f, v in values.items() if f.startswith(f"{SAMPLED_ACCEPTANCE}.")} or None
        rtol = self.ctx.tolerance(method).sampled_acceptance_rtol
        for category, now in acceptance.items():
            then = (stored or {}).get(f"{SAMPLED_ACCEPTANCE}.{category}")
            floor = None if then is None else then * (1 - rtol)
            low = floor is not None and now < floor - 1e-6
            rows.append(Row(f"{SAMPLED_ACCEPTANCE}.{category}", now, then, floor, failing=low))
            if low and not self.ctx.update:
                failing.setdefault(SAMPLED_ACCEPTANCE, []).append(
                    f"method '{method}', {category} at T {profile.scenarios.requests.temperature:g}: mean "
                    f"acceptance length {now:.4g} against {then:.4g} stored "
                    f"(floor {floor:.4g}, sampled_acceptance_rtol {rtol}; {found.source})"
                )
        if stored is None and self.ctx.strict and not self.ctx.update:
            failing.setdefault(SAMPLED_ACCEPTANCE, []).append(
                self.ctx.baselines.missing(method, self.gate, key) + f" ({self.ctx.say('strict')})"
            )
        return record

    # -- the verdict ---------------------------------------------------------------------------------
    def judge(self, method: str, key: Key) -> Judgement:
        runs, profile = self.runs, self.ctx.profile
        matrix = runs.request_matrix()
        run = runs.requests(method)
        base = runs.requests(BASELINE) if method != BASELINE else None
        results = [self._case(c, run.replies, None if base is None else base.replies) for c in matrix.cases]
        notes: list[str] = []
        failing: dict[str, list[str]] = {}
        passing: set[str] = set()
        rows: list[Row] = []
        if base is not None:
            self._sampled(method, run, base, failing, passing, rows)
        results = self._seeded_basis(results, run, SAMPLED in failing, notes)
        results = self._vacuous_cases(results, run.replies if base is None else base.replies, notes)
        by_class: dict[str, dict[str, int]] = {}
        firsts: dict[str, CaseResult] = {}
        for r in results:
            counts = by_class.setdefault(r.case.klass, dict.fromkeys((*STATUSES, VACUOUS), 0))
            counts[r.status] += 1
            if r.status in FAILING:
                firsts.setdefault(r.case.klass, r)
        for klass, first in firsts.items():
            counts = by_class[klass]
            bad = ", ".join(f"{counts[s]} {s}" for s in FAILING if counts[s])
            failing[klass] = [f"{bad} of {sum(counts.values())} cases; the first: {first.line(method)}"]
        passing |= {klass for klass in by_class if klass not in failing}
        if not matrix.cases:  # the scenario would test nothing at all
            failing["matrix"] = [
                f"method '{method}': no request could be built: {next(iter(matrix.not_exercised.values()))}"
            ]
        for klass, why in matrix.not_exercised.items():
            if klass not in by_class and matrix.cases:
                notes.append(f"{klass} not exercised: {why}")
        if problems := self._counter_problems(run):
            failing[COUNTERS] = [f"method '{method}', {COUNTERS}: {p}" for p in problems]
        else:
            passing.add(COUNTERS)
        if base is not None:
            rows += self._counter_rows(run)
        rows[:0] = [
            Row("cases", float(len(results)), headline=True),
            *(
                Row(f"{klass}.{status}", float(n), failing=status in FAILING and n > 0)
                for klass, counts in by_class.items()
                for status, n in counts.items()
                if n or status in STATUSES
            ),
        ]
        record = self._held_acceptance(method, key, run, failing, rows, notes) if base is not None else None
        j = Judgement(self.gate, method, key, Verdict.PASS, [], rows, record)
        release = self.ctx.release_of(method) if self.ctx.release_of else ""
        settle(profile.known_issues, j, failing, passing, release, str(profile.path))
        if run.repair:
            j.messages.append(
                "vllm#55005's probe fails on this release: the samples and the seeded repeats were taken again with "
                "the repair in the worker (the repaired samples must pass)"
            )
        j.messages += notes
        if run.seconds:
            j.messages.append("time: " + ", ".join(f"{part} {s:.1f} s" for part, s in run.seconds.items()))
        return j
