"""The guarantees speculative decoding needs from a rejection sampler, as checks.

Each `check_*` takes a sampler (`specgate.sampler.reference.RejectionSampler`) and an input, and raises
AssertionError with the evidence when the sampler breaks the guarantee. The same checks run
against vLLM, our reference, and the deliberately broken mutants (which must fail them).

Statistics. Each statistical check is one hypothesis test at ALPHA = 1e-3 on a sampler's
independent requests of the case (NUM_SAMPLES = 20 000 for the references and vLLM's V1 sampler;
V2_NUM_SAMPLES = 400 for Model Runner V2's sampler in Triton's interpreter, where a request costs
15-40 ms, or more where a case says why) sampled in one batched call with fixed seeds, so its
outcome is deterministic; a correct sampler would fail it for 1 seed in 1000. A check that tests
several positions splits ALPHA between them (Bonferroni). Power, pinned by
test_sample_size_detects_small_deviations: at the first position (all samples; later positions see
only the rows that got that far) the Pearson chi-square test, with up to 7 degrees of freedom at
ALPHA / 3, detects a deviation of Cohen's w = 0.05 (20 000 samples) / w = 0.36 (400) with
probability above 0.99; the exact binomial test detects an acceptance rate off by 0.02 / 0.15 with
probability above 0.99; the two-sided z-test on the mean number of accepted drafts
(rule_properties.py) detects a shift of 0.04 / 0.29 drafts when their standard deviation is at most 1
(k = 2) with probability above 0.99.

Across steps (check_tokens_across_steps_follow_target): one chi-square test at ALPHA on the joint law
of a request's first N tokens over V^N cells, decoded by consecutive steps as vLLM drives them; its
power on STEPS_CASE is pinned by test_across_steps.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

from specgate.sampler.reference import (
    PLACEHOLDER_TOKEN_ID,
    RejectionSampler,
    SpecRequest,
    emitted_tokens,
)

from .strategies import DistributionCase, StepsCase

ALPHA = 1e-3
NUM_SAMPLES = 20_000
V2_NUM_SAMPLES = 400  # Model Runner V2 in Triton's interpreter (a case may ask for more)
SAMPLE_SEED = 11
MIN_EXPECTED_PER_CELL = 5  # below this the chi-square approximation is poor; such cells are pooled


def describe(request: SpecRequest) -> str:
    mode = "greedy" if request.is_greedy else f"temperature {request.temperature}"
    probs = "with" if request.draft_probs is not None else "without"
    return (
        f"drafts {list(request.draft_token_ids)}, {mode}, vocab {request.vocab_size}, "
        f"seed {request.seed}, {probs} draft probs"
    )


def expected_greedy_tokens(request: SpecRequest) -> list[int]:
    """The longest prefix of drafts equal to the target's argmax, then the argmax after it.

    Written independently of any sampler: when every draft matches, the argmax after them is the
    bonus row's. Ties go to the lowest id (numpy and torch agree on this).
    """
    argmax = [int(t) for t in request.target_logits.argmax(axis=1)]
    n = 0
    while n < request.num_drafts and request.draft_token_ids[n] == argmax[n]:
        n += 1
    return [*request.draft_token_ids[:n], argmax[n]]


# --- properties over Hypothesis batches -------------------------------------------------------


def check_greedy_output_is_longest_matching_prefix_then_target_argmax(
    sample: RejectionSampler, batch: Sequence[SpecRequest]
) -> None:
    rows = sample(batch, seed=0)
    for i, request in enumerate(batch):
        if request.is_greedy:
            got, want = emitted_tokens(rows[i]), expected_greedy_tokens(request)
            assert got == want, f"request {i} ({describe(request)}): emitted {got}, want {want}"


def check_output_layout(sample: RejectionSampler, batch: Sequence[SpecRequest]) -> None:
    """1 to k + 1 tokens, then only placeholders; every token before the last is the draft there."""
    rows = sample(batch, seed=0)
    width = 1 + max(r.num_drafts for r in batch)
    assert rows.shape == (len(batch), width), f"output shape {rows.shape}, want {(len(batch), width)}"
    for i, request in enumerate(batch):
        row = [int(t) for t in rows[i]]
        tokens = emitted_tokens(rows[i])
        assert 1 <= len(tokens) <= request.num_drafts + 1, (
            f"request {i} ({describe(request)}): {len(tokens)} tokens in row {row}"
        )
        assert PLACEHOLDER_TOKEN_ID not in tokens, (
            f"request {i} ({describe(request)}): placeholder before the last token in {row}"
        )
        assert tokens[:-1] == list(request.draft_token_ids[: len(tokens) - 1]), (
            f"request {i} ({describe(request)}): {tokens} does not start with accepted drafts"
        )


def check_token_ids_inside_vocabulary(sample: RejectionSampler, batch: Sequence[SpecRequest]) -> None:
    rows = sample(batch, seed=0)
    for i, request in enumerate(batch):
        tokens = emitted_tokens(rows[i])
        outside = [t for t in tokens if not 0 <= t < request.vocab_size]
        assert not outside, f"request {i} ({describe(request)}): ids {outside} outside the vocabulary"


def check_certain_drafts_are_all_accepted(sample: RejectionSampler, batch: Sequence[SpecRequest]) -> None:
    """`batch` must already have certain drafts (strategies.with_certain_drafts)."""
    rows = sample(batch, seed=0)
    for i, request in enumerate(batch):
        tokens = emitted_tokens(rows[i])
        assert tokens[:-1] == list(request.draft_token_ids), (
            f"request {i} ({describe(request)}): emitted {tokens}, every draft should be kept"
        )
        if request.is_greedy:
            bonus = int(request.target_logits[-1].argmax())
            assert tokens[-1] == bonus, f"request {i}: bonus {tokens[-1]}, want argmax {bonus}"


def check_same_seed_gives_same_output(
    sample: RejectionSampler, batch: Sequence[SpecRequest], *, greedy_is_deterministic: bool = True
) -> None:
    """The same call twice is identical; seeded requests, and greedy ones where the rule draws nothing
    for them (not synthetic acceptance), ignore the batch's seed."""
    first, again, other_seed = sample(batch, seed=3), sample(batch, seed=3), sample(batch, seed=4)
    assert np.array_equal(first, again), f"same seed, different outputs:\n{first}\n{again}"
    for i, request in enumerate(batch):
        if (request.is_greedy and greedy_is_deterministic) or request.seed is not None:
            assert np.array_equal(first[i], other_seed[i]), (
                f"request {i} ({describe(request)}) changed with the batch seed: {first[i]} vs {other_seed[i]}"
            )


