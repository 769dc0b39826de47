"""vLLM's layer types by which the drafter's weights are counted once per tensor-parallel shard."""

from __future__ import annotations

from specgate.vllm_compat.internals.base import Internal

LAYERS = (
    # The drafter's weights are counted once per distinct tensor-parallel shard (parameter_shard): by
    # vLLM's own layer types, whose weight loaders narrow a checkpoint tensor along the parameter's
    # output_dim / input_dim at the layer's tp_rank (tests/contract checks those loaders).
    Internal("vllm.model_executor.layers.linear:ReplicatedLinear", "a linear layer whole on every rank (EAGLE-3's fc)"),
    Internal(
        "vllm.model_executor.layers.linear:ColumnParallelLinear", "split over ranks along output_dim (QKV, gate/up)"
    ),
    Internal(
        "vllm.model_executor.layers.linear:RowParallelLinear",
        "split over ranks along input_dim (o_proj, down); its bias whole",
    ),
    Internal(
        "vllm.model_executor.layers.vocab_parallel_embedding:VocabParallelEmbedding",
        "split over ranks by vocabulary rows (embedding, ParallelLMHead)",
    ),
)
