"""The public entry points keep the names and parameter kinds the issues (#4-#8) give them: applications call them by
those names, positionally where the issue lists a parameter before `*`, by keyword after it.

Each row is the issue's own signature text. A parameter it lists must exist with the same kind (positional-or-keyword
/ keyword-only), in the same order among the positional ones, and be optional wherever the issue gives it a default.
Extra parameters are allowed only where no call written to the issue can notice them: keyword-only or trailing
positional ones with defaults. `**kwargs` in the issue means the op takes keywords the issue names elsewhere (bind's
scratch, a, ...): any keyword-only parameter, required or not, and the op need not take further ones. A
planned op's `Caps` (frozen, keyword-only in every issue) must take every listed field by keyword only."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest
import torch

pytestmark = pytest.mark.contract

P, K = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY

# (module, callable, the issue's signature text)
SIGNATURES = [
    # 4
    ("b12x.quantization.nvfp4", "plan", "m, k, *, invocation=None, override=None"),
    ("b12x.quantization.nvfp4", "allocate_outputs", 'plan, *, device="cuda"'),
    ("b12x.quantization.nvfp4", "run", "*, plan, x, global_scale, outputs"),
    ("b12x.quantization.nvfp4", "is_supported", "device=None"),
    ("b12x.quantization.mxfp8", "plan", "query, *, invocation=None, override=None"),
    ("b12x.quantization.mxfp8", "quantize_rows", "source, values, scale_rows, scale_mma, *, plan=None"),
    ("b12x.quantization.mxfp8", "is_supported", "device=None"),
    # 5
    ("b12x.norm.mhc", "plan", "caps, *, invocation=None, override=None"),
    ("b12x.norm.mhc", "bind", "plan, **kwargs"),
    (
        "b12x.norm.mhc",
        "run_pre",
        "residual, fn, hc_scale, hc_base, *, rms_eps, hc_eps, sinkhorn_iters, plan=None, residual_out=None, "
        "y_out=None, post_out=None, comb_out=None, norm_weight=None, norm_eps=0.0, binding=None",
    ),
    ("b12x.norm.mhc", "run_post", "x, residual, prev_post, prev_comb, *, plan, out=None"),
    (
        "b12x.norm.mhc",
        "run_post_pre",
        "x, residual, prev_post, prev_comb, fn, hc_scale, hc_base, *, rms_eps, hc_eps, sinkhorn_iters, plan=None, "
        "residual_out=None, y_out=None, post_out=None, comb_out=None, norm_weight=None, norm_eps=0.0, binding=None",
    ),
    ("b12x.norm.mhc", "is_supported", "device=None"),
    # 6
    ("b12x.gemm.blockscaled", "mm", "lhs, rhs, out=None, *, plan=None, expected_m=None, **kwargs"),
    (
        "b12x.gemm.blockscaled",
        "pack_weight",
        'weight, scale=None, *, recipe=None, global_scale=None, global_scale_kind="multiplier"',
    ),
    (
        "b12x.gemm.blockscaled",
        "mm_nvfp4",
        "lhs_values, lhs_scale_storage, rhs_values, rhs_scale_storage, alpha, *, plan=None, "
        "out_dtype=torch.bfloat16, stream=None",
    ),
    (
        "b12x.gemm.blockscaled",
        "mm_mxfp4",
        "lhs_values, lhs_scale_storage, rhs_values, rhs_scale_storage, *, plan=None, out_dtype=torch.bfloat16, "
        "stream=None",
    ),
    (
        "b12x.gemm.blockscaled",
        "mm_block_fp8",
        "lhs_values, lhs_scale, rhs_values, rhs_scale, *, plan=None, out_dtype=torch.bfloat16, stream=None",
    ),
    (
        "b12x.gemm.blockscaled",
        "w4a16",
        "source, weight, block_scale, global_scale, *, out=None, workspace=None, "
        'global_scale_kind="multiplier", stream=None, plan=None',
    ),
    ("b12x.gemm.blockscaled", "plan", "query, *, invocation=None, override=None"),
    ("b12x.gemm.blockscaled", "prewarm", "weight, token_counts, *, out_dtype=torch.bfloat16, stream=None"),
    ("b12x.gemm.blockscaled", "is_supported", "device=None"),
    *[
        (f"b12x.gemm.{m}", name, text)
        for m in ("mxfp8_linear", "tensor_fp8_linear")
        for name, text in (
            ("mm", "lhs, rhs, out=None, *, plan=None, expected_m=None, **kwargs"),
            ("pack_weight", 'weight, scale=None, *, recipe=None, global_scale=None, global_scale_kind="multiplier"'),
        )
    ],
    ("b12x.gemm.tensor_fp8_linear", "prewarm", "weight, token_counts, *, out_dtype=torch.bfloat16, stream=None"),
    ("b12x.gemm.block_fp8_linear", "plan", "caps, *, invocation=None, override=None"),
    ("b12x.gemm.block_fp8_linear", "bind", "plan, **kwargs"),
    (  # the one Caps the issues do not call keyword-only
        "b12x.gemm.block_fp8_linear",
        "Caps",
        "device, max_tokens, in_features, out_features, source_dtype=torch.bfloat16, output_dtype=None, "
        "output_mode=None, block_size=(128, 128)",
    ),
    (
        "b12x.gemm.block_fp8_linear",
        "run",
        "source=None, packed_weight=None, *, plan=None, bias=None, workspace=None, binding=None, stream=None",
    ),
    ("b12x.gemm.block_fp8_linear", "pack_weight", "weight, weight_scale, *, block_size=(128, 128)"),
    ("b12x.gemm.block_fp8_linear", "quantize_input", "source_tk, *, plan, out=None"),
    # 7
    (  # "plan_weights(**kwargs) and prepare_weights(**kwargs) with the keyword names above" (the Build section's)
        "b12x.moe.fused_moe",
        "plan_weights",
        "*, quant_modes, source_format, activation, params_dtype, num_experts, hidden_size, intermediate_size, "
        'w13_layout="w13", **kwargs',
    ),
    (
        "b12x.moe.fused_moe",
        "prepare_weights",
        "*, plan, w1_fp4, w1_blockscale, w1_global_scale, a1_gscale, w2_fp4, w2_blockscale, w2_global_scale, "
        "a2_gscale, **kwargs",
    ),
    ("b12x.moe.fused_moe", "bind", "plan, *, scratch, a, experts, topk_weights, topk_ids, output=None, **kwargs"),
    ("b12x.moe.fused_moe", "run", "*, binding"),
    ("b12x.moe.fused_moe", "route_topk", "plan, router_logits, topk_logits, topk_ids, topk_weights, **kwargs"),
    ("b12x.moe.fused_moe", "is_supported", "device=None"),
    # 8
    ("b12x.attention.paged", "plan", "caps, *, invocation=None, override=None"),
    (  # the Build section's keywords (sinks) and the Public API's (attention_sink_bias)
        "b12x.attention.paged",
        "bind",
        "plan, *, scratch, q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, output=None, "
        "k_descale=None, v_descale=None, sinks=None, attention_sink_bias=None, window_left=-1, **kwargs",
    ),
    ("b12x.attention.paged", "run", "*, binding, plan=None"),
    ("b12x.attention.paged", "is_supported", "device=None"),
    ("b12x.attention.paged", "clear_caches", ""),
]

# (module, the issue's Caps fields; every one keyword-only, "=" where the issue gives a default)
CAPS = [
    ("b12x.norm.mhc", "device, max_tokens, hidden_size, dtype=torch.bfloat16, split_k=None"),
    (
        "b12x.moe.fused_moe",
        "max_tokens, num_topk, device, weight_plan, quant_mode, apply_router_weight_on_input=False, "
        "swiglu_limit=None, swiglu_alpha=None, swiglu_beta=None",
    ),
    (
        "b12x.attention.paged",
        "device, mode, dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim_qk, head_dim_vo, page_size, "
        "max_total_q, max_batch, max_page_table_width, max_work_items, max_partial_rows, num_cache_pages, "
        "use_cuda_graph=False, copy_runtime_metadata=False, msa_block_sparse=False, config=None",
    ),
]


def issue_signature(text: str) -> inspect.Signature:
    """The issue's signature text as a Python signature (its defaults evaluated with torch in scope)."""
    return inspect.signature(eval(f"lambda {text}: None", {"torch": torch}))  # noqa: S307 - the table's own text


