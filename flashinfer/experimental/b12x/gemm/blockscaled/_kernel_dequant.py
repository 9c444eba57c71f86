"""Dequantize rows of a quantized GEMM operand into a 16-bit matrix (the two-pass large-M path's first pass).

    out[r, :] = deq(X[r0 + r, :]) * 2^-C      for r < rows (rows, r0 run-time; out [>= rows, K] contiguous)

in natural K order, exactly (the `dequant.py` placement: every NVFP4 / MXFP4 / MXFP8 / tensor-FP8
value times its block factor is a 16-bit float; C = formats.DEQUANT_SHIFT, undone by the GEMM's
epilogue with the per-tensor scales). One thread turns one span (32 values of one row) into four
16-byte groups; consecutive threads take consecutive spans, so the loads coalesce; with
`DequantConfig.staged` a warp's 64-byte results pass through 2 KB of shared memory so that its stores
coalesce too (`span`).
Bytes: the operand and its scales once, plus 2 K bytes a row written: a bandwidth-bound pass.

Not for block-FP8 (its 128 x 128 weight scales fold into the activation in the tiled kernel, one
rounding, which a separate pass cannot reproduce) nor 16-bit operands (nothing to do).
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from ..._lib.compile import cute_compile, kernel
from ..._lib.ptx import DEVICE
from .._shared import addressing as AD
from .._shared import dequant as DQ
from .._shared.formats import FORMAT, RAW16
from ._kernel_decode import _CUTE, _SOURCES

FORMATS = ("nvfp4", "mxfp4", "mxfp8", "fp8_tensor")  # what this pass dequantizes


@dataclass(frozen=True)
class DequantConfig:
    """threads per CTA, each dequantizing one 32-value span; staged: a warp's stores go through
    shared memory (`DequantLogic.span`). Staged by default: H200, session 22 (scripts/probe_twopass.py,
    nvfp4): B 28672 x 4096 166 -> 80 us (1.81 -> 3.77 TB/s), A 2048 x 4096 16.8 -> 9.3 us; the whole
    two-pass GEMM at M = 1024 28672 x 4096 791 -> 691 us (bench_gemm --sweep-subset twopass).
    pdl: launched as a programmatic dependent of the stream's previous kernel (griddepcontrol.wait
    before any read, then launch_dependents), so its launch overlaps that kernel's tail (a candidate: no gain in session 22's H200 sweep)."""

    threads: int = 256
    staged: bool = True
    pdl: bool = False


@dataclass
class DequantRuntime:
    """Run-time values of one launch (DSL integers on the device, numpy in the emulator)."""

    x_base: object
    sf_base: object
    out_base: object
    r0: object
    rows: object
    k: object


def why_not(fmt: str, compute: str, config: DequantConfig) -> str | None:
    if fmt not in FORMATS:
        return f"the dequantize pass takes {FORMATS}, got {fmt}"
    if compute not in RAW16:
        return f"compute dtype must be one of {RAW16}, got {compute}"
    ok = isinstance(config, DequantConfig) and config.threads in (64, 128, 256, 512)
    if not ok or not isinstance(config.staged, bool) or not isinstance(config.pdl, bool):
        return f"config must be a DequantConfig with 64, 128, 256 or 512 threads and bool staged / pdl, got {config!r}"
    return None


class DequantLogic:
    """The straight-line work of one thread (emulated in the tests)."""

    def __init__(self, fmt: str, compute: str, config: DequantConfig) -> None:
        reason = why_not(fmt, compute, config)
        if reason is not None:
            raise ValueError(f"gemm.blockscaled dequantize pass: {reason}")
        self.fmt, self.compute, self.cfg = fmt, compute, config
        self.family = FORMAT[fmt].family

    def span(self, ops, rt: DequantRuntime, idx, lane=None, stage=None):
        """Dequantize span `idx` (row idx // (K / 32), values 32 (idx % (K / 32)) ..) of the launch
        into its 64 bytes of the output (out is [P, K] contiguous: span i starts at byte 64 i). Plain:
        four 16-byte stores of the lane's own span (each store instruction of a warp writes 16-byte
        pieces 64 bytes apart). `staged`: the warp's 32 spans (one contiguous 2 KB) pass through its
        2 KB shared `stage` and leave in stores where neighbouring lanes write neighbouring bytes."""
        spr = rt.k >> 5
        local = idx // spr
        k0 = (idx - local * spr) * 32
        ok = local < rt.rows
        row = rt.r0 + local
        words = AD.load_span(ops, self.fmt, rt.x_base, ops.i64(AD.row_bytes(self.fmt, rt.k)), row, k0, ok)
        sc = AD.load_span_scale(ops, self.fmt, rt.sf_base, row, k0, rt.k, ok)
        factors = DQ.span_factors(ops, self.fmt, self.compute, sc)
        if not self.cfg.staged:
            dst = rt.out_base + (ops.i64(local) * ops.i64(rt.k) + ops.i64(k0)) * 2
            for j in range(4):
                g = DQ.span_group(ops, self.fmt, self.family, self.compute, words, factors, j)
                ops.stg_v4(dst + 16 * j, *DQ.natural_group(ops, self.family, g), ok)
            return
        for j in range(4):
            g = DQ.span_group(ops, self.fmt, self.family, self.compute, words, factors, j)
            ops.sts_v4(stage + 16 * stage_slot(lane, j), *DQ.natural_group(ops, self.family, g))
        ops.sync_warp()
        first = idx - lane  # the warp's first span
        dst = rt.out_base + ops.i64(first) * 64
        total = rt.rows * spr
        for i in range(4):
            s = lane // 4 + 8 * i  # the warp-local span and group of output chunk 32 i + lane
            words = ops.lds_v4(stage + 16 * stage_slot(s, lane & 3))
            ops.stg_v4(dst + 16 * (32 * i + lane), *words, first + s < total)

    def grid(self, rows, k):
        return [(rows * (k >> 5) + self.cfg.threads - 1) // self.cfg.threads, 1, 1]


def stage_slot(s, j):
    """16-byte slot of group j (0..3) of warp-local span s (0..31) in the warp's 2 KB stage: span-major
    with the group XOR-ed by (s >> 1) & 3, so both the writes (8 lanes: 8 spans, one group) and the
    reads (8 lanes: 2 spans, 4 groups) of a quarter-warp hit 8 distinct 16-byte bank groups."""
    return 4 * s + (j ^ ((s >> 1) & 3))


STAGE_BYTES = 2048  # per warp


class DequantRows:
    def __init__(self, logic: DequantLogic, ops=DEVICE) -> None:
        self.logic = logic
        self.ops = ops

    @cute.jit
    def __call__(self, mX: cute.Tensor, mSF: cute.Tensor, mOut: cute.Tensor, r0: Int32, rows: Int32,
                 stream: cuda.CUstream):  # fmt: skip
        self.kernel(mX, mSF, mOut, r0, rows).launch(
            grid=self.logic.grid(rows, mOut.shape[1]),
            block=[self.logic.cfg.threads, 1, 1],
            stream=stream,
            use_pdl=self.logic.cfg.pdl,
        )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mSF: cute.Tensor, mOut: cute.Tensor, r0: Int32, rows: Int32):
        tid, _, _ = cute.arch.thread_idx()
        bx, _, _ = cute.arch.block_idx()
        rt = DequantRuntime(mX.iterator.toint(), mSF.iterator.toint(), mOut.iterator.toint(), r0, rows, mOut.shape[1])
        if cutlass.const_expr(self.logic.cfg.pdl):  # a programmatic dependent (`DeviceOps.gdc_enter`)
            self.ops.gdc_enter()
        if cutlass.const_expr(self.logic.cfg.staged):
            smem = cutlass.memory.SmemAllocator()
            stages = smem.allocate_tensor(cutlass.Uint8, cute.make_layout(self.logic.cfg.threads * 64), 128)
            stage = stages.iterator.toint() + (tid >> 5) * STAGE_BYTES
            self.logic.span(self.ops, rt, bx * self.logic.cfg.threads + tid, tid & 31, stage)
        else:
            self.logic.span(self.ops, rt, bx * self.logic.cfg.threads + tid)


def fake_args(fmt: str, compute: str):
    """X [R, KX] bytes, SF [S] (bytes; a one-element stand-in for tensor-FP8), out [P, K] 16-bit."""
    x = make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int(), cute.sym_int()), stride_order=(1, 0), assumed_align=16)
    sf = make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int(),), assumed_align=2)
    out = make_fake_compact_tensor(
        _CUTE[compute], (cute.sym_int(), cute.sym_int()), stride_order=(1, 0), assumed_align=16
    )
    return x, sf, out


@kernel("gemm.blockscaled.dequant_rows", sources=_SOURCES)
def compile_dequant(fmt: str, compute: str, config: DequantConfig, arch: str):
    """tvm-ffi launcher `fn(X, SF, OUT, r0, rows)` on torch's current stream."""
    logic = DequantLogic(fmt, compute, config)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(DequantRows(logic), *fake_args(fmt, compute), Int32(0), Int32(1), stream, arch=arch)
