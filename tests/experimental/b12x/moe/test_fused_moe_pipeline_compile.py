"""Compile tier of moe.fused_moe's Triton kernels (routing/gather, requantize, combine): they build on
the CPU for sm_90a and sm_120a, emit the instructions the bit-exactness argument rests on, obey the
compile spine's cache and freeze, and the plan's kernel list wires in the expert GEMMs."""

import dataclasses
import pickle
import re

import pytest

from flashinfer.experimental.b12x._lib import compile as spine
from flashinfer.experimental.b12x._lib.freeze import KernelResolutionFrozenError, freeze_kernel_resolution
from flashinfer.experimental.b12x.moe import fused_moe as fm
from flashinfer.experimental.b12x.moe.fused_moe import _buckets, _combine, _routing, api

from .moe_cases import weight_plan

pytestmark = pytest.mark.compile
FLOAT_OPS = re.compile(r"\b((?:cvt|div|fma|mul|add|sub|max|min|abs|rcp)\.[a-z0-9.]+)")


@pytest.fixture(autouse=True)
def _triton_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))


def float_ops(kernel) -> set:
    ptx = kernel.compiled.asm["ptx"]
    assert kernel.compiled.asm["cubin"] and "wgmma" not in ptx
    return set(FLOAT_OPS.findall(ptx))


def exact_ops(ops):
    """Correctly rounded divisions, no FMA contraction of the oracle's separate multiply and add,
    no flush-to-zero, no approximate reciprocal or division."""
    bad = [o for o in ops if o.startswith(("div.full", "div.approx", "fma.", "rcp.approx")) or ".ftz" in o]
    assert not bad, sorted(ops)


@pytest.mark.parametrize(
    "arch, a_fmt, ids, compact",
    [
        ("sm_90a", "bfloat16", "int32", False),
        ("sm_90a", "nvfp4", "int64", False),
        ("sm_120a", "mxfp8", "int32", False),
        ("sm_90a", "nvfp4", "int32", True),
        ("sm_90a", "nvfp4_deq", "int64", False),  # the dequant bucket's gather (bf16 e2m1 x e4m3)
    ],
)
def test_routing_kernels_compile_exact(arch, a_fmt, ids, compact):
    # the "divide" encode of the dequant operand (the heuristic's "search": the test below)
    cfg = dataclasses.replace(_routing.default_config(2048), compact_grid=compact, nvfp4_deq_encode="divide")
    k = _routing.compile_routing(ids, 8, 128, 2048, a_fmt, a_fmt == "nvfp4", cfg, arch)
    for kern in (k.micro, k.gather, k.hist, k.scan, k.start):
        assert re.search(rf"\.target {arch}\b", kern.compiled.asm["ptx"])
        exact_ops(float_ops(kern))
    ops = float_ops(k.micro) | float_ops(k.gather)
    if a_fmt != "bfloat16":
        assert "div.rn.f32" in ops
    # NVFP4: the standalone quantizer's division-free encode (`_e4m3_rn`: no fp8 instruction); MXFP8
    # and the dequant bucket's operand keep the hardware E4M3 conversion
    assert ("cvt.rn.satfinite.e4m3x2.f32" in ops) == (a_fmt in ("mxfp8", "nvfp4_deq"))
    if a_fmt in ("nvfp4", "nvfp4_deq"):
        assert "div.rn.f32" in float_ops(k.start)  # alpha = 1 / gs, correctly rounded
    if a_fmt == "nvfp4_deq":  # the E2M1 rounding fl(fl(|y| + c) - c) stays two rounded adds
        assert {"add.rn.f32", "sub.rn.f32"} <= ops


@pytest.mark.parametrize("a_fmt", ["bfloat16", "nvfp4", "mxfp8"])
def test_gather_fits_its_registers(a_fmt, cuda_binary):
    """The default gather tiles (64 routes x 512 columns on the dynamic path, 16 x 512 micro) go in
    column steps of gather_tile values (`gather_step_h`: 64 / 256 columns), so no format spills; with
    the whole tile at once the nvfp4 gather took 255 registers and 1832 bytes of stack (H200
    2026-12-01: route + gather 1278 µs at E = 512, T = 4096, against bf16's 164)."""
    cfg = _routing.default_config(4096)
    assert (_routing.gather_step_h(a_fmt, cfg.dyn_block_r, cfg), _routing.gather_step_h(a_fmt, cfg.block_r, cfg)) == (
        64,
        256,
    )
    k = _routing.compile_routing("int32", 10, 512, 4096, a_fmt, False, cfg, "sm_90a")
    for kern in (k.micro, k.gather):
        use = cuda_binary.resources(kern.compiled.asm["cubin"])
        assert use["STACK"] <= 8 and use["LOCAL"] == 0 and use["REG"] <= 128, use


