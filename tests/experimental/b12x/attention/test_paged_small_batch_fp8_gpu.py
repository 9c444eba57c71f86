"""fp8 KV decode tiles for small batches on the GPU (session 14; docs/predictions/attention.md, "fp8 at
B <= 4"): the small-batch shape runs one 8-warp CTA an SM, which while it computes one 128-key stage has
only the next stage in flight, 32 KB of fp8 against bf16's 64 KB. Candidates with more fp8 bytes in
flight (32 keys a warp, or more stages), each with the one-launch flags of the heuristic, against the
fp32 reference on NaN-poisoned buffers (`check`): one request of 32k keys, ragged batches of four with
empty, one-key and page-edge requests, windows and sinks at GQA 4 and 8, and graph replay with new
lengths. A candidate becomes a default only after these pass (`_config.FP8_SMALL_BATCH_TILE`)."""

import dataclasses

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch
from flashinfer.experimental.b12x.attention.paged._config import DecodeConfig

from .paged_cases import make_case
from .test_paged_gpu import DEV, FP8, caps_for, check, prepared, replay_with_new_lengths, streaming_plan

pytestmark = pytest.mark.gpu

FLAGS = dict(fused_merge=True, fused_schedule=True, fast_prologue=True, preload_lengths=True, direct_items=True,
             lean_ticket=True)  # fmt: skip
CANDIDATES = {
    "w8k32s2": DecodeConfig(8, 32, 2, **FLAGS),
    "w8k16s3": DecodeConfig(8, 16, 3, **FLAGS),
    "w8k16s4": DecodeConfig(8, 16, 4, **FLAGS),
    "w8k32s3": DecodeConfig(8, 32, 3, **FLAGS),
}


@pytest.fixture(autouse=True)
def _sm90():
    if target_arch(torch.device(DEV)) != "sm_90a":
        pytest.skip("the 8-warp fp8 tiles with 32 keys a warp or 3+ stages fit sm_90a's shared memory only")


@pytest.mark.parametrize("name", list(CANDIDATES))
@pytest.mark.parametrize(
    "lens", [[32768], [8192], [0, 1, 17, 32000], [4097, 1000, 65, 300]], ids=["b1-32k", "b1-8k", "b4-edges", "b4-ragged"]
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
        cfg = CANDIDATES[name]
        if cfg.keys_per_warp > page:  # never: 32 keys fit both pages; kept for page sizes added later
            cfg = dataclasses.replace(cfg, keys_per_warp=page)
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


def test_small_batch_fp8_heuristic_plan_matches_reference():
    """Whatever the heuristic picks for fp8 at B = 1 (cluster up to 4k of context, the small-batch tile
    above it), on the plan's own path."""
    for lens in ([1024], [32768], [3, 9000, 0, 2]):
        case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=FP8,
                         device=DEV, seed=len(lens))  # fmt: skip
        plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype="float8_e4m3fn"))
        for _ in range(2):
            check(plan, case)