def mismatches(actual: inspect.Signature, wanted: inspect.Signature) -> list[str]:
    """How `actual` breaks a call written to `wanted` (module docstring's rules); [] when it does not."""
    got = actual.parameters
    found = []
    open_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in got.values())
    for name, want in wanted.parameters.items():
        if want.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        have = got.get(name)
        if have is None:
            if not open_kw or want.kind is P:  # a positional parameter cannot hide in **kwargs
                found.append(f"{name}: missing")
            continue
        if have.kind is not want.kind:
            found.append(f"{name}: {have.kind.description}, the issue says {want.kind.description}")
        if want.default is not inspect.Parameter.empty and have.default is inspect.Parameter.empty:
            found.append(f"{name}: required, the issue gives it a default ({want.default!r})")
    positional = [n for n, p in wanted.parameters.items() if p.kind is P]
    have_pos = [n for n, p in got.items() if p.kind in (P, inspect.Parameter.POSITIONAL_ONLY)]
    if have_pos[: len(positional)] != positional:
        found.append(f"positional order {have_pos}, the issue says {positional}")
    wants_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in wanted.parameters.values())
    for name, p in got.items():
        if name in wanted.parameters or p.kind in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
            continue
        if p.kind is K and wants_kw:
            continue  # the issue's **kwargs: the op names its keywords (bind's scratch, a, ...)
        if p.default is inspect.Parameter.empty:
            found.append(f"{name}: an extra required parameter")
    return found


