"""moe.fused_moe's nvfp4 dequant buckets on the host (`ExpertBucket.dequant`, `_buckets.TILED_DEQUANT`,
`_buckets.DECODE_DEQUANT_FROM`): the heuristic gives it to the grouped bucket of an nvfp4 plan only
when TILED_DEQUANT is on (off by default) and to its decode buckets from live T = DECODE_DEQUANT_FROM
(9 by default), override checks, the workspace (a1_deq / a2_deq only with a dequant bucket), the compile jobs (the
NVFP4_DEQ routing and requantize, bf16-A grouped GEMMs), resolve_launchers, bind's choice per live T
(meta tensors, as test_fused_moe_pipeline_bind.py) and bench_moe's --tiled-dequant rows. The kernels'
bytes and the layer's values: test_fused_moe_dequant_cases.py (interpreter) and
test_fused_moe_dequant_gpu.py."""

import argparse
import dataclasses

import pytest
import torch

from b12x.moe import fused_moe as fm
from flashinfer.experimental.b12x._lib.scratch import dtype_name
from flashinfer.experimental.b12x.moe.fused_moe import _buckets, api

from .moe_cases import weight_plan
from .test_fused_moe_pipeline_bind import config, device_plan

pytestmark = pytest.mark.contract


def _g():
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_grouped as G

    return G


def _caps(mode, max_tokens=4096, *, e=128, k=8, h=2048, i=768, device="cpu"):
    wp = weight_plan("modelopt_nvfp4", "silu", (mode,), e=e, h=h, i=i)
    return api.Caps(max_tokens=max_tokens, num_topk=k, device=device, weight_plan=wp, quant_mode=mode)


def _heuristic(mode, monkeypatch, flag, decode_from=None):
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    monkeypatch.setattr(_buckets, "TILED_DEQUANT", flag)
    monkeypatch.setattr(_buckets, "DECODE_DEQUANT_FROM", decode_from)
    monkeypatch.setattr(_buckets, "DECODE_DEQUANT_ROWS", 10**6)  # no upper bound (test_the_default_heuristic)
    caps = _caps(mode)
    wp = caps.weight_plan
    return caps, api.heuristic_buckets(caps, X.default_buckets(caps.max_tokens, wp.num_experts, caps.num_topk))


@pytest.mark.parametrize("mode", ["nvfp4", "w4a16"])
def test_the_default_heuristic(mode):
    # flipped only on measured wins (docs/predictions/moe.md, performance.md sessions 17 and 20)
    assert _buckets.TILED_DEQUANT is False and _buckets.DECODE_DEQUANT_FROM == 2
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    caps = _caps(mode)  # E = 128, k = 8: 8-token groups to T = 80 (5 rows an expert), grouped from 512
    cfg = fm.plan(dataclasses.replace(caps, device="cuda")).heuristic("sm_90a")
    assert cfg == api.with_pdl(api.with_pdl(cfg, "off"), api.PDL)  # its launches: api.PDL (test_experts_pdl)
    got = api.with_pdl(cfg, "off").experts  # the tilings
    assert got == api.heuristic_buckets(caps, X.default_buckets(4096, 128, 8))
    nv = mode == "nvfp4"
    # nvfp4: packed at T = 1, dequantized to 8 rows an expert (T = 128), packed again to the grouped bucket
    assert [b.max_tokens for b in got] == ([1, 80, 128] if nv else [80]) + [511, 4096]
    assert [b.tiled for b in got] == ([False] * 3 if nv else [False]) + [False, True]
    assert [b.dequant for b in got] == ([False, True, True] if nv else [False]) + [False, False]
    assert [b.fc1.ntiles for b in got[:-1]] == ([1, 1, 2] if nv else [1]) + [2]
    if nv:  # a cut bucket keeps its tilings
        assert got[0].fc1 == got[1].fc1 and got[2].fc1 == got[3].fc1
    assert _buckets.decode_dequant_last(caps) == 128 and _buckets.dequant_tokens(caps, None) == (128 if nv else 0)


