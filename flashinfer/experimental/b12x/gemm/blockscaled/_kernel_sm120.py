"""SM120 block-scaled GEMM (sm_120a / sm_121a only): C = scale * A B^T on the warp-level block-scaled MMA.

UNTESTED ON HARDWARE. No SM120/SM121 GPU is available to this project's sessions (the device machine
is an H200, sm_90a, which has no block-scaled mma.sync): this kernel is compiled for sm_120a and
sm_121a on the CPU by tests/experimental/b12x/gemm/test_sm120_compile.py, its scale-factor address
arithmetic is checked there against the swizzle oracle in `_lib/quant`, and it has never run. Keep it
out of default dispatch until a `-m gpu` run on an SM120 card passes (docs/validation.md).

What it computes: for A [M, K] and B [N, K] both K-major in the packed layouts the portable kernels
read (FP4 two per byte, element 2i in the low nibble; FP8 one per byte) with one-byte scales in the
128x4 swizzled layout (FORMATS.md), C[m, n] = alpha * S0 * S1 * S2 * sum_k deq(A)[m, k] deq(B)[n, k]
in bf16 / fp16 / fp32. The tensor core applies the block scales itself, so no 2^C dequantization
shift is involved (the epilogue factor has no 2^E term, unlike the mma.sync kernels).

    recipe  atom                      A x B       scales            K per MMA
    nvfp4   MmaMXF4NVF4Op (vec 16)    e2m1 x e2m1 e4m3, 4 per 64 K   64
    mxfp4   MmaMXF4Op     (vec 32)    e2m1 x e2m1 ue8m0, 2 per 64 K  64
    mxfp8   MmaMXF8Op     (vec 32)    e4m3 x e4m3 ue8m0, 1 per 32 K  32

Structure (Ampere-style multistage, one CTA per bm x bn output tile, 8 MMA warps as 4 x 2):
cp.async 16-byte copies bring the bk = 128 K-slice of A and B (swizzled shared tiles) and the
matching scale bytes into `stages` shared buffers; ldmatrix feeds the operand fragments, a
universal copy the scale fragments, and `cute.gemm` issues mma.sync ... .block_scale. The epilogue
scales the fp32 accumulators and stores them straight from registers, masked by M and N.

Scale tiles: bm = bn = 128 and bk = 128 make one stage's scales of A a single run of bytes in global
memory: rows [m0, m0 + 128) are one 128-row block, the bk / vec scale columns (8 for NVFP4, 4 for MX)
are whole 4-column atoms, and atoms of one row block are contiguous (512 bytes each), which is also
the order of the shared layout `sm120_make_smem_layout_sfa` builds for a 128-row tile. So a stage
copies `sf_tile_bytes` bytes verbatim (`sf_tile_offset`); the rows past M it reads are the layout's
padding (scale storage is always padded to 128 rows), and their products land in rows never stored.

Bytes: A and B once per CTA row / column of the grid (L2 serves re-reads) + scales; FLOPs 2 M N K.
Constraints (plan time, `why_not`): K % 128 == 0 (the portable kernels' K_ALIGN; no K tail);
N % 16 == 0; M, N edges are masked (rows past M / N are not loaded, outputs not stored); the scale
storage must start 16-byte aligned (cp.async); pairs nvfp4 x nvfp4, mxfp4 x mxfp4, mxfp8 x mxfp8 only.
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils.blackwell_helpers as sm120_utils
import cutlass.utils.blockscaled_layout as blockscaled_utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32
from cutlass.cute.nvgpu import cpasync, warp
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from ..._lib.compile import cute_compile, kernel
from .._shared.formats import FORMAT, K_ALIGN, N_ALIGN, OUT_DTYPES

ARCHS = ("sm_120a", "sm_121a")  # the block-scaled mma.sync exists on SM120 / SM121 only
RECIPES = ("nvfp4", "mxfp4", "mxfp8")
SMEM_LIMIT = 99 * 1024  # dynamic shared memory one SM120 block may use
ATOM_BYTES = 512  # one 128-row x 4-column scale atom
MMA_WARPS = (4, 2)  # warps along M and N
_SOURCES = ("flashinfer.experimental.b12x.gemm._shared.formats",)
_OUT = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16, "float32": cutlass.Float32}


@dataclass(frozen=True)
class Sm120Config:
    """bm x bn CTA tile, bk K values per stage, `stages` shared buffers in flight."""

    bm: int = 128
    bn: int = 128
    bk: int = 128
    stages: int = 3

    @property
    def threads(self) -> int:
        return 32 * MMA_WARPS[0] * MMA_WARPS[1]


def default_config(a_fmt: str) -> Sm120Config:
    """Not tuned (never run). FP4 stages are 18 KB, so 4 fit; MXFP8 stages are 33 KB, so 2 do."""
    return Sm120Config(stages=2 if FORMAT[a_fmt].family == "fp8" else 4)


def stage_bytes(a_fmt: str, config: Sm120Config) -> int:
    """Shared bytes of one stage: A and B values plus their scale tiles."""
    fmt = FORMAT[a_fmt]
    values = (config.bm + config.bn) * fmt.row_bytes(config.bk)
    return values + sf_tile_bytes(a_fmt, config.bm, config.bk) + sf_tile_bytes(a_fmt, config.bn, config.bk)


def why_not(a_fmt: str, b_fmt: str, out_dtype: str, config: Sm120Config, arch: str | None = None) -> str | None:
    """None when the kernel implements this combination (and `arch`, when given), else the reason."""
    if arch is not None and arch not in ARCHS:
        return f"arch {arch}: the block-scaled mma.sync (kind::mxf4nvf4 / mxf4 / mxf8) needs one of {ARCHS}"
    if not isinstance(config, Sm120Config):
        return f"config must be a Sm120Config, got {type(config).__name__}"
    if a_fmt != b_fmt or b_fmt not in RECIPES:
        return f"A format {a_fmt} x B format {b_fmt}: the SM120 kernel implements only {RECIPES} on both sides"
    if out_dtype not in OUT_DTYPES:
        return f"out dtype must be one of {OUT_DTYPES}, got {out_dtype}"
    c = config
    if (c.bm, c.bn, c.bk) != (128, 128, K_ALIGN):
        return (
            f"{c}: tile must be 128 x 128 x {K_ALIGN} (one 128-row scale block per CTA and stage, "
            f"bk = K_ALIGN so K needs no tail)"
        )
    if c.stages < 2:
        return f"{c}: needs at least 2 stages (the mainloop prefetches stages - 1 K-tiles)"
    if c.stages * stage_bytes(a_fmt, c) > SMEM_LIMIT:
        return (
            f"{c}: {c.stages} stages of {stage_bytes(a_fmt, c)} bytes exceed the {SMEM_LIMIT} bytes of an SM120 block"
        )
    return None


def can_implement(a_fmt: str, b_fmt: str, out_dtype: str, config: Sm120Config, arch: str | None = None) -> bool:
    return why_not(a_fmt, b_fmt, out_dtype, config, arch) is None


# ---- scale-tile address arithmetic (pure Python; the kernel uses the same functions) -----------
def sf_tile_bytes(fmt: str, rows: int, bk: int) -> int:
    """Bytes of the scales of a rows x bk tile (rows a multiple of 128, bk / vec of 4)."""
    return (rows // 128) * (bk // FORMAT[fmt].sf_vec // 4) * ATOM_BYTES


def sf_tile_offset(fmt: str, row0, k0, k):
    """Byte offset in the swizzled storage where the scales of rows [row0, row0 + 128) and values
    [k0, k0 + bk) start (row0 % 128 == 0, k0 % 128 == 0): row block row0 / 128 of cols4 / 4 atoms,
    then atom k0 / vec / 4. Integers or DSL integers."""
    vec = FORMAT[fmt].sf_vec
    cols4 = k // vec  # K % 128 == 0 makes K / vec a multiple of 4 for vec 16 and 32
    return (row0 // 128) * cols4 * 128 + (k0 // vec // 4) * ATOM_BYTES


def smem_sf_index(fmt: str, bm: int, bk: int, r: int, c: int) -> int:
    """Offset of scale (row r, scale column c) of a stage tile in the shared layout the MMA reads
    (`sm120_make_smem_layout_sfa` for bm = 128): ((32, 4), bm / 128) x (4, bk / vec / 4) with strides
    ((16, 4), 512) x (1, 512 * bm / 128)."""
    return (r % 32) * 16 + ((r // 32) % 4) * 4 + (r // 128) * ATOM_BYTES + (c % 4) + (c // 4) * ATOM_BYTES * (bm // 128)


# ---- the CuTe kernel ----------------------------------------------------------------------------
class Sm120Gemm:
    def __init__(self, fmt: str, out_dtype: str, config: Sm120Config) -> None:
        self.fmt, self.cfg = fmt, config
        self.fp8 = FORMAT[fmt].family == "fp8"
        self.ab_dtype = cutlass.Float8E4M3FN if self.fp8 else cutlass.Float4E2M1FN
        self.sf_dtype = cutlass.Float8E4M3FN if fmt == "nvfp4" else cutlass.Float8E8M0FNU
        self.vec = FORMAT[fmt].sf_vec
        self.c_dtype = _OUT[out_dtype]
        self.tile = (config.bm, config.bn, config.bk)
        self.threads = config.threads

    def _mma_op(self):
        # Built at trace time: the ops check the target arch (`--gpu-arch`) in __post_init__.
        if self.fmt == "nvfp4":
            return warp.MmaMXF4NVF4Op(self.ab_dtype, Float32, self.sf_dtype)
        if self.fmt == "mxfp4":
            return warp.MmaMXF4Op(self.ab_dtype, Float32, self.sf_dtype)
        return warp.MmaMXF8Op(self.ab_dtype, Float32, self.sf_dtype)

    def _smem_layout(self, rows: int):
        """(rows, bk, stages) K-major swizzled tile: the widest swizzle a bk-long row allows."""
        kind = sm90_utils.get_smem_layout_atom(cutlass.tensor_utils.LayoutEnum.ROW_MAJOR, self.ab_dtype, self.cfg.bk)
        atom = cute.nvgpu.warpgroup.make_smem_layout_atom(kind, self.ab_dtype)
        return cute.tile_to_shape(atom, (rows, self.cfg.bk, self.cfg.stages), order=(0, 1, 2))

    def _tiled_mma(self):
        """MMA_WARPS warps of the block-scaled atom, with the DSL's SM120 permutation of M / N / K."""
        return cute.make_tiled_mma(
            self._mma_op(),
            cute.make_layout((MMA_WARPS[0], MMA_WARPS[1], 1)),
            permutation_mnk=sm120_utils.get_permutation_mnk(self.tile, self.vec, self.fp8),
        )

    def _mma_fragments(self, tiled_mma, sA, sB, sSFA, sSFB, tid) -> tuple:
        """Shared -> register partitions of a stage (ldmatrix for values, a universal copy for scales):
        (tCrA, tCrB, tCrSFA, tCrSFB) the MMA's fragments, then the copies and their sources / views."""
        thr_mma = tiled_mma.get_slice(tid)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA)[None, None, None, 0])
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB)[None, None, None, 0])
        tCrSFA = sm120_utils.partition_fragment_SFA(sSFA[None, None, 0], thr_mma, tid)
        tCrSFB = sm120_utils.partition_fragment_SFB(sSFB[None, None, 0], thr_mma, tid)
        tCrSFA = cute.group_modes(tCrSFA, 2, cute.rank(tCrSFA))
        tCrSFB = cute.group_modes(tCrSFB, 2, cute.rank(tCrSFB))

        ldsm = cute.make_copy_atom(warp.LdMatrix8x8x16bOp(transpose=False, num_matrices=4), self.ab_dtype)
        s2r_a = cute.make_tiled_copy_A(ldsm, tiled_mma).get_slice(tid)
        s2r_b = cute.make_tiled_copy_B(ldsm, tiled_mma).get_slice(tid)
        tXsA, tXrA = s2r_a.partition_S(sA), s2r_a.retile(tCrA)
        tXsB, tXrB = s2r_b.partition_S(sB), s2r_b.retile(tCrB)
        sf_copy = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.sf_dtype)
        perm = tiled_mma.permutation_mnk
        s2r_sfa = cute.make_tiled_copy(
            sf_copy, sm120_utils.get_layoutSFA_TV(tiled_mma), (cute.size(perm[0]), cute.size(perm[2]))
        )
        s2r_sfb = cute.make_tiled_copy(
            sf_copy, sm120_utils.get_layoutSFB_TV(tiled_mma), (cute.size(perm[1]), cute.size(perm[2]))
        )
        t_sfa, t_sfb = s2r_sfa.get_slice(tid), s2r_sfb.get_slice(tid)
        tXsSFA, tXrSFA = t_sfa.partition_S(sSFA), cute.filter_zeros(t_sfa.retile(tCrSFA))
        tXsSFB, tXrSFB = t_sfb.partition_S(sSFB), cute.filter_zeros(t_sfb.retile(tCrSFB))
        copies = (s2r_a, s2r_b, s2r_sfa, s2r_sfb, tXsA, tXrA, tXsB, tXrB, tXsSFA, tXrSFA, tXsSFB, tXrSFB)
        return (tCrA, tCrB, tCrSFA, tCrSFB) + copies

    def _mma_k_tile(self, tiled_mma, frags, acc, stage) -> None:
        """acc += the K-tile in shared buffer `stage`: per MMA K-block, values and scales to registers,
        then one block-scaled `cute.gemm` (a trace-time loop, unrolled)."""
        tCrA, tCrB, tCrSFA, tCrSFB, s2r_a, s2r_b, s2r_sfa, s2r_sfb, *views = frags
        tXsA, tXrA, tXsB, tXrB, tXsSFA, tXrSFA, tXsSFB, tXrSFB = views
        sfa_s = cute.filter_zeros(tXsSFA[None, None, None, stage])
        sfb_s = cute.filter_zeros(tXsSFB[None, None, None, stage])
        for kb in range(cute.size(tCrA, mode=[2])):
            cute.copy(s2r_a, tXsA[None, None, kb, stage], tXrA[None, None, kb])
            cute.copy(s2r_b, tXsB[None, None, kb, stage], tXrB[None, None, kb])
            cute.copy(s2r_sfa, sfa_s[None, None, kb], tXrSFA[None, None, kb])
            cute.copy(s2r_sfb, sfb_s[None, None, kb], tXrSFB[None, None, kb])
            cute.gemm(
                tiled_mma,
                acc,
                [tCrA[None, None, kb], tCrSFA[None, None, kb]],
                [tCrB[None, None, kb], tCrSFB[None, None, kb]],
                acc,
            )

    @cute.jit
    def _mainloop(self, tiled_mma, frags, acc, k_tiles, load):
        """acc += every K-tile: `load(kt, stage)` issues K-tile kt's cp.async copies into shared buffer `stage`;
        stages - 1 K-tiles in flight, and the barrier at the top of iteration kt frees the stage iteration kt - 1
        read, which is the one the next load overwrites."""
        stages = self.cfg.stages
        for s in cutlass.range_constexpr(stages - 1):
            if s < k_tiles:
                load(s, s)
            cute.arch.cp_async_commit_group()
        for kt in cutlass.range(k_tiles, unroll=1):
            cute.arch.cp_async_wait_group(stages - 2)
            cute.arch.sync_threads()
            nxt = kt + stages - 1
            if nxt < k_tiles:
                load(nxt, nxt % stages)
            cute.arch.cp_async_commit_group()
            self._mma_k_tile(tiled_mma, frags, acc, kt % stages)

    def _smem_tiles(self, tiled_mma) -> tuple:
        """Shared memory of a CTA: sA (bm, bk, stages) and sB (bn, bk, stages) swizzled value tiles, the scale
        tiles sSFA / sSFB in the DSL's SM120 layouts ((M atoms), (K atoms), stages), and byte pointers to those."""
        cfg = self.cfg
        smem = cutlass.memory.SmemAllocator()
        la, lb = self._smem_layout(cfg.bm), self._smem_layout(cfg.bn)
        sA = smem.allocate_tensor(self.ab_dtype, la.outer, 128, la.inner)
        sB = smem.allocate_tensor(self.ab_dtype, lb.outer, 128, lb.inner)
        lsfa = blockscaled_utils.sm120_make_smem_layout_sfa(tiled_mma, self.tile, self.vec, cfg.stages)
        lsfb = blockscaled_utils.sm120_make_smem_layout_sfb(tiled_mma, self.tile, self.vec, cfg.stages)
        sSFA = smem.allocate_tensor(self.sf_dtype, lsfa, 128)
        sSFB = smem.allocate_tensor(self.sf_dtype, lsfb, 128)
        as_bytes = lambda t: cute.recast_ptr(t.iterator, dtype=cutlass.Uint8)  # noqa: E731
        return sA, sB, sSFA, sSFB, as_bytes(sSFA), as_bytes(sSFB)

    def _g2s_copy(self):
        """cp.async of 16 bytes per thread and step; threads tile (rows, bk) row-major."""
        elems = 128 // self.ab_dtype.width
        per_row = self.cfg.bk // elems
        atom = cute.make_copy_atom(
            cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), self.ab_dtype, num_bits_per_copy=128
        )
        thr = cute.make_layout((self.threads // per_row, per_row), stride=(per_row, 1))
        return cute.make_tiled_copy_tv(atom, thr, cute.make_layout((1, elems)))

    @cute.jit
    def _load_stage(self, g2s, a_side, b_side, tid, k, kt, stage):
        """Issue the cp.async copies of K-tile kt into `stage`: A and B rows below M / N, then the two
        scale tiles, each one contiguous run (module docstring) of 16 bytes per thread."""
        sf_atom = cute.make_copy_atom(
            cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), cutlass.Uint8, num_bits_per_copy=128
        )
        first = 0
        for tXg, tXs, tXc, rows, sf_src, sf_dst, row0, tile_rows in (a_side, b_side):
            for i in cutlass.range_constexpr(cute.size(tXg, mode=[1])):
                if tXc[0, i, 0, 0][0] < rows:
                    cute.copy(g2s, tXg[None, i, None, kt], tXs[None, i, None, stage])
            chunks = sf_tile_bytes(self.fmt, tile_rows, self.cfg.bk) // 16
            j = tid - first
            if (tid >= first) & (tid < first + chunks):
                src = sf_tile_offset(self.fmt, row0, kt * self.cfg.bk, k) + j * 16
                dst = stage * chunks * 16 + j * 16
                cute.copy(
                    sf_atom,
                    cute.make_tensor(sf_src + cute.assume(src, divby=16), cute.make_layout(16)),
                    cute.make_tensor(sf_dst + cute.assume(dst, divby=16), cute.make_layout(16)),
                )
            first += chunks

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
        tiled_mma = self._tiled_mma()
        grid_n = (mC.shape[1] + self.cfg.bn - 1) // self.cfg.bn
        grid_m = (mC.shape[0] + self.cfg.bm - 1) // self.cfg.bm
        self.kernel(tiled_mma, mA, mSFA, mB, mSFB, mC, mS0, mS1, mS2, alpha).launch(
            grid=[grid_n, grid_m, 1], block=[self.threads, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
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
        cfg = self.cfg
        tid, _, _ = cute.arch.thread_idx()
        bx, by, _ = cute.arch.block_idx()
        m, n = mC.shape[0], mC.shape[1]
        k = mB.shape[1] * 8 // self.ab_dtype.width
        k_tiles = k // cfg.bk

        # -- typed views of the byte operands: (M, K) / (N, K) values, K-major
        a = cute.make_tensor(cute.recast_ptr(mA.iterator, dtype=self.ab_dtype), cute.make_layout((m, k), stride=(k, 1)))
        b = cute.make_tensor(cute.recast_ptr(mB.iterator, dtype=self.ab_dtype), cute.make_layout((n, k), stride=(k, 1)))
        gA = cute.local_tile(a, (cfg.bm, cfg.bk), (by, None))  # (bm, bk, k_tiles)
        gB = cute.local_tile(b, (cfg.bn, cfg.bk), (bx, None))  # (bn, bk, k_tiles)
        cA = cute.local_tile(cute.make_identity_tensor((m, k)), (cfg.bm, cfg.bk), (by, None))
        cB = cute.local_tile(cute.make_identity_tensor((n, k)), (cfg.bn, cfg.bk), (bx, None))

        # -- shared memory: staged A / B tiles and their scale tiles
        sA, sB, sSFA, sSFB, sfa_bytes, sfb_bytes = self._smem_tiles(tiled_mma)

        # -- global -> shared partitions (rows past M / N are skipped; K is whole)
        g2s = self._g2s_copy()
        thr_g2s = g2s.get_slice(tid)
        tAgA, tAsA, tAcA = thr_g2s.partition_S(gA), thr_g2s.partition_D(sA), thr_g2s.partition_S(cA)
        tBgB, tBsB, tBcB = thr_g2s.partition_S(gB), thr_g2s.partition_D(sB), thr_g2s.partition_S(cB)
        a_side = (tAgA, tAsA, tAcA, m, mSFA.iterator, sfa_bytes, by * cfg.bm, cfg.bm)
        b_side = (tBgB, tBsB, tBcB, n, mSFB.iterator, sfb_bytes, bx * cfg.bn, cfg.bn)

        # -- shared -> register partitions (ldmatrix for values, universal copy for scales)
        thr_mma = tiled_mma.get_slice(tid)
        frags = self._mma_fragments(tiled_mma, sA, sB, sSFA, sSFB, tid)
        acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((cfg.bm, cfg.bn)), Float32)
        acc.fill(0.0)

        # -- mainloop (`_mainloop`)
        load = lambda kt, stage: self._load_stage(g2s, a_side, b_side, tid, k, kt, stage)  # noqa: E731
        self._mainloop(tiled_mma, frags, acc, k_tiles, load)

        # -- epilogue: alpha * S0 * S1 * S2 (launch.launch_args), masked stores from registers
        scale = alpha * mS0[0] * mS1[0] * mS2[0]
        gC = cute.local_tile(mC, (cfg.bm, cfg.bn), (by, bx))
        cC = cute.local_tile(cute.make_identity_tensor((m, n)), (cfg.bm, cfg.bn), (by, bx))
        tCgC, tCcC = thr_mma.partition_C(gC), thr_mma.partition_C(cC)
        for i in cutlass.range(cute.size(acc), unroll_full=True):
            if cute.elem_less(tCcC[i], (m, n)):
                tCgC[i] = (acc[i] * scale).to(self.c_dtype)


def fake_args(fmt: str, out_dtype: str):
    """Fake tensors of the launch contract (as `_kernel_decode.fake_args`, with the facts this
    kernel relies on declared): A [M, K bytes] and B [N, K bytes] uint8 with K bytes a multiple of
    K_ALIGN's bytes; SFA / SFB flat uint8 swizzled storage, 16-byte aligned; C [M, N]; S0-S2 fp32 [1]."""
    kb = FORMAT[fmt].row_bytes(K_ALIGN)
    m, n = cute.sym_int(), cute.sym_int(divisibility=N_ALIGN)
    a = make_fake_compact_tensor(
        cutlass.Uint8, (m, cute.sym_int(divisibility=kb)), stride_order=(1, 0), assumed_align=16
    )
    b = make_fake_compact_tensor(
        cutlass.Uint8, (n, cute.sym_int(divisibility=kb)), stride_order=(1, 0), assumed_align=16
    )
    # scale lengths are never read (the operand checks size them); only the 16-byte start matters
    sfa = make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int(),), assumed_align=16)
    sfb = make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int(),), assumed_align=16)
    c = make_fake_compact_tensor(_OUT[out_dtype], (m, n), stride_order=(1, 0), assumed_align=16)
    scalars = [make_fake_compact_tensor(cutlass.Float32, (1,), assumed_align=4) for _ in range(3)]
    return (a, sfa, b, sfb, c, *scalars)


@kernel("gemm.blockscaled.sm120", sources=_SOURCES)
def compile_sm120(a_fmt: str, b_fmt: str, out_dtype: str, config: Sm120Config, arch: str):
    """tvm-ffi launcher `fn(A, SFA, B, SFB, C, S0, S1, S2, alpha)` on torch's current stream; raises
    ValueError (with `why_not`'s reason) for another arch or an unsupported combination."""
    reason = why_not(a_fmt, b_fmt, out_dtype, config, arch)
    if reason is not None:
        raise ValueError(f"gemm.blockscaled SM120 kernel: {reason}")
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    gemm = Sm120Gemm(a_fmt, out_dtype, config)
    return cute_compile(gemm, *fake_args(a_fmt, out_dtype), Float32(1.0), stream, arch=arch)
