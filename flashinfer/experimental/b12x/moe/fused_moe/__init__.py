"""b12x.moe.fused_moe: fused mixture-of-experts layer (FC1 -> activation -> FC2 per routed expert) on
FP4 expert weights (NVFP4 or MXFP4), recipes nvfp4 / w4a16 / w4a8_mx / w4a8_nvfp4.

    wplan = fused_moe.plan_weights(quant_modes="nvfp4", source_format="modelopt_nvfp4", activation="silu",
                                   num_experts=E, hidden_size=H, intermediate_size=I, w13_layout="w13")
    experts = fused_moe.prepare_weights(plan=wplan, w1_fp4=..., w1_blockscale=..., w1_global_scale=...,
                                        a1_gscale=..., w2_fp4=..., w2_blockscale=..., w2_global_scale=...,
                                        a2_gscale=...)
    p = fused_moe.plan(fused_moe.Caps(max_tokens=T, num_topk=k, device="cpu", weight_plan=wplan,
                                      quant_mode="nvfp4"))
    with b12x.PreparationSession("cpu") as session:
        session.prepare([p])
    fused_moe.route_topk(p, router_logits, topk_logits, topk_ids, topk_weights)
    out = fused_moe.run(binding=fused_moe.bind(p, a=a, experts=experts, topk_weights=topk_weights,
                                               topk_ids=topk_ids))

Math and formats: `reference.py`, `weights.py` (FORMATS.md "moe.fused_moe"). CUDA tensors run the device
pipeline (api.py: Triton routing/gather/requantize/combine in `_routing.py` / `_combine.py` around the
CuTe expert GEMMs of `_kernel_experts.py`), CPU tensors the reference. Importing this package loads
nothing heavy.
"""

from ..._lib.lazy import lazy_attributes
from ..._lib.meta import OpMeta
from ..._lib.support import support_functions

META = OpMeta(
    name="fused_moe",
    group="moe",
    api_style="planned",
    entry_points=(
        "Caps",
        "plan",
        "bind",
        "run",
        "route_topk",
        "plan_weights",
        "prepare_weights",
        "WeightPlan",
        "ExpertWeights",
        "is_supported",
    ),
    archs=("sm_90a", "sm_120a"),
    dtypes=("bfloat16", "nvfp4", "mxfp4", "mxfp8"),
    requires=("torch", "triton", "cutlass-dsl", "tvm-ffi"),
    notes=(
        "Weight planning/packing (gemm FP4 Weight layout stacked per expert, FC1 gate rows first); on CUDA "
        "route + gather/quantize (Triton; one launch for T*k <= 1024, a counting sort above), FC1 + "
        "activation and FC2 (CuTe DSL, warp mma.sync), requantize and combine (Triton); CPU tensors run "
        "the fp32 reference."
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
        "route_topk": ".api",
        "plan_weights": ".weights",
        "prepare_weights": ".weights",
        "WeightPlan": ".weights",
        "ExpertWeights": ".weights",
    },
    globals(),
)

__all__ = ["META", *META.entry_points]
