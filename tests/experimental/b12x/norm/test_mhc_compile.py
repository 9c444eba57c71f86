"""Every norm.mhc kernel of the default selection compiles on the CPU for sm_90a and sm_120a with
no register spills (local memory): the default tier at one hidden size per tile (7168; 16384 for the
row pass's chunk loop and the one-launch defaults), the `slow` tier at every size the op is built
for. Pass 1's mixes run on warp-level mma.sync (bf16/fp16 hi + lo split of fn), never wgmma
(hardware policy: Triton picks wgmma on sm_90a for 4-warp dots of M >= 64, which StreamConfig
refuses); pass 2 and post have no dot.
"""

import dataclasses
import re

import pytest
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource

from flashinfer.experimental.b12x._lib import cuda_binary as CB
from flashinfer.experimental.b12x.norm.mhc import (
    _config,
    _kernel,
    _kernel_fused,
    _kernel_row,
    _kernel_small,
    _kernel_tiny,
    _kernel_walk,
    _kernel_wide,
)

pytestmark = pytest.mark.compile
SLOW = pytest.mark.slow


def _hidden(sizes, keep=(7168,)) -> list:
    """The hidden sizes of a compile sweep: `keep` in the default tier, the others in `slow` (each
    Triton compile costs 3-12 s of CPU; the default tier builds every tile once, the slow tier at every
    size the op is built for)."""
    return [h if h in keep else pytest.param(h, marks=SLOW) for h in sizes]


STREAM_SIG = dict(res_ptr="*bf16", x_ptr="*bf16", post_ptr="*fp32", comb_ptr="*fp32", out_ptr="*bf16", fn_ptr="*fp32")
STREAM_SIG |= dict(part_ptr="*fp32", T="i32", chunks_per_split="i32", fn_blocks="i32")
APPLY_SIG = dict(src_ptr="*bf16", part_ptr="*fp32", scale_ptr="*fp32", base_ptr="*fp32", w_ptr="*bf16", y_ptr="*bf16")
APPLY_SIG |= dict(post_ptr="*fp32", comb_ptr="*fp32", T="i32", splits="i32", sinkhorn_iters="i32")
APPLY_SIG |= dict(tok_stride="i32", stream_stride="i32", has_norm="i32", rms_eps="fp32", hc_eps="fp32", norm_eps="fp32")


@pytest.fixture(autouse=True)
def _triton_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))  # not ~/.triton


def _compile(fn, sig, constexprs, num_warps, num_stages, cc, **options):
    # Pointers 16-byte aligned, as the API requires and the JIT then specializes (tt.divisibility).
    names = list(fn.arg_names)
    attrs = {(names.index(k),): CUDABackend.parse_attr("D") for k, v in sig.items() if v.startswith("*")}
    sig = sig | {k: "constexpr" for k in constexprs}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    opts = {"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": True, **options}
    return triton.compile(src, target=GPUTarget("cuda", cc, 32), options=opts)


def _check(compiled, what, *, mma):
    ptx = compiled.asm["ptx"]
    assert "wgmma" not in ptx, f"{what}: wgmma in the PTX (hardware policy: mma.sync only)"
    n_mma = len(re.findall(r"\bmma\.sync\.aligned\.m16n8k16\b", ptx))
    if mma:
        assert n_mma > 0, f"{what}: no mma.sync m16n8k16 in the PTX (the mixes left the tensor cores)"
    else:
        assert not re.search(r"\bmma\.", ptx), f"{what}: unexpected tensor-core instruction in the PTX"
    usage = CB.resources(compiled.asm["cubin"])
    assert usage["STACK"] == 0 and usage["LOCAL"] == 0, f"{what}: spills ({usage})"


def _stream_cases():
    for cc, arch in ((90, "sm_90a"), (120, "sm_120a")):
        cfg = _config.default_config(arch)  # the selection the heuristic makes for that arch
        for form in _config.STREAM_FORMS:
            for tile in cfg.streams(form):
                name = f"{form}-t{tile.block_t}-h{tile.block_h}-w{tile.num_warps}-{arch}"
                yield pytest.param(form, tile, cc, id=name)


