"""Tiled GEMM (M > 64): C = scale * A B^T with both operands dequantized to bf16/f16 tiles in shared memory.

Per CTA tile (bm x bn) and K-tile of BK = 64 values, every thread loads one or two SPANS (32 K values
of one row, `dequant.py`) of A and of B with 16-byte global loads into registers, one K-tile ahead of
the math; the math is ldmatrix.x4 + mma.sync m16n8k16 (fp32 accumulators) from a double-buffered
16-bit shared tile; after it, the prefetched spans are dequantized (exact for NVFP4, MXFP4, MXFP8 and
raw FP8; block-FP8 folds sa * sw into the activation with one bf16 rounding) and stored into the
other buffer; one barrier per K-tile. Both operands are stored in the weight family's K order
(`dequant.K_ORDER`, a permutation inside each group of 8), so every dot product is unchanged.

Shared layout: per buffer, A rows then B rows, 128 bytes (64 values) each, 16-byte chunk c of row r
at chunk c ^ (r % 8): the eight rows one ldmatrix phase reads fall in distinct banks.

Each quantized element is dequantized once per CTA (not once per warp): ~2.5 integer/half2 ops per
element against 2 * bm * bn / (bm + bn) MACs. At 128 x 128 / 8 warps (64 x 32 warp tiles) shared
memory (ldmatrix + the dequantized stores) is as busy as the tensor cores; 64 x 64 warp tiles (the
`LARGE_M` candidates) cut it to ~70%, and `TiledConfig.mix` moves the dequantization of the next
K-tile in between the current one's MMAs (docs/predictions/gemm_tiled.md).
Bytes: the operands once per CTA row/column of the grid (L2 serves the re-reads); FLOPs 2 M N K.
Constraints (plan time): K % 128 == 0, N % 16 == 0; M is a run-time extent (rows past M load zeros).
Raster (`TiledConfig.group_m`): N-fastest by default, or grouped (g M-tiles per N-tile) so the CTAs
resident together share their weight tiles in L2 (docs/predictions/gemm_tiled.md).
No cp.async or TMA: the register prefetch is what lets the dequantization sit between load and store.

Variant `fp8_mma` (tensor-, block-FP8 and MXFP8 on both sides): the shared tile keeps raw E4M3
(K-tiles of 128 values, same 128-byte rows and swizzle), ldmatrix b16 then hands each lane 4
consecutive bytes of a row, which is the m16n8k32 e4m3 fragment; block-FP8 multiplies each K-tile's
partial sums by sa[row] * sw before adding them, MXFP8 each k-step's (one 32-value block) by
2^(ea[row] + eb[col] - 254) (`mma_tile_mx`: exact products, fp32 sums; the K-tile's four UE8M0 bytes
of a row, one 32-bit word of the swizzled layout, reach shared memory as four fp32 factors).
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32

from ..._lib.compile import cute_compile, kernel
from ..._lib.ptx import DEVICE
from .._shared import addressing as AD
from .._shared import dequant as DQ
from .._shared.formats import FORMAT, compute_dtype, epilogue_exponent, k_family, pair_reason
from ._kernel_decode import _SOURCES, fake_args
from ._kernel_decode import Runtime as _DecodeRuntime

BK = 64
ROW_BYTES = BK * 2  # one 16-bit row of a K-tile in shared memory
Runtime = _DecodeRuntime


@dataclass(frozen=True)
class TiledConfig:
    """bm x bn CTA tile; warps_m x warps_n warps, each owning (bm / warps_m) x (bn / warps_n).
    fp8_mma: tensor/block-FP8 and MXFP8 only: keep raw E4M3 in shared memory (K-tiles of 128) and
    run mma.sync m16n8k32 e4m3, block scales applied to the partial sums (per K-tile; MXFP8 per
    k-step).
    group_m: CTA raster. 0: block x walks N, block y M (each row of M-tiles streams the whole weight
    from DRAM again); g > 0: CTAs visit g M-tiles per N-tile before the next N-tile, so the CTAs
    resident together share each weight tile and the g activation tiles stay in L2.
    mix: 0 dequantizes and stores the next K-tile after all MMAs of the current one; s > 0 spreads
    those stores over the current K-tile's last s k-steps (`TiledLogic.k_tile`)."""

    bm: int = 128
    bn: int = 128
    warps_m: int = 2
    warps_n: int = 4
    fp8_mma: bool = False
    group_m: int = 0
    mix: int = 0

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n


