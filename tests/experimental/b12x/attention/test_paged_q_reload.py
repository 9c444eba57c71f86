"""`DecodeConfig.q_reload` on the CPU (session 14, opt-in; bench flag q): Q's MMA fragments reloaded from
shared memory for every sub-tile instead of held through the main loop.

reference: the bench entry, the predicate, and what the plan's split counts on (three 4-warp fp8 CTAs
an SM at D 128: `resident_ctas`, hence a one-wave target of 50 items a KV head instead of 33).
compile: sm_90a and sm_120a; the same MMAs, ldmatrix and cp.async instructions in the PTX (the reload
moves Q's ldmatrix into the loop, it adds none); the registers it frees, per ptxas (sm_90a; sm_120a's
ptxas already holds D 64 at 127), with no spills. The
GPU tier (bit-equal to the config without it) is test_paged_q_reload_gpu.py.
"""

import dataclasses

import pytest

from flashinfer.experimental.b12x._lib import cuda_binary as CB
from flashinfer.experimental.b12x.attention.paged._config import (
    DecodeConfig,
    ScheduleConfig,
    bounded_registers,
    resident_ctas,
    split_schedule,
    why_not,
)

from .paged_cases import ONE_LAUNCH, assert_bench_flag
from .test_paged_compile import _check_binary, _modules, compile_flag_pair

ARCHS = ("sm_90a", "sm_120a")
FP8 = "float8_e4m3fn"


@pytest.mark.reference
def test_bench_entry_and_predicate():
    cfg = assert_bench_flag("4x32x2fspldkq", "q_reload", "q")
    assert cfg == DecodeConfig(4, 32, 2, **ONE_LAUNCH, q_reload=True)
    bad = dataclasses.replace(cfg, q_reload="yes")
    assert why_not("bfloat16", FP8, 32, 8, 128, 128, 16, bad, "sm_90a") == "q_reload must be a bool, got 'yes'"
    assert why_not("bfloat16", FP8, 32, 8, 128, 128, 16, cfg, "sm_90a") is None


@pytest.mark.reference
def test_the_split_counts_the_freed_registers():
    """fp8 4x32x2 at D 128 on sm_90a: 75 KB of shared memory fits three CTAs an SM, and 168 registers
    let three run (200 without the reload: two), so the one-wave target grows from 33 to 50 items a
    KV head at 8 KV heads on 132 SMs; bf16 4x16x3 stays at two (its shared memory)."""
    plain = DecodeConfig(4, 32, 2, **ONE_LAUNCH)
    reload = dataclasses.replace(plain, q_reload=True)
    assert (bounded_registers(128, plain), bounded_registers(128, reload)) == (200, 168)
    assert (resident_ctas(FP8, 128, plain, "sm_90a"), resident_ctas(FP8, 128, reload, "sm_90a")) == (2, 3)
    targets = [split_schedule(c, FP8, 128, 8, 132, "sm_90a").target_items for c in (plain, reload)]
    assert targets == [33, 50]
    bf16 = DecodeConfig(4, 16, 3, **ONE_LAUNCH, q_reload=True)
    assert resident_ctas("bfloat16", 128, bf16, "sm_90a") == 2
    assert bounded_registers(64, reload) == 128 and bounded_registers(256, reload) == 256


CASES = [(FP8, (4, 32, 2), 128), (FP8, (8, 32, 2), 128), ("bfloat16", (4, 16, 3), 128), ("bfloat16", (4, 16, 2), 64)]


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv, shape, d", CASES, ids=["fp8-4x32x2", "fp8-8x32x2", "bf16-4x16x3", "bf16-d64"])
def test_q_reload_compiles_with_fewer_registers(arch, kv, shape, d):
    ptx, use = compile_flag_pair(arch, kv, shape, d, ONE_LAUNCH, q_reload=True)
    reload = dataclasses.replace(DecodeConfig(*shape, **ONE_LAUNCH), q_reload=True)
    for op in ("mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned", "cp.async.cg.shared.global"):
        assert ptx[0].count(op) == ptx[1].count(op) > 0, op
    assert all(u["STACK"] == 0 and u["LOCAL"] == 0 for u in use), use
    if arch == "sm_90a":  # 2026-12-01: 26-33 fewer (fp8 4x32x2 194 -> 168, bf16 D 64 154 -> 124)
        assert use[1]["REG"] <= use[0]["REG"] - 16 and use[1]["REG"] <= bounded_registers(d, reload), use
    else:  # sm_120a's ptxas keeps D 64 at 127 either way; D 128 fp8 4x32x2 186 -> 168
        assert use[1]["REG"] <= use[0]["REG"] + 8, use


@pytest.mark.compile
def test_two_8_warp_fp8_ctas_an_sm():
    """fp8 8x16x2 (76 KB of shared memory: two an SM) under a launch bound of two CTAs (128 registers):
    with the reload ptxas fits it with 16 bytes of stack (40 without), so 16 warps an SM can run where
    today's decode kernels run 8 (docs/predictions/attention.md, q_reload). Session 41's page clamps (the page-table
    column and the page id, `_decode_loads._pt`) keep two more values live: 32 bytes of stack since."""
    kd, _ = _modules()
    cfg = DecodeConfig(8, 16, 2, **ONE_LAUNCH, q_reload=True, min_ctas=2)
    assert why_not("bfloat16", FP8, 32, 8, 128, 128, 16, cfg, "sm_90a") is None
    assert resident_ctas(FP8, 128, cfg, "sm_90a") == 2
    fn = kd.compile_decode(
        "bfloat16", FP8, 32, 8, 128, 128, 16, cfg, arch="sm_90a", schedule=ScheduleConfig(128, 33, 128)
    )
    _check_binary(fn, "sm_90a")
    use = CB.resources(fn.artifacts.CUBIN)
    assert use["REG"] <= 128 and use["STACK"] <= 32 and use["LOCAL"] == 0, use
