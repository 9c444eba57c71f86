"""Per-thread pieces the CuTe DSL quantizers share (`nvfp4/_kernel_cute.py`, `mxfp8/_kernel_cute.py`), written
against the `ops` instruction set of `_lib/ptx.py` (so the tests' emulator runs them too)."""

from __future__ import annotations


def block_amax(ops, kind: str, words):
    """(|words|, fp32 max |x| over the block's halves, NaN ignored, 0 for an all-NaN block): packed-half
    abs and a max tree (a NaN half loses to a number), then the two halves in fp32."""
    mags = [ops.h2_abs(kind, w) for w in words]
    level = mags
    while len(level) > 1:
        level = [ops.h2_max(kind, level[2 * i], level[2 * i + 1]) for i in range(len(level) // 2)]
    lo, hi = ops.half2_to_f32(kind, level[0])
    return mags, ops.fmax(ops.fmax(lo, hi), ops.f32(0.0))


def row_loads(ops, x_base, row, k: int, col_elems, words: int, live):
    """`words` 32-bit words (2 halves each) of row `row` from element column col_elems, 16 bytes a load."""
    addr = x_base + (ops.i64(row) * ops.i64(k) + ops.i64(col_elems)) * 2
    out = []
    for j in range(words // 4):
        out += list(ops.ldg_v4(addr + 16 * j, live))
    return out


def swizzled_offset(ops, row, col, cols_padded: int):
    """Byte offset of scale (row, col) in the 128x4 swizzled layout of ceil4(cols) = cols_padded columns."""
    inner = (col >> 2) * 512 + (row & 31) * 16 + ((row >> 5) & 3) * 4 + (col & 3)
    return ops.i64(row >> 7) * ops.i64(cols_padded * 128) + ops.i64(inner)


class BlockRows:
    """The lane layout both CuTe quantizers share: lane l of CTA column bx owns block column 32 bx + l (one block
    of `block` values) in each of `tile.rows` consecutive rows of its warp; a row tile is warps x rows rows.
    Checks (dtype, k, tile) first: ValueError "`op`: reason" (`why_not(k, tile)`, or the dtype)."""

    def __init__(self, op: str, dtypes, dtype: str, k: int, block: int, tile, why_not) -> None:
        reason = why_not(k, tile) if dtype in dtypes else f"dtype must be one of {sorted(dtypes)}, got {dtype!r}"
        if reason is not None:
            raise ValueError(f"{op}: {reason}")
        self.dtype, self.k, self.tile = dtype, k, tile
        self.nb = k // block  # blocks (scale columns) a row
        self.nb4 = (self.nb + 3) // 4 * 4  # scale columns with the swizzled layout's padding
        self.rows_per_cta = tile.warps * tile.rows

    def place(self, m, warp, lane, bx, ty, i):
        """(row, column, live) of slot i in row tile ty: live = the block holds input (row < M, column < K / block)."""
        row = ty * self.rows_per_cta + warp * self.tile.rows + i
        col = bx * 32 + lane
        return row, col, (row < m) & (col < self.nb)
