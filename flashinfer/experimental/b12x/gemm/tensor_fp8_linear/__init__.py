"""b12x.gemm.tensor_fp8_linear: per-tensor FP8 linear layer with inline activation quantization (one-shot).

pack_weight(weight, scale=None, *, input_scale=None) -> Weight (tensor-FP8)
mm(lhs, rhs, out=None, *, plan=None, expected_m=None, input_scale=None, **kwargs)
prewarm(weight, token_counts, *, out_dtype=torch.bfloat16, stream=None)
is_supported(device=None)
"""

from ..._lib.lazy import lazy_attributes
from ..._lib.meta import OpMeta
from ..._lib.support import support_functions

META = OpMeta(
    name="tensor_fp8_linear",
    group="gemm",
    api_style="oneshot",
    entry_points=("mm", "pack_weight", "prewarm", "is_supported"),
    archs=("sm_90a", "sm_120a", "sm_121a"),
    dtypes=("bfloat16", "float16"),
    requires=("torch", "cutlass-dsl", "tvm-ffi", "cuda"),
    notes=(
        "activation quantized with torch ops (static or dynamic per-tensor scale), then the gemm.blockscaled "
        "tensor-FP8 kernels (CuTe DSL mma.sync); K % 128 == 0, N % 16 == 0; CPU runs the references"
    ),
)

is_supported, why_unsupported = support_functions(META)

__getattr__, __dir__ = lazy_attributes(__name__, {"mm": ".api", "pack_weight": ".api", "prewarm": ".api"}, globals())

__all__ = [*META.entry_points, "META"]
