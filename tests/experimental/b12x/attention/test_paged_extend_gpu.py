"""attention.paged extend / verify on the GPU: the extend kernel against the fp32 reference on
NaN-poisoned buffers, the device tile schedule against its Python mirror, CUDA-graph replay with new
live q_lens / KV lengths, a >2^31-element cache.

Tolerance (DESIGN.md): max error against the fp32 reference at most 2x the error of the same
computation done in torch at the kernel's precision (P rounded to the mma dtype, output rounded to
q's dtype), plus 1e-3 absolute slack; LSE (base 2) within 2e-3.
"""

import dataclasses
import math
import random

import pytest
import torch

import b12x
from flashinfer.experimental.b12x.attention.paged._config import ExtendConfig, extend_schedule_reference
from flashinfer.experimental.b12x.attention.paged._config_extend import (
    dual_extend_schedule_reference,
    rank_class,
    ranked_extend_schedule_reference,
)
from flashinfer.experimental.b12x.attention.paged.reference import head_chunks, visible_mask

from .paged_cases import check_against_reference, make_case
from .test_paged_extend_compile import WIDE
from .test_paged_gpu import DEV, FP8, prepared

pytestmark = pytest.mark.gpu

paged = b12x.attention.paged


def caps_for(case, *, mode="extend", dtype="bfloat16", kv_dtype="bfloat16", max_batch=None, max_total_q=None, **kw):
    q = case.q
    base = dict(
        device=DEV, mode=mode, dtype=dtype, kv_dtype=kv_dtype, num_q_heads=q.shape[1],
        num_kv_heads=case.k_cache.shape[2], head_dim_qk=q.shape[2], head_dim_vo=case.v_cache.shape[3],
        page_size=case.k_cache.shape[1], max_total_q=max_total_q or max(q.shape[0], 1),
        max_batch=max_batch or case.cache_seqlens.shape[0], max_page_table_width=case.page_table.shape[1],
        max_work_items=1, max_partial_rows=1, num_cache_pages=case.k_cache.shape[0],
    )  # fmt: skip
    base.update(kw)
    return paged.Caps(**base)


def poison(plan):
    for name in ("out", "lse"):
        plan.state.scratch[name].fill_(float("nan"))
    plan.state.scratch["tiles"].fill_(-1)


def emulated(case, mma_dtype, out_dtype, *, window_left=-1, sinks=None):
    """The reference's math at the kernel's precision: P (relative to the row max) rounded to the
    mma dtype, the output rounded to q's dtype."""
    q = case.q.float()
    out = torch.zeros(q.shape[0], q.shape[1], case.v_cache.shape[3], device=q.device)
    cu = case.cu_seqlens_q.tolist()
    for b, (k, v) in enumerate(zip(case.k_dense, case.v_dense)):
        length = cu[b + 1] - cu[b]
        if length == 0:
            continue
        qb = q[cu[b] : cu[b + 1]].transpose(0, 1)  # [Hq, L, D]
        hq, n = qb.shape[0], k.shape[0]
        g = hq // k.shape[1]
        kb, vb = k.to(q.device).transpose(0, 1), v.to(q.device).transpose(0, 1)  # [Hkv, N, D]
        visible = visible_mask(length, n, window_left, q.device)
        # A few heads at a time, as the reference: the long cases' scores for all 64 heads at once are ~4 GB a
        # temporary, which ran the GPU tier's 25 shards out of memory (session 39).
        for hs, kv_heads in head_chunks(hq, g, length, n, kb.shape[2] + vb.shape[2], q.device):
            kh, vh = kb[kv_heads], vb[kv_heads]
            s = torch.matmul(qb[hs], kh.transpose(1, 2)) / math.sqrt(q.shape[2])
            s = s.masked_fill(~visible, -math.inf)
            rows = hs.stop - hs.start
            m = s.amax(2, keepdim=True) if n else torch.full((rows, length, 1), -math.inf, device=q.device)
            extra = sinks.float()[hs, None, None] if sinks is not None else None
            if extra is not None:
                m = torch.maximum(m, extra)
            m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            p = torch.exp(s - m)
            del s
            denom = p.sum(2, keepdim=True) + (torch.exp(extra - m) if extra is not None else 0)
            p = p.to(mma_dtype).float()
            o = torch.matmul(p, vh) / torch.where(denom > 0, denom, torch.ones_like(denom))
            out[cu[b] : cu[b + 1], hs] = o.transpose(0, 1)
    return out.to(out_dtype).float()


