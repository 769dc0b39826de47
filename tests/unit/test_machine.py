"""What the machine offers: a profile that needs native bf16 skips on a CPU without it, saying which flags."""

from specgate import machine

INTEL = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n"
AMD = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu avx2 fma\n"


def test_a_cpu_with_one_of_the_flags_is_enough(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(INTEL)
    assert {"avx512_bf16", "amx_bf16"} <= machine.cpu_flags(info)
    assert machine.missing_cpu_flags(("avx512_bf16", "amx_bf16"), info) is None
    assert machine.missing_cpu_flags((), info) is None


def test_a_cpu_without_them_is_named_with_the_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(AMD)
    why = machine.missing_cpu_flags(("avx512_bf16", "amx_bf16"), info)
    assert why.endswith(f"has none of the flags avx512_bf16, amx_bf16 in {info}")
    assert machine.cpu_flags(tmp_path / "absent") == frozenset()