@pytest.mark.parametrize("on", [False, True])
@pytest.mark.parametrize("mode", ["nvfp4", "w4a16"])
def test_w4a16_l2_prefetch(mode, on, monkeypatch):
    """`_buckets.W4A16_L2_PREFETCH` (on): the w4a16 recipe's 8-token decode bucket takes "w4p1h256" (both
    GEMMs' weights "na256", everything else of "w4p1h"); the nvfp4 recipe, the 16-token and grouped buckets, and every
    bucket with the switch off keep theirs."""
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    assert _buckets.W4A16_L2_PREFETCH is True
    monkeypatch.setattr(_buckets, "W4A16_L2_PREFETCH", False)
    _, before = _heuristic(mode, monkeypatch, False, decode_from=2)
    monkeypatch.setattr(_buckets, "W4A16_L2_PREFETCH", on)
    caps, got = _heuristic(mode, monkeypatch, False, decode_from=2)
    api.check_buckets(caps, got)
    moved = on and mode == "w4a16"
    assert [b.max_tokens for b in got] == [b.max_tokens for b in before]
    w4p1h = X.sweep_tiling(1, "w4p1h")
    for old, new in zip(before, got):
        if moved and (old.fc1, old.fc2) == w4p1h:
            assert (new.fc1, new.fc2) == X.sweep_tiling(1, "w4p1h256")
            assert new.fc1.wcache == new.fc2.wcache == "na256"
            assert dataclasses.replace(new.fc1, wcache=old.fc1.wcache) == old.fc1
            assert dataclasses.replace(new.fc2, wcache=old.fc2.wcache) == old.fc2
        else:
            assert new == old
    assert moved == (got != before)


@pytest.mark.parametrize("mode", ["nvfp4", "w4a16"])
def test_the_flag_gives_the_grouped_bucket_of_nvfp4_only(mode, monkeypatch):
    caps, got = _heuristic(mode, monkeypatch, True)
    assert [b.tiled for b in got] == [False, False, True]
    assert [b.dequant for b in got] == [False, False, mode == "nvfp4"]
    api.check_buckets(caps, got)  # the heuristic's buckets pass the override check
    assert api.gemm_formats(mode, got[-1]) == ("bfloat16", "bfloat16")  # the grouped GEMMs' bf16-A path
    assert api.gather_formats("nvfp4", got[-1] if mode == "nvfp4" else None) == (
        (api.NVFP4_DEQ, api.NVFP4_DEQ) if mode == "nvfp4" else ("nvfp4", "nvfp4")
    )
    assert api.gemm_formats("nvfp4", got[0]) == ("nvfp4", "nvfp4")  # decode buckets: unchanged


@pytest.mark.parametrize("mode", ["nvfp4", "w4a16"])
def test_the_decode_flag_gives_the_decode_buckets_of_nvfp4_only(mode, monkeypatch):
    caps, got = _heuristic(mode, monkeypatch, False, decode_from=1)
    assert [b.tiled for b in got] == [False, False, True]
    assert [b.dequant for b in got] == [mode == "nvfp4", mode == "nvfp4", False]
    api.check_buckets(caps, got)
    assert api.gemm_formats(mode, got[0]) == ("bfloat16", "bfloat16")  # the decode kernels' W4A16 path
    assert api.gemm_formats(mode, got[-1]) == ((mode, mode) if mode == "nvfp4" else ("bfloat16", "bfloat16"))
    p = fm.plan(dataclasses.replace(caps, device="cuda"))
    assert ("a1_deq" in {s.name for s in p.scratch_specs(None, "cuda")}) is (mode == "nvfp4")
    _, both = _heuristic(mode, monkeypatch, True, decode_from=1)
    assert all(b.dequant for b in both) is (mode == "nvfp4")
    monkeypatch.setattr(_buckets, "TILED_DEQUANT", False)
    monkeypatch.setattr(_buckets, "DECODE_DEQUANT_FROM", 512)  # past every decode T (< 512): no workspace
    assert "a1_deq" not in {s.name for s in p.scratch_specs(None, "cuda")}
    monkeypatch.setattr(_buckets, "DECODE_DEQUANT_FROM", 511)
    assert ("a1_deq" in {s.name for s in p.scratch_specs(None, "cuda")}) is (mode == "nvfp4")


@pytest.mark.parametrize("first, want", [(9, [(8, False), (64, True), (511, True)]), (64, [(63, False), (64, True), (511, True)]),
                                         (65, [(64, False), (511, True)]), (511, [(64, False), (510, False), (511, True)]),
                                         (512, [(64, False), (511, False)])])  # fmt: skip