@pytest.mark.parametrize(
    "arch, a2_fmt", [("sm_90a", None), ("sm_90a", "nvfp4"), ("sm_120a", "mxfp8"), ("sm_90a", "nvfp4_deq")]
)
def test_requant_and_combine_compile_exact(arch, a2_fmt):
    ccfg = dataclasses.replace(_combine.default_config(768), nvfp4_deq_encode="divide")  # "search": below
    c = _combine.compile_combine(8, 128, 2048, 768, a2_fmt, False, ccfg, arch)
    exact_ops(float_ops(c.combine))
    assert (c.requant is None) == (a2_fmt is None)
    if c.requant is not None:
        ops = float_ops(c.requant)
        exact_ops(ops)
        assert "div.rn.f32" in ops
        assert ("cvt.rn.satfinite.e4m3x2.f32" in ops) == (a2_fmt in ("mxfp8", "nvfp4_deq"))
        if a2_fmt == "nvfp4_deq":
            assert {"add.rn.f32", "sub.rn.f32"} <= ops


@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
def test_deq_search_encode_compiles_without_fp8_or_value_divisions(arch):
    """`nvfp4_deq_encode="search"` (the heuristic's): the dequant operand by the packed encode's division-free
    codes, so the gather and requantize hold no fp8 conversion and only the block scales' t = gs amax / 6
    divisions (one per 16 values: far fewer div.rn than the "divide" encode's two per value)."""
    rcfg = dataclasses.replace(_routing.default_config(2048), nvfp4_deq_encode="search")
    ccfg = dataclasses.replace(_combine.default_config(768), nvfp4_deq_encode="search")
    k = _routing.compile_routing("int32", 8, 128, 2048, "nvfp4_deq", False, rcfg, arch)
    c = _combine.compile_combine(8, 128, 2048, 768, "nvfp4_deq", False, ccfg, arch)
    divide = _routing.compile_routing(
        "int32", 8, 128, 2048, "nvfp4_deq", False, dataclasses.replace(rcfg, nvfp4_deq_encode="divide"), arch
    )
    for kern, plain in ((k.micro, divide.micro), (k.gather, divide.gather), (c.requant, None)):
        ops = float_ops(kern)
        exact_ops(ops)
        assert "cvt.rn.satfinite.e4m3x2.f32" not in ops and "div.rn.f32" in ops
        if plain is not None:
            ptx, ref = kern.compiled.asm["ptx"], plain.compiled.asm["ptx"]
            assert ptx.count("div.rn.f32") < ref.count("div.rn.f32")
    with pytest.raises(ValueError, match="routing"):
        _routing.compile_routing("int32", 8, 128, 2048, "nvfp4_deq", False,
                                 dataclasses.replace(rcfg, nvfp4_deq_encode="fast"), arch)  # fmt: skip


def test_compile_cache_and_freeze():
    cfg = _combine.default_config(256)
    before = _combine.compile_combine.compile_count
    first = _combine.compile_combine(4, 16, 256, 256, None, True, cfg, "sm_90a")
    assert _combine.compile_combine(4, 16, 256, 256, None, True, cfg, "sm_90a") is first
    assert _combine.compile_combine.compile_count == before + 1
    freeze_kernel_resolution("test")
    with pytest.raises(KernelResolutionFrozenError, match="moe.fused_moe: kernel num_topk=4 num_experts=16"):
        _combine.compile_combine(4, 16, 512, 256, None, True, cfg, "sm_90a")


def test_freeze_serves_a_combine_key_another_recipe_resolved():
    # What the 05:55 H200 run's test_freeze_holds tripped on: the combine's key has no weight format
    # or activation, so two w4a16 plans with the router weight on the input share one combine
    # kernel; once either resolved it, freeze serves it, and only a key nobody resolved raises.
    plans = [
        fm.plan(
            fm.Caps(
                max_tokens=16,
                num_topk=2,
                device="cuda",
                weight_plan=weight_plan(src, act, ("w4a16",), e=8, h=256, i=128),
                quant_mode="w4a16",
                apply_router_weight_on_input=True,
            )
        )  # fmt: skip
        for src, act in (("fp4_e8m0_k32", "swiglu_oai"), ("modelopt_nvfp4", "silu"))
    ]
    jobs = [
        [args for fn, args in p.kernels(p.heuristic("sm_90a"), "sm_90a") if fn is _combine.compile_combine]
        for p in plans
    ]
    assert jobs[0] == jobs[1] and len(jobs[0]) == 1
    key = jobs[0][0]
    held = _combine.compile_combine(*key)
    other = (*key[:6], dataclasses.replace(key[6], block_t=2 * key[6].block_t), key[7])
    assert not _combine.compile_combine.resolved(*other)
    freeze_kernel_resolution("test")
    assert _combine.compile_combine(*key) is held
    with pytest.raises(KernelResolutionFrozenError, match="moe.fused_moe: kernel num_topk=2 num_experts=8"):
        _combine.compile_combine(*other)