def check(plan, case, *, window_left=-1, sinks=None, output=None):
    kv_fp8 = case.k_cache.dtype == FP8
    poison(plan)
    kw = dict(k_descale=case.k_descale, v_descale=case.v_descale) if kv_fp8 else {}
    binding = paged.bind(plan, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                         cache_seqlens=case.cache_seqlens, cu_seqlens_q=case.cu_seqlens_q, window_left=window_left,
                         attention_sink_bias=sinks, output=output, **kw)  # fmt: skip
    out, lse = paged.run(binding=binding)
    torch.cuda.synchronize()
    emu = emulated(case, torch.float16 if kv_fp8 else case.q.dtype, case.q.dtype, window_left=window_left, sinks=sinks)
    check_against_reference(case, out, lse, emu, window_left=window_left, sinks=sinks)
    check_schedule(plan, case.cu_seqlens_q.tolist(), case.q.shape[1] // case.k_cache.shape[2])
    return out, lse


def check_schedule(plan, cu, group):
    """The device tile list (and, with the live tile choice, both kernels' counts) is its Python mirror."""
    ext = plan.state.selection.extend
    s = plan.state.scratch
    if ext.small is None and ext.ranked:  # a class's order is the device's atomics': compare classes
        tq = ext.tokens_per_tile(group)
        work, count = ranked_extend_schedule_reference(cu, tq)
        assert s["count"][0].item() == count
        got = [tuple(w) for w in s["tiles"][:count].tolist()]
        assert sorted(got) == sorted(work)
        classes = [rank_class(cu, w, tq) for w in got]
        assert classes == sorted(classes), classes
        return
    if ext.small is None:
        work, count = extend_schedule_reference(cu, ext.tokens_per_tile(group))
        assert s["count"][0].item() == count
    else:
        large, small = ext.tokens_per_tile(group), ext.small.tokens_per_tile(group)
        work, counts, _ = dual_extend_schedule_reference(cu, large, small, ext.small_below)
        assert tuple(s["count"][:2].tolist()) == counts
        count = len(work)
        hkv = plan.caps.num_kv_heads
        for k, persistent in enumerate(ext.persistent_tiles()):
            if persistent:  # one draw an item run: every (item, KV head) ran once, a dead kernel none
                assert s["count"][2 + k].item() == counts[k] * hkv, (k, s["count"].tolist(), counts)
    assert s["tiles"][:count].tolist() == [list(w) for w in work]


# q_lens / kv_lens: page and tile edges, a prefill with no prefix, empty requests, 32k caches
RAGGED = ([1, 17, 64, 300, 1000, 0, 5, 129], [1, 117, 4064, 303, 8000, 50, 21, 129])
LONG = ([64, 2048, 777], [32768, 2048, 20000])


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("heads", [(8, 8), (32, 8), (64, 8)], ids=["gqa1", "gqa4", "gqa8"])
@pytest.mark.parametrize("page_size", [16, 64])
@pytest.mark.parametrize("lens", [RAGGED, LONG], ids=["ragged", "long"])
def test_extend_matches_reference(kv_dtype, heads, page_size, lens):
    q_lens, kv_lens = lens
    case = make_case(kv_lens, q_lens, num_q_heads=heads[0], num_kv_heads=heads[1], head_dim=128,
                     page_size=page_size, kv_dtype=kv_dtype, device=DEV, seed=page_size + heads[0])  # fmt: skip
    kvn = "float8_e4m3fn" if kv_dtype == FP8 else "bfloat16"
    check(prepared(caps_for(case, kv_dtype=kvn)), case)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_extend_at_page_128(kv_dtype):
    """Page 128 (the tier's other extend cases run 16, 32 and 64): new tokens crossing a page edge and a request
    whose cache is one partial page."""
    case = make_case([700, 129, 3], [300, 129, 2], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=128,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=128)  # fmt: skip
    check(prepared(caps_for(case, kv_dtype=kv_dtype)), case)


@pytest.mark.parametrize("mode", ["extend", "verify"])
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("dims", [(128, 64), (64, 128), (256, 128)], ids=lambda d: f"qk{d[0]}vo{d[1]}")
def test_dqk_differs_from_dv(dims, kv_dtype, mode):
    """Dqk != Dv on the default plan (the larger dim's tiles; V copied at its own width, by fewer or more of the copy
    threads than K): ragged new tokens crossing page edges; verify with one q_len for every request."""
    q_lens = [300, 129, 2] if mode == "extend" else [7, 7, 7]
    case = make_case([700, 129, 9], q_lens, num_q_heads=32, num_kv_heads=8, head_dim=dims[0], head_dim_v=dims[1],
                     page_size=16, kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=sum(dims))  # fmt: skip
    check(prepared(caps_for(case, mode=mode, kv_dtype=kv_dtype)), case)


@pytest.mark.parametrize("head_dim", [64, 256])
@pytest.mark.parametrize("dtype,kv_dtype", [("bfloat16", "bfloat16"), ("bfloat16", "float8_e4m3fn"),
                                            ("float16", "float16"), ("float16", "float8_e4m3fn")])  # fmt: skip
def test_extend_head_dims_and_fp16(head_dim, dtype, kv_dtype):
    case = make_case([700, 129, 3], [300, 129, 2], num_q_heads=16, num_kv_heads=4, head_dim=head_dim, page_size=32,
                     dtype=getattr(torch, dtype), kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=head_dim)  # fmt: skip
    check(prepared(caps_for(case, dtype=dtype, kv_dtype=kv_dtype)), case)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("config", [(128, 64, 2), (32, 32, 3), (16, 128, 2), (64, 16, 3), (128, 32, 2, 2), (64, 64, 3, 2),
                                    (128, 64, 2, 1, True), (64, 64, 2, 1, True), (64, 32, 3, 2, True),
                                    (128, 64, 2, 2, True)],
                         ids=["m128n64", "m32n32s3", "m16n128", "m64n16s3", "m128n32r2", "m64n64s3r2",
                              "m128n64p", "m64n64p", "m64n32s3r2p", "m128n64r2p"])  # fmt: skip
def test_extend_non_default_configs(kv_dtype, config):
    case = make_case([3000, 64, 129, 1], [1000, 64, 2, 1], num_q_heads=40, num_kv_heads=8, head_dim=128,
                     page_size=64, kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=sum(config))  # fmt: skip
    check(prepared(caps_for(case, kv_dtype=kv_dtype, config=ExtendConfig(*config))), case)


# software-pipelined key slices (sub_tiles) and the lazy O rescale (docs/predictions/attention_extend.md)
PIPELINED = {
    "m128n64r2ps2": ExtendConfig(128, 64, 2, 2, True, sub_tiles=2),
    "m128n64r2ps2l8": ExtendConfig(128, 64, 2, 2, True, sub_tiles=2, lazy_rescale=8),
    "m128n32r2l8": ExtendConfig(128, 32, 2, 2, lazy_rescale=8),
    "m64n64s4": ExtendConfig(64, 64, 2, 1, sub_tiles=4),
    "m128n32s3r2pc": ExtendConfig(128, 32, 3, 2, True, cross_tile=True),
}


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("layout", [(16, (32, 8)), (64, (64, 8))], ids=["page16-gqa4", "page64-gqa8"])
@pytest.mark.parametrize("name", sorted(PIPELINED))
def test_extend_pipelined_variants(name, layout, kv_dtype):
    """Ragged causal requests (prefix-free prefills, long prefixes, empty and one-token requests)."""
    page_size, heads = layout
    q_lens, kv_lens = RAGGED
    case = make_case(kv_lens, q_lens, num_q_heads=heads[0], num_kv_heads=heads[1], head_dim=128,
                     page_size=page_size, kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=page_size + len(name))  # fmt: skip
    plan = prepared(caps_for(case, kv_dtype=kv_dtype, config=PIPELINED[name]))
    check(plan, case)
    if name in ("m128n64r2ps2l8", "m128n32s3r2pc"):  # the masked bodies with a window and sinks
        check(plan, case, window_left=100, sinks=torch.randn(heads[0], device=DEV) * 3)


# 256-row CTAs (8 warps) and stagger (the second warp group's PV one step late; docs/predictions/
# attention_extend.md): every case checked plain and with a window and sinks (the masked tiles)
# WIDE (imported above from test_paged_extend_compile): one list, compiled on the CPU and run here
WIDE_CASES = [  # batch (-k "wideN": four compiles each, < 150 s), name, kv dtype, (Hq, Hkv), page size
    (1, "m256n64s3r2pg", "bfloat16", (8, 8), 16),
    (1, "m256n64s3r2pg", "bfloat16", (32, 8), 16),
    (1, "m256n64s3r2pg", "bfloat16", (64, 8), 64),
    (1, "m256n64s3r2pg", "float8_e4m3fn", (32, 8), 16),
    (2, "m256n64s3r2pgi", "bfloat16", (8, 8), 16),
    (2, "m256n64s3r2pgi", "bfloat16", (32, 8), 16),
    (2, "m256n64s3r2pgi", "float8_e4m3fn", (64, 8), 64),
    (2, "m256n64s4r2pgi", "bfloat16", (64, 8), 16),
    (3, "m256n64s4r2pgi", "float8_e4m3fn", (32, 8), 16),
    (3, "m256n64s4r2pg", "bfloat16", (32, 8), 16),
    (3, "m256n64s4r2pg", "float8_e4m3fn", (8, 8), 64),
    (3, "m256n64r2p", "bfloat16", (32, 8), 16),
    (4, "m256n64r2p", "float8_e4m3fn", (64, 8), 16),
    (4, "m256n64s3r2p", "bfloat16", (40, 8), 64),  # G 5: a padding row
    (4, "m128n32s3pg", "bfloat16", (32, 8), 16),
    (4, "m128n32s3pg", "float8_e4m3fn", (8, 8), 64),
    (5, "m128n64r2pw", "bfloat16", (32, 8), 16),
    (5, "m128n64r2pw", "bfloat16", (8, 8), 64),
    (5, "m128n64r2pw", "float8_e4m3fn", (32, 8), 16),
    (5, "m256n64s3r2pgiw", "bfloat16", (32, 8), 16),
    (6, "m256n64s3r2pgiwe", "bfloat16", (32, 8), 16),  # session 8: early_pages (window 100: its fallback)
    (6, "m256n64s3r2pgiwe", "bfloat16", (8, 8), 64),
    (6, "m256n64s3r2pgiwe", "float8_e4m3fn", (32, 8), 16),
    (7, "m256n64s3r2pgiwek", "bfloat16", (32, 8), 16),  # the ranked list (and early_pages)
    (7, "m256n64s3r2pgiwek", "float8_e4m3fn", (8, 8), 64),
]


@pytest.mark.parametrize("batch,name,kv_dtype,heads,page_size", WIDE_CASES,
                         ids=[f"wide{g}-{n}-{'fp8' if 'float8' in k else 'bf16'}-h{h[0]}-p{p}"
                              for g, n, k, h, p in WIDE_CASES])  # fmt: skip
def test_extend_wide_and_staggered(batch, name, kv_dtype, heads, page_size):
    """Ragged requests from 1 to 4096 query tokens (empty ones, a 4096-token prefill without prefix,
    an 8000-key prefix), against the reference at the kernel's precision."""
    q_lens, kv_lens = [1, 17, 64, 300, 1000, 0, 5, 129, 4096], [1, 117, 4064, 303, 8000, 50, 21, 129, 4096]
    case = make_case(kv_lens, q_lens, num_q_heads=heads[0], num_kv_heads=heads[1], head_dim=128,
                     page_size=page_size, kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=heads[0] + page_size)  # fmt: skip
    plan = prepared(caps_for(case, kv_dtype=kv_dtype, config=WIDE[name]))
    check(plan, case)
    check(plan, case, window_left=100, sinks=torch.randn(heads[0], device=DEV) * 3)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_extend_window_sinks_views_and_empty_requests(kv_dtype):
    q_lens = [0, 1, 700, 0, 33, 2000, 16, 17]
    kv_lens = [0, 1, 5000, 9, 33, 20000, 16, 17]
    case = make_case(kv_lens, q_lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), combined=True, extra_pages=50, width=1400, device=DEV,
                     seed=11)  # fmt: skip
    plan = prepared(caps_for(case, kv_dtype=kv_dtype, max_batch=16, max_total_q=4096))
    sinks = torch.randn(32, device=DEV) * 3
    for window_left in (-1, 0, 100, 4096):
        check(plan, case, window_left=window_left, sinks=sinks)
    total = case.q.shape[0]
    big = torch.full((total, 40, 128), float("nan"), dtype=torch.bfloat16, device=DEV)
    out, _ = check(plan, case, output=big[:, 4:36])
    assert out.data_ptr() == big[:, 4:36].data_ptr() and torch.isnan(big[:, :4]).all()


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_verify_gqa1_page64_window_and_sinks(kv_dtype):
    """Verify at the issue's other points (the tier had GQA 4 / 8 at page 16 only): GQA 1 at page 64, 64 requests of
    5 draft tokens, with a sliding window and sink logits."""
    rng = random.Random(64)
    kv_lens = [5, 64, 65, 20000, *[rng.randint(5, 5000) for _ in range(60)]]
    case = make_case(kv_lens, [5] * len(kv_lens), num_q_heads=16, num_kv_heads=16, head_dim=128, page_size=64,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=64)  # fmt: skip
    sinks = torch.randn(16, device=DEV, generator=torch.Generator(device=DEV).manual_seed(5))
    check(prepared(caps_for(case, mode="verify", kv_dtype=kv_dtype)), case, window_left=300, sinks=sinks)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("q_len", [2, 4, 16])
