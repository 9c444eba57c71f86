"""The B = 1 latency knobs on the GPU (`DecodeConfig.lean_ticket`, `early_pages`; CPU tiers in
test_paged_lean.py): against the fp32 reference on NaN-poisoned buffers with the device schedule
checked against its mirror and the tickets back at zero (`check`), bit-equal to the same config
without them (they change no arithmetic), under windows / sinks / GQA, and in CUDA-graph replay with
new lengths. Configs: 8x16x2fspld (the session-9 winner) with 128-key chunks where it fits (sm_90a),
else 4x16x2fspld.
"""

import dataclasses

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch
from flashinfer.experimental.b12x.attention.paged._config import DecodeConfig, ScheduleConfig, split_schedule, why_not
from flashinfer.experimental.b12x.attention.paged.api import Selection

from .paged_cases import make_case
from .test_paged_gpu import B128, DEV, caps_for, check, paged, poison, prepared, replay_with_new_lengths

pytestmark = pytest.mark.gpu

LATENCY = dict(fused_merge=True, fused_schedule=True, fast_prologue=True, preload_lengths=True, direct_items=True)
KNOBS = {"k": dict(lean_ticket=True), "e": dict(early_pages=True), "ke": dict(lean_ticket=True, early_pages=True)}
LENS = {"b1-1k": [1024], "b1-8k": [8192], "b1-33": [33], "b8-ragged": [0, 1, 17, 1000, 32768, 4097, 65, 300],
        "b128-ragged": B128}  # fmt: skip


def base_config(kv_dtype, hq=32, hkv=8, d=128):
    """8x16x2fspld where it fits this GPU, else 4x16x2fspld."""
    arch = target_arch(torch.device(DEV))
    for warps in (8, 4, 2):
        cfg = DecodeConfig(warps, 16, 2, **LATENCY)
        if why_not("bfloat16", kv_dtype, hq, hkv, d, d, 16, cfg, arch) is None:
            return cfg
    raise AssertionError("no 16-key 2-stage config fits")


def knob_plan(case, kv_dtype, cfg, min_chunk=128, **kw):
    """`cfg` exactly (an override), `split_schedule`'s split with `min_chunk`-key shortest chunks (the
    ':m128' of the bench entries)."""
    dev = torch.device(DEV)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    sched = split_schedule(cfg, kv_dtype, case.q.shape[2], case.k_cache.shape[2], sms, target_arch(dev))
    sched = ScheduleConfig(sched.tile_keys, sched.target_items, min_chunk)
    plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype, **kw), override=Selection(cfg, sched))
    assert plan.state.selection.decode == cfg
    return plan


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("knobs", list(KNOBS))
@pytest.mark.parametrize("lens", list(LENS))
def test_knobs_match_reference_and_the_plain_config(kv_dtype, knobs, lens):
    """Each knob set on B 1..128 (split and unsplit requests, empty ones, page and chunk edges): the
    reference on poisoned outputs, twice (the second run merges only if the first reset the tickets),
    and bit-equal to the plain config on the same inputs."""
    case = make_case(LENS[lens], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens) + len(knobs))  # fmt: skip
    base = base_config(kv_dtype)
    plan = knob_plan(case, kv_dtype, dataclasses.replace(base, **KNOBS[knobs]))
    for _ in range(2):
        out, lse = check(plan, case)
    got = (out.clone(), lse.clone())
    plain_out, plain_lse = check(knob_plan(case, kv_dtype, base), case)
    assert torch.equal(got[0], plain_out), "the knobs changed the output bits"
    assert torch.equal(got[1].nan_to_num(), plain_lse.nan_to_num()), "the knobs changed the LSE bits"


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_knobs_window_sinks_and_gqa(kv_dtype):
    """Sliding windows, sinks and group sizes 4, 16 and 1 (D 128, 64, 256) with both knobs, on a strided
    (combined) cache and a page table wider than the requests (the prefetch covers all its columns)."""
    kvt = getattr(torch, kv_dtype)
    lens = [0, 1, 5000, 0, 33, 20000, 16, 17]
    for hq, hkv, d in ((32, 8, 128), (64, 4, 64), (8, 8, 256)):
        cfg = dataclasses.replace(base_config(kv_dtype, hq, hkv, d), **KNOBS["ke"])
        case = make_case(lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=16, kv_dtype=kvt,
                         combined=True, extra_pages=50, width=1400, device=DEV, seed=hq + d)  # fmt: skip
        plan = knob_plan(case, kv_dtype, cfg, max_batch=16)
        sinks = torch.randn(hq, device=DEV) * 3
        for window_left in (-1, 0, 100, 4096):
            check(plan, case, window_left=window_left, sinks=sinks)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_knobs_graph_replay_with_new_lengths(kv_dtype):
    """CUDA-graph replay with both knobs: new lengths (empty requests included) each step, the tickets
    back at zero, the replay equal to eager and to the reference."""
    full = make_case([32000] * 16, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), width=2100, device=DEV, seed=10)  # fmt: skip
    plan = knob_plan(full, kv_dtype, dataclasses.replace(base_config(kv_dtype), **KNOBS["ke"]))
    replay_with_new_lengths(plan, full, seed=2, steps=3)


def test_b1_graph_replays_agree():
    """The bench's B = 1 shape (1024 keys, 8 KV heads, 128-key chunks: 8 items a head, one sub-tile a
    warp) replayed 20 times with poisoned outputs: every replay bit-equal to the first (a ticket or
    prefetch race would show as a NaN or a changed bit)."""
    case = make_case([1024], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=torch.bfloat16,
                     device=DEV, seed=1)  # fmt: skip
    check_graph_replays(case, knob_plan(case, "bfloat16", dataclasses.replace(base_config("bfloat16"), **KNOBS["ke"])))


def check_graph_replays(case, plan, replays=20):
    """`plan` bound to `case`, captured once, replayed `replays` times on poisoned outputs: every replay
    bit-equal to the first (a ticket, prefetch or cluster race would show as a NaN or a changed bit),
    and the first close to the reference."""
    binding = paged.bind(plan, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                         cache_seqlens=case.cache_seqlens)  # fmt: skip
    paged.run(binding=binding)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        paged.run(binding=binding)
    first = None
    for _ in range(replays):
        poison(plan)
        graph.replay()
        torch.cuda.synchronize()
        out = binding.out.clone()
        assert not out.isnan().any()
        first = out if first is None else first
        assert torch.equal(out, first)
    ref, _ = paged.paged_attention_reference(case.q, case.k_cache, case.v_cache, case.page_table,
                                             case.cache_seqlens, case.cu_seqlens_q)  # fmt: skip
    torch.testing.assert_close(first.float(), ref, rtol=2e-2, atol=2e-2)
