"""The CuTe DSL kernel of `l2_prefetch` (its docstring has the design; the host side lives there so
that building a record for CPU tensors never imports cutlass).

kernel(table int64 [R, 2] of (address, bytes), grid of `ctas` CTAs x config.threads):
    G = ctas * threads; thread g issues items g, g + G, ... of the concatenation of the ranges'
    items; `first` is the thread's first item inside the current range (items before the range
    are subtracted as the loop moves on), so no division per item and no table search.
    An item is a 128-byte line (mode "line") or a `bulk_bytes` chunk (mode "bulk", the last one of a
    range cut at the range's end, a multiple of 128: the range is widened to whole lines).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64
from cutlass._mlir.dialects import llvm
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.cutlass_dsl import dsl_user_op

from . import l2_prefetch as P
from .compile import cute_compile, kernel
from .l2_prefetch import PrefetchConfig, why_not


@dsl_user_op
def _prefetch_line(addr, *, loc=None, ip=None):
    llvm.inline_asm(
        None, [Int64(addr).ir_value(loc=loc, ip=ip)], "prefetch.global.L2 [$0];", "l",
        has_side_effects=True, is_align_stack=False, loc=loc, ip=ip,
    )  # fmt: skip


@dsl_user_op
def _prefetch_bulk(addr, nbytes, *, loc=None, ip=None):
    # the TMA unit's L2 prefetch of [addr, addr + nbytes): addr 16-byte aligned, nbytes % 16 == 0
    llvm.inline_asm(
        None, [Int64(addr).ir_value(loc=loc, ip=ip), Int32(nbytes).ir_value(loc=loc, ip=ip)],
        "cp.async.bulk.prefetch.L2.global [$0], $1;", "l,r",
        has_side_effects=True, is_align_stack=False, loc=loc, ip=ip,
    )  # fmt: skip


class _Ops:
    """`l2_prefetch.PyOps` in cutlass numbers (the kernel's arithmetic is written once, there)."""

    i64, i32 = Int64, Int32
    min = staticmethod(cutlass.min)
    max = staticmethod(cutlass.max)


class L2PrefetchKernel:
    def __init__(self, config: PrefetchConfig) -> None:
        self.bulk = config.mode == "bulk"
        self.threads = config.threads
        self.item = config.item_bytes

    def issue(self, at, end):
        """One item at `at` (a plain helper: the mode is a trace-time choice)."""
        if self.bulk:
            _prefetch_bulk(at, Int32(cutlass.min(end - at, Int64(self.item))))
        else:
            _prefetch_line(at)

    @cute.jit
    def __call__(self, mTable: cute.Tensor, ctas: Int32, stream: cuda.CUstream):
        self.kernel(mTable).launch(grid=[ctas, 1, 1], block=[self.threads, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mTable: cute.Tensor):  # mTable: (R, 2) int64, row r = (address, bytes)
        tid, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        stride = gdim * self.threads  # G, the grid's threads
        first = bidx * self.threads + tid
        for r in cutlass.range(mTable.shape[0], unroll=1):
            start, end, items = P.widened(_Ops, mTable[r, 0], mTable[r, 1], self.item)
            for i in cutlass.range(first, items, stride, unroll=1):
                self.issue(start + Int64(i) * self.item, end)
            first = P.next_first(_Ops, first, items, stride)


@kernel("lib.l2_prefetch", sources=("flashinfer.experimental.b12x._lib.l2_prefetch",))
def compile_prefetch(config: PrefetchConfig, arch: str):
    """tvm-ffi launcher `fn(table, ctas)`: table int64 [R, 2] (R symbolic: a new range count does
    not compile) on a CUDA device, ctas the grid; runs on torch's current stream of the table's device."""
    reason = why_not(config)
    if reason is not None:
        raise ValueError(reason)
    table = make_fake_compact_tensor(Int64, (cute.sym_int(), 2), stride_order=(1, 0), assumed_align=16)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(L2PrefetchKernel(config), table, Int32(1), stream, arch=arch)
