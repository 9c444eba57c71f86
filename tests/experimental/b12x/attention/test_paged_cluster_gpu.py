"""The cluster merge on the GPU (`DecodeConfig.cluster`, bench part `:cN`; CPU tiers in
test_paged_cluster.py): against the fp32 reference on NaN-poisoned outputs (2x torch at the kernel's
precision, test_paged_gpu's rule), against the same config without the flag (the ticket merge; a
different split and summation order, so within the reference tolerance of each other, and bit-equal
LSE finiteness), under windows / sinks / GQA / D 64 and 256, B 1..8 with empty and one-key requests,
repeated launches bit-equal (a DSMEM race would show as a changed bit or a NaN), and CUDA-graph replay
with new lengths. The tickets are never touched (zero after every run). Configs: 8x16x2fspld where it
fits this GPU, else 4x16x2fspld (sm_120a), with cluster 2, 4, 8 and (sm_90a) 16, each merged by the
peers' DSMEM loads ("pull") and by st.async pushes into each rank's receive buffer ("push",
`cluster_push`; bench part `:cNp`); push and pull do the same arithmetic in the same order, so their
outputs and LSEs are bit-equal (`test_cluster_push_bit_equals_pull`).
"""

import dataclasses

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch
from flashinfer.experimental.b12x.attention.paged._config import DecodeConfig, ScheduleConfig, split_schedule, why_not
from flashinfer.experimental.b12x.attention.paged.api import Selection

from .paged_cases import check_against_reference, make_case
from .test_paged_gpu import (
    DEV,
    FP8,
    assert_tickets_reset,
    caps_for,
    emulated,
    paged,
    poison,
    prepared,
    replay_with_new_lengths,
)
from .test_paged_lean_gpu import check_graph_replays

pytestmark = pytest.mark.gpu

LATENCY = dict(fused_merge=True, fused_schedule=True, fast_prologue=True, preload_lengths=True, direct_items=True)
CLUSTERS = (2, 4, 8, 16)  # 16: non-portable, sm_90a only (`why_not`)
LENS = {"b1-1k": [1024], "b1-8k": [8192], "b1-33": [33], "b1-0": [0], "b4-ragged": [0, 1, 1000, 32768],
        "b8-ragged": [0, 1, 17, 1000, 5000, 4097, 65, 300]}  # fmt: skip
PUSH = pytest.mark.parametrize("push", [False, True], ids=["pull", "push"])  # DecodeConfig.cluster_push


def base_config(kv_dtype, hq=32, hkv=8, d=128, cluster=0, push=False):
    """8x16x2fspld where it fits this GPU (with `cluster` and `push`), else 4 or 2 warps."""
    arch = target_arch(torch.device(DEV))
    if cluster > 8 and arch != "sm_90a":
        pytest.skip(f"cluster {cluster} is sm_90a only, this GPU is {arch}")
    for warps in (8, 4, 2):
        cfg = DecodeConfig(warps, 16, 2, **LATENCY, cluster=cluster, cluster_push=push)
        if why_not("bfloat16", kv_dtype, hq, hkv, d, d, 16, cfg, arch) is None:
            return cfg
    raise AssertionError("no 16-key 2-stage config fits")


def cluster_plan(case, kv_dtype, cfg, **kw):
    dev = torch.device(DEV)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    sched = split_schedule(cfg, kv_dtype, case.q.shape[2], case.k_cache.shape[2], sms, target_arch(dev))
    sched = ScheduleConfig(sched.tile_keys, sched.target_items, 128)
    plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype, **kw), override=Selection(cfg, sched))
    assert plan.state.selection.decode == cfg
    return plan


def run_checked(plan, case, *, window_left=-1, sinks=None):
    """Poisoned outputs, one run, the reference check; the tickets untouched. Returns (out, lse)."""
    kv_fp8 = case.k_cache.dtype == FP8
    poison(plan)
    kw = dict(k_descale=case.k_descale, v_descale=case.v_descale) if kv_fp8 else {}
    binding = paged.bind(plan, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                         cache_seqlens=case.cache_seqlens, window_left=window_left, attention_sink_bias=sinks,
                         **kw)  # fmt: skip
    out, lse = paged.run(binding=binding)
    torch.cuda.synchronize()
    emu = emulated(case, torch.float16 if kv_fp8 else case.q.dtype, case.q.dtype, window_left=window_left, sinks=sinks)
    check_against_reference(case, out, lse, emu, window_left=window_left, sinks=sinks)
    assert_tickets_reset(plan)
    return out.clone(), lse.clone()