def check_requests_do_not_affect_each_other(sample: RejectionSampler, batch: Sequence[SpecRequest]) -> None:
    """A greedy or seeded request emits the same tokens alone as inside the batch."""
    rows = sample(batch, seed=5)
    for i, request in enumerate(batch):
        if request.is_greedy or request.seed is not None:
            alone = emitted_tokens(sample([request], seed=6)[0])
            together = emitted_tokens(rows[i])
            assert together == alone, f"request {i} ({describe(request)}): {together} in the batch, {alone} alone"


# --- statistical properties over fixed cases --------------------------------------------------

_samples: dict[tuple, tuple[RejectionSampler, np.ndarray]] = {}


def num_samples(sample: RejectionSampler, case: DistributionCase | StepsCase) -> int:
    """NUM_SAMPLES; on Triton's interpreter (samplers.Subject.interpreted) V2_NUM_SAMPLES, or the case's own."""
    if getattr(sample, "interpreted", False):
        return case.interpreter_samples or V2_NUM_SAMPLES
    return NUM_SAMPLES


def sample_case(sample: RejectionSampler, case: DistributionCase) -> np.ndarray:
    """num_samples(sample, case) independent requests of `case` in one call (deterministic, so memoized)."""
    key = (sample, case.name)
    if key not in _samples:
        # Keeping the sampler in the value keeps an unhashable-by-value sampler's id from being reused.
        requests = case.requests(num_samples(sample, case), SAMPLE_SEED)
        _samples[key] = (sample, sample(requests, seed=SAMPLE_SEED))
    return _samples[key][1]


