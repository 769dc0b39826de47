"""specgate.sampler.v2's harness, without vLLM: a batch cut over two workers reads every worker's reply,
also when one of them errs, so that no reply is left for the next batch to take as its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specgate.sampler import v2 as rejection_v2
from specgate.sampler.reference import SpecRequest


class FakeWorker:
    """Answers each command in order, as a v2_child process does: a part's rows filled with the batch seed
    it was sent, or an error for a seed listed in `fails`."""

    def __init__(self, fails=()):
        self.replies: list = []
        self.fails = set(fails)

    def send(self, command, args):
        requests, seed = args[0], args[1]
        if seed in self.fails:
            self.replies.append(("error", f"Traceback ...\nValueError: batch seed {seed}"))
        else:
            self.replies.append(("ok", np.full((len(requests), 2), seed, dtype=np.int64)))

    def receive(self):
        status, value = self.replies.pop(0)
        if status != "ok":
            raise RuntimeError(f"V2 sampler worker (fake): {value}")
        return value


def batch(n: int) -> list[SpecRequest]:
    logits = np.zeros((2, 4), dtype=np.float32)
    return [SpecRequest((1,), logits, None, 0.0, None) for _ in range(n)]


def test_a_worker_that_errs_leaves_no_reply_of_the_others_unread(monkeypatch):
    pool = [FakeWorker(fails={0}), FakeWorker()]  # worker 0 fails the first batch (seed 0: parts 0 and 1)
    monkeypatch.setattr(rejection_v2, "workers", lambda source, count=1: pool[:count])
    sampler = rejection_v2.V2Sampler(Path("/nowhere"))
    with pytest.raises(RuntimeError, match="batch seed 0"):
        sampler(batch(rejection_v2.SPLIT_FROM), seed=0)
    rows = sampler(batch(rejection_v2.SPLIT_FROM), seed=5)
    # seed 5: parts seeded 10 and 11; a stale reply of the failed batch (seed 1, worker 1) would show as 1
    assert set(rows[: rejection_v2.SPLIT_FROM // 2, 0]) == {10} and set(rows[rejection_v2.SPLIT_FROM // 2 :, 0]) == {11}
    assert not any(w.replies for w in pool), "a reply was left unread"
