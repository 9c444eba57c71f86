"""The CuTe NVFP4 quantizer (`_kernel_cute.py`) on the CPU: its threshold table against a search over every
half value, its whole CTA on the PTX emulator bit for bit against the oracle, and its compile for both archs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from flashinfer.experimental.b12x._lib.quant import swizzled_size, unswizzle_scales
from flashinfer.experimental.b12x.quantization.nvfp4 import META as NVFP4_META
from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel_cute as KC
from flashinfer.experimental.b12x.quantization.nvfp4 import reference

_spec = importlib.util.spec_from_file_location(
    "_b12x_gemm_emulator", Path(__file__).parents[1] / "gemm" / "emulator.py"
)
EMU = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(EMU)
LANE = np.arange(32, dtype=np.int32)
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def emulated_table(dtype: str, gs: float) -> np.ndarray:
    """uint32 [128, 8]: the table the kernel's four builder warps write (`CuteLogic.build_row`)."""
    logic = KC.CuteLogic(dtype, 16, KC.CuteTile())
    smem = np.zeros(KC.TABLE_WORDS * 4, dtype=np.uint8)
    ops = EMU.EmuOps(EMU.GlobalMemory(), smem)
    with np.errstate(all="ignore"):
        for warp in range(KC.BUILDERS // 32):
            logic.build_row(ops, 0, warp * 32 + LANE, ops.f32(gs))
    return smem.view(np.uint32).reshape(128, 8)


def searched_table(dtype: str, gs: float) -> np.ndarray:
    """The same table by definition: for each scale and threshold m * sf, the first non-negative half x (in
    increasing order) with fl(x * gs) past it (`>` or `>=` as the tie rule says)."""
    top = 0x7C00 if dtype == "float16" else 0x7F80  # +Inf: every half up to it, NaN excluded
    bits = torch.arange(top + 1, dtype=torch.int32)
    products = bits.to(torch.int16).view(DTYPES[dtype]).float() * torch.tensor(gs, dtype=torch.float32)
    sf = torch.arange(128, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    out = np.zeros((128, 8), dtype=np.uint32)
    nan = KC.HALF_NAN[dtype] * 0x10001
    for j in range(8):
        mid = torch.tensor(KC.MIDS[j % 7], dtype=torch.float32) * sf
        tx = torch.searchsorted(products, mid, right=not KC.TIES_UP[j % 7]).to(torch.int64)
        tx = tx | (0x8000 if j == 7 else 0)
        out[:, j] = (tx | (tx << 16)).numpy().astype(np.uint32)
    out[0, :] = nan
    out[127, :] = nan
    return out


def _global_scales(dtype: str) -> list[float]:
    gen = torch.Generator().manual_seed(7)
    span = 120 if dtype == "bfloat16" else 30
    rand = torch.exp2(torch.empty(24).uniform_(-span, span, generator=gen)).tolist()
    extreme = [2.0**-126, 2.0**127, 3.4e38, 1.2e-38, 1.0, 2688.0 / 3.0, 448.0 * 6 / 1e-3]
    return extreme + [2.0**e for e in (-40, -9, 0, 9, 40)] + rand


# Global scales where some threshold is the third candidate c + 2 of the module docstring (e below a half while
# the boundary is past it): random scales almost never reach it (none in 17.6M bf16 entries), these were found by
# scanning fp32 neighbours of m * sf / h for halves h. 0.3 is one: a plain checkpoint value.
THIRD_CANDIDATE = {
    "bfloat16": [0.050847459584474564, 0.30000001192092896, 36.57143020629883],
    "float16": [423.35919189453125, 0.0027995521668344736, 0.06862745434045792],
}


def _rz_half(dtype: str, e: torch.Tensor) -> torch.Tensor:
    """Bits of the half at or below the non-negative fp32 e (cvt.rz), as int64."""
    if dtype == "bfloat16":
        return (e.view(torch.int32) >> 16).to(torch.int64)
    h = e.to(torch.float16)
    bits = h.view(torch.int16).to(torch.int64) & 0xFFFF
    return torch.where(h.float() > e, bits - 1, bits)


def candidate_index(dtype: str, gs: float) -> torch.Tensor:
    """int64 [7, 126]: tx_j - c for thresholds 0..6 and scale bytes 1..126, tx_j by search and c as the docstring
    computes it (rz of fl(4 m fl(0.25 sf / gs)), capped at FLT_MAX)."""
    want = torch.from_numpy((searched_table(dtype, gs)[1:127, :7] & 0xFFFF).astype(np.int64)).T
    g = torch.tensor(gs, dtype=torch.float32)
    sf = torch.arange(1, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    q = (torch.tensor(0.25, dtype=torch.float32) * sf) / g
    e = [torch.clamp(q * torch.tensor(4 * m, dtype=torch.float32), max=KC.FLT_MAX) for m in KC.MIDS]
    return want - torch.stack([_rz_half(dtype, v) for v in e])


@pytest.mark.interpret
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_threshold_rule_needs_its_three_candidates(dtype):
    """Every threshold is c, c + 1 or c + 2 at every scale tested, and each of the three occurs (so the table test
    below exercises both fp32 checks of `CuteLogic._threshold`)."""
    seen = set()
    for gs in _global_scales(dtype) + THIRD_CANDIDATE[dtype]:
        index = candidate_index(dtype, float(np.float32(gs)))
        assert set(index.unique().tolist()) <= {0, 1, 2}, f"gs={gs!r}: {sorted(set(index.unique().tolist()))}"
        seen |= set(index.unique().tolist())
    for gs in THIRD_CANDIDATE[dtype]:
        assert (candidate_index(dtype, gs) == 2).any(), f"gs={gs!r} no longer needs c + 2"
    assert seen == {0, 1, 2}


@pytest.mark.interpret
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_threshold_table_matches_a_search_over_every_half(dtype):
    for gs in _global_scales(dtype) + THIRD_CANDIDATE[dtype]:
        gs = float(np.float32(gs))
        got, want = emulated_table(dtype, gs), searched_table(dtype, gs)
        bad = np.argwhere(got != want)
        assert bad.size == 0, (
            f"gs={gs!r}: {len(bad)} entries differ, first row {bad[0][0]} word {bad[0][1]}: "
            f"{got[tuple(bad[0])]:#010x} != {want[tuple(bad[0])]:#010x}"
        )


def run_emulated(x: torch.Tensor, gs: float, tile: KC.CuteTile, *, by_pointer: bool, cap: int | None = None):
    """Every CTA of the launch on the emulator; returns (packed, scales) storage, poisoned before the run."""
    m, k = x.shape
    cap = cap or m
    logic = KC.CuteLogic(str(x.dtype).removeprefix("torch."), k, tile)
    g = EMU.GlobalMemory()
    xb = g.put(x)
    pb = g.put(torch.full((cap, k // 2), 0xAB, dtype=torch.uint8))
    sb = g.put(torch.full((swizzled_size(cap, k // 16),), 0xCD, dtype=torch.uint8))
    gb = g.put(torch.tensor([gs if by_pointer else 12345.0], dtype=torch.float32))
    mpad = (m + 127) // 128 * 128
    tiles = (mpad + logic.rows_per_cta - 1) // logic.rows_per_cta
    with np.errstate(all="ignore"):
        for by in range((tiles + tile.repeat - 1) // tile.repeat):
            for bx in range((logic.nb4 + 31) // 32):
                smem = np.zeros(KC.TABLE_WORDS * 4, dtype=np.uint8)
                ops = EMU.EmuOps(g, smem)
                gsv = logic.global_scale(ops, gb, ops.f32(0.0 if by_pointer else gs), np.int32(by_pointer))
                for warp in range(KC.BUILDERS // 32):
                    logic.build_row(ops, 0, warp * 32 + LANE, gsv)
                for warp in range(tile.warps):
                    for ty in range(by * tile.repeat, (by + 1) * tile.repeat):  # tiles past the last: no access
                        loaded = logic.loads(ops, xb, m, warp, LANE, bx, ty)
                        logic.encode_rows(ops, loaded, gsv, 0, pb, sb, m, warp, LANE, bx, ty)
    packed = torch.from_numpy(g.get(pb)[: cap * k // 2].copy()).reshape(cap, k // 2)
    scales = torch.from_numpy(g.get(sb)[: swizzled_size(cap, k // 16)].copy())
    return packed, scales


def _inputs(m: int, k: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen) * torch.exp2(torch.randint(-20, 20, (m, k // 16, 1), generator=gen)).repeat(
        1, 1, 16
    ).reshape(m, k)
    x = x.to(dtype)
    flat = x.view(-1)
    flat[3] = float("nan")
    flat[min(40, flat.numel() - 1)] = float("-inf")
    flat[min(17, flat.numel() - 1)] = -0.0
    if k >= 32:
        x[0, 16:32] = 0  # an all-zero block: scale byte 0
    if m > 2:
        x[2, :16] = float("nan")  # an all-NaN block: scale byte 0, codes +0
        x[1, :16] = torch.finfo(dtype).tiny / 4  # subnormal halves
    return x


@pytest.mark.interpret
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "m, k, tile, by_pointer",
    [
        (3, 64, KC.CuteTile(4, 1), False),
        (5, 48, KC.CuteTile(), True),  # K / 16 = 3: one padding scale column
        (130, 32, KC.CuteTile(4, 8), False),  # rows into a second 128-row block
        (33, 544, KC.CuteTile(8, 2), True),  # 34 scale columns: two CTA columns, the second nearly idle
        (200, 64, KC.CuteTile(4, 2, repeat=3), False),  # 8-row tiles three a CTA: the last CTA past M and the padding
        (130, 16, KC.CuteTile(4, 2), True),  # the default tile at the narrowest row: one block, one padding column
    ],
)
def test_cute_quantizer_is_bit_exact_on_the_emulator(dtype, m, k, tile, by_pointer):
    x = _inputs(m, k, dtype, seed=m * k)
    gs = float(np.float32(448.0 * 6.0 / 37.0))
    cap = m + 3  # rows past M stay as the caller left them
    packed, scales = run_emulated(x, gs, tile, by_pointer=by_pointer, cap=cap)
    want_p = torch.full((cap, k // 2), 0xAB, dtype=torch.uint8)
    want_s = torch.full((swizzled_size(cap, k // 16),), 0xCD, dtype=torch.uint8)
    reference.quantize_into(x, gs, want_p, want_s)
    assert torch.equal(packed, want_p), (packed != want_p).nonzero()[:5]
    assert torch.equal(scales, want_s), (scales != want_s).nonzero()[:5]


def threshold_rows(dtype: str, gs: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(x [R, 32], aimed [R] scale bytes): for every scale byte whose block a finite half amax can reach, one row of
    two blocks, each led by amax = the half nearest 6 sf / gs (the block's scale is then sf), the rest the halves
    next to every threshold (tx_j - 1, tx_j, tx_j + 1 as bits), signs alternating: the encode's every boundary."""
    top = 0x7C00 if dtype == "float16" else 0x7F80
    table = searched_table(dtype, gs)[:, :7] & 0xFFFF
    sf = torch.arange(128, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    rows, aimed = [], []
    for s in range(1, 127):
        amax = (torch.tensor(6.0, dtype=torch.float32) * sf[s] / torch.tensor(gs, dtype=torch.float32)).to(
            DTYPES[dtype]
        )
        lead = int(amax.view(torch.int16)) & 0xFFFF
        if not 0 < lead < top:
            continue
        near = sorted({int(t) + d for t in table[s] for d in (-1, 0, 1) if 0 <= int(t) + d < lead})
        near = [v | (0x8000 if i % 2 else 0) for i, v in enumerate(near)][:30]
        near += [0] * (30 - len(near))
        rows.append([lead] + near[:15] + [lead] + near[15:])
        aimed.append(s)
    bits = torch.tensor(rows, dtype=torch.int32).to(torch.int16)
    return bits.view(DTYPES[dtype]), torch.tensor(aimed, dtype=torch.uint8)


@pytest.mark.interpret
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_cute_quantizer_is_bit_exact_at_every_threshold(dtype):
    """Halves on and beside each threshold of each reachable scale, at global scales that need the third candidate:
    the emulated CTA against the oracle, bit for bit, with the scales checked to be the aimed ones."""
    for gs in THIRD_CANDIDATE[dtype][:2]:
        x, aimed = threshold_rows(dtype, gs)
        m, k = x.shape
        assert m >= 60, f"gs={gs!r}: only {m} scales reachable"
        want_p = torch.full((m, k // 2), 0xAB, dtype=torch.uint8)
        want_s = torch.full((swizzled_size(m, k // 16),), 0xCD, dtype=torch.uint8)
        reference.quantize_into(x, gs, want_p, want_s)
        got_aim = unswizzle_scales(want_s, m, k // 16).view(torch.uint8)
        assert torch.equal(got_aim, aimed[:, None].expand(m, 2)), "a block's scale is not the aimed one"
        packed, scales = run_emulated(x, gs, KC.CuteTile(4, 2), by_pointer=True)
        assert torch.equal(packed, want_p), (gs, (packed != want_p).nonzero()[:5])
        assert torch.equal(scales, want_s), (gs, (scales != want_s).nonzero()[:5])


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_cute_quantizer_compiles_for_both_archs(arch, dtype, cuda_binary):
    fn = KC.compile_cute(dtype, 7168, KC.CuteTile(), arch)
    ptx = fn.artifacts.PTX
    # the per-element encode is packed-half compares and lop3 selects: no fp32 work, no division per element
    assert f"set.ge.u32.{'bf16' if dtype == 'bfloat16' else 'f16'}x2" in ptx
    assert "lop3.b32" in ptx and "cvt.rn.satfinite.e4m3x2.f32" in ptx
    assert cuda_binary.resources(fn.artifacts.CUBIN)["LOCAL"] == 0


@pytest.mark.compile
@pytest.mark.parametrize("arch", NVFP4_META.archs)
def test_the_switch_s_tile_compiles_for_every_arch_the_op_lists(arch, cuda_binary):
    # _dispatch.CUTE_TILE (what the CuTe switch runs from CUTE_FROM_M rows, off by default since session 46) compiles
    # for every arch of quantization.nvfp4's META (DGX Spark included)
    from flashinfer.experimental.b12x.quantization.nvfp4 import _dispatch

    assert "sm_121a" in NVFP4_META.archs and {"cutlass-dsl", "tvm-ffi"} <= set(NVFP4_META.requires)
    fn = KC.compile_cute("bfloat16", 4096, _dispatch.CUTE_TILE, arch)
    assert "set.ge.u32.bf16x2" in fn.artifacts.PTX
    assert cuda_binary.resources(fn.artifacts.CUBIN)["LOCAL"] == 0


def test_why_not_names_what_is_wrong():
    assert KC.why_not(64, KC.CuteTile()) is None
    assert "warps" in KC.why_not(64, KC.CuteTile(warps=2))
    assert "repeat" in KC.why_not(64, KC.CuteTile(repeat=0))
    assert "multiple of 16" in KC.why_not(40, KC.CuteTile())
    assert "repeat must be an int" in KC.why_not(64, KC.CuteTile(repeat=True))
    with pytest.raises(ValueError, match="dtype"):
        KC.CuteLogic("float32", 64, KC.CuteTile())


def test_plans_take_a_cute_tile():
    from flashinfer.experimental.b12x.quantization import nvfp4
    from flashinfer.experimental.b12x.quantization.nvfp4 import _dispatch

    p = nvfp4.plan(64, 4096, override=KC.CuteTile(4, 8))
    ((fn, args),) = p.kernels(p.override, "sm_90a")
    assert fn is KC.compile_cute and args == ("bfloat16", 4096, KC.CuteTile(4, 8), "sm_90a")
    ((fn, args),) = nvfp4.plan(64, 4096, override=KC.CuteTile(), pdl=True).kernels(KC.CuteTile(), "sm_120a")
    assert args[2].pdl
    mixed = _dispatch.NvFp4Dispatch(_dispatch.default_config(4096), KC.CuteTile(), large_from=64)
    assert [f.__name__ for f, _ in nvfp4.plan(64, 4096, override=mixed).kernels(mixed, "sm_90a")] == [
        "compile_nvfp4",
        "compile_cute",
    ]
    with pytest.raises(ValueError, match="CuteTile"):
        nvfp4.plan(64, 4096, override=KC.CuteTile(warps=3))


def test_as_launcher_views_only_a_cute_kernels_arguments():
    from flashinfer.experimental.b12x.quantization._shared._host import as_launcher

    seen = []

    def compile_fn(*args):
        return lambda *call: seen.append([t.dtype if isinstance(t, torch.Tensor) else t for t in call])

    raw = torch.zeros(4, dtype=torch.uint8)
    fp8 = raw.view(torch.float8_e4m3fn)
    views = {1: torch.float8_e4m3fn}
    as_launcher(compile_fn, (), views)(raw, raw, 7)  # not a CuTe kernel: called as is
    compile_fn.backend = "cute"
    as_launcher(compile_fn, (), views)(raw, raw, 7)
    as_launcher(compile_fn, (), views)(raw, fp8, 7)
    fp8_call = [torch.uint8, torch.float8_e4m3fn, 7]
    assert seen == [[torch.uint8, torch.uint8, 7], fp8_call, fp8_call]
