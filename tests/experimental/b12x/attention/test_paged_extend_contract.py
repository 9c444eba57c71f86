"""Contract tier for attention.paged modes extend / verify on the CPU: plan and scratch sizing, the
planned lifecycle on the reference backend, the bind checks of cu_seqlens_q (exact messages), and the
extend tile schedule's Python mirror."""

import math
import re

import pytest
import torch

import b12x
from flashinfer.experimental.b12x.attention.paged._config import (
    ExtendConfig,
    default_extend_config,
    extend_item_capacity,
    extend_schedule_reference,
    why_not_extend,
)

from .paged_cases import make_case

pytestmark = [pytest.mark.contract, pytest.mark.usefixtures("quiet_cpu_reference")]

paged = b12x.attention.paged


def caps(**kw):
    base = dict(
        device="cpu", mode="extend", dtype="bfloat16", kv_dtype="bfloat16", num_q_heads=8, num_kv_heads=2,
        head_dim_qk=64, head_dim_vo=64, page_size=16, max_total_q=64, max_batch=4, max_page_table_width=16,
        max_work_items=1, max_partial_rows=1, num_cache_pages=64,
    )  # fmt: skip
    base.update(kw)
    return paged.Caps(**base)


def prepared(c=None):
    p = paged.plan(c or caps())
    b12x.PreparationSession("cpu").prepare([p])
    return p


def test_plan_selects_the_extend_kernel_and_sizes_its_tile_list():
    for mode in ("extend", "verify"):
        p = prepared(caps(mode=mode))
        sel = p.state.selection
        assert sel.extend == default_extend_config("bfloat16", 64, "sm_120a", mode)
        assert sel.extend.block_m == (128 if mode == "extend" else 64)
        t = sel.extend.tokens_per_tile(4)  # G = 8 / 2
        assert t == sel.extend.block_m // 4
        assert p.state.scratch["tiles"].shape == (extend_item_capacity(64, 4, t), 2)
        assert "partial_out" not in p.state.scratch  # no split-KV buffers in these modes
    custom = paged.plan(caps(config=ExtendConfig(block_m=32, block_n=32)))
    assert custom != paged.plan(caps()) and hash(custom) == hash(paged.plan(caps(config=ExtendConfig(32, 32))))


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("mode", ["extend", "verify"])
def test_cpu_lifecycle_runs_the_reference(kv_dtype, mode):
    p = prepared(caps(mode=mode, kv_dtype=kv_dtype))
    q_lens = [3, 3, 3] if mode == "verify" else [0, 5, 17, 1]
    kv_lens = [9, 40, 17, 70][: len(q_lens)]
    case = make_case(kv_lens, q_lens, kv_dtype=kv_dtype, width=8, seed=4)
    sinks = torch.randn(8)
    kw = dict(k_descale=case.k_descale, v_descale=case.v_descale) if case.k_descale is not None else {}
    binding = paged.bind(p, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                         cache_seqlens=case.cache_seqlens, cu_seqlens_q=case.cu_seqlens_q,
                         attention_sink_bias=sinks, window_left=6, **kw)  # fmt: skip
    out, lse = paged.run(binding=binding)
    want_out, want_lse = paged.paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
        window_left=6, sinks=sinks, k_descale=case.k_descale, v_descale=case.v_descale,
    )  # fmt: skip
    assert out.shape == (sum(q_lens), 8, 64) and lse.shape == (sum(q_lens), 8)
    assert torch.equal(out, want_out.to(torch.bfloat16)) and torch.equal(lse, want_lse)


def _kwargs(case, **kw):
    base = dict(q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                cache_seqlens=case.cache_seqlens, cu_seqlens_q=case.cu_seqlens_q)  # fmt: skip
    base.update(kw)
    return base


def _set(t, index, value):
    t = t.clone()
    t[index] = value
    return t


