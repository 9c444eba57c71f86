"""b12x.gemm.block_fp8_linear: DeepSeek block-FP8 linear layer, input requantized inline (planned op).

    Caps(device, max_tokens, in_features, out_features, source_dtype=torch.bfloat16, output_dtype=None,
         output_mode="scratch", block_size=(128, 128))
    plan(caps, *, invocation=None, override=None) -> prepare in a PreparationSession
    bind(plan, *, source, packed_weight, bias=None, workspace=None)
    run(source=None, packed_weight=None, *, plan=None, bias=None, workspace=None, binding=None, stream=None)
    pack_weight(weight, weight_scale, *, block_size=(128, 128)); quantize_input(source_tk, *, plan, out=None)
    is_supported(device=None)

y = x W^T (+ bias) with x quantized per token per 128 to E4M3 (bit-exact with
`_lib.quant.quantize_block_fp8_act`) and W in 128x128 blocks; output in the input dtype by default.
"""

from ..._lib.lazy import lazy_attributes
from ..._lib.meta import OpMeta
from ..._lib.support import support_functions

META = OpMeta(
    name="block_fp8_linear",
    group="gemm",
    api_style="planned",
    entry_points=("Caps", "plan", "bind", "run", "pack_weight", "quantize_input", "is_supported"),
    archs=("sm_90a", "sm_120a", "sm_121a"),
    dtypes=("bfloat16", "float16"),
    requires=("torch", "cutlass-dsl", "tvm-ffi", "cuda"),
    notes=(
        "CuTe DSL per-token x 128 E4M3 quantizer + the gemm.blockscaled fp8_block kernels (decode kernel for "
        "T <= 64, tiled above); K % 128 == 0, N % 16 == 0; bias added in place after the GEMM; CPU plans run "
        "the reference"
    ),
)

is_supported, why_unsupported = support_functions(META)

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {
        "Caps": ".api",
        "plan": ".api",
        "bind": ".api",
        "run": ".api",
        "pack_weight": ".api",
        "quantize_input": ".api",
        "Binding": ".api",
    },
    globals(),
)

__all__ = [*META.entry_points, "META"]
