"""attention.paged on the GPU: kernels against the fp32 reference on NaN-poisoned buffers, the device
schedule against its Python mirror, CUDA-graph replay with new lengths, >2^31-element caches; the
fused merge (DecodeConfig.fused_merge: the last CTA of a split request merges) on the same checks,
with its ticket counters back at zero after every run.

Tolerance (DESIGN.md): the kernel's max error against the fp32 reference is at most 2x the error of
the same computation done in torch at the kernel's precision (P rounded to the mma dtype, output
rounded to q's dtype), plus 1e-3 absolute slack; LSE (base 2) within 2e-3.
"""

import dataclasses
import math
import random

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib.arch import target_arch
from flashinfer.experimental.b12x.attention.paged._config import (
    DecodeConfig,
    ScheduleConfig,
    default_config,
    schedule_reference,
    split_schedule,
    why_not,
)
from flashinfer.experimental.b12x.attention.paged.api import Selection

from .paged_cases import check_against_reference, make_case

pytestmark = pytest.mark.gpu

paged = b12x.attention.paged
FP8 = torch.float8_e4m3fn
DEV = "cuda"


def caps_for(case, *, dtype, kv_dtype, max_batch=None, **kw):
    q = case.q
    batch = max_batch or case.cache_seqlens.shape[0]
    work = paged.default_max_work_items(batch, case.k_cache.shape[2])
    base = dict(
        device=DEV, mode="decode", dtype=dtype, kv_dtype=kv_dtype, num_q_heads=q.shape[1],
        num_kv_heads=case.k_cache.shape[2], head_dim_qk=q.shape[2], head_dim_vo=case.v_cache.shape[3],
        page_size=case.k_cache.shape[1], max_total_q=batch, max_batch=batch,
        max_page_table_width=case.page_table.shape[1], max_work_items=work,
        max_partial_rows=paged.default_max_partial_rows(work, q.shape[1]), num_cache_pages=case.k_cache.shape[0],
    )  # fmt: skip
    base.update(kw)
    return paged.Caps(**base)


_SESSION = {}


def prepared(caps, override=None):
    p = paged.plan(caps, override=override)
    if "s" not in _SESSION:
        _SESSION["s"] = b12x.PreparationSession(DEV)
    _SESSION["s"].prepare([p])
    return p


def fused(kv_dtype, head_dim=128, page_size=16, launches=2, **kw):
    """This GPU's default decode config with the fused merge (launches 2), also with the fused
    schedule (launches 1), or with the given fields."""
    base = default_config(kv_dtype, head_dim, page_size, target_arch(torch.device(DEV)))
    fields = dict(warps=base.warps, keys_per_warp=base.keys_per_warp, stages=base.stages)
    fields.update(kw)
    return DecodeConfig(**fields, fused_merge=True, fused_schedule=launches == 1)


def assert_tickets_reset(plan):
    tickets = plan.state.scratch["tickets"]
    assert not tickets.any(), f"fused-merge tickets not reset: {tickets.nonzero().tolist()[:8]}"


def poison(plan):
    for name in ("out", "lse", "partial_out", "partial_lse"):
        plan.state.scratch[name].fill_(float("nan"))
    plan.state.scratch["work"].fill_(-1)


