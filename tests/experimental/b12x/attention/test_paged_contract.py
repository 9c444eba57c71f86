"""Contract tier for attention.paged on the CPU: META, caps/plan validation, the planned lifecycle on
the reference backend, and bind errors that name the argument (exact messages)."""

import dataclasses
import math
import re

import pytest
import torch

import b12x
from flashinfer.experimental.b12x.attention.paged import _bind_views
from flashinfer.experimental.b12x.attention.paged._config import DecodeConfig, ExtendConfig
from flashinfer.experimental.b12x.preparation.plan import PlanNotPreparedError

from .paged_cases import make_case

pytestmark = [pytest.mark.contract, pytest.mark.usefixtures("quiet_cpu_reference")]

paged = b12x.attention.paged


def caps(**kw):
    base = dict(
        device="cpu", mode="decode", dtype="bfloat16", kv_dtype="bfloat16", num_q_heads=8, num_kv_heads=2,
        head_dim_qk=64, head_dim_vo=64, page_size=16, max_total_q=8, max_batch=8, max_page_table_width=16,
        max_work_items=paged.default_max_work_items(8, 2), num_cache_pages=64,
    )  # fmt: skip
    base["max_partial_rows"] = paged.default_max_partial_rows(base["max_work_items"], base["num_q_heads"])
    base.update(kw)
    return paged.Caps(**base)


def prepared(c=None):
    p = paged.plan(c or caps())
    b12x.PreparationSession("cpu").prepare([p])
    return p


# -- registry and META ----------------------------------------------------------------------------
def test_meta():
    meta = b12x.find_op("attention.paged")
    assert meta.api_style == "planned" and meta.archs == ("sm_90a", "sm_120a")
    assert meta.dtypes == ("bfloat16", "float16", "float8_e4m3fn")
    assert {"Caps", "plan", "bind", "run", "run_decode", "run_extend", "is_supported", "clear_caches"} <= set(
        meta.entry_points
    )
    assert "modes decode / extend / verify" in meta.notes and "msa_block_sparse: NotImplementedError" in meta.notes
    assert paged.is_supported("cpu") is False
    assert "CPU tensors run the reference backend" in paged.why_unsupported("cpu")


def test_plan_imports_no_kernel_toolchain(run_python):
    out = run_python(
        "import sys, b12x\n"
        "from b12x.attention import paged as P\n"
        "c = P.Caps(device='cuda', mode='decode', dtype='bfloat16', kv_dtype='float8_e4m3fn', num_q_heads=32,\n"
        "  num_kv_heads=8, head_dim_qk=128, head_dim_vo=128, page_size=16, max_total_q=64, max_batch=64,\n"
        "  max_page_table_width=512, max_work_items=P.default_max_work_items(64, 8),\n"
        "  max_partial_rows=P.default_max_partial_rows(P.default_max_work_items(64, 8), 32), num_cache_pages=10**6)\n"
        "p = P.plan(c); assert p == P.plan(c) and hash(p) == hash(P.plan(c))\n"
        "assert 'cutlass' not in sys.modules, 'plan imported the CuTe DSL'\n"
    )
    assert out.returncode == 0, out.stderr


def test_capacity_helpers():
    assert paged.default_max_work_items(128, 8) == 128 + 66  # ceil(4 * 132 SMs / 8 heads)
    assert paged.default_max_work_items(1, 8, sm_count=170) == 1 + 85
    assert paged.default_max_partial_rows(194, 32) == 194 * 32


def test_caps_are_frozen_and_keyword_only():
    c = caps()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.max_batch = 3
    with pytest.raises(TypeError):
        paged.Caps("cpu", "decode")
    assert caps(dtype=torch.bfloat16, kv_dtype=torch.float8_e4m3fn).kv_dtype == "float8_e4m3fn"


