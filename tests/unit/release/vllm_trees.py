"""Small synthetic vLLM source trees for the release-day tests: an "old" release shaped like 0.33 (both
model runners, a dispatch in init_speculator, suffix through arctic-inference) and a "new" one shaped
like 0.34 (V2 only, a speculator registry, a refused environment value), each file a few lines in
vLLM's own spelling. `write(root, release, files, changes)` lets a test change one file of either."""

from __future__ import annotations

import textwrap
from pathlib import Path

OLD = {
    "vllm/__init__.py": "",
    "vllm/config/speculative.py": '''
        from typing import Literal
        MTPModelTypes = Literal["deepseek_mtp", "mtp"]
        EagleModelTypes = Literal["eagle", "eagle3", MTPModelTypes]
        SpeculativeMethod = Literal["ngram", "draft_model", "suffix", "custom_class", EagleModelTypes]
        RejectionSampleMethod = Literal["standard", "block"]

        class SpeculativeConfig:
            num_speculative_tokens: int | None = None
            """The number of speculative tokens."""
            method: SpeculativeMethod | None = None
            disable_padded_drafter_batch: bool = False
            """Disable input padding."""
            parallel_drafting: bool = False
            """Enable parallel drafting."""
            prompt_lookup_max: int | None = Field(default=None, ge=1)
            suffix_decoding_max_spec_factor: float = 1.0
            """The maximum spec factor for suffix decoding."""
            custom: str | None = field(default=None, init=False)

            def use_eagle(self) -> bool:
                return self.method in ("eagle", "eagle3", "mtp")

            def use_ngram(self) -> bool:
                return self.method == "ngram"

            def _validate_suffix_decoding(self):
                if not has_arctic_inference():
                    raise ImportError("Arctic Inference is required for suffix decoding.")
    ''',
    "vllm/config/cache.py": '''
        class CacheConfig:
            DEFAULT_BLOCK_SIZE: ClassVar[int] = 16
            gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)
            """The fraction of GPU memory to use."""
            num_gpu_blocks_override: int | None = None
    ''',
    "vllm/engine/arg_utils.py": """
        _OLD_FLAG_DEPRECATION_MESSAGE = "--old-flag is deprecated and will be removed."

        class EngineArgs:
            model: str = "facebook/opt-125m"
            gpu_memory_utilization: float = CacheConfig.gpu_memory_utilization
            num_gpu_blocks_override: int | None = CacheConfig.num_gpu_blocks_override
            max_num_seqs: int | None = None
            swap_space: float = 4
    """,
    "vllm/config/vllm.py": """
        class VllmConfig:
            @property
            def use_v2_model_runner(self) -> bool:
                if envs.VLLM_USE_V2_MODEL_RUNNER is not None:
                    return envs.VLLM_USE_V2_MODEL_RUNNER
                return True

            def _get_v2_model_runner_unsupported_features(self) -> list[str]:
                unsupported: list[str] = []
                if self.speculative_config is not None:
                    if self.speculative_config.method in ("suffix", "custom_class"):
                        unsupported.append(f"speculative method '{self.speculative_config.method}'")
                return unsupported
    """,
    "vllm/v1/worker/gpu_model_runner.py": "class GPUModelRunner:\n    def _model_forward(self, x): ...\n",
    "vllm/v1/worker/gpu/model_runner.py": "class GPUModelRunner:\n    pass\n",
    "vllm/v1/worker/cpu_worker.py": "from vllm.v1.worker.cpu_model_runner import CPUModelRunner\n",
    "vllm/platforms/cpu.py": """
        class CpuPlatform:
            def check(self):
                if not HAS_TRITON:
                    logger.warning("Triton is not installed.")
    """,
    "vllm/platforms/interface.py": "class Platform:\n    pass\n",
    "vllm/envs.py": """
        environment_variables = {
            "VLLM_USE_V2_MODEL_RUNNER": lambda: None,
            "VLLM_CPU_KVCACHE_SPACE": lambda: 0,
            "VLLM_OLD_KNOB": lambda: 0,
        }
    """,
    "vllm/v1/spec_decode/metrics.py": """
        class SpecDecodingProm:
            def __init__(self):
                self.drafts = Counter(name="vllm:spec_decode_num_drafts")
                self.tokens = Counter(name="vllm:spec_decode_num_draft_tokens")
                self.accepted = Counter(name="vllm:spec_decode_num_accepted_tokens")
    """,
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py": """
        def rejection_sample(
            target_logits: torch.Tensor, draft_logits: torch.Tensor | None, seed: torch.Tensor, use_fp64: bool = False
        ):
            pass

        def _resample_kernel(output_ptr, draft_logits_ptr, BLOCK: tl.constexpr):
            pass
    """,
    "vllm/v1/sample/rejection_sampler.py": "def rejection_sample(a, b):\n    pass\n",
    "vllm/v1/worker/gpu/spec_decode/__init__.py": """
        def init_speculator(vllm_config, device, req_states):
            speculative_config = vllm_config.speculative_config
            assert speculative_config is not None
            if speculative_config.method == "dflash":
                if "Big" in speculative_config.draft_model_config.architectures:
                    return BigDFlashSpeculator(vllm_config, device)
                return DFlashSpeculator(vllm_config, device)
            elif speculative_config.use_eagle():
                return EagleSpeculator(vllm_config, device)
            elif speculative_config.method == "draft_model":
                return StandaloneARSpeculator(vllm_config, device)
            elif speculative_config.use_ngram():
                return NgramGPUSpeculator(vllm_config, device, req_states)
            else:
                raise NotImplementedError(f"{speculative_config.method} is not supported yet.")
    """,
}

NEW = {
    **{
        k: v
        for k, v in OLD.items()
        if k not in ("vllm/v1/worker/gpu_model_runner.py", "vllm/v1/sample/rejection_sampler.py")
    },
    "vllm/config/speculative.py": '''
        from typing import Literal
        MTPModelTypes = Literal["deepseek_mtp", "mtp"]
        EagleModelTypes = Literal["eagle", "eagle3", MTPModelTypes]
        SpeculativeMethod = Literal["ngram", "draft_model", "suffix", "dspark", EagleModelTypes]
        RejectionSampleMethod = Literal["standard", "block", "fly"]

        class SpeculativeConfig:
            num_speculative_tokens: int | None = None
            """The number of speculative tokens."""
            method: SpeculativeMethod | str | None = None
            parallel_drafting: bool | None = None
            """Deprecated and has no effect. Nothing drafts in parallel any more."""
            prompt_lookup_max: int | None = Field(default=None, ge=1)
            suffix_decoding_max_spec_factor: float = 1.0
            """The maximum spec factor for suffix decoding."""
            suffix_decoding_corpus_tokens: int = 1 << 20
            """Token capacity of the corpus."""

            def __post_init__(self):
                if self.suffix_decoding_max_spec_factor != 1.0:
                    logger.warning("suffix_decoding_max_spec_factor is deprecated and has no effect.")
    ''',
    "vllm/config/cache.py": '''
        class CacheConfig:
            DEFAULT_BLOCK_SIZE: ClassVar[int] = 64
            gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
            """The fraction of GPU memory to use. If unspecified, 0.92."""
            num_gpu_blocks_override: int | None = None
    ''',
    "vllm/engine/arg_utils.py": """
        _SWAP_SPACE_DEPRECATION_MESSAGE = "--swap-space is deprecated and has no effect."

        class EngineArgs:
            model: str = "facebook/opt-125m"
            gpu_memory_utilization: float | None = CacheConfig.gpu_memory_utilization
            num_gpu_blocks_override: int | None = CacheConfig.num_gpu_blocks_override
            swap_space: float = 4
    """,
    "vllm/config/vllm.py": """
        class VllmConfig:
            def _get_model_runner_unsupported_features(self) -> list[str]:
                unsupported: list[str] = []
                if self.parallel_config.pipeline_parallel_size > 1:
                    unsupported.append("pipeline parallelism with external_launcher")
                return unsupported
    """,
    "vllm/v1/worker/cpu_worker.py": "from vllm.v1.worker.cpu.model_runner import CPUModelRunner\n",
    "vllm/platforms/cpu.py": """
        class CpuPlatform:
            def check(self):
                if not HAS_TRITON:
                    raise RuntimeError("vLLM on x86 CPUs requires Triton (triton-cpu).")
    """,
    "vllm/platforms/interface.py": """
        class Platform:
            def check_env(self):
                for env, value in os.environ.items():
                    if env == "VLLM_USE_V2_MODEL_RUNNER":
                        if value != "1":
                            raise ValueError(f"VLLM_USE_V2_MODEL_RUNNER={value} is no longer supported.")
    """,
    "vllm/envs.py": """
        removed_environment_variables = {"VLLM_OLD_KNOB": "Use --new-knob instead."}
        environment_variables = {
            "VLLM_CPU_KVCACHE_SPACE": lambda: 0,
        }
    """,
    "vllm/v1/spec_decode/metrics.py": """
        class SpecDecodingProm:
            def __init__(self):
                self.drafts = Counter(name="vllm:spec_decode_num_drafts")
                self.tokens = Counter(name="vllm:spec_decode_num_draft_tokens")
                self.accepted = Counter(name="vllm:spec_decode_accepted_tokens")
    """,
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py": """
        from vllm.v1.worker.gpu.spec_decode.draft_logits import DraftLogitsCache

        def rejection_sample(
            target_logits: torch.Tensor,
            draft_logits_cache: DraftLogitsCache | None,
            seed: torch.Tensor,
            use_fp64: bool = False,
            skip: bool = False,
        ):
            pass

        def _resample_kernel(output_ptr, draft_logits_ptr, row_mapping_ptr, BLOCK: tl.constexpr):
            pass
    """,
    "vllm/v1/worker/gpu/spec_decode/__init__.py": "def init_speculator(vllm_config, device, req_states):\n    pass\n",
    "vllm/v1/worker/gpu/spec_decode/speculator_config.py": """
        _PKG = "vllm.v1.worker.gpu.spec_decode"

        class SpeculatorConfig:
            base_method = None
            speculator_class = None

        _CONFIG_BY_METHOD = {
            "draft_model": _builtin("standalone_ar.config", "StandaloneARSpeculatorConfig"),
            "ngram": _builtin("ngram.config", "NgramSpeculatorConfig"),
            "suffix": _builtin("suffix.config", "SuffixSpeculatorConfig"),
            "eagle": _builtin("eagle.config", "EagleSpeculatorConfig"),
            "eagle3": _builtin("eagle.config", "EagleSpeculatorConfig"),
            "mtp": _builtin("eagle.config", "EagleSpeculatorConfig"),
            "dflash": _builtin("dflash.config", "DFlashSpeculatorConfig"),
            "dspark": _builtin("dflash.config", "DSparkSpeculatorConfig"),
        }
    """,
    "vllm/v1/worker/gpu/spec_decode/configs.py": """
        class StandaloneARSpeculatorConfig(SpeculatorConfig):
            base_method = "draft_model"
            speculator_class = "vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator.StandaloneARSpeculator"

        class NgramSpeculatorConfig(SpeculatorConfig):
            base_method = "ngram"
            speculator_class = "vllm.v1.worker.gpu.spec_decode.ngram.speculator.NgramGPUSpeculator"

        class SuffixSpeculatorConfig(SpeculatorConfig):
            base_method = "suffix"
            speculator_class = "vllm.v1.worker.gpu.spec_decode.suffix.speculator.SuffixSpeculator"

        class EagleSpeculatorConfig(SpeculatorConfig):
            base_method = "eagle"
            speculator_class = "vllm.v1.worker.gpu.spec_decode.eagle.speculator.EagleSpeculator"

        class DFlashSpeculatorConfig(SpeculatorConfig):
            base_method = "dflash"
            speculator_class = "vllm.v1.worker.gpu.spec_decode.dflash.speculator.DFlashSpeculator"

        class BigDFlashSpeculatorConfig(DFlashSpeculatorConfig):
            speculator_class = "vllm.v1.worker.gpu.spec_decode.big.speculator.BigDFlashSpeculator"

        class DSparkSpeculatorConfig(DFlashSpeculatorConfig):
            base_method = "dspark"
            speculator_class = "vllm.v1.worker.gpu.spec_decode.dspark.speculator.DSparkSpeculator"
    """,
}


def write(root: Path, release: str, files: dict[str, str] | None = None, changes: dict | None = None) -> Path:
    """An unpacked tree of `release` at root/release: `files` (default OLD), with `changes` (path -> text)
    replacing a file, or deleting it (None)."""
    tree = root / release
    content = dict(files if files is not None else OLD)
    for path, text in (changes or {}).items():
        if text is None:
            content.pop(path, None)
        else:
            content[path] = text
    for rel, text in content.items():
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    (tree / f"vllm-{release}.dist-info").mkdir(parents=True, exist_ok=True)
    (tree / f"vllm-{release}.dist-info" / "METADATA").write_text(f"Name: vllm\nVersion: {release}\n")
    return tree


def pair(root: Path) -> tuple[Path, Path]:
    """The old (0.33.0-shaped, as 1.0.0) and new (0.34.0-shaped, as 1.1.0) trees."""
    return write(root, "1.0.0"), write(root, "1.1.0", NEW)


def index(tmp_path: Path, *versions: str) -> str:
    """A local package index (a file:// URL) that lists these vllm versions, for pip without PyPI."""
    (tmp_path / "simple" / "vllm").mkdir(parents=True)
    links = "".join(f'<a href="vllm-{v}-py3-none-any.whl">vllm-{v}-py3-none-any.whl</a>' for v in versions)
    (tmp_path / "simple" / "vllm" / "index.html").write_text(f"<html><body>{links}</body></html>")
    return (tmp_path / "simple").as_uri()


def supported(*versions: str) -> tuple:
    """A table of supported CUDA releases (for monkeypatching specgate.vllm_compat.releases.RELEASES)."""
    from specgate.vllm_compat.releases import CUDA, Release

    return tuple(Release(v, CUDA) for v in versions)
