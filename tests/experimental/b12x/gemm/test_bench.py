"""bench_gemm on the CPU: its CLI, its bytes formula, and every recipe's setup (the reference path)."""

import dataclasses

import pytest
import torch

from benchmarks.experimental.b12x import bench_gemm as BG

pytestmark = pytest.mark.contract


def test_help_exits_cleanly(capsys):
    with pytest.raises(SystemExit) as e:
        BG.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--sweep" in out and "--cold-weights" in out and "--copy-rows" in out and "--pdl" in out


def test_bytes_formula():
    assert BG.operand_bytes("nvfp4", 4096, 4096) == 4096 * 2048 + 4096 * 256
    assert BG.operand_bytes("mxfp8", 16, 4096) == 16 * 4096 + 16 * 128
    assert BG.operand_bytes("fp8_block", 128, 256) == 128 * 256 + 4 * 128 * 2
    assert BG.operand_bytes("fp8_tensor", 2, 128) == 2 * 128 + 4


@pytest.mark.parametrize("recipe", BG.RECIPES)
def test_every_recipe_sets_up_and_matches_its_reference_on_cpu(recipe):
    gen = torch.Generator().manual_seed(0)
    ours = BG._setup(recipe, 3, 64, 256, "cpu", gen)
    ours.fn()
    err = (ours.out.float() - ours.ref).abs().max().item()
    assert err <= 2**-7 * ours.ref.abs().max().item()


def test_decode_range_matches_the_buckets():
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    assert BG.DECODE_MAX_M == max(L.BUCKET_MAX_M[b] for b in L.BUCKETS if b.startswith("decode"))


def test_sweep_subsets():
    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _decode_sweeps as DS

    full = BG.sweep_configs("decode16", 16, 11264, 2048, "nvfp4")
    assert full == DS.candidate_configs(16)
    pre = BG.sweep_configs("decode16", 16, 11264, 2048, "nvfp4", "prefetch")
    assert pre[0] == L.default_config("decode16", 11264, 2048, "nvfp4") and pre[0].prefetch == 0
    assert len(pre) == 13 and all(c.prefetch > 0 for c in pre[1:])
    assert BG.sweep_configs("tiled64", 100, 4096, 4096, "nvfp4", "prefetch") == ()


def test_ksplit_subset():
    """--sweep-subset ksplit: the case's heuristic, then it and its K splits over 2- and 4-CTA clusters
    launched plainly and as programmatic dependents, each valid."""
    import dataclasses

    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode_fused as F

    for m, n, k in ((16, 4096, 14336), (16, 28672, 4096), (1, 4096, 4096)):
        bucket = L.bucket_for(m)
        cands = BG.sweep_configs(bucket, m, n, k, "nvfp4", "ksplit", "bfloat16")
        assert cands[0] == L.default_config(bucket, n, k, "nvfp4", a_fmt="bfloat16") and cands[0].ksplit == 1
        fused = [c for c in cands if L.is_fused(c)]  # where the heuristic has warp groups: fused "wait" 1 / wn groups
        assert [c.decode.wn for c in fused] == ([1, cands[0].wn] if cands[0].wn > 1 else [])
        assert all(c.pdl == "wait" and F.why_not("bfloat16", "nvfp4", "bfloat16", c) is None for c in fused)
        rest = [c for c in cands[1:] if not L.is_fused(c)]
        assert len(rest) == len(set(rest)) >= 4 and {c.ksplit for c in rest} == {1, 2, 4}
        assert rest[0] == dataclasses.replace(cands[0], pdl_wait=True)  # the base as a programmatic dependent
        plain = [c for c in rest if not c.pdl_wait]
        assert sorted(map(repr, rest)) == sorted(
            map(repr, [*plain, *(dataclasses.replace(c, pdl_wait=True) for c in [cands[0], *plain])])
        )
        assert all(KD.why_not("bfloat16", "nvfp4", "bfloat16", c) is None for c in rest)
    m16 = BG.sweep_configs("decode16", 16, 4096, 14336, "nvfp4", "ksplit", "bfloat16")
    assert any(not L.is_fused(c) and c.ashare and c.wn * 16 * c.tiles == 128 and c.ksplit == 4 for c in m16)
    assert BG.sweep_configs("tiled64", 100, 4096, 4096, "nvfp4", "ksplit") == ()


def test_pdl_subset():
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    cands = BG.sweep_configs("decode8", 1, 28672, 4096, "nvfp4", "pdl", "bfloat16")
    assert cands[0] == L.default_config("decode8", 28672, 4096, "nvfp4", a_fmt="bfloat16")
    fused = cands[1:]
    assert len(fused) == 8 and len(set(fused)) == 8 and all(L.is_fused(c) and c.epilogue == "none" for c in fused)
    assert {(c.pdl, c.span) for c in fused} == {
        ("off", "rows"),
        ("wait", "rows"),
        ("prefetch", "rows"),
        ("prefetch", "step"),
    }
    assert {c.decode.wcache for c in fused} == {"nc", "na256"}  # plain loads and the heuristic's hints
    assert BG.sweep_configs("tiled64", 100, 4096, 4096, "nvfp4", "pdl", "bfloat16") == ()


