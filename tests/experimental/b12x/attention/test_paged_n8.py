"""`DecodeConfig.heads_n8` on the CPU (session 34; bench flag n): the register-light decode tile.

reference: the bench entry, the predicate (GQA groups up to 8), the registers the split counts on, and the
plan's default (KV16_HEADS_N8: 16-bit KV on sm_90a takes it, fp8 KV on its small-batch shape only; sm_120a and
groups above 8 do not).
compile: sm_90a and sm_120a; half the MMAs of the m16 tile, the same cp.async copies, movmatrix for P^T,
fewer registers and no spills (ptxas). The fragment moves are emulated in test_paged_n8_fragments.py;
the GPU tier is test_paged_n8_gpu.py.
"""

import dataclasses

import pytest

from flashinfer.experimental.b12x.attention import paged
from flashinfer.experimental.b12x.attention.paged._config import (
    DecodeConfig,
    bounded_registers,
    why_not,
)

from .paged_cases import ONE_LAUNCH, assert_bench_flag
from .test_paged_compile import compile_flag_pair
from .test_paged_contract import caps

FP8 = "float8_e4m3fn"


@pytest.mark.reference
def test_bench_entry_and_predicate():
    cfg = assert_bench_flag("8x32x2fspldkn", "heads_n8", "n")
    assert cfg == DecodeConfig(8, 32, 2, **ONE_LAUNCH, heads_n8=True)
    assert why_not("bfloat16", FP8, 32, 8, 128, 128, 16, cfg, "sm_90a") is None
    assert why_not("bfloat16", FP8, 64, 8, 128, 128, 16, cfg, "sm_90a") is None  # a group of 8: every column
    assert "at most 8 heads, got Hq/Hkv = 16" in why_not("bfloat16", FP8, 64, 4, 128, 128, 16, cfg, "sm_90a")
    bad = dataclasses.replace(cfg, heads_n8=1)
    assert why_not("bfloat16", FP8, 32, 8, 128, 128, 16, bad, "sm_90a") == "heads_n8 must be a bool, got 1"
    # the split's residency counts the lighter tile (not when persistent: ptxas gives that one 222)
    assert bounded_registers(128, DecodeConfig(4, 32, 2, heads_n8=True)) == 168
    assert bounded_registers(128, DecodeConfig(4, 32, 3, **ONE_LAUNCH, persistent=True, heads_n8=True)) == 200


@pytest.mark.reference
def test_sixteen_bit_kv_plans_take_the_n8_tile_on_sm90():
    from flashinfer.experimental.b12x.attention.paged import _config

    assert _config.KV16_HEADS_N8
    d128 = dict(head_dim_qk=128, head_dim_vo=128)
    for batch in (1, 8, 128):
        work = paged.default_max_work_items(batch, 8)
        c = caps(max_batch=batch, max_total_q=batch, num_q_heads=32, num_kv_heads=8, max_work_items=work,
                 max_partial_rows=paged.default_max_partial_rows(work, 32), **d128)  # fmt: skip
        assert paged.plan(c).heuristic("sm_90a").decode.heads_n8
        assert not paged.plan(c).heuristic("sm_120a").decode.heads_n8  # not measured on an SM120 GPU yet
        fp8 = dataclasses.replace(c, kv_dtype=FP8)  # fp8: the small-batch shape only (B <= SMALL_BATCH_MAX)
        fp8_decode = paged.plan(fp8).heuristic("sm_90a").decode
        assert fp8_decode.heads_n8 == (batch <= _config.SMALL_BATCH_MAX)
    wide = caps(num_q_heads=64, num_kv_heads=4, **d128)  # a group of 16 does not fit 8 columns
    assert not paged.plan(wide).heuristic("sm_90a").decode.heads_n8
    fixed = caps(config=DecodeConfig(4, 16, 2))  # a caller's config is taken as it is
    assert not paged.plan(fixed).heuristic("sm_90a").decode.heads_n8


CASES = [(FP8, (8, 32, 2), 128), (FP8, (4, 32, 2), 128), ("bfloat16", (4, 16, 3), 128), ("bfloat16", (4, 16, 2), 64)]


@pytest.mark.compile
@pytest.mark.parametrize("arch", ("sm_90a", "sm_120a"))
@pytest.mark.parametrize("kv, shape, d", CASES, ids=["fp8-8x32x2", "fp8-4x32x2", "bf16-4x16x3", "bf16-d64"])
def test_n8_compiles_with_half_the_mmas_and_fewer_registers(arch, kv, shape, d):
    ptx, use = compile_flag_pair(arch, kv, shape, d, ONE_LAUNCH, heads_n8=True)
    mma = [p.count("mma.sync.aligned.m16n8k16") for p in ptx]
    assert mma[1] * 2 == mma[0] > 0, mma
    assert ptx[0].count("cp.async.cg.shared.global") == ptx[1].count("cp.async.cg.shared.global") > 0
    assert "movmatrix.sync.aligned.m8n8.trans.b16" in ptx[1] and "movmatrix" not in ptx[0]
    assert all(u["STACK"] == 0 and u["LOCAL"] == 0 for u in use), use
    # 2026-12-04, sm_90a: fp8 8x32x2 186 -> 128, 4x32x2 194 -> 146, bf16 4x16x3 194 -> 166; sm_120a fp8 4x32x2
    # 186 -> 130
    assert use[1]["REG"] <= use[0]["REG"] - 16, use