ARCHS = [pytest.param(90, id="sm_90a"), pytest.param(120, id="sm_120a")]


@pytest.mark.parametrize("form, tile, cc", list(_stream_cases()))
def test_stream_kernel(form, tile, cc):
    consts = _kernel.stream_constexprs(7168, _kernel.MODES[form], tile)
    sig = STREAM_SIG | (dict(fn_ptr="*bf16") if consts["FN_SPLIT"] else {})  # sm_90a's pre_large: fn split once
    compiled = _compile(_kernel._mhc_stream_kernel, sig, consts, tile.num_warps, tile.num_stages, cc)
    _check(compiled, form, mma=form != "post")


@pytest.mark.parametrize("cc", ARCHS)
@pytest.mark.parametrize("tile", ["apply_small", "apply_large"])
@pytest.mark.parametrize("hidden", _hidden([2048, 5120, 7168]))
def test_apply_kernel(tile, hidden, cc):
    cfg = getattr(_config.MhcConfig(), tile)
    tok, block_h, stages = cfg.tile(hidden)
    consts = dict(H=hidden, TOK=tok, BLOCK_H=block_h, STAGES=stages, BLOCK_S=_kernel.APPLY_BLOCK_S)
    _check(
        _compile(_kernel._mhc_apply_kernel, APPLY_SIG, consts, cfg.num_warps, stages, cc), f"apply {tile}", mma=False
    )


ROW_TILES = {
    "row_small": _config.MhcConfig().row_small,
    "row_large": _config.MhcConfig().row_large,
    "row_w16": _config.RowConfig(block_h=8192, block_s=16, num_warps=16),
    # bench_norm's row_stream*: the row in pipelined chunks (cp.async, stages - 1 chunks in flight)
    "c2048_w4_s3": _config.RowConfig(block_h=2048, block_s=16, num_warps=4, stages=3),
    "c2048_w4_s4": _config.RowConfig(block_h=2048, block_s=16, num_warps=4, stages=4),
    "c2048_w8_s3": _config.RowConfig(block_h=2048, block_s=16, num_warps=8, stages=3),
    # ... and with the weights as scalars (row_scalar: 126-147 registers; scalar with the one-shot
    # 8192 tile or 2048 chunks at 4 warps spills, 255 registers + stack: not offered)
    "c1024_s256_scalar": _config.RowConfig(block_h=1024, block_s=256, num_warps=4, stages=3, scalar=True),
    "c1024_s16_scalar": _config.RowConfig(block_h=1024, block_s=16, num_warps=4, stages=3, scalar=True),
}


@pytest.mark.parametrize("cc", ARCHS)
@pytest.mark.parametrize("tile", list(ROW_TILES))
@pytest.mark.parametrize("hidden", _hidden([2048, 5120, 7168, 16384], keep=(16384,)))  # 16384: the chunk loop
def test_row_kernel(tile, hidden, cc):
    """The row pass 2: the whole row as one tile up to 8192 (16384 streams two chunks), no spills."""
    cfg = ROW_TILES[tile]
    consts = _kernel_row.row_constexprs(hidden, cfg)
    block_h = consts["BLOCK_H"]
    compiled = _compile(_kernel_row._mhc_row_kernel, APPLY_SIG, consts, cfg.num_warps, 1, cc)
    _check(compiled, f"row {tile}", mma=False)
    if cfg.stages > 1 and hidden > block_h:  # the chunk loop is software-pipelined
        assert "cp.async" in compiled.asm["ptx"], f"row {tile}: no cp.async in the chunk loop"
    # The Sinkhorn rounds stay in registers and shuffles: no barrier or shared memory in their loop
    # (the loop with reciprocals and no global load). Triton 3.6 put the [4, 4] comb tile's rows on
    # different warps when the partials were a [BLOCK_S, 4, 4] pointer tile: 3 barriers a round.
    ptx = compiled.asm["ptx"]
    loops = [m.group(2) for m in re.finditer(r"(\$L__BB0_\d+):(.*?)\sbra(?:\.uni)?\s+\1;", ptx, re.S)]
    sink = [b for b in loops if re.search(r"\b(?:div|rcp|rsqrt)\.", b) and "ld.global" not in b]
    assert sink, f"row {tile}: no Sinkhorn loop found in the PTX"
    assert not any(re.search(r"\bbar\.sync|\bbarrier\.|\b(?:ld|st)\.shared", b) for b in sink), (
        f"row {tile}: Sinkhorn via smem"
    )


