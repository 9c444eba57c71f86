"""Decode GEMM (M <= 64): C[M, N] = scale * A[M, K] B[N, K]^T with B quantized, on warp mma.sync.

The weight is the MMA's M side (swap AB): each warp computes `tiles` x 16 weight rows against up to
8 * ntiles tokens (the MMA's N side, 8 per n-tile; tokens >= M are zero and never loaded), so at M = 1 the
tensor cores idle and the kernel streams the weight bytes, which are everything there. Up to 64 tokens
(ntiles 4 and 8) the weight bytes still dominate HBM traffic; each CTA then reads all M x K
activation bytes from L2, so larger BN (tiles) cuts that traffic.

Work split (split-K inside the CTA, no workspace): a CTA owns BN = 16 * tiles rows; its `warps`
warps take the K chunks (128 values each) c = w, w + warps, ... and reduce their fp32 partial sums
through shared memory at the end, so N = 4096 gives 128 CTAs of BN = 32 rows (132 SMs on the H200).
With DecodeConfig.wn > 1 the warps form wn groups along N (BN = 16 * tiles * wn), each group splitting
K as above; `ashare` lets a chunk's wn warps share its activation loads through shared memory.
The streaming options (cache hints, clamp, fp4 placement, wn, ashare) default off: issue #6's sweep
(`_decode_sweeps.stream_variants`, `bench_gemm --sweep-subset stream`) decides which become the heuristic's.

Per chunk, lane (g, t) = (lane / 4, lane % 4) loads with 16-byte accesses one SPAN (32 consecutive
K values at 32 t) of weight rows g and g + 8 of each 16-row tile, their scales, and the same span of
token g (and g + 8, ...: one span per token tile; at 64 tokens the token tiles go one per pass,
`DecodeLogic.passes`): weight bytes per warp and chunk are 64 contiguous bytes per row (fp4) or 128
(fp8). `dequant.span_group` turns each group of 8 values into four half2 registers in the weight
family's K order; MMA step (j, h) feeds registers 2h and 2h + 1 of group j as the A fragment's k
columns (2t, 2t+1) and (2t+8, 2t+9) and the activations' registers the same way, so each logical
k of the MMA is one physical k, identical for both operands, and every physical k is used once.

Bytes: N * K * bits / 8 of weight plus its scales (N * K / 16 E4M3 bytes for NVFP4, / 32 for MX),
M * K activation bytes per CTA (from L2), M * N outputs. FLOPs: 2 * M * N * K (16 * N * K issued).
Constraints (plan time): K % 128 == 0, N % 16 == 0; M is a run-time extent up to 8 * ntiles.

Weight prefetch (DecodeConfig.prefetch = p > 0): the K loop becomes a software pipeline whose
carried registers hold the weight words (and scales) of the warp's next p chunks; each iteration
issues the loads of chunk c + p * warps, then runs chunk c's math, so p chunks of weight bytes per
warp are in flight during the MMAs (activations are still loaded inside the chunk, from L2).
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from ..._lib.compile import cute_compile, kernel
from ..._lib.ptx import DEVICE
from .._shared import addressing as AD
from .._shared import dequant as DQ
from .._shared.formats import FORMAT, compute_dtype, epilogue_exponent, k_family
from ._config_decode import (  # noqa: F401  (re-exported: callers use _kernel_decode.X)
    ACACHE,
    ACC_LIMIT,
    CHUNK,
    FP4,
    KGROUP,
    KSPLIT,
    LOAD_PROBES,
    NTILES,
    PREFETCH,
    PROBE_ENV,
    PROBES,
    RED_SMEM_LIMIT,
    SMEM_LIMIT,
    UPFRONT,
    WCACHE,
    WN,
    DecodeConfig,
    can_implement,
    default_config,
    launch_bounds,
    ntiles_for,
    tiling_reason,
    why_not,
)

_SOURCES = tuple(f"flashinfer.experimental.b12x.gemm._shared.{m}" for m in ("addressing", "dequant", "formats")) + (
    "flashinfer.experimental.b12x._lib.ptx",
    "flashinfer.experimental.b12x.gemm.blockscaled._config_decode",
)


def _hint(cache: str) -> str | None:
    """The `load_span` hint of a wcache / acache value ("nc": the plain load, no hint)."""
    return None if cache == "nc" else cache


# ---- per-thread logic (backend-agnostic: runs on the device and in the CPU emulator) -------------
@dataclass
class Runtime:
    """Run-time values of one launch (DSL integers on the device, numpy in the emulator)."""

    a_base: object
    sfa_base: object
    b_base: object
    sfb_base: object
    c_base: object
    s0_base: object
    s1_base: object
    s2_base: object
    m: object
    n: object
    k: object
    alpha: object

    @classmethod
    def of(cls, tensors, k, alpha, n=None, **extra):
        """The runtime of a device launch: tensors (A, SFA, B, SFB, C, S0, S1, S2) as base addresses, m C's
        rows and n its columns unless given; extra: a subclass's fields."""
        c = tensors[4]
        bases = [t.iterator.toint() for t in tensors]
        return cls(*bases, c.shape[0], c.shape[1] if n is None else n, k, alpha, **extra)


