"""b12x.gemm.mxfp8_linear: MXFP8 linear layer with inline activation quantization (one-shot op).

pack_weight(weight, scale=None, **kwargs) -> Weight (MXFP8)
mm(lhs, rhs, out=None, *, plan=None, expected_m=None, **kwargs)   lhs bf16/fp16 [M, K] or a pair
prewarm(weight, token_counts, *, out_dtype=torch.bfloat16, stream=None)
is_supported(device=None)
"""

from ..._lib.lazy import lazy_attributes
from ..._lib.meta import OpMeta
from ..._lib.support import support_functions

META = OpMeta(
    name="mxfp8_linear",
    group="gemm",
    api_style="oneshot",
    entry_points=("mm", "pack_weight", "prewarm", "is_supported"),
    archs=("sm_90a", "sm_120a", "sm_121a"),
    dtypes=("bfloat16", "float16"),
    requires=("torch", "cutlass-dsl", "tvm-ffi", "triton", "cuda"),
    notes=(
        "activations quantized by quantization.mxfp8 (Triton), then the gemm.blockscaled MXFP8 kernels "
        "(CuTe DSL mma.sync on exact bf16 dequantization); K % 128 == 0, N % 16 == 0; CPU runs the references"
    ),
)

is_supported, why_unsupported = support_functions(META)

__getattr__, __dir__ = lazy_attributes(
    __name__, {"mm": ".api", "pack_weight": ".api", "prewarm": ".api", "quantize": ".api"}, globals()
)

__all__ = [*META.entry_points, "META"]
