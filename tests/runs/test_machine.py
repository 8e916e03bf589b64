"""The machine a number was made on (issue 57 item 8: the demo's table depends on the CPU, so every table is named
with its machine)."""

from __future__ import annotations

import jax

from swerl_jax.runs.machine import describe, machine_info

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse4_2 avx avx2 fma

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
"""


def test_machine_info_reads_cpuinfo_and_the_caches_and_names_the_versions(tmp_path, monkeypatch):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(CPUINFO)
    for i, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "512K"),
                                             (3, "Unified", "32768K")]):
        index = tmp_path / "sys/devices/system/cpu/cpu0/cache" / f"index{i}"
        index.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (index / name).write_text(f"{value}\n")
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_xnnpack=false")
    info = machine_info(tmp_path)
    assert (info["cpu_model"], info["cpu_vendor"], info["isa"]) == ("AMD EPYC 7B13", "AuthenticAMD", "AVX2")
    assert info["caches"] == {"L1d": "32K", "L1i": "32K", "L2": "512K", "L3": "32768K"}
    assert info["jax"] == jax.__version__ and info["xla_flags"] == "--xla_cpu_use_xnnpack=false"
    line = describe(info)
    assert line.startswith("AMD EPYC 7B13 (AuthenticAMD, AVX2), ")
    assert "L1d 32K L1i 32K L2 512K L3 32768K; jax " in line and "XLA_FLAGS=--xla_cpu_use_xnnpack=false" in line
    bare = machine_info(tmp_path / "nothing")  # no /proc or /sys: unknown, never a guess
    assert bare["cpu_vendor"] is None and bare["isa"] is None and bare["caches"] == {}
    assert "ISA unknown" in describe(bare) and "caches unknown" in describe(bare)