@PUSH
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("lens", list(LENS))
def test_cluster_matches_reference_and_the_ticket_merge(kv_dtype, cluster, lens, push):
    """The reference on poisoned outputs, twice bit-equal (no race between the DSMEM reads and the
    peers' exits), and the config without the flag on the same inputs within the reference budget."""
    case = make_case(LENS[lens], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens) + cluster)  # fmt: skip
    cfg = base_config(kv_dtype, cluster=cluster, push=push)
    plan = cluster_plan(case, kv_dtype, cfg)
    out, lse = run_checked(plan, case)
    again, again_lse = run_checked(plan, case)
    assert torch.equal(out, again) and torch.equal(lse.nan_to_num(), again_lse.nan_to_num())
    plain = dataclasses.replace(cfg, cluster=0, cluster_push=False)
    plain_out, plain_lse = run_checked(cluster_plan(case, kv_dtype, plain), case)
    torch.testing.assert_close(out.float(), plain_out.float(), rtol=2e-2, atol=2e-2)
    assert torch.equal(torch.isfinite(lse), torch.isfinite(plain_lse))


@PUSH
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("cluster", [2, 8, 16])
def test_cluster_window_sinks_and_gqa(kv_dtype, cluster, push):
    """Sliding windows, sinks and group sizes 4, 16 and 1 (D 128, 64, 256) on a strided (combined)
    cache and a page table wider than the requests."""
    kvt = getattr(torch, kv_dtype)
    lens = [0, 1, 5000, 0, 33, 20000, 16, 17]
    for hq, hkv, d in ((32, 8, 128), (64, 4, 64), (8, 8, 256)):
        cfg = base_config(kv_dtype, hq, hkv, d, cluster=cluster, push=push)
        case = make_case(lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=16, kv_dtype=kvt,
                         combined=True, extra_pages=50, width=1400, device=DEV, seed=hq + d)  # fmt: skip
        plan = cluster_plan(case, kv_dtype, cfg, max_batch=16)
        sinks = torch.randn(hq, device=DEV) * 3
        for window_left in (-1, 0, 100, 4096):
            run_checked(plan, case, window_left=window_left, sinks=sinks)


@PUSH
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("cluster", [4, 8, 16])
def test_cluster_graph_replay_with_new_lengths(kv_dtype, cluster, push):
    """CUDA-graph replay with new lengths (empty requests included) each step: the grid (B x C rows in
    clusters of C) is the schedule, so the replay equals eager and the reference."""
    full = make_case([32000] * 16, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), width=2100, device=DEV, seed=10 + cluster)  # fmt: skip
    plan = cluster_plan(full, kv_dtype, base_config(kv_dtype, cluster=cluster, push=push))
    replay_with_new_lengths(plan, full, seed=cluster, steps=3)


@PUSH
def test_cluster_b1_graph_replays_agree(push):
    """The bench's B = 1 shape (1024 keys, 8 KV heads, cluster 8: 8 chunks of 128, one sub-tile a
    warp) replayed 20 times on poisoned outputs: every replay bit-equal to the first and close to the
    reference."""
    case = make_case([1024], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=torch.bfloat16,
                     device=DEV, seed=1)  # fmt: skip
    check_graph_replays(case, cluster_plan(case, "bfloat16", base_config("bfloat16", cluster=8, push=push)))


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("cluster", [2, 8, 16])
@pytest.mark.parametrize("lens", ["b1-1k", "b1-8k", "b1-33", "b1-0", "b4-ragged"])
def test_cluster_push_bit_equals_pull(kv_dtype, cluster, lens):
    """Push and pull on the same inputs (with and without sinks): the same split, partial rows and
    combine order, so outputs and LSEs are bit-equal, and both pass the reference (`run_checked`).
    b1-33: one rank's chunk is a partial tile, the others empty (not a multiple of the chunk)."""
    case = make_case(LENS[lens], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens) + 7 * cluster)  # fmt: skip
    pull = base_config(kv_dtype, cluster=cluster)
    push = dataclasses.replace(pull, cluster_push=True)
    plans = {cfg: cluster_plan(case, kv_dtype, cfg) for cfg in (pull, push)}
    for sinks in (None, torch.randn(32, device=DEV) * 3):
        (out_a, lse_a), (out_b, lse_b) = (run_checked(plans[cfg], case, sinks=sinks) for cfg in (pull, push))
        assert torch.equal(out_a, out_b), (out_a.float() - out_b.float()).abs().max()
        assert torch.equal(lse_a.nan_to_num(), lse_b.nan_to_num())
