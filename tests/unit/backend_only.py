"""An engine with exactly specgate.backend.Backend's members and nothing else public, each handed to a scripted
FakeEngine (test_backend.py runs every gate and scenario of cpu-tiny on it: a member the gate needs that the
protocol leaves out fails there as the AttributeError a user's engine would meet)."""

from __future__ import annotations


class BackendOnly:
    """specgate.backend.Backend, member for member, over `_fake` (a specgate.testing.FakeEngine)."""

    def __init__(self, fake):
        self._fake = fake

    @property
    def alive(self) -> bool:
        return self._fake.alive

    @property
    def boot_s(self) -> float:
        return self._fake.boot_s

    @property
    def runner(self) -> str:
        return self._fake.runner

    @property
    def last_traces(self):
        return self._fake.last_traces

    @property
    def method_name(self) -> str:
        return self._fake.method_name

    @property
    def longest_idle_s(self) -> float:
        return self._fake.longest_idle_s

    def run_batch(self, prompts, max_tokens, top_logprobs=0, temperature=0.0, seed=None, schema=None):
        return self._fake.run_batch(prompts, max_tokens, top_logprobs, temperature, seed, schema)

    def run_requests(self, requests, what="the requests scenario", limit=None):
        return self._fake.run_requests(requests, what, limit)

    def closed_loop(self, prompts, concurrency, max_tokens, temperature=0.0):
        return self._fake.closed_loop(prompts, concurrency, max_tokens, temperature)

    def kv_stats(self):
        return self._fake.kv_stats()

    def reset_prefix_cache(self) -> None:
        self._fake.reset_prefix_cache()

    def kv_block_size(self):
        return self._fake.kv_block_size()

    def token_budget(self):
        return self._fake.token_budget()

    def sampling_broken(self) -> str:
        return self._fake.sampling_broken()

    def sampling_repaired(self):
        return self._fake.sampling_repaired()

    def timed_steps(self, work):
        return self._fake.timed_steps(work)

    def memory_reading(self):
        return self._fake.memory_reading()

    def shutdown(self):
        return self._fake.shutdown()