@pytest.mark.parametrize("heads", [(32, 8), (64, 8)], ids=["gqa4", "gqa8"])
def test_verify_matches_reference(kv_dtype, q_len, heads):
    rng = random.Random(q_len)
    kv_lens = [q_len, q_len + 15, 4096, 32768, *[rng.randint(q_len, 9000) for _ in range(28)]]
    case = make_case(kv_lens, [q_len] * len(kv_lens), num_q_heads=heads[0], num_kv_heads=heads[1], head_dim=128,
                     page_size=16, kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=q_len)  # fmt: skip
    check(prepared(caps_for(case, mode="verify", kv_dtype=kv_dtype)), case)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("mode", ["extend", "verify"])
def test_128_requests(kv_dtype, mode):
    """The issue's batch range up to 128 (the cases above stop at 32 requests): ragged short queries (extend: 1 to 9
    new tokens, some requests without any; verify: 4 draft tokens each) over caches of 4 to 3000 keys, GQA 4,
    pages of 64."""
    rng = random.Random(128 + len(mode))
    q_lens = [4] * 128 if mode == "verify" else [rng.choice([0, 1, 1, 2, 5, 9]) for _ in range(128)]
    kv_lens = [max(q, rng.randint(4, 3000)) for q in q_lens]
    case = make_case(kv_lens, q_lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=64,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=128)  # fmt: skip
    check(prepared(caps_for(case, mode=mode, kv_dtype=kv_dtype)), case)