def emulated(case, mma_dtype, out_dtype, *, window_left=-1, sinks=None):
    """The reference's math at the kernel's precision: P (normalised per row) rounded to mma_dtype."""
    outs = []
    q = case.q.float()
    cu = case.cu_seqlens_q.tolist()
    for b, (k, v) in enumerate(zip(case.k_dense, case.v_dense)):
        qb = q[cu[b] : cu[b + 1]].transpose(0, 1)  # [Hq, 1, D]
        hq, n = qb.shape[0], k.shape[0]
        g = hq // k.shape[1]
        kb = k.to(q.device).repeat_interleave(g, 1).transpose(0, 1)
        vb = v.to(q.device).repeat_interleave(g, 1).transpose(0, 1)
        s = torch.matmul(qb, kb.transpose(1, 2)) / math.sqrt(q.shape[2])
        if window_left >= 0:
            s[..., : max(0, n - 1 - window_left)] = -math.inf
        extra = sinks.float()[:, None, None] if sinks is not None else None
        m = s.amax(2, keepdim=True) if n else torch.zeros(hq, 1, 1, device=q.device)
        if extra is not None:
            m = torch.maximum(m, extra)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)
        denom = p.sum(2, keepdim=True) + (torch.exp(extra - m) if extra is not None else 0)
        p = p.to(mma_dtype).float()
        o = torch.matmul(p, vb) / torch.where(denom > 0, denom, torch.ones_like(denom))
        outs.append(o.transpose(0, 1))
    return torch.cat(outs).to(out_dtype).float()


def check(plan, case, *, window_left=-1, sinks=None, output=None):
    kv_fp8 = case.k_cache.dtype == FP8
    poison(plan)
    kw = dict(k_descale=case.k_descale, v_descale=case.v_descale) if kv_fp8 else {}
    binding = paged.bind(plan, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                         cache_seqlens=case.cache_seqlens, window_left=window_left, attention_sink_bias=sinks,
                         output=output, **kw)  # fmt: skip
    out, lse = paged.run(binding=binding)
    torch.cuda.synchronize()
    emu = emulated(case, torch.float16 if kv_fp8 else case.q.dtype, case.q.dtype, window_left=window_left, sinks=sinks)
    check_against_reference(case, out, lse, emu, window_left=window_left, sinks=sinks)
    # the device schedule is its Python mirror
    s = plan.state.scratch
    work, reqs, count = schedule_reference(
        case.cache_seqlens.tolist(), window_left, binding.work.shape[0], plan.state.selection.schedule
    )
    assert s["count"][0].item() == count
    assert s["work"][:count].tolist() == [list(w) for w in work]
    assert s["requests"][: len(reqs)].tolist() == [list(r) for r in reqs]
    assert_tickets_reset(plan)  # zero for every config: only the fused merge touches them
    return out, lse


def _lengths(batch, max_len, seed):
    """Ragged lengths: page and tile edges, short and long requests, then random ones."""
    fixed = [1, 17, 65, 1000, 4097, 16, max_len]
    rng = random.Random(seed)
    return [fixed[i] if i < len(fixed) else rng.randint(1, max_len) for i in range(batch)]


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("heads", [(8, 8), (32, 8), (64, 8)], ids=["gqa1", "gqa4", "gqa8"])
@pytest.mark.parametrize("page_size", [16, 64])
@pytest.mark.parametrize("batch,max_len", [(1, 32768), (7, 32000), (128, 4096)])
def test_decode_matches_reference(kv_dtype, heads, page_size, batch, max_len):
    lens = [32768] if batch == 1 else _lengths(batch, max_len, seed=batch + page_size)
    case = make_case(lens, num_q_heads=heads[0], num_kv_heads=heads[1], head_dim=128, page_size=page_size,
                     kv_dtype=kv_dtype, device=DEV, seed=batch)  # fmt: skip
    kvn = "float8_e4m3fn" if kv_dtype == FP8 else "bfloat16"
    check(prepared(caps_for(case, dtype="bfloat16", kv_dtype=kvn)), case)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_decode_at_page_128(kv_dtype):
    """The issue's largest page size (the tier's other cases run 16, 32 and 64): ragged requests, one of them shorter
    than a page, one a page and a key, one many pages."""
    case = make_case([3, 129, 5000, 128], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=128,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=128)  # fmt: skip
    check(prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype)), case)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("dims", [(128, 64), (64, 128), (256, 128)], ids=lambda d: f"qk{d[0]}vo{d[1]}")
