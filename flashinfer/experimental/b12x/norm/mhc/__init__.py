"""b12x.norm.mhc: fused RMS-norm + hyper-connection residual mixing (DeepSeek mHC), multiplicity 4.

    caps = mhc.Caps(device="cuda", max_tokens=8192, hidden_size=7168)
    plan = mhc.plan(caps)
    with b12x.PreparationSession("cuda") as session:
        session.prepare([plan])                   # compile, workspace, prime
    residual, post, comb, y = mhc.run_post_pre(x, residual, post, comb, fn, hc_scale, hc_base,
                                               rms_eps=1e-6, hc_eps=1e-6, sinkhorn_iters=20, plan=plan)

Math and shapes: `reference.py` (FORMATS.md "norm.mhc"). Importing this package loads nothing heavy.
"""

from ..._lib.lazy import lazy_attributes
from ..._lib.meta import OpMeta
from ..._lib.support import support_functions

META = OpMeta(
    name="mhc",
    group="norm",
    api_style="planned",
    entry_points=("Caps", "plan", "bind", "run_pre", "run_post", "run_post_pre", "is_supported", "MULT", "MIXES"),
    archs=("sm_90a", "sm_120a", "sm_121a"),
    dtypes=("bfloat16", "float16"),
    requires=("torch", "triton", "cuda"),
    notes=(
        "Triton; mixes on mma.sync (fn split hi + lo in the activation dtype); split-K partials in the workspace, "
        "then a row pass 2 (sm_90a at every T); on sm_120a one launch per call from MhcConfig.fused_min_tokens "
        "tokens (the last split of each token block finishes it)"
    ),
)

is_supported, why_unsupported = support_functions(META)

MULT = 4  # streams per token (reference.MULT)
MIXES = 24  # 4 pre + 4 post + 16 comb (reference.MIXES)

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {"Caps": ".api", "plan": ".api", "bind": ".api", "run_pre": ".api", "run_post": ".api", "run_post_pre": ".api"},
    globals(),
)

__all__ = ["META", *META.entry_points]


def clear_caches() -> None:
    """Drop the functional form's default plans (called by `b12x.clear_all_caches`)."""
    import sys

    api = sys.modules.get(__name__ + ".api")
    if api is not None:
        api.clear_caches()
