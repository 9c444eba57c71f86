"""The warp-level MMA ceiling: mma.sync in a register-only loop (no loads), for bench_ceilings --mma.

Every warp of a full grid runs `iters` rounds of `chains` independent accumulator chains of one
mma.sync shape, then stores the sum of its accumulators (so nothing is dead code). The fragments
change every round (one IMAD a fragment word, a linear congruential step): with constant fragments
ptxas hoists whatever does not depend on the accumulator out of the loop. On sm_90a that is most of
an e4m3 mma.sync, which ptxas emulates (F2FP to f16, HMMA.16816 into zero, FADD into the
accumulator): session 22's "1575 TFLOP/s" e4m3 ceiling timed the FADDs of a loop whose 4 HMMAs had
been hoisted (SASS, session 23). Each chain XORs its index into B (one LOP a word): with one B
for all chains ptxas computes the emulated product once a round and only the FADDs repeat. The
operand bits are garbage after the first round; MMA timing does not depend on the values.
FLOPs: grid warps x iters x chains x (2 M N K of the shape). What it answers: the most any
b12x kernel built on warp MMA (DESIGN.md section 5: no wgmma) can reach on this GPU, per input type:
bf16 m16n8k16 and e4m3 m16n8k32 (e.g. whether issue #6's MXFP8 target of 0.55x cuBLASLt's FP8 GEMM is
within an FP8 mma.sync kernel's reach on the H200).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from flashinfer.experimental.b12x._lib.ptx import DEVICE

# kind -> (FLOPs of one mma.sync, A fragment word, B fragment word): 1.0 in every element
KINDS = {"bf16": (2 * 16 * 8 * 16, 0x3F803F80, 0x3F803F80), "e4m3": (2 * 16 * 8 * 32, 0x38383838, 0x38383838)}
THREADS = 256
LCG_MUL, LCG_ADD = 1664525, 1013904223  # per-round fragment update (Numerical Recipes' LCG)


class MmaPeak:
    def __init__(self, kind: str, chains: int = 8) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {tuple(KINDS)}, got {kind!r}")
        if not 1 <= chains <= 16:
            raise ValueError(f"chains must be 1..16, got {chains}")
        self.kind, self.chains = kind, chains

    @cute.jit
    def __call__(self, mOut: cute.Tensor, iters: Int32, stream: cuda.CUstream):
        self.kernel(mOut, iters).launch(grid=[mOut.shape[0] // THREADS, 1, 1], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mOut: cute.Tensor, iters: Int32):
        tid, _, _ = cute.arch.thread_idx()
        bx, _, _ = cute.arch.block_idx()
        _, a_word, b_word = KINDS[self.kind]
        salt = cutlass.Uint32(tid & 1)  # run-time operands: nothing folds at compile time
        a = [DEVICE.u32(a_word) ^ salt for _ in range(4)]
        b = [DEVICE.u32(b_word) ^ salt for _ in range(2)]
        acc = [Float32(0.0) for _ in range(4 * self.chains)]
        for _ in cutlass.range(iters):
            a = [w * cutlass.Uint32(LCG_MUL) + cutlass.Uint32(LCG_ADD) for w in a]
            b = [w * cutlass.Uint32(LCG_MUL) + cutlass.Uint32(LCG_ADD) for w in b]
            for c in cutlass.range_constexpr(self.chains):
                bc = [w ^ cutlass.Uint32(c) for w in b]  # each chain its own B, as each n8 tile of a GEMM
                if cutlass.const_expr(self.kind == "bf16"):
                    acc[4 * c : 4 * c + 4] = DEVICE.mma("bfloat16", a, bc, acc[4 * c : 4 * c + 4])
                else:
                    acc[4 * c : 4 * c + 4] = DEVICE.mma_fp8(a, bc, acc[4 * c : 4 * c + 4])
        total = Float32(0.0)
        for v in acc:
            total = total + v
        mOut[bx * THREADS + tid] = total


def compile_peak(kind: str, arch: str, chains: int = 8):
    """A launcher `fn(out fp32 [ctas * 256], iters)` on torch's current stream."""
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

    from flashinfer.experimental.b12x._lib.compile import cute_compile

    out = make_fake_compact_tensor(Float32, (cute.sym_int(),), assumed_align=16)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(MmaPeak(kind, chains), out, Int32(1), stream, arch=arch)


def flops(kind: str, ctas: int, iters: int, chains: int = 8) -> int:
    return ctas * (THREADS // 32) * iters * chains * KINDS[kind][0]