@pytest.mark.parametrize("kv_lens", [[3, 129, 5000], [700] * 20 + [33000]], ids=["ragged3", "batch21"])
def test_dqk_differs_from_dv(kv_lens, dims, kv_dtype):
    """Dqk != Dv on the default plan (the larger dim's tiles; V copied at its own width): a few ragged requests
    (the small-batch tile, split over many CTAs) and 21 (the batch tiles, one request 33k keys long)."""
    case = make_case(kv_lens, num_q_heads=32, num_kv_heads=8, head_dim=dims[0], head_dim_v=dims[1], page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=sum(dims) + len(kv_lens))  # fmt: skip
    check(prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype)), case)


@pytest.mark.parametrize("head_dim", [64, 256])
@pytest.mark.parametrize("dtype,kv_dtype", [("bfloat16", "bfloat16"), ("bfloat16", "float8_e4m3fn"),
                                            ("float16", "float16"), ("float16", "float8_e4m3fn")])  # fmt: skip
def test_head_dims_and_fp16(head_dim, dtype, kv_dtype):
    kvt = getattr(torch, kv_dtype)
    case = make_case([3, 700, 129], num_q_heads=16, num_kv_heads=4, head_dim=head_dim, page_size=32,
                     dtype=getattr(torch, dtype), kv_dtype=kvt, device=DEV, seed=head_dim)  # fmt: skip
    check(prepared(caps_for(case, dtype=dtype, kv_dtype=kv_dtype)), case)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize(
    "config", [(8, 16, 2), (2, 16, 4), (4, 32, 3), (8, 16, 2, True), (2, 16, 4, True), (4, 16, 2, False, True),
               (8, 16, 3, True, True)],
    ids=["w8k16s2", "w2k16s4", "w4k32s3", "w8k16s2-fused", "w2k16s4-fused", "w4k16s2-fusedsched",
         "w8k16s3-onelaunch"],
)  # fmt: skip
def test_non_default_configs(kv_dtype, config):
    case = make_case([1, 63, 3000, 64, 129], num_q_heads=40, num_kv_heads=8, head_dim=128, page_size=64,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=sum(config))  # fmt: skip
    check(prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype, config=DecodeConfig(*config))), case)


# ---- the fp8 streaming knobs (fast_prologue, min_ctas, stages up to 6; docs/predictions/attention.md) --
STREAMING = {
    "w4s3p": DecodeConfig(4, 16, 3, True, True, fast_prologue=True),
    "w4s3l": DecodeConfig(4, 16, 3, True, True, preload_lengths=True),
    "w4s4pl-o3": DecodeConfig(4, 16, 4, True, True, fast_prologue=True, min_ctas=3, preload_lengths=True),
    "w4s3p-o3": DecodeConfig(4, 16, 3, True, True, fast_prologue=True, min_ctas=3),
    "w2s3pl-o6": DecodeConfig(2, 16, 3, True, True, fast_prologue=True, min_ctas=6, preload_lengths=True),
    "w2s4p": DecodeConfig(2, 16, 4, True, True, fast_prologue=True),
    "w4s6pl": DecodeConfig(4, 16, 6, True, True, fast_prologue=True, preload_lengths=True),
    "w4s5p": DecodeConfig(4, 16, 5, True, True, fast_prologue=True),
    "w8s3p-3launch": DecodeConfig(8, 16, 3, fast_prologue=True, preload_lengths=True),  # l: a no-op here
    # 32 keys a warp on 16-key pages: each sub-tile spans two pages (two page-table reads, two copies)
    "w4k32s3pl": DecodeConfig(4, 32, 3, True, True, fast_prologue=True, preload_lengths=True),
    "w4k32s2": DecodeConfig(4, 32, 2, True, True),
    "w2k32s3pl-3launch": DecodeConfig(2, 32, 3, fast_prologue=True, preload_lengths=True),
    # the fused merge folding 8 (4) items a warp per batch of loads; ragged item counts exercise the tail
    "w4s3pl-u8": DecodeConfig(4, 16, 3, True, True, True, 0, True, merge_unroll=8),
    "w4k32s3pl-u4": DecodeConfig(4, 32, 3, True, True, True, 0, True, merge_unroll=4),
    # direct items (no scan when nothing splits: B=128 here; B=1, 8 take the scan)
    "w4s3pld": DecodeConfig(4, 16, 3, True, True, True, 0, True, direct_items=True),
    "w4k32s3pld-u8": DecodeConfig(4, 32, 3, True, True, True, 0, True, merge_unroll=8, direct_items=True),
}


