"""The MXFP8 row quantizer in CuTe DSL (`CuteMxTile`), the twin of the Triton kernel in `_kernel.py` with the
same bits: `_lib.quant.quantize_mxfp8` (values, row-major UE8M0 scales) and its scales in the swizzled layout
at live positions only (reference.py).

Per 32-element block (one lane's, four 16-byte loads), the oracle's fp32 sequence:

    amax = max |x_i| (NaN ignored)      s = div_rn(amax, 448)
    byte = exponent field of s, + 1 if its mantissa is nonzero; s == 0 -> 127; s Inf (or past 2^127) -> 255
    v_i  = e4m3_rn_satfinite(x_i * 2^(127 - byte))

2^(127 - byte) is a normal fp32 for byte 1..253, and a bf16 / fp16 block never scales past byte 121 (amax <
2^128, s < 2^120) or to 254, so the factor is the exponent field 254 - byte and the product (mul.rn) equals the
oracle's division bit for bit. A NaN element, and every element of a block whose scale
is NaN (byte 255), is written as 0x7F explicitly, whatever the conversion would give: a packed-half compare
finds the halves to keep (|x| <= Inf; <= NaN, never, in a byte-255 block) and a lop3 puts 0x7F in the
others' bytes.

Layout: lane l of CTA (bx, by) owns block column 32 bx + l of `rows` consecutive rows of its warp. Its
values go out as two 16-byte stores, its scale as one byte row-major and one byte swizzled. Nothing is
written for rows past M or blocks past K / 32.
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from ..._lib.compile import cute_compile, kernel
from ..._lib.ptx import DEVICE
from .._shared._cute import BlockRows, block_amax, row_loads, swizzled_offset

OP = "quantization.mxfp8"
_SOURCES = ("flashinfer.experimental.b12x._lib.ptx", "flashinfer.experimental.b12x.quantization._shared._cute")
_CUTE = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}
_INF2 = {"bfloat16": 0x7F807F80, "float16": 0x7C007C00}  # +Inf in both halves
_NAN2 = {"bfloat16": 0x7FC07FC0, "float16": 0x7E007E00}


@dataclass(frozen=True)
class CuteMxTile:
    """warps: per CTA (1..16); rows: rows a warp quantizes, one block a lane in each, every load issued
    first (1, 2 or 4); pdl: launched as a programmatic dependent (api.py's docstring)."""

    warps: int = 8
    rows: int = 2
    pdl: bool = False


def why_not(k: int, tile) -> str | None:
    """Why `tile` cannot quantize rows of length k, or None."""
    if not isinstance(tile, CuteMxTile):
        return f"expected a CuteMxTile, got {tile!r}"
    if tile.warps not in (1, 2, 4, 8, 16) or tile.rows not in (1, 2, 4) or not isinstance(tile.pdl, bool):
        return f"warps must be 1, 2, 4, 8 or 16, rows 1, 2 or 4 and pdl a bool, got {tile}"
    if k < 32 or k % 32:
        return f"k must be a positive multiple of 32, got {k}"
    return None


class CuteMxLogic(BlockRows):
    """The per-thread work of the kernel, on any `ops` (the device's PTX, or the tests' emulator)."""

    def __init__(self, dtype: str, k: int, tile: CuteMxTile) -> None:
        super().__init__(OP, _CUTE, dtype, k, 32, tile, why_not)

    def scale(self, ops, amax):
        """(UE8M0 byte, the fp32 factor 2^(127 - byte), NaN for byte 255) of a block's amax."""
        bits = ops.f32_bits(ops.div_rn(amax, ops.f32(448.0)))
        exp = (bits >> ops.u32(23)) & ops.u32(0xFF)
        byte = ops.select_u32((bits & ops.u32(0x7FFFFF)) != ops.u32(0), exp + ops.u32(1), exp)
        byte = ops.select_u32(exp == ops.u32(0xFF), ops.u32(255), byte)
        byte = ops.select_u32(bits == ops.u32(0), ops.u32(127), byte)
        factor = ops.select_u32(byte == ops.u32(255), ops.u32(0x7FC00000), (ops.u32(254) - byte) << ops.u32(23))
        return byte, ops.bits_f32(factor)

    def values(self, ops, words, mags, byte, factor):
        """The block's 32 E4M3 bytes as 8 words (element 4i + j in byte j of word i)."""
        out = []
        # the halves that keep their conversion: |x| <= Inf (not NaN), none in a NaN-scale block (byte 255)
        inf2 = ops.select_u32(byte == ops.u32(255), ops.u32(_NAN2[self.dtype]), ops.u32(_INF2[self.dtype]))
        for i in range(0, len(words), 2):
            pair = []
            for w in words[i : i + 2]:
                lo, hi = ops.half2_to_f32(self.dtype, w)
                pair.append(ops.f32_to_e4m3x2(ops.fmul(lo, factor), ops.fmul(hi, factor)))
            num = ops.prmt(ops.h2_le(self.dtype, mags[i], inf2), ops.h2_le(self.dtype, mags[i + 1], inf2), 0x6420)
            out.append(ops.bitsel(num, ops.prmt(pair[0], pair[1], 0x5410), ops.u32(0x7F7F7F7F)))
        return out

    def loads(self, ops, x_base, m, warp, lane, bx, by):
        out = []
        for i in range(self.tile.rows):
            row, col, live = self.place(m, warp, lane, bx, by, i)
            out += row_loads(ops, x_base, row, self.k, col * 32, 16, live)
        return out

    def encode_rows(self, ops, loaded, v_base, r_base, s_base, m, warp, lane, bx, by):
        for i in range(self.tile.rows):
            row, col, live = self.place(m, warp, lane, bx, by, i)
            words = loaded[16 * i : 16 * i + 16]
            mags, amax = block_amax(ops, self.dtype, words)
            byte, factor = self.scale(ops, amax)
            v = self.values(ops, words, mags, byte, factor)
            addr = v_base + ops.i64(row) * ops.i64(self.k) + ops.i64(col * 32)
            ops.stg_v4(addr, v[0], v[1], v[2], v[3], live)
            ops.stg_v4(addr + 16, v[4], v[5], v[6], v[7], live)
            ops.stg_u8(r_base + ops.i64(row) * ops.i64(self.nb) + ops.i64(col), byte, live)
            ops.stg_u8(s_base + swizzled_offset(ops, row, col, self.nb4), byte, live)


class CuteMxFp8:
    def __init__(self, logic: CuteMxLogic) -> None:
        self.logic = logic

    @cute.jit
    def __call__(
        self, mX: cute.Tensor, mV: cute.Tensor, mR: cute.Tensor, mS: cute.Tensor, m_arg: Int32, stream: cuda.CUstream
    ):
        L = self.logic
        m = mX.shape[0]
        self.kernel(mX, mV, mR, mS).launch(
            grid=[(L.nb + 31) // 32, (m + L.rows_per_cta - 1) // L.rows_per_cta, 1],
            block=[32 * L.tile.warps, 1, 1],
            stream=stream,
            use_pdl=L.tile.pdl,
        )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mV: cute.Tensor, mR: cute.Tensor, mS: cute.Tensor):
        L, ops = self.logic, DEVICE
        tid, _, _ = cute.arch.thread_idx()
        bx, by, _ = cute.arch.block_idx()
        warp, lane = tid >> 5, tid & 31
        m = mX.shape[0]
        if cutlass.const_expr(L.tile.pdl):
            ops.gdc_enter()
        loaded = L.loads(ops, mX.iterator.toint(), m, warp, lane, bx, by)
        L.encode_rows(ops, loaded, mV.iterator.toint(), mR.iterator.toint(), mS.iterator.toint(), m, warp, lane, bx, by)


@kernel("quantization.mxfp8.cute", sources=_SOURCES)
def compile_cute(dtype: str, k: int, tile: CuteMxTile, arch: str):
    """tvm-ffi launcher `fn(source [M, k], values uint8 [M, k], scale_rows uint8 [M, k/32], scale_mma uint8 [S], m)`
    (`m` is unused: the kernel reads M from the source)."""
    logic = CuteMxLogic(dtype, k, tile)
    rows = cute.sym_int()
    x = make_fake_compact_tensor(_CUTE[dtype], (rows, k), stride_order=(1, 0), assumed_align=16)
    v = make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int(), k), stride_order=(1, 0), assumed_align=16)
    r = make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int(), k // 32), stride_order=(1, 0), assumed_align=16)
    s = make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int(),), assumed_align=16)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(CuteMxFp8(logic), x, v, r, s, Int32(0), stream, arch=arch)


__all__ = ["CuteMxLogic", "CuteMxTile", "compile_cute", "why_not"]