def _cu(*values):
    return torch.tensor(values, dtype=torch.int32)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: dict(cu_seqlens_q=None), "cu_seqlens_q (int32 [batch + 1] = [3]) is required in mode 'extend'"),
        (lambda c: dict(cu_seqlens_q=c.cu_seqlens_q.long()), "cu_seqlens_q must be int32 [3] on cpu, got int64 [3] on cpu"),
        (lambda c: dict(cu_seqlens_q=c.cu_seqlens_q[:2]), "cu_seqlens_q must be int32 [3] on cpu, got int32 [2] on cpu"),
        (lambda c: dict(cu_seqlens_q=torch.zeros(3, 2, dtype=torch.int32)[:, 0]), "cu_seqlens_q must have a contiguous last dimension, got strides [2]"),
        (lambda c: dict(cu_seqlens_q=_cu(1, 5, 12)), "cu_seqlens_q must start at 0 and end at most at total_q=12 (rows of q), got 1 .. 12"),
        (lambda c: dict(cu_seqlens_q=_cu(0, 5, 13)), "cu_seqlens_q must start at 0 and end at most at total_q=12 (rows of q), got 0 .. 13"),
        (lambda c: dict(cu_seqlens_q=_cu(0, 13, 12)), "cu_seqlens_q must be non-decreasing, got cu_seqlens_q[1]=13 > cu_seqlens_q[2]=12"),
        (lambda c: dict(cache_seqlens=_cu(4, 60)), "cache_seqlens must include the new tokens (q_len <= cache_seqlens), got q_len 5 > cache_seqlens[0]=4"),
        (lambda c: dict(page_table=c.page_table[:, :2]), "page_table has 2 columns, request 1 needs 4 (cache_seqlens[1]=60, page_size 16)"),
        (lambda c: dict(page_table=_set(c.page_table, (1, 2), -7)),
         "page_table[1, 2] = -7 is not a page of the cache (k_cache holds 8 pages; request 1 reads its first 4 columns)"),
        (lambda c: dict(cache_seqlens=_cu(-1, 60)), "cache_seqlens must be >= 0, got cache_seqlens[0]=-1"),
        (lambda c: dict(q=torch.zeros(65, 8, 64, dtype=torch.bfloat16)), "q holds 65 rows, more than max_total_q=64"),
        (lambda c: dict(q=c.q[:, :, :32]), "q must be bfloat16 [*, 8, 64] on cpu, got bfloat16 [12, 8, 32] on cpu"),
    ],
)  # fmt: skip
def test_bind_rejects(change, message):
    p = prepared()
    case = make_case([5, 60], [5, 7])
    with pytest.raises(ValueError, match=re.escape(message)):
        paged.bind(p, **_kwargs(case, **change(case)))


def test_run_extend_runs_extend_and_verify_bindings_only():
    for mode, q_lens in (("extend", [5, 7]), ("verify", [4, 4])):
        p = prepared(caps(mode=mode))
        binding = paged.bind(p, **_kwargs(make_case([5, 60], q_lens, seed=2)))
        out, lse = paged.run_extend(binding=binding)
        want_out, want_lse = paged.run(binding=binding)
        assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
        with pytest.raises(
            ValueError,
            match=re.escape(f"run_decode runs a binding of a plan in mode decode; this one's plan has mode {mode!r}"),
        ):
            paged.run_decode(binding=binding)


def test_verify_needs_one_q_len():
    p = prepared(caps(mode="verify"))
    case = make_case([5, 60], [5, 7])
    with pytest.raises(
        ValueError, match=re.escape("verify mode: every request must have the same q_len, got q_lens [5, 7]")
    ):
        paged.bind(p, **_kwargs(case))
    same = make_case([5, 60], [4, 4])
    paged.bind(p, **_kwargs(same))


def test_padding_rows_past_the_last_request_are_left_alone():
    p = prepared()
    case = make_case([9, 40], [3, 5], seed=8)
    out = torch.full((10, 8, 64), 7.0, dtype=torch.bfloat16)
    paged.run(binding=paged.bind(p, **_kwargs(case, q=torch.cat([case.q, case.q[:2]]), output=out)))
    want, _ = paged.paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q
    )
    assert torch.equal(out[:8], want.to(torch.bfloat16)) and torch.all(out[8:] == 7.0)


def test_empty_extend_batch_is_a_no_op():
    p = prepared()
    case = make_case([5], [2])
    empty = dict(q=case.q[:0], k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table[:0],
                 cache_seqlens=case.cache_seqlens[:0], cu_seqlens_q=_cu(0))  # fmt: skip
    out, lse = paged.run(binding=paged.bind(p, **empty))
    assert out.shape == (0, 8, 64) and lse.shape == (0, 8)


