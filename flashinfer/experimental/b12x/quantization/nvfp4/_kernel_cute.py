"""The NVFP4 quantizer in CuTe DSL (`CuteTile`): the codes come from comparing the input halves themselves
against per-scale thresholds that each CTA tabulates in shared memory.

Bits: those of `reference.quantize_into` (the `_lib.quant` oracle; swizzled scales, zero padding up to the
128-row block and the 4-column group), as the Triton tiles of `_kernel.py`.

The encode. For a block of scale sf, the oracle's code of an element x counts the thresholds m_j * sf
(m = 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5) that |p| = |fl(x * gs)| passes: `>` where a tie rounds down to
the even code, `>=` where it rounds up (`_encodes._e2m1_codes_mul` proves it). fl(x * gs) is monotone in x,
so each threshold has a smallest non-negative half value tx_j that passes, and |p| passes it exactly
when |x| >= tx_j. The codes therefore come from the halves as loaded, two elements an instruction
(`set.ge.u32.bf16x2`): a binary search over tx_0..tx_6 (three compares, four selects), the sign from
x <= -tx_0 (p < -m_0 sf), three merges. No fp32 work is done per element. NaN fails every compare
(code +0); +-Inf passes them all (+-6), as in the oracle.

The table. The thresholds depend only on gs and sf, and sf is one of 126 E4M3 values (0 < sf <= 448):
table[s] holds tx_0..tx_6 and -tx_0 (each in both halves of a word, 32 bytes) for every scale byte s.
Rows 0 (the block underflowed: its codes are 0) and 127 (not a scale) hold NaN, which fails every
compare. The first four warps of a CTA build the table while the CTA's loads are in flight; a block
then costs its amax, its scale and one 32-byte table read.

tx_j exactly: e = fl(4 m_j * fl(0.25 sf / gs)) (4 m_j is an integer 1..20; one division a row, and no
overflow unless the boundary itself is past fp32) is within two fp32 ulps (or 20 subnormal steps) of the
real boundary, far inside a half's spacing (2^-8 relative for bf16, 2^-11 for fp16). With c the half
at or below e (cvt.rz), tx_j is therefore c, c + 1 or c + 2 (as bits), and two fp32 checks, fl(c * gs)
and fl((c + 1) * gs) against m_j * sf, pick it. test_nvfp4_cute.py checks the rule against a search
over every half value, for global scales from 2^-126 to 2^127. c + 2 is rare (no random bf16 scale needed it
in 17.6M entries) but real: gs = fl(0.3) needs it in 102 bf16 entries (`THIRD_CANDIDATE` there).

Layout. Lane l of CTA (bx, by) owns block column 32 bx + l (its 16 values: two 16-byte loads) in each
of `rows` consecutive rows of its warp, in `repeat` consecutive row tiles of warps x rows rows. Every
load of the first tile is issued before the CTA builds its table; a later tile's loads are issued before
the encode of the tile before it. The
codes of a block are one 8-byte store; four lanes merge their scale bytes (two shuffles) into one
word of the swizzled layout. Rows past M and columns past K/16, up to the padding, load nothing
and write their zero scale byte.

A streaming form (persistent warps, 1 KB slabs through bulk-copy buffers: no tail wave, the bytes in flight out
of registers) was built in session 43 and measured in session 44: it tied this tile at best and lost by 3-25% at #4's
shapes, so it was removed (docs/performance.md, "Session 44").
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from ..._lib.compile import cute_compile, kernel
from ..._lib.ptx import DEVICE
from .._shared._cute import BlockRows, block_amax, row_loads, swizzled_offset

OP = "quantization.nvfp4"
_SOURCES = ("flashinfer.experimental.b12x._lib.ptx", "flashinfer.experimental.b12x.quantization._shared._cute")
_CUTE = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}
MIDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
TIES_UP = (False, True, False, True, False, True, False)  # `>=` thresholds: the tie rounds to the code above
HALF_NAN = {"bfloat16": 0x7FC0, "float16": 0x7E00}
FLT_MAX = 3.4028234663852886e38
TABLE_WORDS = 128 * 8
BUILDERS = 128  # threads that build the table, one row each


@dataclass(frozen=True)
class CuteTile:
    """warps: per CTA (4, 8 or 16; the first four build the table); rows: rows a warp quantizes, one
    block a lane in each, every load issued first (1, 2, 4 or 8); repeat: consecutive row tiles (warps x
    rows rows each) a CTA quantizes with one table, the next tile's loads issued before this one's encode
    (1..8); pdl: launched as a programmatic dependent (api.py's docstring)."""

    warps: int = 8
    rows: int = 4
    pdl: bool = False
    repeat: int = 1


def why_not(k: int, tile) -> str | None:
    """Why `tile` cannot quantize rows of length k, or None."""
    if not isinstance(tile, CuteTile):
        return f"expected a CuteTile, got {tile!r}"
    if tile.warps not in (4, 8, 16) or tile.rows not in (1, 2, 4, 8) or not isinstance(tile.pdl, bool):
        return f"warps must be 4, 8 or 16, rows 1, 2, 4 or 8 and pdl a bool, got {tile}"
    if isinstance(tile.repeat, bool) or not isinstance(tile.repeat, int) or not 1 <= tile.repeat <= 8:
        return f"repeat must be an int in 1..8, got {tile}"
    if k < 16 or k % 16:
        return f"k must be a positive multiple of 16, got {k}"
    return None


class CuteLogic(BlockRows):
    """The per-thread work of the kernel, on any `ops` (the device's PTX, or the tests' emulator)."""

    def __init__(self, dtype: str, k: int, tile: CuteTile) -> None:
        super().__init__(OP, _CUTE, dtype, k, 16, tile, why_not)

    # ---- the threshold table ----------------------------------------------------------------------
    def global_scale(self, ops, g_addr, gs_value, use_ptr):
        """gs: the fp32 at g_addr when use_ptr, else gs_value."""
        return ops.select_f32(use_ptr != 0, ops.ldg_f32(g_addr, use_ptr != 0), gs_value)

    def _threshold(self, ops, j: int, sf, q, gs):
        """tx_j of the module docstring (j = 7: tx_0 negated), as half bits; q = fl(0.25 sf / gs)."""
        m = MIDS[j % 7]
        op = "ge" if TIES_UP[j % 7] else "gt"
        mid = ops.fmul(ops.f32(m), sf)
        c = ops.half_rz(self.dtype, ops.fmin(ops.fmul(q, ops.f32(4 * m)), ops.f32(FLT_MAX)))
        c1 = c + ops.u32(1)
        p0 = ops.fmul(ops.half2_to_f32(self.dtype, c)[0], gs)
        p1 = ops.fmul(ops.half2_to_f32(self.dtype, c1)[0], gs)
        tx = ops.cmp_sel(op, p0, mid, c, ops.cmp_sel(op, p1, mid, c1, c1 + ops.u32(1)))
        return tx | ops.u32(0x8000) if j == 7 else tx

    def table_row(self, ops, s, gs):
        """The 8 words of table row s (a scale byte 0..127) for global scale gs."""
        sf = ops.half2_to_f32("float16", ops.e4m3x2_to_f16x2(s))[0]  # exact; NaN for s = 127
        q = ops.div_rn(ops.fmul(ops.f32(0.25), sf), gs)  # the smallest threshold's boundary: 4 m q is every other's
        nan = ops.u32(HALF_NAN[self.dtype] * 0x10001)
        words = []
        for j in range(8):
            tx = self._threshold(ops, j, sf, q, gs)
            words.append(ops.cmp_sel("gt", sf, ops.f32(0.0), tx | (tx << ops.u32(16)), nan))
        return words

    def build_row(self, ops, table, s, gs):
        """Table row s into shared memory at `table` (thread s of the builders)."""
        row = self.table_row(ops, ops.u32(s), gs)
        ops.sts_v4(table + s * 32, row[0], row[1], row[2], row[3])
        ops.sts_v4(table + s * 32 + 16, row[4], row[5], row[6], row[7])

    # ---- one warp's rows -------------------------------------------------------------------------------
    def loads(self, ops, x_base, m, warp, lane, bx, ty):
        """Every slot's 8 words of row tile ty, one flat list (zeros where the block holds no input)."""
        out = []
        for i in range(self.tile.rows):
            row, col, live = self.place(m, warp, lane, bx, ty, i)
            out += row_loads(ops, x_base, row, self.k, col * 16, 8, live)
        return out

    def scale_byte(self, ops, words, gs):
        """(|words|, the block's E4M3 scale byte): t = (gs * amax) / 6 capped at 448, rounded to E4M3."""
        mags, amax = block_amax(ops, self.dtype, words)
        t = ops.fmin(ops.div_rn(ops.fmul(gs, amax), ops.f32(6.0)), ops.f32(448.0))
        return mags, ops.f32_to_e4m3x2(t, ops.f32(0.0)) & ops.u32(0xFF)

    def _codes(self, ops, mag, word, th):
        """The 4-bit codes of a word's two halves, in the low nibble of each half (the rest is junk)."""
        kind = self.dtype
        m2 = ops.h2_ge(kind, mag, th[3])
        m1 = ops.h2_ge(kind, mag, ops.bitsel(m2, th[5], th[1]))
        up = ops.bitsel(m1, ops.bitsel(m2, th[6], th[2]), ops.bitsel(m2, th[4], th[0]))
        m0 = ops.h2_ge(kind, mag, up)
        code = ops.bitsel(ops.u32(0x00040004), m2, m1)
        code = ops.bitsel(ops.u32(0x00060006), code, m0)
        return ops.bitsel(ops.u32(0x00070007), code, ops.h2_le(kind, word, th[7]))

    def _pack(self, ops, codes):
        """Four code words (8 elements) -> one word of 8 nibbles, element 2i in byte i's low nibble."""

        def pair(a, b):
            u = ops.prmt(a, b, 0x6420) & ops.u32(0x0F0F0F0F)
            return u | (u >> ops.u32(4))

        return ops.prmt(pair(codes[0], codes[1]), pair(codes[2], codes[3]), 0x6420)

    def encode_rows(self, ops, loaded, gs, table, p_base, s_base, m, warp, lane, bx, ty):
        """Scale, codes and stores of every slot of the warp in row tile ty (`loaded`: `loads`' words)."""
        mpad = (m + 127) // 128 * 128
        for i in range(self.tile.rows):
            row, col, live = self.place(m, warp, lane, bx, ty, i)
            words = loaded[8 * i : 8 * i + 8]
            mags, byte = self.scale_byte(ops, words, gs)
            entry = table + ops.i32(byte) * 32
            th = list(ops.lds_v4(entry)) + list(ops.lds_v4(entry + 16))
            codes = [self._codes(ops, mags[j], words[j], th) for j in range(8)]
            addr = p_base + ops.i64(row) * ops.i64(self.k // 2) + ops.i64(col * 8)
            ops.stg_v2(addr, self._pack(ops, codes[:4]), self._pack(ops, codes[4:]), live)
            sw = byte << (ops.u32(lane & 3) * ops.u32(8))
            sw = sw | ops.shfl_xor(sw, 1)
            sw = sw | ops.shfl_xor(sw, 2)
            off = swizzled_offset(ops, row, col & ~3, self.nb4)
            ops.stg_u32(s_base + off, sw, ((lane & 3) == 0) & (row < mpad) & (col < self.nb4))


class CuteNvFp4:
    def __init__(self, logic: CuteLogic) -> None:
        self.logic = logic

    @cute.jit
    def __call__(
        self,
        mX: cute.Tensor,
        mP: cute.Tensor,
        mS: cute.Tensor,
        mG: cute.Tensor,
        gs_value: Float32,
        use_ptr: Int32,
        m_arg: Int32,
        stream: cuda.CUstream,
    ):
        L = self.logic
        m = mX.shape[0]
        mpad = (m + 127) // 128 * 128
        tiles_y = (mpad + L.rows_per_cta - 1) // L.rows_per_cta
        grid_y = (tiles_y + L.tile.repeat - 1) // L.tile.repeat
        self.kernel(mX, mP, mS, mG, gs_value, use_ptr).launch(
            grid=[(L.nb4 + 31) // 32, grid_y, 1],
            block=[32 * L.tile.warps, 1, 1],
            stream=stream,
            use_pdl=L.tile.pdl,
        )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mP: cute.Tensor, mS: cute.Tensor, mG: cute.Tensor, gs_value, use_ptr):
        L, ops = self.logic, DEVICE
        tid, _, _ = cute.arch.thread_idx()
        bx, by, _ = cute.arch.block_idx()
        warp, lane = tid >> 5, tid & 31
        m = mX.shape[0]
        smem = cutlass.memory.SmemAllocator()
        table = smem.allocate_tensor(cutlass.Uint32, cute.make_layout(TABLE_WORDS), 16).iterator.toint()
        if cutlass.const_expr(L.tile.pdl):
            ops.gdc_enter()
        ty = by * L.tile.repeat  # this CTA's first row tile
        loaded = L.loads(ops, mX.iterator.toint(), m, warp, lane, bx, ty)
        gs = L.global_scale(ops, mG.iterator.toint(), gs_value, use_ptr)
        if tid < BUILDERS:
            self.logic.build_row(DEVICE, table, tid, gs)
        ops.barrier()
        # (the loop body names `self` and DEVICE: the DSL's loop rewriting carries only numbers as locals)
        for r in cutlass.range(L.tile.repeat - 1, unroll=1):  # the next tile's loads, then this one's encode
            ahead = self.logic.loads(DEVICE, mX.iterator.toint(), m, warp, lane, bx, ty + r + 1)
            self.logic.encode_rows(
                DEVICE, loaded, gs, table, mP.iterator.toint(), mS.iterator.toint(), m, warp, lane, bx, ty + r
            )
            loaded = ahead
        last = ty + L.tile.repeat - 1
        L.encode_rows(ops, loaded, gs, table, mP.iterator.toint(), mS.iterator.toint(), m, warp, lane, bx, last)


@kernel("quantization.nvfp4.cute", sources=_SOURCES)
def compile_cute(dtype: str, k: int, tile: CuteTile, arch: str):
    """tvm-ffi launcher `fn(x [M, k], packed uint8 [M', k/2], scales float8_e4m3fn [S], gs fp32 [1],
    gs_value, use_ptr, m)` (M' >= M rows; `m` is unused: the kernel reads M from x)."""
    logic = CuteLogic(dtype, k, tile)
    rows, cap = cute.sym_int(), cute.sym_int()
    x = make_fake_compact_tensor(_CUTE[dtype], (rows, k), stride_order=(1, 0), assumed_align=16)
    p = make_fake_compact_tensor(cutlass.Uint8, (cap, k // 2), stride_order=(1, 0), assumed_align=16)
    s = make_fake_compact_tensor(cutlass.Float8E4M3FN, (cute.sym_int(),), assumed_align=16)
    g = make_fake_compact_tensor(Float32, (1,), assumed_align=4)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(CuteNvFp4(logic), x, p, s, g, Float32(1.0), Int32(0), Int32(0), stream, arch=arch)


__all__ = ["CuteLogic", "CuteTile", "compile_cute", "why_not"]