# -- plan-time validation -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw, exc, message",
    [
        (dict(mode="prefill"), ValueError, "mode must be one of ('decode', 'extend', 'verify'), got 'prefill'"),
        (dict(mode="extend", config=DecodeConfig()), ValueError, "config must be an ExtendConfig or None in mode 'extend', got DecodeConfig"),
        (dict(mode="verify", config=ExtendConfig(block_m=48)), NotImplementedError, "config out of range: ExtendConfig(block_m=48"),
        (dict(mode="extend", num_q_heads=64, num_kv_heads=2), NotImplementedError, "GQA group size Hq/Hkv = 32 > 16"),
        (dict(mode="extend", max_total_q=2**20, num_q_heads=16, num_kv_heads=1, max_page_table_width=64), ValueError,
         "max_total_q=1048576 and max_batch=8 allow 131080 query tiles of 8 tokens, more than the 65535"),
        (dict(mode="extend", head_dim_qk=256, head_dim_vo=256, config=ExtendConfig(128, 128, 3)), NotImplementedError,
         "needs 459840 bytes of shared memory, sm_90a has 232448"),
        (dict(msa_block_sparse=True), NotImplementedError, "attention.paged: msa_block_sparse=True is not implemented"),
        (dict(dtype="float32", kv_dtype="float32"), ValueError, "dtype must be one of ('bfloat16', 'float16'), got 'float32'"),
        (dict(kv_dtype="float16"), ValueError, "kv_dtype must be 'bfloat16' (the q dtype) or 'float8_e4m3fn', got 'float16'"),
        (dict(num_q_heads=6, num_kv_heads=4), ValueError, "num_q_heads (6) must be a multiple of num_kv_heads (4)"),
        (dict(num_q_heads=64, num_kv_heads=2), NotImplementedError, "GQA group size Hq/Hkv = 32 > 16 is not implemented"),
        (dict(head_dim_qk=96, head_dim_vo=96), NotImplementedError, "head_dim_qk and head_dim_vo in (64, 128, 256) are implemented, got 96/96"),
        (dict(head_dim_vo=192), NotImplementedError, "got 64/192"),
        (dict(page_size=8), NotImplementedError, "page_size must be 16, 32, 64 or 128, got 8"),
        (dict(max_batch=0), ValueError, "max_batch must be an int >= 1, got 0"),
        (dict(num_cache_pages=2.5), ValueError, "num_cache_pages must be an int >= 1, got 2.5"),
        (dict(max_work_items=7), ValueError, "the work list must hold max_batch=8 items: min(max_work_items=7"),
        (dict(max_partial_rows=8 * 7), ValueError, "max_partial_rows // num_q_heads=7) is smaller"),
        (dict(max_batch=4096, max_page_table_width=65536, max_work_items=5000, max_partial_rows=40000),
         ValueError, "max_batch * max_page_table_width * page_size must be < 2^31"),
        (dict(max_page_table_width=2**27), ValueError, "max_page_table_width * page_size (the longest request) must be <= 2^30 keys"),
        (dict(max_batch=60001, max_work_items=70000, max_partial_rows=560000), ValueError,
         "max_batch must be <= 60000 (work items are a grid dimension), got 60001"),
        (dict(config="fast"), ValueError, "config must be a DecodeConfig or None, got str"),
        (dict(pdl="on"), ValueError, "pdl must be one of ('off', 'wait', 'prefetch'), got 'on'"),
        (dict(mode="extend", pdl="wait"), ValueError, "pdl='wait' is a decode launch mode; mode 'extend' needs pdl='off'"),
        (dict(pdl="prefetch", copy_runtime_metadata=True), ValueError, "copy_runtime_metadata=True copies them"),
        (dict(pdl="wait", config=DecodeConfig(pdl="prefetch", fused_schedule=True)), ValueError,
         "pdl='wait' disagrees with config.pdl='prefetch'"),
        (dict(config=DecodeConfig(pdl="prefetch")), NotImplementedError, "pdl='prefetch' needs fused_schedule=True"),
    ],
)  # fmt: skip
def test_plan_rejects(kw, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        paged.plan(caps(**kw))


def test_plan_is_pure_and_overridable():
    from flashinfer.experimental.b12x.attention.paged._config import DecodeConfig

    a, b = paged.plan(caps()), paged.plan(caps())
    assert a == b and hash(a) == hash(b) and not a.prepared
    assert paged.plan(caps(config=DecodeConfig(warps=4, keys_per_warp=16, stages=2))) != a
    with pytest.raises(ValueError, match="override must be a Selection or None, got dict"):
        paged.plan(caps(), override={})
    with pytest.raises(TypeError, match="caps must be an attention.paged Caps, got dict"):
        paged.plan({})


def _selection(decode=None, schedule=None):
    from flashinfer.experimental.b12x.attention.paged._config import ScheduleConfig
    from flashinfer.experimental.b12x.attention.paged.api import Selection

    return Selection(DecodeConfig() if decode is None else decode, ScheduleConfig() if schedule is None else schedule)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: _selection(decode=ExtendConfig()), "override.decode must be a DecodeConfig, got ExtendConfig"),
        (lambda: _selection(decode=DecodeConfig(warps=3)), "override.decode: config out of range: DecodeConfig(warps=3"),
        (lambda: _selection(decode=DecodeConfig(stages=7)), "override.decode: config out of range: DecodeConfig(warps=4, keys_per_warp=16, stages=7)"),
        (lambda: _selection(decode=DecodeConfig(min_ctas=1)), "override.decode: min_ctas must be one of (0, 2, 3, 4, 5, 6, 8), got 1"),
        (lambda: _selection(decode=DecodeConfig(fused_merge=1)), "override.decode: fused_merge must be a bool, got 1"),
        (lambda: _selection(decode=DecodeConfig(fused_schedule=None)), "fused_schedule must be a bool, got None"),
        (lambda: _selection(schedule={}), "override.schedule: schedule must be a ScheduleConfig, got dict"),
        (lambda: _selection(schedule=_sched(target_items=0)), "ScheduleConfig.target_items must be an int >= 1, got 0"),
        (lambda: _selection(schedule=_sched(min_chunk=1.5)), "ScheduleConfig.min_chunk must be an int >= 1, got 1.5"),
        (lambda: _selection(schedule=_sched(tile_keys=True)), "ScheduleConfig.tile_keys must be an int >= 1, got True"),
    ],
)  # fmt: skip
def test_decode_override_is_validated(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        paged.plan(caps(), override=make())


def _sched(**kw):
    from flashinfer.experimental.b12x.attention.paged._config import ScheduleConfig

    return ScheduleConfig(**kw)


def test_override_selects_fused_merge_and_its_schedule():
    """A valid override is what preparation selects; the fused merge compiles no merge kernel."""
    sel = _selection(DecodeConfig(4, 16, 2, fused_merge=True), _sched(tile_keys=64, target_items=5, min_chunk=64))
    p = paged.plan(caps(), override=sel)
    assert p != paged.plan(caps()) and p.override == sel
    names = [fn.__name__ for fn, _ in p.kernels(sel, "sm_90a")]
    assert names == ["compile_schedule", "compile_decode"]
    names = [fn.__name__ for fn, _ in p.kernels(_selection(), "sm_90a")]
    assert names == ["compile_schedule", "compile_decode", "compile_merge"]
    one = _selection(DecodeConfig(4, 16, 2, fused_merge=True, fused_schedule=True), sel.schedule)
    assert [(fn.__name__, args[-1]) for fn, args in paged.plan(caps(), override=one).kernels(one, "sm_90a")] == [
        ("compile_decode", sel.schedule)  # the split it recomputes is part of the decode kernel's key
    ]
    two = _selection(DecodeConfig(4, 16, 2, fused_schedule=True), sel.schedule)
    assert [fn.__name__ for fn, _ in p.kernels(two, "sm_90a")] == ["compile_decode", "compile_merge"]
    big = caps(max_batch=129, max_total_q=129, max_work_items=200, max_partial_rows=200 * 8)
    with pytest.raises(ValueError, match=re.escape("override.decode: fused_schedule needs max_batch <= 128")):
        paged.plan(big, override=two)
    with pytest.raises(ValueError, match=re.escape("config: fused_schedule needs max_batch <= 128 (every CTA")):
        paged.plan(dataclasses.replace(big, config=two.decode))
    assert paged.plan(caps(max_batch=128, max_total_q=128, max_work_items=200, max_partial_rows=1600), override=two)
    assert repr(DecodeConfig(4, 16, 2)) == "DecodeConfig(warps=4, keys_per_warp=16, stages=2)"
    assert repr(sel.decode) == "DecodeConfig(warps=4, keys_per_warp=16, stages=2, fused_merge=True)"
    extend = paged.plan(caps(mode="extend"))
    with pytest.raises(ValueError, match=re.escape("override must be an ExtendSelection(ExtendConfig) or None")):
        paged.plan(caps(mode="extend"), override=sel)
    assert extend.heuristic("sm_90a") == paged.plan(caps(mode="extend"), override=extend.heuristic("sm_90a")).override


def test_decode_scratch_has_zeroed_tickets_and_bind_slices_the_decode_views():
    p = prepared(caps(config=DecodeConfig(4, 16, 2, fused_merge=True)))
    tickets = p.state.scratch["tickets"]
    assert tickets.shape == (8, 2) and tickets.dtype == torch.int32 and not tickets.any()
    case = make_case([5, 40, 0])
    b = paged.bind(p, **_bind_kwargs(case))
    req, count, part_o, part_lse, views_tickets = b.decode_views
    assert req.shape == (3, 2) and count.shape == (1,) and views_tickets.shape == (3, 2)
    assert part_o.shape[0] == part_lse.shape[0] == b.work.shape[0]
    assert views_tickets.data_ptr() == tickets.data_ptr()


def test_unprepared_plan_names_preparation_session():
    case = make_case([3])
    with pytest.raises(PlanNotPreparedError, match="PreparationSession"):
        paged.bind(paged.plan(caps()), q=case.q, k_cache=case.k_cache, v_cache=case.v_cache,
                   page_table=case.page_table, cache_seqlens=case.cache_seqlens)  # fmt: skip


# -- the lifecycle on CPU (reference backend) ------------------------------------------------------
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_cpu_lifecycle_runs_the_reference(kv_dtype):
    p = prepared(caps(kv_dtype=kv_dtype))
    case = make_case([0, 9, 40, 17], kv_dtype=kv_dtype, width=8, seed=3)
    sinks = torch.randn(8)
    kw = dict(k_descale=case.k_descale, v_descale=case.v_descale) if case.k_descale is not None else {}
    binding = paged.bind(p, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                         cache_seqlens=case.cache_seqlens, attention_sink_bias=sinks, window_left=20, **kw)  # fmt: skip
    out, lse = paged.run(binding=binding)
    want_out, want_lse = paged.paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
        window_left=20, sinks=sinks, k_descale=case.k_descale, v_descale=case.v_descale,
    )  # fmt: skip
    assert out.dtype == torch.bfloat16 and out.shape == (4, 8, 64) and lse.shape == (4, 8)
    assert torch.equal(out, want_out.to(torch.bfloat16)) and torch.equal(lse, want_lse)
    # default outputs are views of the plan's arena (live rows only)
    assert out.untyped_storage().data_ptr() == p.state.arena.untyped_storage().data_ptr()


