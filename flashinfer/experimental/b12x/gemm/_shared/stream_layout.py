"""The decode STREAM layout of an NVFP4 weight: what `blockscaled/_kernel_stream` reads (issue #6).

Why: the plain layout (values [N, K/2] row-major, scales 128x4 swizzled) makes a decode warp read
64 bytes of each of 8 rows per load instruction (8 DRAM pages, half a 128-byte line each) and its
scales with separate 2-byte loads from a third place; a loads-only probe of that access pattern ran
at 24.1 us for 28672 x 4096 (the bf16 GEMV streams 3.3-3.7 TB/s). Here every warp load instruction
is 16 aligned bytes per lane over 512 consecutive bytes, and the scales come in the same stream.

Layout (kc = chunks of 128 K values per slab, 4 or 8): the weight is cut into SLABS of 16 rows x
128 kc values (row tile r = n // 16, slab s = k // (128 kc)), stored [N/16][K/(128 kc)] in that
order, so one row tile's slabs are contiguous. A slab is `loads(kc) = 2 kc + kc / 4` LOADS of 32
lanes x 16 bytes, load-major:

    load 2 ci + h  (ci < kc, h < 2): lane 4 g + t holds the FP4 bytes of row 16 r + 8 h + g, values
                   128 (kc s + ci) + 32 t .. + 31: exactly the span the decode kernel's lane (g, t)
                   feeds to mma.sync as weight row g (h = 0) or g + 8 (h = 1) of chunk ci;
    load 2 kc + v  (v < kc / 4): lane 4 g + t holds 16 E4M3 bytes, bytes 4 w + 2 h + j (w < 4,
                   h, j < 2) = the scale of row 16 r + 8 h + g, values 128 (kc s + 4 v + w) + 32 t +
                   16 j .. + 15 (the two scales of the span above, for chunk ci = 4 v + w).

So 1152 kc bytes per slab: 1024 kc of values (the same bytes as the plain layout, moved) and 128 kc
of scales (likewise). ORDER "natural" also permutes the nibbles inside each 32-bit word of values (8
values v0..v7 of one group): nibble i holds v2i and nibble i + 4 holds v2i+1 (i < 4), so the kernel's
`fp4_pair(i)` yields (v2i, v2i+1), the order 16-bit activations already have in registers
(`dequant.K_ORDER["natural"]`: no activation permute); ORDER "fp4" keeps the plain nibbles; ORDER
"placed" is "natural" with each code's 4 bits moved within its 16-bit half (`_PLACE`) so that the
bf16 kernel extracts a pair with one shift and one mask (`dequant.fp4_pair_placed`). Constraints: N % 16 == 0, K % (128 kc) == 0. `pack_stream` / `unpack_stream`
are pure tensor permutations (CPU or the weight's device, once, at pack time).
"""

from __future__ import annotations

import torch

from ..._lib.quant import unswizzle_scales
from ..._lib.quant.scales import as_bytes

KCS = (4, 8)  # chunks per slab: the scales fill whole 16-byte lanes from kc = 4 on
MAJORS = ("tile", "slab")  # slab order in memory: a tile's slabs contiguous, or every tile's slab s
ORDERS = ("fp4", "natural", "placed")  # code order inside each 32-bit word of values (module docstring)
# "placed": the natural order's codes with their bits pre-placed for bf16 (`dequant.fp4_pair_placed`):
# pair i's code in each 16-bit half -> (bits of m, e0, e1, s)
_PLACE = ((6, 7, 8, 15), (0, 1, 2, 9), (3, 4, 5, 12), (11, 13, 14, 10))
LOAD_BYTES = 512  # one warp load instruction: 32 lanes x 16 bytes


def loads(kc: int) -> int:
    """Warp load instructions per slab: 2 kc of FP4 values, kc / 4 of scales."""
    return 2 * kc + kc // 4


def slab_bytes(kc: int) -> int:
    return LOAD_BYTES * loads(kc)


def why_not(n: int, k: int, kc: int, order: str = "fp4") -> str | None:
    """None when an [n, k] NVFP4 weight has a stream layout with kc chunks per slab, else why not."""
    if order not in ORDERS:
        return f"order must be one of {ORDERS}, got {order!r}"
    if kc not in KCS:
        return f"kc (chunks of 128 values per slab) must be one of {KCS}, got {kc}"
    if n % 16 or k % (128 * kc):
        return f"the stream layout with kc = {kc} needs N % 16 == 0 and K % {128 * kc} == 0, got N = {n}, K = {k}"
    return None


def _check(n: int, k: int, kc: int, order: str = "fp4") -> None:
    reason = why_not(n, k, kc, order)
    if reason is not None:
        raise ValueError(f"stream layout: {reason}")


def _natural(vals: torch.Tensor) -> torch.Tensor:
    """Bytes [..., 4 w] of plain words (byte b = v2b | v2b+1 << 4) -> the "natural" nibble order:
    bytes (v0 | v2 << 4, v4 | v6 << 4, v1 | v3 << 4, v5 | v7 << 4)."""
    b = vals.reshape(*vals.shape[:-1], -1, 4)
    lo, hi = b & 0xF, b >> 4  # lo[j] = v2j, hi[j] = v2j+1
    out = torch.stack([lo[..., 0] | lo[..., 1] << 4, lo[..., 2] | lo[..., 3] << 4, hi[..., 0] | hi[..., 1] << 4, hi[..., 2] | hi[..., 3] << 4], -1)  # fmt: skip
    return out.reshape(vals.shape)