def streaming_plan(case, kv_dtype, cfg, target=None, **kw):
    """A plan running `cfg` exactly (an override: the heuristic path would fit keys_per_warp to the
    page) with `split_schedule`'s split for it on this GPU (target: its target_items instead)."""
    dev = torch.device(DEV)
    d, hkv = case.q.shape[2], case.k_cache.shape[2]
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    sched = split_schedule(cfg, kv_dtype, d, hkv, sms, target_arch(dev))
    if target is not None:
        sched = ScheduleConfig(sched.tile_keys, target, sched.min_chunk)
    return prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype, **kw), override=Selection(cfg, sched))


B128 = [0 if i % 11 == 3 else n for i, n in enumerate(_lengths(128, 4096, seed=128))]


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("name", list(STREAMING))
@pytest.mark.parametrize(
    "lens", [[32768], [0, 1, 17, 1000, 32768, 4097, 65, 300], B128], ids=["b1-32k", "b8-ragged", "b128-ragged"]
)
def test_streaming_configs_match_reference(kv_dtype, name, lens):
    """Each streaming config on B 1..128, lengths 0, 1, page and tile edges up to 32k, split and
    unsplit requests, NaN-poisoned outputs; the device schedule is its mirror (check)."""
    case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens) + len(name))  # fmt: skip
    plan = streaming_plan(case, kv_dtype, STREAMING[name])
    assert plan.state.selection.decode == STREAMING[name]
    for _ in range(2):  # the second run merges only if the first reset the tickets
        check(plan, case)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("name", ["w4s4pl-o3", "w2s3pl-o6", "w4s6pl", "w4k32s3pl", "w4s3pl-u8"])