# -- the extend schedule's mirror ------------------------------------------------------------------
@pytest.mark.parametrize("tokens", [1, 4, 16, 64])
def test_extend_schedule_covers_every_token_once(tokens):
    g = torch.Generator().manual_seed(tokens)
    q_lens = [0, 1, tokens - 1, tokens, tokens + 1, 4096, *torch.randint(0, 300, (20,), generator=g).tolist()]
    cu = [0, *torch.tensor(q_lens).cumsum(0).tolist()]
    work, count = extend_schedule_reference(cu, tokens)
    assert count == len(work) <= extend_item_capacity(cu[-1], len(q_lens), tokens)
    covered = {}
    for b, t0 in work:
        for t in range(t0, min(t0 + tokens, q_lens[b])):
            covered[(b, t)] = covered.get((b, t), 0) + 1
    assert covered == {(b, t): 1 for b, n in enumerate(q_lens) for t in range(n)}
    firsts = [t0 for b, t0 in work if b == 5]  # the 4096-token request: last tile first
    assert firsts == sorted(firsts, reverse=True) and len(firsts) == math.ceil(4096 / tokens)


def test_extend_schedule_treats_decreasing_rows_as_empty():
    work, count = extend_schedule_reference([0, 10, 4, 8], 4)
    assert work == [(0, 8), (0, 4), (0, 0), (2, 0)] and count == 4


# -- the benchmark's pure helpers ------------------------------------------------------------------
def test_bench_extend_helpers():
    from benchmarks.experimental.b12x import bench_attention as B

    assert [B.extend_batch(n) for n in B.EXTEND_Q_LENS] == [16, 16, 16, 8]
    assert B.extend_batch(64) == 16 and B.extend_batch(32768) == 4
    # square causal: L(L+1)/2 visible pairs; a prefix adds L * prefix pairs
    assert B.causal_flops(1, 4, 4, 1, 8, 8) == 2 * 16 * 10
    assert B.causal_flops(2, 3, 10, 32, 128, 128) == 2 * 2 * 32 * 256 * (3 * 7 + 6)
    from flashinfer.experimental.b12x.attention.paged.reference import visible_mask

    pairs = int(visible_mask(5, 12).sum())
    assert B.causal_flops(1, 5, 12, 1, 1, 1) == 2 * 2 * pairs
    args = B.parse_args(["--mode", "extend", "--q-len", "512", "4096"])
    assert args.mode == "extend" and args.q_len == [512, 4096]
    assert args.extend_configs == list(B.EXTEND_CONFIGS) and args.extend_configs[0] == "heuristic"
    for entry in B.EXTEND_CONFIGS[1:]:  # every default row is a valid config on both archs
        cfg = B.parse_extend_config(entry)
        for arch in ("sm_90a", "sm_120a"):
            assert why_not_extend("bfloat16", "bfloat16", 32, 8, 128, 128, 16, cfg, arch) is None, (entry, arch)
    assert B.parse_extend_config("128x32x2x2") == ExtendConfig(block_m=128, block_n=32, stages=2, row_blocks=2)
    assert B.parse_extend_config("64x64x2x1p") == ExtendConfig(64, 64, 2, 1, page_prefetch=True)
    assert not B.parse_extend_config("64x64x2x1").page_prefetch
    assert B.parse_extend_config("128x64x2x2ps2l8") == ExtendConfig(128, 64, 2, 2, True, sub_tiles=2, lazy_rescale=8)
    assert B.parse_extend_config("128x32x2x2l4") == ExtendConfig(128, 32, 2, 2, lazy_rescale=4)
    assert B.parse_extend_config("128x32x3x2pc") == ExtendConfig(128, 32, 3, 2, True, cross_tile=True)
    assert B.parse_extend_config("256x64x3x2pg") == ExtendConfig(256, 64, 3, 2, True, stagger=True)
    assert B.parse_extend_config("256x64x4x2pgi") == ExtendConfig(256, 64, 4, 2, True, stagger=True, split_issue=True)
    assert B.parse_extend_config("128x64x2x2pw") == ExtendConfig(128, 64, 2, 2, True, wide_copy=True)
    assert B.parse_extend_config("256x64x2x2") == ExtendConfig(256, 64, 2, 2)
    assert "stagger=True" in repr(ExtendConfig(256, 64, 3, 2, stagger=True))
    with pytest.raises(
        ValueError, match=re.escape("block_m x block_n x stages x row_blocks[p] like 128x64x2x1 (then optional")
    ):
        B.parse_extend_config("64x64")
    bad_args = (["--q-len", "100"], ["--extend-configs", "64x64"], ["--extend-configs", "48x64x2x1"],
                ["--extend-configs", "64x64x2x1q"], ["--extend-configs", "64x64x2xp"],
                ["--extend-configs", "128x64x2x2l8p"], ["--extend-configs", "128x64x2x2s3"],
                ["--extend-configs", "128x32x2x2pc"])  # fmt: skip
    for bad in bad_args:
        with pytest.raises(SystemExit):
            B.parse_args(bad)