# The walk pass 2's tiles: the bench's candidates (bench_norm row_walk*).
WALK_TILES = {
    "c1024_s6_walk5": _config.RowConfig(block_h=1024, block_s=16, num_warps=4, stages=6, walk=5),
    "c1024_s5_walk6": _config.RowConfig(block_h=1024, block_s=16, num_warps=4, stages=5, walk=6),
}


@pytest.mark.parametrize("cc", ARCHS)
@pytest.mark.parametrize("tile", list(WALK_TILES))
@pytest.mark.parametrize("hidden", _hidden([4096, 5120, 7168]))
def test_walk_kernel(tile, hidden, cc):
    """The walk pass 2: no spills; its unit loop streams through cp.async and keeps y's sum over the 4 streams in
    registers (the pipeline's two barriers a unit, no shuffles); its stages fit `walk` programs an SM on sm_90a."""
    cfg = WALK_TILES[tile]
    compiled = _compile(_kernel_walk._mhc_walk_kernel, APPLY_SIG, _kernel_walk.walk_constexprs(hidden, cfg), 4, 1, cc)
    _check(compiled, f"walk {tile}", mma=False)
    ptx = compiled.asm["ptx"]
    # every block from a label to its backward branch, nested ones too (the unit loop sits inside an outer region)
    loops = [re.search(rf"{re.escape(m.group(1))}:(.*?)\sbra(?:\.uni)?\s+{re.escape(m.group(1))};", ptx[m.start() :], re.S)
             for m in re.finditer(r"(\$L__BB0_\d+):", ptx)]  # fmt: skip
    units = [b.group(1) for b in loops if b and "cp.async" in b.group(1) and "st.global" in b.group(1)]
    units = [b for b in units if not re.search(r"\$L__BB0_\d+:", b)]  # the innermost
    assert len(units) == 1, f"walk {tile}: {len(units)} unit loops"
    assert len(re.findall(r"\bbar\.sync", units[0])) == 2 and not re.search(r"\bshfl", units[0]), f"walk {tile}"
    if cc == 90:
        regs = CB.resources(compiled.asm["cubin"])["REG"]
        assert cfg.walk * (compiled.metadata.shared + 1024) <= 228 * 1024, f"walk {tile}: {cfg.walk} programs an SM"
        assert cfg.walk * 128 * regs <= 65536, f"walk {tile}: {regs} registers, not {cfg.walk} programs an SM"


SMALL_SIG = dict(res_ptr="*bf16", x_ptr="*bf16", pin_ptr="*fp32", cin_ptr="*fp32", out_ptr="*bf16", fn_ptr="*fp32")
SMALL_SIG |= dict(part_ptr="*fp32", cnt_ptr="*i32", scale_ptr="*fp32", base_ptr="*fp32", w_ptr="*bf16", y_ptr="*bf16")
SMALL_SIG |= dict(post_ptr="*fp32", comb_ptr="*fp32", T="i32", fn_blocks="i32", sinkhorn_iters="i32", has_norm="i32")
SMALL_SIG |= dict(rms_eps="fp32", hc_eps="fp32", norm_eps="fp32")


@pytest.mark.parametrize("cc", ARCHS)
@pytest.mark.parametrize("form", ["pre", "post_pre", "bcast"])
def test_small_kernel(form, cc):
    """The one-launch small-T kernel: mma.sync mixes, no wgmma, no spills (H = 7168)."""
    cfg = _config.SmallConfig()
    consts = dict(H=7168, MODE=_kernel.MODES[form], **_kernel_small.small_tile(7168, cfg, _kernel.MODES[form]))
    _check(
        _compile(_kernel_small._mhc_small_kernel, SMALL_SIG, consts, cfg.num_warps, 1, cc), f"small {form}", mma=True
    )