@pytest.mark.parametrize("copy_runtime_metadata", [False, True])
def test_graph_replay_with_new_lengths_equals_eager(copy_runtime_metadata):
    cap_batch, hq, hkv, page, width, max_q = 8, 32, 8, 16, 2100, 4096
    q_lens = [max_q // cap_batch] * cap_batch
    full = make_case([32000] * cap_batch, q_lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=128, page_size=page,
                     kv_dtype=FP8, width=width, device=DEV, seed=5)  # fmt: skip
    plan = prepared(caps_for(full, kv_dtype="float8_e4m3fn", copy_runtime_metadata=copy_runtime_metadata))
    lens, cu, q = full.cache_seqlens.clone(), full.cu_seqlens_q.clone(), full.q.clone()
    binding = paged.bind(plan, q=q, k_cache=full.k_cache, v_cache=full.v_cache, page_table=full.page_table,
                         cache_seqlens=lens, cu_seqlens_q=cu, k_descale=full.k_descale,
                         v_descale=full.v_descale)  # fmt: skip
    paged.run(binding=binding)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        paged.run(binding=binding)
    rng = random.Random(0)
    for step in range(4):
        # new live sizes: ragged q_lens (some empty) summing to <= the captured rows, new KV lengths
        new_q = [0 if rng.random() < 0.25 else rng.choice([1, 7, 64, 300, 511]) for _ in range(cap_batch)]
        new_kv = [n + rng.choice([0, 1, 100, 5000, 31000 - n]) for n in new_q]
        new_cu = [0, *torch.tensor(new_q).cumsum(0).tolist()]
        lens.copy_(torch.tensor(new_kv, dtype=torch.int32))
        cu.copy_(torch.tensor(new_cu, dtype=torch.int32))
        q.copy_(torch.randn_like(q, dtype=torch.float32).to(q.dtype))
        live = new_cu[-1]
        poison(plan)
        graph.replay()
        torch.cuda.synchronize()
        got_out, got_lse = binding.out[:live].clone(), binding.lse[:live].clone()
        poison(plan)
        eager_out, eager_lse = paged.run(binding=binding)
        torch.cuda.synchronize()
        assert torch.equal(got_out, eager_out[:live]), f"step {step}: replay differs from eager"
        assert torch.equal(got_lse, eager_lse[:live])
        assert not torch.isnan(got_out).any() and not torch.isnan(got_lse).any()
        if not live:
            continue
        ref_out, ref_lse = paged.paged_attention_reference(
            q[:live], full.k_cache, full.v_cache, full.page_table, lens, cu,
            k_descale=full.k_descale, v_descale=full.v_descale,
        )  # fmt: skip
        torch.testing.assert_close(got_out.float(), ref_out, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(got_lse, ref_lse, rtol=0, atol=2e-3)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_extend_cache_past_2_31_elements(kv_dtype):
    """Pages beyond element offset 2^31 (in the kernel's element units) are read correctly."""
    kvt = getattr(torch, kv_dtype)
    hkv, d, page = 8, 128, 16
    per_page = page * hkv * d // (2 if kvt == FP8 else 1)
    first = 2**31 // per_page + 10
    pages = first + 128
    need = 2 * pages * page * hkv * d * kvt.itemsize
    free, _ = torch.cuda.mem_get_info()
    if need > free * 0.8:
        pytest.skip(f"needs {need / 2**30:.1f} GiB for the two caches, {free / 2**30:.1f} GiB free")
    small = make_case([1000, 17], [300, 17], num_q_heads=32, num_kv_heads=hkv, head_dim=d, page_size=page,
                      kv_dtype=kvt, device=DEV, seed=9)  # fmt: skip
    k = torch.empty(pages, page, hkv, d, dtype=kvt, device=DEV)
    v = torch.empty_like(k)
    pt = small.page_table.clone()
    used = (small.cache_seqlens.cpu() + page - 1) // page
    for b in range(2):
        for i in range(int(used[b])):
            dst = first + 64 * b + i
            k[dst] = small.k_cache[small.page_table[b, i]]
            v[dst] = small.v_cache[small.page_table[b, i]]
            pt[b, i] = dst
    small.k_cache, small.v_cache, small.page_table = k, v, pt
    check(prepared(caps_for(small, kv_dtype=kv_dtype)), small)
    del k, v
    torch.cuda.empty_cache()


# the live tile choice (ExtendConfig.small, _kernel_extend_schedule): the sm_90a candidate default
# (256-row large tile, 128-row small tile) with a threshold of 200 tokens, so both sides are small cases
DUAL = ExtendConfig(256, 64, 3, 2, True, stagger=True, split_issue=True, wide_copy=True,
                    small=ExtendConfig(128, 64, 2, 2, True), small_below=200)  # fmt: skip
CHOICE_STEPS = [  # live q_lens (sum <= 2048 captured rows); token-weighted mean q_len sum L^2 / sum L vs 200
    [0, 150, 7, 250, 0, 64, 199, 1],  # 191.9: small
    [400, 250, 0, 0, 512, 211, 64, 300],  # 358.8: large
    [199] * 8,  # small
    [200] * 8,  # at the threshold: large
    [1, 0, 0, 0, 0, 0, 0, 2000],  # 1999.0: large (one long request, one one-token)
    [0, 0, 0, 0, 0, 0, 0, 0],  # nothing live: no row written
    [17, 33, 0, 5, 0, 0, 64, 129],  # 89.3: small
    [0, 150, 7, 300, 0, 64, 199, 1],  # 216.7: large
]


CHOICE_CASES = [  # kv dtype, (Hq, Hkv), launch: -k "choice and <id>" runs two extend compiles (< 150 s)
    ("bfloat16", (32, 8), "both"), ("bfloat16", (32, 8), "ifnode"), ("bfloat16", (32, 8), "overlap"),
    ("bfloat16", (64, 8), "both"), ("bfloat16", (64, 8), "ifnode"),
    ("float8_e4m3fn", (32, 8), "both"), ("float8_e4m3fn", (32, 8), "ifnode"),
    ("float8_e4m3fn", (64, 8), "both"), ("float8_e4m3fn", (64, 8), "ifnode"), ("float8_e4m3fn", (64, 8), "overlap"),
    # session 8: the small kernel first, persistent (r: the small one, R: both), with / without overlap
    ("bfloat16", (32, 8), "first-pdl-r1"), ("bfloat16", (64, 8), "first-r1"), ("bfloat16", (32, 8), "r2"),
    ("bfloat16", (32, 8), "pdl-r2"), ("float8_e4m3fn", (32, 8), "first-pdl-r1"), ("float8_e4m3fn", (64, 8), "r2"),
    ("bfloat16", (32, 8), "early-first-pdl-r1"),  # the large tile with early_pages
    ("bfloat16", (32, 8), "launch-first-pdl-r1"), ("float8_e4m3fn", (64, 8), "launch-r1"),  # early_launch
    ("bfloat16", (32, 8), "cand"), ("float8_e4m3fn", (32, 8), "cand"),  # '...pgiwe+128x64x2x2pe@200oslr'
]  # fmt: skip
LAUNCHES = {  # launch id -> the dual config's fields besides the tiles (bench tails @N, o, c, osr, sr, R, oR)
    "both": {}, "ifnode": dict(conditional=True), "overlap": dict(overlap=True),
    "first-pdl-r1": dict(overlap=True, small_first=True, persistent=1), "first-r1": dict(small_first=True, persistent=1),
    "r2": dict(persistent=2), "pdl-r2": dict(overlap=True, persistent=2),
    "early-first-pdl-r1": dict(early_pages=True, overlap=True, small_first=True, persistent=1),
    "launch-first-pdl-r1": dict(early_launch=True, overlap=True, small_first=True, persistent=1),
    "launch-r1": dict(early_launch=True, persistent=1),  # the large kernel waits, the small one follows
    "cand": dict(early_pages=True, small=dataclasses.replace(DUAL.small, early_pages=True), overlap=True,
                 small_first=True, early_launch=True, persistent=1),  # every session-8 option at once
}  # fmt: skip


@pytest.mark.parametrize("masking", ["plain", "window-sinks"])
@pytest.mark.parametrize("kv_dtype,heads,launch", CHOICE_CASES,
                         ids=[f"{'fp8' if 'float8' in k else 'bf16'}-gqa{h[0] // h[1]}-{m}" for k, h, m in CHOICE_CASES])  # fmt: skip
def test_live_tile_choice_in_one_graph(kv_dtype, heads, launch, masking):
    """One captured graph (schedule + both kernels; ifnode: each kernel in a CUDA-graph if-node;
    overlap: the second kernel a programmatic dependent launch of the first; s: the small kernel
    first; r / R: the small / both kernels persistent, with more items than CTAs at the larger steps)
    replayed with live sizes on both sides of the threshold: the schedule's choice and counts are its
    mirror's, every live row matches the reference (and the eager run, which launches both kernels,
    bit for bit), rows past the live ones stay poisoned."""
    cap_batch, max_q, max_kv = 8, 2048, 4096
    kvt = getattr(torch, kv_dtype)
    full = make_case([max_kv] * cap_batch, [max_q // cap_batch] * cap_batch, num_q_heads=heads[0],
                     num_kv_heads=heads[1], head_dim=128, page_size=16, kv_dtype=kvt, device=DEV,
                     seed=heads[0] + len(kv_dtype))  # fmt: skip
    if launch == "ifnode" and not hasattr(torch.cuda.CUDAGraph, "begin_capture_to_if_node"):
        pytest.skip(f"torch {torch.__version__} has no CUDA-graph if-nodes (conditional falls back to both)")
    config = dataclasses.replace(DUAL, **LAUNCHES[launch])
    plan = prepared(caps_for(full, kv_dtype=kv_dtype, config=config))
    window, sinks = (100, torch.randn(heads[0], device=DEV) * 3) if masking == "window-sinks" else (-1, None)
    lens, cu, q = full.cache_seqlens.clone(), full.cu_seqlens_q.clone(), full.q.clone()
    fp8 = dict(k_descale=full.k_descale, v_descale=full.v_descale) if kvt == FP8 else {}
    binding = paged.bind(plan, q=q, k_cache=full.k_cache, v_cache=full.v_cache, page_table=full.page_table,
                         cache_seqlens=lens, cu_seqlens_q=cu, window_left=window, attention_sink_bias=sinks,
                         **fp8)  # fmt: skip
    paged.run(binding=binding)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        paged.run(binding=binding)
    rng = random.Random(len(masking))
    group = heads[0] // heads[1]
    chosen = set()
    for step, q_lens in enumerate(CHOICE_STEPS):
        kv_lens = [n + rng.choice([0, 1, 100, max_kv - n]) for n in q_lens]
        new_cu = [0, *torch.tensor(q_lens).cumsum(0).tolist()]
        lens.copy_(torch.tensor(kv_lens, dtype=torch.int32))
        cu.copy_(torch.tensor(new_cu, dtype=torch.int32))
        q.copy_(torch.randn_like(q, dtype=torch.float32).to(q.dtype))
        live = new_cu[-1]
        poison(plan)
        graph.replay()
        torch.cuda.synchronize()
        check_schedule(plan, new_cu, group)
        flags = plan.state.scratch["choice"].tolist()
        _, counts, small = dual_extend_schedule_reference(new_cu, 256 // group, 128 // group, DUAL.small_below)
        assert flags == [int(not small), int(small)], f"step {step}"
        if live:
            chosen.add(small)
        got_out, got_lse = binding.out[:live].clone(), binding.lse[:live].clone()
        assert torch.isnan(binding.out[live:]).all() and torch.isnan(binding.lse[live:]).all(), f"step {step}"
        assert not torch.isnan(got_out).any() and not torch.isnan(got_lse).any(), f"step {step} (small={small})"
        poison(plan)
        eager_out, eager_lse = paged.run(binding=binding)
        torch.cuda.synchronize()
        assert torch.equal(got_out, eager_out[:live]) and torch.equal(got_lse, eager_lse[:live]), f"step {step}"
        if not live:
            continue
        ref_out, ref_lse = paged.paged_attention_reference(
            q[:live], full.k_cache, full.v_cache, full.page_table, lens, cu, window_left=window, sinks=sinks, **fp8
        )
        tol = 3e-2 if kvt == FP8 else 2e-2
        where = lambda m, step=step: f"step {step}: {m}"  # noqa: E731
        torch.testing.assert_close(got_out.float(), ref_out, rtol=tol, atol=tol, msg=where)
        torch.testing.assert_close(got_lse, ref_lse, rtol=0, atol=2e-3, msg=where)
    assert chosen == {False, True}
