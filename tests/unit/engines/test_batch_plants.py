"""The large-batch plants on a stand-in of V1's runner (what they patch, no vLLM): drafts_stop_in_large_batches
takes every other large-batch step's drafts of each request, whatever row it sits in, and leaves small or
sampling batches alone; a method's two plants are both installed."""

from types import SimpleNamespace

from specgate.engines import batch_plants, plants


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
    assert batch_plants.drafts_stop_in_large_batches(r, 3)
    first, second, third, small = drafted(r, 4)
    assert all(first.values()) and not any(second.values()) and all(third.values())
    assert all(small.values())  # a batch below `rows` keeps its drafts


def test_a_sampling_batch_keeps_its_drafts():
    r = runner([{f"r{i}": [1] for i in range(3)}] * 2, greedy=False)
    batch_plants.drafts_stop_in_large_batches(r, 3)
    assert all(all(step.values()) for step in drafted(r, 2))


def test_a_methods_two_plants_are_both_installed():
    r = runner([{f"r{i}": [1] for i in range(3)}] * 2)
    take, forward = r.take_draft_token_ids, r.rejection_sampler.forward
    assert plants.install(
        SimpleNamespace(model_runner=r), "accept_less_in_large_batches:3 + drafts_stop_in_large_batches:3"
    )
    assert r.take_draft_token_ids is not take and r.rejection_sampler.forward is not forward