FUSED_SIG = {k: v for k, v in SMALL_SIG.items() if k not in ("T", "fn_blocks")}
FUSED_SIG |= dict(T="i32", splits="i32", cps="i32", fn_blocks="i32", sinkhorn_iters="i32", has_norm="i32")
FUSED_SIG |= dict(rms_eps="fp32", hc_eps="fp32", norm_eps="fp32")
# The heuristic's one-launch tiles for each arch, and the sweep's alternatives (bench_norm --sweep):
# each form that runs a tile, at the largest hidden size the op is built for and at 7168.
FUSED_TILES = {
    "pre_lazy": (_config.FusedConfig(32, 16, 16, 4, 3, sq="lazy"), ("pre",)),
    "pre_step": (_config.FusedConfig(32, 16, 16, 4, 3, sq="step"), ("pre",)),
    "pre_no_prefetch": (_config.FusedConfig(32, 16, 16, 4, 3, prefetch=False), ("pre", "bcast")),
    "pre_t64_w2": (_config.FusedConfig(64, 16, 16, 2, 4, sq="step", block_s=1, finish_h=16), ("pre",)),
    "post_pre_t16_h32_w8": (_config.FusedConfig(16, 32, 8, 8, 2, sq="step"), ("post_pre",)),
}


def _fused_cases():
    for cc, arch in ((90, "sm_90a"), (120, "sm_120a")):
        cfg = _config.fused_config(arch)  # the one-launch tiles (sm_90a's default runs two passes)
        tiles = {
            "default_pre": (cfg.fused_pre, ("pre", "bcast")),
            "default_post_pre": (cfg.fused_post_pre, ("post_pre",)),
        }
        for name, (tile, forms) in (tiles | FUSED_TILES).items():
            for form in forms:
                for hidden in (7168, 16384):  # the sweep's alternatives at 16384: slow
                    marks = SLOW if hidden == 16384 and name in FUSED_TILES else ()
                    yield pytest.param(tile, form, hidden, cc, id=f"{name}-{form}-{hidden}-{arch}", marks=marks)


@pytest.mark.parametrize("tile, form, hidden, cc", list(_fused_cases()))
def test_fused_kernel(tile, form, hidden, cc):
    """The one-launch kernel: mma.sync mixes (and squares with sq="gram"), no wgmma, no spills."""
    consts = _kernel_fused.fused_constexprs(hidden, _kernel.MODES[form], tile)
    sig = FUSED_SIG | (dict(fn_ptr="*bf16") if consts["FN_SPLIT"] else {})  # sm_90a's default pre: fn split once
    compiled = _compile(_kernel_fused._mhc_fused_kernel, sig, consts, tile.num_warps, tile.num_stages, cc)
    _check(compiled, f"fused {form}", mma=True)


@pytest.mark.parametrize("cc", ARCHS)
def test_float16_stream_kernel(cc):
    """fp16 activations split fn into fp16 hi + lo: mma.sync too."""
    sig = STREAM_SIG | {k: "*fp16" for k in ("res_ptr", "x_ptr", "out_ptr")}
    tile = _config.default_config("sm_90a" if cc == 90 else "sm_120a").pre_large
    consts = _kernel.stream_constexprs(4096, _kernel.MODES["pre"], tile)
    pre_sig = sig | (dict(fn_ptr="*fp16") if consts["FN_SPLIT"] else {})  # fn split once into fp16 hi + lo
    _check(_compile(_kernel._mhc_stream_kernel, pre_sig, consts, tile.num_warps, tile.num_stages, cc), "fp16", mma=True)
    tile = _config.MhcConfig().post_pre_large
    consts = _kernel.stream_constexprs(4096, _kernel.MODES["post_pre"], tile)
    _check(_compile(_kernel._mhc_stream_kernel, sig, consts, tile.num_warps, tile.num_stages, cc), "fp16", mma=True)


def test_stream_config_refuses_wgmma_tiles():
    with pytest.raises(ValueError, match="would compile to wgmma on sm_90a"):
        _config.StreamConfig(block_t=64, block_h=32, num_warps=4)
    _config.StreamConfig(block_t=64, block_h=16, num_warps=2)  # 2 warps: mma.sync


