"""`DecodeConfig.q_reload` on the GPU (session 14, opt-in, staged for the next device run): Q's fragments
reloaded from shared memory each sub-tile hold the same values in the same MMAs, so every output and
LSE is bit-equal to the same config without it, under the same split; both against the fp32 reference
on NaN-poisoned buffers (`check`). Configs: the fp8 batch tiles (4 / 8 / 2 warps x 32 keys), bf16's
4x16x3 and the small-batch 8x16x2, the single-request cluster, and the persistent fp8 4x32x3; on one
request of 32k keys, a ragged batch of eight with empty and one-key requests, and B = 128."""

import dataclasses

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch
from flashinfer.experimental.b12x.attention.paged._config import DecodeConfig, split_schedule

from .paged_cases import ONE_LAUNCH, make_case
from .test_paged_cluster_gpu import cluster_plan, run_checked
from .test_paged_gpu import B128, DEV, check, streaming_plan

pytestmark = pytest.mark.gpu

CONFIGS = {
    "fp8-4x32x2": ("float8_e4m3fn", DecodeConfig(4, 32, 2, **ONE_LAUNCH)),
    "fp8-8x32x2": ("float8_e4m3fn", DecodeConfig(8, 32, 2, **ONE_LAUNCH)),
    "fp8-2x32x2": ("float8_e4m3fn", DecodeConfig(2, 32, 2, **ONE_LAUNCH)),
    "fp8-4x32x3-persistent": ("float8_e4m3fn", DecodeConfig(4, 32, 3, **ONE_LAUNCH, persistent=True)),
    "bf16-4x16x3": ("bfloat16", DecodeConfig(4, 16, 3, **ONE_LAUNCH)),
    "bf16-8x16x2": ("bfloat16", DecodeConfig(8, 16, 2, **ONE_LAUNCH)),
    # two 8-warp CTAs an SM (a launch bound of 128 registers: 16 B of stack with the reload, 40 without)
    "fp8-8x16x2-o2": ("float8_e4m3fn", DecodeConfig(8, 16, 2, **ONE_LAUNCH, min_ctas=2)),
}
LENS = {"b1-32k": [32768], "b8-ragged": [0, 1, 17, 1000, 32768, 4097, 65, 300], "b128-ragged": B128}


@pytest.fixture(autouse=True)
def _sm90():
    if target_arch(torch.device(DEV)) != "sm_90a":
        pytest.skip("the 32-key and 8-warp tiles fit sm_90a's shared memory only")


def _run(plan, case):
    out, lse = check(plan, case)  # against the reference, outputs poisoned first
    return out.clone(), lse.clone()


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("lens", list(LENS))
def test_q_reload_is_bit_equal(name, lens):
    kv, plain = CONFIGS[name]
    case = make_case(LENS[lens], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv), device=DEV, seed=len(name) + len(lens))  # fmt: skip
    sms = torch.cuda.get_device_properties(torch.device(DEV)).multi_processor_count
    target = split_schedule(plain, kv, 128, 8, sms, "sm_90a").target_items  # the same split for both
    got = [
        _run(streaming_plan(case, kv, c, target=target), case)
        for c in (plain, dataclasses.replace(plain, q_reload=True))
    ]
    assert torch.equal(got[0][0], got[1][0]) and torch.equal(got[0][1], got[1][1]), name


@pytest.mark.parametrize("kv", ["bfloat16", "float8_e4m3fn"])
def test_q_reload_in_the_single_request_cluster(kv):
    plain = DecodeConfig(8, 16, 2, **ONE_LAUNCH, cluster=8, cluster_push=True)
    case = make_case([1000], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=getattr(torch, kv),
                     device=DEV, seed=3)  # fmt: skip
    got = [run_checked(cluster_plan(case, kv, c), case) for c in (plain, dataclasses.replace(plain, q_reload=True))]
    assert torch.equal(got[0][0], got[1][0]) and torch.equal(got[0][1], got[1][1])


@pytest.mark.parametrize("kv", ["bfloat16", "float8_e4m3fn"])
def test_q_reload_window_sinks_and_gqa(kv):
    """Windows, sinks and group sizes 8 and 1 (the Q tile's live rows) with the reload."""
    for hq, page in ((64, 16), (8, 64)):
        cfg = DecodeConfig(4, 32 if kv != "bfloat16" else 16, 2, **ONE_LAUNCH, q_reload=True)
        case = make_case([0, 1, 20000, 4100], num_q_heads=hq, num_kv_heads=8, head_dim=128, page_size=page,
                         kv_dtype=getattr(torch, kv), device=DEV, seed=hq + page)  # fmt: skip
        plan = streaming_plan(case, kv, cfg)
        sinks = torch.randn(hq, device=DEV) * 3
        for window_left in (-1, 0, 100, 4096):
            check(plan, case, window_left=window_left, sinks=sinks)