def test_bind_allocates_nothing(monkeypatch):
    p = prepared(caps(kv_dtype="float8_e4m3fn"))
    case = make_case([5, 20], kv_dtype=torch.float8_e4m3fn)
    sinks, scale = torch.zeros(8), torch.tensor(0.5)

    def forbidden(*a, **k):
        raise AssertionError("bind allocated a tensor")

    for name in ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "tensor", "arange", "empty_strided"):
        monkeypatch.setattr(torch, name, forbidden)
    binding = paged.bind(p, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                         cache_seqlens=case.cache_seqlens, attention_sink_bias=sinks, k_descale=scale,
                         v_descale=case.v_descale)  # fmt: skip
    assert binding.k_descale.stride() == (0, 0)  # a broadcast view, not a copy


def _set(t, index, value):
    t = t.clone()
    t[index] = value
    return t


def _bind_kwargs(case, **kw):
    base = dict(q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                cache_seqlens=case.cache_seqlens)  # fmt: skip
    base.update(kw)
    return base


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: dict(q=c.q.half()), "q must be bfloat16 [*, 8, 64] on cpu, got float16 [2, 8, 64] on cpu"),
        (lambda c: dict(q=c.q[:, :4]), "q must be bfloat16 [*, 8, 64] on cpu, got bfloat16 [2, 4, 64] on cpu"),
        (lambda c: dict(q=c.q.transpose(0, 2).contiguous().transpose(0, 2)), "q must have a contiguous last dimension"),
        (lambda c: dict(q=c.q[:1]), "decode mode: q must have one row per request (2), got 1 rows"),
        (lambda c: dict(cache_seqlens=c.cache_seqlens.long()), "cache_seqlens must be int32 [*] on cpu, got int64 [2] on cpu"),
        (lambda c: dict(cache_seqlens=torch.zeros(9, dtype=torch.int32)), "cache_seqlens holds 9 requests, more than max_batch=8"),
        (lambda c: dict(cu_seqlens_q=torch.arange(2, dtype=torch.int32)), "cu_seqlens_q must be int32 [3] on cpu, got int32 [2] on cpu"),
        (lambda c: dict(cache_seqlens=_set(c.cache_seqlens, 0, -3)), "cache_seqlens must be >= 0, got cache_seqlens[0]=-3"),
        (lambda c: dict(page_table=c.page_table[:, :2]), "page_table has 2 columns, request 1 needs 4 (cache_seqlens[1]=60, page_size 16)"),
        (lambda c: dict(page_table=_set(c.page_table, (1, 3), 8)),
         "page_table[1, 3] = 8 is not a page of the cache (k_cache holds 8 pages; request 1 reads its first 4 columns)"),
        (lambda c: dict(page_table=_set(c.page_table, (0, 0), -1)),
         "page_table[0, 0] = -1 is not a page of the cache (k_cache holds 8 pages; request 0 reads its first 1 columns)"),
        (lambda c: dict(k_cache=c.k_cache.float()), "k_cache must be bfloat16 [*, 16, 2, 64] on cpu, got float32"),
        (lambda c: dict(v_cache=c.v_cache[:, :8]), "v_cache must be bfloat16 [*, 16, 2, 64] on cpu, got bfloat16 [8, 8, 2, 64]"),
        (lambda c: dict(v_cache=c.v_cache[:4]), "k_cache and v_cache must hold the same pages, got 8 and 4"),
        (lambda c: dict(k_cache=c.k_cache.new_zeros(65, 16, 2, 64), v_cache=c.v_cache.new_zeros(65, 16, 2, 64)),
         "k_cache holds 65 pages, more than num_cache_pages=64"),
        (lambda c: dict(page_table=c.page_table.long()), "page_table must be int32 [2, *] on cpu, got int64"),
        (lambda c: dict(page_table=torch.zeros(2, 17, dtype=torch.int32)), "page_table has 17 columns, more than max_page_table_width=16"),
        (lambda c: dict(window_left=-2), "window_left must be an int >= -1 (-1: no window), got -2"),
        (lambda c: dict(sm_scale=0.0), "sm_scale must be a finite float > 0, got 0.0"),
        (lambda c: dict(k_descale=torch.ones(2, 2)), "k_descale applies to float8_e4m3fn KV only; kv_dtype is bfloat16"),
        (lambda c: dict(attention_sink_bias=torch.zeros(4)), "attention_sink_bias must be float32 [8] on cpu, got float32 [4] on cpu"),
        (lambda c: dict(output=torch.zeros(2, 8, 64)), "output must be bfloat16 [2, 8, 64] on cpu, got float32 [2, 8, 64] on cpu"),
        (lambda c: dict(lse=torch.zeros(2, 8, dtype=torch.float64)), "lse must be float32 [2, 8] on cpu, got float64 [2, 8] on cpu"),
    ],
)  # fmt: skip
def test_bind_rejects(change, message):
    p = prepared()
    case = make_case([5, 60])
    with pytest.raises(ValueError, match=re.escape(message)):
        paged.bind(p, **_bind_kwargs(case, **change(case)))