def test_decode_dequant_from_cuts_the_bucket_that_holds_it(first, want):
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    caps = _caps("nvfp4")
    got = _buckets.with_decode_dequant(api.with_tiled_bucket(caps, X.default_buckets(4096)), first)
    assert [(b.max_tokens, b.dequant) for b in got[:-1]] == want and got[-1].tiled and not got[-1].dequant
    for b in got[:-1]:  # the same tilings on both sides of the cut
        assert (b.fc1, b.fc2) in {(x.fc1, x.fc2) for x in X.default_buckets(4096)}
    api.check_buckets(caps, got)


def test_a_cut_bucket_keeps_its_dequant(monkeypatch):
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    monkeypatch.setattr(_buckets, "TILED_DEQUANT", False)
    caps = _caps("nvfp4")
    decode = _buckets.with_decode_dequant(X.default_buckets(4096))
    got = api.with_tiled_bucket(caps, decode)
    assert [(b.max_tokens, b.dequant, b.tiled) for b in got] == [
        (64, True, False),
        (511, True, False),
        (4096, False, True),
    ]


def test_override_checks_name_the_dequant_bucket(monkeypatch):
    caps, got = _heuristic("nvfp4", monkeypatch, True)
    api.check_buckets(caps, (dataclasses.replace(got[0], dequant=True), *got[1:]))  # decode buckets may
    w4, w4_got = _heuristic("w4a16", monkeypatch, False)
    bad = (*w4_got[:-1], dataclasses.replace(w4_got[-1], dequant=True))
    with pytest.raises(
        ValueError, match=r"override.experts\[2\].dequant must be a bool, True for the nvfp4 recipe only"
    ):
        api.check_buckets(w4, bad)
    bad = (dataclasses.replace(w4_got[0], dequant=True), *w4_got[1:])
    with pytest.raises(ValueError, match=r"override.experts\[0\].dequant .* on a decode bucket of 'w4a16'"):
        api.check_buckets(w4, bad)
    with pytest.raises(ValueError, match="dequant=1"):
        api.check_buckets(caps, (*got[:-1], dataclasses.replace(got[-1], dequant=1)))


def test_workspace_holds_the_bf16_operands_only_with_a_dequant_bucket(monkeypatch):
    caps, got = _heuristic("nvfp4", monkeypatch, True)
    caps = dataclasses.replace(caps, device="cuda")
    p = fm.plan(caps)
    r = caps.max_tokens * caps.num_topk
    cfg = api.MoeConfig(config(2048, 768).routing, config(2048, 768).combine, got)
    specs = {s.name: (s.shape, dtype_name(s.dtype)) for s in p.scratch_specs(cfg, "cuda")}
    assert specs["a1_deq"] == ((r, 2048), "bfloat16") and specs["a2_deq"] == ((r, 768), "bfloat16")
    assert "a1" in specs and "a1_scales" in specs and "a2" in specs  # the decode buckets' operands stay
    plain = dataclasses.replace(cfg, experts=tuple(dataclasses.replace(b, dequant=False) for b in got))
    assert not {"a1_deq", "a2_deq"} & {s.name for s in p.scratch_specs(plain, "cuda")}
    assert "a1_deq" in {s.name for s in p.scratch_specs(None, "cuda")}  # unprepared: the heuristic's (flag on)
    monkeypatch.setattr(_buckets, "TILED_DEQUANT", False)
    monkeypatch.setattr(_buckets, "DECODE_DEQUANT_FROM", None)
    assert "a1_deq" not in {s.name for s in p.scratch_specs(None, "cuda")}
    # decode buckets only: rows for the T they serve (grouped from T = 512), not for max_tokens
    monkeypatch.setattr(_buckets, "DECODE_DEQUANT_FROM", 9)
    monkeypatch.setattr(_buckets, "DECODE_DEQUANT_ROWS", 8)
    specs = {s.name: s.shape for s in p.scratch_specs(None, "cuda")}
    assert specs["a1_deq"] == (128 * 8, 2048) and specs["a2_deq"] == (128 * 8, 768)  # to 8 rows an expert
    cut = _buckets.with_decode_dequant(plain.experts, 9)  # (8, 80 dequant, 511 dequant, grouped)
    specs = {s.name: s.shape for s in p.scratch_specs(dataclasses.replace(cfg, experts=cut), "cuda")}
    assert specs["a1_deq"] == (511 * 8, 2048)
    specs = {s.name: s.shape for s in p.scratch_specs(dataclasses.replace(cfg, experts=cut[:2] + cut[3:]), "cuda")}
    assert specs["a1_deq"] == (80 * 8, 2048)  # only the 9..80 bucket takes them