WIDE_SIG = dict(src_ptr="*bf16", part_ptr="*fp32", scale_ptr="*fp32", base_ptr="*fp32", y_ptr="*bf16")
WIDE_SIG |= dict(post_ptr="*fp32", comb_ptr="*fp32", T="i32", splits="i32", sinkhorn_iters="i32")
WIDE_SIG |= dict(tok_stride="i32", stream_stride="i32", rms_eps="fp32", hc_eps="fp32")
# The wide pass 2's tiles of bench_norm --sweep (wide*).
WIDE_TILES = {
    "default": _config.WideConfig(),
    "y128": _config.WideConfig(block_y=128),
    "y512_w8": _config.WideConfig(block_y=512, num_warps=8),
    "s128_w2": _config.WideConfig(block_s=128, num_warps=2),
    # the T = 1 candidates: programmatic dependent launch, the Sinkhorn's approximate reciprocals
    "y128_pdl_fast": _config.WideConfig(block_y=128, pdl=True, fast=True),
    "y128_pdl_fast_apart": _config.WideConfig(block_y=128, pdl=True, fast=True, apart=True),
}


@pytest.mark.parametrize("cc", ARCHS)
@pytest.mark.parametrize("tile", list(WIDE_TILES))
@pytest.mark.parametrize("hidden", _hidden([2048, 7168, 16384]))
def test_wide_kernel(tile, hidden, cc):
    """The wide pass 2 (no dot): no spills, and its Sinkhorn has no cross-lane traffic (no shfl or
    bar.sync inside the rounds' loop: the comb entries are per-thread scalars)."""
    cfg = WIDE_TILES[tile]
    consts = _kernel_wide.wide_constexprs(hidden, cfg)
    compiled = _compile(_kernel_wide._mhc_wide_kernel, WIDE_SIG, consts, cfg.num_warps, 1, cc)
    _check(compiled, f"wide {tile}", mma=False)
    ptx = compiled.asm["ptx"]
    # the Sinkhorn loop: the only loop whose body holds 8 reciprocals (div.full / rcp)
    loops = re.findall(r"\$L__BB0_\d+:(.*?)bra(?:\.uni)?\s+\$L__BB0_\d+;", ptx, re.S)
    sink = [body for body in loops if len(re.findall(r"\b(?:div|rcp|rsqrt)\.", body)) >= 8]
    assert sink, "wide: no Sinkhorn loop found in the PTX"
    assert not any(re.search(r"\bshfl\.|\bbar\.sync|\bbarrier\.", body) for body in sink), "wide: shuffles in Sinkhorn"
    if cfg.fast:  # 8 rsqrt.approx a round, no division left in the rounds
        assert all(len(re.findall(r"\brsqrt\.approx", b)) == 8 and not re.search(r"\bdiv\.", b) for b in sink)
    assert ("griddepcontrol.wait" in ptx) == cfg.pdl and ("griddepcontrol.launch_dependents" in ptx) == cfg.pdl


TINY_SIG = dict(res_ptr="*bf16", x_ptr="*bf16", pin_ptr="*fp32", cin_ptr="*fp32", out_ptr="*bf16", fn_ptr="*fp32")
TINY_SIG |= dict(part_ptr="*fp32", cnt_ptr="*i32", scale_ptr="*fp32", base_ptr="*fp32", y_ptr="*bf16")
TINY_SIG |= dict(post_ptr="*fp32", comb_ptr="*fp32", T="i32", splits="i32", cps="i32", fn_blocks="i32")
TINY_SIG |= dict(sinkhorn_iters="i32", rms_eps="fp32", hc_eps="fp32")


def _tiny_cases():
    for cc, arch in ((90, "sm_90a"), (120, "sm_120a")):
        cfg = _config.default_config(arch)
        for form in ("pre", "post_pre", "bcast"):
            for name, wide in (("default", _config.WideConfig()), ("y128", _config.WideConfig(block_y=128))):
                for hidden in (4096, 7168, 16384):  # 7168 in the default tier, the others slow
                    marks = () if hidden == 7168 else SLOW
                    yield pytest.param(
                        form, cfg.stream(form, 1), wide, hidden, cc, id=f"{form}-{name}-{hidden}-{arch}", marks=marks
                    )
        # (wider pass-1 steps, pre 16 x 128 / post_pre 16 x 64, spill here: 255 registers + 120-240
        # bytes of stack with the finish in the same kernel; not offered)


