"""moe.fused_moe grouped (large-T) expert GEMMs on SM120's block-scaled MMA (sm_120a / sm_121a only):
the nvfp4 recipe's FC1 and FC2 with NVFP4 activations x NVFP4 expert weights on
`mma.sync ... kind::mxf4nvf4.block_scale` (CuTe DSL `MmaMXF4NVF4Op`), no dequantization in registers.

UNTESTED ON HARDWARE. No SM120/SM121 GPU is available to this project's sessions (the device machine
is an H100/H200, sm_90a, which has no block-scaled mma.sync). What was checked, on the CPU only, by
tests/experimental/b12x/moe/test_grouped_sm120_compile.py: FC1 (silu, swiglu_oai, relu2) and FC2
compile for sm_120a and sm_121a at E = 128 and 256 (H, I and R_cap are symbolic), the PTX holds the
block-scaled mma (`kind::mxf4nvf4 ... block_scale`) and no other mma, no local memory, and (with a
ptxas on PATH) no spills; every piece of address arithmetic below (`sf_word_offset`, `smem_sf_word`,
`fc1_b_row` and the kernel's gated B layout, the verbatim B scale tile) agrees with the `_lib.quant`
swizzle oracle, with the DSL's SM120 scale-tile layouts and with `_kernel_grouped`'s interleave; the
tiles' accumulator pairing (gate in n-atom 2q, its up in 2q + 1) was read off the tiled MMA's C
partition; and a torch walk of these tiles through the same functions (per-expert tile sequence by
`_kernel_grouped`'s `locate`, per-row scale gathers, 64-K block products in fp32, the epilogue)
matches the experts' oracle (`reference.expert_matrix`) on random inputs. It has never run. Keep it
out of dispatch (`_buckets.py`, `api.py`) until a `-m gpu` run on an SM120 card passes
(tests/experimental/b12x/moe/test_grouped_sm120_gpu.py: every case skips on other GPUs)
(docs/validation.md), as gemm's SM120 kernel (`_kernel_sm120.py`) is.

What it computes (the launch contract of `_kernel_grouped.compile_grouped_fc1` / `_fc2`, expert rows
sorted: expert e owns rows [start[e], start[e + 1])):

    FC1:  C1[p, j]  = act(gate_e(A1[p]) s, up_e(A1[p]) s)[j]   bf16 [R_cap, I]   (relu2: act(FC1_e(A1[p]) s))
    FC2:  C2[p, n]  = FC2_e(A2[p])[n] s                          fp32 [R_cap, H]
    s = w_alpha[e] * a_alpha[e] (1 / gs_w and 1 / gs_a: the block scales are applied by the tensor core)

A1 / A2 are the routing's and requantize's NVFP4 rows (uint8 [R_cap, K / 2], E2M1 pairs, low nibble
first) with E4M3 scales in the 128x4 swizzled layout over R_cap rows (FORMATS.md); B are
`ExpertWeights` values uint8 [E, N, K / 2] and scales [E, swizzled_size(N, K / 16)] (per expert,
gated FC1 rows gate first).

Tiles: `_kernel_grouped`'s per-expert tiles (`GroupedConfig.per_expert`; the window mapping is not
implemented): CTA row y takes the y-th (e, j) of the sequence of every expert's ceil(rows_e / 128)
tiles (`GroupedLogic.locate`, reused), rows [start[e] + 128 j, min(start[e] + 128 (j + 1), start[e +
1])); grid y = ceil(R_cap / 128) + E, the CTAs past the last tile exit; grid x = N tiles of 128 B rows.
Inside a tile, `_kernel_sm120`'s mainloop (reused pieces: its MMA atom, operand shared layouts, cp.async
and ldmatrix copies, the DSL's scale-fragment partitions): 8 warps (4 x 2), bk = 128, `stages` buffers.

Scale loads. A tile starts at an arbitrary sorted row, so A's 128 rows are not one 128-row block of the
swizzled storage and the dense kernel's verbatim stage copy does not apply. A row's 8 scales of one
K-tile are two 4-byte words (scale columns 4a .. 4a + 3 of one atom are adjacent in both the global and
the shared layout), so each of the 256 threads gathers one word a stage with a 4-byte cp.async
(`sf_word_offset` -> `smem_sf_word`), rows past the tile's live rows skipped. B's tiles start at 128-row
multiples of one expert's storage: FC2 and relu2 copy the 1 KB tile verbatim (`sf_tile_offset`); the
gated FC1's interleaved rows gather words like A.

FC1 gated interleave (`_kernel_grouped.GroupedLogic.b_row`'s): tile x holds the gate rows j0 .. j0 + 63
(j0 = 64 x) and their up rows I + j0 .., tile rows 16p .. 16p + 7 gate rows j0 + 8p .., rows 16p + 8 ..
16p + 15 the up rows: the B view is the layout ((8, 2, 8), K) : ((K, I K, 8 K), 1) from row j0. With the
SM120 N permutation ((8, 2, 2) : (1, 16, 8) per 32 columns) a thread's accumulator n-atoms 2q and 2q + 1
are columns n and n + 8 of the tile: gate and up of output column j0 + 8 (n / 16) + n % 8, so the
activation is applied in registers (`X.Activation.act`, the decode and grouped kernels' math).

Bytes: per tile, A's 128 rows x K / 2 + K / 16 and the B tile's 128 rows x (K / 2 + K / 16) (L2
serves an expert's weights to its tiles after the first); FLOPs 2 x rows x N x K useful, 2 x 128 x
sum_e ceil(rows_e / 128) x N x K issued (E = 128, k = 8, T = 4096: ~256 rows an expert, ~1x; 80 rows:
1.6x). Registers (ptxas 13.0, both archs): 126 (FC2, relu2, silu) / 128 (swiglu_oai), no spills; shared
memory 4 x 18 KB stages, one CTA an SM.
Constraints (`why_not`): sm_120a / sm_121a; NVFP4 x NVFP4 only; K (H for FC1, I for FC2) a positive
multiple of 128; 1 <= E <= MAX_EXPERTS; the 128 x 128 x 128 tile of `Sm120Config` and its stage rule;
A and B rows 16-byte aligned (K / 2 a multiple of 64: implied), SFA / SFB storages and B's per-expert
scale stride 16-byte aligned (the fake tensors declare it; tvm-ffi checks the pointers).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int64
from cutlass.cute.nvgpu import cpasync
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from ..._lib.compile import cute_compile, kernel
from ...gemm.blockscaled import _kernel_sm120 as S
from ...gemm.blockscaled._kernel_sm120 import ATOM_BYTES, Sm120Config, sf_tile_bytes, sf_tile_offset
from . import _kernel_experts as X
from ._kernel_grouped import MAX_EXPERTS, GroupedLogic

ARCHS = S.ARCHS
FMT = "nvfp4"  # the nvfp4 recipe: NVFP4 activations x NVFP4 weights
SF_VEC = 16
K_ALIGN = 128  # bk: K needs no tail
TILE = 128  # bm = bn = 128 rows (one 128-row scale atom)
ATOMS_PER_STAGE = K_ALIGN // SF_VEC // 4  # 2: scale words a row and stage
_SOURCES = X._SOURCES + (
    "flashinfer.experimental.b12x.gemm.blockscaled._kernel_sm120",
    "flashinfer.experimental.b12x.moe.fused_moe._kernel_experts",
    "flashinfer.experimental.b12x.moe.fused_moe._kernel_grouped",
    "flashinfer.experimental.b12x.gemm.blockscaled._kernel_tiled",
)


def default_config() -> Sm120Config:
    """Not tuned (never run): gemm's SM120 NVFP4 default, 4 stages of 18 KB."""
    return S.default_config(FMT)


