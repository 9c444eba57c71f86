"""b12x.quantization.mxfp8: bf16/fp16 rows -> MXFP8 (E4M3 values + UE8M0 scales, row-major and swizzled).

    plan(query, *, invocation=None, override=None)   query = MxFp8Query(k, dtype, max_rows) or a tuple
    quantize_rows(source, values, scale_rows, scale_mma, *, plan=None)   writes the caller's tensors
    is_supported(device=None)

Bit-exact with `_lib.quant.quantize_mxfp8` (FORMATS.md, MX formats); swizzled padding is the caller's.
"""

from ..._lib.lazy import lazy_attributes
from ..._lib.meta import OpMeta
from ..._lib.support import support_functions

META = OpMeta(
    name="mxfp8",
    group="quantization",
    api_style="planned",
    entry_points=("plan", "quantize_rows", "is_supported"),
    archs=("sm_90a", "sm_120a", "sm_121a"),
    dtypes=("bfloat16", "float16"),
    requires=("torch", "triton", "cuda"),
    notes="Triton kernel; K % 32 == 0; live M is a run-time argument; CPU tensors run the reference",
)

is_supported, why_unsupported = support_functions(META)

__getattr__, __dir__ = lazy_attributes(
    __name__, {"plan": ".api", "quantize_rows": ".api", "MxFp8Query": ".api"}, globals()
)

__all__ = [*META.entry_points, "META"]