def test_streaming_configs_window_sinks_and_gqa(kv_dtype, name):
    """Sliding windows, sinks and group sizes 4, 16 and 1 (D 128, 64, 256) under the streaming knobs."""
    kvt = getattr(torch, kv_dtype)
    lens = [0, 1, 5000, 0, 33, 20000, 16, 17]
    arch = target_arch(torch.device(DEV))
    for hq, hkv, d in ((32, 8, 128), (64, 4, 64), (8, 8, 256)):
        base = STREAMING[name]  # D 256: fewer stages, then 16 keys a warp, until shared memory fits
        fits = [dataclasses.replace(base, keys_per_warp=k, stages=st) for k in (base.keys_per_warp, 16)
                for st in range(base.stages, 1, -1)]  # fmt: skip
        cfg = next(c for c in fits if why_not("bfloat16", kv_dtype, hq, hkv, d, d, 16, c, arch) is None)
        case = make_case(lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=16, kv_dtype=kvt,
                         combined=True, extra_pages=50, width=1400, device=DEV, seed=hq + d)  # fmt: skip
        plan = streaming_plan(case, kv_dtype, cfg, max_batch=16)
        sinks = torch.randn(hq, device=DEV) * 3
        for window_left in (-1, 0, 100, 4096):
            check(plan, case, window_left=window_left, sinks=sinks)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_default_switches_on_match_reference(kv_dtype, monkeypatch):
    """_config.DECODE_LATENCY_FLAGS and FP8_TWO_PAGE_TILES on (the defaults since the session-6
    sweeps): the plan's own heuristic path (no config, no override) on B 1, 8, 128; the merge keeps its
    two-item loop (merge_unroll 8 measured slower)."""
    from flashinfer.experimental.b12x.attention.paged import _config

    monkeypatch.setattr(_config, "DECODE_LATENCY_FLAGS", True)
    monkeypatch.setattr(_config, "FP8_TWO_PAGE_TILES", True)
    for lens in ([32768], [0, 1, 17, 1000, 32768, 4097, 65, 300], B128):
        case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                         kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens))  # fmt: skip
        plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype))
        decode = plan.state.selection.decode
        assert decode.fast_prologue and decode.preload_lengths and decode.direct_items and decode.merge_unroll == 2
        check(plan, case)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_min_chunk_16_key_fills_switch_matches_reference(kv_dtype, monkeypatch):
    """_config.MIN_CHUNK_16_KEY_FILLS on: the plan's own heuristic path on the small split shapes it
    changes (B=1 L=1k / 8k, B=8 L=1k: shorter items, more of them to merge) and a ragged batch."""
    from flashinfer.experimental.b12x.attention.paged import _config

    monkeypatch.setattr(_config, "MIN_CHUNK_16_KEY_FILLS", True)
    monkeypatch.setattr(_config, "SMALL_BATCH_DECODE", False)  # B = 1 keeps the config this switch changes
    monkeypatch.setattr(_config, "FP8_TILE_STAGES", 3)  # fp8's 4x32x3, whose 512-key fills the switch halves
    for lens in ([1024], [8192], [1024] * 8, [0, 1, 17, 1000, 8192, 4097, 65, 300]):
        case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                         kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens) + 3)  # fmt: skip
        plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype))
        assert plan.state.selection.schedule.min_chunk == 256
        for _ in range(2):
            check(plan, case)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_direct_items_equal_the_scan(kv_dtype):
    """direct_items with a target at or below B (nothing splits): sliding windows, sinks, empty and
    one-key requests; outputs bit-equal to the same config finding its rows by the scan, and the
    device's work rows equal the Python schedule (check)."""
    lens = [0, 1, 5000, 0, 33, 20000, 16, 17]
    case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), combined=True, extra_pages=50, width=1400, device=DEV,
                     seed=21)  # fmt: skip
    sinks = torch.randn(32, device=DEV) * 3
    scan = DecodeConfig(4, 16, 3, True, True, True, 0, True)
    direct = dataclasses.replace(scan, direct_items=True)
    plans = [streaming_plan(case, kv_dtype, c, target=len(lens) - 2, max_batch=16) for c in (scan, direct)]
    for window_left in (-1, 0, 100, 4096):
        outs = [check(p, case, window_left=window_left, sinks=sinks) for p in plans]
        assert plans[1].state.scratch["count"][0].item() == len(lens)  # one item per request
        assert torch.equal(outs[0][0], outs[1][0])
        assert torch.equal(outs[0][1].nan_to_num(), outs[1][1].nan_to_num())


def test_fast_prologue_equals_the_element_loop():
    """fast_prologue stages the same fp16 Q with the same scale: outputs bit-identical to the plain
    fp8 config on the same inputs (Q spanning many binades, so the power-of-two scale matters)."""
    case = make_case([3000, 1, 32768, 700, 0], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=FP8, device=DEV, seed=9)  # fmt: skip
    case.q.mul_(torch.exp2(torch.randint(-4, 5, case.q.shape, device=DEV)).to(case.q.dtype))
    outs = []
    for cfg in (DecodeConfig(4, 16, 3, True, True), DecodeConfig(4, 16, 3, True, True, fast_prologue=True)):
        out, lse = check(prepared(caps_for(case, dtype="bfloat16", kv_dtype="float8_e4m3fn", config=cfg)), case)
        outs.append((out.clone(), lse.clone()))
    assert torch.equal(outs[0][0], outs[1][0])
    assert torch.equal(outs[0][1].nan_to_num(), outs[1][1].nan_to_num())