@pytest.mark.parametrize("form, stream, wide, hidden, cc", list(_tiny_cases()))
def test_tiny_kernel(form, stream, wide, hidden, cc):
    """The tiny one-launch kernel (pass 1 with the small stream tile + the wide finish): mma.sync
    mixes, no wgmma, no spills."""
    consts = _kernel_tiny.tiny_constexprs(hidden, _kernel.MODES[form], stream, wide)
    warps = _kernel_tiny.tiny_warps(stream, wide)
    compiled = _compile(_kernel_tiny._mhc_tiny_kernel, TINY_SIG, consts, warps, stream.num_stages, cc)
    _check(compiled, f"tiny {form}", mma=True)


@pytest.mark.parametrize("cc", ARCHS)
@pytest.mark.parametrize("mode", ["pre", "hi"])
def test_fn_split_pass1(mode, cc):
    """pre's pass 1 (both default tiles) and the fused pre reading fn split once (fn_split "pre" /
    "hi"): mma.sync, no wgmma, no spills, and none of the in-loop split's conversions left (the
    fp32 -> bf16 cvt.rn of fn appears only with fn_split="kernel")."""
    import dataclasses

    arch = "sm_90a" if cc == 90 else "sm_120a"
    cfg = _config.default_config(arch)
    for tile in cfg.streams("pre"):
        tile = dataclasses.replace(tile, fn_split=mode)
        consts = _kernel.stream_constexprs(7168, _kernel.MODES["pre"], tile)
        assert consts["FN_SPLIT"] == {"pre": 1, "hi": 2}[mode]
        sig = STREAM_SIG | dict(fn_ptr="*bf16")  # the split_fn launch's output
        compiled = _compile(_kernel._mhc_stream_kernel, sig, consts, tile.num_warps, tile.num_stages, cc)
        _check(compiled, f"pre {mode}", mma=True)
        assert "cvt.rn.bf16" not in compiled.asm["ptx"], f"pre {mode}: fn still split in the loop"
    tile = dataclasses.replace(_config.fused_config(arch).fused_pre, fn_split=mode)
    consts = _kernel_fused.fused_constexprs(7168, _kernel.MODES["pre"], tile)
    sig = FUSED_SIG | dict(fn_ptr="*bf16")
    compiled = _compile(_kernel_fused._mhc_fused_kernel, sig, consts, tile.num_warps, tile.num_stages, cc)
    _check(compiled, f"fused pre {mode}", mma=True)


def test_split_fn_kernel():
    sig = dict(fn_ptr="*fp32", out_ptr="*bf16", n="i32")
    for cc in (90, 120):
        compiled = _compile(_kernel._mhc_split_fn_kernel, sig, dict(BLOCK=_kernel.SPLIT_FN_BLOCK), 4, 1, cc)
        _check(compiled, "split_fn", mma=False)


@pytest.mark.parametrize("cc", ARCHS)
@pytest.mark.parametrize("fn_split", ["kernel", "pre"])
def test_diag_squares(fn_split, cc):
    """sq="diag" on pre's and bcast's pass-1 tiles of the selection and the fused pre: mma.sync only,
    no spills (H = 7168). Not offered, because they spill: post_pre's 16 x 32 tile (255 registers +
    48 bytes of stack on sm_90a), and on sm_120a bcast's 32 x 32 tile (72 + 8) and the sm_120a
    pre_large 32 x 32 x 3 stages with fn split once (96 + 16): the sweeps target the H200."""
    import dataclasses

    arch = "sm_90a" if cc == 90 else "sm_120a"
    cfg = _config.default_config(arch)
    for form in ("pre", "bcast"):
        for tile in cfg.streams(form):
            if cc == 120 and (form == "bcast" or (fn_split == "pre" and tile == cfg.pre_large)):
                continue  # spills there (docstring)
            tile = dataclasses.replace(tile, sq="diag", fn_split=fn_split)
            consts = _kernel.stream_constexprs(7168, _kernel.MODES[form], tile)
            assert consts["SQ_MODE"] == 3
            sig = STREAM_SIG | (dict(fn_ptr="*bf16") if consts["FN_SPLIT"] else {})
            compiled = _compile(_kernel._mhc_stream_kernel, sig, consts, tile.num_warps, tile.num_stages, cc)
            _check(compiled, f"{form} diag {fn_split} {tile}", mma=True)
    tile = dataclasses.replace(_config.fused_config(arch).fused_pre, sq="diag", fn_split=fn_split)
    consts = _kernel_fused.fused_constexprs(7168, _kernel.MODES["pre"], tile)
    sig = FUSED_SIG | (dict(fn_ptr="*bf16") if consts["FN_SPLIT"] else {})
    compiled = _compile(_kernel_fused._mhc_fused_kernel, sig, consts, tile.num_warps, tile.num_stages, cc)
    _check(compiled, f"fused pre diag {fn_split}", mma=True)


