"""The sitecustomize of engines that run Model Runner V2 in Triton's interpreter (specgate.vllm_compat.interpreted)."""
