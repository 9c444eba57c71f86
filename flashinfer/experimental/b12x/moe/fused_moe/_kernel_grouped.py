"""moe.fused_moe expert GEMMs for large T: gemm's tiled kernel (`_kernel_tiled.TiledLogic`) over row
windows of the expert-sorted rows.

The decode expert kernels (`_kernel_experts.py`) issue 8 or 16 tokens per MMA group and re-read an
expert's weights once per group from L2; at T = 4096 (E = 128, k = 8: ~256 rows an expert) that is
decode-kernel speed on a prefill-sized problem. Here each CTA owns a bm-row WINDOW of the sorted rows
(grid y = ceil(R_cap / bm), x = the N tiles, N fastest so the CTAs resident together share A rows and
walk one expert's weight tiles) and runs one tiled GEMM tile per expert that has rows in its window:

    window [w0, w1) = [y * bm, y * bm + bm) clipped to the routed rows [0, start[E])
    experts e_first = sorted_expert[w0] .. e_last = sorted_expert[w1 - 1]
    per e: rows [max(start[e], w0), min(start[e + 1], w1)), skipped when empty

so no work list is needed (routing's `sorted_expert` and `expert_start` say it all) and live T is read
on the device only (graph replay at any T <= max_tokens). The tile-loops done are R / bm + (experts
that start inside a window): 1.5x the useful rows at E = 128 with bm = 128 and 256 rows an expert.

`GroupedConfig.per_expert` (the default) tiles each expert's rows instead: CTA row y takes the y-th
(expert, j) of the sequence of every expert's ceil(rows_e / bm) tiles, rows [start[e] + j bm,
min(start[e] + (j + 1) bm, start[e + 1])): sum_e ceil(rows_e / bm) tiles, ~1.25x the useful rows in
the same example, one tile per CTA. Each warp finds its (e, j) itself (`locate`): lane l loads the
starts of experts [l c, l c + c] (c = ceil(E / 32), one round trip), sums its experts' tile counts,
an xor-butterfly scan gives every lane its first tile, the lane holding y picks (e, j), and three
butterfly sums broadcast them; grid y = ceil(R_cap / bm) + E bounds the tile count, and the CTAs past
it exit. E is then a compile-time constant (part of the kernel key).

FC1 (gated activations): a CTA's B tile of bn rows holds bn / 2 gate rows and the bn / 2 up rows they
pair with, interleaved by 8 (`b_row`: tile rows 16p .. 16p + 7 are gate rows j0 + 8p .., rows
16p + 8 .. 16p + 15 the up rows I + j0 + 8p ..), so a warp's accumulator n-tiles 2q and 2q + 1 hold
gate and up of the same 8 output columns and the epilogue applies the activation in registers:
C1[row, j] = act(gate * s, up * s) in bf16, s = w_alpha[e] * a_alpha[e] * 2^(C_a + C_b) — the decode
FC1's math (`_kernel_experts.Activation`). Non-gated FC1 (relu2) and FC2 use gemm's epilogue with the
per-expert scale; FC2 stores fp32 rows (summed per token by the combine).

Launch contract: the decode expert kernels' (`_kernel_experts.compile_fc1` / `compile_fc2`) with the
last tensor `sorted_expert` int32 [R_cap] (routing step 1) in place of `active`, so a binding swaps
kernels without another argument list. Pairs: the decode expert kernels' (`X.PAIRS`: bf16 x NVFP4 / MXFP4,
NVFP4 x NVFP4, MXFP8 x NVFP4 / MXFP4, the last two with A's E4M3 words regrouped into the FP4 K order; w4a8_mx
also on e4m3 MMA, `FP8_MMA_PAIR`); K (H for FC1, I for FC2) a multiple of 128 (`why_not`).
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int64
from cutlass.cute.runtime import make_fake_stream

from ..._lib.compile import cute_compile, kernel
from ...gemm._shared.formats import FORMAT
from ...gemm.blockscaled import _kernel_tiled as KT
from ...gemm.blockscaled._kernel_tiled import TiledConfig
from . import _kernel_experts as X

GATED = X.GATED
K_ALIGN = 128  # the tiled kernel's K-tile and scale-block granularity
_SOURCES = X._SOURCES + (
    "flashinfer.experimental.b12x.gemm.blockscaled._kernel_tiled",
    "flashinfer.experimental.b12x.moe.fused_moe._kernel_experts",
)


@dataclass(frozen=True)
class GroupedConfig:
    """tile: gemm's CTA tile (its group_m unused; fp8_mma for w4a8_mx only, `FP8_MMA_PAIR`); per_expert: tiles of
    each expert's rows (True) or windows of the sorted rows (False; module docstring)."""

    tile: TiledConfig = TiledConfig(64, 256, 1, 4)
    per_expert: bool = True


