"""y = a * x + b * y, elementwise, over a 1-D [N] or row-major [M, N] tensor (bf16, fp16, fp32).

The spine's test kernel: small, but compiled, cached, loaded and launched exactly like a real op.
- x and y share dtype and shape, are contiguous and 16-byte aligned; y is updated in place.
- Math in fp32 (a * x as a multiply, + b * y fused), one rounding to the storage dtype.
- The leading extent (N of a 1-D tensor, M of a 2-D one) is symbolic: a new length does not
  compile. The row length of a 2-D tensor is static (part of the key), as a hidden size would be.
- Moves 3 * numel * itemsize bytes (read x and y, write y); 3 FLOPs per element.

Each CTA owns one tile of `threads * vec` elements (1-D) or `threads/32` rows x `32 * vec` columns
(2-D); each thread owns `vec` contiguous elements. A thread whose vector lies inside the tensor
copies it with one `copy_bits`-wide access; a thread on the ragged edge copies element by element
under a predicate.
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from ..compile import cute_compile, kernel

DTYPES = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16, "float32": cutlass.Float32}
_BITS = {"bfloat16": 16, "float16": 16, "float32": 32}


@dataclass(frozen=True)
class AxpbyConfig:
    """threads: per CTA (a multiple of 32); copy_bits: width of one vector access (<= 128)."""

    threads: int = 128
    copy_bits: int = 128


def default_config(dtype: str, n_cols: int | None) -> AxpbyConfig:
    """128-bit accesses whenever every row starts 16-byte aligned, else the widest that fits."""
    bits = 128
    while n_cols is not None and bits > _BITS[dtype] and (n_cols * _BITS[dtype]) % bits:
        bits //= 2
    return AxpbyConfig(copy_bits=bits)


def can_implement(dtype: str, n_cols: int | None, config: AxpbyConfig) -> bool:
    if dtype not in DTYPES or config.threads % 32 or not 32 <= config.threads <= 1024:
        return False
    width = _BITS[dtype]
    if config.copy_bits > 128 or config.copy_bits % width or (config.copy_bits & (config.copy_bits - 1)):
        return False
    # A vector access must not straddle two rows, and every row must start on a vector boundary.
    return n_cols is None or (n_cols > 0 and (n_cols * width) % config.copy_bits == 0)


class Axpby:
    def __init__(self, dtype: str, rank: int, config: AxpbyConfig) -> None:
        self.dtype = DTYPES[dtype]
        self.rank = rank
        self.threads = config.threads
        self.copy_bits = config.copy_bits
        self.vec = config.copy_bits // _BITS[dtype]

    @cute.jit
    def __call__(self, mX: cute.Tensor, mY: cute.Tensor, a: cutlass.Float32, b: cutlass.Float32, stream: cuda.CUstream):
        if cutlass.const_expr(self.rank == 1):
            thr_layout = cute.make_layout(self.threads)
            val_layout = cute.make_layout(self.vec)
        else:
            # A warp spans one row slice of 32 * vec columns: coalesced, vector-aligned accesses.
            thr_layout = cute.make_ordered_layout((self.threads // 32, 32), order=(1, 0))
            val_layout = cute.make_ordered_layout((1, self.vec), order=(1, 0))
        tiler, tv_layout = cute.make_layout_tv(thr_layout, val_layout)  # tv: (Threads, Vec) -> tile coord

        gX = cute.zipped_divide(mX, tiler)  # (Tile, Rest)
        gY = cute.zipped_divide(mY, tiler)  # (Tile, Rest)
        cY = cute.zipped_divide(cute.make_identity_tensor(mY.shape), tiler)  # (Tile, Rest) -> coords
        self.kernel(gX, gY, cY, mY.shape, a, b, tv_layout).launch(
            grid=[cute.size(gY, mode=[1]), 1, 1], block=[self.threads, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        gX: cute.Tensor,
        gY: cute.Tensor,
        cY: cute.Tensor,
        shape: cute.Shape,
        a: cutlass.Float32,
        b: cutlass.Float32,
        tv_layout: cute.Layout,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()

        # Phase 1: this thread's vector of the CTA's tile.
        tXgX = cute.composition(gX[(None, bidx)], tv_layout)[tidx, None]  # (Vec)
        tYgY = cute.composition(gY[(None, bidx)], tv_layout)[tidx, None]  # (Vec)
        tYcY = cute.composition(cY[(None, bidx)], tv_layout)[tidx, None]  # (Vec) -> coords

        elem_atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), gX.element_type)
        vec_atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), gX.element_type, num_bits_per_copy=self.copy_bits)
        tXrX = cute.make_fragment_like(tXgX)
        tYrY = cute.make_fragment_like(tYgY)

        # The vector is contiguous along the last mode, so its last element being inside the
        # tensor means all of it is.
        inside = cute.elem_less(tYcY[cute.size(tYcY) - 1], shape)

        # Phase 2: load.
        if inside:
            cute.copy(vec_atom, tXgX, tXrX)
            cute.copy(vec_atom, tYgY, tYrY)
        else:
            tYpY = cute.make_rmem_tensor(tYcY.shape, cutlass.Boolean)
            for i in cutlass.range_constexpr(cute.size(tYpY)):
                tYpY[i] = cute.elem_less(tYcY[i], shape)
            cute.copy(elem_atom, tXgX, tXrX, pred=tYpY)
            cute.copy(elem_atom, tYgY, tYrY, pred=tYpY)

        # Phase 3: compute in fp32, round once.
        out = a * tXrX.load().to(cutlass.Float32) + b * tYrY.load().to(cutlass.Float32)
        tYrY.store(out.to(gY.element_type))

        # Phase 4: store.
        if inside:
            cute.copy(vec_atom, tYrY, tYgY)
        else:
            tYpY = cute.make_rmem_tensor(tYcY.shape, cutlass.Boolean)
            for i in cutlass.range_constexpr(cute.size(tYpY)):
                tYpY[i] = cute.elem_less(tYcY[i], shape)
            cute.copy(elem_atom, tYrY, tYgY, pred=tYpY)


@kernel("selftest.axpby")
def compile_axpby(dtype: str, n_cols: int | None, config: AxpbyConfig, arch: str):
    """The tvm-ffi launcher `fn(x, y, a, b)` for `dtype` ([N] when n_cols is None, else [M, n_cols])."""
    if not can_implement(dtype, n_cols, config):
        raise ValueError(f"selftest.axpby cannot implement dtype={dtype} n_cols={n_cols} with {config}")
    lead = cute.sym_int()  # one symbol for x and y: tvm-ffi checks that their extents agree
    shape, order = ((lead,), (0,)) if n_cols is None else ((lead, n_cols), (1, 0))
    x = make_fake_compact_tensor(DTYPES[dtype], shape, stride_order=order, assumed_align=16)
    y = make_fake_compact_tensor(DTYPES[dtype], shape, stride_order=order, assumed_align=16)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)  # torch's current stream at each call
    rank = len(shape)
    return cute_compile(Axpby(dtype, rank, config), x, y, cutlass.Float32(1.0), cutlass.Float32(1.0), stream, arch=arch)