def lengths(rows: np.ndarray) -> np.ndarray:
    return (rows != PLACEHOLDER_TOKEN_ID).sum(axis=1)


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson goodness of fit of `counts` to `probs`, pooling cells expected below 5."""
    expected = counts.sum() * probs
    keep = expected >= MIN_EXPECTED_PER_CELL
    observed_cells = [*counts[keep], counts[~keep].sum()]
    expected_cells = [*expected[keep], expected[~keep].sum()]
    if expected_cells[-1] < MIN_EXPECTED_PER_CELL and len(expected_cells) > 2:
        # The pooled rest is still too small: fold it into the smallest kept cell.
        j = int(np.argmin(expected_cells[:-1]))
        observed_cells[j] += observed_cells.pop()
        expected_cells[j] += expected_cells.pop()
    if len(expected_cells) < 2:
        return 1.0  # a single cell: nothing can deviate
    return float(stats.chisquare(observed_cells, expected_cells).pvalue)


def check_emitted_tokens_follow_target(sample: RejectionSampler, case: DistributionCase) -> None:
    """The token at position j, among rows that kept their first j drafts, follows p_{j+1}.

    j = 0 is "the first emitted token is distributed as p"; j = k is the bonus token.
    """
    rows = sample_case(sample, case)
    p = case.target_probs()
    alpha = ALPHA / (case.num_drafts + 1)
    for j in range(case.num_drafts + 1):
        reached = rows[lengths(rows) > j, j]
        if j > 0 and len(reached) == 0:
            continue  # nothing got this far; position 0 has already judged the sampler
        counts = np.bincount(reached, minlength=case.vocab_size)
        impossible = np.flatnonzero((p[j] == 0) & (counts > 0))
        assert not impossible.size, (
            f"{case.name}: position {j} emitted tokens {impossible.tolist()} the target rules out"
        )
        pvalue = chi_square_pvalue(counts, p[j])
        assert pvalue >= alpha, (
            f"{case.name}: position {j} does not follow the target (chi-square p = {pvalue:.2g} "
            f"< {alpha:.2g}, n = {len(reached)})\n"
            f"  observed {np.round(counts / len(reached), 4).tolist()}\n"
            f"  target   {np.round(p[j], 4).tolist()}"
        )


def check_first_draft_acceptance_rate(sample: RejectionSampler, case: DistributionCase) -> None:
    """The first draft is kept with probability sum_v min(p(v), q(v)).

    Accepted means at least two tokens emitted, as the engine counts (emitted - 1 accepted).
    """
    rows = sample_case(sample, case)
    accepted = int((lengths(rows) >= 2).sum())
    want = case.first_draft_acceptance()
    result = stats.binomtest(accepted, len(rows), want)
    assert result.pvalue >= ALPHA, (
        f"{case.name}: first draft accepted {accepted / len(rows):.4f} of the time, "
        f"sum(min(p, q)) = {want:.4f} (binomial p = {result.pvalue:.2g} < {ALPHA})"
    )


def check_samplers_agree_in_distribution(
    sample: RejectionSampler, other: RejectionSampler, case: DistributionCase
) -> None:
    """Two samplers given the same requests emit the same law of (tokens emitted, last token).

    A two-sample chi-square test on the contingency table; outcomes seen fewer than
    2 * 5 times in total are pooled.
    """
    tables = []
    for rows in (sample_case(sample, case), sample_case(other, case)):
        n = lengths(rows)
        last = rows[np.arange(len(rows)), n - 1]
        tables.append(np.bincount(n * case.vocab_size + last, minlength=(case.num_drafts + 2) * case.vocab_size))
    table = np.array(tables)
    totals = table.sum(axis=0)
    rare = totals < 2 * MIN_EXPECTED_PER_CELL
    pooled = np.column_stack([table[:, ~rare], table[:, rare].sum(axis=1)])
    pooled = pooled[:, pooled.sum(axis=0) > 0]
    if pooled.shape[1] < 2:
        return  # both put everything on one outcome: identical
    pvalue = stats.chi2_contingency(pooled).pvalue
    assert pvalue >= ALPHA, (
        f"{case.name}: outputs differ in distribution (chi-square p = {pvalue:.2g} < {ALPHA})\n"
        f"  {table[0].tolist()}\n  {table[1].tolist()}"
    )


# --- one request over consecutive verification steps ------------------------------------------


def decode_across_steps(sample: RejectionSampler, case: StepsCase, n: int, seed: int) -> np.ndarray:
    """The first `case.num_tokens` tokens of n seeded requests (seeds seed * n .. seed * n + n - 1), each
    decoded over consecutive verification steps the way vLLM's V2 runner drives one request: the same
    seed every step; a step starts where the last one's emitted tokens end (its row 0 at P, the next
    step's at P + tokens emitted: num_computed_tokens moves on by num_sampled, input_batch.py
    0.32:531 and 611-614); the emitted tokens are the request's context (which the case's target and
    drafter ignore). All requests still short of their tokens go in one batch per step. Seeded, because
    vLLM draws an unseeded request's seed once, when the request is added (sample/states.py
    0.32:54-58), while the V2 worker adds its requests anew every call. Returns [n, num_tokens]."""
    tokens: list[list[int]] = [[] for _ in range(n)]
    positions = [case.first_position] * n
    seeds = [seed * n + r for r in range(n)]
    step = 0
    while active := [r for r in range(n) if len(tokens[r]) < case.num_tokens]:
        rows = sample([case.step(seeds[r], positions[r]) for r in active], seed=seed + step)
        for r, row in zip(active, rows):
            emitted = emitted_tokens(row)
            tokens[r] += emitted
            positions[r] += len(emitted)
        step += 1
    return np.array([t[: case.num_tokens] for t in tokens])


_decoded: dict[tuple, tuple[RejectionSampler, np.ndarray]] = {}


def tokens_across_steps(sample: RejectionSampler, case: StepsCase) -> np.ndarray:
    """decode_across_steps for num_samples(sample, case) requests (deterministic, so memoized)."""
    key = (sample, case.name)
    if key not in _decoded:
        _decoded[key] = (sample, decode_across_steps(sample, case, num_samples(sample, case), SAMPLE_SEED))
    return _decoded[key][1]


def joint_counts(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """How often each sequence of tokens occurs (row-major over V^N, as StepsCase.target_joint)."""
    cells = np.ravel_multi_index(tokens.T, (vocab_size,) * tokens.shape[1])
    return np.bincount(cells, minlength=vocab_size ** tokens.shape[1])


def deviation(counts: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """(total variation distance, Cohen's w) of the observed frequencies from `probs`; w over the cells
    `probs` allows (a count where it allows none fails on its own)."""
    observed = counts / counts.sum()
    allowed = probs > 0
    w = np.sqrt(((observed[allowed] - probs[allowed]) ** 2 / probs[allowed]).sum())
    return float(np.abs(observed - probs).sum() / 2), float(w)


def check_tokens_across_steps_follow(
    sample: RejectionSampler, case: StepsCase, law: np.ndarray, what: str = "the target"
) -> str:
    """The first N tokens of a request decoded over consecutive steps have the joint law `law` (over
    V^N, row-major); returns the measurement, for the test to show."""
    counts = joint_counts(tokens_across_steps(sample, case), case.vocab_size)
    n = int(counts.sum())
    pvalue = chi_square_pvalue(counts, law)
    tv, w = deviation(counts, law)
    measured = (
        f"{case.name}, against {what}: total variation {tv:.3f}, Cohen's w {w:.3f}, "
        f"chi-square p = {pvalue:.2g}, n = {n} requests"
    )
    impossible = np.flatnonzero((law == 0) & (counts > 0))
    assert not impossible.size, f"{measured}: sequences {impossible.tolist()} (row-major) {what} rules out"
    assert pvalue >= ALPHA, (
        f"{measured}: the first {case.num_tokens} tokens across steps do not follow {what} (p < {ALPHA})\n"
        f"  observed {np.round(counts / n, 4).tolist()}\n  expected {np.round(law, 4).tolist()} ({what})"
    )
    return measured


def check_tokens_across_steps_follow_target(sample: RejectionSampler, case: StepsCase) -> str:
    """With a context-free target and drafter, a request's first N tokens are N i.i.d. draws from p:
    lossless speculative sampling promises this across steps only when every step draws fresh
    randomness."""
    return check_tokens_across_steps_follow(sample, case, case.target_joint())