def test_bad_compile_keys():
    with pytest.raises(ValueError, match="moe.fused_moe: ids_dtype must be one of"):
        _routing.compile_routing("int16", 2, 4, 64, "bfloat16", False, _routing.default_config(64), "sm_90a")
    with pytest.raises(ValueError, match="moe.fused_moe: routing cannot implement H=96 with mxfp8"):
        _routing.compile_routing("int32", 2, 4, 96, "mxfp8", False, _routing.RoutingConfig(block_h=64), "sm_90a")
    with pytest.raises(ValueError, match="moe.fused_moe: combine cannot implement I=48 with nvfp4"):
        _combine.compile_combine(2, 4, 64, 48, "nvfp4", False, _combine.CombineConfig(block_k=32), "sm_90a")


@pytest.mark.parametrize(
    "mode, source, act, a1, a2",
    [
        ("w4a16", "fp4_e8m0_k32", "swiglu_oai", "bfloat16", None),
        ("nvfp4", "modelopt_nvfp4", "silu", "nvfp4", "nvfp4"),
        ("w4a8_nvfp4", "modelopt_nvfp4", "relu2", "mxfp8", "mxfp8"),
    ],
)
def test_plan_kernels_wire_the_expert_gemms(mode, source, act, a1, a2, monkeypatch):
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as ex

    monkeypatch.setattr(_buckets, "DECODE_DEQUANT_FROM", None)  # nvfp4's dequant jobs: test_fused_moe_dequant
    wplan = weight_plan(source, act, (mode,), e=8, h=256, i=128)
    # 100 tokens: two buckets, and still below the grouped bucket (T * k / E >= 32 from T = 128)
    p = fm.plan(fm.Caps(max_tokens=100, num_topk=2, device="cuda", weight_plan=wplan, quant_mode=mode))
    cfg = p.heuristic("sm_120a")
    want = ex.default_buckets(100)
    if mode == "w4a16" and _buckets.W4A16_L2_PREFETCH:  # the weights' L2 prefetch (test_w4a16_l2_prefetch)
        want = _buckets.with_l2_prefetch(want)
    assert p.heuristic(None) is None and api.with_pdl(cfg, "off").experts == want
    small, large = cfg.experts  # T <= 64: 8-token MMA groups; 65 <= T <= 100: 16-token
    assert small.fc1.pdl == small.fc2.pdl == large.fc2.pdl == api.PDL  # every launch's mode (test_experts_pdl)
    assert (small.max_tokens, small.fc1.ntiles, small.fc2.ntiles, small.fc1.warps, small.fc1.prefetch) == (
        64, 1, 1, 4, 1,
    )  # fmt: skip
    assert (large.max_tokens, large.fc1.ntiles, large.fc2.ntiles) == (100, 2, 2)
    jobs = p.kernels(cfg, "sm_120a")
    wf, a2k = wplan.weight_format, a2 or "bfloat16"  # FC2's A: FC1's bf16 output for w4a16
    # E = 8, k = 2: the list grid while T < 4 (bucket 0 only), every expert from T = 4 (all buckets)
    assert [(fn.__name__, args) for fn, args in jobs] == [
        ("compile_routing", ("int32", 2, 8, 256, a1, False, cfg.routing, "sm_120a")),
        ("compile_routing", ("int64", 2, 8, 256, a1, False, cfg.routing, "sm_120a")),
        ("compile_combine", (2, 8, 256, 128, a2, False, cfg.combine, "sm_120a")),
        ("compile_fc1", (a1, wf, act, small.fc1, "sm_120a", "identity")),
        ("compile_fc2", (a2k, wf, small.fc2, "sm_120a", "identity")),
        ("compile_fc1", (a1, wf, act, large.fc1, "sm_120a", "identity")),
        ("compile_fc2", (a2k, wf, large.fc2, "sm_120a", "identity")),
        ("compile_fc1", (a1, wf, act, small.fc1, "sm_120a", "list")),
        ("compile_fc2", (a2k, wf, small.fc2, "sm_120a", "list")),
    ]
    assert all(fn is ex.compile_fc1 for fn, _ in jobs[3::2]) and all(fn is ex.compile_fc2 for fn, _ in jobs[4::2])
    assert sorted(p.expert_jobs(cfg, "sm_120a")) == [("identity", 0), ("identity", 1), ("list", 0)]
    for fn, args in jobs[:3]:  # the Triton ones compile in a worker process like any other kernel
        assert pickle.loads(pickle.dumps(fn.job(*args))).module == fn.__module__
    assert isinstance(cfg, api.MoeConfig)


