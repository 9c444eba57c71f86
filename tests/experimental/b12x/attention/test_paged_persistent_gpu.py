"""The persistent decode kernel (`DecodeConfig.persistent`) on the GPU: against the fp32 reference on
NaN-poisoned buffers (ragged B 1..128, empty requests, GQA 1/4/16, windows and sinks, D 64/128/256),
bit-equal to the same config without persistent (same per-item arithmetic, only the CTA that runs
an item and the timing of its loads change), and CUDA-graph replay with new live lengths equal to
eager. Small split targets make CTAs run several items each (the lookahead path); the default
targets cover the split, one-item-a-CTA path with the fused merge.
"""

import dataclasses

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch
from flashinfer.experimental.b12x.attention.paged._config import DecodeConfig, why_not

from .paged_cases import make_case
from .test_paged_gpu import (
    B128,
    DEV,
    FP8,
    _lengths,
    check,
    replay_with_new_lengths,
    streaming_plan,
)

pytestmark = pytest.mark.gpu

FLAGS = dict(fused_merge=True, fused_schedule=True, fast_prologue=True, preload_lengths=True, direct_items=True)
# sm_90a's fp8 default shape (two-page sub-tiles) and the bf16 one, with and without persistent
BASE = {"float8_e4m3fn": DecodeConfig(4, 32, 3, **FLAGS), "bfloat16": DecodeConfig(4, 16, 3, **FLAGS)}


def persistent(kv_dtype):
    return dataclasses.replace(BASE[kv_dtype], persistent=True)


def _run_both(case, kv_dtype, target=None, **kw):
    """(plain, persistent) outputs of `check` (reference, schedule mirror, tickets) on one case."""
    outs = []
    for cfg in (BASE[kv_dtype], persistent(kv_dtype)):
        plan = streaming_plan(case, kv_dtype, cfg, target=target, **kw)
        assert plan.state.selection.decode == cfg
        out, lse = check(plan, case)
        outs.append((out.clone(), lse.clone()))
        out, lse = check(plan, case)  # a second run: tickets were reset, the head issue starts clean
        assert torch.equal(out, outs[-1][0])
    return outs


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize(
    "lens,target",
    [([32768], None), ([0, 1, 17, 1000, 32768, 4097, 65, 300], None), (B128, None),
     ([0, 1, 17, 1000, 32768, 4097, 65, 300], 3), ([4096] * 128, None), (_lengths(70, 20000, seed=70), 9)],
    ids=["b1-32k-split", "b8-ragged-split", "b128-ragged", "b8-ragged-3rows", "b128-4k", "b70-9rows"],
)  # fmt: skip
def test_persistent_matches_reference_and_plain(kv_dtype, lens, target):
    """B=128 runs 4 items a CTA (33 rows a head on the H200), target 3 / 9 makes B=8 / 70 unsplit on
    3 / 9 CTA rows (up to 8 items a CTA); the split cases keep one item a CTA. Outputs and LSE are
    bit-equal to the one-item-a-CTA kernel."""
    case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens) + (target or 0))  # fmt: skip
    (po, pl), (ro, rl) = _run_both(case, kv_dtype, target=target)
    assert torch.equal(po, ro)
    assert torch.equal(pl.nan_to_num(), rl.nan_to_num())


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_persistent_window_sinks_and_gqa(kv_dtype):
    """Sliding windows, sinks, group sizes 4, 16 and 1 (D 128, 64, 256), on 5 CTA rows for 8 requests
    (several items a CTA, empty and one-key requests among them) and on the split default target."""
    kvt = getattr(torch, kv_dtype)
    lens = [0, 1, 5000, 0, 33, 20000, 16, 17]
    arch = target_arch(torch.device(DEV))
    for hq, hkv, d in ((32, 8, 128), (64, 4, 64), (8, 8, 256)):
        base = persistent(kv_dtype)
        fits = [dataclasses.replace(base, keys_per_warp=k, stages=st) for k in (base.keys_per_warp, 32, 16)
                for st in range(6, 1, -1)]  # fmt: skip
        cfg = next(c for c in fits if why_not("bfloat16", kv_dtype, hq, hkv, d, d, 16, c, arch) is None)
        case = make_case(lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=16, kv_dtype=kvt,
                         combined=True, extra_pages=50, width=1400, device=DEV, seed=hq + d)  # fmt: skip
        sinks = torch.randn(hq, device=DEV) * 3
        for target in (5, None):
            plan = streaming_plan(case, kv_dtype, cfg, target=target, max_batch=16)
            for window_left in (-1, 0, 100, 4096):
                check(plan, case, window_left=window_left, sinks=sinks)


