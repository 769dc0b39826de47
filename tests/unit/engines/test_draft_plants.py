"""drafts_stop_in_large_batches on stand-ins of V1's and V2's runners (what it patches, no vLLM): it takes every
other large-batch step's drafts of each request, whatever row it sits in, and leaves small or sampling batches
alone; on V2 it tells a greedy batch by the Sampler's temperatures and says why not under async scheduling; a
method's two plants are both installed."""

from types import SimpleNamespace

import numpy as np

from specgate.engines import plants, plants_v1


def runner(batches, greedy=True):
    """take_draft_token_ids hands out one batch's drafts a call: {request id: its draft tokens}."""
    steps = iter(batches)

    def take():
        step = next(steps)
        return SimpleNamespace(req_ids=list(step), draft_token_ids=[list(d) for d in step.values()])

    return SimpleNamespace(
        take_draft_token_ids=take,
        input_batch=SimpleNamespace(all_greedy=greedy),
        rejection_sampler=SimpleNamespace(forward=None),
        _update_states=None,
    )


def drafted(r, steps):
    return [
        {req: bool(d) for req, d in zip(out.req_ids, out.draft_token_ids)}
        for out in (r.take_draft_token_ids() for _ in range(steps))
    ]


def test_each_request_loses_every_other_large_batch_steps_drafts_whatever_its_row():
    big = {f"r{i}": [7, 8] for i in range(3)}
    moved = dict(reversed(big.items()))  # the rows reordered: counted per request, not per row
    r = runner([big, moved, big, {"r0": [7], "r1": [8]}])
    assert plants_v1.PLANTS["drafts_stop_in_large_batches"](r, 3)
    first, second, third, small = drafted(r, 4)
    assert all(first.values()) and not any(second.values()) and all(third.values())
    assert all(small.values())  # a batch below `rows` keeps its drafts


def test_a_sampling_batch_keeps_its_drafts():
    r = runner([{f"r{i}": [1] for i in range(3)}] * 2, greedy=False)
    plants_v1.PLANTS["drafts_stop_in_large_batches"](r, 3)
    assert all(all(step.values()) for step in drafted(r, 2))


def test_a_methods_two_plants_are_both_installed():
    r = runner([{f"r{i}": [1] for i in range(3)}] * 2)
    take, forward = r.take_draft_token_ids, r.rejection_sampler.forward
    assert (
        plants.install(
            SimpleNamespace(model_runner=r), "accept_less_in_large_batches:3 + drafts_stop_in_large_batches:3"
        )
        is None
    )
    assert r.take_draft_token_ids is not take and r.rejection_sampler.forward is not forward


def v2_runner(batches, temperatures, async_scheduling=False):
    """V2's parts the plant reads: take_draft_token_ids, the Sampler's temperatures by request index."""
    r = runner(batches)
    del r.input_batch, r._update_states
    ids = sorted({req for step in batches for req in step})
    r.add_requests = lambda *_: None
    r.req_states = SimpleNamespace(req_id_to_index={req: i for i, req in enumerate(ids)})
    r.sampler = SimpleNamespace(sampling_states=SimpleNamespace(temperature=SimpleNamespace(np=np.array(temperatures))))
    r.vllm_config = SimpleNamespace(scheduler_config=SimpleNamespace(async_scheduling=async_scheduling))
    return r


def test_on_v2_a_greedy_batch_loses_every_other_steps_drafts_and_a_sampled_one_keeps_them():
    big = {f"r{i}": [7, 8] for i in range(3)}
    r = v2_runner([big] * 3, [0.0, 0.0, 0.0])
    assert plants.install(SimpleNamespace(model_runner=r), "drafts_stop_in_large_batches:3") is None
    first, second, third = drafted(r, 3)
    assert all(first.values()) and not any(second.values()) and all(third.values())
    r = v2_runner([big] * 2, [0.0, 1.0, 0.0])
    assert plants.install(SimpleNamespace(model_runner=r), "drafts_stop_in_large_batches:3") is None
    assert all(all(step.values()) for step in drafted(r, 2))


def test_on_v2_with_async_scheduling_it_says_why_it_cannot_be_planted():
    r = v2_runner([{"r0": [1]}], [0.0], async_scheduling=True)
    why = plants.install(SimpleNamespace(model_runner=r), "drafts_stop_in_large_batches:3")
    assert why and "Model Runner V2" in why and "async_scheduling = false" in why, why