@pytest.mark.parametrize("cc", ARCHS)
def test_pdl_tiles(cc):
    """StreamConfig / RowConfig pdl: griddepcontrol.wait then launch_dependents before the first
    global load (a PDL launch may start before the kernel it depends on has finished)."""
    import dataclasses

    cfg = _config.default_config("sm_90a")
    tiles = [("pre", cfg.pre_small), ("post_pre", cfg.post_pre_small), ("post", cfg.post)]
    # bench_norm's pdl_fast_h64 / _h16 small tiles (112 / 448 splits at H = 7168; post_pre's 16 x 64
    # spills: 255 registers + 80 bytes of stack; its 16 x 16 on sm_120a: 128 + 8, the sweeps target
    # the H200)
    tiles += [("pre", _config.StreamConfig(16, 64, 4, 2)), ("pre", _config.StreamConfig(16, 16, 4, 2))]
    tiles += [("post_pre", _config.StreamConfig(16, 16, 4, 2))] if cc == 90 else []
    for form, tile in tiles:
        tile = dataclasses.replace(tile, pdl=True)
        consts = _kernel.stream_constexprs(7168, _kernel.MODES[form], tile)
        assert consts["PDL"] == 1
        compiled = _compile(_kernel._mhc_stream_kernel, STREAM_SIG, consts, tile.num_warps, tile.num_stages, cc)
        _check(compiled, f"{form} pdl", mma=form != "post")
        _check_gdc_first(compiled.asm["ptx"], form)
    for tile in (cfg.row_small, cfg.row_large):
        tile = dataclasses.replace(tile, pdl=True)
        compiled = _compile(_kernel_row._mhc_row_kernel, APPLY_SIG, _kernel_row.row_constexprs(7168, tile),
                            tile.num_warps, 1, cc)  # fmt: skip
        _check(compiled, "row pdl", mma=False)
        _check_gdc_first(compiled.asm["ptx"], "row")


def _check_gdc_first(ptx, what):
    wait, launch = ptx.find("griddepcontrol.wait"), ptx.find("griddepcontrol.launch_dependents")
    first_load = min(i for i in (ptx.find("ld.global"), ptx.find("cp.async")) if i >= 0)
    assert 0 <= wait < launch < first_load, f"{what}: griddepcontrol not before the first global load"


@pytest.mark.parametrize("cc", ARCHS)
@pytest.mark.parametrize("at_exit", [False, True])
def test_pdl_release_point(at_exit, cc):
    """A programmatic dependent waits (griddepcontrol.wait) before its first load; it releases the next kernel
    (griddepcontrol.launch_dependents) right after, unless pdl_at_exit leaves that to its programs' exit."""
    tile = dataclasses.replace(_config.default_config("sm_90a").pre_mid, pdl=True, pdl_at_exit=at_exit)
    consts = _kernel.stream_constexprs(7168, _kernel.MODES["pre"], tile)
    assert consts["PDL"] == (2 if at_exit else 1)
    ptx = _compile(_kernel._mhc_stream_kernel, STREAM_SIG, consts, tile.num_warps, tile.num_stages, cc).asm["ptx"]
    assert "griddepcontrol.wait" in ptx and ("griddepcontrol.launch_dependents" in ptx) != at_exit