def replay_with_new_lengths(plan, full, *, seed: int, steps: int) -> None:
    """Capture one decode of `full` (its requests: 16 in most callers) in a CUDA graph, then `steps` times: new lengths
    (empty requests included), poisoned outputs, replay; the tickets are back at zero, the output
    matches the reference and equals an eager run on the same binding."""
    lens = full.cache_seqlens.clone()
    binding = paged.bind(plan, q=full.q, k_cache=full.k_cache, v_cache=full.v_cache, page_table=full.page_table,
                         cache_seqlens=lens, k_descale=full.k_descale, v_descale=full.v_descale)  # fmt: skip
    paged.run(binding=binding)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        paged.run(binding=binding)
    rng = random.Random(seed)
    for step in range(steps):
        lens.copy_(torch.tensor([0 if rng.random() < 0.3 else rng.choice([1, 17, 300, 5000, 32000]) for _ in range(len(lens))],
                                dtype=torch.int32))  # fmt: skip
        poison(plan)
        graph.replay()
        torch.cuda.synchronize()
        assert_tickets_reset(plan)
        got = binding.out.clone()
        ref_out, _ = paged.paged_attention_reference(
            full.q, full.k_cache, full.v_cache, full.page_table, lens, full.cu_seqlens_q,
            k_descale=full.k_descale, v_descale=full.v_descale,
        )  # fmt: skip
        torch.testing.assert_close(got.float(), ref_out, rtol=2e-2, atol=2e-2)
        poison(plan)
        eager, _ = paged.run(binding=binding)
        torch.cuda.synchronize()
        assert torch.equal(got, eager), f"step {step}: replay differs from eager"


@pytest.mark.parametrize("name", ["w4s4pl-o3", "w2s3pl-o6", "w4k32s3pl", "w4s3pl-u8", "w4s3pld"])
def test_streaming_graph_replay_with_new_lengths(name):
    """CUDA-graph replay under the launch bound and the fast prologue: new lengths each step, the
    replay equals eager and the reference."""
    full = make_case([32000] * 16, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=FP8,
                     width=2100, device=DEV, seed=6)  # fmt: skip
    plan = streaming_plan(full, "float8_e4m3fn", STREAMING[name])
    replay_with_new_lengths(plan, full, seed=1, steps=3)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_window_sinks_views_and_empty_requests(kv_dtype):
    kvt = getattr(torch, kv_dtype)
    lens = [0, 1, 5000, 0, 33, 20000, 16, 17]
    case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=kvt,
                     combined=True, extra_pages=50, width=1400, device=DEV, seed=11)  # fmt: skip
    plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype, max_batch=16))
    sinks = torch.randn(32, device=DEV) * 3
    for window_left in (-1, 0, 100, 4096):
        check(plan, case, window_left=window_left, sinks=sinks)
    # a caller-provided, strided output
    big = torch.full((8, 40, 128), float("nan"), dtype=torch.bfloat16, device=DEV)
    out, _ = check(plan, case, output=big[:, 4:36])
    assert out.data_ptr() == big[:, 4:36].data_ptr() and torch.isnan(big[:, :4]).all()


# ---- the fused merge --------------------------------------------------------------------------
B70 = [0 if i % 9 == 4 else n for i, n in enumerate(_lengths(70, 32000, seed=70))]  # 3 scan steps of 32