def why_not(fc, a_fmt, b_fmt, activation, config, k=None, num_experts=None, arch=None) -> str | None:
    """None when this kernel implements the GEMM (and k, num_experts, `arch` when given), else the reason.
    `_kernel_grouped.why_not`'s arguments in its order, then the arch."""
    if arch is not None and arch not in ARCHS:
        return f"arch {arch}: the block-scaled mma.sync (kind::mxf4nvf4) needs one of {ARCHS}"
    if fc not in (1, 2):
        return f"fc must be 1 or 2, got {fc!r}"
    if (a_fmt, b_fmt) != (FMT, FMT):
        return (
            f"A format {a_fmt} x weight format {b_fmt}: the SM120 grouped kernel implements only the nvfp4 recipe "
            f"(NVFP4 activations x NVFP4 weights); w4a16 / w4a8 and MXFP4 weights run `_kernel_grouped`"
        )
    if fc == 1 and activation not in X.ACTIVATIONS:
        return f"activation must be one of {X.ACTIVATIONS}, got {activation!r}"
    if fc == 2 and activation is not None:
        return f"FC2 takes no activation, got {activation!r}"
    reason = S.why_not(FMT, FMT, "bfloat16" if fc == 1 else "float32", config)
    if reason is not None:
        return reason
    if k is not None and (k <= 0 or k % K_ALIGN):
        return f"K = {k} must be a positive multiple of {K_ALIGN}"
    if num_experts is not None and not 1 <= num_experts <= MAX_EXPERTS:
        return f"num_experts must be 1..{MAX_EXPERTS}, got {num_experts}"
    return None