def _target(module: str, name: str):
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("module, name, text", SIGNATURES, ids=[f"{m[5:]}.{n}" for m, n, _ in SIGNATURES])
def test_entry_point_signature(module, name, text):
    assert mismatches(inspect.signature(_target(module, name)), issue_signature(text)) == []


@pytest.mark.parametrize("module, text", CAPS, ids=[m[5:] for m, _ in CAPS])
def test_caps_fields_are_keyword_only_and_frozen(module, text):
    caps = _target(module, "Caps")
    assert dataclasses.is_dataclass(caps) and caps.__dataclass_params__.frozen
    assert mismatches(inspect.signature(caps), issue_signature(f"*, {text}")) == []


def test_the_rules_catch_what_breaks_a_call():
    """The checker itself: each way a call written to the issue would break is reported; harmless extras are not."""
    want = issue_signature("a, b, *, c=None, d=1")
    assert mismatches(issue_signature("a, b, e=2, *, c=None, d=1, f=0"), want) == []
    assert (
        mismatches(issue_signature("a, b, *, c=None, d=1, **kw"), issue_signature("a, b, *, c=None, d=1, **kw")) == []
    )
    assert mismatches(issue_signature("b, a, *, c=None, d=1"), want) == [
        "positional order ['b', 'a'], the issue says ['a', 'b']"
    ]
    assert mismatches(issue_signature("a, *, b, c=None, d=1"), want)[0].startswith("b: keyword-only")
    assert mismatches(issue_signature("a, b, c=None, *, d=1"), want)[0].startswith("c: positional or keyword")
    assert mismatches(issue_signature("a, b, *, c, d=1"), want) == ["c: required, the issue gives it a default (None)"]
    assert mismatches(issue_signature("a, b, *, c=None"), want) == ["d: missing"]
    assert mismatches(issue_signature("a, b, *, c=None, d=1, e"), want) == ["e: an extra required parameter"]
    assert mismatches(issue_signature("a, b, **kw"), want) == []  # keyword-only names may arrive through **kwargs
    assert mismatches(issue_signature("a, *, s, t=0"), issue_signature("a, **kwargs")) == []
    assert mismatches(issue_signature("a, s"), issue_signature("a, **kwargs")) == ["s: an extra required parameter"]