@pytest.mark.parametrize("launches", [2, 1], ids=["fused-merge", "one-launch"])
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize(
    "lens",
    [[32768], [0, 1, 20000], [1, 0, 17, 1000, 32768, 4097, 65, 300], B70],
    ids=["b1-32k", "b3-ragged", "b8-ragged", "b70-ragged"],
)  # fmt: skip
def test_fused_merge_matches_reference(kv_dtype, lens, launches):
    """B in {1, 3, 8, 70}, empty and one-key requests, up to 32k keys; the tickets are zero after
    each of two runs (the second run merges only if the first reset them)."""
    case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens))  # fmt: skip
    decode = fused(kv_dtype, launches=launches)
    # A split target above B, so every case splits (the heuristic's one-wave target, 33 items on the
    # H200, leaves B = 70 unsplit): the work list holds B + target rows.
    target = 2 * len(lens) + 32
    work = len(lens) + target
    caps = caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype, config=decode, max_work_items=work,
                    max_partial_rows=paged.default_max_partial_rows(work, 32))  # fmt: skip
    plan = prepared(caps, override=Selection(decode, ScheduleConfig(decode.tile_keys, target, 256)))
    assert len(plan.state.kernels) == launches  # no merge launch (nor a schedule launch)
    for _ in range(2):
        check(plan, case)
    assert plan.state.scratch["count"][0].item() > len(lens)  # really split


@pytest.mark.parametrize("launches", [2, 1], ids=["fused-merge", "one-launch"])
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_fused_merge_window_sinks_and_gqa(kv_dtype, launches):
    kvt = getattr(torch, kv_dtype)
    lens = [0, 1, 5000, 0, 33, 20000, 16, 17]
    for hq, hkv, d in ((32, 8, 128), (64, 4, 64), (8, 8, 256)):  # G 4, 16 (four merge passes), 1
        case = make_case(lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=16, kv_dtype=kvt,
                         combined=True, extra_pages=50, width=1400, device=DEV, seed=hq + d)  # fmt: skip
        config = fused(kv_dtype, d, launches=launches)
        plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype, max_batch=16, config=config))
        sinks = torch.randn(hq, device=DEV) * 3
        for window_left in (-1, 0, 100, 4096):
            check(plan, case, window_left=window_left, sinks=sinks)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_fused_merge_equals_separate_merge(kv_dtype):
    """Same partial rows, same PartialMerge (4 warps both): the fused and the separate merge agree."""
    case = make_case([3000, 1, 32768, 700], num_q_heads=32, num_kv_heads=8, head_dim=128, device=DEV,
                     kv_dtype=getattr(torch, kv_dtype), seed=4)  # fmt: skip
    sinks = torch.randn(32, device=DEV)
    cfg = fused(kv_dtype, warps=4)
    separate = DecodeConfig(cfg.warps, cfg.keys_per_warp, cfg.stages)
    outs = [check(prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype, config=c)), case, sinks=sinks)
            for c in (separate, cfg)]  # fmt: skip
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=0, atol=1e-2)
    torch.testing.assert_close(outs[1][1], outs[0][1], rtol=0, atol=1e-5)


