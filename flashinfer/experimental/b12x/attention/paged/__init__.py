"""b12x.attention.paged: attention over a paged KV cache (planned op).

Implemented: modes "decode" (one query row per request; split-KV chosen on device), "extend"
(ragged q_len per request, causal right-aligned; FlashAttention-2 style kernel) and "verify" (the
extend kernel, one q_len for all requests), with bf16/fp16 q, KV in q's dtype or fp8 e4m3
(per-request, per-KV-head descales), head_dim_qk and head_dim_vo each in {64, 128, 256}, page size
16/32/64/128, GQA groups Hq/Hkv <= 16, sliding window, sink logits.
Not yet: msa_block_sparse (plan raises NotImplementedError).
Lifecycle and contracts: `api.py`; math: `reference.py`; FORMATS.md "attention.paged".
"""

from ..._lib.lazy import lazy_attributes
from ..._lib.meta import OpMeta
from ..._lib.support import support_functions

META = OpMeta(
    name="paged",
    group="attention",
    api_style="planned",
    entry_points=(
        "Caps",
        "plan",
        "bind",
        "run",
        "run_decode",
        "run_extend",
        "is_supported",
        "why_unsupported",
        "clear_caches",
        "default_max_work_items",
        "default_max_partial_rows",
        "paged_attention_reference",
    ),
    archs=("sm_90a", "sm_120a"),
    dtypes=("bfloat16", "float16", "float8_e4m3fn"),
    requires=("cutlass-dsl", "tvm-ffi", "cuda"),
    notes=(
        "modes decode / extend / verify (cu_seqlens_q, causal right-aligned); q bf16/fp16; KV = q dtype or "
        "fp8 e4m3 with [batch, Hkv] descales; head_dim 64/128/256 (qk == vo); page 16/32/64/128; Hq/Hkv <= 16; "
        "window_left; sinks; LSE base 2. msa_block_sparse: NotImplementedError at plan time."
    ),
)

is_supported, why_unsupported = support_functions(META)

_LAZY = {
    "Caps": ".api",
    "plan": ".api",
    "bind": ".api",
    "run": ".api",
    "run_decode": ".api",
    "run_extend": ".api",
    "clear_caches": ".api",
    "default_max_work_items": ".api",
    "default_max_partial_rows": ".api",
    "paged_attention_reference": ".reference",
}
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
__all__ = ["META", *META.entry_points]