@pytest.mark.parametrize("target", [6, None], ids=["6rows", "split"])
def test_persistent_graph_replay_with_new_lengths(target):
    """CUDA-graph replay of the persistent kernel: new lengths (empty requests included) each step;
    the replay equals eager and the reference, the tickets are back at zero."""
    full = make_case([32000] * 16, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=FP8,
                     width=2100, device=DEV, seed=16)  # fmt: skip
    plan = streaming_plan(full, "float8_e4m3fn", persistent("float8_e4m3fn"), target=target)
    replay_with_new_lengths(plan, full, seed=2, steps=4)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_persistent_default_switch_matches_reference(kv_dtype, monkeypatch):
    """_config.PERSISTENT_DECODE on: the plan's own heuristic path at B 1, 8, 128 (fp8: persistent; bf16
    KV keeps the one-item kernel) and at B=130 (above the fused schedule's batch limit: persistent a
    no-op)."""
    from flashinfer.experimental.b12x.attention.paged import _config

    from .test_paged_gpu import caps_for, prepared

    monkeypatch.setattr(_config, "PERSISTENT_DECODE", True)
    monkeypatch.setattr(_config, "SMALL_BATCH_DECODE", False)  # B = 1 keeps the fp8 default it switches
    monkeypatch.setattr(_config, "FP8_TILE_STAGES", 3)  # persistent_fits needs fp8's 3-stage ring (4x32x3)
    monkeypatch.setattr(_config, "FP8_EIGHT_WARP_MAX", 0)  # the batch tiles (session 14) have 2 stages
    monkeypatch.setattr(_config, "FP8_WIDE_BATCH", 0)
    for lens in ([32768], [0, 1, 17, 1000, 32768, 4097, 65, 300], B128, _lengths(130, 600, seed=130)):
        case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                         kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens) + 1)  # fmt: skip
        plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype))
        decode = plan.state.selection.decode
        fp8 = kv_dtype == "float8_e4m3fn"
        assert decode.persistent == fp8 and decode.runs_persistent == (fp8 and len(lens) <= 128)
        for _ in range(2):
            check(plan, case)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("persistent", [False, True], ids=["one-item", "persistent"])
def test_prefetch_pages_bit_equal(kv_dtype, persistent):
    """prefetch_pages only warms L2: outputs bit-equal to the same config without it, against the
    reference, on B=1 32k (split), ragged B=8 and B=128 (several items a CTA when persistent)."""
    base = dataclasses.replace(BASE[kv_dtype], persistent=persistent)
    for lens in ([32768], [0, 1, 17, 1000, 32768, 4097, 65, 300], B128):
        case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                         kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens) + 5)  # fmt: skip
        outs = []
        for cfg in (base, dataclasses.replace(base, prefetch_pages=True)):
            out, lse = check(streaming_plan(case, kv_dtype, cfg), case)
            outs.append((out.clone(), lse.clone()))
        assert torch.equal(outs[0][0], outs[1][0])
        assert torch.equal(outs[0][1].nan_to_num(), outs[1][1].nan_to_num())


@pytest.mark.parametrize("target", [None, 3], ids=["default-target", "3rows"])
def test_persistent_16_key_sub_tiles_5_stages(target):
    """fp8 4 x 16 x 5 (the sweep's 16-key alternative that fits persistent: 4 stages of 16 keys in
    flight a warp): persistent bit-equal to the one-item kernel and against the reference, B=128 and
    a ragged B=8 (3 CTA rows: several items a CTA)."""
    plain = DecodeConfig(4, 16, 5, **FLAGS)
    for lens in (B128, [0, 1, 17, 1000, 32768, 4097, 65, 300]):
        case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=FP8,
                         device=DEV, seed=len(lens) + 9)  # fmt: skip
        outs = []
        for cfg in (plain, dataclasses.replace(plain, persistent=True)):
            out, lse = check(streaming_plan(case, "float8_e4m3fn", cfg, target=target), case)
            outs.append((out.clone(), lse.clone()))
        assert torch.equal(outs[0][0], outs[1][0])
        assert torch.equal(outs[0][1].nan_to_num(), outs[1][1].nan_to_num())