def default_config(max_m: int, n: int | None = None, b_fmt: str | None = None) -> TiledConfig:
    """64 x 128 with 4 warps up to M = 256. Past that the grouped raster (group_m 16: the CTAs that
    run together share weight tiles in L2), and for wide outputs (N >= 16384, so that even M = 257
    fills 3 x 64 CTAs) 128 x 256 with 64 x 64 warp tiles and the next K-tile's dequantization mixed
    into the last 2 k-steps (not for block-FP8 weights, whose 128-wide scale blocks need bn <= 128:
    `why_not`). H200 sweep at M = 2048, 28672 x 4096 nvfp4 (2026-11-30 10:48, beside
    other jobs, so relative only): 128 x 128 2061 µs, + g16 1794, 128 x 256 g16 mix 2 1458 (1.41x)."""
    if max_m <= 256:
        return TiledConfig(64, 128, 2, 2)
    if n is not None and n >= WIDE_N and b_fmt != "fp8_block":
        return TiledConfig(128, 256, 2, 4, group_m=16, mix=2)
    return TiledConfig(128, 128, 2, 4, group_m=16)


WIDE_N = 16384  # default_config: from this N on, the 128 x 256 tile


# Candidates for M > 256: 64 x 64 warp tiles and the grouped raster (docs/predictions/gemm_tiled.md).
# sm_90a SASS, nvfp4: per K-tile and SM the default 128 x 128 / 8 warps (2 CTAs per SM) moves 196 KB
# by ldmatrix + 64 KB of dequantized stores, ~2030 cycles at 128 B/clk, as long as its 2048 cycles of
# HMMA: shared memory is as busy as the tensor cores. 128 x 256 / 8 warps (241-255 registers, 1 CTA
# per SM) moves 131 + 49 KB for the same HMMA work (69%) and issues 4.0 instead of 5.1 instructions
# per HMMA. No fp8_mma twins: their 128 fp32 partial sums plus the raw E4M3 prefetch spill (ptxas
# STACK 128-544 bytes). With one CTA per SM the mix = 0 loop leaves the tensor cores idle while every
# warp dequantizes after its last HMMA (~250 instructions per warp and K-tile, SASS); mix spreads
# that work over the last k-steps, where ptxas interleaves it with the HMMAs.
LARGE_M = (
    TiledConfig(128, 256, 2, 4),
    TiledConfig(128, 256, 2, 4, group_m=8),
    TiledConfig(128, 256, 2, 4, group_m=16),
    TiledConfig(256, 128, 4, 2, group_m=8),
    TiledConfig(128, 128, 2, 2, group_m=16),
    TiledConfig(128, 128, 2, 4, group_m=16),
    TiledConfig(128, 256, 2, 4, group_m=16, mix=2),
    TiledConfig(128, 256, 2, 4, group_m=16, mix=3),
    TiledConfig(128, 256, 2, 4, group_m=16, mix=4),
    TiledConfig(256, 128, 4, 2, group_m=8, mix=4),
    TiledConfig(128, 128, 2, 2, group_m=16, mix=4),
    TiledConfig(128, 128, 2, 4, True, group_m=16, mix=4),
)


def candidate_configs(max_m: int) -> tuple[TiledConfig, ...]:
    """What the benchmark's --sweep measures (fp8_mma ones apply to tensor/block-FP8 only); the
    `LARGE_M` ones only where M fills their tiles (M > 256)."""
    base = (TiledConfig(64, 128, 2, 2), TiledConfig(128, 128, 2, 4), TiledConfig(64, 64, 2, 2))
    out = base + tuple(TiledConfig(c.bm, c.bn, c.warps_m, c.warps_n, True) for c in base)
    return out + (LARGE_M if max_m > 256 else ())


