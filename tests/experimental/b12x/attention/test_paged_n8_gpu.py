"""`DecodeConfig.heads_n8` on the GPU (session 34, opt-in; bench flag n): the register-light decode tile
(`_decode_n8`: the GQA group on the MMA's n8 columns, S^T = K Q^T and O^T += V^T P^T) against the fp32
reference on NaN-poisoned buffers (`check`: also the device schedule against its mirror and the
tickets back at zero), for the fp8 batch tiles, bf16's tiles, the persistent and q_reload variants and
the single-request cluster; windows, sinks, group sizes 1, 2, 4 and 8 at D 64, 128 and 256 and page
sizes 16 and 64; CUDA-graph replay with new lengths equal to eager."""

import dataclasses

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch
from flashinfer.experimental.b12x.attention.paged._config import DecodeConfig, why_not

from .paged_cases import ONE_LAUNCH, make_case
from .test_paged_cluster_gpu import cluster_plan, run_checked
from .test_paged_gpu import B128, DEV, check, replay_with_new_lengths, streaming_plan

pytestmark = pytest.mark.gpu

CONFIGS = {
    "fp8-4x32x2": ("float8_e4m3fn", DecodeConfig(4, 32, 2, **ONE_LAUNCH, heads_n8=True)),
    "fp8-8x32x2": ("float8_e4m3fn", DecodeConfig(8, 32, 2, **ONE_LAUNCH, heads_n8=True)),
    "fp8-2x32x2": ("float8_e4m3fn", DecodeConfig(2, 32, 2, **ONE_LAUNCH, heads_n8=True)),
    "fp8-4x16x3": ("float8_e4m3fn", DecodeConfig(4, 16, 3, **ONE_LAUNCH, heads_n8=True)),
    "fp8-8x16x2": ("float8_e4m3fn", DecodeConfig(8, 16, 2, **ONE_LAUNCH, heads_n8=True)),  # the small-batch default
    "fp8-4x32x3-persistent": ("float8_e4m3fn", DecodeConfig(4, 32, 3, **ONE_LAUNCH, persistent=True, heads_n8=True)),
    "fp8-8x32x2-q_reload": ("float8_e4m3fn", DecodeConfig(8, 32, 2, **ONE_LAUNCH, q_reload=True, heads_n8=True)),
    "bf16-4x16x3": ("bfloat16", DecodeConfig(4, 16, 3, **ONE_LAUNCH, heads_n8=True)),
    "bf16-8x16x2": ("bfloat16", DecodeConfig(8, 16, 2, **ONE_LAUNCH, heads_n8=True)),
    "bf16-4x32x2": ("bfloat16", DecodeConfig(4, 32, 2, **ONE_LAUNCH, heads_n8=True)),
}
LENS = {"b1-32k": [32768], "b8-ragged": [0, 1, 17, 1000, 32768, 4097, 65, 300], "b128-ragged": B128}


def _fits(kv, cfg, hq=32, hkv=8, d=128, page=16):
    reason = why_not("bfloat16", kv, hq, hkv, d, d, page, cfg, target_arch(torch.device(DEV)))
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("lens", list(LENS))
def test_n8_matches_reference(name, lens):
    kv, cfg = CONFIGS[name]
    _fits(kv, cfg)
    case = make_case(LENS[lens], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv), device=DEV, seed=len(name) + len(lens))  # fmt: skip
    plan = streaming_plan(case, kv, cfg)
    assert plan.state.selection.decode == cfg
    for _ in range(2):  # the second run merges only if the first reset the tickets
        check(plan, case)


@pytest.mark.parametrize("kv", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("hq, hkv, d, page", [(32, 8, 128, 64), (64, 8, 128, 16), (8, 8, 256, 16), (16, 8, 64, 64)])
def test_n8_window_sinks_and_gqa(kv, hq, hkv, d, page):
    """Group sizes 4, 8, 1 and 2 (the live n8 columns) at D 128, 256 and 64, windows and sinks."""
    base = DecodeConfig(4, 32 if kv == "float8_e4m3fn" else 16, 2, **ONE_LAUNCH, heads_n8=True)
    fits = [dataclasses.replace(base, keys_per_warp=k, stages=s) for k in (base.keys_per_warp, 16) for s in (2,)]
    arch = target_arch(torch.device(DEV))
    cfg = next((c for c in fits if why_not("bfloat16", kv, hq, hkv, d, d, page, c, arch) is None), None)
    if cfg is None:
        pytest.skip(f"no n8 tile fits D {d} on {arch}")
    case = make_case([0, 1, 20000, 4100, 33, 16, 17], num_q_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page,
                     kv_dtype=getattr(torch, kv), device=DEV, seed=hq + d + page)  # fmt: skip
    plan = streaming_plan(case, kv, cfg, max_batch=16)
    sinks = torch.randn(hq, device=DEV) * 3
    for window_left in (-1, 0, 100, 4096):
        check(plan, case, window_left=window_left, sinks=sinks)


@pytest.mark.parametrize("kv", ["bfloat16", "float8_e4m3fn"])
def test_n8_in_the_single_request_cluster(kv):
    cfg = DecodeConfig(8, 16, 2, **ONE_LAUNCH, cluster=8, cluster_push=True, heads_n8=True)
    _fits(kv, cfg)
    for lens in ([1000], [4096]):
        case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                         kv_dtype=getattr(torch, kv), device=DEV, seed=lens[0])  # fmt: skip
        run_checked(cluster_plan(case, kv, cfg), case)


@pytest.mark.parametrize("name", ["fp8-8x32x2", "fp8-4x32x2", "bf16-4x16x3"])
def test_n8_graph_replay_with_new_lengths(name):
    kv, cfg = CONFIGS[name]
    _fits(kv, cfg)
    full = make_case([32000] * 16, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv), width=2100, device=DEV, seed=6)  # fmt: skip
    plan = streaming_plan(full, kv, cfg)
    replay_with_new_lengths(plan, full, seed=1, steps=3)
