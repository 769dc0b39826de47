"""Exact expectations for the statistical properties, computed from a case's p and q (no sampling).

In a `DistributionCase` the target's rows do not depend on the drafts, and drafts are either fixed
(n-gram style: `draft_sample_method = "greedy"`) or drawn independently per position from q
(`"probabilistic"`). So each position's verification outcome is independent of the others, and the
expected number of accepted drafts of each rule is a finite sum:

- standard (Leviathan et al.): sum_i prod_{j <= i} a_j, with a_j = sum_x min(p_j(x), q_j(x));
- block (Sun et al.): over every draft sequence X (weight prod q_j(X_j)), tau = max{i : u_i <= h_i(X)}
  with independent u_i, so E[tau | X] = sum_i i h_i prod_{j > i} (1 - h_j);
- fly: each position natively accepts (a_j), rejects a draft the gate may defer (p, q > 0 there) or
  rejects one it may not; the accepted count is FLy's walk over those outcomes (sampler/reference.py).

Across steps (`StepsCase`), the law of the first tokens block verification emits, with acceptance
uniforms fresh per step or read again by the next step (first_tokens_across_steps).
"""

from __future__ import annotations

import itertools

import numpy as np

from specgate.sampler.reference import BlockReferenceSampler, top_k_entropy

from .strategies import DistributionCase, StepsCase


def draft_sequences(case: DistributionCase):
    """(drafts, probability) for every draft sequence the case can produce."""
    if case.draft_probs is None:
        yield case.fixed_drafts, 1.0
        return
    q = case.draft_probs.astype(np.float64)
    q = q / q.sum(axis=1, keepdims=True)
    for drafts in itertools.product(range(case.vocab_size), repeat=case.num_drafts):
        weight = float(np.prod([q[j, x] for j, x in enumerate(drafts)]))
        if weight > 0:
            yield drafts, weight


def draft_distributions(case: DistributionCase, drafts) -> np.ndarray:
    if case.draft_probs is not None:
        q = case.draft_probs.astype(np.float64)
        return q / q.sum(axis=1, keepdims=True)
    q = np.zeros((case.num_drafts, case.vocab_size))
    q[np.arange(case.num_drafts), list(drafts)] = 1.0
    return q


def position_outcomes(case: DistributionCase) -> np.ndarray:
    """[k, 3]: per position, P(native accept), P(reject a draft p and q both allow), P(other reject)."""
    p = case.target_probs()
    out = np.zeros((case.num_drafts, 3))
    for j in range(case.num_drafts):
        if case.draft_probs is None:
            x = case.fixed_drafts[j]
            accept = p[j, x]
            deferrable = 1.0 - accept if p[j, x] > 0 else 0.0
        else:
            q = draft_distributions(case, None)[j]
            accept = np.minimum(p[j], q).sum()
            deferrable = np.maximum(q - p[j], 0.0)[p[j] > 0].sum()
        out[j] = accept, deferrable, max(0.0, 1.0 - accept - deferrable)
    return out


def expected_accepted_standard(case: DistributionCase) -> float:
    accept = position_outcomes(case)[:, 0]
    return float(np.cumprod(accept).sum())


def sd_accepted_standard(case: DistributionCase) -> float:
    """Standard deviation of the per-token rule's accepted count: E[A^2] = sum_i (2i - 1) P(A >= i)."""
    reached = np.cumprod(position_outcomes(case)[:, 0])
    mean = reached.sum()
    return float(np.sqrt(sum((2 * i + 1) * r for i, r in enumerate(reached)) - mean**2))


def expected_accepted_block(case: DistributionCase) -> float:
    p = case.target_probs()
    total = 0.0
    for drafts, weight in draft_sequences(case):
        _, h = BlockReferenceSampler.block_thresholds(drafts, p, draft_distributions(case, drafts))
        k = len(drafts)
        total += weight * sum(i * h[i - 1] * np.prod(1.0 - h[i:]) for i in range(1, k + 1))
    return float(total)


def expected_accepted_fly(case: DistributionCase, window: int, threshold: float, top_k: int) -> float:
    k = case.num_drafts
    outcomes = position_outcomes(case)
    gate = [
        top_k_entropy(case.target_logits[j], case.temperature, top_k) >= threshold and j + window < k for j in range(k)
    ]
    total = 0.0
    for walk in itertools.product(range(3), repeat=k):  # 0 accept, 1 deferrable reject, 2 other reject
        weight = float(np.prod([outcomes[j, o] for j, o in enumerate(walk)]))
        if weight == 0:
            continue
        accepted, pending = 0, None
        for j, o in enumerate(walk):
            if pending is not None:
                if o != 0:
                    break
                if j - pending == window:
                    accepted, pending = j + 1, None
            elif o == 0:
                accepted = j + 1
            elif o == 1 and gate[j]:
                pending = j
            else:
                break
        total += weight * accepted
    return float(total)


def first_tokens_across_steps(case: StepsCase, *, reuse: bool) -> np.ndarray:
    """The exact law of the first N tokens block verification emits over consecutive steps of `case`
    (over the V^N sequences, row-major).

    reuse=False: every step's uniforms u_1..u_k are fresh, and this is the target's product law.
    reuse=True: u_i is keyed by its absolute position (vLLM 0.32: tl_rand32(seed, pos)); a step that
    starts at P and keeps tau drafts moves the next step to P + tau + 1, whose first k - tau - 1 rows
    read the uniforms this step's rows tau + 1..k - 1 already tested. Block verification tests every
    u_i (tau = max{i : u_i <= h_i}), so each carries over as a uniform on the interval its outcomes
    left it, (lo, hi]; the recursion follows those intervals.
    """
    p = np.asarray(case.target_probs, dtype=np.float64)
    k, vocab = case.num_drafts, case.vocab_size
    drafts = case.fixed_drafts
    q = np.eye(vocab)[list(drafts)]
    ratio, h = BlockReferenceSampler.block_thresholds(drafts, np.tile(p, (k + 1, 1)), q)
    law = np.zeros((vocab,) * case.num_tokens)

    def step(tokens: tuple, weight: float, carried: tuple) -> None:
        if len(tokens) >= case.num_tokens:
            law[tokens[: case.num_tokens]] += weight
            return
        intervals = [*carried, *[(0.0, 1.0)] * (k - len(carried))]
        for kept in itertools.product((True, False), repeat=k):
            outcome = [
                (lo, min(hi, h[i])) if keep else (max(lo, h[i]), hi)
                for i, ((lo, hi), keep) in enumerate(zip(intervals, kept))
            ]
            chance = np.prod([max(b - a, 0.0) / (hi - lo) for (a, b), (lo, hi) in zip(outcome, intervals)])
            if chance == 0:
                continue
            tau = max((i + 1 for i in range(k) if kept[i]), default=0)
            last = p if tau == k else np.maximum(ratio[tau] * p - q[tau], 0.0)
            for token in np.flatnonzero(last):
                step(
                    (*tokens, *drafts[:tau], int(token)),
                    weight * chance * last[token] / last.sum(),
                    tuple(outcome[tau + 1 :]) if reuse else (),
                )

    step((), 1.0, ())
    return law.ravel()
