"""Compile tier: both quantizers compile on the CPU for every arch in META, emit the instructions the
bit-exactness argument rests on, and obey the compile spine's caches and freeze."""

import contextlib
import pickle
import re
import sys

import pytest

import b12x
from flashinfer.experimental.b12x._lib import compile as spine
from flashinfer.experimental.b12x._lib.freeze import KernelResolutionFrozenError, freeze_kernel_resolution
from flashinfer.experimental.b12x.quantization.mxfp8 import _kernel as mx
from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv

pytestmark = pytest.mark.compile

OPS = {"nvfp4": nv, "mxfp8": mx}
COMPILE = {"nvfp4": nv.compile_nvfp4, "mxfp8": mx.compile_mxfp8}


@pytest.fixture(autouse=True)
def _triton_cache(tmp_path, monkeypatch):
    """Triton's own cache under the test's tmp dir too (compile_for_target bypasses the spine)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")  # our options say so anyway; silences 3.9


@pytest.mark.parametrize("arch", b12x.find_op("quantization.nvfp4").archs)
@pytest.mark.parametrize("op", ["nvfp4", "mxfp8"])
def test_ptx_has_the_exact_instructions(op, arch):
    kmod = OPS[op]
    default = kmod.default_config(7168)
    configs = [default]
    if op == "nvfp4" and default.encode != "div":
        configs.append(nv.NvFp4Config(block_k=256))  # the oracle's own sequence stays a candidate
    if op == "nvfp4":
        configs.append(nv.NvFp4Config(*nv.LARGE_M_STEPS))  # the large-M "steps" candidate
    for cfg in configs:
        compiled = kmod.compile_for_target("bfloat16", 7168, cfg, arch)
        ptx = compiled.asm["ptx"]
        assert re.search(rf"\.target {arch}\b", ptx) and compiled.asm["cubin"]
        ops = set(re.findall(r"\b((?:cvt|div|fma|mul|add|sub|max|min|abs)\.[a-z0-9.]+)", ptx))
        # Correctly rounded divisions (Triton's `/` would be div.full), no contraction into FMAs, no
        # flush-to-zero anywhere in float math; the E4M3 scale: the RNE conversion instruction, or
        # (division-free NVFP4 encodes) no fp8 instruction at all: `_e4m3_rn` rounds on the bits,
        # because Triton 3.6's ptxas mishandles that instruction's 16-bit result.
        # (NVFP4 "pairs" divides by 6 with two exact-residual FMAs, `_pairs.block_t`: no division left.)
        assert ("div.rn.f32" in ops) != _division_free(cfg), (cfg, sorted(ops))
        if op == "nvfp4" and cfg.encode != "div":
            assert not [o for o in ops if "e4m3" in o], sorted(ops)
        else:
            assert "cvt.rn.satfinite.e4m3x2.f32" in ops
        # ("steps" tests each threshold with one saturating FMA on purpose, `_steps.py`: exact 0/1.)
        fmas = ("fma.rn.sat.f32",) if getattr(cfg, "encode", None) == "steps" else ()
        fmas += ("fma.rn.f32",) if _division_free(cfg) else ()
        bad = [o for o in ops if o.startswith(("div.full", "div.approx", "fma.")) and o not in fmas or ".ftz" in o]
        assert not bad, sorted(ops)


@pytest.mark.parametrize("op", ["nvfp4", "mxfp8"])
def test_compile_function_caches_and_freezes(op):
    kmod, compile_fn = OPS[op], COMPILE[op]
    cfg = kmod.default_config(4096)
    before = compile_fn.compile_count
    launcher = compile_fn("float16", 4096, cfg, "sm_90a")
    assert compile_fn.compile_count == before + 1 and launcher.compiled
    assert compile_fn("float16", 4096, cfg, "sm_90a") is launcher  # memory hit
    assert compile_fn.resolved("float16", 4096, cfg, "sm_90a")
    freeze_kernel_resolution("test")
    assert compile_fn("float16", 4096, cfg, "sm_90a") is launcher  # resolved keys stay usable
    with pytest.raises(KernelResolutionFrozenError, match=f"quantization.{op}: kernel dtype=float16 k=8192"):
        compile_fn("float16", 8192, kmod.default_config(8192), "sm_90a")
    assert compile_fn.compile_count == before + 1


@pytest.mark.parametrize("op", ["nvfp4", "mxfp8"])
def test_plan_kernels_are_worker_jobs(op):
    p = (
        b12x.quantization.nvfp4.plan(64, 4096)
        if op == "nvfp4"
        else b12x.quantization.mxfp8.plan((4096, "bfloat16", 64))
    )
    cfg = p.heuristic("sm_120a")
    assert cfg == OPS[op].default_config(4096) and cfg in p.candidates("sm_120a")
    assert all(OPS[op].can_implement(4096, c) for c in p.candidates("sm_120a"))
    ((compile_fn, args),) = p.kernels(cfg, "sm_120a")
    assert compile_fn is COMPILE[op] and args == ("bfloat16", 4096, cfg, "sm_120a")
    job = pickle.loads(pickle.dumps(compile_fn.job(*args)))
    assert spine.run_job(job).status == "compiled"  # what a compile worker does (no GPU needed)


def test_bad_compile_keys():
    with pytest.raises(ValueError, match=r"quantization.nvfp4: dtype must be one of \['bfloat16', 'float16'\]"):
        nv.compile_nvfp4("float32", 64, nv.default_config(64), "sm_90a")
    with pytest.raises(ValueError, match="quantization.mxfp8: cannot implement k=48"):
        mx.compile_mxfp8("bfloat16", 48, mx.default_config(64), "sm_90a")
    with pytest.raises(ValueError, match="arch must be one of"):
        nv.compile_nvfp4("bfloat16", 64, nv.default_config(64), "sm_80")


@pytest.mark.parametrize("op", ["nvfp4", "mxfp8"])
def test_compiled_signature_matches_the_launch_arguments(op):
    # The launcher calls the CompiledKernel positionally (constexprs included, as Triton's own JIT
    # path does): its argument order must be the kernel's.
    kmod = OPS[op]
    jit_fn = nv._nvfp4_quantize_kernel if op == "nvfp4" else mx._mxfp8_quantize_kernel
    src = kmod._source("bfloat16", 4096, kmod.default_config(4096))
    assert list(src.signature) == jit_fn.arg_names
    names = [n for n, t in src.signature.items() if t == "constexpr"]
    assert names[:3] == ["K", "BLOCK_M", "BLOCK_K"]
    assert names == [n for n in jit_fn.arg_names if n.isupper()]
    assert [src.constants[(jit_fn.arg_names.index(n),)] for n in names] == list(
        kmod.constexprs(4096, kmod.default_config(4096))
    )


@pytest.mark.parametrize("op", ["nvfp4", "mxfp8"])
def test_fingerprint_sources_cover_every_called_jit_function(op):
    # The spine fingerprints the compile function's module plus `sources=`: every Triton function the
    # kernel calls from another module must be listed there, or an edit to it would go unseen.
    import ast

    import triton

    from flashinfer.experimental.b12x._lib import triton_pdl as _triton_pdl
    from flashinfer.experimental.b12x._lib import triton_quant as _triton_helpers

    kmod = OPS[op]
    root = nv._nvfp4_quantize_kernel if op == "nvfp4" else mx._mxfp8_quantize_kernel
    seen, todo = set(), [root]
    while todo:  # the kernel and every JIT function it calls, transitively
        fn = todo.pop()
        if fn in seen:
            continue
        seen.add(fn)
        module = sys.modules[fn.__module__]
        names = {n.id for n in ast.walk(ast.parse(fn.src)) if isinstance(n, ast.Name)}
        todo += [getattr(module, n) for n in names if isinstance(getattr(module, n, None), triton.runtime.JITFunction)]
    outside = {f.__module__ for f in seen} - {kmod.__name__}
    nv_modules = {nv._encodes.__name__, nv._steps.__name__, nv._pairs.__name__, nv._kernel_pairs.__name__}
    assert outside == {_triton_helpers.__name__, _triton_pdl.__name__} | (nv_modules if op == "nvfp4" else set())
    assert set(COMPILE[op].sources) == outside


def test_compiled_launchers_pass_every_argument_in_order(monkeypatch):
    import torch

    calls = []

    class FakeCompiled:  # stands in for a CompiledKernel loaded on a device
        def __getitem__(self, grid):
            return lambda *args, stream: calls.append((grid, args, stream))

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 1234, raising=False)
    x = torch.empty(5, 64, dtype=torch.bfloat16)
    cfg = nv.NvFp4Config(16, 64, 4)
    loads = []
    launcher = nv.NvFp4Launcher(64, cfg, lambda i: loads.append(i) or FakeCompiled(), compiled=True, key="k")
    launcher(x, "packed", "scales", "gs", 2.5, 1, 5)
    launcher(x, "packed", "scales", "gs", 2.5, 1, 0)  # m == 0: nothing
    want = (
        x,
        "packed",
        "scales",
        "gs",
        2.5,
        1,
        5,
        64,
        16,
        64,
        0,
        False,
        False,
        False,
        1,
        False,
        True,
        False,
        0,
        False,
        False,
        False,
        False,  # k_major
        0,
    )
    assert calls == [((8, 1, 1), want, 1234)]
    mcfg = mx.MxFp8Config(4, 32, 1)
    launcher = mx.MxFp8Launcher(64, mcfg, lambda i: loads.append(i) or FakeCompiled(), compiled=True, key="k")
    launcher(x, "values", "rows", "mma", 5)
    assert calls[-1] == ((2, 2, 1), (x, "values", "rows", "mma", 5, 64, 4, 32, False, False, False, False, 0, 0), 1234)
    kcfg = mx.MxFp8Config(4, 32, 1, k_major=True)  # one grid axis: 2 row blocks x 2 column tiles
    mx.MxFp8Launcher(64, kcfg, lambda i: FakeCompiled(), compiled=True, key="k")(x, "values", "rows", "mma", 5)
    assert calls[-1][0] == (4, 1, 1) and calls[-1][1][-3:] == (True, 0, 0)
    hcfg = mx.MxFp8Config(4, 32, 1, lean=True, hw_nan=True)  # K_MAJOR, HW_NAN, PDL
    mx.MxFp8Launcher(64, hcfg, lambda i: FakeCompiled(), compiled=True, key="k")(x, "values", "rows", "mma", 5)
    assert calls[-1][1][-3:] == (False, 1, 0)
    assert loads == [None, None]  # one module load per launcher and device (CPU tensors: index None)
    freeze_kernel_resolution("test")
    with pytest.raises(KernelResolutionFrozenError, match="load on device"):
        nv.NvFp4Launcher(64, cfg, lambda i: FakeCompiled(), compiled=True, key="k")(x, 0, 0, 0, 1.0, 0, 5)


def _division_free(cfg) -> bool:
    """The configs whose per-block division by a constant is two fma steps (no `div.rn.f32`)."""
    return getattr(cfg, "encode", None) == "pairs"


def _one_per_variant(configs):
    out = {}
    for c in configs:
        out.setdefault(tuple(v for f, v in vars(c).items() if f not in ("block_m", "block_k", "num_warps")), c)
    return tuple(out.values())


@pytest.mark.parametrize(
    "op, sweep",
    [
        ("nvfp4", False),
        ("mxfp8", False),
        pytest.param("nvfp4", True, marks=pytest.mark.slow),
        pytest.param("mxfp8", True, marks=pytest.mark.slow),
    ],
)
def test_candidates_compile_with_the_exact_instructions(op, sweep):
    # Every config the bench or the autotuner may pick: RNE E4M3 conversion (the hardware one, or by
    # bits in the division-free NVFP4 encodes), no FMA contraction, no flush-to-zero, no approximate
    # division, and NaN-ignoring max (`max.f32`, never `max.NaN`: the lean amax relies on it). The
    # division-free NVFP4 encode keeps only the per-block divisions.
    import dataclasses

    kmod = OPS[op]
    configs = kmod.candidate_configs(7168, unvalidated=True)  # what bench --all-configs sweeps
    assert len(configs) == len(set(configs)) > 10
    for cfg in configs if sweep else _one_per_variant(configs):  # the full sweep is -m slow
        ptx = kmod.compile_for_target("bfloat16", 7168, cfg, "sm_90a").asm["ptx"]
        ops = set(re.findall(r"\b((?:cvt|div|fma|mul|add|sub|max|min|abs)\.[a-z0-9.]+)", ptx))
        assert "max.f32" in ops and "max.NaN" not in ptx, cfg
        if op == "nvfp4" and cfg.encode == "steps":
            # Its only FMAs are the 7 saturating steps per element (the inline `fma.rn.sat.f32`,
            # `_steps.py`): nothing contracted. A 16x256 tile of 128 threads: 32 elements a thread.
            assert {o for o in ops if o.startswith("fma.")} == {"fma.rn.sat.f32"}, (cfg, ops)
            assert ptx.count("fma.rn.sat.f32") == 7 * cfg.block_m * cfg.block_k // (32 * cfg.num_warps), cfg
            ops -= {"fma.rn.sat.f32"}
        if op == "nvfp4" and cfg.encode == "pairs":
            # Its only FMAs are the two of each block's t = RN(gs amax / 6) (`_pairs.block_t`): nothing
            # contracted; the codes are mask sums of 8 `set` a pair of values; the thresholds per block
            # are directed-rounding products.
            vpt = cfg.block_m * cfg.block_k // (32 * cfg.num_warps)  # values a thread owns per tile
            vpt *= cfg.k_iters if cfg.unroll else 1  # the unrolled column loop: every tile's code
            assert {o for o in ops if o.startswith("fma.")} == {"fma.rn.f32"}, (cfg, ops)
            assert ptx.count("fma.rn.f32") == 2 * vpt // 16, cfg
            assert ptx.count("set.gt.u32.bf16x2") == 7 * vpt // 2 and ptx.count("set.lt.u32.bf16x2") == vpt // 2
            assert "bf16x2.bf16x2" not in ptx, cfg  # no 1.0-valued compares left to sum
            # per block: 4 thresholds, then 3 doubled (gs <= 2^100) or 3 more computed (the other branch)
            # (lut: the table once per program, one entry per block a thread owns, + the fallback per block)
            table = 10 * cfg.block_m * cfg.block_k // (16 * 32 * cfg.num_warps) if cfg.lut else 0
            assert ptx.count("mul.rm.f32") == 10 * vpt // 16 + table and "div.rn.f64" in ptx, cfg  # RD(1/gs): once
            assert ptx.count("shfl.sync.idx.b32") == (7 * vpt // 16 if cfg.lut else 0), cfg
            ops -= {"fma.rn.f32"}
        assert not [o for o in ops if o.startswith(("div.full", "div.approx", "fma.")) or ".ftz" in o], (cfg, ops)
        if op == "nvfp4" and cfg.encode != "div":
            # No fp8 instruction at all: the scale is rounded by bits (`_e4m3_rn`). Triton 3.6's
            # ptxas mishandled the 16-bit result of cvt.rn.satfinite.e4m3x2.f32 (and of the
            # cvt.rn.f16x2.e4m3x2 unpack) in 16x256x4-like tiles: the 03:45 and 05:55 H200 failures.
            assert "e4m3" not in ptx, cfg
            div_ptx = kmod.compile_for_target(
                "bfloat16",
                7168,
                dataclasses.replace(
                    cfg,
                    encode="div",
                    layout="rows",
                    prefetch=False,
                    unroll=False,
                    persistent=0,
                    stream=False,
                    lut=False,
                    preload=False,
                    k_major=False,
                ),
                "sm_90a",
            )
            tiles = cfg.k_iters if cfg.unroll else 1  # the unrolled loop holds every tile's code
            assert ptx.count("div.rn.f32") * 8 <= div_ptx.asm["ptx"].count("div.rn.f32") * tiles, cfg
        else:
            assert "cvt.rn.satfinite.e4m3x2.f32" in ops, cfg


def test_candidates_cover_every_variant():
    nv_configs = nv.candidate_configs(7168, unvalidated=True)
    assert {c.encode for c in nv_configs} == {"div", "mul", "search", "steps", "pairs"}
    assert all(c.layout == "halves" for c in nv_configs if c.encode == "pairs")
    assert {(c.skip_dead, c.scale_words) for c in nv_configs} == {(False, False), (True, False), (True, True)}
    assert {(c.layout, c.encode) for c in nv_configs} >= {("halves", "mul"), ("halves", "search")}
    assert {(c.lean, c.layout) for c in mx.candidate_configs(7168, unvalidated=True)} == {
        (False, "rows"),
        (True, "rows"),
        (True, "quarters"),
        (True, "flat"),
    }
    # Narrow rows cap the tile width instead of dropping candidates.
    narrow = nv.candidate_configs(48, unvalidated=True)
    assert all(c.block_k <= 64 for c in narrow) and len(narrow) > 5
    assert all(nv.can_implement(48, c) for c in narrow + nv.candidate_configs(48))


@pytest.mark.parametrize("op", ["nvfp4", "mxfp8"])
def test_only_gpu_validated_candidates_by_default(op, monkeypatch):
    # After the 03:45 and 05:55 H200 failures (NVFP4 "mul"/"search" configs wrong on the GPU,
    # bit-exact in the interpreter) autotune and the bench sweep see only configs that passed test_gpu_candidates;
    # B12X_QUANT_UNVALIDATED_CANDIDATES=1 (bench --all-configs, test_gpu_candidates) adds the rest.
    kmod = OPS[op]
    monkeypatch.delenv("B12X_QUANT_UNVALIDATED_CANDIDATES", raising=False)
    for k in (48, 160, 4096, 7168) if op == "nvfp4" else (64, 160, 4096, 7168):
        default = kmod.candidate_configs(k)
        everything = kmod.candidate_configs(k, unvalidated=True)
        assert default[0] == kmod.default_config(k) and set(default) <= set(everything)
        if op == "nvfp4" and nv.DIVISION_FREE_GPU_VALIDATED and nv.STEPS_GPU_VALIDATED:  # all but "pairs"?
            # the session-7 variants (every one unrolled or persistent) wait for S7_PAIRS_GPU_VALIDATED
            s7 = lambda c: not nv.S7_PAIRS_GPU_VALIDATED and (c.unroll or c.persistent > 0)
            order = {nv.capped_config(k, t) for t in nv._UNVALIDATED_ORDER}
            s27 = lambda c: not nv.PRELOAD_GPU_VALIDATED and c.preload  # session 27's, behind their own flag
            s31 = lambda c, order=order: not nv.ORDER_GPU_VALIDATED and c in order  # session 31's, likewise
            offered = [
                c
                for c in everything
                if (nv.PAIRS_GPU_VALIDATED or c.encode != "pairs") and not s7(c) and not s27(c) and not s31(c)
            ]
            assert default == tuple(offered)
            continue
        if op == "nvfp4" and nv.DIVISION_FREE_GPU_VALIDATED:  # only the "steps" encode is left unvalidated
            assert default == tuple(c for c in everything if c.encode != "steps"), default
            continue
        if op == "mxfp8" and not mx._UNVALIDATED:
            assert default == everything  # nothing left unvalidated
            continue
        assert len(default) < len(everything) or k < 128  # narrow rows: capped tiles coincide
        if op == "nvfp4":
            assert {(c.encode, c.layout) for c in default} == {("div", "rows")}, default
    # Exactly the configs that passed the GPU run (K = 7168: no tile is capped).
    cls = nv.NvFp4Config if op == "nvfp4" else mx.MxFp8Config
    passed = kmod._VALIDATED + (kmod._UNVALIDATED if op == "nvfp4" and nv.DIVISION_FREE_GPU_VALIDATED else ())
    passed += kmod._UNVALIDATED_STEPS if op == "nvfp4" and nv.STEPS_GPU_VALIDATED else ()
    passed += kmod._UNVALIDATED_PAIRS if op == "nvfp4" and nv.PAIRS_GPU_VALIDATED else ()
    passed += kmod._UNVALIDATED_PAIRS_S7 if op == "nvfp4" and nv.S7_PAIRS_GPU_VALIDATED else ()
    passed += kmod._UNVALIDATED_PRELOAD if op == "nvfp4" and nv.PRELOAD_GPU_VALIDATED else ()
    passed += kmod._UNVALIDATED_ORDER if op == "nvfp4" and nv.ORDER_GPU_VALIDATED else ()
    assert set(kmod.candidate_configs(7168)) == {kmod.default_config(7168)} | {cls(*c) for c in passed}
    assert not set(kmod.candidate_configs(7168)) & {cls(*c) for c in kmod._UNVALIDATED if c not in passed}
    monkeypatch.setenv("B12X_QUANT_UNVALIDATED_CANDIDATES", "1")
    assert kmod.candidate_configs(7168) == kmod.candidate_configs(7168, unvalidated=True)
    monkeypatch.setenv("B12X_QUANT_UNVALIDATED_CANDIDATES", "0")
    assert kmod.candidate_configs(7168) == kmod.candidate_configs(7168, unvalidated=False)
    if op == "nvfp4":  # the one-line switch after the GPU run passes: every candidate but "steps" is offered
        monkeypatch.setattr(nv, "DIVISION_FREE_GPU_VALIDATED", True)
        monkeypatch.setattr(nv, "STEPS_GPU_VALIDATED", False)
        monkeypatch.setattr(nv, "PAIRS_GPU_VALIDATED", False)
        monkeypatch.setattr(nv, "S7_PAIRS_GPU_VALIDATED", False)
        monkeypatch.setattr(nv, "PRELOAD_GPU_VALIDATED", False)
        monkeypatch.setattr(nv, "ORDER_GPU_VALIDATED", False)
        everything = nv.candidate_configs(7168, unvalidated=True)
        assert nv.candidate_configs(7168) == tuple(c for c in everything if c.encode not in ("steps", "pairs"))