# ---- address arithmetic (pure Python on ints; the kernel calls the same functions on DSL ints) -----
def sf_word_offset(row, atom, cols):
    """Byte offset of the 4-byte word of scales (row, 4 atom .. 4 atom + 3) in the swizzled storage of
    a grid with `cols` scale columns (cols % 4 == 0: K % 64 == 0): FORMATS.md's offset at c = 4 atom."""
    return (row >> 7) * cols * 128 + atom * ATOM_BYTES + (row & 31) * 16 + ((row >> 5) & 3) * 4


def smem_sf_word(r, atom):
    """Offset of the word of scales (tile row r, stage scale columns 4 atom ..) in one stage's scale tile
    (`_kernel_sm120.smem_sf_index` for bm = bk = 128 at c = 4 atom)."""
    return (r & 31) * 16 + ((r >> 5) & 3) * 4 + atom * ATOM_BYTES


def fc1_b_row(n0, local, inter):
    """(weight row, valid) of row `local` of the gated FC1 B tile starting at tile row n0 (a multiple of
    128): `_kernel_grouped.GroupedLogic.b_row`'s interleave (valid: the output column j < I)."""
    j = (n0 >> 1) + ((local >> 4) << 3) + (local & 7)
    return j + ((local >> 3) & 1) * inter, j < inter


def gated_b_layout(k, inter):
    """The gated B tile as a layout over (tile row, K) from weight row j0: ((8, 2, 8), K) : ((K, I K,
    8 K), 1) in elements (`fc1_b_row` without n0)."""
    return cute.make_layout(((8, 2, 8), k), stride=((k, inter * k, 8 * k), 1))


def out_column(n0, n):
    """Output column of tile column n (an even n-atom's, a gate column) of gated tile n0."""
    return (n0 >> 1) + ((n >> 4) << 3) + (n & 7)


class _ActRuntime:
    """What `X.Activation.act` reads from its runtime: swiglu_oai's parameters at s2_base."""

    def __init__(self, s2_base) -> None:
        self.s2_base = s2_base


