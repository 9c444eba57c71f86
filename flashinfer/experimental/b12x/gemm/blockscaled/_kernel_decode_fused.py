"""Decode GEMM with a fused epilogue and programmatic dependent launch (issues #10 and #6).

The decode kernel (`_kernel_decode`: swap-AB mma.sync, split-K over warps, shared-memory reduction)
with three additions, each a field of `FusedConfig` (all part of the compile key):

epilogue (what the reduced fp32 sum s = alpha * S0 * S1 * S2 * A B^T becomes before its one rounding):
- "none":     C[m, n] = s[m, n]                                   (the plain kernel's output)
- "silu_mul": C[m, j] = silu(s[m, j]) * s[m, I + j], j < I        (B is a [2I, K] gate_up weight: gate
  rows 0..I-1, up rows I..2I-1; C is [M, I]). A CTA owns I-columns [n0, n0 + BN/2): its warps load
  tiles / 2 16-row tiles of gate rows and as many of the matching up rows (the `weight_row` hook,
  the pairing moe.fused_moe's FC1 makes), so both sums of an output meet in the CTA's reduction.
  silu(g) = g / (1 + 2^(-g log2 e)) with ex2.approx (2^-22 relative) and an IEEE division.
- "residual": C[m, n] = s[m, n] + R[m, n]                         (R [M, N] in C's 16-bit dtype)
- "rope_append": B is a qkv weight [(Hq + 2 Hkv) D, K] (q heads, k heads, v heads; `FusedConfig.rope`,
  a `_epilogue.RopeLayout`, holds Hq, Hkv, D and the page size). Pair p < (Hq + 2 Hkv) D / 2 is
  (head, j) = (p // (D/2), p % (D/2)), rows head D + j and head D + D/2 + j; a CTA owns pairs
  [p0, p0 + BN/2): local rows r < BN/2 load the first rows of pairs p0 + r, rows r >= BN/2 the second
  rows of pairs p0 + r - BN/2 (any tiles: BN/2 is a multiple of 8, so which half a lane group's row
  is in is known at trace time), so both sums (x, y) of a pair meet in the CTA's reduction. q and k
  heads are rotated in fp32, x c - y s and y c + x s with c, s = cos / sin[t, j] (NeoX rotate-half),
  v heads pass; each value is rounded once: q heads to C = q_out [M, Hq, D], k / v heads to row
  slot_page[t] * page_size + slot_off[t] of k_cache / v_cache [pages, page_size, Hkv, D] (C's dtype;
  slots int64). The launcher takes COS, SIN, KC, VC, SP, SO after G (`compile_decode_fused`).
Either saves a launch and one bf16 round trip of the [M, 2I] / [M, N] intermediate (rope_append: the
rope + append launch and the qkv round trip).

norm (16-bit activations): A is first RMS-normalized, s = alpha * rmsnorm(A) B^T with rmsnorm(x) =
x * rsqrt(mean_k(x^2) + eps) * g (g [K] in A's dtype, eps a launch argument), so the RMSNorm launch
before qkv (and, with the residual epilogue on o_proj writing x1, the residual + RMSNorm before
gate_up) goes away. Every CTA reads whole activation rows anyway (its warps split K), so each lane
also sums the squares of its token's span (fp32), the sums meet in the reduction beside the
products, and the per-token 1 / rms (rsqrt.approx) multiplies the reduced sums; g multiplies the
activation words before the MMAs (bf16(x * g), one rounding, where the unfused path rounds x * inv *
g once).

pdl (programmatic dependent launch, sm_90+):
- "off":      a plain launch (the `_kernel_decode` kernel's behaviour).
- "wait":     launched with the programmatic-stream-serialization attribute: the CTAs may become
  resident while the previous kernel of the stream still runs; each waits (griddepcontrol.wait: the
  previous grid complete, its writes visible) before its first read of anything but constants, then
  lets the next PDL kernel launch (griddepcontrol.launch_dependents).
- "prefetch": "wait" plus, before the wait, an L2 prefetch (`prefetch.global.L2`, one 128-byte line
  per instruction) of every line of the CTA's weight rows and of their swizzled scales: the weights
  never depend on the previous kernel, so their DRAM reads overlap its tail and the K loop's weight
  loads hit L2 (FusedConfig.span "step": only the K range of the warps' first step). Activations,
  alpha tensors and outputs are touched only after the wait.
Under CUDA graph capture the launch attribute becomes a programmatic edge; a kernel before it that
never triggers early still gives the overlap of this kernel's launch with its tail.

Bytes and FLOPs: the decode kernel's, plus R's M x N x 2 bytes (residual), g's K x 2 bytes per CTA
from L2 (norm), and a store of M x I instead of M x 2I outputs (silu_mul). The gated row pairing is
the same as moe.fused_moe's FC1 (`ExpertLogic.load_b`), which could move onto the `weight_row` hook.

Constraints on the DecodeConfig (why_not): kgroup = 1, ksplit = 1, no probe, no pdl_wait (the K loop is the
plain one, the weight-prefetch pipeline, or ashare's shared activations, which norm and rope_append do not take);
wn > 1 warp groups (session 38, GPU-tested in
session 39; `launch.fused_config` gives them to the residual epilogue, timed -7% in session 40) each own BN / wn rows: gcols output columns or rope pairs, their gate /
up (first / second) rows within the group, K split over the group's kstep warps, the norm's sums of squares
from group 0; silu_mul needs an even tiles (gate / up halves) and
a swizzled or raw weight scale (not fp8_block: its 128-row block scale is read per CTA); residual
needs a 16-bit output; norm 16-bit activations (not against fp8_block weights); rope_append a
16-bit output, a RopeLayout and no fp8_block weight (like silu_mul, it pairs rows of two 16-row sets).
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.cutlass_dsl import T, dsl_user_op

from ..._lib.compile import cute_compile, kernel
from ..._lib.ptx import DeviceOps, _asm, _iv
from .._shared import addressing as AD
from .._shared.formats import FORMAT
from . import _kernel_decode as KD
from ._epilogue import RopeLayout, rope_reason

EPILOGUES = ("none", "silu_mul", "residual", "rope_append")
PDL_MODES = ("off", "wait", "prefetch")
SPANS = ("rows", "step")  # FusedConfig.span: what pdl "prefetch" puts in L2 before the wait
LINE = 128  # bytes per L2 prefetch (one cache line)
_LOG2E = 1.4426950408889634
_SOURCES = (*KD._SOURCES, "flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode")


@dataclass(frozen=True)
class FusedConfig:
    """decode: the DecodeConfig of the K loop; epilogue: one of EPILOGUES; pdl: one of PDL_MODES; norm:
    RMS-normalize A first; rope: the RopeLayout of epilogue "rope_append" (None otherwise; module
    docstring); early (rope_append): load the epilogue's cos, sin and slots right after the wait,
    before the K loop, so their memory latency hides behind it instead of following the reduction
    (a few registers per finish pass; a sweep variant, off by default); span (pdl "prefetch"): what
    the L2 prefetch before the wait covers, "rows" the CTA's whole weight rows and their scales, "step"
    only the K range the warps' first step reads (`FusedLogic.step_k`): at a weight larger than the
    L2 the whole-row prefetch of every resident CTA evicts its own lines before the K loop reads them
    (session 24: 28672 x 4096 W4A16 M = 1 26.6 -> 32.2 us), where the first step's lines are the ones
    whose DRAM round trip the overlap with the kernel before can hide."""

    decode: KD.DecodeConfig
    epilogue: str = "none"
    pdl: str = "off"
    norm: bool = False
    rope: RopeLayout | None = None
    early: bool = False
    span: str = "rows"

    @property
    def max_m(self) -> int:
        return self.decode.max_m


def span_reason(span: str, pdl: str) -> str | None:
    """None when FusedConfig.span `span` goes with launch mode `pdl`, else the reason."""
    if span not in SPANS or (span != "rows" and pdl != "prefetch"):
        return f"span must be one of {SPANS}, and 'step' only with pdl 'prefetch', got {span!r} (pdl {pdl!r})"
    return None


def why_not(a_fmt: str, b_fmt: str, out_dtype: str, config: FusedConfig) -> str | None:
    """None when the fused kernel implements this combination, else the reason."""
    if not isinstance(config, FusedConfig):
        return f"config must be a FusedConfig, got {type(config).__name__}"
    if config.epilogue not in EPILOGUES:
        return f"epilogue must be one of {EPILOGUES}, got {config.epilogue!r}"
    if config.pdl not in PDL_MODES:
        return f"pdl must be one of {PDL_MODES}, got {config.pdl!r}"
    d = config.decode
    if not isinstance(d, KD.DecodeConfig):
        return f"config.decode must be a DecodeConfig, got {type(d).__name__}"
    if d.kgroup != 1 or d.probe or d.ksplit != 1 or d.pdl_wait:
        return (
            f"the fused decode kernel runs kgroup 1, ksplit 1, no probe and no pdl_wait (its own "
            f"FusedConfig.pdl launches it as a programmatic dependent), got {d}"
        )
    if d.ashare and (config.norm or config.epilogue == "rope_append"):
        return (
            f"ashare (a chunk's raw activations shared through smem) runs without norm and rope_append, got "
            f"norm={config.norm!r}, epilogue {config.epilogue!r}"
        )
    if config.epilogue == "silu_mul":
        if d.tiles % 2:
            return f"epilogue 'silu_mul' needs an even tiles (gate and up halves), got tiles={d.tiles}"
        if b_fmt == "fp8_block":
            return "epilogue 'silu_mul' takes no fp8_block weight (its 128-row block scale is read per CTA)"
    if config.epilogue == "residual" and out_dtype not in ("bfloat16", "float16"):
        return f"epilogue 'residual' needs a bfloat16 / float16 output, got {out_dtype}"
    if config.epilogue == "rope_append":
        reason = rope_reason(config.rope)
        if reason is not None:
            return f"epilogue 'rope_append': rope {reason}"
        if out_dtype not in ("bfloat16", "float16"):
            return f"epilogue 'rope_append' needs a bfloat16 / float16 output (the caches' dtype), got {out_dtype}"
        if b_fmt == "fp8_block":
            return "epilogue 'rope_append' takes no fp8_block weight (its 128-row block scale is read per CTA)"
    elif config.rope is not None:
        return f"rope is only read with epilogue 'rope_append', got epilogue {config.epilogue!r}"
    if not isinstance(config.early, bool) or (config.early and config.epilogue != "rope_append"):
        return f"early (the rope tables before the K loop) is a bool for epilogue 'rope_append', got {config.early!r}"
    reason = span_reason(config.span, config.pdl)
    if reason is not None:
        return reason
    if not isinstance(config.norm, bool):
        return f"norm must be a bool, got {config.norm!r}"
    if config.norm and (a_fmt not in ("bfloat16", "float16") or b_fmt == "fp8_block"):
        return f"norm normalizes 16-bit activations (not against fp8_block weights), got {a_fmt} x {b_fmt}"
    return KD.why_not(a_fmt, b_fmt, out_dtype, d)


def can_implement(a_fmt: str, b_fmt: str, out_dtype: str, config: FusedConfig) -> bool:
    return why_not(a_fmt, b_fmt, out_dtype, config) is None


# ---- ops: gemm's PTX backend plus exp2, an L2 prefetch and the grid dependency controls -----------
@dsl_user_op
def _ex2(x, *, loc=None, ip=None):
    return Float32(_asm(T.f32(), [_iv(x, Float32, loc, ip)], "ex2.approx.f32 $0, $1;", "=f,f", loc=loc, ip=ip))


@dsl_user_op
def _rsqrt(x, *, loc=None, ip=None):
    return Float32(_asm(T.f32(), [_iv(x, Float32, loc, ip)], "rsqrt.approx.f32 $0, $1;", "=f,f", loc=loc, ip=ip))


@dsl_user_op
def _prefetch_l2(addr, pred, *, loc=None, ip=None):
    _asm(
        None,
        [_iv(addr, cutlass.Int64, loc, ip), _iv(pred, cutlass.Int32, loc, ip)],
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $1, 0;\n\t@p prefetch.global.L2 [$0];\n\t}",
        "l,r",
        effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def _ldg_i64(addr, pred, *, loc=None, ip=None):
    res = _asm(
        T.i64(),
        [_iv(addr, cutlass.Int64, loc, ip), _iv(pred, cutlass.Int32, loc, ip)],
        "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $2, 0;\n\tmov.b64 $0, 0;\n\t@p ld.global.b64 $0, [$1];\n\t}",
        "=l,l,r",
        loc=loc,
        ip=ip,
    )
    return cutlass.Int64(res)


class FusedOps(DeviceOps):
    """`ptx.DEVICE` plus ex2 (2^x, ex2.approx), rsqrt (rsqrt.approx), prefetch_l2(addr, pred), an
    int64 load (ldg_i64(addr, pred), 0 where not pred); the griddepcontrol pair is `DeviceOps`' (the CPU
    emulator implements them exactly and as no-ops)."""

    ex2 = staticmethod(_ex2)
    rsqrt = staticmethod(_rsqrt)
    prefetch_l2 = staticmethod(_prefetch_l2)
    ldg_i64 = staticmethod(_ldg_i64)


DEVICE = FusedOps()


# ---- per-thread logic (backend-agnostic: runs on the device and in the CPU emulator) -------------
@dataclass
class FusedRuntime(KD.Runtime):
    """KD.Runtime plus the residual's base address (C's own when there is no residual), the norm
    weight's (A's when there is no norm) and eps; n is C's column count (I for silu_mul, whose weight
    has 2I rows; the pair count (Hq + 2 Hkv) D / 2 for rope_append). rope_append: the base addresses
    of cos, sin, k_cache, v_cache, slot_page, slot_off."""

    r_base: object = 0
    g_base: object = 0
    eps: object = 0.0
    cos_base: object = 0
    sin_base: object = 0
    kc_base: object = 0
    vc_base: object = 0
    sp_base: object = 0
    so_base: object = 0


class FusedLogic(KD.DecodeLogic):
    """DecodeLogic with the row pairings (silu_mul's gate / up, rope_append's j / j + D/2), the fused
    epilogues and the L2 prefetch."""

    what = "gemm.blockscaled fused decode kernel"
    OPS = DEVICE  # `k_loop`'s ops: FusedOps

    def __init__(self, a_fmt: str, b_fmt: str, out_dtype: str, config: FusedConfig) -> None:
        reason = why_not(a_fmt, b_fmt, out_dtype, config)
        if reason is not None:
            raise ValueError(f"{self.what}: {reason}")
        super().__init__(a_fmt, b_fmt, out_dtype, config.decode)
        self.fusion = config
        self.gated = config.epilogue == "silu_mul"
        self.rope = config.rope if config.epilogue == "rope_append" else None
        self.paired = self.gated or self.rope is not None  # two weight rows per output (column / pair)
        self.cols = self.bn // 2 if self.paired else self.bn  # outputs (columns, rope pairs) of a CTA
        self.gcols = self.cols // config.decode.wn  # ... of one warp group (wn): group i owns [i gcols, (i+1) gcols)
        self.norm = config.norm
        self.red_mma = self.red_floats  # the products' partials; norm: then [warp][token] sums of squares
        if self.norm:
            self.red_floats += config.decode.warps * self.ntok

    # -- norm: sums of squares beside the accumulators, g on the activation words --
    def zero_acc(self, ops):
        return super().zero_acc(ops) + ([ops.f32_zero() for _ in range(self.cfg.ntiles)] if self.norm else [])

    def _token_span(self, ops, rt, lane, c, nt, block_scale):
        """norm: the span's words times g (bf16x2 / f16x2 products), its sum of squares parked for
        `chunk_with` (a trace-time hand-over inside one chunk)."""
        words, f = super()._token_span(ops, rt, lane, c, nt, block_scale)
        if not self.norm:
            return words, f
        k0 = c * KD.CHUNK + (lane & 3) * 32
        gw = AD.load_span(ops, self.a_fmt, rt.g_base, ops.i64(0), 0, k0, ops.boolean(True))
        ssq = ops.f32_zero()
        for w in words:
            lo, hi = ops.half2_to_f32(self.a_fmt, w)
            ssq = ssq + lo * lo + hi * hi
        self._ssq[nt] = ssq
        return [ops.hmul2(self.compute, w, gv) for w, gv in zip(words, gw)], f

    def chunk_with(self, ops, rt, lane, n0, c, wloads, acc, shared=None):
        if not self.norm:
            return super().chunk_with(ops, rt, lane, n0, c, wloads, acc, shared)
        nm, self._ssq = len(acc) - self.cfg.ntiles, {}
        out = super().chunk_with(ops, rt, lane, n0, c, wloads, acc[:nm], shared)
        return list(out) + [acc[nm + nt] + self._ssq[nt] for nt in range(self.cfg.ntiles)]

    def _ssq_addr(self, red_base, w, tok):
        return red_base + (self.red_mma + w * self.ntok + tok) * 4

    def reduce_stage(self, ops, red_base, warp, lane, acc):
        if not self.norm:
            return super().reduce_stage(ops, red_base, warp, lane, acc)
        nm = len(acc) - self.cfg.ntiles
        super().reduce_stage(ops, red_base, warp, lane, acc[:nm])
        for nt in range(self.cfg.ntiles):  # lanes 4g .. 4g + 3 hold token 8 nt + g's spans
            s = acc[nm + nt]
            s = s + ops.shfl_xor(s, 1)
            s = s + ops.shfl_xor(s, 2)
            ops.sts_f32(self._ssq_addr(red_base, warp, 8 * nt + (lane >> 2)), s)

    def inv_rms(self, ops, rt, red_base, tok):
        """1 / sqrt(mean(x^2) + eps) of token tok (every warp's sums of squares)."""
        s = ops.f32_zero()
        for w in range(self.kstep):  # warp group 0's warps: every K chunk once
            s = s + ops.lds_f32(self._ssq_addr(red_base, w, tok))
        return ops.rsqrt(ops.div_rn(s, ops.f32(rt.k)) + rt.eps)

    def pair_row(self, ops, p, second):
        """rope_append: the weight row of pair p's first (second = 0) or second (1) value: head D + j
        (+ D/2), (head, j) = (p // (D/2), p % (D/2)); second may be a run-time value."""
        half = self.rope.head_dim // 2
        return (p >> (half.bit_length() - 1)) * self.rope.head_dim + (p & (half - 1)) + second * half

    def weight_row(self, ops, rt, n0, tt, h, g):
        """silu_mul: tiles tt < tiles / 2 load gate rows j = n0 + 16 tt + 8 h + g, the others the up
        rows I + j of the same j (n0 is the CTA's first output column); rope_append: local row r = 16
        tt + 8 h + g loads row `pair_row` of pair n0 + r (r < BN/2) or n0 + r - BN/2 (the second
        value); else the plain rows."""
        if self.rope is not None:
            local = 16 * tt + 8 * h  # + g < 8: which half is known here (BN/2 is a multiple of 8)
            second = 1 if local >= self.gcols else 0  # (n0: the warp group's first pair)
            p = n0 + (local - second * self.gcols) + g
            ok = p < rt.n
            if self.cfg.clamp:  # load pair P - 1's rows instead (never stored): no predicate
                p, ok = ops.imin(p, rt.n - 1), ops.boolean(True)
            return self.pair_row(ops, p, second), ok
        if not self.gated:
            return super().weight_row(ops, rt, n0, tt, h, g)
        half = self.cfg.tiles // 2
        up = tt >= half
        j = n0 + 16 * (tt - half if up else tt) + 8 * h + g
        ok = j < rt.n
        if self.cfg.clamp:  # load column N - 1's rows instead (never stored): no predicate
            j, ok = ops.imin(j, rt.n - 1), ops.boolean(True)
        return (rt.n + j if up else j), ok

    # -- the L2 prefetch of "prefetch" (dynamic item indices: the kernel loops over them) --
    def _local_row(self, ops, rt, n0, r):
        """(weight row, in range) of the CTA's local row r (0 <= r < BN, a run-time value): the same
        rows `weight_row` hands the warps."""
        if not self.paired:
            return n0 + r, (n0 + r) < rt.n
        up = r >> (self.cols.bit_length() - 1)  # 1 for the up half (rope: the pair's second row)
        j = n0 + r - up * self.cols
        if self.rope is not None:
            return self.pair_row(ops, j, up), j < rt.n
        return j + up * rt.n, j < rt.n

    def value_lines(self, k):
        """128-byte lines of one weight row (K * bits / 8 is a multiple of 64: K % 128 == 0)."""
        return (AD.row_bytes(self.b_fmt, k) + LINE - 1) // LINE

    @property
    def step_k(self) -> int:
        """K values of a row the warps' first step reads: chunks 0 .. warps * depth - 1, depth the
        chunks a warp has loaded before its first math (unroll, upfront, or the pipeline's prefetch + 1)."""
        c = self.cfg
        return KD.CHUNK * self.kstep * max(c.unroll, c.upfront, c.prefetch + 1)

    def prefetch_k(self, ops, k):
        """K values of each row pdl "prefetch" puts in L2 before the wait: all k (span "rows") or the
        first step's (span "step", at most k)."""
        return k if self.fusion.span == "rows" else ops.imin(k, self.step_k)

    def prefetch_value_line(self, ops, rt, n0, i, live):
        """Item i < BN * value_lines (live: i is one; the kernel's loop guarantees it): line i // BN of
        local row i % BN."""
        r = i & (self.bn - 1)
        row, ok = self._local_row(ops, rt, n0, r)
        ldb = ops.i64(AD.row_bytes(self.b_fmt, rt.k))
        addr = rt.b_base + ops.i64(row) * ldb + ops.i64((i >> (self.bn.bit_length() - 1)) * LINE)
        ops.prefetch_l2(addr, ok & live)

    def scale_atoms(self, k):
        """Swizzled 128x4 atoms along one row's scales (0 for formats without swizzled scales)."""
        spec = FORMAT[self.b_fmt]
        return (k // spec.sf_vec) >> 2 if spec.swizzled else 0

    def prefetch_scale_line(self, ops, rt, n0, i, live):
        """Item i < BN / 8 * scale_atoms: atom i // (BN / 8) of the 8-row group i % (BN / 8), whose 8
        rows' 16-byte units form one aligned 128-byte line of the atom (FORMATS.md)."""
        groups = self.bn // 8
        r = (i & (groups - 1)) * 8
        row, ok = self._local_row(ops, rt, n0, r)
        cols4 = rt.k // FORMAT[self.b_fmt].sf_vec
        atom = i >> (groups.bit_length() - 1)
        ops.prefetch_l2(rt.sfb_base + AD.swizzled_offset(ops, row, atom * 4, cols4), ok & live)

    # -- the epilogues --
    def _rope_head(self, p):
        """(head, j, rotated, is_q, is_v) of pair p."""
        lay = self.rope
        half = lay.head_dim // 2
        head, j = p >> (half.bit_length() - 1), p & (half - 1)
        return head, j, head < lay.q_heads + lay.kv_heads, head < lay.q_heads, head >= lay.q_heads + lay.kv_heads

    def rope_tables(self, ops, rt, tok, p, ok):
        """(cos, sin, cache row) of pair p of token tok: cos / sin[tok, j] (0 for v heads or where not
        ok), row slot_page[tok] * page_size + slot_off[tok] (int64; 0 for q heads or where not ok)."""
        half = self.rope.head_dim // 2
        head, j, rotated, is_q, _ = self._rope_head(p)
        tab = (ops.i64(tok) * ops.i64(half) + ops.i64(j)) * 4
        cs = ops.ldg_f32(rt.cos_base + tab, ok & rotated)
        sn = ops.ldg_f32(rt.sin_base + tab, ok & rotated)
        is_kv = ok & (head >= self.rope.q_heads)
        slot = ops.ldg_i64(rt.sp_base + ops.i64(tok) * 8, is_kv) * ops.i64(self.rope.page_size)
        slot = slot + ops.ldg_i64(rt.so_base + ops.i64(tok) * 8, is_kv)
        return cs, sn, slot

    def finish_items(self, ops, tid):
        """Per finish pass r: (live, tok, c) of thread tid's output (column, pair) c of token tok."""
        threads = self.cfg.warps * 32
        total = self.ntok * self.cols
        log_cols = self.cols.bit_length() - 1
        items = []
        for r in range((total + threads - 1) // threads):
            live = (tid + r * threads) < total
            o = ops.imin(tid + r * threads, total - 1)  # o >= total only when threads do not divide it
            items.append((live, o >> log_cols, o & (self.cols - 1)))
        return items

    def rope_preload(self, ops, rt, tid, n0):
        """FusedConfig.early: `rope_tables` of every finish pass, loaded before the K loop."""
        return [
            self.rope_tables(ops, rt, tok, n0 + c, live & (tok < rt.m) & (n0 + c < rt.n))
            for live, tok, c in self.finish_items(ops, tid)
        ]

    def rope_store(self, ops, rt, tok, p, x, y, ok, tables=None):
        """rope_append: pair p = (head, j) of token tok with sums x (value j) and y (value j + D/2):
        q / k heads rotated (x c - y s, y c + x s; c, s = cos / sin[tok, j]), v heads as they are,
        rounded once and stored to q_out or to the token's cache row (where ok). tables: the pair's
        `rope_tables`, loaded earlier (FusedConfig.early), or None to load them here."""
        lay, out = self.rope, self.out_dtype
        d, half = lay.head_dim, lay.head_dim // 2
        head, j, rotated, is_q, is_v = self._rope_head(p)
        cs, sn, slot = self.rope_tables(ops, rt, tok, p, ok) if tables is None else tables
        lo = ops.select_f32(rotated, x * cs - y * sn, x)
        hi = ops.select_f32(rotated, y * cs + x * sn, y)
        q_elem = (ops.i64(tok) * ops.i64(lay.q_heads) + ops.i64(head)) * d + ops.i64(j)
        k_elem = (slot * lay.kv_heads + ops.i64(head - lay.q_heads)) * d + ops.i64(j)
        v_elem = (slot * lay.kv_heads + ops.i64(head - lay.q_heads - lay.kv_heads)) * d + ops.i64(j)
        lo16, hi16 = ops.f32_to_half2(out, lo, lo), ops.f32_to_half2(out, hi, hi)
        for base, elem, pred in (
            (rt.c_base, q_elem, ok & is_q),
            (rt.kc_base, k_elem, ok & rotated & (head >= lay.q_heads)),
            (rt.vc_base, v_elem, ok & is_v),
        ):
            ops.stg_u16(base + elem * 2, lo16, pred)
            ops.stg_u16(base + (elem + half) * 2, hi16, pred)

    def silu(self, ops, x):
        return x * ops.div_rn(ops.f32(1.0), ops.f32(1.0) + ops.ex2(x * ops.f32(-_LOG2E)))

    def finish(self, ops, rt, red_base, tid, n0, tables=None):
        """Sum the warps' partials of outputs (tok, n0 + c), scale, epilogue, round, store (tables:
        `rope_preload`'s, FusedConfig.early)."""
        scale = self.epilogue_scale(ops, rt)
        threads = self.cfg.warps * 32
        total = self.ntok * self.cols
        log_cols = self.cols.bit_length() - 1
        for r in range((total + threads - 1) // threads):
            live = (tid + r * threads) < total
            o = ops.imin(tid + r * threads, total - 1)  # o >= total only when threads do not divide it
            tok, c = o >> log_cols, o & (self.cols - 1)
            x = ops.f32_zero()
            u = ops.f32_zero()
            if self.cfg.wn == 1:
                warps, lc = range(self.cfg.warps), c
            else:  # wn > 1: the kstep warps of the group that owns column (pair) c, at its local column
                group, lc = c >> (self.gcols.bit_length() - 1), c & (self.gcols - 1)
                warps = [group * self.kstep + i for i in range(self.kstep)]
            for w in warps:
                x = x + ops.lds_f32(self._red_addr(red_base, w, tok, lc))
                if self.paired:  # the up (second) sum of column (pair) c sits gcols rows below
                    u = u + ops.lds_f32(self._red_addr(red_base, w, tok, lc + self.gcols))
            x = x * scale
            if self.norm:
                inv = self.inv_rms(ops, rt, red_base, tok)
                x, u = x * inv, u * inv
            if self.rope is not None:
                ok = live & (tok < rt.m) & (n0 + c < rt.n)
                self.rope_store(ops, rt, tok, n0 + c, x, u * scale, ok, None if tables is None else tables[r])
                continue
            if self.gated:
                x = self.silu(ops, x) * (u * scale)
            n = n0 + c
            ok = live & (tok < rt.m) & (n < rt.n)
            if self.fusion.epilogue == "residual":
                elem = ops.i64(tok) * ops.i64(rt.n) + ops.i64(n)
                x = x + ops.half2_to_f32(self.out_dtype, ops.ldg_u16(rt.r_base + elem * 2, ok))[0]
            self.store(ops, rt, tok, n, x, ok)


# ---- the CuTe kernels ---------------------------------------------------------------------------
def runtime(tensors, k, alpha, rg, eps, rope=(), n=None) -> FusedRuntime:
    """The FusedRuntime of a launch: tensors (A, SFA, B, SFB, C, S0, S1, S2), rg (R, G) and rope (COS,
    SIN, KC, VC, SP, SO, or none) as base addresses; n C's columns unless given."""
    fields = ("r_base", "g_base", "cos_base", "sin_base", "kc_base", "vc_base", "sp_base", "so_base")
    bases = {f: t.iterator.toint() for f, t in zip(fields, (*rg, *rope))}
    return FusedRuntime.of(tensors, k, alpha, n, eps=eps, **bases)


class FusedDecodeGemm:
    """The launcher of every epilogue but rope_append (`RopeDecodeGemm` adds its six tensors); both
    kernels build their FusedRuntime and run the same `body`."""

    def __init__(self, logic: FusedLogic) -> None:
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
        mR: cute.Tensor,
        mG: cute.Tensor,
        alpha: Float32,
        eps: Float32,
        stream: cuda.CUstream,
    ):
        grid_n = (mC.shape[1] + self.logic.cols - 1) // self.logic.cols
        self.kernel(mA, mSFA, mB, mSFB, mC, mS0, mS1, mS2, mR, mG, alpha, eps).launch(
            grid=[grid_n, 1, 1],
            block=[self.threads, 1, 1],
            stream=stream,
            use_pdl=self.logic.fusion.pdl != "off",
            **KD.launch_bounds(self.logic.cfg, self.threads),
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
        mR: cute.Tensor,
        mG: cute.Tensor,
        alpha: Float32,
        eps: Float32,
    ):
        L = self.logic
        tid, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp, lane = tid >> 5, tid & 31
        n0 = bidx * L.cols
        k = mB.shape[1] * 8 // FORMAT[L.b_fmt].value_bits
        rt = runtime((mA, mSFA, mB, mSFB, mC, mS0, mS1, mS2), k, alpha, (mR, mG), eps)
        self.body(rt, k, tid, warp, lane, n0)

    @cute.jit
    def body(self, rt: FusedRuntime, k, tid, warp, lane, n0):
        """Prefetch (pdl "prefetch"), wait (pdl), K loop, reduction, epilogue: the kernel after its
        FusedRuntime (n0: the CTA's first output column or pair)."""
        # (the loop bodies name self.logic and DEVICE: the DSL's loop rewriting takes only numbers)
        L = self.logic
        if cutlass.const_expr(L.fusion.pdl == "prefetch"):  # the weights before the wait
            kp = L.prefetch_k(DEVICE, k)
            for i in cutlass.range(tid, L.bn * L.value_lines(kp), self.threads, unroll=1):
                self.logic.prefetch_value_line(DEVICE, rt, n0, i, DEVICE.boolean(True))
            if cutlass.const_expr(FORMAT[L.b_fmt].swizzled):
                for i in cutlass.range(tid, (L.bn // 8) * L.scale_atoms(kp), self.threads, unroll=1):
                    self.logic.prefetch_scale_line(DEVICE, rt, n0, i, DEVICE.boolean(True))
        if cutlass.const_expr(L.fusion.pdl != "off"):
            DEVICE.gdc_wait()
            DEVICE.gdc_launch_dependents()
        tables = None
        if cutlass.const_expr(L.fusion.early):  # rope_append: cos, sin, slots in flight during the K loop
            tables = self.logic.rope_preload(DEVICE, rt, tid, n0)
        smem = cutlass.memory.SmemAllocator()
        red = smem.allocate_tensor(Float32, cute.make_layout(L.red_floats), 16)
        red_base = red.iterator.toint()
        share_base = red_base
        if cutlass.const_expr(L.cfg.ashare):
            share = smem.allocate_tensor(cutlass.Uint32, cute.make_layout(L.share_bytes // 4), 16)
            share_base = share.iterator.toint()
        acc = L.zero_acc(DEVICE)
        chunks = k // KD.CHUNK
        first, step, nw = warp, L.cfg.warps, n0  # this warp's chunks first, first + step, ...; its group's base
        if cutlass.const_expr(L.cfg.wn > 1):  # warp groups: group warp // kstep owns gcols columns (pairs)
            first, step, nw = warp % L.kstep, L.kstep, n0 + (warp // L.kstep) * L.gcols
        if cutlass.const_expr(L.cfg.ashare):  # the set `first` (its wn warps) shares activations through smem
            acc = L.ashare_loop(rt, lane, nw, first, step, chunks, acc, warp // L.kstep, first, share_base)
        else:
            acc = L.k_loop(rt, lane, nw, first, step, chunks, acc)  # the plain kernel's (kgroup 1 here)
        L.reduce_stage(DEVICE, red_base, warp, lane, acc)
        DEVICE.barrier()
        L.finish(DEVICE, rt, red_base, tid, n0, tables)


class RopeDecodeGemm(FusedDecodeGemm):
    """The rope_append launcher: the fused one's tensors plus COS, SIN, KC, VC, SP, SO; the grid covers
    the layout's pairs (C = q_out holds only the q heads)."""

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
        mR: cute.Tensor,
        mG: cute.Tensor,
        mCos: cute.Tensor,
        mSin: cute.Tensor,
        mKC: cute.Tensor,
        mVC: cute.Tensor,
        mSP: cute.Tensor,
        mSO: cute.Tensor,
        alpha: Float32,
        eps: Float32,
        stream: cuda.CUstream,
    ):
        grid_n = (self.logic.rope.pairs + self.logic.cols - 1) // self.logic.cols
        self.kernel(mA, mSFA, mB, mSFB, mC, mS0, mS1, mS2, mR, mG, mCos, mSin, mKC, mVC, mSP, mSO, alpha, eps).launch(
            grid=[grid_n, 1, 1],
            block=[self.threads, 1, 1],
            stream=stream,
            use_pdl=self.logic.fusion.pdl != "off",
            **KD.launch_bounds(self.logic.cfg, self.threads),
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
        mR: cute.Tensor,
        mG: cute.Tensor,
        mCos: cute.Tensor,
        mSin: cute.Tensor,
        mKC: cute.Tensor,
        mVC: cute.Tensor,
        mSP: cute.Tensor,
        mSO: cute.Tensor,
        alpha: Float32,
        eps: Float32,
    ):
        L = self.logic
        tid, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp, lane = tid >> 5, tid & 31
        n0 = bidx * L.cols
        k = mB.shape[1] * 8 // FORMAT[L.b_fmt].value_bits
        tensors = (mA, mSFA, mB, mSFB, mC, mS0, mS1, mS2)
        rt = runtime(tensors, k, alpha, (mR, mG), eps, (mCos, mSin, mKC, mVC, mSP, mSO), n=L.rope.pairs)
        self.body(rt, k, tid, warp, lane, n0)


def fake_args(a_fmt: str, b_fmt: str, out_dtype: str):
    """KD.fake_args plus R [M, N] in C's dtype (the residual; the callers pass C when there is none)
    and G [K'] in A's element type (the norm weight; the callers pass A flattened when there is none)."""
    a, sfa, b, sfb, c, s0, s1, s2 = KD.fake_args(a_fmt, b_fmt, out_dtype)
    # C's columns get their own symbol: KD.fake_args ties them to B's rows, which silu_mul's C [M, I]
    # against a [2I, K] weight breaks (tvm-ffi rejects the call: "Mismatched mC.shape[1]", H200 20:15)
    c = make_fake_compact_tensor(
        KD._CUTE[out_dtype], (c.shape[0], cute.sym_int()), stride_order=(1, 0), assumed_align=16
    )
    r = make_fake_compact_tensor(KD._CUTE[out_dtype], c.shape, stride_order=(1, 0), assumed_align=16)
    g = make_fake_compact_tensor(a.element_type, (cute.sym_int(),), assumed_align=16)
    return a, sfa, b, sfb, c, s0, s1, s2, r, g


def rope_fake_args(out_dtype: str):
    """The rope_append launcher's extra tensors: COS, SIN fp32 [T, D/2], KC, VC [pages, page_size, Hkv,
    D] in C's dtype (contiguous), SP, SO int64 [T] (every extent its own symbol: the host checks them)."""
    f32, i64 = cutlass.Float32, cutlass.Int64
    cos = make_fake_compact_tensor(f32, (cute.sym_int(), cute.sym_int()), stride_order=(1, 0), assumed_align=4)
    sin = make_fake_compact_tensor(f32, (cute.sym_int(), cute.sym_int()), stride_order=(1, 0), assumed_align=4)
    shape = tuple(cute.sym_int() for _ in range(4))
    kc = make_fake_compact_tensor(KD._CUTE[out_dtype], shape, stride_order=(3, 2, 1, 0), assumed_align=4)
    vc = make_fake_compact_tensor(KD._CUTE[out_dtype], shape, stride_order=(3, 2, 1, 0), assumed_align=4)
    sp = make_fake_compact_tensor(i64, (cute.sym_int(),), assumed_align=8)
    so = make_fake_compact_tensor(i64, (cute.sym_int(),), assumed_align=8)
    return cos, sin, kc, vc, sp, so


@kernel("gemm.blockscaled.decode_fused", sources=_SOURCES)
def compile_decode_fused(a_fmt: str, b_fmt: str, out_dtype: str, config: FusedConfig, arch: str):
    """tvm-ffi launcher `fn(A, SFA, B, SFB, C, S0, S1, S2, R, G, alpha, eps)` on torch's current stream;
    C [M, N] (silu_mul: [M, I] for a [2I, K] weight), R [M, N] the residual (C itself when none), G [K]
    the norm weight (A flattened when none), eps the norm's (read only with norm). rope_append:
    `fn(A, SFA, B, SFB, C, S0, S1, S2, R, G, COS, SIN, KC, VC, SP, SO, alpha, eps)` with C = q_out
    [M, Hq D] (`rope_fake_args`; `launch.fused_args` builds either)."""
    logic = FusedLogic(a_fmt, b_fmt, out_dtype, config)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    args = fake_args(a_fmt, b_fmt, out_dtype)
    if config.epilogue == "rope_append":
        args = (*args, *rope_fake_args(out_dtype))
        return cute_compile(RopeDecodeGemm(logic), *args, Float32(1.0), Float32(1e-6), stream, arch=arch)
    return cute_compile(FusedDecodeGemm(logic), *args, Float32(1.0), Float32(1e-6), stream, arch=arch)
