"""What this machine is: its CPU's features."""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


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
    from specgate.baselines import cpu_name

    return f"this CPU ({cpu_name()}) has none of the flags {', '.join(wanted)} in {cpuinfo}"