class GroupedSm120(X.Activation, S.Sm120Gemm):
    """Per-expert tiles (`GroupedLogic.locate`) over `_kernel_sm120`'s block-scaled mainloop."""

    def __init__(self, fc: int, activation, config: Sm120Config, num_experts: int) -> None:
        reason = why_not(fc, FMT, FMT, activation, config, num_experts=num_experts)
        if reason is not None:
            raise ValueError(f"moe.fused_moe SM120 grouped expert kernel: {reason}")
        super().__init__(FMT, "bfloat16" if fc == 1 else "float32", config)
        self.fc, self.activation = fc, activation if fc == 1 else None
        self.gated = self.activation in X.GATED
        self.num_e = num_experts
        self.per_lane = -(-num_experts // 32)  # `locate`'s experts a lane
        assert self.threads == 2 * TILE, "one scale word a thread and stage"

    locate = GroupedLogic.locate  # reads self.per_lane, self.cfg.bm, self.num_e

    def grid_m(self, r_cap):
        return (r_cap + TILE - 1) // TILE + self.num_e

    @cute.jit
    def _launch(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, stream):
        tiled_mma = self._tiled_mma()
        grid_n = (mB.shape[1] + TILE - 1) // TILE
        self.kernel(tiled_mma, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct).launch(
            grid=[grid_n, self.grid_m(mC.shape[0]), 1], block=[self.threads, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct):
        tid, _, _ = cute.arch.thread_idx()
        bx, by, _ = cute.arch.block_idx()
        found, e, j = self.locate(X.DEVICE, tid & 31, by, mStart)
        if found > 0:  # the same in every thread: CTAs past the last tile exit
            lo = mStart[e] + j * TILE
            rows = X.DEVICE.imin(lo + TILE, mStart[e + 1]) - lo
            self.run_tile(tiled_mma, mA, mSFA, mB, mSFB, mC, mWAlpha, mAAlpha, mAct, tid, e, lo, rows, bx * TILE)

    @cute.jit
    def _gather_words(self, src, dst, tid, row, ok, cols, kt, stage):
        """Thread tid's scale word of one stage: row `row` (ok: copy it) of the swizzled `src`, word
        tid & 1 of the stage's two, into tile row tid >> 1 of `dst`'s buffer `stage`."""
        atom = tid & 1
        word = cute.make_copy_atom(
            cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.ALWAYS), cutlass.Uint8, num_bits_per_copy=32
        )
        if ok:
            off = sf_word_offset(row, kt * ATOMS_PER_STAGE + atom, cols)
            to = stage * sf_tile_bytes(FMT, TILE, K_ALIGN) + smem_sf_word(tid >> 1, atom)
            cute.copy(
                word,
                cute.make_tensor(src + cute.assume(off, divby=4), cute.make_layout(4)),
                cute.make_tensor(dst + cute.assume(to, divby=4), cute.make_layout(4)),
            )

    @cute.jit
    def _load_stage(self, g2s, vals, sf, tid, kt, stage):
        """cp.async of K-tile kt into `stage`: A and B value rows that hold data, A's scale words (per
        row: the tile starts at any sorted row), B's scale tile (verbatim, or per row when gated)."""
        sfa_src, sfa_dst, lo, rows, sfb_src, sfb_dst, n0, n_b, cols = sf
        inter = n_b >> 1  # gated only
        tXg, tXs, tXc = vals[0]
        for i in cutlass.range_constexpr(cute.size(tXg, mode=[1])):
            if tXc[0, i, 0, 0][0] < rows:
                cute.copy(g2s, tXg[None, i, None, kt], tXs[None, i, None, stage])
        tXg, tXs, tXc = vals[1]
        for i in cutlass.range_constexpr(cute.size(tXg, mode=[1])):
            r = tXc[0, i, 0, 0][0]
            ok = n0 + r < n_b
            if cutlass.const_expr(self.gated):
                ok = fc1_b_row(n0, r, inter)[1]
            if ok:
                cute.copy(g2s, tXg[None, i, None, kt], tXs[None, i, None, stage])
        t = tid >> 1
        self._gather_words(sfa_src, sfa_dst, tid, lo + t, t < rows, cols, kt, stage)
        if cutlass.const_expr(self.gated):
            b_row, b_ok = fc1_b_row(n0, t, inter)
            self._gather_words(sfb_src, sfb_dst, tid, b_row, b_ok, cols, kt, stage)
        else:
            chunks = sf_tile_bytes(FMT, TILE, K_ALIGN) // 16
            if tid < chunks:
                atom = cute.make_copy_atom(
                    cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), cutlass.Uint8, num_bits_per_copy=128
                )
                src = sf_tile_offset(FMT, n0, kt * K_ALIGN, cols * SF_VEC) + tid * 16
                dst = stage * chunks * 16 + tid * 16
                cute.copy(
                    atom,
                    cute.make_tensor(sfb_src + cute.assume(src, divby=16), cute.make_layout(16)),
                    cute.make_tensor(sfb_dst + cute.assume(dst, divby=16), cute.make_layout(16)),
                )

    @cute.jit
    def run_tile(self, tiled_mma, mA, mSFA, mB, mSFB, mC, mWAlpha, mAAlpha, mAct, tid, e, lo, rows, n0):
        """Rows [lo, lo + rows) of expert e against B tile rows [n0, n0 + 128) (gated: interleaved)."""
        cfg, ab = self.cfg, self.ab_dtype
        kbytes = mB.shape[2]
        k = kbytes * 2
        n_b = mB.shape[1]  # B rows: 2I gated, I (relu2) or H (FC2)
        inter = n_b >> 1  # gated only
        k_tiles = k // K_ALIGN
        cols = k // SF_VEC

        # -- the tile's operands: A rows from lo, expert e's B (its row tile, or the gated interleave)
        a_pitch = mA.shape[1]  # A's row bytes (K / 2 for the workspace operands; any multiple of 64)
        a_ptr = cute.recast_ptr(mA.iterator + cute.assume(Int64(lo) * Int64(a_pitch), divby=64), dtype=ab)
        gA = cute.local_tile(
            cute.make_tensor(a_ptr, cute.make_layout((TILE, k), stride=(a_pitch * 2, 1))), (TILE, K_ALIGN), (0, None)
        )
        cA = cute.local_tile(cute.make_identity_tensor((TILE, k)), (TILE, K_ALIGN), (0, None))
        b_base = mB.iterator + cute.assume(Int64(e) * Int64(n_b) * Int64(kbytes), divby=64)
        if cutlass.const_expr(self.gated):
            b_ptr = cute.recast_ptr(b_base + cute.assume(Int64(n0 >> 1) * Int64(kbytes), divby=64), dtype=ab)
            b_tile = cute.make_tensor(b_ptr, gated_b_layout(k, inter))
        else:
            b_ptr = cute.recast_ptr(b_base + cute.assume(Int64(n0) * Int64(kbytes), divby=64), dtype=ab)
            b_tile = cute.make_tensor(b_ptr, cute.make_layout((TILE, k), stride=(k, 1)))
        gB = cute.local_tile(b_tile, (TILE, K_ALIGN), (0, None))  # (bn, bk, k_tiles)
        cB = cute.local_tile(cute.make_identity_tensor((TILE, k)), (TILE, K_ALIGN), (0, None))
        sfa_src = mSFA.iterator
        sfb_src = mSFB.iterator + cute.assume(Int64(e) * Int64(mSFB.shape[1]), divby=16)

        # -- shared memory: staged A / B tiles and their scale tiles (`Sm120Gemm._smem_tiles`)
        sA, sB, sSFA, sSFB, sfa_dst, sfb_dst = self._smem_tiles(tiled_mma)

        g2s = self._g2s_copy()
        thr_g2s = g2s.get_slice(tid)
        tAgA, tAsA, tAcA = thr_g2s.partition_S(gA), thr_g2s.partition_D(sA), thr_g2s.partition_S(cA)
        tBgB, tBsB, tBcB = thr_g2s.partition_S(gB), thr_g2s.partition_D(sB), thr_g2s.partition_S(cB)

        vals = ((tAgA, tAsA, tAcA), (tBgB, tBsB, tBcB))
        sf = (sfa_src, sfa_dst, lo, rows, sfb_src, sfb_dst, n0, n_b, cols)

        # -- shared -> register partitions: `_kernel_sm120.Sm120Gemm`'s
        thr_mma = tiled_mma.get_slice(tid)
        frags = self._mma_fragments(tiled_mma, sA, sB, sSFA, sSFB, tid)
        acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((cfg.bm, cfg.bn)), Float32)
        acc.fill(0.0)

        # -- mainloop: `_kernel_sm120.Sm120Gemm._mainloop`
        load = lambda kt, stage: self._load_stage(g2s, vals, sf, tid, kt, stage)  # noqa: E731
        self._mainloop(tiled_mma, frags, acc, k_tiles, load)

        # -- epilogue: s = w_alpha[e] a_alpha[e]; activation in registers; masked stores from registers
        scale = mWAlpha[e] * mAAlpha[e]
        n_out = mC.shape[1]
        c_ptr = mC.iterator + Int64(lo) * Int64(n_out)
        gC = cute.make_tensor(c_ptr, cute.make_layout((TILE, n_out), stride=(n_out, 1)))
        tCcC = thr_mma.partition_C(cute.make_identity_tensor((cfg.bm, cfg.bn)))  # (V, MMA_M, MMA_N) tile coords
        rt = _ActRuntime(mAct.iterator.toint())
        if cutlass.const_expr(self.gated):
            n_atoms = cute.size(acc, mode=[2])
            for v in cutlass.range_constexpr(cute.size(acc, mode=[0])):
                for mi in cutlass.range_constexpr(cute.size(acc, mode=[1])):
                    for q in cutlass.range_constexpr(n_atoms // 2):
                        m, n = tCcC[v, mi, 2 * q]
                        col = out_column(n0, n)
                        if (m < rows) & (col < n_out):
                            g = acc[v, mi, 2 * q] * scale
                            u = acc[v, mi, 2 * q + 1] * scale
                            gC[m, col] = self.act(X.DEVICE, rt, g, u).to(self.c_dtype)
        else:
            for i in cutlass.range(cute.size(acc), unroll_full=True):
                m, n = tCcC[i]
                if (m < rows) & (n0 + n < n_out):
                    y = acc[i] * scale
                    if cutlass.const_expr(self.activation is not None):  # relu2
                        y = self.act(X.DEVICE, rt, y, Float32(0.0))
                    gC[m, n0 + n] = y.to(self.c_dtype)


class GroupedSm120Fc1(GroupedSm120):
    @cute.jit
    def __call__(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted, stream: cuda.CUstream):
        self._launch(mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, stream)


class GroupedSm120Fc2(GroupedSm120):
    @cute.jit
    def __call__(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mSorted, stream: cuda.CUstream):
        self._launch(mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAAlpha, stream)  # no act params


def fake_args(fc: int):
    """The launch contract's fake tensors (`_kernel_experts.fake_args`' shapes, with the facts this
    kernel relies on declared): A uint8 [R, K / 2] with K / 2 a multiple of 64; SFA uint8 [SA] and SFB
    uint8 [E, SB] 16-byte aligned (SB a multiple of 16; swizzled storage's is of 512); B uint8 [E, N, K / 2];
    C [R, N'] bf16 (FC1) or fp32 (FC2); expert_start int32 [E + 1]; w_alpha, a_alpha fp32 [E]."""
    r, e = cute.sym_int(), cute.sym_int()
    kb = K_ALIGN // 2
    a = make_fake_compact_tensor(
        cutlass.Uint8, (r, cute.sym_int(divisibility=kb)), stride_order=(1, 0), assumed_align=16
    )
    sfa = make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int(),), assumed_align=16)
    b = make_fake_compact_tensor(
        cutlass.Uint8, (e, cute.sym_int(), cute.sym_int(divisibility=kb)), stride_order=(2, 1, 0), assumed_align=16
    )
    sfb = make_fake_compact_tensor(
        cutlass.Uint8, (e, cute.sym_int(divisibility=16)), stride_order=(1, 0), assumed_align=16
    )
    c_dt = cutlass.BFloat16 if fc == 1 else cutlass.Float32
    c = make_fake_compact_tensor(c_dt, (r, cute.sym_int()), stride_order=(1, 0), assumed_align=16)
    start = make_fake_compact_tensor(cutlass.Int32, (cute.sym_int(),), assumed_align=4)
    w_alpha = make_fake_compact_tensor(cutlass.Float32, (e,), assumed_align=4)
    a_alpha = make_fake_compact_tensor(cutlass.Float32, (e,), assumed_align=4)
    return a, sfa, b, sfb, c, start, w_alpha, a_alpha