@pytest.mark.parametrize("launches", [3, 2, 1], ids=["merge", "fused", "one-launch"])
@pytest.mark.parametrize("copy_runtime_metadata", [False, True])
def test_graph_replay_with_new_lengths_equals_eager(copy_runtime_metadata, launches):
    cap_batch, hq, hkv, page, width = 16, 32, 8, 16, 2100
    full = make_case([32000] * cap_batch, num_q_heads=hq, num_kv_heads=hkv, head_dim=128, page_size=page,
                     kv_dtype=FP8, width=width, device=DEV, seed=5)  # fmt: skip
    config = fused("float8_e4m3fn", launches=launches) if launches < 3 else None
    plan = prepared(
        caps_for(
            full, dtype="bfloat16", kv_dtype="float8_e4m3fn", copy_runtime_metadata=copy_runtime_metadata, config=config
        )  # fmt: skip
    )
    lens = full.cache_seqlens.clone()
    q = full.q.clone()
    binding = paged.bind(plan, q=q, k_cache=full.k_cache, v_cache=full.v_cache, page_table=full.page_table,
                         cache_seqlens=lens, k_descale=full.k_descale, v_descale=full.v_descale)  # fmt: skip
    paged.run(binding=binding)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # captures on its own side stream, torch's current one inside
        paged.run(binding=binding)
    rng = random.Random(0)
    for step in range(4):
        # new live lengths: a different mix of long, short and empty (= padding) requests each step
        new = [0 if rng.random() < 0.3 else rng.choice([1, 17, 300, 5000, 32000]) for _ in range(cap_batch)]
        lens.copy_(torch.tensor(new, dtype=torch.int32))
        q.copy_(torch.randn_like(q, dtype=torch.float32).to(q.dtype))
        poison(plan)
        graph.replay()
        torch.cuda.synchronize()
        assert_tickets_reset(plan)  # the next replay's merges depend on it
        got_out, got_lse = binding.out.clone(), binding.lse.clone()
        poison(plan)
        eager_out, eager_lse = paged.run(binding=binding)
        torch.cuda.synchronize()
        assert_tickets_reset(plan)
        assert torch.equal(got_out, eager_out), f"step {step}: replay differs from eager"
        assert torch.equal(got_lse.nan_to_num(), eager_lse.nan_to_num())
        ref_out, ref_lse = paged.paged_attention_reference(
            q, full.k_cache, full.v_cache, full.page_table, lens, full.cu_seqlens_q,
            k_descale=full.k_descale, v_descale=full.v_descale,
        )  # fmt: skip
        torch.testing.assert_close(got_out.float(), ref_out, rtol=2e-2, atol=2e-2)
        empty = lens == 0
        assert torch.all(got_out[empty] == 0) and torch.all(got_lse[empty] == -math.inf)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_cache_past_2_31_elements(kv_dtype):
    """Pages beyond element offset 2^31 (in the kernel's element units) are read correctly."""
    kvt = getattr(torch, kv_dtype)
    hkv, d, page = 8, 128, 16
    per_page = page * hkv * d // (2 if kvt == FP8 else 1)  # kernel elements (fp8: fp16 view)
    first = 2**31 // per_page + 10
    pages = first + 128
    need = 2 * pages * page * hkv * d * kvt.itemsize
    free, _ = torch.cuda.mem_get_info()
    if need > free * 0.8:
        pytest.skip(f"needs {need / 2**30:.1f} GiB for the two caches, {free / 2**30:.1f} GiB free")
    small = make_case([1000, 17], num_q_heads=32, num_kv_heads=hkv, head_dim=d, page_size=page, kv_dtype=kvt,
                      device=DEV, seed=9)  # fmt: skip
    k = torch.empty(pages, page, hkv, d, dtype=kvt, device=DEV)
    v = torch.empty_like(k)
    pt = small.page_table.clone()
    used = (small.cache_seqlens.cpu() + page - 1) // page
    for b in range(2):
        for i in range(int(used[b])):
            dst = first + 64 * b + i  # every page of these requests lies past 2^31 elements
            k[dst] = small.k_cache[small.page_table[b, i]]
            v[dst] = small.v_cache[small.page_table[b, i]]
            pt[b, i] = dst
    assert k[first].data_ptr() - k.data_ptr() >= 2**31 * (kvt.itemsize if kvt != FP8 else 2)
    small.k_cache, small.v_cache, small.page_table = k, v, pt
    check(prepared(caps_for(small, dtype="bfloat16", kv_dtype=kv_dtype)), small)
    del k, v
    torch.cuda.empty_cache()


def test_frozen_resolution_still_runs_prepared_plans():
    case = make_case([100, 3], num_q_heads=8, num_kv_heads=2, head_dim=128, device=DEV, seed=2)
    plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype="bfloat16"))
    b12x.freeze_kernel_resolution("test")
    try:
        check(plan, case)
        other = paged.plan(caps_for(case, dtype="bfloat16", kv_dtype="bfloat16", page_size=64, num_cache_pages=8))
        with pytest.raises(b12x.KernelResolutionFrozenError):
            b12x.PreparationSession(DEV).prepare([other])
    finally:
        b12x.unfreeze_kernel_resolution()
