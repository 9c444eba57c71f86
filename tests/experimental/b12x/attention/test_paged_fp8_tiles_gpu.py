"""fp8 KV decode tiles with more bytes in flight on the GPU (session 14; scripts/jobs/s14_fp8_small.txt,
s14_fp8_8warp.txt): 8 warps with 32 keys a warp, or 3-4 stages of 16, one CTA an SM, against the fp32
reference on NaN-poisoned buffers (`check`): one request of 8k / 32k keys, ragged batches of four with
empty, one-key and page-edge requests, windows and sinks at GQA 4 and 8 on 16- and 64-key pages, and graph
replay with new lengths; each with the one-launch flags of the heuristic. 8 x 32 x 2 is the default of
fp8 plans of 5 to FP8_EIGHT_WARP_MAX requests (the plan's own path is checked last); the others lost to
it or to the small-batch shape on the H200 and stay candidates."""

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch
from flashinfer.experimental.b12x.attention.paged._config import DecodeConfig

from .paged_cases import ONE_LAUNCH, make_case
from .test_paged_gpu import DEV, FP8, _lengths, caps_for, check, prepared, replay_with_new_lengths, streaming_plan

pytestmark = pytest.mark.gpu

CANDIDATES = {
    "w8k32s2": DecodeConfig(8, 32, 2, **ONE_LAUNCH),
    "w8k16s3": DecodeConfig(8, 16, 3, **ONE_LAUNCH),
    "w8k16s4": DecodeConfig(8, 16, 4, **ONE_LAUNCH),
    "w8k32s3": DecodeConfig(8, 32, 3, **ONE_LAUNCH),
}


@pytest.fixture(autouse=True)
def _sm90():
    if target_arch(torch.device(DEV)) != "sm_90a":
        pytest.skip("the 8-warp fp8 tiles with 32 keys a warp or 3+ stages fit sm_90a's shared memory only")


@pytest.mark.parametrize("name", list(CANDIDATES))
@pytest.mark.parametrize(
    "lens",
    [[32768], [8192], [0, 1, 17, 32000], [4097, 1000, 65, 300]],
    ids=["b1-32k", "b1-8k", "b4-edges", "b4-ragged"],
)
def test_small_batch_fp8_tiles_match_reference(name, lens):
    case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=FP8, device=DEV,
                     seed=len(lens) + len(name) + lens[0])  # fmt: skip
    plan = streaming_plan(case, "float8_e4m3fn", CANDIDATES[name])
    assert plan.state.selection.decode == CANDIDATES[name]
    for _ in range(2):  # the second run merges only if the first reset the tickets
        check(plan, case)


@pytest.mark.parametrize("name", list(CANDIDATES))
def test_small_batch_fp8_tiles_window_sinks_and_gqa(name):
    for hq, page in ((32, 16), (64, 64)):
        cfg = CANDIDATES[name]  # 32 keys a warp: two 16-key pages, or half a 64-key one
        case = make_case([0, 1, 20000, 4100], num_q_heads=hq, num_kv_heads=8, head_dim=128, page_size=page,
                         kv_dtype=FP8, device=DEV, seed=hq + page)  # fmt: skip
        plan = streaming_plan(case, "float8_e4m3fn", cfg)
        sinks = torch.randn(hq, device=DEV) * 3
        for window_left in (-1, 0, 100, 4096):
            check(plan, case, window_left=window_left, sinks=sinks)


@pytest.mark.parametrize("name", ["w8k32s2", "w8k16s3"])
def test_small_batch_fp8_tiles_graph_replay_with_new_lengths(name):
    full = make_case([32000] * 16, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=FP8,
                     width=2100, device=DEV, seed=16)  # fmt: skip
    plan = streaming_plan(full, "float8_e4m3fn", CANDIDATES[name], use_cuda_graph=True)
    replay_with_new_lengths(plan, full, seed=16, steps=3)


@pytest.mark.parametrize("batch", [1, 4, 5, 8, 16, 17])
def test_fp8_heuristic_plans_match_reference(batch):
    """The plan's own path around FP8_EIGHT_WARP_MAX: the small-batch shape up to 4 requests (one request
    of 32k keys: above the cluster's context bound), 8 x 32 x 2 from 5 to 16, 4 x 32 x 2 above."""
    from flashinfer.experimental.b12x.attention.paged import _config

    lens = [32768] if batch == 1 else [0 if i % 5 == 3 else n for i, n in enumerate(_lengths(batch, 9000, batch))]
    case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=FP8, device=DEV,
                     seed=batch)  # fmt: skip
    plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype="float8_e4m3fn"))
    d = plan.state.selection.decode
    small = batch <= _config.SMALL_BATCH_MAX
    eight = not small and batch <= _config.FP8_EIGHT_WARP_MAX
    assert (d.warps, d.keys_per_warp, d.stages) == ((8, 16, 2) if small else (8, 32, 2) if eight else (4, 32, 2))
    for _ in range(2):
        check(plan, case)
    check(plan, case, window_left=700, sinks=torch.randn(32, device=DEV) * 3)
