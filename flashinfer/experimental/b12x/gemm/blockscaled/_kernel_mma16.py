"""16-bit GEMM with a cp.async pipeline: the two-pass large-M path's second pass.

    C[:, c0 : c0 + P] = scale * A16 @ B16^T     A16 [M, K], B16 [>= P, K] bf16 (or f16), natural K order

where scale = alpha * S0 * S1 * S2 * 2^(C_a + C_b) is the tiled kernel's epilogue (`_kernel_tiled`):
A16 / B16 hold the operands dequantized by `_kernel_dequant` (values times 2^-C), or A16 is the
caller's 16-bit activation (C_a = 0). The tiled kernel dequantizes every operand tile once per CTA
(each FP4 weight value M / bm times over the grid, each activation value N / bn times); here each
value is dequantized once and the GEMM is a plain 16-bit one, whose loads need no registers.

Per CTA a bm x bn tile, K-tiles of BK = 64 values in a ring of `stages` shared buffers (the tiled
kernel's 128-byte rows and XOR swizzle, A rows then B rows); each thread issues 16-byte cp.async for
(bm + bn) * 8 / threads chunks of a K-tile, `stages - 1` K-tiles ahead of the math; per K-tile one
wait + one barrier, then the next K-tile's copies into the buffer the previous iteration read, then
ldmatrix.x4 + mma.sync m16n8k16 (fp32 accumulators, `TiledLogic.mma_tile`). Rows past M (A) or P (B)
are zero-filled by the copy (src-size 0) and never stored. Raster: `TiledLogic`'s (group_m M-tiles
per N-tile). FLOPs 2 M P K; bytes A once per N-tile column of the grid (L2 serves the re-reads).

`Mma16Config.e4m3` (tensor-FP8 x tensor-FP8 only): A and B are the raw E4M3 operands themselves (no
dequantize pass); the same 128-byte rows then hold K-tiles of 128 values and the MMA is m16n8k32 e4m3
(`TiledLogic`'s fp8_mma fragments), the tensor scales in the epilogue as before.
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
from .._shared.formats import OUT_DTYPES, compute_dtype
from ._kernel_decode import _CUTE, _SOURCES
from ._kernel_decode import Runtime as _Runtime
from ._kernel_tiled import ROW_BYTES, TiledConfig, TiledLogic

SMEM_LIMIT = 99 * 1024  # what an SM120 block gets
# What a block may take on an arch compiled for explicitly (compile_mma16's arch); plans, defaults and
# the sweep's candidates keep SMEM_LIMIT, so they build everywhere.
SMEM_LIMIT_BY_ARCH = {"sm_90a": 227 * 1024}


@dataclass(frozen=True)
class Mma16Config:
    """bm x bn CTA tile over warps_m x warps_n warps; stages: K-tiles of shared ring; group_m: the
    raster (`TiledConfig.group_m`); pipe: fragments one k-step ahead of the MMAs, across K-tiles too
    (`Mma16Gemm.tile_pipelined`: the wait and barrier for K-tile kc + 1 come before the last k-step
    of kc, so its first ldmatrix is in flight while that k-step's MMAs run). pipe is the default:
    H200, session 22 (bench_gemm --sweep-subset twopass, nvfp4): 28672 x 4096 at M = 2048 1366 ->
    1331 us, M = 1024 791 -> 762; 4096 x 4096 at M = 2048 217 -> 210 (not with 128 x 256 tiles:
    1424 -> 1551 there). pdl: launched as a programmatic dependent of the stream's previous kernel
    (the dequantize pass; griddepcontrol.wait before any read, then launch_dependents), so its launch
    and setup overlap that kernel's tail (a candidate: 4096 x 4096 at M = 2048 187.8 -> 188.5 us on
    the H200 with every launch pdl, session 22). minctas: 0, or the CTAs an SM ptxas budgets registers
    for (launch bounds; a candidate, session 23, never GPU-run: ncu put the default at 8 warps an SM
    with 0.39 eligible warps a scheduler; 128 x 128 over 2 x 4 warps with minctas 2 compiles to 128
    registers, 12 bytes of spill on sm_90a, for 16 warps an SM on the H200; an SM120 SM holds one
    96 KB ring, so it gains nothing there)."""

    bm: int = 128
    bn: int = 128
    warps_m: int = 2
    warps_n: int = 2
    stages: int = 3
    group_m: int = 16
    pipe: bool = True
    pdl: bool = False
    e4m3: bool = False
    minctas: int = 0

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def smem_bytes(self) -> int:
        return self.stages * (self.bm + self.bn) * ROW_BYTES


# What bench_gemm --sweep times for the two-pass path (all fit an SM120 block's 99 KB).
CANDIDATES = (
    Mma16Config(),
    Mma16Config(pipe=False),
    Mma16Config(128, 128, 2, 4, 3),
    Mma16Config(128, 256, 2, 4, 2, pipe=False),
    Mma16Config(256, 128, 4, 2, 2),
    Mma16Config(128, 128, 2, 2, 3, group_m=8),
    Mma16Config(64, 128, 2, 2, 4),
    Mma16Config(pdl=True),
    Mma16Config(e4m3=True),
    Mma16Config(128, 128, 2, 4, 3, e4m3=True),
    Mma16Config(128, 128, 2, 4, 3, minctas=2),
)


def why_not(a_fmt: str, b_fmt: str, out_dtype: str, config: Mma16Config, arch: str | None = None) -> str | None:
    """None if the config builds for a_fmt x b_fmt -> out_dtype, else why not. arch None: everywhere
    (SM120's 99 KB of shared memory); an arch: that arch's limit (sm_90a: 227 KB, for probes)."""
    if not isinstance(config, Mma16Config):
        return f"config must be an Mma16Config, got {type(config).__name__}"
    c = config
    if out_dtype not in OUT_DTYPES:
        return f"out dtype must be one of {OUT_DTYPES}, got {out_dtype}"
    if c.bm % (16 * c.warps_m) or c.bn % (16 * c.warps_n):
        return f"{c}: warp tiles must be multiples of 16 x 16"
    if (c.bm * 8) % c.threads or (c.bn * 8) % c.threads:
        return f"{c}: every thread must issue the same number of 16-byte copies per K-tile"
    if not 2 <= c.stages <= 6:
        return f"{c}: stages must be 2..6"
    limit = SMEM_LIMIT_BY_ARCH.get(arch, SMEM_LIMIT)
    if c.smem_bytes > limit:
        where = f"a {arch} block" if arch in SMEM_LIMIT_BY_ARCH else "an SM120 block"
        return f"{c}: needs {c.smem_bytes} bytes of shared memory, more than the {limit // 1024} KB {where} gets"
    if not 0 <= c.group_m <= 64:
        return f"{c}: group_m must be 0 (2-D grid) or 1..64 M-tiles per raster group"
    if not isinstance(c.pipe, bool) or not isinstance(c.pdl, bool) or not isinstance(c.e4m3, bool):
        return f"{c}: pipe, pdl and e4m3 must be bools"
    if not isinstance(c.minctas, int) or isinstance(c.minctas, bool) or not 0 <= c.minctas <= 4:
        return f"{c}: minctas must be an int 0..4 (CTAs an SM to budget registers for; 0: no bound)"
    if c.e4m3 and not a_fmt == b_fmt == "fp8_tensor":
        return f"{c}: e4m3 (raw E4M3 operands) needs tensor-FP8 on both sides, got {a_fmt} x {b_fmt}"
    return None


class Mma16Logic:
    """Static facts and the per-thread pieces of the kernel (emulated in the tests). The MMA loop,
    raster and epilogue are `TiledLogic`'s, built for the real formats (their epilogue exponent)."""

    def __init__(self, a_fmt: str, b_fmt: str, out_dtype: str, config: Mma16Config, arch: str | None = None) -> None:
        reason = why_not(a_fmt, b_fmt, out_dtype, config, arch)
        if reason is not None:
            raise ValueError(f"gemm.blockscaled 16-bit GEMM: {reason}")
        c = config
        self.cfg = c
        self.tiled = TiledLogic(
            a_fmt, b_fmt, out_dtype, TiledConfig(c.bm, c.bn, c.warps_m, c.warps_n, c.e4m3, group_m=c.group_m)
        )
        self.kvals = self.tiled.bk  # K values per K-tile: 64 16-bit or 128 E4M3 (128 bytes a row either way)
        self.value_bytes = 1 if c.e4m3 else 2
        self.threads = c.threads
        self.smem_bytes = c.smem_bytes
        self.f32_out = out_dtype == "float32"

    def occupancy_hints(self) -> dict:
        """Launch attributes for `Mma16Config.minctas`: ptxas budgets registers for that many CTAs an
        SM (`nvvm.minctasm` with the CTA's thread count), the carveout asks for all shared memory
        (given explicitly: the DSL would otherwise query a device at compile time)."""
        if not self.cfg.minctas:
            return {}
        return {
            "min_blocks_per_mp": self.cfg.minctas,
            "max_number_threads": [self.threads, 1, 1],
            "preferred_smem_carveout": 100,
        }

    def load(self, ops, rt: _Runtime, tid, m0, n0, kc, stage, smem_base=0):
        """cp.async K-tile kc of the A rows m0.. and B rows n0.. into ring buffer `stage` (no commit)."""
        per_pass = self.threads // 8  # rows one pass of 16-byte chunks covers
        chunk, r = tid & 7, tid >> 3
        kbytes = ops.i64(kc) * ROW_BYTES + ops.i64(chunk * 16)
        ld = ops.i64(rt.k) * self.value_bytes
        for base, r0, limit, off, count in (
            (rt.a_base, m0, rt.m, 0, self.cfg.bm),
            (rt.b_base, n0, rt.n, self.cfg.bm, self.cfg.bn),
        ):
            for i in range(count // per_pass):
                local = r + i * per_pass
                row = r0 + local
                src = base + ops.i64(ops.imin(row, limit - 1)) * ld + kbytes
                ops.cp_async16(self.tiled._row_addr(smem_base, stage, off + local, chunk), src, row < limit)

    def epilogue(self, ops, rt: _Runtime, tid, m0, n0, acc, ld):
        self.tiled.store_acc(ops, rt, tid, m0, n0, acc, self.tiled.epilogue_scale(ops, rt), ld=ld)


class Mma16Gemm:
    def __init__(self, logic: Mma16Logic, ops=DEVICE) -> None:
        self.logic = logic
        self.ops = ops

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mC: cute.Tensor,
        mS0: cute.Tensor,
        mS1: cute.Tensor,
        mS2: cute.Tensor,
        alpha: Float32,
        c0: Int32,
        p: Int32,
        stream: cuda.CUstream,
    ):
        cfg = self.logic.cfg
        grid_m = (mC.shape[0] + cfg.bm - 1) // cfg.bm
        grid_n = (p + cfg.bn - 1) // cfg.bn
        self.kernel(mA, mB, mC, mS0, mS1, mS2, alpha, c0, p).launch(
            grid=self.logic.tiled.grid(grid_m, grid_n),
            block=[self.logic.threads, 1, 1],
            stream=stream,
            use_pdl=self.logic.cfg.pdl,
            **self.logic.occupancy_hints(),
        )

    @cute.kernel
    def kernel(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mC: cute.Tensor,
        mS0: cute.Tensor,
        mS1: cute.Tensor,
        mS2: cute.Tensor,
        alpha: Float32,
        c0: Int32,
        p: Int32,
    ):
        if cutlass.const_expr(self.logic.cfg.pdl):  # a programmatic dependent (`DeviceOps.gdc_enter`)
            self.ops.gdc_enter()
        tid, _, _ = cute.arch.thread_idx()
        bx, by, _ = cute.arch.block_idx()
        cfg = self.logic.cfg
        m0, n0 = self.logic.tiled.tile_origin(self.ops, (bx, by), (mC.shape[0] + cfg.bm - 1) // cfg.bm)
        ld = mC.shape[1]
        c_base = mC.iterator.toint() + cutlass.Int64(c0) * (4 if cutlass.const_expr(self.logic.f32_out) else 2)
        rt = _Runtime(
            mA.iterator.toint(),
            mA.iterator.toint(),
            mB.iterator.toint(),
            mB.iterator.toint(),
            c_base,
            mS0.iterator.toint(),
            mS1.iterator.toint(),
            mS2.iterator.toint(),
            mC.shape[0],
            p,
            mA.shape[1],
            alpha,
        )
        smem = cutlass.memory.SmemAllocator()
        ring = smem.allocate_tensor(cutlass.Uint8, cute.make_layout(self.logic.smem_bytes), 128)
        sbase = ring.iterator.toint()
        if cutlass.const_expr(self.logic.cfg.group_m == 0):
            self.tile(rt, tid, m0, n0, sbase, ld)
        elif n0 < rt.n:  # false only for the idle CTAs of a grouped raster's short last group
            self.tile(rt, tid, m0, n0, sbase, ld)

    @cute.jit
    def prologue(self, rt: _Runtime, tid, m0, n0, sbase, chunks):
        """K-tiles 0 .. stages - 2 into the ring, one cp.async group each (empty past the last K-tile)."""
        for s in cutlass.range_constexpr(self.logic.cfg.stages - 1):
            if s < chunks:
                self.logic.load(self.ops, rt, tid, m0, n0, s, s, sbase)
            self.ops.cp_async_commit()

    @cute.jit
    def tile(self, rt: _Runtime, tid, m0, n0, sbase, ld):
        if cutlass.const_expr(self.logic.cfg.pipe):
            self.tile_pipelined(rt, tid, m0, n0, sbase, ld)
        else:
            self.tile_plain(rt, tid, m0, n0, sbase, ld)

    @cute.jit
    def tile_pipelined(self, rt: _Runtime, tid, m0, n0, sbase, ld):
        """The K loop of `Mma16Config.pipe`: fragments one k-step ahead; the next K-tile's copies issue at
        k-step 0, the wait and barrier come before the last k-step, whose MMAs then overlap the next
        K-tile's first ldmatrix."""
        chunks = rt.k // self.logic.kvals
        self.prologue(rt, tid, m0, n0, sbase, chunks)
        self.ops.cp_async_wait(self.logic.cfg.stages - 2)
        self.ops.barrier()
        a_frags, b_frags = self.logic.tiled.frags(self.ops, tid, 0, 0, sbase)
        acc = self.logic.tiled.zero_acc(self.ops)
        for kc in cutlass.range(chunks):
            nxt = kc + self.logic.cfg.stages - 1
            if nxt < chunks:  # into the buffer K-tile kc - 1 used: every warp read it before the last barrier
                self.logic.load(self.ops, rt, tid, m0, n0, nxt, nxt % self.logic.cfg.stages, sbase)
            self.ops.cp_async_commit()
            for ks in cutlass.range_constexpr(self.logic.tiled.ksteps):
                if cutlass.const_expr(ks == self.logic.tiled.ksteps - 1):
                    self.ops.cp_async_wait(self.logic.cfg.stages - 2)  # K-tile kc + 1 has landed ...
                    self.ops.barrier()  # ... for every thread
                    buf, step = (kc + 1) % self.logic.cfg.stages, 0  # past the last K-tile: read, unused
                else:
                    buf, step = kc % self.logic.cfg.stages, ks + 1
                a_next, b_next = self.logic.tiled.frags(self.ops, tid, buf, step, sbase)
                acc = self.logic.tiled.mma_step(self.ops, a_frags, b_frags, acc)
                a_frags, b_frags = a_next, b_next
        self.logic.epilogue(self.ops, rt, tid, m0, n0, acc, ld)

    @cute.jit
    def tile_plain(self, rt: _Runtime, tid, m0, n0, sbase, ld):
        chunks = rt.k // self.logic.kvals
        self.prologue(rt, tid, m0, n0, sbase, chunks)
        acc = self.logic.tiled.zero_acc(self.ops)
        for kc in cutlass.range(chunks):
            self.ops.cp_async_wait(self.logic.cfg.stages - 2)  # K-tile kc has landed (this thread's copies) ...
            self.ops.barrier()  # ... everyone's, and every warp is done with the buffer refilled next
            nxt = kc + self.logic.cfg.stages - 1
            if nxt < chunks:
                self.logic.load(self.ops, rt, tid, m0, n0, nxt, nxt % self.logic.cfg.stages, sbase)
            self.ops.cp_async_commit()
            acc = self.logic.tiled.mma_tile(self.ops, rt, tid, m0, n0, kc, kc % self.logic.cfg.stages, acc, sbase)
        self.logic.epilogue(self.ops, rt, tid, m0, n0, acc, ld)


def fake_args(a_fmt: str, out_dtype: str, e4m3: bool = False):
    """A16 [M, K], B16 [P', K] (16-bit, the compute dtype; raw E4M3 bytes with e4m3), C [M, N], S0, S1,
    S2 fp32 [1]."""
    dt = cutlass.Uint8 if e4m3 else _CUTE[compute_dtype(a_fmt)]
    m, k = cute.sym_int(), cute.sym_int()
    a = make_fake_compact_tensor(dt, (m, k), stride_order=(1, 0), assumed_align=16)
    b = make_fake_compact_tensor(dt, (cute.sym_int(), k), stride_order=(1, 0), assumed_align=16)
    c = make_fake_compact_tensor(_CUTE[out_dtype], (m, cute.sym_int()), stride_order=(1, 0), assumed_align=16)
    scalars = [make_fake_compact_tensor(cutlass.Float32, (1,), assumed_align=4) for _ in range(3)]
    return a, b, c, *scalars


@kernel("gemm.blockscaled.mma16", sources=(*_SOURCES, "flashinfer.experimental.b12x.gemm.blockscaled._kernel_tiled"))
def compile_mma16(a_fmt: str, b_fmt: str, out_dtype: str, config: Mma16Config, arch: str):
    """tvm-ffi launcher `fn(A16, B16, C, S0, S1, S2, alpha, c0, p)` on torch's current stream."""
    logic = Mma16Logic(a_fmt, b_fmt, out_dtype, config, arch)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    args = fake_args(a_fmt, out_dtype, config.e4m3)
    return cute_compile(Mma16Gemm(logic), *args, Float32(1.0), Int32(0), Int32(1), stream, arch=arch)