@pytest.mark.parametrize(
    "change",
    [
        lambda c: dict(cache_seqlens=_set(c.cache_seqlens, 0, -3)),
        lambda c: dict(page_table=_set(c.page_table, (1, 3), 8)),
        lambda c: dict(page_table=_set(c.page_table, (0, 0), -1)),
    ],
)
def test_check_values_false_skips_the_host_read_of_live_values(change):
    """check_values=False (an eager serving loop that must not wait on the GPU) binds values the default rejects;
    the shape and dtype checks still run, and good values give the same result either way."""
    p = prepared()
    case = make_case([5, 60], seed=5)
    kwargs = _bind_kwargs(case, **change(case))
    with pytest.raises(ValueError):
        paged.bind(p, **kwargs)
    paged.bind(p, **kwargs, check_values=False)  # no ValueError: the values are the caller's to keep valid
    with pytest.raises(ValueError, match=re.escape("q must be bfloat16 [*, 8, 64] on cpu, got float16")):
        paged.bind(p, **_bind_kwargs(case, q=case.q.half()), check_values=False)
    checked = paged.run(binding=paged.bind(p, **_bind_kwargs(case)))
    checked = tuple(t.clone() for t in checked)
    unchecked = paged.run(binding=paged.bind(p, **_bind_kwargs(case), check_values=False))
    assert torch.equal(checked[0], unchecked[0]) and torch.equal(checked[1], unchecked[1])


@pytest.mark.parametrize("value", [0, 1, "yes", None])
def test_check_values_must_be_a_bool(value):
    p = prepared()
    case = make_case([5, 60])
    with pytest.raises(ValueError, match=re.escape(f"check_values must be a bool, got {value!r}")):
        paged.bind(p, **_bind_kwargs(case), check_values=value)


def test_bind_scratch_is_the_plan_s_views_or_a_dict_holding_each_of_them():
    p = prepared()
    case = make_case([5, 60], seed=7)
    want = paged.run(binding=paged.bind(p, **_bind_kwargs(case)))
    want = tuple(t.clone() for t in want)
    copy = dict(p.state.scratch)  # another dict of the same views is accepted
    got = paged.run(binding=paged.bind(p, **_bind_kwargs(case), scratch=copy))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    missing = dict(copy)
    missing.pop(next(iter(missing)))
    for bad in (missing, [], "scratch"):
        with pytest.raises(ValueError, match=re.escape("scratch must be the plan's scratch views")):
            paged.bind(p, **_bind_kwargs(case), scratch=bad)


def test_bind_keeps_the_plan_s_scratch_views_by_batch_and_rows():
    """bind slices the plan's scratch once per (batch, total_q) and keeps the views in the plan's state; a caller's
    scratch is sliced every time and kept nowhere. Runs at alternating batches still match the reference."""
    p = prepared()
    kept = _bind_views.kept(p.state)
    kept.clear()
    for lens in ([5, 60], [33], [5, 60], [17, 2, 40]):
        case = make_case(lens, seed=len(lens))
        b = paged.bind(p, **_bind_kwargs(case))
        assert b.out.shape[0] == len(lens) and b.k_descale.shape == (len(lens), 2)
        out, lse = paged.run(binding=b)
        want_out, want_lse = paged.paged_attention_reference(
            case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q
        )
        assert torch.equal(out, want_out.to(torch.bfloat16)) and torch.equal(lse, want_lse)
    assert sorted(kept) == [(1, 1), (2, 2), (3, 3)]
    case = make_case([5, 60])
    first, again = (paged.bind(p, **_bind_kwargs(case)) for _ in range(2))
    assert first.out is again.out and first.work is again.work  # the same views, not new slices
    kept.clear()
    paged.bind(p, **_bind_kwargs(case), scratch=dict(p.state.scratch))
    assert not kept
    # a workspace attached anew (as a re-prepare does) starts the kept views over: none points into the old one
    state = p.state
    old_scratch = state.scratch
    try:
        state.scratch = {name: t.clone() for name, t in old_scratch.items()}
        b = paged.bind(p, **_bind_kwargs(case))
        assert b.out.untyped_storage().data_ptr() == state.scratch["out"].untyped_storage().data_ptr()
        assert _bind_views.kept(state) == {(2, 2): _bind_views.kept(state)[(2, 2)]}
    finally:
        state.scratch = old_scratch


def test_page_ids_past_a_request_s_pages_are_not_read():
    """Only a request's first ceil(cache_seqlens / page_size) columns are page ids: the rest (padding, e.g. -1) may
    hold anything, and an empty request (cache_seqlens 0, a padding slot) reads none: its row is 0, its LSE -inf."""
    p = prepared()
    case = make_case([5, 60, 0], seed=4)
    table = case.page_table.clone()
    table[0, 1:] = -1
    table[2, :] = 10**6
    out, lse = paged.run(binding=paged.bind(p, **_bind_kwargs(case, page_table=table)))
    want_out, want_lse = paged.paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q
    )
    assert torch.equal(out, want_out.to(torch.bfloat16)) and torch.equal(lse, want_lse)
    assert torch.all(out[2] == 0) and torch.all(lse[2] == -math.inf)


