"""b12x.quantization.nvfp4: bf16/fp16 activations -> NVFP4 (packed E2M1 + swizzled E4M3 scales).

    plan(m, k, *, invocation=None, override=None)   capacity m rows, K % 16 == 0; invocation = dtype
    allocate_outputs(plan, *, device="cuda")        -> Outputs(packed, scales) at capacity
    run(*, plan, x, global_scale, outputs)          a prepared plan; no compile, graph safe
    quantize(x, global_scale)                       -> (packed, scales), one call
    is_supported(device=None)

Bit-exact with `_lib.quant.quantize_nvfp4` + `swizzle_scales(scales, 0)` (FORMATS.md, NVFP4).
"""

from ..._lib.lazy import lazy_attributes
from ..._lib.meta import OpMeta
from ..._lib.support import support_functions

META = OpMeta(
    name="nvfp4",
    group="quantization",
    api_style="planned",
    entry_points=("plan", "allocate_outputs", "run", "quantize", "is_supported"),
    archs=("sm_90a", "sm_120a", "sm_121a"),
    dtypes=("bfloat16", "float16"),
    requires=("torch", "triton", "cutlass-dsl", "tvm-ffi", "cuda"),
    notes="Triton kernels (a CuTe DSL tile opt-in); K % 16 == 0; live M is a run-time argument; CPU tensors "
    "run the reference",
)

is_supported, why_unsupported = support_functions(META)

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {"plan": ".api", "allocate_outputs": ".api", "run": ".api", "quantize": ".api", "Outputs": ".api"},
    globals(),
)

__all__ = [*META.entry_points, "META"]