class DecodeLogic:
    """Static facts of one compiled variant and the straight-line pieces of its kernel."""

    what = "gemm.blockscaled decode kernel"  # names the kernel in errors
    OPS = DEVICE  # the device ops `k_loop` runs on (a subclass's kernel may extend them)
    why_not = staticmethod(why_not)  # the validity predicate (hook: a subclass may accept more pairs)

    def __init__(self, a_fmt: str, b_fmt: str, out_dtype: str, config: DecodeConfig) -> None:
        reason = self.why_not(a_fmt, b_fmt, out_dtype, config)
        if reason is not None:
            raise ValueError(f"{self.what}: {reason}")
        self.a_fmt, self.b_fmt, self.out_dtype, self.cfg = a_fmt, b_fmt, out_dtype, config
        self.compute = compute_dtype(a_fmt)
        self.family = k_family(a_fmt, b_fmt)
        self.exp = epilogue_exponent(a_fmt, b_fmt)
        self.ntok = config.max_m
        self.rows_w = config.rows  # rows of one warp
        self.bn = config.rows * config.wn  # rows of the CTA
        self.kstep = config.kwarps  # warps of a CTA splitting K over the same rows
        self.ksplit = config.ksplit  # CTAs of a cluster splitting K (ksplit)
        self.kstride = config.kwarps * config.ksplit  # chunk stride of one warp
        # ksplit: the warps a rank's share of the outputs (ntok x BN / C, a power of two >= 32) keeps busy
        self.finish_warps = min(config.warps, self.ntok * self.bn // config.ksplit // 32)
        self.red_floats = config.warps * self.ntok * self.rows_w
        self.units = 4 * config.ntiles  # ashare: (token tile, group) units of 4 registers per lane
        self.share_bytes = config.share_bytes

    def zero_acc(self, ops):
        return [ops.f32_zero() for _ in range(self.cfg.tiles * self.cfg.ntiles * 4)]

    # Hooks (moe.fused_moe's expert GEMMs override them; here they are the plain GEMM's addressing).
    def load_b(self, ops, rt: Runtime, n0, tt, h, g, k0):
        """(raw words, scale data) of the weight span lane group g loads for tile tt, half h: row
        n0 + 16 tt + 8 h + g, values k0 .. k0 + 31 (zeros past N)."""
        row, ok = self.weight_row(ops, rt, n0, tt, h, g)
        ldb = ops.i64(AD.row_bytes(self.b_fmt, rt.k))
        words = AD.load_span(ops, self.b_fmt, rt.b_base, ldb, row, k0, ok, _hint(self.cfg.wcache))
        return words, AD.load_span_scale(ops, self.b_fmt, rt.sfb_base, row, k0, rt.k, ok)

    def weight_row(self, ops, rt: Runtime, n0, tt, h, g):
        """(weight row, in range) of lane group g's row in tile tt, half h: n0 + 16 tt + 8 h + g, in
        range below N (hook: the gated epilogue pairs gate and up rows, `_kernel_decode_fused`)."""
        row = n0 + 16 * tt + 8 * h + g
        ok = row < rt.n
        if self.cfg.clamp:  # load row N - 1 instead (never stored): no predicate
            row, ok = ops.imin(row, rt.n - 1), ops.boolean(True)
        return row, ok

    def load_a(self, ops, rt: Runtime, tok, k0, ok):
        """(raw words, scale data) of token tok's span k0 .. k0 + 31 (zeros where not ok)."""
        lda = ops.i64(AD.row_bytes(self.a_fmt, rt.k))
        words = AD.load_span(ops, self.a_fmt, rt.a_base, lda, tok, k0, ok, _hint(self.cfg.acache))
        return words, AD.load_span_scale(ops, self.a_fmt, rt.sfa_base, tok, k0, rt.k, ok)

    def epilogue_scale(self, ops, rt: Runtime):
        """The fp32 the reduced sums are multiplied by: alpha * S0 * S1 * S2 * 2^(C_a + C_b)."""
        true = ops.boolean(True)
        scale = rt.alpha * ops.ldg_f32(rt.s0_base, true) * ops.ldg_f32(rt.s1_base, true)
        return scale * ops.ldg_f32(rt.s2_base, true) * ops.f32(float(2.0**self.exp))

    def weight_loads(self, ops, rt: Runtime, lane, n0, c):
        """The weight half of chunk c's loads, as issued: ([tile][half] -> (words, scale data), the
        fp8_block weight scale or None). Rows past N load zeros without touching memory."""
        g, t = lane >> 2, lane & 3
        k0 = c * CHUNK + t * 32
        block_scale = None
        if self.b_fmt == "fp8_block":  # one weight block scale per CTA and chunk (BN divides 128)
            sw_addr = rt.sfb_base + (ops.i64(n0 >> 7) * ops.i64(rt.k >> 7) + ops.i64(c)) * 4
            block_scale = ops.ldg_f32(sw_addr, n0 < rt.n)
        spans = [[self.load_b(ops, rt, n0, tt, h, g, k0) for h in range(2)] for tt in range(self.cfg.tiles)]
        return spans, block_scale

    def prefetch_loads(self, ops, rt: Runtime, lane, n0, c, chunks):
        """`weight_loads` of chunk c as a flat list of registers (what the prefetch pipeline carries
        through the K loop); c >= chunks loads nothing (its rows are moved past N, so every load is
        predicated off) and yields zeros that are never used."""
        past = ops.imin(ops.imax(c - chunks + 1, 0), 1)  # 1 when c is past the last chunk, else 0
        spans, block_scale = self.weight_loads(ops, rt, lane, n0 + past * rt.n, c)
        flat, layout = [], []
        for halves in spans:
            for words, sc in halves:
                flat += list(words)
                layout.append((len(words), sc is not None))
                if sc is not None:
                    flat.append(sc)
        if block_scale is not None:
            flat.append(block_scale)
        self._prefetch_layout = (tuple(layout), block_scale is not None)  # static: the same every chunk
        return flat

    def unflatten_loads(self, flat):
        """The inverse of `prefetch_loads`: ([tile][half] -> (words, scale data), block scale)."""
        layout, has_block = self._prefetch_layout
        flat, pos, spans = list(flat), 0, []
        for tt in range(self.cfg.tiles):
            halves = []
            for h in range(2):
                nwords, has_sc = layout[2 * tt + h]
                words = flat[pos : pos + nwords]
                pos += nwords
                sc = None
                if has_sc:
                    sc, pos = flat[pos], pos + 1
                halves.append((words, sc))
            spans.append(halves)
        return spans, (flat[pos] if has_block else None)

    def _token_span(self, ops, rt: Runtime, lane, c, nt, block_scale):
        """(words, factors) of token tile nt's activation span in chunk c (zeros for tokens >= M)."""
        g, t = lane >> 2, lane & 3
        k0 = c * CHUNK + t * 32
        tok = 8 * nt + g
        ok = tok < rt.m
        if self.cfg.clamp:  # load token M - 1 instead (never stored): no predicate
            tok, ok = ops.imin(tok, rt.m - 1), ops.boolean(True)
        words, sc = self.load_a(ops, rt, tok, k0, ok)
        if self.b_fmt == "fp8_block":
            if self.a_fmt == "fp8_block":
                sa_addr = rt.sfa_base + (ops.i64(tok) * ops.i64(rt.k >> 7) + ops.i64(c)) * 4
                sc = ops.ldg_f32(sa_addr, ok) * block_scale
            else:
                sc = block_scale
        return words, DQ.span_factors(ops, self.a_fmt, self.compute, sc)

    def passes(self) -> tuple[tuple[int, ...], ...]:
        """Token tiles per pass over a chunk: all of them up to 32 tokens (the M <= 16 kernels'
        order), one per pass at 64 tokens; the dequantized weight groups are computed once and reused
        by every pass. Chosen by ptxas 13.0 on sm_90a (bf16 x nvfp4): at 8 token tiles, passes of
        two or four spill at 8 warps x 2 tiles, passes of one fit in 206 registers; at 4 token tiles
        one pass needs the fewest registers (158 against 180 for passes of two)."""
        nt = self.cfg.ntiles
        step = nt if nt <= 4 else 1
        return tuple(tuple(range(p, p + step)) for p in range(0, nt, step))

    def prefetch_prologue(self, ops, rt: Runtime, lane, n0, first, chunks):
        """The pipeline's first stages: the weight loads of chunks first, first + kstride, ...,
        first + (prefetch - 1) kstride, flat and in that order."""
        stages = []
        for d in range(self.cfg.prefetch):
            stages += self.prefetch_loads(ops, rt, lane, n0, first + d * self.kstride, chunks)
        return stages

    def upfront_loads(self, ops, rt: Runtime, lane, n0, first, chunks):
        """DecodeConfig.upfront: the flat weight loads (`prefetch_loads`) of chunks first, first +
        kstride, ..., first + (upfront - 1) kstride, all issued here, before any math."""
        return [
            self.prefetch_loads(ops, rt, lane, n0, first + j * self.kstride, chunks) for j in range(self.cfg.upfront)
        ]

    def pipelined_chunk(self, ops, rt: Runtime, lane, n0, c, chunks, stages, acc):
        """One iteration of the prefetch pipeline: issue the weight loads of chunk c + prefetch *
        kstride, then chunk c's math on its loads (the oldest stage). Returns (stages, acc)."""
        size = len(stages) // self.cfg.prefetch
        ahead = self.prefetch_loads(ops, rt, lane, n0, c + self.cfg.prefetch * self.kstride, chunks)
        acc = self.chunk_with(ops, rt, lane, n0, c, self.unflatten_loads(stages[:size]), acc)
        return list(stages[size:]) + ahead, acc

    @cute.jit
    def k_loop(self, rt: Runtime, lane, nw, first, step, chunks, acc):
        """The warp's K loop over chunks first, first + step, ... < chunks on rows from nw, in the plain and the
        fused kernels (not ashare's): upfront loads, then plain chunks; plain chunks unrolled; kgroup adjacent
        chunks, then the rest; or the prefetch pipeline. Returns acc. (The loop bodies name `self` and
        `self.OPS`, the kernel's DeviceOps: the DSL's loop rewriting takes only numbers as locals.)"""
        kg = self.cfg.kgroup
        if cutlass.const_expr(self.cfg.upfront > 0):  # every held chunk's loads, then its math, then the rest
            held = self.upfront_loads(self.OPS, rt, lane, nw, first, chunks)
            for j in cutlass.range_constexpr(self.cfg.upfront):
                if first + j * step < chunks:
                    acc = self.chunk_with(self.OPS, rt, lane, nw, first + j * step, self.unflatten_loads(held[j]), acc)
            for c in cutlass.range(first + self.cfg.upfront * step, chunks, step, unroll=1):
                acc = self.chunk(self.OPS, rt, lane, nw, c, acc)
        elif cutlass.const_expr(self.cfg.prefetch == 0 and kg == 1):
            for c in cutlass.range(first, chunks, step, unroll=self.cfg.unroll):
                acc = self.chunk(self.OPS, rt, lane, nw, c, acc)
        elif cutlass.const_expr(kg > 1):  # groups of kgroup adjacent chunks, then the rest one by one
            for cg in cutlass.range(first, chunks // kg, step, unroll=self.cfg.unroll):
                for j in cutlass.range_constexpr(kg):
                    acc = self.chunk(self.OPS, rt, lane, nw, cg * kg + j, acc)
            for c in cutlass.range(chunks // kg * kg + first, chunks, step, unroll=1):
                acc = self.chunk(self.OPS, rt, lane, nw, c, acc)
        else:
            stages = self.prefetch_prologue(self.OPS, rt, lane, nw, first, chunks)
            for c in cutlass.range(first, chunks, step, unroll=self.cfg.unroll):
                stages, acc = self.pipelined_chunk(self.OPS, rt, lane, nw, c, chunks, stages, acc)
        return acc

    @cute.jit
    def ashare_loop(self, rt: Runtime, lane, nw, first, step, chunks, acc, group, kset, share_base):
        """ashare's K loop (the plain and the fused kernels): per chunk, the weight loads, this warp's share of the
        set's activation units stored to smem, the set's barrier (named barrier kset + 1, its wn warps), then the
        math on every unit. Returns acc."""
        for c in cutlass.range(first, chunks, step, unroll=self.cfg.unroll):
            parity = ((c - first) // step) & 1
            wl = self.weight_loads(self.OPS, rt, lane, nw, c)
            self.share_store(self.OPS, rt, lane, c, group, kset, parity, share_base)
            self.OPS.bar_sync(kset + 1, 32 * self.cfg.wn)
            shared = self.shared_groups(self.OPS, lane, kset, parity, share_base)
            acc = self.chunk_with(self.OPS, rt, lane, nw, c, wl, acc, shared)
        return acc

    def chunk(self, ops, rt: Runtime, lane, n0, c, acc):
        """Accumulate chunk c (K values 128c .. 128c + 127) into acc (tiles x ntiles x 4 fp32)."""
        return self.chunk_with(ops, rt, lane, n0, c, self.weight_loads(ops, rt, lane, n0, c), acc)

    def _share_addr(self, base, kset, parity, u, lane):
        return base + (((kset * 2 + parity) * self.units + u) * 32 + lane) * 16

    def share_store(self, ops, rt: Runtime, lane, c, group, kset, parity, base):
        """ashare, before the set's barrier: this warp group's activation units of chunk c, (token
        tile nt, group j) for u = 4 nt + j = group, group + wn, ... (group is a run-time value),
        loaded (one 16-byte access each), permuted to the weight's K order (the same permutation
        for every group j) and stored to the set's `parity` buffer."""
        g, t = lane >> 2, lane & 3
        k0 = c * CHUNK + t * 32
        lda = ops.i64(AD.row_bytes(self.a_fmt, rt.k))
        for i in range(self.units // self.cfg.wn):
            u = group + self.cfg.wn * i
            nt, j = u >> 2, u & 3
            tok = 8 * nt + g
            ok = tok < rt.m
            if self.cfg.clamp:
                tok, ok = ops.imin(tok, rt.m - 1), ops.boolean(True)
            addr = rt.a_base + ops.i64(tok) * lda + ops.i64(AD.span_offset(self.a_fmt, k0)) + 16 * j
            hint = _hint(self.cfg.acache)
            raw = ops.ldg_v4(addr, ok) if hint is None else ops.ldg_v4_hint(addr, ok, hint)
            regs = DQ.raw16_group(ops, self.family, raw)
            ops.sts_v4(self._share_addr(base, kset, parity, u, lane), *regs)

    def shared_groups(self, ops, lane, kset, parity, base):
        """ashare, after the barrier: {(nt, j): the unit's 4 registers} of every unit."""
        return {(u >> 2, u & 3): ops.lds_v4(self._share_addr(base, kset, parity, u, lane)) for u in range(self.units)}

    def probe_chunk(self, ops, rt: Runtime, lane, c, wloads, acc):
        """DecodeConfig.probe: chunk c's loads ("loads"; "wloads" the weights' only, "l1act" the
        activations' from chunk c & 1) or loads and dequantized registers ("nomma") XORed into acc[0]
        instead of the MMAs (garbage sums; a timing probe)."""
        spans, block_scale = wloads
        raw = self.cfg.probe in LOAD_PROBES
        if self.cfg.probe == "l1act":  # c & 1 through a mask of 1 the compiler cannot see (m > 0), so it cannot
            c = c & ((rt.m >> 31) | 1)  # merge the unrolled chunks' loads as it would for a literal 1
        x = ops.u32(0)
        for halves in spans:
            for words, sc in halves:
                if raw:
                    for w in [*words, sc]:
                        x = x ^ w
                    continue
                f = DQ.span_factors(ops, self.b_fmt, self.compute, sc)
                for j in range(4):
                    for r in DQ.span_group(ops, self.b_fmt, self.family, self.compute, words, f, j, self.cfg.fp4):
                        x = x ^ r
        for nt in range(0 if self.cfg.probe == "wloads" else self.cfg.ntiles):
            words, f = self._token_span(ops, rt, lane, c, nt, block_scale)
            regs = (
                words
                if raw
                else [
                    r for j in range(4) for r in DQ.span_group(ops, self.a_fmt, self.family, self.compute, words, f, j)
                ]
            )
            for r in regs:
                x = x ^ r
        acc = list(acc)
        acc[0] = acc[0] + ops.bits_f32(x)
        return acc

    def chunk_with(self, ops, rt: Runtime, lane, n0, c, wloads, acc, shared=None):
        """`chunk` on weight loads already issued (`weight_loads` of the same chunk). Every
        accumulator (tile, token tile) takes its 8 MMAs in the same (group, half) order whatever the
        passes, so the sums do not depend on the tiling of M. shared: ashare's {(nt, j): registers}
        (`shared_groups`) in place of this warp's own activation loads."""
        if self.cfg.probe:
            return self.probe_chunk(ops, rt, lane, c, wloads, acc)
        spans, block_scale = wloads
        wspans = [
            [(words, DQ.span_factors(ops, self.b_fmt, self.compute, sc)) for (words, sc) in halves] for halves in spans
        ]
        wgroups = {}

        def weight_group(j):
            if j not in wgroups:
                wgroups[j] = [
                    [
                        DQ.span_group(ops, self.b_fmt, self.family, self.compute, w, f, j, self.cfg.fp4)
                        for (w, f) in halves
                    ]
                    for halves in wspans
                ]
            return wgroups[j]

        acc = list(acc)
        for tiles_of_pass in self.passes():
            if shared is None:
                aspans = {nt: self._token_span(ops, rt, lane, c, nt, block_scale) for nt in tiles_of_pass}
            for j in range(4):
                wg = weight_group(j)
                if shared is None:
                    ag = {
                        nt: DQ.span_group(ops, self.a_fmt, self.family, self.compute, w, f, j)
                        for nt, (w, f) in aspans.items()
                    }
                else:
                    ag = {nt: shared[(nt, j)] for nt in tiles_of_pass}
                for h in range(2):
                    for tt in range(self.cfg.tiles):
                        lo, hi = wg[tt]
                        a_frag = (lo[2 * h], hi[2 * h], lo[2 * h + 1], hi[2 * h + 1])
                        for nt in tiles_of_pass:
                            b_frag = (ag[nt][2 * h], ag[nt][2 * h + 1])
                            i = (tt * self.cfg.ntiles + nt) * 4
                            acc[i : i + 4] = ops.mma(self.compute, a_frag, b_frag, acc[i : i + 4])
        return acc

    def _red_addr(self, red_base, w, tok, nl):
        return red_base + ((w * self.ntok + tok) * self.rows_w + nl) * 4

    def reduce_stage(self, ops, red_base, warp, lane, acc):
        """Each warp parks its partial sums in shared memory as [warp][token][row]."""
        g, t = lane >> 2, lane & 3
        for tt in range(self.cfg.tiles):
            for nt in range(self.cfg.ntiles):
                for i in range(4):
                    nl = 16 * tt + g + 8 * (i >> 1)
                    tok = 8 * nt + 2 * t + (i & 1)
                    ops.sts_f32(self._red_addr(red_base, warp, tok, nl), acc[(tt * self.cfg.ntiles + nt) * 4 + i])

    def finish(self, ops, rt: Runtime, red_base, tid, n0, rank=0):
        """Sum the warps' partials, scale, round and store rows [n0, n0 + BN) of tokens < M. ksplit C > 1:
        cluster rank `rank` stores outputs [rank, rank + 1) x total / C of the block, summing every rank's
        partials (DSMEM) in the order of a plain kernel with kwarps x C warps (rank-major)."""
        scale = self.epilogue_scale(ops, rt)
        threads = self.cfg.warps * 32
        total = self.ntok * self.bn
        per = total // self.ksplit  # outputs a rank stores (total is a multiple of 128)
        log_bn = self.bn.bit_length() - 1
        for r in range((per + threads - 1) // threads):
            j = tid + r * threads
            live = j < per
            o = j if self.ksplit == 1 else j + rank * per
            tok, nl = o >> log_bn, o & (self.bn - 1)
            s = ops.f32_zero()
            # j >= per only when `per` is not a multiple of the block: clamp the address
            idx = ops.imin(j, per - 1)
            if self.ksplit > 1:
                idx = idx + rank * per
            row = idx & (self.bn - 1)
            group = row >> (self.rows_w.bit_length() - 1)  # the warp group (wn) that owns the row
            for q in range(self.ksplit):
                for i in range(self.kstep):
                    w = group * self.kstep + i
                    addr = self._red_addr(red_base, w, idx >> log_bn, row & (self.rows_w - 1))
                    s = s + (ops.lds_f32(addr) if self.ksplit == 1 else ops.lds_f32_peer(addr, q))
            s = s * scale
            n = n0 + nl
            ok = live & (tok < rt.m) & (n < rt.n)
            self.store(ops, rt, tok, n, s, ok)

    def store(self, ops, rt, m, n, value, ok):
        elem = ops.i64(m) * ops.i64(rt.n) + ops.i64(n)
        if self.out_dtype == "float32":
            ops.stg_f32(rt.c_base + elem * 4, value, ok)
        else:
            ops.stg_u16(rt.c_base + elem * 2, ops.f32_to_half2(self.out_dtype, value, value), ok)


# ---- the CuTe kernel ----------------------------------------------------------------------------
_CUTE = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16, "float32": cutlass.Float32}


class DecodeGemm:
    def __init__(self, logic: DecodeLogic) -> None:
        self.logic = logic
        self.threads = logic.cfg.warps * 32

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
        grid_n = (mB.shape[0] + self.logic.bn - 1) // self.logic.bn
        ks = self.logic.ksplit  # ksplit: C CTAs a row block, one cluster along x
        cluster = {"cluster": [ks, 1, 1]} if ks > 1 else {}
        pdl = {"use_pdl": True} if self.logic.cfg.pdl_wait else {}  # a programmatic dependent
        self.kernel(mA, mSFA, mB, mSFB, mC, mS0, mS1, mS2, alpha).launch(
            grid=[grid_n * ks, 1, 1],
            block=[self.threads, 1, 1],
            stream=stream,
            **launch_bounds(self.logic.cfg, self.threads),
            **cluster,
            **pdl,
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
        ops = DEVICE
        L = self.logic
        tid, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp, lane = tid >> 5, tid & 31
        rank = 0
        n0 = bidx * L.bn
        if cutlass.const_expr(L.ksplit > 1):  # cluster rank r of row block bidx // C (cluster dims (C, 1, 1))
            rank = bidx % L.ksplit
            n0 = (bidx // L.ksplit) * L.bn
        k = mB.shape[1] * 8 // FORMAT[L.b_fmt].value_bits
        rt = Runtime.of((mA, mSFA, mB, mSFB, mC, mS0, mS1, mS2), k, alpha)
        if cutlass.const_expr(L.cfg.pdl_wait):  # wait for the previous kernel before the first global read
            ops.gdc_enter()
        smem = cutlass.memory.SmemAllocator()
        red = smem.allocate_tensor(Float32, cute.make_layout(L.red_floats), 16)
        red_base = red.iterator.toint()
        share_base = red_base
        if cutlass.const_expr(L.cfg.ashare):
            share = smem.allocate_tensor(cutlass.Uint32, cute.make_layout(L.share_bytes // 4), 16)
            share_base = share.iterator.toint()

        acc = L.zero_acc(ops)
        chunks = k // CHUNK
        # (the loop bodies name self.logic and DEVICE: the DSL's loop rewriting takes only numbers)
        kset = warp % L.kstep  # the warps of the CTA with the same chunks (one a warp group)
        first, step = kset, L.kstride  # this warp's chunks: first, first + step, ...
        if cutlass.const_expr(L.ksplit > 1):
            first = rank * L.kstep + kset
        nw = n0 + (warp // L.kstep) * L.rows_w  # its warp group's rows (wn > 1)
        if cutlass.const_expr(L.cfg.ashare):  # the set `kset` shares activations through smem
            acc = L.ashare_loop(rt, lane, nw, first, step, chunks, acc, warp // L.kstep, kset, share_base)
        else:
            acc = L.k_loop(rt, lane, nw, first, step, chunks, acc)
        L.reduce_stage(ops, red_base, warp, lane, acc)
        if cutlass.const_expr(L.ksplit > 1):  # every rank's partials visible cluster-wide, read, then kept alive
            ops.cluster_sync()
            if warp < L.finish_warps:  # warps past a rank's share of the outputs issue no remote loads
                self.logic.finish(DEVICE, rt, red_base, tid, n0, rank)  # (self.logic: the DSL's `if` takes numbers)
            ops.cluster_sync()
        else:
            ops.barrier()
            L.finish(ops, rt, red_base, tid, n0)


def fake_args(a_fmt: str, b_fmt: str, out_dtype: str):
    """Fake tensors of the launch contract: A [M, KA], SFA [SA], B [N, KB], SFB [SB], C [M, N] (M, N,
    K symbolic), S0, S1, S2 fp32 [1]; bytes travel as uint8, fp32 scales as float32."""
    m, n = cute.sym_int(), cute.sym_int()
    a_dt = _CUTE[a_fmt] if FORMAT[a_fmt].family == "raw16" else cutlass.Uint8
    a = make_fake_compact_tensor(a_dt, (m, cute.sym_int()), stride_order=(1, 0), assumed_align=16)
    b = make_fake_compact_tensor(cutlass.Uint8, (n, cute.sym_int()), stride_order=(1, 0), assumed_align=16)

    def sf(fmt):
        dt = cutlass.Float32 if FORMAT[fmt].scale in ("fp32_block", "fp32_scalar") else cutlass.Uint8
        return make_fake_compact_tensor(dt, (cute.sym_int(),), assumed_align=4 if dt is cutlass.Float32 else 2)

    c = make_fake_compact_tensor(_CUTE[out_dtype], (m, n), stride_order=(1, 0), assumed_align=16)
    s0 = make_fake_compact_tensor(cutlass.Float32, (1,), assumed_align=4)
    s1 = make_fake_compact_tensor(cutlass.Float32, (1,), assumed_align=4)
    s2 = make_fake_compact_tensor(cutlass.Float32, (1,), assumed_align=4)
    return a, sf(a_fmt), b, sf(b_fmt), c, s0, s1, s2


@kernel("gemm.blockscaled.decode", sources=_SOURCES)
def compile_decode(a_fmt: str, b_fmt: str, out_dtype: str, config: DecodeConfig, arch: str):
    """tvm-ffi launcher `fn(A, SFA, B, SFB, C, S0, S1, S2, alpha)` on torch's current stream."""
    logic = DecodeLogic(a_fmt, b_fmt, out_dtype, config)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(DecodeGemm(logic), *fake_args(a_fmt, b_fmt, out_dtype), Float32(1.0), stream, arch=arch)