def test_stream_and_probe_subsets_and_sweep_workers(capsys):
    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _decode_sweeps as DS

    base = L.default_config("decode16", 28672, 4096, "nvfp4")
    assert BG.sweep_configs("decode16", 16, 28672, 4096, "nvfp4", "stream") == (base,) + DS.stream_variants(base)
    probe = BG.sweep_configs("decode8", 1, 28672, 4096, "nvfp4", "probe")
    assert probe[0].probe == "" and {c.probe for c in probe[1:]} == {"", "loads", "nomma", "wloads", "l1act"}
    assert BG.sweep_configs("tiled64", 100, 4096, 4096, "nvfp4", "stream") == ()
    assert BG.sweep_configs("tiled64", 100, 4096, 4096, "nvfp4", "probe") == ()
    step = BG.sweep_configs("decode8", 1, 28672, 4096, "nvfp4", "probe-step")
    assert step[0] == probe[0] and step[1] == dataclasses.replace(probe[0], probe="loads")
    assert [c.probe for c in step] == ["", "loads"] * (len(step) // 2) and len(step) == 10
    assert {(c.kgroup, c.unroll, c.tiles) for c in step[2:]} >= {
        (2, probe[0].unroll, probe[0].tiles),
        (4, probe[0].unroll, probe[0].tiles),
    }
    assert all(c.prefetch == 0 for c in step if c.kgroup > 1)  # kgroup excludes prefetch (why_not)
    assert BG.sweep_configs("tiled64", 100, 4096, 4096, "nvfp4", "probe-step") == ()
    with pytest.raises(SystemExit):
        BG.main(["--help"])
    out = capsys.readouterr().out
    assert "--sweep-workers" in out and "stream" in out and "probe-step" in out


def test_layout_subset_and_stream_decode_kernel():
    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_stream as KS

    cands = BG.sweep_configs("decode8", 1, 28672, 4096, "nvfp4", "layout")
    assert cands[0] == L.default_config("decode8", 28672, 4096, "nvfp4") and not L.is_stream(cands[0])
    assert cands[1:] == KS.candidate_configs(8, 28672, 4096) and all(L.is_stream(c) for c in cands[1:])
    assert BG.sweep_configs("decode8", 1, 28672, 4096, "mxfp4", "layout") == ()
    assert BG.sweep_configs("tiled64", 100, 4096, 4096, "nvfp4", "layout") == ()
    over = BG._decode_override("stream", "bfloat16", "nvfp4", 16, 4096, 14336)
    assert over == {"decode16": KS.default_config(16, 4096, 14336)}
    assert BG._decode_override("stream", "nvfp4", "nvfp4", 16, 4096, 14336) is None  # not weight-only
    assert BG._decode_override("stream", "bfloat16", "nvfp4", 1, 4096, 640) is None  # no layout for K


def test_layout_probe_subset():
    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_stream as KS

    cands = BG.sweep_configs("decode16", 16, 4096, 14336, "nvfp4", "layout-probe")
    assert not L.is_stream(cands[0]) and cands[1:] == KS.probe_variants(KS.default_config(16, 4096, 14336))
    assert [c.probe for c in cands[1:]] == ["", "loads", "", "loads"]


def test_cold_weights_rotates_every_copy_once_a_graph(monkeypatch):
    from benchmarks.experimental.b12x import common as C

    args = C.standard_parser("x").parse_args(["--timer", "graph"])
    args.cold_weights = True
    assert BG.weight_copies(args, 66 * 2**20) == 3  # 3 x 60 MB of L2
    assert BG.weight_copies(args, 9 * 2**20) == 20
    args.cold_weights = False
    assert BG.weight_copies(args, 9 * 2**20) == 1

    gen = torch.Generator().manual_seed(0)
    ours = BG._setup("w4a16_nvfp4", 2, 64, 256, "cpu", gen, copies=3)
    assert len(ours.weights) == 3 and ours.weights[0] is ours.weight
    assert not torch.equal(ours.weights[0].values, ours.weights[1].values)
    seen = []
    fn, calls = ours.timed(lambda w: seen.append(w))
    for _ in range(2 * calls):
        fn()
    assert calls == 3 and seen == list(ours.weights) * 2
    # every copy computes its own product: the rotation really changes what each call reads
    fn, _ = ours.timed()
    outs = []
    for _ in range(3):
        ours.out.fill_(float("nan"))
        fn()
        outs.append(ours.out.clone())
    assert not torch.equal(outs[0], outs[1]) and torch.equal(outs[0], (ours.fn(), ours.out)[1])

    captured = {}
    monkeypatch.setattr(BG, "measure", lambda f, a, **kw: captured.update(kw) or C.Timing.from_samples([1.0], "x"))
    BG.measure_calls(fn, 3, args)
    assert captured == {"calls_per_graph": 3}
    with pytest.raises(SystemExit):
        BG.main(["--cold-weights", "--timer", "events"])


def test_pdl_row_plans_the_fused_decode_kernel():
    assert BG.pdl_applies("prefetch", 16) and BG.pdl_applies("wait", 64)
    assert not BG.pdl_applies("off", 1) and not BG.pdl_applies("prefetch", 65)
    assert not BG.pdl_applies("prefetch", 1, "stream")
    gen = torch.Generator().manual_seed(0)
    ours = BG._setup("w4a16_nvfp4", 3, 64, 256, "cpu", gen, pdl="prefetch")
    assert ours.run_pdl is not None
    ours.out.fill_(float("nan"))
    ours.run_pdl(ours.weight)
    assert (ours.out.float() - ours.ref).abs().max().item() <= 2**-7 * ours.ref.abs().max().item()
    assert BG._setup("w4a16_nvfp4", 3, 64, 256, "cpu", gen).run_pdl is None
    with pytest.raises(SystemExit):
        BG.main(["--pdl", "sometimes"])


def test_prefetch_span_by_weight_bytes_and_opts():
    """launch.prefetch_span: whole rows for weights up to ROWS_PREFETCH_BYTES, the first step's K range
    above (session 25's H200 sweep); fused_config takes "span=..." among its opts."""
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    assert L.prefetch_span("prefetch", 4096, 4096, "nvfp4") == "rows"  # 9.4 MB
    assert L.prefetch_span("prefetch", 4096, 14336, "nvfp4") == "step"  # 33 MB
    assert L.prefetch_span("prefetch", 4096, 4096, "mxfp8") == "step"  # 17.3 MB
    assert L.prefetch_span("prefetch", 7168, 2048, "mxfp8") == "step"  # 15.1 MB
    assert L.prefetch_span("prefetch", 11264, 2048, "nvfp4") == "rows"  # 13 MB: the demo block's gate_up
    assert L.prefetch_span("wait", 28672, 4096, "nvfp4") == "rows"
    assert L.fused_config("decode8", 28672, 4096, "nvfp4", "bfloat16", pdl="prefetch").span == "step"
    assert L.fused_config("decode8", 4096, 4096, "nvfp4", "bfloat16", pdl="prefetch").span == "rows"
    cfg = L.fused_config("decode8", 2048, 5632, "nvfp4", "bfloat16", "residual", "prefetch", "upfront=4, span=step")
    assert (cfg.span, cfg.decode.upfront) == ("step", 4)
    assert L._split_span("span=rows") == (None, "rows") and L._split_span(None) == (None, None)
    for opts, pdl in (("span=lines", "prefetch"), ("span=step", "wait")):
        with pytest.raises(ValueError, match="span must be one of"):
            L.fused_config("decode8", 2048, 5632, "nvfp4", "bfloat16", "residual", pdl, opts)


def test_fused_hints_follow_the_launch_mode():
    """fused_config's default hints: the heuristic's cache hints except after a whole-row L2 prefetch
    (session 25: even or slower there, faster under a plain launch, "wait" and the first-step prefetch)."""
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    def wcache(n, k, pdl, **kw):
        return L.fused_config("decode8", n, k, "nvfp4", "bfloat16", "silu_mul", pdl, **kw).decode.wcache

    assert wcache(11264, 2048, "off") == wcache(11264, 2048, "wait") == "na256"
    assert wcache(11264, 2048, "prefetch") == "nc"  # 13 MB: whole rows
    assert wcache(28672, 4096, "prefetch") == "na256"  # 66 MB: the first step
    assert wcache(11264, 2048, "prefetch", hints=True) == "na256" and wcache(11264, 2048, "off", hints=False) == "nc"


@pytest.mark.parametrize("epilogue", ["silu_mul", "residual"])
def test_epilogue_cases_set_up_and_match_their_reference_on_cpu(epilogue):
    """--epilogue: the case's plan fuses it (silu_mul's out is [M, N / 2], residual's reads a [M, N] tensor), the
    reference applies it, and the bytes count the residual and the output actually written."""
    gen = torch.Generator().manual_seed(0)
    m, n, k = 3, 64, 256
    ours = BG._setup("w4a16_nvfp4", m, n, k, "cpu", gen, pdl="wait", epilogue=epilogue)
    cols = n // 2 if epilogue == "silu_mul" else n
    assert ours.out.shape == ours.ref.shape == (m, cols) and ours.mm_kw["epilogue"] == epilogue
    assert ours.error() <= 2**-7 * ours.ref.abs().max().item()
    assert ours.error(ours.run_pdl) <= 2**-7 * ours.ref.abs().max().item()
    plain = BG._setup("w4a16_nvfp4", m, n, k, "cpu", gen)
    assert plain.mm_kw is None and not torch.allclose(ours.ref[:, :cols], plain.ref[:, :cols])
    extra = 2 * m * n if epilogue == "residual" else -2 * m * (n - cols)
    assert ours.nbytes == plain.nbytes + extra
    with pytest.raises(ValueError, match="weight-only recipe at M <= 64"):
        BG._setup("nvfp4", m, n, k, "cpu", gen, epilogue=epilogue)


def test_epilogue_applies_and_sweeps_the_fused_groups(monkeypatch):
    from flashinfer.experimental.b12x.gemm._shared import decode_rules as R
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    for name in ("FUSED_SILU_GROUPS", "FUSED_SILU_GROUPS4"):
        monkeypatch.setattr(R, name, False)  # silu_mul's choice is one group (the order below)

    assert BG.epilogue_applies("silu_mul", "w4a16_nvfp4", 16) and BG.epilogue_applies("residual", "w8a16_mxfp8", 64)
    assert not BG.epilogue_applies("none", "w4a16_nvfp4", 1) and not BG.epilogue_applies("silu_mul", "nvfp4", 1)
    assert not BG.epilogue_applies("silu_mul", "w4a16_nvfp4", 65)
    assert not BG.epilogue_applies("silu_mul", "w4a16_nvfp4", 16, "triton")
    cands = BG.sweep_configs("decode16", 16, 28672, 4096, "nvfp4", "ksplit", "bfloat16", "silu_mul")
    base = L.default_config("decode16", 28672, 4096, "nvfp4", a_fmt="bfloat16")
    assert base.wn > 1 and all(L.is_fused(c) and c.epilogue == "silu_mul" for c in cands)
    w = base.wn  # each launch: fused_config's choice, the other wn, then the groups sharing activations (ashare)
    got = [(c.pdl, c.decode.wn, c.decode.ashare) for c in cands]
    assert got == [(p, *g) for p in ("off", "wait") for g in ((1, False), (w, False), (w, True))]
    res = BG.sweep_configs("decode16", 16, 28672, 4096, "nvfp4", "ksplit", "bfloat16", "residual")  # grouped first
    got = [(c.pdl, c.decode.wn, c.decode.ashare) for c in res]
    assert got == [(p, *g) for p in ("off", "wait") for g in ((w, False), (1, False), (w, True))]
    one = BG.sweep_configs("decode8", 1, 4096, 4096, "nvfp4", "ksplit", "bfloat16", "residual")
    assert [(c.pdl, c.decode.wn) for c in one] == [("off", 1), ("wait", 1)]
    assert BG.sweep_configs("decode16", 16, 28672, 4096, "nvfp4", "stream", "bfloat16", "silu_mul") == ()
    for argv in (
        ["--epilogue", "silu_mul", "--decode-kernel", "triton"],
        ["--epilogue", "residual", "--sweep"],
        ["--epilogue", "residual", "--sweep", "--sweep-subset", "stream"],
    ):
        with pytest.raises(SystemExit):
            BG.main(argv)


@pytest.mark.parametrize("epilogue,m,n,k", [("silu_mul", 1, 28672, 4096), ("residual", 16, 4096, 4096)])
def test_epilogue_fp4_subset(epilogue, m, n, k):
    """--sweep-subset fp4 with an epilogue: the fused kernel launched plainly, then under pdl "wait" and "prefetch",
    each time fused_config's placement first, then the other two; each runnable; nothing for FP8 weights."""
    import dataclasses

    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode_fused as F

    bucket = L.bucket_for(m)
    cands = BG.sweep_configs(bucket, m, n, k, "nvfp4", "fp4", "bfloat16", epilogue)
    assert len(cands) == 9
    for pdl, group in (("off", cands[:3]), ("wait", cands[3:6]), ("prefetch", cands[6:])):
        assert group[0] == L.fused_config(bucket, n, k, "nvfp4", "bfloat16", epilogue, pdl)
        assert sorted(c.decode.fp4 for c in group) == ["left", "mul", "shift"]
        assert all(L.is_fused(c) and c.epilogue == epilogue and c.pdl == pdl for c in group)
        same = group[0].decode.fp4  # the candidates differ from the first in the placement only
        assert all(dataclasses.replace(c, decode=dataclasses.replace(c.decode, fp4=same)) == group[0] for c in group)
    assert all(F.why_not("bfloat16", "nvfp4", "bfloat16", c) is None for c in cands)
    assert BG.sweep_configs(bucket, m, n, k, "mxfp8", "fp4", "bfloat16", epilogue) == ()
