"""_config.FP8_WIDE_BATCH on the GPU (session 12's fp8 sweep: 2 warps x 32 keys x 2 stages from B = 48;
on since session 14, when these passed on the H200): the plan's own heuristic path with the switch at 48,
fp8 KV at D 128, against the fp32 reference on NaN-poisoned buffers (`check`): ragged B = 48 / 64 / 128
with empty requests, a window and sinks, and a plan of capacity 64 replaying a CUDA graph with 16 live
requests and new lengths."""

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch

from .paged_cases import make_case
from .test_paged_gpu import B128, DEV, FP8, _lengths, caps_for, check, prepared, replay_with_new_lengths

pytestmark = pytest.mark.gpu

WIDE = (2, 32, 2)  # warps, keys_per_warp, stages


@pytest.fixture
def wide_batch(monkeypatch):
    from flashinfer.experimental.b12x.attention.paged import _config

    if target_arch(torch.device(DEV)) != "sm_90a":
        pytest.skip("FP8_WIDE_BATCH's shape is measured (and selected) on sm_90a only")
    monkeypatch.setattr(_config, "FP8_WIDE_BATCH", 48)


def _shape(plan):
    d = plan.state.selection.decode
    return d.warps, d.keys_per_warp, d.stages


@pytest.mark.parametrize("batch", [48, 64, 128])
def test_fp8_wide_batch_switch_matches_reference(wide_batch, batch):
    lens = B128 if batch == 128 else [0 if i % 7 == 2 else n for i, n in enumerate(_lengths(batch, 4096, batch))]
    case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=FP8, device=DEV,
                     seed=batch)  # fmt: skip
    plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype="float8_e4m3fn"))
    assert _shape(plan) == WIDE
    for _ in range(2):
        check(plan, case)
    sinks = torch.randn(32, device=DEV) * 3
    check(plan, case, window_left=300, sinks=sinks)


def test_fp8_wide_batch_below_the_bound_keeps_the_default(wide_batch):
    case = make_case(_lengths(32, 1024, 32), num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=FP8, device=DEV, seed=32)  # fmt: skip
    plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype="float8_e4m3fn"))
    assert _shape(plan) == (4, 32, 2)
    check(plan, case)


def test_fp8_wide_batch_graph_replay_with_new_lengths(wide_batch):
    """A plan for 64 requests (the wide shape) serving 16 live ones through a captured graph."""
    full = make_case([32000] * 16, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=FP8,
                     width=2100, device=DEV, seed=64)  # fmt: skip
    plan = prepared(caps_for(full, dtype="bfloat16", kv_dtype="float8_e4m3fn", max_batch=64, use_cuda_graph=True))
    assert _shape(plan) == WIDE
    replay_with_new_lengths(plan, full, seed=64, steps=3)