@pytest.mark.parametrize(
    "compact, max_tokens, k, grids",
    [
        (False, 64, 2, ("identity",)),  # the full grid: every expert, never the list
        (True, 64, 2, ("identity", "list")),  # T * k < 8 for T < 4, >= 8 from T = 4
        (True, 3, 2, ("list",)),  # max T * k = 6 < E: the grid is always shorter than E
        (True, 64, 8, ("identity",)),  # k = E: T * k >= E at T = 1 already
        (True, 4, 2, ("identity", "list")),  # max T * k = E exactly: the identity grid at T = 4
    ],
)
def test_plan_compiles_only_the_expert_grids_it_can_launch(compact, max_tokens, k, grids):
    wplan = weight_plan("modelopt_nvfp4", "silu", ("nvfp4",), e=8, h=256, i=128)
    p = fm.plan(fm.Caps(max_tokens=max_tokens, num_topk=k, device="cuda", weight_plan=wplan, quant_mode="nvfp4"))
    cfg = p.heuristic("sm_90a")
    # the decode expert kernels' grids: the heuristic's buckets without the grouped large-T one (E = 8,
    # k = 8 reaches its 64 rows an expert at T = 64; test_grouped_emulated covers that bucket)
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts

    decode = _kernel_experts.default_buckets(max_tokens)
    cfg = dataclasses.replace(cfg, experts=decode, routing=dataclasses.replace(cfg.routing, compact_grid=compact))
    jobs = [(fn.__name__, args[-1]) for fn, args in p.kernels(cfg, "sm_90a")[3:]]
    variants = api.expert_variants(compact, 8, k, max_tokens, cfg.experts)
    assert sorted({g for g, _ in variants}) == sorted(grids)
    # one compile per distinct kernel: buckets with the same tilings would share theirs
    want, seen = [], set()
    for g, b in variants:
        for name, c in (("compile_fc1", cfg.experts[b].fc1), ("compile_fc2", cfg.experts[b].fc2)):
            if (name, g, c) not in seen:
                seen.add((name, g, c))
                want.append((name, g))
    assert jobs == want
    # every live T binds a variant the plan compiled; the list exactly while T * k < E
    for t in range(1, max_tokens + 1):
        g = api.expert_grid(compact, 8, k, t)
        assert g in grids and (g == "list") == (compact and t * k < 8)


def test_plan_rejects_dims_the_expert_gemms_cannot_take():
    wplan = weight_plan("modelopt_nvfp4", "silu", ("nvfp4",), e=8, h=256, i=48)
    p = fm.plan(fm.Caps(max_tokens=64, num_topk=2, device="cuda", weight_plan=wplan, quant_mode="nvfp4"))
    with pytest.raises(ValueError, match="intermediate_size must be a positive multiple of 32, got 48"):
        p.kernels(p.heuristic("sm_90a"), "sm_90a")


def test_worker_job_compiles_routing():
    args = ("int32", 2, 4, 64, "nvfp4", False, _routing.default_config(64), "sm_90a")
    assert spine.run_job(_routing.compile_routing.job(*args)).status == "compiled"


def test_bucket_spans_reach_the_expert_jobs(monkeypatch):
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as ex

    monkeypatch.setattr(_buckets, "DECODE_DEQUANT_FROM", None)  # one packed bucket (spans are the subject)

    wplan = weight_plan("modelopt_nvfp4", "silu", ("nvfp4",), e=8, h=256, i=128)
    p = fm.plan(fm.Caps(max_tokens=8, num_topk=8, device="cuda", weight_plan=wplan, quant_mode="nvfp4"))
    cfg = p.heuristic("sm_90a")
    (b,) = cfg.experts
    spanned = dataclasses.replace(cfg, experts=(dataclasses.replace(b, fc1_span=2, fc2_span=4),))
    p = fm.plan(p.caps, override=spanned)  # checked: spans 2 and 4 are implemented
    jobs = p.expert_jobs(spanned, "sm_90a")
    assert list(jobs) == [("identity", 0)]  # k = E: never the list
    (fc1, args1), (fc2, args2) = jobs[("identity", 0)]
    assert fc1 is ex.compile_fc1 and args1 == ("nvfp4", "nvfp4", "silu", b.fc1, "sm_90a", "identity", 2)
    assert fc2 is ex.compile_fc2 and args2 == ("nvfp4", "nvfp4", b.fc2, "sm_90a", "identity", 4)
    plain = p.expert_jobs(cfg, "sm_90a")[("identity", 0)]  # span 1: the arguments as before spans
    assert plain[0][1] == ("nvfp4", "nvfp4", "silu", b.fc1, "sm_90a", "identity")
    bad = dataclasses.replace(cfg, experts=(dataclasses.replace(b, fc2_span=3),))
    with pytest.raises(ValueError, match=r"override.experts\[0\].fc2: span must be one of \(1, 2, 4\)"):
        fm.plan(p.caps, override=bad)