def default_config(fc: int) -> GroupedConfig:
    """64 x 256 tiles of 4 warps (64 x 64 warp tiles), per-expert tiles. H200 2026-11-30 16:42,
    E=512 k=10 H=4096 I=1024 w4a16 T=4096 (~80 rows an expert): 6241 µs per layer against 9595 for
    128 x 128 / 8 warps (64 x 32 warp tiles, 1.6x the rows issued) and 7629 for 64 x 128 / 4 warps;
    torch._grouped_mm bf16 6114."""
    return GroupedConfig()


MAX_EXPERTS = 32 * 32  # per_expert: at most 32 experts a lane (`locate`)
# fp8_mma (gemm's e4m3 mma.sync with the UE8M0 factors on each k-step's partial sums): A stays raw E4M3, the MXFP4
# weights are stored as E4M3 (`dequant.fp4_as_e4m3`); NVFP4's E4M3 scales per 16 do not fit that block path
FP8_MMA_PAIR = ("mxfp8", "mxfp4")
# its tile: 8 warps of 32 x 32 (214-231 registers, no spills on sm_90a / sm_120a; the 64 x 64 warp tiles of the
# default and 64 x 128 / 4 warps spill 104-144 bytes: the factors mma_tile_mx holds)
FP8_MMA_TILE = TiledConfig(64, 128, 2, 4, True)


def fp8_config() -> GroupedConfig:
    """The w4a8_mx grouped config on e4m3 MMA (`_buckets.GROUPED_W4A8_FP8`), per-expert tiles."""
    return GroupedConfig(FP8_MMA_TILE)


def why_not(
    fc: int, a_fmt: str, b_fmt: str, activation: str | None, config, k: int | None = None, num_experts=None
) -> str | None:
    """None when the grouped kernel implements this GEMM, else the reason. k, num_experts: when known."""
    if fc not in (1, 2):
        return f"fc must be 1 or 2, got {fc!r}"
    if not isinstance(config, GroupedConfig) or not isinstance(config.tile, TiledConfig):
        return f"config must be a GroupedConfig of a gemm TiledConfig, got {config!r}"
    tile = config.tile
    if tile.group_m:
        return f"{tile}: group_m is not used by the grouped kernel (its grid is the raster)"
    if tile.fp8_mma and (a_fmt, b_fmt) != FP8_MMA_PAIR:
        return f"{tile}: fp8_mma takes MXFP8 activations x MXFP4 weights (w4a8_mx) only, got {a_fmt} x {b_fmt}"
    if (a_fmt, b_fmt) not in X.PAIRS:
        return f"A format {a_fmt} x weight format {b_fmt} has no tiled expert kernel"
    if fc == 1 and activation not in X.ACTIVATIONS:
        return f"activation must be one of {X.ACTIVATIONS}, got {activation!r}"
    if k is not None and (k <= 0 or k % K_ALIGN):
        return f"K = {k} must be a positive multiple of {K_ALIGN}"
    if num_experts is not None and not 1 <= num_experts <= MAX_EXPERTS:
        return f"num_experts must be 1..{MAX_EXPERTS}, got {num_experts}"
    if tile.bm & (tile.bm - 1):
        return f"{tile}: bm must be a power of two (the tile count per expert is a shift)"
    return KT.tile_reason(a_fmt, b_fmt, tile)  # the pairs are the expert kernels' (MXFP8 x FP4 included)


