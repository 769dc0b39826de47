"""Is sampling at T > 0 lossless? A two-sample test of the tokens two engines sample for the same prompts.

Speculative decoding with rejection sampling must leave the output distribution exactly the target's.
Each engine is sent many seeded one-sample requests of a few prompts; for every prompt and each of the
first positions, the tokens the method sampled and the tokens the baseline engine sampled must come
from one distribution. The statistic is the sum over (prompt, position) of the chi-square homogeneity
statistic of the two token counts; its null distribution is taken by permutation (the engine labels
shuffled within a prompt, each sample kept whole), so no asymptotic approximation is needed for the
rare tokens of a short sample. `differ(...)` returns the p-value and where the counts part most.

A sample is a tuple of token ids (the first positions of one output). No vLLM in here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PERMUTATIONS = 3999  # resolution 1/4000 of the p-value: enough for levels down to 0.001


@dataclass(frozen=True)
class TwoSample:
    statistic: float
    p_value: float
    permutations: int
    samples: tuple[int, int]  # samples of the method, of the baseline (over all prompts)
    worst: str = ""  # the (prompt, position) whose counts part most, with its most moved token

    def rejects(self, level: float) -> bool:
        return self.p_value < level


def _chi2(counts_a, totals, n_a, n_b):
    """The chi-square homogeneity statistic of two groups' token counts, from group a's counts and the
    totals (fixed under permutation); n_a, n_b: the groups' sizes, numbers or one per row of counts_a."""
    import numpy as np

    n_a, n_b = np.asarray(n_a, dtype=float), np.asarray(n_b, dtype=float)
    n = n_a + n_b
    expected = np.multiply.outer(n_a / n, totals) if n_a.ndim else totals * (n_a / n)
    scale = n * n / np.maximum(n_a * n_b, 1.0)
    weight = np.where(totals > 0, 1.0 / np.maximum(totals, 1.0), 0.0)
    return (((counts_a - expected) ** 2) * weight).sum(axis=-1) * scale


def differ(
    method: Mapping[str, Sequence[Sequence[int]]],
    baseline: Mapping[str, Sequence[Sequence[int]]],
    positions: int,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
) -> TwoSample:
    """The permutation test over every prompt both engines sampled (prompt -> samples, each a token
    tuple; a sample shorter than `positions` contributes the positions it has)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    observed, null = 0.0, np.zeros(permutations)
    worst, worst_stat, total_a, total_b = "", -1.0, 0, 0
    for prompt in sorted(set(method) & set(baseline)):
        a, b = list(method[prompt]), list(baseline[prompt])
        n_a, n_b = len(a), len(b)
        if not n_a or not n_b:
            continue
        total_a, total_b = total_a + n_a, total_b + n_b
        samples = a + b
        # which n_a of the samples each permutation calls "the method's"
        picked = np.argsort(rng.random((permutations, n_a + n_b)), axis=1)[:, :n_a]
        labels = np.zeros((permutations, n_a + n_b), dtype=np.float32)
        np.put_along_axis(labels, picked, 1.0, axis=1)
        for pos in range(positions):
            present = [i for i, s in enumerate(samples) if len(s) > pos]
            if not present:
                continue
            tokens = sorted({samples[i][pos] for i in present})
            index = {t: c for c, t in enumerate(tokens)}
            onehot = np.zeros((n_a + n_b, len(tokens)), dtype=np.float32)
            for i in present:
                onehot[i, index[samples[i][pos]]] = 1.0
            totals = onehot.sum(axis=0)
            here_a = int(sum(1 for i in present if i < n_a))
            here_b = len(present) - here_a
            if not here_a or not here_b or len(tokens) < 2:
                continue
            counts = onehot[:n_a].sum(axis=0)
            stat = float(_chi2(counts, totals, here_a, here_b))
            observed += stat
            perm_counts = labels @ onehot
            perm_here = labels[:, present].sum(axis=1)
            # samples shorter than pos + 1 are not in `present`: a permutation's group sizes at this
            # position vary, and the statistic is taken with each permutation's own sizes
            null += _chi2(perm_counts, totals, perm_here, len(present) - perm_here)
            if stat > worst_stat:
                share_a, share_b = counts / here_a, (totals - counts) / here_b
                moved = int(np.argmax(np.abs(share_a - share_b)))
                worst_stat = stat
                worst = (
                    f"prompt {prompt}, token {pos}: token {tokens[moved]} drawn in {share_a[moved]:.1%} of the "
                    f"method's samples and {share_b[moved]:.1%} of the baseline's ({here_a} and {here_b} samples)"
                )
    p = (1 + int((null >= observed - 1e-9).sum())) / (1 + permutations) if total_a and total_b else 1.0
    return TwoSample(observed, p, permutations, (total_a, total_b), worst)