def test_sinks_is_another_name_of_attention_sink_bias():
    p = prepared()
    case = make_case([5, 60], seed=6)
    sinks = torch.randn(8)
    a = paged.run(binding=paged.bind(p, **_bind_kwargs(case, attention_sink_bias=sinks)))
    a = tuple(t.clone() for t in a)
    b = paged.run(binding=paged.bind(p, **_bind_kwargs(case, sinks=sinks)))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="pass the sink logits as attention_sink_bias or as sinks, not both"):
        paged.bind(p, **_bind_kwargs(case, sinks=sinks, attention_sink_bias=sinks))
    with pytest.raises(ValueError, match=re.escape("sinks must be float32 [8] on cpu, got float32 [4] on cpu")):
        paged.bind(p, **_bind_kwargs(case, sinks=torch.zeros(4)))


def test_run_decode_and_run_extend_check_the_mode():
    p = prepared()
    binding = paged.bind(p, **_bind_kwargs(make_case([5, 60])))
    out, lse = paged.run_decode(binding=binding)
    want_out, want_lse = paged.run(binding=binding)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    with pytest.raises(ValueError, match=re.escape("run_extend runs a binding of a plan in mode extend / verify")):
        paged.run_extend(binding=binding)
    with pytest.raises(TypeError, match="binding must come from attention.paged.bind"):
        paged.run_decode(binding=None)


def test_bind_rejects_bad_fp8_descale():
    p = prepared(caps(kv_dtype="float8_e4m3fn"))
    case = make_case([5, 60], kv_dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=re.escape("v_descale must broadcast to [batch, Hkv] = [2, 2], got [3]")):
        paged.bind(p, **_bind_kwargs(case, v_descale=torch.ones(3)))
    with pytest.raises(
        ValueError, match=re.escape("k_descale must be float32 broadcastable to [2, 2] on cpu, got float16")
    ):
        paged.bind(p, **_bind_kwargs(case, k_descale=torch.ones(2, 2, dtype=torch.float16)))


def test_run_checks_its_arguments():
    p = prepared()
    case = make_case([5])
    binding = paged.bind(p, **_bind_kwargs(case))
    with pytest.raises(ValueError, match="plan must be the plan the binding was made from"):
        paged.run(binding=binding, plan=paged.plan(caps()))
    with pytest.raises(TypeError, match="binding must come from attention.paged.bind"):
        paged.run(binding=object())
    out, lse = paged.run(binding=binding, plan=p)
    assert torch.isfinite(lse).all() and not math.isnan(out.float().sum().item())


def test_empty_batch_is_a_no_op():
    p = prepared()
    case = make_case([5])
    empty = dict(q=case.q[:0], k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table[:0],
                 cache_seqlens=case.cache_seqlens[:0])  # fmt: skip
    out, lse = paged.run(binding=paged.bind(p, **empty))
    assert out.shape == (0, 8, 64) and lse.shape == (0, 8)


def test_benchmark_module_help_and_cuda_requirement(run_python):
    out = run_python("import sys; from benchmarks.experimental.b12x import bench_attention as B; B.main(['--help'])")
    assert out.returncode == 0 and "--kv {bf16,fp8,all}" in out.stdout and "--decode-configs" in out.stdout
    if not torch.cuda.is_available():
        out = run_python("from benchmarks.experimental.b12x import bench_attention as B; B.main(['--quick'])")
        assert out.returncode != 0 and "bench_attention needs a CUDA device" in out.stderr


# The fp8 streaming sweep (docs/predictions/attention.md): the entries must stay valid bench rows.
FP8_STREAMING_SWEEP = ("4x16x3fsp", "4x16x3fsl", "4x16x3fspl", "4x16x4fspl", "4x16x6fspl", "4x16x3fspl:o3",
                       "4x16x4fspl:o3", "2x16x3fspl:o6", "2x16x4fspl", "4x32x3fspl", "4x32x2fspl",
                       "4x16x3fspl:u8", "4x32x3fspl:u8", "4x16x6fspl:u8", "4x16x3fspld", "4x32x3fspld:u8")  # fmt: skip