def test_bind_gives_the_gemms_results_with_the_dequant_operands_rows():
    """A decode dequant bucket's a1_deq / a2_deq hold only the rows of the T it serves; the expert
    kernels want A and C with the same rows, so its binding passes views of c1 / c2's first rows."""
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    p, tensors = device_plan("nvfp4")  # T = 5, max_tokens 8, k = 2
    small = X.default_buckets(8)[0]
    bk = (api.ExpertBucket(5, small.fc1, small.fc2, dequant=True), api.ExpertBucket(8, small.fc1, small.fc2))
    st = p._state
    st.selection = dataclasses.replace(config(), experts=bk)
    specs = p.scratch_specs(st.selection, "cuda")
    st.scratch = {s.name: torch.empty(s.shape, dtype=getattr(torch, dtype_name(s.dtype)), device="meta") for s in specs}
    s, k = st.scratch, p.caps.num_topk
    assert s["a1_deq"].shape[0] == 5 * k and s["c1"].shape[0] == 8 * k
    b = fm.bind(p, **tensors)
    assert b.dequant and b.fc1_args[0] is s["a1_deq"] and b.fc2_args[0] is s["a2_deq"]
    for got, full in ((b.fc1_args[4], s["c1"]), (b.fc2_args[4], s["c2"])):
        assert got._base is full and got.shape == (5 * k, full.shape[1])
    part = {name: tensors[name][:4] for name in ("a", "topk_ids", "topk_weights")}
    d = fm.bind(p, **{**tensors, **part})  # T = 4: still the dequant bucket
    assert d.fc1_args[4]._base is s["c1"]
    tensors8 = {name: torch.cat([tensors[name], tensors[name][:3]]) for name in ("a", "topk_ids", "topk_weights")}
    e = fm.bind(p, **{**tensors, **tensors8, "output": None})  # T = 8: the packed bucket, the whole buffers
    assert not e.dequant and e.fc1_args[4] is s["c1"] and e.fc2_args[4] is s["c2"]


def _stub(fn):
    out = lambda *args, name=fn.__name__: (name, args)  # noqa: E731
    out.__name__ = fn.__name__
    return out


def test_jobs_compile_the_dequant_kernels_and_resolve_apart(monkeypatch):
    caps, got = _heuristic("nvfp4", monkeypatch, True)
    caps = dataclasses.replace(caps, device="cuda")
    p = fm.plan(caps)
    cfg = p.heuristic("sm_90a")
    assert api.with_pdl(cfg, "off").experts == got  # the tilings; the launches are api.PDL's
    jobs = p.kernels(cfg, "sm_90a")
    routing = [args for fn, args in jobs if fn.__name__ == "compile_routing"]
    combine = [args for fn, args in jobs if fn.__name__ == "compile_combine"]
    assert [(a[0], a[4]) for a in routing] == [("int32", "nvfp4"), ("int64", "nvfp4")] + [
        ("int32", api.NVFP4_DEQ),
        ("int64", api.NVFP4_DEQ),
    ]
    assert [a[4] for a in combine] == ["nvfp4", api.NVFP4_DEQ]
    expert_jobs = p.expert_jobs(cfg, "sm_90a")
    (fc1, args1), (fc2, args2) = expert_jobs[("tiled", 2)]
    assert fc1.__name__ == "compile_grouped_fc1" and args1[0] == "bfloat16"
    assert fc2.__name__ == "compile_grouped_fc2" and args2[0] == "bfloat16"
    for key, ((_, a1), (_, a2)) in expert_jobs.items():
        if key[0] != "tiled":
            assert a1[0] == a2[0] == "nvfp4"  # the decode buckets keep the packed operands
    fake = [(_stub(fn), args) for fn, args in jobs]
    stubs = {key: tuple((_stub(fn), args) for fn, args in pair) for key, pair in expert_jobs.items()}
    L = api.resolve_launchers(fake, stubs)
    assert L.routing_for("int64")[1][4] == "nvfp4" and L.routing_for("int64", True)[1][4] == api.NVFP4_DEQ
    assert L.requantizer()[1][4] == "nvfp4" and L.requantizer(True)[1][4] == api.NVFP4_DEQ
    plain = api.resolve_launchers([job for job in fake if api.NVFP4_DEQ not in job[1]], stubs)
    assert plain.dequant is None


