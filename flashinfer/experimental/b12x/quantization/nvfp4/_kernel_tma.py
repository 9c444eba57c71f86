"""The NVFP4 quantizer's "pairs" program fed by the Tensor Memory Accelerator (`NvFp4Config.tma`, bf16 only).

Why (issue #4, >= 80% of the copy ceiling at 4096 rows). Every earlier tile loads its input into registers
(`ld.global`): a thread's bytes in flight are what its registers hold, so each program is a chain of load
round trips and math, and the grid's last partial wave drains with a quarter of the bytes in flight
(session 32's `tail`). A cp.async ring (session 31) moved the loads off the registers but issued one L2
request per 16 bytes. Here one thread of the program issues a bulk tensor copy (`cp.async.bulk.tensor`) of
the whole block_m x block_k tile into shared memory, `tma` - 1 tiles ahead of the one being encoded
(Triton's software pipeliner over `tl.range(..., num_stages=tma)`, mbarrier-completed), so the bytes in
flight per SM are set by shared memory, not registers, and the grid is persistent: `persistent` programs
an SM (capped to what is resident), program p taking tiles p, p + P, p + 2P, ... in row-major order, so
the programs resident at once read one contiguous stretch of the input and finish within one tile of
each other.

What is the same as `_kernel_pairs`: the encode and the stores (`_encode_store_pairs`, the lane-table
thresholds with `lut`), and so the bits. The tile comes out of shared memory as [rows, blocks, 8] int32
words (two bf16 each), split into the blocks' two halves. Rows at or past the live m and columns past K
are zero-filled by the copy itself (the descriptor's shape is [m, K / 2] words), so their scales are 0
(the oracle's padding) and their codes are masked off the stores, as the pointer loads' masks did.

The descriptor is built on the host per launch from x (`TensorDescriptor`, Triton's launcher encodes it:
x must be 16-byte aligned, its rows 16-byte multiples: K % 16 == 0 gives that); under TRITON_INTERPRET the
interpreter runs the same descriptor loads on CPU tensors.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..._lib.triton_pdl import gdc_enter
from ._kernel_pairs import _encode_store_pairs, _tile_blocks
from ._pairs import lut_prologue, pairs_prologue


@triton.jit(do_not_specialize=["gs_ptr", "gs_value", "gs_on_device", "m"], do_not_specialize_on_alignment=["gs_ptr"])
def _nvfp4_tma_kernel(
    x_desc,  # descriptor of x as [m, K / 2] int32 words, block [BLOCK_M, BLOCK_K / 2]
    packed_ptr,  # [m, K/2] uint8 out
    scales_ptr,  # uint8 out: E4M3 scales in the 128x4 swizzled layout, ceil128(m) rows
    gs_ptr,  # fp32 [1]: the global scale when gs_on_device != 0
    gs_value,  # fp32: the global scale when gs_on_device == 0
    gs_on_device,
    m,  # live rows
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SCALE_WORDS: tl.constexpr,
    STAGES: tl.constexpr,  # NvFp4Config.tma: the software pipeline's stages
    STREAM: tl.constexpr,  # streaming stores
    LUT: tl.constexpr,
    ASM: tl.constexpr,
    PDL: tl.constexpr,
):
    gdc_enter(PDL)
    NK: tl.constexpr = ((K + 63) // 64 * 64 + BLOCK_K - 1) // BLOCK_K  # column tiles over ceil64(K)
    TILE_NB: tl.constexpr = BLOCK_K // 16
    tiles = (m + 127) // 128 * (128 // BLOCK_M) * NK  # `grid` keeps this below 2^31
    gs = tl.where(gs_on_device != 0, tl.load(gs_ptr), gs_value)
    scale, rg, gs_k = pairs_prologue(gs, ASM)
    lut = lut_prologue(tl.zeros((BLOCK_M, TILE_NB), tl.int32), scale, rg, gs_k, ASM) if LUT else None
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), num_stages=STAGES):
        pid_m = t // NK
        pid_k = t - pid_m * NK
        w = x_desc.load([pid_m * BLOCK_M, pid_k * (BLOCK_K // 2)])  # [BLOCK_M, BLOCK_K / 2] words
        ua, ub = tl.split(tl.permute(tl.reshape(w, (BLOCK_M, TILE_NB, 2, 4)), (0, 1, 3, 2)))
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        bmask, blk = _tile_blocks(rows < m, pid_k, K, BLOCK_K)
        _encode_store_pairs(
            ua, ub, bmask, blk, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows.to(tl.int64), pid_k,
            K, BLOCK_K, SCALE_WORDS, ASM, STREAM, lut, LUT,
        )  # fmt: skip


def constexprs(k: int, config, *, asm: bool = True) -> tuple:
    """`_nvfp4_tma_kernel`'s constexpr arguments in signature order; asm=False (the interpreter) drops
    inline PTX and PDL."""
    c = config
    return (k, c.block_m, c.block_k, c.scale_words, c.tma, c.stream, c.lut, asm, int(c.pdl and asm))


def descriptor(x, m: int, k: int, config):
    """x's first m rows as the kernel's [m, K / 2] int32 words, in tiles of block_m x block_k / 2."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    words = x.view(torch.int32)  # [rows, K / 2]: x is contiguous, K % 16 == 0
    return TensorDescriptor(words, [m, k // 2], [k // 2, 1], [config.block_m, config.block_k // 2])


def source(k: int, config):
    """The ASTSource of `_nvfp4_tma_kernel` for bf16 input at (K, config)."""
    from triton.compiler import ASTSource

    aligned = [["tt.divisibility", 16]]
    signature = {
        "x_desc": f"tensordesc<i32[{config.block_m}, {config.block_k // 2}]>",
        "packed_ptr": "*u8",
        "scales_ptr": "*u8",
        "gs_ptr": "*fp32",
        "gs_value": "fp32",
        "gs_on_device": "i32",
        "m": "i32",
    }
    names = ("K", "BLOCK_M", "BLOCK_K", "SCALE_WORDS", "STAGES", "STREAM", "LUT", "ASM", "PDL")
    signature.update({n: "constexpr" for n in names})
    return ASTSource(
        _nvfp4_tma_kernel, signature, dict(zip(names, constexprs(k, config))), {(1,): aligned, (2,): aligned}
    )


def launch_interpreted(x, packed, scales, gs_ptr, gs_value, gs_on_device, m, k, config, grid) -> None:
    """One launch through the JIT function (TRITON_INTERPRET=1, CPU tensors)."""
    args = (descriptor(x, m, k, config), packed, scales, gs_ptr, gs_value, gs_on_device, m)
    _nvfp4_tma_kernel[grid](*args, *constexprs(k, config, asm=False), num_warps=config.num_warps)
