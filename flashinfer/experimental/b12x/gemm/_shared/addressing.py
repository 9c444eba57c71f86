"""Address arithmetic shared by the GEMM kernels (backend-agnostic: DSL integers or numpy arrays).

Global offsets are 64-bit (`ops.i64`) before any multiply by a row stride: a 28672 x 14336 FP8 weight
is 411 MB, past int32.
"""

from __future__ import annotations

from .formats import FORMAT


def swizzled_offset(ops, row, col, cols4):
    """Byte offset of scale (row, col) in the 128x4 swizzled layout (FORMATS.md) with cols4 columns
    (a multiple of 4) per 128-row block; row, col, cols4 are 32-bit integers."""
    block = ops.i64(row >> 7) * ops.i64(cols4 >> 2) * 512
    inner = (col >> 2) * 512 + (row & 31) * 16 + ((row >> 5) & 3) * 4 + (col & 3)
    return block + ops.i64(inner)


def row_bytes(fmt: str, k):
    """Bytes of one K-long row of `fmt` values (k may be a DSL integer)."""
    bits = FORMAT[fmt].value_bits
    return k * 2 if bits == 16 else (k if bits == 8 else k >> 1)


def span_offset(fmt: str, k0):
    """Byte offset of the span starting at value k0 inside its row."""
    return row_bytes(fmt, k0)


def load_span(ops, fmt: str, base, ld, row, k0, ok, hint: str | None = None):
    """The raw 32-bit words of the span (row, k0..k0+31): 4 (fp4), 8 (fp8) or 16 (16-bit) words.
    hint: None (plain `ldg_v4`) or a cache hint of `ops.ldg_v4_hint` (ptx.LDG_HINTS)."""
    addr = base + ops.i64(row) * ld + ops.i64(span_offset(fmt, k0))
    words = []
    for v in range({"fp4": 1, "fp8": 2, "raw16": 4}[FORMAT[fmt].family]):
        if hint is None:
            words += list(ops.ldg_v4(addr + 16 * v, ok))
        else:
            words += list(ops.ldg_v4_hint(addr + 16 * v, ok, hint))
    return words


def load_span_scale(ops, fmt: str, sf_base, row, k0, k, ok):
    """The scale data of span (row, k0): nvfp4 two E4M3 bytes (uint32), mxfp4/mxfp8 one UE8M0 byte;
    None for other formats (their scales are per 128 or per tensor and loaded by the caller)."""
    if fmt == "nvfp4":
        return ops.ldg_u16(sf_base + swizzled_offset(ops, row, k0 >> 4, k >> 4), ok)
    if fmt in ("mxfp4", "mxfp8"):
        return ops.ldg_u8(sf_base + swizzled_offset(ops, row, k0 >> 5, k >> 5), ok)
    return None