def test_bind_takes_the_dequant_operands_in_that_bucket_only():
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    p, tensors = device_plan("nvfp4")  # T = 5, max_tokens 8
    g = _g().GroupedConfig()
    small = X.default_buckets(4)[0]
    bk = (api.ExpertBucket(4, small.fc1, small.fc2), api.ExpertBucket(8, g, g, dequant=True))
    st = p._state
    st.selection = dataclasses.replace(config(), experts=bk)
    specs = p.scratch_specs(st.selection, "cuda")
    st.scratch = {s.name: torch.empty(s.shape, dtype=getattr(torch, dtype_name(s.dtype)), device="meta") for s in specs}
    s = st.scratch
    b = fm.bind(p, **tensors)
    assert b.dequant and b.bucket == 1 and b.grid == "tiled"
    assert b.fc1_args[0] is s["a1_deq"] and b.fc1_args[1] is s["dummy"]
    assert b.fc2_args[0] is s["a2_deq"] and b.fc2_args[1] is s["dummy"]
    assert b.fc1_args[7] is s["alpha1"] and b.fc2_args[7] is s["alpha2"]  # 1 / gs in the epilogue
    ex = tensors["experts"]
    assert b.gscales == (ex.a1_gscale, ex.a2_gscale)  # the gather still quantizes with gs
    part = {k: tensors[k][:4] for k in ("a", "topk_ids", "topk_weights")}
    d = fm.bind(p, **{**tensors, **part})
    assert not d.dequant and d.bucket == 0 and d.fc1_args[0] is s["a1"] and d.fc2_args[0] is s["a2"]


def test_bench_tiled_dequant_rows(monkeypatch):
    from benchmarks.experimental.b12x import bench_moe as B

    monkeypatch.setattr(_buckets, "DECODE_DEQUANT_FROM", None)
    args = argparse.Namespace(tiled_dequant=True)
    rows = B.expert_variants(args, 4096, 4096, "nvfp4")
    assert [label for label, _ in rows] == ["", " deq"] and rows[1][1] is B.with_dequant
    assert B.expert_variants(args, 4096, 4096, "w4a16") == [("", None)]
    tiled = B.expert_variants(argparse.Namespace(tiled_dequant=True, tiled=["64x256x1x4"]), 4096, 4096, "nvfp4")
    assert [label for label, _ in tiled] == ["", " deq", " tiled 64x256x1x4", " tiled 64x256x1x4 deq"]
    assert not tiled[2][1][0].dequant and tiled[3][1][0].dequant
    p = fm.plan(dataclasses.replace(_caps("nvfp4"), device="cuda"))
    planned = B.with_override(p, "sm_90a", None, B.with_dequant)
    assert [b.dequant for b in planned.override.experts] == [False, False, True]


def test_bench_decode_dequant_rows():
    from benchmarks.experimental.b12x import bench_moe as B

    args = argparse.Namespace(decode_dequant=True)
    rows = B.expert_variants(args, 16, 4096, "nvfp4")
    assert [label for label, _ in rows] == ["", " ddeq"] and rows[1][1] is B.with_decode_dequant
    assert B.expert_variants(args, 16, 4096, "w4a16") == [("", None)]
    p = fm.plan(dataclasses.replace(_caps("nvfp4"), device="cuda"))
    planned = B.with_override(p, "sm_90a", None, B.with_decode_dequant)
    got = [(b.max_tokens, b.dequant) for b in planned.override.experts]
    assert got == [(1, True), (80, True), (128, True), (511, True), (4096, False)]  # the heuristic's cut at T = 1
    assert "--decode-dequant" in B.__doc__
    divided = B.with_override(p, "sm_90a", deq_encode="divide").override
    assert divided.routing.nvfp4_deq_encode == divided.combine.nvfp4_deq_encode == "divide"
    heuristic = p.heuristic("sm_90a")  # "search" since session 19's A/B
    assert heuristic.routing.nvfp4_deq_encode == heuristic.combine.nvfp4_deq_encode == "search"
    with pytest.raises(SystemExit):
        B.main(["--deq-encode", "fast"])


def test_tiled_rows_moves_the_switch(monkeypatch):
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    caps = _caps("nvfp4")  # E = 128, k = 8
    assert api.tiled_from(caps) == api.tiled_from(caps, api.TILED_ROWS) == 512
    assert api.tiled_from(caps, 64) == 1024 and api.tiled_from(caps, 256) == 4096 and api.tiled_from(caps, 257) is None
    got = api.with_tiled_bucket(caps, X.default_buckets(4096), rows=16)
    assert [b.max_tokens for b in got][-2:] == [255, 4096] and got[-1].tiled and not got[-2].tiled
    assert api.with_tiled_bucket(caps, X.default_buckets(4096), rows=1000) == X.default_buckets(4096)
    with pytest.raises(ValueError, match="rows must be an int >= 1"):
        api.tiled_from(caps, 0)