@kernel("moe.fused_moe.grouped_sm120_fc1", sources=_SOURCES)
def compile_grouped_sm120_fc1(activation: str, config: Sm120Config, arch: str, num_experts: int):
    """tvm-ffi launcher `fn(A, SFA, B, SFB, C, expert_start, w_alpha, a_alpha, act_params, sorted_expert)`
    (`_kernel_grouped.compile_grouped_fc1`'s; sorted_expert is not read) for NVFP4 x NVFP4; raises
    ValueError with `why_not`'s reason for another arch or an unsupported case."""
    reason = why_not(1, FMT, FMT, activation, config, num_experts=num_experts, arch=arch)
    if reason is not None:
        raise ValueError(f"moe.fused_moe SM120 grouped expert kernel: {reason}")
    gemm = GroupedSm120Fc1(1, activation, config, num_experts)
    act = make_fake_compact_tensor(cutlass.Float32, (3,), assumed_align=4)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(gemm, *fake_args(1), act, X.fake_active(), stream, arch=arch)


@kernel("moe.fused_moe.grouped_sm120_fc2", sources=_SOURCES)
def compile_grouped_sm120_fc2(config: Sm120Config, arch: str, num_experts: int):
    """tvm-ffi launcher `fn(A2, SFA2, B2, SFB2, C2, expert_start, w_alpha, a_alpha, sorted_expert)`."""
    reason = why_not(2, FMT, FMT, None, config, num_experts=num_experts, arch=arch)
    if reason is not None:
        raise ValueError(f"moe.fused_moe SM120 grouped expert kernel: {reason}")
    gemm = GroupedSm120Fc2(2, None, config, num_experts)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(gemm, *fake_args(2), X.fake_active(), stream, arch=arch)