def test_streaming_knobs_predicate_and_occupancy():
    """min_ctas bounds the registers (resident CTAs follow), stages reach 6, each value is checked."""
    from flashinfer.experimental.b12x.attention.paged._config import bounded_registers, resident_ctas, why_not

    dims = ("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16)
    assert resident_ctas("float8_e4m3fn", 128, DecodeConfig(4, 16, 3), "sm_90a") == 2  # 200 registers
    assert bounded_registers(128, DecodeConfig(4, 16, 3, min_ctas=3)) == 168
    assert resident_ctas("float8_e4m3fn", 128, DecodeConfig(4, 16, 4, min_ctas=3), "sm_90a") == 3
    assert resident_ctas("bfloat16", 128, DecodeConfig(4, 16, 3, min_ctas=3), "sm_90a") == 2  # smem-bound
    assert resident_ctas("float8_e4m3fn", 128, DecodeConfig(2, 16, 3, min_ctas=6), "sm_90a") == 6
    assert why_not(*dims, DecodeConfig(4, 16, 6), "sm_90a") is None
    assert why_not(*dims, DecodeConfig(4, 16, 7), "sm_90a").startswith("config out of range")
    assert why_not(*dims, DecodeConfig(4, 16, 3, min_ctas=7), "sm_90a") == (
        "min_ctas must be one of (0, 2, 3, 4, 5, 6, 8), got 7"
    )
    assert why_not(*dims, DecodeConfig(4, 16, 3, min_ctas=True), "sm_90a").startswith("min_ctas must be")
    assert why_not(*dims, DecodeConfig(8, 16, 3, min_ctas=3), "sm_90a") == (
        "min_ctas 3 x 256 threads leaves under 128 registers a thread"
    )
    assert why_not(*dims, DecodeConfig(4, 16, 3, fast_prologue=1), "sm_90a") == "fast_prologue must be a bool, got 1"
    assert why_not(*dims, DecodeConfig(4, 16, 3, merge_unroll=3), "sm_90a") == "merge_unroll must be 2, 4 or 8, got 3"
    assert repr(DecodeConfig(4, 16, 3, merge_unroll=8)).endswith("stages=3, merge_unroll=8)")
    assert repr(DecodeConfig(4, 16, 3, fast_prologue=True, min_ctas=3)) == (
        "DecodeConfig(warps=4, keys_per_warp=16, stages=3, fast_prologue=True, min_ctas=3)"
    )
    assert repr(DecodeConfig(4, 16, 3)) == "DecodeConfig(warps=4, keys_per_warp=16, stages=3)"


def test_gpu_streaming_cases_are_valid_configs():
    """The gpu tier's streaming configs (test_paged_gpu.STREAMING) pass the predicate for both KV
    dtypes at the shape they run (D 128, 16-key pages, sm_90a): a typo must fail here, not on the H200."""
    from flashinfer.experimental.b12x.attention.paged._config import why_not

    from .test_paged_gpu import STREAMING

    for name, cfg in STREAMING.items():
        for kv in ("bfloat16", "float8_e4m3fn"):
            assert why_not("bfloat16", kv, 32, 8, 128, 128, 16, cfg, "sm_90a") is None, (name, kv)


def test_default_switches_for_the_streaming_knobs(monkeypatch):
    """Both switches off: the 08:46 defaults. DECODE_LATENCY_FLAGS: p, l and d on every default
    (the plan's one-launch heuristic keeps them); FP8_TWO_PAGE_TILES: fp8 D 128 on sm_90a gets
    4 x 32 x 2 (3 stages until session 12: FP8_TILE_STAGES), a config the kernels accept on 16-key
    pages. Both are on since the 14:03 sweep.
    LEAN_TICKET (session 10) puts lean_ticket on every default; off here, checked at the end."""
    from flashinfer.experimental.b12x.attention.paged import _config

    assert _config.DECODE_LATENCY_FLAGS and _config.FP8_TWO_PAGE_TILES and _config.LEAN_TICKET
    monkeypatch.setattr(_config, "LEAN_TICKET", False)
    monkeypatch.setattr(_config, "KV16_HEADS_N8", False)  # its own test: test_paged_n8.py
    # the plan keeps the two-page sub-tile on 16-key pages (_decode_choice._fit_page allows 2 x page_size)
    fp8_caps = caps(kv_dtype="float8_e4m3fn", head_dim_qk=128, head_dim_vo=128)
    fp8_plan = paged.plan(fp8_caps).heuristic("sm_90a").decode
    assert fp8_plan.keys_per_warp == 32 and fp8_plan.fast_prologue and fp8_plan.direct_items
    monkeypatch.setattr(_config, "DECODE_LATENCY_FLAGS", False)
    monkeypatch.setattr(_config, "FP8_TWO_PAGE_TILES", False)
    assert _config.default_config("float8_e4m3fn", 128, 16, "sm_90a") == DecodeConfig(4, 16, 3)
    assert _config.default_config("bfloat16", 128, 16, "sm_90a") == DecodeConfig(4, 16, 3)
    monkeypatch.setattr(_config, "DECODE_LATENCY_FLAGS", True)
    flags = dict(fast_prologue=True, preload_lengths=True, direct_items=True)
    assert _config.default_config("bfloat16", 128, 16, "sm_90a") == DecodeConfig(4, 16, 3, **flags)
    assert paged.plan(caps()).heuristic("sm_90a").decode == DecodeConfig(4, 16, 3, True, True, **flags)
    monkeypatch.setattr(_config, "FP8_TWO_PAGE_TILES", True)
    fp8 = _config.default_config("float8_e4m3fn", 128, 16, "sm_90a")
    assert fp8 == DecodeConfig(4, 32, 2, **flags)  # FP8_TILE_STAGES (session 12)
    assert _config.why_not("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16, fp8, "sm_90a") is None
    assert _config.default_config("float8_e4m3fn", 128, 16, "sm_120a").keys_per_warp == 16
    assert _config.default_config("float8_e4m3fn", 256, 16, "sm_90a").keys_per_warp == 16
    assert _config.default_config("bfloat16", 128, 16, "sm_90a").keys_per_warp == 16
    shapes = (("bfloat16", 128, "sm_90a"), ("float8_e4m3fn", 128, "sm_90a"), ("bfloat16", 64, "sm_120a"))
    plain = [_config.default_config(kv, d, 16, arch) for kv, d, arch in shapes]
    monkeypatch.setattr(_config, "LEAN_TICKET", True)
    for (kv, d, arch), cfg in zip(shapes, plain):
        assert not cfg.lean_ticket and _config.default_config(kv, d, 16, arch) == dataclasses.replace(
            cfg, lean_ticket=True
        )
    assert paged.plan(caps()).heuristic("sm_90a").decode.lean_ticket


def test_small_batch_plans_take_the_one_round_decode_shape(monkeypatch):
    """Plans of at most SMALL_BATCH_MAX requests on sm_90a at D 128 run 8 warps x 16 keys x 2 stages
    with 128-key chunks (session 10's H200 table); larger batches, other archs and head dims keep the
    general default, and so does everything with the switch off."""
    from flashinfer.experimental.b12x.attention.paged import _config

    monkeypatch.setattr(_config, "KV16_HEADS_N8", False)  # its own test: test_paged_n8.py
    flags = dict(fast_prologue=True, preload_lengths=True, direct_items=True, lean_ticket=True)
    small = DecodeConfig(8, 16, 2, **flags)
    for kv in ("bfloat16", "float8_e4m3fn"):
        assert _config.default_config(kv, 128, 16, "sm_90a", max_batch=1) == small
        assert _config.default_config(kv, 128, 16, "sm_90a", max_batch=_config.SMALL_BATCH_MAX) == small
        general = _config.default_config(kv, 128, 16, "sm_90a", max_batch=_config.FP8_EIGHT_WARP_MAX + 1)
        assert _config.default_config(kv, 128, 16, "sm_90a", max_batch=_config.SMALL_BATCH_MAX + 1) == (
            small
            if kv == "bfloat16"
            else dataclasses.replace(general, warps=8)  # CLUSTER_PAIRS_MAX / FP8_EIGHT_WARP_MAX
        )
        assert _config.default_config(kv, 128, 16, "sm_120a", max_batch=1) == _config.default_config(
            kv, 128, 16, "sm_120a"
        )
        assert _config.default_config(kv, 256, 16, "sm_90a", max_batch=1) == _config.default_config(
            kv, 256, 16, "sm_90a"
        )
    sched = _config.split_schedule(small, "bfloat16", 128, 8, 132, "sm_90a")
    assert (sched.tile_keys, sched.target_items, sched.min_chunk) == (128, 17, 128)
    assert _config.split_schedule(DecodeConfig(4, 16, 3, **flags), "bfloat16", 128, 8, 132, "sm_90a").min_chunk == 256
    d128 = dict(head_dim_qk=128, head_dim_vo=128)
    # one request with a context capacity above CLUSTER_MAX_CONTEXT: no cluster (the caps hold 16 x 16 keys)
    monkeypatch.setattr(_config, "CLUSTER_MAX_CONTEXT", 255)
    one = paged.plan(caps(max_batch=1, max_total_q=1, **d128)).heuristic("sm_90a")
    assert one.decode == dataclasses.replace(small, fused_merge=True, fused_schedule=True)
    assert one.schedule.min_chunk == 128
    monkeypatch.setattr(_config, "CLUSTER_MAX_CONTEXT", 256)  # within it: clusters of 8 CTAs, merged by pushes
    assert _config.CLUSTER_PUSH
    assert paged.plan(caps(max_batch=1, max_total_q=1, **d128)).heuristic("sm_90a").decode == dataclasses.replace(
        small, fused_merge=True, fused_schedule=True, cluster=_config.SINGLE_REQUEST_CLUSTER, cluster_push=True
    )
    monkeypatch.setattr(_config, "CLUSTER_PUSH", False)  # the session-10 pull merge
    assert not paged.plan(caps(max_batch=1, max_total_q=1, **d128)).heuristic("sm_90a").decode.cluster_push
    for other in (dict(max_batch=2, max_total_q=2), dict(max_batch=1, max_total_q=1, pdl="prefetch")):
        assert paged.plan(caps(**other, **d128)).heuristic("sm_90a").decode.cluster == 0, other
    assert paged.plan(caps(max_batch=1, max_total_q=1, **d128)).heuristic("sm_120a").decode.cluster == 0
    assert paged.plan(caps(max_batch=8, max_total_q=8, **d128)).heuristic("sm_90a").decode.cluster_pairs
    monkeypatch.setattr(_config, "SMALL_BATCH_DECODE", False)
    assert _config.default_config("bfloat16", 128, 16, "sm_90a", max_batch=1) == DecodeConfig(4, 16, 3, **flags)
    assert _config.split_schedule(small, "bfloat16", 128, 8, 132, "sm_90a").min_chunk == 256


def test_fp8_batch_tiles(monkeypatch):
    """fp8's two-page tile (4 warps x 32 keys x 2 stages) changes its warps by the plan's request capacity
    on sm_90a at D 128: 8 from SMALL_BATCH_MAX + 1 to FP8_EIGHT_WARP_MAX (session 14), 2 from FP8_WIDE_BATCH
    (session 12's sweep; on since session 14) to FUSED_SCHEDULE_MAX_BATCH; 4 between and above. The small-batch plans keep their shape; bf16,
    other head dims and archs keep theirs; the flags and merge choices stay. Both off (0), nothing
    changes."""
    from flashinfer.experimental.b12x.attention.paged import _config

    assert (_config.FP8_EIGHT_WARP_MAX, _config.FP8_WIDE_BATCH) == (16, 48)
    fp8 = dict(kv_dtype="float8_e4m3fn", head_dim_qk=128, head_dim_vo=128, num_q_heads=32, num_kv_heads=8)

    def decode(n, **kw):
        items = paged.default_max_work_items(n, 8)
        c = caps(**{**fp8, **kw}, max_batch=n, max_total_q=n, max_work_items=items,
                 max_partial_rows=paged.default_max_partial_rows(items, 32))  # fmt: skip
        return paged.plan(c).heuristic("sm_90a").decode

    shape = lambda d: (d.warps, d.keys_per_warp, d.stages)  # noqa: E731
    expect = {1: (8, 16, 2), 4: (8, 16, 2), 5: (8, 32, 2), 8: (8, 32, 2), 16: (8, 32, 2), 17: (4, 32, 2),
              32: (4, 32, 2), 47: (4, 32, 2), 48: (2, 32, 2), 128: (2, 32, 2), 129: (4, 32, 2)}  # fmt: skip
    assert {n: shape(decode(n)) for n in expect} == expect
    four = decode(32)
    unpaired = dict(warps=4, cluster=0, cluster_push=False, cluster_pairs=False)  # 8: CLUSTER_PAIRS_MAX's pairs
    assert dataclasses.replace(decode(128), warps=4) == four and dataclasses.replace(decode(8), **unpaired) == four
    assert decode(8).cluster_pairs and not decode(17).cluster_pairs
    assert shape(decode(17, kv_dtype="bfloat16")) == shape(decode(128, kv_dtype="bfloat16")) == (4, 16, 3)
    for n in (8, 128):
        assert _config.default_config("float8_e4m3fn", 128, 16, "sm_120a", max_batch=n).warps == 4
        assert _config.default_config("float8_e4m3fn", 256, 16, "sm_90a", max_batch=n).keys_per_warp == 16
        assert _config.why_not("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16, decode(n), "sm_90a") is None
    # the 8-warp tile's split: one CTA an SM, two fills of 256 keys
    sched = _config.split_schedule(decode(8), "float8_e4m3fn", 128, 8, 132, "sm_90a")
    assert (sched.tile_keys, sched.target_items, sched.min_chunk) == (256, 17, 512)
    monkeypatch.setattr(_config, "FP8_EIGHT_WARP_MAX", 0)
    monkeypatch.setattr(_config, "FP8_WIDE_BATCH", 0)
    assert shape(decode(8)) == shape(decode(128)) == (4, 32, 2)


def test_bench_decode_config_entries():
    from benchmarks.experimental.b12x import bench_attention as B
    from flashinfer.experimental.b12x.attention.paged._config import ScheduleConfig, split_schedule

    assert B.parse_decode_entry("4x16x3f:t33:m512") == (DecodeConfig(4, 16, 3, fused_merge=True), {"f"}, 33, 512)
    assert B.parse_decode_entry("4x16x2sf") == (DecodeConfig(4, 16, 2, True, True), {"f", "s"}, None, None)
    assert B.parse_decode_entry("hf") == (None, {"f"}, None, None)
    assert B.parse_decode_entry("h:t66") == (None, set(), 66, None)
    # the fp8 streaming knobs: p (fast_prologue) and oN (min_ctas) need an explicit WxKxS
    assert B.parse_decode_entry("4x16x4fsp:o3") == (
        DecodeConfig(4, 16, 4, True, True, True, 3),
        {"f", "s", "p"},
        None,
        None,
    )
    assert B.parse_decode_entry("4x16x3fsl") == (
        DecodeConfig(4, 16, 3, True, True, preload_lengths=True),
        {"f", "s", "l"},
        None,
        None,
    )
    assert B.parse_decode_entry("4x16x3fspl:u8")[0] == DecodeConfig(4, 16, 3, True, True, True, 0, True, 8)
    assert B.parse_decode_entry("4x32x3fspld:u8")[0] == DecodeConfig(4, 32, 3, True, True, True, 0, True, 8, True)
    assert B.parse_decode_entry("2x16x3p:o6:t99") == (
        DecodeConfig(2, 16, 3, fast_prologue=True, min_ctas=6),
        {"p"},
        99,
        None,
    )
    for bad, message in (("4x16", "a decode entry is h|WxKxS[f][s][p][l][d][:tN][:mN][:oN][:uN]"), ("hf:x3", "schedule parts are tN"),
                         ("h:t0", "got 't0' in 'h:t0'"), ("hx", "a decode entry is"),
                         ("hff", "flags are f, s, p, l and d, once each"), ("hfsp", "p, l, d, oN and uN need an explicit WxKxS"),
                         ("hfsl", "p, l, d, oN and uN need an explicit"), ("hfs:o3", "p, l, d, oN and uN need an explicit WxKxS"), ("h:u8", "p, l, d, oN and uN need"),
                         ("hfsd", "p, l, d, oN and uN need"),
                         ("4x16x3:o0", "N >= 1")):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(message)):
            B.parse_decode_entry(bad)
    assert B.decode_selection("heuristic", "bfloat16", "sm_90a", 132) is None
    sel = B.decode_selection("hf:m128", "bfloat16", "sm_90a", 132)
    heur = split_schedule(DecodeConfig(4, 16, 3), "bfloat16", 128, 8, 132, "sm_90a")
    assert sel.decode == DecodeConfig(4, 16, 3, fused_merge=True)
    assert sel.schedule == ScheduleConfig(heur.tile_keys, heur.target_items, 128)
    assert B.decode_selection("4x16x2:t66", "bfloat16", "sm_90a", 132).schedule.target_items == 66
    assert B.decode_selection("hfs", "bfloat16", "sm_90a", 132).decode == DecodeConfig(4, 16, 3, True, True)
    for entry in B.DECODE_CONFIGS[1:]:
        B.decode_selection(entry, "float8_e4m3fn", "sm_90a", 132)
    assert B.parse_args(["--decode-configs", "heuristic", "hf:t66"]).decode_configs == ["heuristic", "hf:t66"]
    sweep = ["heuristic", *FP8_STREAMING_SWEEP]  # the rows the lead times (docs/predictions/attention.md)
    assert B.parse_args(["--decode-configs", *sweep]).decode_configs == sweep
    sel = B.decode_selection("4x16x4fspl:o3", "float8_e4m3fn", "sm_90a", 132)
    assert sel.decode == DecodeConfig(4, 16, 4, True, True, True, 3, True)
    assert sel.schedule.target_items == 50  # one wave of 3 CTAs per SM over 8 KV heads


def test_heuristic_picks_the_one_launch_decode_only_when_enabled(monkeypatch):
    from flashinfer.experimental.b12x.attention.paged import _config

    fused = paged.plan(caps()).heuristic("sm_90a").decode
    assert fused.fused_merge and fused.fused_schedule  # FUSED_BY_DEFAULT: measured faster on the H200
    monkeypatch.setattr(_config, "FUSED_BY_DEFAULT", False)
    base = paged.plan(caps()).heuristic("sm_90a").decode
    assert not base.fused_merge and not base.fused_schedule
    monkeypatch.setattr(_config, "FUSED_BY_DEFAULT", True)
    assert paged.plan(caps()).heuristic("sm_90a").decode == dataclasses.replace(
        base, fused_merge=True, fused_schedule=True
    )
    big = caps(max_batch=129, max_total_q=129, max_work_items=200, max_partial_rows=1600)
    assert paged.plan(big).heuristic("sm_90a").decode == dataclasses.replace(base, fused_merge=True)
    mine = DecodeConfig(2, 16, 2)  # an explicit config is used as given
    assert paged.plan(caps(config=mine)).heuristic("sm_90a").decode == mine


def test_caps_pdl_goes_onto_the_decode_config():
    """Caps.pdl rides on the heuristic's config or the caps' own; "prefetch" falls back to "wait"
    on a config that has no fused schedule (it locates the item itself)."""
    base = paged.plan(caps()).heuristic("sm_90a").decode
    assert base.pdl == "off"
    for mode in ("wait", "prefetch"):
        got = paged.plan(caps(pdl=mode)).heuristic("sm_90a").decode
        assert got == dataclasses.replace(base, pdl=mode)
    mine = DecodeConfig(2, 16, 2)
    assert paged.plan(caps(config=mine, pdl="prefetch")).heuristic("sm_90a").decode == dataclasses.replace(
        mine, pdl="wait"
    )
    one = DecodeConfig(2, 16, 2, fused_merge=True, fused_schedule=True)
    assert paged.plan(caps(config=one, pdl="prefetch")).heuristic("sm_90a").decode.pdl == "prefetch"
    assert "pdl='wait'" in repr(dataclasses.replace(mine, pdl="wait")) and "pdl" not in repr(mine)
