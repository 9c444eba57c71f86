"""b12x.gemm.blockscaled: block-scaled GEMM (NVFP4, MXFP4, MXFP8, block-FP8, tensor-FP8) and W4A16/W8A16.

    mm(lhs, rhs, out=None, *, plan=None, expected_m=None, ab_dtype=, sf_dtype=, c_dtype=, sf_vec_size=, alpha=)
    mm_nvfp4(...), mm_mxfp4(...), mm_block_fp8(...)       recipe shorthands
    w4a16(source, weight, block_scale, global_scale, ...)  bf16/fp16 activations x FP4/FP8 weights
    pack_weight(weight, scale=None, *, recipe=, global_scale=, global_scale_kind=) -> Weight
    plan(query, *, invocation=None, override=None); prewarm(weight, token_counts, ...)
    is_supported(device=None)

C = alpha * deq(A) @ deq(B)^T (reference.py). Kernels (CuTe DSL, warp mma.sync, sm_90a/sm_120a/sm_121a):
a decode kernel for M <= 64 (weight rows as the MMA's M side, split-K across the CTA's warps), a
tiled kernel above (register prefetch, exact in-register dequantization to bf16/fp16 shared tiles;
an FP8 mma.sync variant for tensor/block-FP8 is a tuning candidate), and from M = 1024 on, for
NVFP4 / MXFP4 / MXFP8 / tensor-FP8 weights, the two-pass path (`_twopass.py`: each operand
dequantized once into 16-bit rows, then a cp.async mma.sync GEMM; its workspace comes from torch's
caching allocator per call). Heuristics: fitted to H200 sweeps (docs/performance.md). SM120 / SM121: a native block-scaled MMA kernel
(`_kernel_sm120`, MmaMXF4NVF4Op / MmaMXF4Op / MmaMXF8Op) for the tiled sizes of NVFP4 / MXFP4 / MXFP8
pairs compiles for sm_120a and is selected there only with B12X_GEMM_SM120_MMA=1: it has never run
(no SM120 GPU in this project's sessions).
"""

from ..._lib.lazy import lazy_attributes
from ..._lib.meta import OpMeta
from ..._lib.support import support_functions

META = OpMeta(
    name="blockscaled",
    group="gemm",
    api_style="oneshot",
    entry_points=(
        "mm",
        "mm_nvfp4",
        "mm_mxfp4",
        "mm_block_fp8",
        "w4a16",
        "pack_weight",
        "plan",
        "prewarm",
        "Weight",
        "GemmQuery",
        "is_supported",
    ),
    archs=("sm_90a", "sm_120a", "sm_121a"),
    dtypes=("bfloat16", "float16", "nvfp4", "mxfp4", "mxfp8", "fp8_block", "fp8_tensor"),
    requires=("torch", "cutlass-dsl", "tvm-ffi", "cuda"),
    notes=(
        "CuTe DSL kernels (warp mma.sync on exactly dequantized bf16/fp16 tiles) for every recipe and "
        "the weight-only forms: decode kernel for M <= 64, tiled kernel above; K % 128 == 0, N % 16 == 0. "
        "SM120 block-scaled MMA kernel for tiled NVFP4/MXFP4/MXFP8 pairs: compiled for sm_120a, never run, "
        "opt-in with B12X_GEMM_SM120_MMA=1 (sm_120a otherwise runs the portable kernels). "
        "CPU tensors run the reference. The sm_90a kernels pass the gemm gpu tier on H100 / H200 (docs/validation.md); "
        "kernel logic is also checked on a CPU PTX emulator."
    ),
)

is_supported, why_unsupported = support_functions(META)

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {
        "mm": ".api",
        "mm_nvfp4": ".api",
        "mm_mxfp4": ".api",
        "mm_block_fp8": ".api",
        "w4a16": ".api",
        "plan": ".api",
        "prewarm": ".api",
        "clear_caches": ".api",
        "GemmQuery": ".api",
        "pack_weight": ".._shared.weight",
        "Weight": ".._shared.weight",
    },
    globals(),
)

__all__ = [*META.entry_points, "META"]