class GroupedLogic(X.Activation, KT.TiledLogic):
    """TiledLogic of one expert GEMM: per-expert scale, and for a gated FC1 the gate/up pairing."""

    def __init__(
        self, fc: int, a_fmt: str, b_fmt: str, activation: str | None, config: GroupedConfig, num_experts: int
    ) -> None:
        reason = why_not(fc, a_fmt, b_fmt, activation, config, num_experts=num_experts)
        if reason is not None:
            raise ValueError(f"moe.fused_moe grouped expert kernel: {reason}")
        super().__init__(a_fmt, b_fmt, "bfloat16" if fc == 1 else "float32", config.tile)
        self.fc = fc
        self.activation = activation if fc == 1 else None
        self.gated = self.activation in GATED
        self.per_expert = config.per_expert
        self.num_e = num_experts
        self.per_lane = -(-num_experts // 32)  # experts a lane scans in `locate`
        # MXFP8 activations x FP4 weights (w4a8) on bf16 MMA: A's E4M3 words regrouped into the FP4 K order both
        # operands share (under fp8_mma A stays raw, in element order)
        self.mixed = FORMAT[a_fmt].family == "fp8" and self.family == "fp4" and not config.tile.fp8_mma

    def variant_reason(self, a_fmt, b_fmt, out_dtype, config):
        return None  # `why_not` above ran in __init__, with the expert kernels' pairs

    def load(self, ops, rt, tid, m0, n0, kc):
        out = KT.TiledLogic.load(self, ops, rt, tid, m0, n0, kc)
        if not self.mixed:
            return out
        a = [(X.fp8_words_in_fp4_order(ops, words), sc) for words, sc in out[: self.a_spans]]
        return a + out[self.a_spans :]

    def grid_m(self, r_cap):
        """CTA rows: windows of the sorted rows, or an upper bound on the experts' tile count."""
        tiles = (r_cap + self.cfg.bm - 1) // self.cfg.bm
        return tiles + self.num_e if self.per_expert else tiles

    def locate(self, ops, lane, y, start):
        """(found, e, j) of tile y in the sequence of every expert's ceil(rows / bm) tiles, the same in
        every lane (found 0: y is past the last tile). start: indexable int32 [E + 1] (a tensor on
        the device, a numpy array in the emulator); lane: the lane index (per lane)."""
        c, shift = self.per_lane, self.cfg.bm.bit_length() - 1
        first = lane * c
        starts = [start[ops.imin(first + i, self.num_e)] for i in range(c + 1)]  # past E: start[E]
        tiles = [(starts[i + 1] - starts[i] + (self.cfg.bm - 1)) >> shift for i in range(c)]
        own = tiles[0]
        for i in range(1, c):
            own = own + tiles[i]
        incl, total = own, own
        for b in range(5):  # butterfly scan: the upper half of each 2^(b+1) block adds the lower's total
            other = ops.shfl_xor(total, 1 << b)
            incl = incl + other * ((lane >> b) & 1)
            total = total + other
        t = y - (incl - own)  # y's tile index among this lane's experts' tiles
        e, j, found = ops.i32(0), ops.i32(0), ops.i32(0)
        for i in range(c):
            hit = ops.imin(ops.imax(t + 1, 0), 1) * ops.imin(ops.imax(tiles[i] - t, 0), 1)  # 0 <= t < tiles[i]
            e, j, found = e + hit * (first + i), j + hit * t, found + hit
            t = t - tiles[i]
        for b in range(5):  # one lane holds the tile: butterfly sums broadcast it
            e, j, found = e + ops.shfl_xor(e, 1 << b), j + ops.shfl_xor(j, 1 << b), found + ops.shfl_xor(found, 1 << b)
        return found, e, j

    # Runtime of one (window, expert): m = the last row + 1 (rows from the tile's m0), n = output
    # columns (I for FC1, H for FC2), s0 / s1 = &w_alpha[e], &a_alpha[e], s2 = act_params.
    def grid_n(self, b_rows):
        """CTA columns: B rows per tile (a gated tile holds bn / 2 outputs' gate and up rows)."""
        return (b_rows + self.cfg.bn - 1) // self.cfg.bn

    def b_row(self, ops, rt, n0, local):
        if not self.gated:
            return KT.TiledLogic.b_row(self, ops, rt, n0, local)
        j = (n0 >> 1) + ((local >> 4) << 3) + (local & 7)
        return j + ((local >> 3) & 1) * rt.n, j < rt.n

    def epilogue_scale(self, ops, rt):
        true = ops.boolean(True)
        scale = ops.ldg_f32(rt.s0_base, true) * ops.ldg_f32(rt.s1_base, true)
        return scale * ops.f32(float(2.0**self.exp))

    def epilogue(self, ops, rt, tid, m0, n0, acc):
        scale = self.epilogue_scale(ops, rt)
        if self.activation is None:  # FC2: gemm's store
            return self.store_acc(ops, rt, tid, m0, n0, acc, scale)
        out = list(acc)
        n_mt, n_nt = self.wtm // 16, self.wtn // 8
        if not self.gated:  # relu2
            for idx in range(len(acc)):
                out[idx] = self.act(ops, rt, acc[idx] * scale, ops.f32(0.0))
            return self.store_acc(ops, rt, tid, m0, n0, out, ops.f32(1.0))
        for mt in range(n_mt):
            for q in range(n_nt // 2):
                gate, up = (mt * n_nt + 2 * q) * 4, (mt * n_nt + 2 * q + 1) * 4
                for e in range(4):
                    out[gate + e] = self.act(ops, rt, acc[gate + e] * scale, acc[up + e] * scale)
        return self.store_acc(ops, rt, tid, m0, n0 >> 1, out, ops.f32(1.0), 2)


class GroupedGemm:
    def __init__(self, logic: GroupedLogic) -> None:
        self.logic = logic
        self.inner = KT.TiledGemm(logic, X.DEVICE)

    @cute.jit
    def _launch(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted, stream):
        grid_m = self.logic.grid_m(mC.shape[0])
        grid_n = self.logic.grid_n(mB.shape[1])
        self.kernel(mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted).launch(
            grid=[grid_n, grid_m, 1], block=[self.logic.threads, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted):
        tid, _, _ = cute.arch.thread_idx()
        bx, by, _ = cute.arch.block_idx()
        k = mB.shape[2] * 2  # FP4 weights: two values per byte
        n0 = bx * self.logic.cfg.bn
        smem = cutlass.memory.SmemAllocator()
        tiles = smem.allocate_tensor(cutlass.Uint8, cute.make_layout(self.logic.smem_bytes), 128)
        sbase = tiles.iterator.toint()
        if cutlass.const_expr(self.logic.per_expert):
            found, e, j = self.logic.locate(X.DEVICE, tid & 31, by, mStart)
            if found > 0:  # the same in every lane and warp: CTAs past the last tile exit
                lo = mStart[e] + j * self.logic.cfg.bm
                hi = X.DEVICE.imin(lo + self.logic.cfg.bm, mStart[e + 1])
                self.tile(mA, mSFA, mB, mSFB, mC, mWAlpha, mAAlpha, mAct, tid, e, lo, hi, n0, k, sbase)
        else:
            self.windows(mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted, tid, by, n0, k, sbase)

    @cute.jit
    def tile(self, mA, mSFA, mB, mSFB, mC, mWAlpha, mAAlpha, mAct, tid, e, lo, hi, n0, k, sbase):
        """gemm's tiled K loop and this logic's epilogue on rows [lo, hi) of expert e."""
        rt = KT.Runtime(
            mA.iterator.toint(),
            mSFA.iterator.toint(),
            mB.iterator.toint() + Int64(e) * Int64(mB.shape[1]) * Int64(mB.shape[2]),
            mSFB.iterator.toint() + Int64(e) * Int64(mSFB.shape[1]),
            mC.iterator.toint(),
            mWAlpha.iterator.toint() + Int64(e) * 4,
            mAAlpha.iterator.toint() + Int64(e) * 4,
            mAct.iterator.toint(),
            hi,
            mC.shape[1],
            k,
            Float32(1.0),
        )
        self.inner.tile(rt, tid, lo, n0, sbase)

    @cute.jit
    def windows(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted, tid, by, n0, k, sbase):
        """The window mapping: one tile per expert with rows in [by bm, by bm + bm)."""
        total = mStart[mB.shape[0]]
        w0 = by * self.logic.cfg.bm
        if w0 < total:  # uniform per CTA: windows past the routed rows exit at once
            w1 = X.DEVICE.imin(w0 + self.logic.cfg.bm, total)
            e_first = mSorted[w0]
            e_last = mSorted[w1 - 1]
            for e in cutlass.range(e_first, e_last + 1, unroll=1):
                lo = X.DEVICE.imax(mStart[e], w0)
                hi = X.DEVICE.imin(mStart[e + 1], w1)
                if lo < hi:
                    self.tile(mA, mSFA, mB, mSFB, mC, mWAlpha, mAAlpha, mAct, tid, e, lo, hi, n0, k, sbase)
                    X.DEVICE.barrier()  # the next expert's first stores reuse buffer 0


class GroupedFc1(GroupedGemm):
    @cute.jit
    def __call__(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted, stream: cuda.CUstream):
        self._launch(mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted, stream)


class GroupedFc2(GroupedGemm):
    @cute.jit
    def __call__(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mSorted, stream: cuda.CUstream):
        self._launch(mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAAlpha, mSorted, stream)  # no act params


@kernel("moe.fused_moe.grouped_fc1", sources=_SOURCES)
def compile_grouped_fc1(a_fmt: str, b_fmt: str, activation: str, config: GroupedConfig, arch: str, num_experts: int):
    """tvm-ffi launcher `fn(A, SFA, B, SFB, C, expert_start, w_alpha, a_alpha, act_params,
    sorted_expert)` on torch's current stream (module docstring); B holds num_experts experts."""
    logic = GroupedLogic(1, a_fmt, b_fmt, activation, config, num_experts)
    act = X.make_fake_compact_tensor(cutlass.Float32, (3,), assumed_align=4)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(GroupedFc1(logic), *X.fake_args(a_fmt, "bfloat16"), act, X.fake_active(), stream, arch=arch)


@kernel("moe.fused_moe.grouped_fc2", sources=_SOURCES)
def compile_grouped_fc2(a_fmt: str, b_fmt: str, config: GroupedConfig, arch: str, num_experts: int):
    """tvm-ffi launcher `fn(A2, SFA2, B2, SFB2, C2, expert_start, w_alpha, a_alpha, sorted_expert)`."""
    logic = GroupedLogic(2, a_fmt, b_fmt, None, config, num_experts)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(GroupedFc2(logic), *X.fake_args(a_fmt, "float32"), X.fake_active(), stream, arch=arch)