def _plain(vals: torch.Tensor) -> torch.Tensor:
    """The inverse of `_natural`."""
    b = vals.reshape(*vals.shape[:-1], -1, 4)
    ev = torch.stack([b[..., 0] & 0xF, b[..., 0] >> 4, b[..., 1] & 0xF, b[..., 1] >> 4], -1)  # v0 v2 v4 v6
    od = torch.stack([b[..., 2] & 0xF, b[..., 2] >> 4, b[..., 3] & 0xF, b[..., 3] >> 4], -1)  # v1 v3 v5 v7
    return (ev | od << 4).reshape(vals.shape)


def _words(vals: torch.Tensor) -> torch.Tensor:
    """Bytes [..., 4 w] -> their little-endian 32-bit words as int64 [..., w]."""
    b = vals.reshape(*vals.shape[:-1], -1, 4).to(torch.int64)
    return b[..., 0] | b[..., 1] << 8 | b[..., 2] << 16 | b[..., 3] << 24


def _bytes(words: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return torch.stack([(words >> (8 * i)) & 0xFF for i in range(4)], -1).to(torch.uint8).reshape(like.shape)


def _place(vals: torch.Tensor) -> torch.Tensor:
    """Natural-order bytes -> "placed" bytes (`_PLACE`, both 16-bit halves alike)."""
    w, out = _words(vals), 0
    for half in (0, 16):
        for i, spots in enumerate(_PLACE):
            code = (w >> (half + 4 * i)) & 0xF
            for bit, spot in enumerate(spots):
                out = out | (((code >> bit) & 1) << (half + spot))
    return _bytes(out, vals)


def _unplace(vals: torch.Tensor) -> torch.Tensor:
    """The inverse of `_place`."""
    w, out = _words(vals), 0
    for half in (0, 16):
        for i, spots in enumerate(_PLACE):
            for bit, spot in enumerate(spots):
                out = out | (((w >> (half + spot)) & 1) << (half + 4 * i + bit))
    return _bytes(out, vals)


def pack_stream(
    values: torch.Tensor, scales: torch.Tensor, n: int, k: int, kc: int, order: str = "fp4", major: str = "tile"
) -> torch.Tensor:
    """NVFP4 values uint8 [n, k/2] + swizzled E4M3 scales -> the stream layout, uint8 [n/16, k/(128 kc),
    slab_bytes(kc)] (major "tile") or [k/(128 kc), n/16, slab_bytes(kc)] (major "slab": the warps that
    stream slab s of their tiles at the same time read one contiguous region) on values' device."""
    if major not in MAJORS:
        raise ValueError(f"stream layout: major must be one of {MAJORS}, got {major!r}")
    _check(n, k, kc, order)
    vals = as_bytes(values)
    if tuple(vals.shape) != (n, k // 2):
        raise ValueError(f"stream layout: values must be [{n}, {k // 2}] bytes, got {tuple(values.shape)}")
    if order in ("natural", "placed"):
        vals = _natural(vals)
    if order == "placed":
        vals = _place(vals)
    sf = as_bytes(unswizzle_scales(as_bytes(scales).reshape(-1), n, k // 16))  # [n, k/16] row-major
    t, s = n // 16, k // (128 * kc)
    # values: row = 16 r + 8 h + g, byte = 64 (kc s + ci) + 16 tt + b  ->  [r, s, ci, h, g, tt, b]
    v = vals.reshape(t, 2, 8, s, kc, 4, 16).permute(0, 3, 4, 1, 2, 5, 6)
    v = v.reshape(t, s, 2 * kc * LOAD_BYTES)
    # scales: col = 8 (kc s + 4 vv + w) + 2 tt + j  ->  [r, s, vv, g, tt, w, h, j]
    f = sf.reshape(t, 2, 8, s, kc // 4, 4, 4, 2).permute(0, 3, 4, 2, 6, 5, 1, 7)
    f = f.reshape(t, s, (kc // 4) * LOAD_BYTES)
    out = torch.cat([v, f], dim=2)
    return (out.transpose(0, 1) if major == "slab" else out).contiguous()


def unpack_stream(
    packed: torch.Tensor, n: int, k: int, kc: int, order: str = "fp4", major: str = "tile"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of `pack_stream`: (values uint8 [n, k/2], row-major E4M3 scale bytes uint8 [n, k/16])."""
    _check(n, k, kc, order)
    t, s = n // 16, k // (128 * kc)
    if major == "slab":
        if tuple(packed.shape) != (s, t, slab_bytes(kc)):
            raise ValueError(f"stream layout: packed must be [{s}, {t}, {slab_bytes(kc)}], got {tuple(packed.shape)}")
        packed = packed.transpose(0, 1)
    if tuple(packed.shape) != (t, s, slab_bytes(kc)):
        raise ValueError(f"stream layout: packed must be [{t}, {s}, {slab_bytes(kc)}], got {tuple(packed.shape)}")
    split = 2 * kc * LOAD_BYTES
    v = packed[:, :, :split].reshape(t, s, kc, 2, 8, 4, 16).permute(0, 3, 4, 1, 2, 5, 6)
    f = packed[:, :, split:].reshape(t, s, kc // 4, 8, 4, 4, 2, 2).permute(0, 6, 3, 1, 2, 5, 4, 7)
    v = v.reshape(n, k // 2)
    if order == "placed":
        v = _unplace(v)
    v = _plain(v) if order in ("natural", "placed") else v
    return v.contiguous(), f.reshape(n, k // 16).contiguous()
