"""The torch custom op of gemm.blockscaled (`torch.ops.b12x.gemm_mm_`), for torch.compile.

Under `torch.compile`, `mm` (and so `w4a16`, the `mm_*` forms and the linear modules' products) validates and
allocates its output as usual, traced, then calls this op instead of launching: one opaque node that writes
`out` (and, for the "rope_append" epilogue, the two KV caches). At run time the op rebuilds the call and runs
the eager `mm` on it. The operands travel flattened: a 16-bit activation tensor, a (values, scales) pair or a
packed `Weight` each become four optional tensors, a form, a recipe and (n, k); a plan travels as its
integer handle. Private names: the Python API is the supported surface. (No `from __future__ import
annotations`: torch infers the op's schema from these annotations.)
"""

from typing import Optional

import torch

from ..._lib.custom_op import register_op
from ...preparation.plan import plan_from_handle
from .._shared.weight import Weight

FORMS = ("tensor", "pair", "weight")


def encode_operand(x) -> tuple:
    """(form, recipe, [values, scales, alpha, input_scale], n, k) of an mm operand (already validated)."""
    if isinstance(x, Weight):
        return "weight", x.recipe, [x.values, x.scales, x.alpha, x.input_scale], x.n, x.k
    if isinstance(x, tuple):
        return "pair", "", [x[0], x[1], None, None], 0, 0
    return "tensor", "", [x, None, None, None], 0, 0


def decode_operand(form: str, recipe: str, tensors, n: int, k: int):
    """`encode_operand` undone."""
    values, scales, alpha, input_scale = tensors
    if form == "weight":
        return Weight(recipe, values, scales, alpha, n, k, input_scale)
    if form == "pair":
        return (values, scales)
    return values


def gemm_mm_(
    out: torch.Tensor,
    rope_caches: list[torch.Tensor],
    tensors: list[Optional[torch.Tensor]],  # noqa: UP045 - torch's schema inference knows Optional, not X | None
    ints: list[int],
    lhs_form: str,
    lhs_recipe: str,
    rhs_form: str,
    rhs_recipe: str,
    ab_dtype: str,
    sf_dtype: str,
    c_dtype: str,
    epilogue: str,
    alpha: float,
    norm_eps: float,
) -> None:
    """tensors: lhs's four, rhs's four, residual, norm_weight, alpha (a tensor or None), cos, sin, slot_page,
    slot_off; ints: lhs n, k, rhs n, k, sf_vec_size, plan handle, expected_m (-1 / 0 / -1 for None); the strings
    "" for None."""
    from . import api

    lhs = decode_operand(lhs_form, lhs_recipe, tensors[0:4], ints[0], ints[1])
    rhs = decode_operand(rhs_form, rhs_recipe, tensors[4:8], ints[2], ints[3])
    residual, norm_weight, alpha_t = tensors[8], tensors[9], tensors[10]
    rope = None
    if rope_caches:
        cos, sin, slot_page, slot_off = tensors[11:15]
        rope = api.RopeAppend(cos, sin, rope_caches[0], rope_caches[1], slot_page, slot_off)
    api.mm(lhs, rhs, out, plan=plan_from_handle(ints[5]) if ints[5] else None,
           expected_m=None if ints[6] < 0 else ints[6], ab_dtype=ab_dtype or None, sf_dtype=sf_dtype or None,
           c_dtype=c_dtype or None, sf_vec_size=None if ints[4] < 0 else ints[4],
           alpha=alpha if alpha_t is None else alpha_t, epilogue=epilogue or None, residual=residual,
           norm_weight=norm_weight, norm_eps=norm_eps, rope=rope)  # fmt: skip


def call(lhs, rhs, out, *, plan, expected_m, ab_dtype, sf_dtype, c_dtype, sf_vec_size, alpha, epilogue, residual,
         norm_weight, norm_eps, rope) -> None:  # fmt: skip
    """`mm`'s arguments (validated, out allocated) as one call of the op."""
    # (mm checked the plan: prepared, so it has a handle)
    lf, lr, lt, ln, lk = encode_operand(lhs)
    rf, rr, rt, rn, rk = encode_operand(rhs)
    alpha_t = alpha if isinstance(alpha, torch.Tensor) else None
    rope_t = [None] * 4 if rope is None else [rope.cos, rope.sin, rope.slot_page, rope.slot_off]
    caches = [] if rope is None else [rope.k_cache, rope.v_cache]
    tensors = [*lt, *rt, residual, norm_weight, alpha_t, *rope_t]
    ints = [ln, lk, rn, rk, -1 if sf_vec_size is None else int(sf_vec_size), 0 if plan is None else plan.handle]
    ints.append(-1 if expected_m is None else int(expected_m))
    strings = (lf, lr, rf, rr, ab_dtype or "", sf_dtype or "", c_dtype or "", epilogue or "")
    scalar = 1.0 if alpha_t is not None else float(alpha)
    OP(out, caches, tensors, ints, *strings, scalar, float(norm_eps))


# Registered when api imports this module (registering inside a trace is not allowed).
OP = register_op("gemm_mm_", gemm_mm_, mutates_args=("out", "rope_caches"))