def why_not(a_fmt: str, b_fmt: str, out_dtype: str, config: TiledConfig) -> str | None:
    """None when the kernel implements this combination, else the reason."""
    if not isinstance(config, TiledConfig):
        return f"config must be a TiledConfig, got {type(config).__name__}"
    if (reason := pair_reason(a_fmt, b_fmt, out_dtype)) is not None:
        return reason
    c = config
    if c.fp8_mma and not (a_fmt == b_fmt and b_fmt in FP8_MMA_FORMATS):
        return f"{c}: fp8_mma needs tensor-, block-FP8 or MXFP8 on both sides, got {a_fmt} x {b_fmt}"
    return tile_reason(a_fmt, b_fmt, config)


def tile_reason(a_fmt: str, b_fmt: str, config: TiledConfig) -> str | None:
    """`why_not`'s checks past the formats' pair (fp8_mma's pairs included), for a caller with pairs of its own (moe's
    grouped kernel: MXFP8 activations x FP4 weights, with fp8_mma for MXFP4 weights)."""
    c = config
    spans = 4 if c.fp8_mma else 2  # per tile row and K-tile
    if c.bm % (16 * c.warps_m) or c.bn % (16 * c.warps_n):
        return f"{c}: warp tiles must be multiples of 16 x 16"
    if (spans * c.bm) % c.threads or (spans * c.bn) % c.threads:
        return f"{c}: every thread must own the same number of A and B spans ({spans} per tile row)"
    if b_fmt == "fp8_block" and (c.bn > 128 or 128 % c.bn):
        return f"{c}: block-FP8 needs bn to divide 128 (one weight block scale per CTA and K-tile)"
    ksteps = (128 // 32) if c.fp8_mma else (BK // 16)
    if not 0 <= c.mix <= ksteps:
        return f"{c}: mix must be 0..{ksteps} (k-steps of a K-tile that carry the next tile's stores)"
    if not 0 <= c.group_m <= 64:
        return f"{c}: group_m must be 0 (2-D grid) or 1..64 M-tiles per raster group"
    if smem_bytes(b_fmt, c) > 99 * 1024:
        return f"{c}: needs more than the 99 KB of shared memory an SM120 block gets"
    return None


FP8_MMA_FORMATS = ("fp8_tensor", "fp8_block", "mxfp8")


def mx_blocks(b_fmt: str, config: TiledConfig) -> bool:
    """Whether the variant applies MX block scales to each k-step's partial sums (fp8_mma with MXFP8 weights, or
    MXFP4 ones stored as E4M3: moe's grouped kernel for MXFP8 activations)."""
    return config.fp8_mma and b_fmt in ("mxfp8", "mxfp4")


def smem_bytes(b_fmt: str, config: TiledConfig) -> int:
    """Two K-tile buffers of 128-byte rows (A rows, then B rows), and with `mx_blocks` per buffer the
    four fp32 block factors of each row after them."""
    rows = config.bm + config.bn
    return 2 * rows * ROW_BYTES + (2 * rows * 16 if mx_blocks(b_fmt, config) else 0)


def can_implement(a_fmt: str, b_fmt: str, out_dtype: str, config: TiledConfig) -> bool:
    return why_not(a_fmt, b_fmt, out_dtype, config) is None


class TiledLogic:
    """Static facts of one variant and the straight-line pieces of its kernel (emulated in tests)."""

    def __init__(self, a_fmt: str, b_fmt: str, out_dtype: str, config: TiledConfig) -> None:
        reason = self.variant_reason(a_fmt, b_fmt, out_dtype, config)
        if reason is not None:
            raise ValueError(f"gemm.blockscaled tiled kernel: {reason}")
        self.a_fmt, self.b_fmt, self.out_dtype, self.cfg = a_fmt, b_fmt, out_dtype, config
        self.compute = compute_dtype(a_fmt)
        self.family = k_family(a_fmt, b_fmt)
        self.mx = mx_blocks(b_fmt, config)
        self.exp = 0 if self.mx else epilogue_exponent(a_fmt, b_fmt)  # mx: the scales act on the sums
        self.threads = config.threads
        self.stage_bytes = (config.bm + config.bn) * ROW_BYTES
        self.smem_bytes = smem_bytes(b_fmt, config)
        self.wtm = config.bm // config.warps_m
        self.wtn = config.bn // config.warps_n
        self.bk = 128 if config.fp8_mma else BK  # K values per K-tile
        self.spr = self.bk // 32  # spans per tile row
        self.a_spans = self.spr * config.bm // self.threads  # spans per thread
        self.b_spans = self.spr * config.bn // self.threads

    def variant_reason(self, a_fmt: str, b_fmt: str, out_dtype: str, config: TiledConfig) -> str | None:
        """None when this logic implements the variant (`why_not`; a subclass with pairs of its own overrides it)."""
        return why_not(a_fmt, b_fmt, out_dtype, config)

    def tile_origin(self, ops, bid, grid_m):
        """(m0, n0) of CTA `bid` = (block x, block y) of `grid(grid_m, grid_n)`. Grouped raster: block y
        is a group of g M-tiles (fewer in a short last group: rows = min(g, grid_m - y g), a run-time
        value), block x walks them M-fastest (x % rows) then N (x // rows). The CTAs past the last tile
        (n0 >= N: only in a short last group, at the end of its row) are idle; the kernel skips them.
        Session 23: with the static g instead, a group of 8 M-tiles under g = 16 (M = 1024) left idle
        CTAs between the busy ones, and the block scheduler put two busy CTAs on some SMs and none on
        others (nvfp4 M = 1024 2048 x 5632: 124 us at g 16 against 84 at g 8)."""
        bx, by = bid
        g = self.cfg.group_m
        if g == 0:
            return by * self.cfg.bm, bx * self.cfg.bn
        rows = ops.imin(g, grid_m - by * g)
        return (by * g + bx % rows) * self.cfg.bm, (bx // rows) * self.cfg.bn

    def grid(self, grid_m, grid_n):
        """The launch grid (x, y, z) for grid_m x grid_n CTA tiles."""
        g = self.cfg.group_m
        return [grid_n, grid_m, 1] if g == 0 else [grid_n * g, (grid_m + g - 1) // g, 1]

    def zero_acc(self, ops):
        return [ops.f32_zero() for _ in range((self.wtm // 16) * (self.wtn // 8) * 4)]

    # -- global -> registers ----------------------------------------------------------------------
    def load(self, ops, rt: Runtime, tid, m0, n0, kc):
        """Raw words and scale data of this thread's spans of K-tile kc: [(words, scale)] A then B."""
        out = []
        k_tile = kc * self.bk
        kb = k_tile >> 7  # block-FP8 block of this K-tile
        block_scale = None
        if self.b_fmt == "fp8_block":
            addr = rt.sfb_base + (ops.i64(n0 >> 7) * ops.i64(rt.k >> 7) + ops.i64(kb)) * 4
            block_scale = ops.ldg_f32(addr, ops.boolean(True))
        for side, fmt, count, r0, limit in (
            ("a", self.a_fmt, self.a_spans, m0, rt.m),
            ("b", self.b_fmt, self.b_spans, n0, rt.n),
        ):
            base, sf_base = (rt.a_base, rt.sfa_base) if side == "a" else (rt.b_base, rt.sfb_base)
            ld = ops.i64(AD.row_bytes(fmt, rt.k))
            for i in range(count):
                s = tid + i * self.threads
                k0 = k_tile + (s % self.spr) * 32
                if side == "a":
                    row = r0 + s // self.spr
                    ok = row < limit
                else:
                    row, ok = self.b_row(ops, rt, n0, s // self.spr)
                words = AD.load_span(ops, fmt, base, ld, row, k0, ok)
                if self.mx:  # the row's four UE8M0 bytes of this K-tile (each of its spans' threads
                    # loads and stores the same word: no per-thread branch)
                    sc = ops.ldg_u32(sf_base + AD.swizzled_offset(ops, row, kc * 4, rt.k >> 5), ok)
                    out.append((words, sc))
                    continue
                sc = AD.load_span_scale(ops, fmt, sf_base, row, k0, rt.k, ok)
                if self.cfg.fp8_mma:  # raw E4M3 to shared; block scales act on the partial sums
                    sc = None
                elif side == "a" and self.b_fmt == "fp8_block":
                    if fmt == "fp8_block":
                        sa_addr = rt.sfa_base + (ops.i64(row) * ops.i64(rt.k >> 7) + ops.i64(kb)) * 4
                        sc = ops.ldg_f32(sa_addr, ok) * block_scale
                    else:
                        sc = block_scale
                out.append((words, sc))
        return out

    def b_row(self, ops, rt: Runtime, n0, local):
        """(B row, in range) of tile row `local` of the CTA whose tile starts at column n0: row n0 +
        local here; a subclass may map tile rows elsewhere (moe's gated FC1 pairs gate and up rows)."""
        row = n0 + local
        return row, row < rt.n

    # -- registers -> shared (dequantized) ------------------------------------------------------
    def _row_addr(self, smem_base, buf, row_local, chunk):
        """Shared address of 16-byte chunk `chunk` of tile row `row_local` (A rows, then B rows)."""
        return smem_base + buf * self.stage_bytes + row_local * ROW_BYTES + ((chunk ^ (row_local & 7)) << 4)

    def _scale_addr(self, smem_base, buf, row_local):
        """Shared address of tile row `row_local`'s four block factors (mx) in buffer `buf`."""
        return smem_base + 2 * self.stage_bytes + (buf * (self.cfg.bm + self.cfg.bn) + row_local) * 16

    def store_steps(self, ops, rt: Runtime, tid, regs, buf, smem_base=0):
        """store_tile as a generator that yields after each group's 16-byte stores (the `mix` loop
        advances it between k-steps)."""
        i = 0
        for side, fmt, count, row_off in (
            ("a", self.a_fmt, self.a_spans, 0),
            ("b", self.b_fmt, self.b_spans, self.cfg.bm),
        ):
            for c in range(count):
                words, sc = regs[i]
                i += 1
                s = tid + c * self.threads
                row_local = row_off + s // self.spr
                if self.cfg.fp8_mma:  # 32 raw bytes: two 16-byte chunks of the 128-byte row
                    if FORMAT[fmt].family == "fp4":  # MXFP4 weights: 16 bytes of E2M1 -> 32 of E4M3 (exact)
                        words = DQ.fp4_as_e4m3(ops, words)
                    if sc is not None:  # mx: the row's four factors 2^(e - 127), each byte e moved
                        # into an fp32 exponent field (exact; e = 0, 2^-127, reads as 0)
                        factors = [((sc >> (8 * j)) & 0xFF) << 23 for j in range(4)]
                        ops.sts_v4(self._scale_addr(smem_base, buf, row_local), *factors)
                    for j in range(2):
                        chunk = (s % self.spr) * 2 + j
                        ops.sts_v4(self._row_addr(smem_base, buf, row_local, chunk), *words[4 * j : 4 * j + 4])
                        yield
                    continue
                factors = DQ.span_factors(ops, fmt, self.compute, sc)
                for j in range(4):
                    g = DQ.span_group(ops, fmt, self.family, self.compute, words, factors, j)
                    ops.sts_v4(self._row_addr(smem_base, buf, row_local, (s % self.spr) * 4 + j), *g)
                    yield

    @property
    def store_groups(self) -> int:
        """Yields of `store_steps` per K-tile."""
        return (self.a_spans + self.b_spans) * (2 if self.cfg.fp8_mma else 4)

    def store_tile(self, ops, rt: Runtime, tid, regs, buf, smem_base=0):
        for _ in self.store_steps(ops, rt, tid, regs, buf, smem_base):
            pass

    # -- shared -> tensor cores -----------------------------------------------------------------
    @property
    def ksteps(self) -> int:
        return self.bk // (32 if self.cfg.fp8_mma else 16)

    def frags(self, ops, tid, buf, ks, smem_base=0):
        """(A fragments per m-tile, B fragments per n-tile) of k-step ks of shared buffer `buf`
        (ldmatrix.x4: A 16 x 16 per m-tile, B two 8-column halves per load)."""
        warp, lane = tid >> 5, tid & 31
        wm, wn = warp // self.cfg.warps_n, warp % self.cfg.warps_n
        i, r = lane >> 3, lane & 7
        a_frags = []
        for mt in range(self.wtm // 16):
            row = wm * self.wtm + 16 * mt + (i & 1) * 8 + r
            a_frags.append(ops.ldmatrix_x4(self._row_addr(smem_base, buf, row, 2 * ks + (i >> 1))))
        b_frags = []
        for p in range(self.wtn // 16):
            row = self.cfg.bm + wn * self.wtn + 16 * p + (i >> 1) * 8 + r
            q = ops.ldmatrix_x4(self._row_addr(smem_base, buf, row, 2 * ks + (i & 1)))
            b_frags += [(q[0], q[1]), (q[2], q[3])]
        return a_frags, b_frags

    def mma_step(self, ops, a_frags, b_frags, acc):
        """acc += the k-step's A x B^T (mma.sync per m-tile x n-tile; e4m3 m16n8k32 with fp8_mma)."""
        acc = list(acc)
        n_nt = self.wtn // 8
        for mt in range(self.wtm // 16):
            for nt in range(n_nt):
                idx = (mt * n_nt + nt) * 4
                if self.cfg.fp8_mma:
                    acc[idx : idx + 4] = ops.mma_fp8(a_frags[mt], b_frags[nt], acc[idx : idx + 4])
                else:
                    acc[idx : idx + 4] = ops.mma(self.compute, a_frags[mt], b_frags[nt], acc[idx : idx + 4])
        return acc

    def mma_tile(self, ops, rt: Runtime, tid, m0, n0, kc, buf, acc, smem_base=0, after_kstep=None):
        """Accumulate K-tile kc from shared buffer `buf` (ldmatrix.x4 + mma.sync); `after_kstep(ks)`
        runs after the MMAs of each k-step (the `mix` schedule's stores)."""
        if self.mx:
            return self.mma_tile_mx(ops, tid, buf, acc, smem_base, after_kstep)
        rescale = self.cfg.fp8_mma and self.b_fmt == "fp8_block"
        if rescale:  # issued first: the loads land while the tensor cores run
            row_scales = self._row_scales(ops, rt, tid, m0, n0, kc)
            part = self.zero_acc(ops)
        else:
            part = list(acc)
        for ks in range(self.ksteps):
            part = self.mma_step(ops, *self.frags(ops, tid, buf, ks, smem_base), part)
            if after_kstep is not None:
                after_kstep(ks)
        if not rescale:
            return part
        acc = list(acc)
        n_mt, n_nt = self.wtm // 16, self.wtn // 8
        for mt in range(n_mt):
            for nt in range(n_nt):
                idx = (mt * n_nt + nt) * 4
                for e in range(4):
                    acc[idx + e] = acc[idx + e] + part[idx + e] * row_scales[2 * mt + (e >> 1)]
        return acc

    def mma_tile_mx(self, ops, tid, buf, acc, smem_base=0, after_kstep=None):
        """mma_tile for MXFP8 (`mx`): per k-step (one 32-value block) and m16n8 tile, the MMA on zero
        and acc += part * 2^(ea[row] - 127) * 2^(eb[col] - 127), the factors read from shared memory
        at each k-step (held for the whole K-tile they spill: 255 registers on sm_90a)."""
        warp, lane = tid >> 5, tid & 31
        wm, wn = warp // self.cfg.warps_n, warp % self.cfg.warps_n
        g, t = lane >> 2, lane & 3
        n_mt, n_nt = self.wtm // 16, self.wtn // 8
        rows = [wm * self.wtm + 16 * mt + 8 * h + g for mt in range(n_mt) for h in range(2)]
        cols = [self.cfg.bm + wn * self.wtn + 8 * nt + 2 * t + j for nt in range(n_nt) for j in range(2)]
        acc = list(acc)
        zero = [ops.f32_zero() for _ in range(4)]
        for ks in range(self.ksteps):
            fa = [ops.lds_f32(self._scale_addr(smem_base, buf, r) + 4 * ks) for r in rows]
            fb = [ops.lds_f32(self._scale_addr(smem_base, buf, c) + 4 * ks) for c in cols]
            a_frags, b_frags = self.frags(ops, tid, buf, ks, smem_base)
            for mt in range(n_mt):
                for nt in range(n_nt):
                    idx = (mt * n_nt + nt) * 4
                    part = ops.mma_fp8(a_frags[mt], b_frags[nt], zero)
                    for e in range(4):
                        scale = fa[2 * mt + (e >> 1)] * fb[2 * nt + (e & 1)]
                        acc[idx + e] = acc[idx + e] + part[e] * scale
            if after_kstep is not None:
                after_kstep(ks)
        return acc

    def k_tile(self, ops, rt: Runtime, tid, m0, n0, kc, acc, regs, smem_base=0):
        """One K loop iteration before its barrier: the MMAs of K-tile kc from buffer kc & 1 and the
        stores of the prefetched `regs` (K-tile kc + 1) into the other buffer. mix = 0: all stores
        after all MMAs; mix = s: the stores spread over the last s k-steps, each share right after
        that k-step's MMAs, so the dequantization issues while the tensor cores still hold work."""
        mix = self.cfg.mix
        if mix == 0:
            acc = self.mma_tile(ops, rt, tid, m0, n0, kc, kc & 1, acc, smem_base)
            self.store_tile(ops, rt, tid, regs, (kc + 1) & 1, smem_base)
            return acc
        buf, other = kc & 1, (kc + 1) & 1
        steps = self.store_steps(ops, rt, tid, regs, other, smem_base)
        first, total = self.ksteps - mix, self.store_groups
        done = [0]

        def after(ks):
            if ks >= first:
                upto = -(-total * (ks - first + 1) // mix)  # ceil: the last k-step stores the rest
                for _ in range(upto - done[0]):
                    next(steps)
                done[0] = upto

        return self.mma_tile(ops, rt, tid, m0, n0, kc, buf, acc, smem_base, after)

    def _row_scales(self, ops, rt: Runtime, tid, m0, n0, kc):
        """sa[row, kc] * sw[n0 / 128, kc] for the accumulator rows g and g + 8 of each m-tile."""
        warp, lane = tid >> 5, tid & 31
        wm = warp // self.cfg.warps_n
        g = lane >> 2
        kb = ops.i64(rt.k >> 7)
        sw = ops.ldg_f32(rt.sfb_base + (ops.i64(n0 >> 7) * kb + ops.i64(kc)) * 4, ops.boolean(True))
        out = []
        for mt in range(self.wtm // 16):
            for h in range(2):
                row = m0 + wm * self.wtm + 16 * mt + 8 * h + g
                out.append(ops.ldg_f32(rt.sfa_base + (ops.i64(row) * kb + ops.i64(kc)) * 4, row < rt.m) * sw)
        return out

    # -- epilogue -------------------------------------------------------------------------------
    def epilogue_scale(self, ops, rt: Runtime):
        """alpha * s0 * s1 * s2 * 2^(C_a + C_b): what every accumulator is multiplied by."""
        true = ops.boolean(True)
        scale = rt.alpha * ops.ldg_f32(rt.s0_base, true) * ops.ldg_f32(rt.s1_base, true)
        return scale * ops.ldg_f32(rt.s2_base, true) * ops.f32(float(2.0**self.exp))

    def epilogue(self, ops, rt: Runtime, tid, m0, n0, acc):
        self.store_acc(ops, rt, tid, m0, n0, acc, self.epilogue_scale(ops, rt))

    def store_acc(self, ops, rt: Runtime, tid, m0, c0, acc, scale, step: int = 1, ld=None):
        """C[row, col] = acc * scale for n-tiles 0, step, 2 step, ... of each warp m-tile; n-tile nt
        lands at columns c0 + (wn * wtn + 8 nt) / step + 2t (+1). step 2: a caller that folded each
        odd n-tile into the even one before it (moe's gate/up pairs). ld: C's row stride in elements
        (rt.n when None; a column panel of a wider C passes the full width)."""
        warp, lane = tid >> 5, tid & 31
        wm, wn = warp // self.cfg.warps_n, warp % self.cfg.warps_n
        g, t = lane >> 2, lane & 3
        n_mt, n_nt = self.wtm // 16, self.wtn // 8
        for mt in range(n_mt):
            for nt in range(0, n_nt, step):
                idx = (mt * n_nt + nt) * 4
                col = c0 + wn * (self.wtn // step) + (8 * nt) // step + 2 * t
                for h in range(2):
                    row = m0 + wm * self.wtm + 16 * mt + 8 * h + g
                    ok = (row < rt.m) & (col < rt.n)
                    v0, v1 = acc[idx + 2 * h] * scale, acc[idx + 2 * h + 1] * scale
                    elem = ops.i64(row) * ops.i64(rt.n if ld is None else ld) + ops.i64(col)
                    if self.out_dtype == "float32":
                        ops.stg_f32(rt.c_base + elem * 4, v0, ok)
                        ops.stg_f32(rt.c_base + elem * 4 + 4, v1, ok)
                    else:
                        ops.stg_u32(rt.c_base + elem * 2, ops.f32_to_half2(self.out_dtype, v0, v1), ok)


class TiledGemm:
    """The kernel of one TiledLogic; `ops` the device backend its `tile` runs the logic with (a
    subclass of ptx.DeviceOps when a caller's logic needs more instructions, as moe's activations)."""

    def __init__(self, logic: TiledLogic, ops=DEVICE) -> None:
        self.logic = logic
        self.ops = ops

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mSFA: cute.Tensor,
        mB: cute.Tensor,
        mSFB: cute.Tensor,
        mC: cute.Tensor,
        mS0: cute.Tensor,
        mS1: cute.Tensor,
        mS2: cute.Tensor,
        alpha: Float32,
        stream: cuda.CUstream,
    ):
        cfg = self.logic.cfg
        grid_n = (mB.shape[0] + cfg.bn - 1) // cfg.bn
        grid_m = (mC.shape[0] + cfg.bm - 1) // cfg.bm
        self.kernel(mA, mSFA, mB, mSFB, mC, mS0, mS1, mS2, alpha).launch(
            grid=self.logic.grid(grid_m, grid_n), block=[self.logic.threads, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        mA: cute.Tensor,
        mSFA: cute.Tensor,
        mB: cute.Tensor,
        mSFB: cute.Tensor,
        mC: cute.Tensor,
        mS0: cute.Tensor,
        mS1: cute.Tensor,
        mS2: cute.Tensor,
        alpha: Float32,
    ):
        tid, _, _ = cute.arch.thread_idx()
        bx, by, _ = cute.arch.block_idx()
        m0, n0 = self.logic.tile_origin(self.ops, (bx, by), (mC.shape[0] + self.logic.cfg.bm - 1) // self.logic.cfg.bm)
        k = mB.shape[1] * 8 // FORMAT[self.logic.b_fmt].value_bits
        rt = Runtime.of((mA, mSFA, mB, mSFB, mC, mS0, mS1, mS2), k, alpha)
        smem = cutlass.memory.SmemAllocator()
        tiles = smem.allocate_tensor(cutlass.Uint8, cute.make_layout(self.logic.smem_bytes), 128)
        sbase = tiles.iterator.toint()
        if cutlass.const_expr(self.logic.cfg.group_m == 0):
            self.tile(rt, tid, m0, n0, sbase)
        elif n0 < rt.n:  # false only for the idle CTAs of a grouped raster's short last group (per CTA)
            self.tile(rt, tid, m0, n0, sbase)

    @cute.jit
    def tile(self, rt: Runtime, tid, m0, n0, sbase):
        """The K loop and epilogue of one CTA tile."""
        chunks = rt.k // self.logic.bk
        regs = self.logic.load(self.ops, rt, tid, m0, n0, 0)
        self.logic.store_tile(self.ops, rt, tid, regs, 0, sbase)
        self.ops.barrier()
        acc = self.logic.zero_acc(self.ops)
        for kc in cutlass.range(chunks):
            # The last iteration reloads its own tile into the idle buffer: no branch in the loop.
            nxt = self.ops.imin(kc + 1, chunks - 1)
            regs = self.logic.load(self.ops, rt, tid, m0, n0, nxt)
            acc = self.logic.k_tile(self.ops, rt, tid, m0, n0, kc, acc, regs, sbase)
            self.ops.barrier()
        self.logic.epilogue(self.ops, rt, tid, m0, n0, acc)


@kernel("gemm.blockscaled.tiled", sources=_SOURCES)
def compile_tiled(a_fmt: str, b_fmt: str, out_dtype: str, config: TiledConfig, arch: str):
    """tvm-ffi launcher `fn(A, SFA, B, SFB, C, S0, S1, S2, alpha)` on torch's current stream."""
    from cutlass.cute.runtime import make_fake_stream

    logic = TiledLogic(a_fmt, b_fmt, out_dtype, config)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(TiledGemm(logic), *fake_args(a_fmt, b_fmt, out_dtype), Float32(1.0), stream, arch=arch)
