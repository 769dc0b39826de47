"""A machine is what measured it: its identity beyond the marketing name, from the CPU's and the GPUs' own words.

cpuinfo-amd-epyc-family25.txt is /proc/cpuinfo of the 2-core instance this was written on (2026-12-07): "AMD
EPYC", family 25 model 17 (Zen 4). The reporter's machine of issue 74 had the same name, family 26 model 2.
No GPU was at hand: the nvidia-smi lines are in the shape `--format=csv,noheader,nounits` prints them, with an
H100 SXM's figures (81559 MiB as its driver reports the 80 GB, 1980 / 2619 MHz, 700 W) and a runner of the
same card capped at 500 W.
"""

from pathlib import Path

from specgate.machine import GPU_QUERY
from specgate.machine.identity import Identity, cpu_identity, gpu_identity

ZEN4 = (Path(__file__).parents[1] / "data" / "cpuinfo-amd-epyc-family25.txt").read_text()
ZEN5 = ZEN4.replace("cpu family\t: 25", "cpu family\t: 26").replace("model\t\t: 17", "model\t\t: 2")
SAPPHIRE = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8480+\nstepping\t: 8\ncache size\t: 107520 KB\n"
    "flags\t\t: fpu sse4_2 avx avx2 fma f16c avx512f avx512_bf16 amx_bf16 amx_tile amx_int8 smep\n"
)
H100 = "NVIDIA H100 80GB HBM3, 81559, 1980, 2619, 700.00\n"
H100_CAPPED = "NVIDIA H100 80GB HBM3, 81559, 1980, 2619, 500.00\n"


def caches(tmp_path, l2="1024K"):
    """A /sys/devices/system/cpu/cpu0/cache directory as Linux writes it."""
    for i, (level, kind, size) in enumerate(
        [("1", "Data", "32K"), ("1", "Instruction", "32K"), ("2", "Unified", l2), ("3", "Unified", "32768K")]
    ):
        d = tmp_path / l2 / f"index{i}"
        d.mkdir(parents=True)
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (d / name).write_text(text + "\n")
    return tmp_path / l2


def test_a_cpus_identity_holds_vendor_family_model_stepping_kernel_flags_caches_and_cores(tmp_path):
    facts = cpu_identity(ZEN4, caches(tmp_path)).to_json()
    assert {k: facts[k] for k in ("kind", "vendor", "name", "family", "model", "stepping", "cores")} == {
        "kind": "cpu",
        "vendor": "AuthenticAMD",
        "name": "AMD EPYC",
        "family": 25,
        "model": 17,
        "stepping": 1,
        "cores": 2,
    }
    assert facts["caches"] == {"L1d": "32K", "L1i": "32K", "L2": "1024K", "L3": "32768K"}
    assert {"avx2", "avx512f", "avx512_bf16", "fma", "f16c"} <= set(facts["flags"])
    assert not {"smep", "smap", "sse4_2", "hypervisor"} & set(facts["flags"])  # flags that pick no kernel
    assert len(facts["id"]) == 8 and Identity.from_json(facts) == cpu_identity(ZEN4, caches(tmp_path / "again"))


def test_one_name_two_generations_are_two_identities_and_the_line_says_how_they_differ(tmp_path):
    here, there = cpu_identity(ZEN4, caches(tmp_path)), cpu_identity(ZEN5, caches(tmp_path / "b"))
    assert here != there and here.facts["name"] == there.facts["name"] == "AMD EPYC"
    assert there.describe() == (
        "AMD EPYC (AuthenticAMD family 26 model 2 stepping 1, Zen 5; AVX-512 bf16; L2 1 MiB, L3 32 MiB; 2 cores)"
    )
    assert here.against(there) == "AuthenticAMD family 25 model 17 stepping 1, Zen 4"
    bigger = cpu_identity(ZEN4, caches(tmp_path / "c", l2="2048K"))
    assert bigger != here and bigger.against(here) == "L2 2 MiB, L3 32 MiB"
    assert cpu_identity(ZEN4, caches(tmp_path / "d"), cores=4).against(here) == "4 cores"
    masked = cpu_identity(ZEN4.replace(" avx512_vnni", ""), caches(tmp_path / "e"))
    assert masked != here and masked.against(here) == "flags -avx512_vnni"  # a hypervisor that hides one


def test_intel_with_amx_and_a_cpuinfo_without_sysfs_caches(tmp_path):
    intel = cpu_identity(SAPPHIRE, tmp_path / "none")
    assert intel.describe() == (
        "Intel(R) Xeon(R) Platinum 8480+ (GenuineIntel family 6 model 143 stepping 8, Sapphire Rapids; "
        "AMX, AVX-512 bf16; cache 105 MiB; 1 core)"
    )
    assert {"amx_bf16", "amx_tile", "amx_int8"} <= set(intel.facts["flags"])


def test_gpus_of_one_name_at_another_power_limit_are_another_machine():
    assert GPU_QUERY == ("name", "memory.total", "clocks.max.sm", "clocks.max.memory", "power.limit")
    full, capped = gpu_identity(H100, [132]), gpu_identity(H100_CAPPED, [132])
    assert full.facts["gpus"] == [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "memory_mib": 81559,
            "max_sm_clock_mhz": 1980,
            "max_memory_clock_mhz": 2619,
            "power_limit_w": 700.0,
            "sm_count": 132,
        }
    ]
    assert full != capped and capped.against(full) == (
        "NVIDIA H100 80GB HBM3 (81559 MiB, 132 SMs, max 1980 / 2619 MHz, 500 W)"
    )
    assert gpu_identity(H100 * 2, [132, 132]).against(full).endswith("2 GPUs")  # two cards are another machine
    unknown = gpu_identity("NVIDIA H100 80GB HBM3, 81559, [N/A], [N/A], [Not Supported]\n")
    assert unknown.describe() == "NVIDIA H100 80GB HBM3 (81559 MiB)" and unknown != full


def test_a_stored_identity_reads_back_as_the_same_machine_and_none_reads_as_none(tmp_path):
    here = cpu_identity(ZEN4, caches(tmp_path))
    assert Identity.from_json(here.to_json()) == here and Identity.from_json(here.to_json()).id == here.id
    assert Identity.from_json(None) is None and Identity.from_json({}) is None


def test_the_gpus_identity_asks_nvidia_smi_for_the_visible_devices_and_falls_back_to_torch(tmp_path, monkeypatch):
    import sys
    from types import SimpleNamespace

    from specgate import machine

    asked = tmp_path / "asked"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" > {asked}\nprintf "{H100_CAPPED.strip()}\\n"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=81559 * 2**20, multi_processor_count=132)
    cuda = SimpleNamespace(is_available=lambda: True, device_count=lambda: 1, get_device_properties=lambda i: props)
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    capped = machine.identity_of("NVIDIA H100 80GB HBM3", 1)
    query = [f"--query-gpu={','.join(GPU_QUERY)}", "--format=csv,noheader,nounits"]
    assert asked.read_text().split() == [*query, "-i", "3"]  # the visible device alone
    assert capped == gpu_identity(H100_CAPPED, [132])
    smi.write_text("#!/bin/sh\nexit 9\n")  # a driver that does not answer: what torch knows
    assert machine.identity_of("NVIDIA H100 80GB HBM3", 1).facts["gpus"] == [
        {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "sm_count": 132}
    ]
