"""Fake vLLM workers for the drafter's weights over tensor-parallel ranks (tests/unit/figures/test_memory.py).
Imports torch: only tests marked needs_vllm import this module."""

import torch


# Stand-ins for vLLM's layers, by the class names vllm_compat.parameter_shard reads: each holds this
# rank's part of its parameters, tagged as vLLM's own are (output_dim / input_dim).
class _Layer(torch.nn.Module):
    def __init__(self, rank: int, tp: int, **params):
        super().__init__()
        self.tp_rank, self.tp_size = rank, tp
        for name, (shape, dims) in params.items():
            p = torch.nn.Parameter(torch.full(shape, float(rank + 1)), requires_grad=False)
            for dim, axis in dims.items():
                setattr(p, dim, axis)
            self.register_parameter(name, p)


class ReplicatedLinear(_Layer): ...


class ColumnParallelLinear(_Layer): ...


class QKVParallelLinear(ColumnParallelLinear): ...


class RowParallelLinear(_Layer): ...


class VocabParallelEmbedding(_Layer): ...


class FusedMoE(_Layer): ...


class RMSNorm(torch.nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(size), requires_grad=False)


WEIGHT = {"output_dim": 0, "input_dim": 1}


def _eagle3_rank(rank: int, tp: int, embed: torch.nn.Module, **extra) -> torch.nn.Module:
    """One rank's EAGLE-3 head at hidden size 8: fc whole on every rank, attention and MLP split, the
    target's embedding taken over by identity (vLLM's _maybe_share_embeddings)."""
    head = torch.nn.Module()
    head.fc = ReplicatedLinear(rank, tp, weight=((8, 24), WEIGHT))  # tp_size is the world's, as in vLLM
    head.qkv_proj = QKVParallelLinear(rank, tp, weight=((16 // tp, 8), WEIGHT))
    head.o_proj = RowParallelLinear(rank, tp, weight=((8, 8 // tp), WEIGHT), bias=((8,), {"output_dim": 0}))
    head.norm = RMSNorm(8)
    head.embed_tokens = embed
    for name, module in extra.items():
        setattr(head, name, module)
    return head


def _workers(tp: int, **extra) -> list:
    """TP ranks' workers as vLLM's V1 runner shows them to in_vllm_worker.drafter_shards."""
    from types import SimpleNamespace

    out = []
    for rank in range(tp):
        target = torch.nn.Module()
        target.embed_tokens = VocabParallelEmbedding(rank, tp, weight=((32 // tp, 8), WEIGHT))
        drafter = _eagle3_rank(rank, tp, target.embed_tokens, **{k: v(rank) for k, v in extra.items()})
        runner = SimpleNamespace(drafter=SimpleNamespace(model=drafter), model=target, propose_draft_token_ids=None)
        out.append(SimpleNamespace(model_runner=runner))
    return out


def _reading(monkeypatch, workers):
    from specgate.engines import engine as engine_module
    from specgate.engines import in_vllm_worker
    from specgate.engines.engine import Engine

    eng = object.__new__(Engine)
    eng.children_before_boot, eng.client = set(), None
    monkeypatch.setattr(engine_module.procs, "children", set)
    monkeypatch.setattr(engine_module, "device_bytes", lambda pids: (None, "process"))
    monkeypatch.setattr(engine_module.compat, "kv_capacity_tokens", lambda client: 1000)
    monkeypatch.setattr(Engine, "collective_rpc", lambda self, fn: [fn(w) if w else None for w in workers])
    assert in_vllm_worker.drafter_shards  # what memory_reading sends
    return eng.memory_reading()