def test_bench_tiled_rows_rows(monkeypatch):
    from benchmarks.experimental.b12x import bench_moe as B

    rows = B.expert_variants(argparse.Namespace(tiled_rows=[32, 128]), 1024, 4096, "w4a16")
    assert [label for label, _ in rows] == ["", " rows 32", " rows 128"]
    p = fm.plan(dataclasses.replace(_caps("w4a16"), device="cuda"))
    planned = B.with_override(p, "sm_90a", None, rows[1][1])
    assert api.expert_bucket(planned.override.experts, 512) == len(planned.override.experts) - 1  # T = 512: tiled
    assert [b.max_tokens for b in planned.override.experts][-2:] == [511, 4096]
    monkeypatch.setattr(_buckets, "TILED_DEQUANT", True)
    nv = fm.plan(dataclasses.replace(_caps("nvfp4"), device="cuda"))
    kept = B.with_override(nv, "sm_90a", None, B.with_tiled_rows(32)).override.experts
    assert kept == nv.heuristic("sm_90a").experts  # rows 32 = TILED_ROWS: the heuristic's, dequant choices kept
    assert kept[-1].dequant and [b.dequant for b in kept[:-1]] == [False, True, True, False]
    with pytest.raises(SystemExit):
        B.main(["--tiled-rows", "0"])


@pytest.mark.parametrize(
    "first, last, want",
    [
        (9, 128, [(8, False), (64, True), (128, True), (511, False)]),
        (9, 64, [(8, False), (64, True), (511, False)]),
        (9, 30, [(8, False), (30, True), (64, False), (511, False)]),
        (70, 100, [(64, False), (69, False), (100, True), (511, False)]),
        (1, 511, [(64, True), (511, True)]),
    ],
)
def test_decode_dequant_between_two_bounds(first, last, want):
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    caps = _caps("nvfp4")
    got = _buckets.with_decode_dequant(api.with_tiled_bucket(caps, X.default_buckets(4096)), first, last)
    assert [(b.max_tokens, b.dequant) for b in got[:-1]] == want and got[-1].tiled and not got[-1].dequant
    api.check_buckets(caps, got)


@pytest.mark.parametrize(
    "shape, want",
    [((512, 10, 4096, 1024), True), ((256, 8, 4096, 2048), False), ((128, 8, 2048, 768), False)],
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v),
)
def test_t1_dequant_where_it_saves_waves(shape, want, monkeypatch):
    """`_buckets.T1_DEQUANT` (on): the nvfp4 recipe's T = 1 bucket takes the dequantized operands where its FC1 and FC2
    grids at T = 1 take fewer waves at the bf16-A occupancy (E = 512: FC1 640 CTAs, 2 waves packed against 1; FC2
    1280, 3 against 2), on sm_90a or a shape-only query; sm_120a, the w4a16 recipe and the switch off keep T = 1
    packed."""
    assert _buckets.T1_DEQUANT is True
    e, k, h, i = shape
    caps = _caps("nvfp4", e=e, k=k, h=h, i=i)
    monkeypatch.setattr(_buckets, "T1_DEQUANT", False)
    before = api.heuristic_buckets(caps, arch="sm_90a")
    assert before[0].max_tokens == 1 and before[0].dequant is False  # packed T = 1: a bucket of its own
    monkeypatch.setattr(_buckets, "T1_DEQUANT", True)
    for arch in (None, "sm_90a"):
        got = api.heuristic_buckets(caps, arch=arch)
        assert _buckets.t1_dequant(caps, before[0], arch) is want
        # on: T = 1 joins the next (dequantized) bucket, nothing else moves; off: the buckets as before
        assert got == (before[1:] if want else before)
        assert _buckets.dequant_tokens(caps, None) == _buckets.decode_dequant_last(caps)  # the workspace: unchanged
    assert api.heuristic_buckets(caps, arch="sm_120a") == before
    w4a16 = _caps("w4a16", e=e, k=k, h=h, i=i)
    assert not any(b.dequant for b in api.heuristic_buckets(w4a16, arch="sm_90a"))
