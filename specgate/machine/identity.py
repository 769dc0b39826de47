"""What measured a figure, beyond its marketing name: a machine's identity.

A CPU's name says little: "AMD EPYC" is Zen 3, Zen 4 and Zen 5 (cpu-tiny's baseline engine ran 179 tok/s
on one and 242 on another, and a drafting call's share of a step moved by a third). Cloud GPUs share
names across power limits and clocks. Speed figures carry the identity of the machine that measured
them, and a run judges them as its own only on a machine of the same identity.

    CPU   vendor, family / model / stepping, the name, the flags that pick kernels (avx*, amx*, fma,
          f16c; sve*, sme*, asimd, bf16, i8mm on Arm), the cache sizes, the cores
    GPU   per device: name, memory, SM count, maximum SM and memory clocks, power limit (nvidia-smi;
          the SM count from torch where this process already has CUDA)

    cpu_identity(cpuinfo, caches, cores)   read from /proc/cpuinfo and /sys/devices/system/cpu/cpu0/cache
    gpu_identity(smi_csv, sm_counts)       from `nvidia-smi --query-gpu=<GPU_QUERY> --format=csv,noheader,nounits`
    Identity.id                            8 hex digits of the facts' hash: the baseline file's suffix
    Identity.describe() / .against(other)  for a person: the whole identity, or what differs from another's
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")
CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
# The flags vLLM's CPU kernels (and oneDNN's, torch's) choose a code path by
KERNEL_FLAGS = re.compile(r"^(avx|amx|sve|asimd)|^(fma|f16c|bf16|i8mm|sme|sme2)$")
GPU_QUERY = ("name", "memory.total", "clocks.max.sm", "clocks.max.memory", "power.limit")
_GPU_FIELDS = ("name", "memory_mib", "max_sm_clock_mhz", "max_memory_clock_mhz", "power_limit_w")

# Microarchitectures by (vendor, family) and model, for the summary line only (the identity is the numbers).
# AMD: Linux's arch/x86/kernel/cpu/amd.c (init_amd_zen*); Intel: arch/x86/include/asm/intel-family.h.
_AMD = {
    23: [((0x00, 0x2F), "Zen"), ((0x50, 0x5F), "Zen"), ((0x30, 0x4F), "Zen 2"), ((0x60, 0x7F), "Zen 2")],
    25: [((0x00, 0x0F), "Zen 3"), ((0x20, 0x5F), "Zen 3"), ((0x10, 0x1F), "Zen 4"), ((0x60, 0xAF), "Zen 4")],
    26: [((0x00, 0xFF), "Zen 5")],
}
_INTEL6 = {
    63: "Haswell",
    79: "Broadwell",
    85: "Skylake / Cascade Lake",
    106: "Ice Lake",
    143: "Sapphire Rapids",
    207: "Emerald Rapids",
    173: "Granite Rapids",
}


@dataclass(frozen=True, eq=False)
class Identity:
    """One machine's identity: `facts` as stored (JSON), `id` their hash."""

    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        blob = json.dumps({k: v for k, v in self.facts.items() if k != "id"}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:8]

    def __eq__(self, other) -> bool:
        return isinstance(other, Identity) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def to_json(self) -> dict[str, Any]:
        return {**self.facts, "id": self.id}

    @classmethod
    def from_json(cls, data: Any) -> Identity | None:
        """The identity a file or a record stored; None for none (written before identities were)."""
        if not isinstance(data, dict) or not data:
            return None
        return cls({k: v for k, v in data.items() if k != "id"})

    def aspects(self) -> list[tuple[str, str]]:
        """(aspect, words) in the order a person reads them."""
        f = self.facts
        if f.get("kind") == "gpu":
            return [(f"gpu{i}", _gpu_words(g)) for i, g in enumerate(f.get("gpus", []))]
        arch = _microarchitecture(f)
        chip = " ".join(str(x) for x in (f.get("vendor"), _numbers(f)) if x)
        return [
            ("name", str(f.get("name") or "?")),
            ("chip", chip + (f", {arch}" if arch else "")),
            ("isa", _isa(f["flags"]) if "flags" in f else ""),
            ("caches", ", ".join(f"{k} {_size(v)}" for k, v in sorted(f.get("caches", {}).items()) if k[:2] >= "L2")),
            ("cores", f"{f['cores']} core{'' if f['cores'] == 1 else 's'}" if f.get("cores") else ""),
        ]

    def describe(self) -> str:
        """'AMD EPYC (AuthenticAMD family 25 model 17 stepping 1, Zen 4; AVX-512 bf16; L2 1 MiB, L3 32 MiB;
        2 cores)'."""
        parts = [w for _, w in self.aspects() if w]
        if self.facts.get("kind") == "gpu":
            return " + ".join(parts)
        return f"{parts[0]} ({'; '.join(parts[1:])})"

    def against(self, stored: Identity) -> str:
        """What this machine is where it differs from `stored` ('family 25 model 17 stepping 1, Zen 4; 1 cores'),
        the flags that differ named where the summaries agree."""
        mine, theirs = dict(self.aspects()), dict(stored.aspects())
        out = [w for k, w in mine.items() if w and theirs.get(k) != w]
        flags = set(self.facts.get("flags", [])) ^ set(stored.facts.get("flags", []))
        if flags and mine.get("isa") == theirs.get("isa"):
            ours = set(self.facts.get("flags", []))
            out.append("flags " + " ".join(("+" if f in ours else "-") + f for f in sorted(flags)))
        if len(mine) != len(theirs):
            out.append(f"{len(mine)} GPUs")
        return "; ".join(out) or "the same"


def cpu_identity(cpuinfo: Path | str = CPUINFO, caches: Path = CACHES, cores: int | None = None) -> Identity:
    """This CPU's identity: `cpuinfo` is /proc/cpuinfo (or its text), `caches` the first CPU's cache directory."""
    text = cpuinfo if isinstance(cpuinfo, str) else _read(cpuinfo)
    first: dict[str, str] = {}
    for line in text.split("\n\n")[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            first.setdefault(key.strip(), value.strip())
    flags = (first.get("flags") or first.get("Features") or "").split()
    facts = {
        "kind": "cpu",
        "vendor": first.get("vendor_id") or first.get("CPU implementer"),
        "name": first.get("model name") or first.get("Model name"),
        "family": _int(first.get("cpu family") or first.get("CPU architecture")),
        "model": _int(first.get("model") or first.get("CPU part")),
        "stepping": _int(first.get("stepping") or first.get("CPU variant")),
        "flags": sorted(f for f in set(flags) if KERNEL_FLAGS.search(f)),
        "caches": _caches(caches) or ({"cache": first["cache size"].replace(" ", "")} if "cache size" in first else {}),
        "cores": cores if cores is not None else len(re.findall(r"^processor\s*:", text, re.M)),
    }
    return Identity(facts)


def gpu_identity(smi_csv: str, sm_counts: list[int] | None = None) -> Identity:
    """The identity of the GPUs `nvidia-smi --query-gpu=<GPU_QUERY> --format=csv,noheader,nounits` lists,
    one line each; their SM counts where known."""
    gpus = []
    for i, row in enumerate(csv.reader(line for line in smi_csv.splitlines() if line.strip())):
        values = [v.strip() for v in row]
        gpu = {k: (values[0] if k == "name" else _number(v)) for k, v in zip(_GPU_FIELDS, values)}
        if sm_counts and i < len(sm_counts):
            gpu["sm_count"] = sm_counts[i]
        gpus.append(gpu)
    return Identity({"kind": "gpu", "gpus": gpus})


def torch_gpu_identity(torch) -> Identity:
    """Where nvidia-smi cannot be asked: name, memory and SMs from torch (no clocks, no power limit)."""
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        gpus.append({"name": p.name, "memory_mib": p.total_memory // 2**20, "sm_count": p.multi_processor_count})
    return Identity({"kind": "gpu", "gpus": gpus})


# -- reading --------------------------------------------------------------------------------------------
def _read(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _caches(directory: Path) -> dict[str, str]:
    """{'L1d': '32K', 'L1i': '32K', 'L2': '1024K', 'L3': '32768K'}: one instance of each level's cache."""
    out = {}
    for index in sorted(Path(directory).glob("index*")):
        level, kind, size = (_read(index / name).strip() for name in ("level", "type", "size"))
        if level and size:
            out[f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")] = size
    return out


def _int(text: str | None) -> int | None:
    try:
        return int(text, 0) if text else None
    except ValueError:
        return None


def _number(text: str) -> float | int | None:
    """'81559' -> 81559, '700.00' -> 700.0, '[N/A]' / '[Not Supported]' -> None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() and "." not in text else value


# -- saying ---------------------------------------------------------------------------------------------
def _numbers(f: dict) -> str:
    return " ".join(f"{k} {f[k]}" for k in ("family", "model", "stepping") if f.get(k) is not None)


def _microarchitecture(f: dict) -> str:
    family, model = f.get("family"), f.get("model")
    if f.get("vendor") == "AuthenticAMD" and model is not None:
        return next((name for (lo, hi), name in _AMD.get(family, []) if lo <= model <= hi), "")
    if f.get("vendor") == "GenuineIntel" and family == 6:
        return _INTEL6.get(model, "")
    return ""


def _isa(flags: list[str]) -> str:
    """The widest vector instructions: 'AMX, AVX-512 bf16', 'AVX2', 'SVE2 bf16'."""
    have = set(flags)
    parts = ["AMX"] if any(f.startswith("amx") for f in have) else []
    for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sve2", "SVE2"), ("sve", "SVE")):
        if flag in have:
            parts.append(name + (" bf16" if have & {"avx512_bf16", "bf16", "svebf16"} else ""))
            break
    else:
        if "asimd" in have:
            parts.append("NEON")
    return ", ".join(parts) or "no vector flags"


def _size(value: str) -> str:
    """'32768K' -> '32 MiB', '1024K' -> '1 MiB', '512K' -> '512 KiB'."""
    m = re.fullmatch(r"(\d+)\s*([KMG]?)B?", str(value).strip())
    if not m:
        return str(value)
    kib = int(m[1]) * {"": 1 / 1024, "K": 1, "M": 1024, "G": 1024**2}[m[2]]
    return f"{kib / 1024:g} MiB" if kib >= 1024 else f"{kib:g} KiB"


def _gpu_words(g: dict) -> str:
    """'NVIDIA H100 80GB HBM3 (81559 MiB, 132 SMs, max 1980 / 2619 MHz, 700 W)'."""
    parts = [f"{g['memory_mib']} MiB" if g.get("memory_mib") else ""]
    parts.append(f"{g['sm_count']} SMs" if g.get("sm_count") else "")
    if g.get("max_sm_clock_mhz"):
        parts.append(f"max {g['max_sm_clock_mhz']} / {g.get('max_memory_clock_mhz') or '?'} MHz")
    parts.append(f"{g['power_limit_w']:g} W" if g.get("power_limit_w") else "")
    said = ", ".join(p for p in parts if p)
    return f"{g.get('name') or '?'}" + (f" ({said})" if said else "")
