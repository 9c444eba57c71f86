"""Host side of `mm(..., epilogue=..., residual=...)` and `GemmQuery(epilogue=..., pdl=...)`: checks,
output shapes and the launcher's residual argument (the kernel is `_kernel_decode_fused`).

    epilogue="none"      C = alpha * A B^T                               [M, N]
    epilogue="silu_mul"  C = silu(P[:, :I]) * P[:, I:], P = alpha A B^T  [M, I] for a [2I, K] weight
    epilogue="residual"  C = alpha * A B^T + residual                    [M, N], residual [M, N] in C's dtype
    epilogue="rope_append"  P = alpha A B^T for a qkv weight [(Hq + 2 Hkv) D, K] (q, k, v heads): q heads
                         rotated (NeoX rotate-half with cos / sin fp32 [T, D/2]) -> out [M, Hq, D]; k heads
                         rotated and v heads as they are -> row slot_page[t] * page_size + slot_off[t] of
                         k_cache / v_cache [pages, page_size, Hkv, D] (C's dtype); nothing else is written.
                         mm takes the tensors as `rope=RopeAppend(...)`, plans the static
                         `GemmQuery(rope=RopeLayout(q_heads, kv_heads, head_dim, page_size))`
    pdl="off" | "wait" | "prefetch"  (plans only) programmatic dependent launch, with an L2 prefetch of
                         the weights before the wait for "prefetch" (_kernel_decode_fused docstring)
    norm_weight=g, norm_eps  A replaced by rmsnorm(A) = A * rsqrt(mean(A^2) + eps) * g (16-bit A, g [K] in
                         A's dtype; plans: GemmQuery(norm=True))

All in fp32 before one rounding to C's dtype (reference.apply_epilogue). Fused epilogues and pdl run
in the decode buckets (M <= 64) of 2-D operands; a plan compiles them at prepare time like any
variant, the one-shot `mm` compiles on first use.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..._lib.checks import check_aligned
from .._shared import launch as L
from .._shared.operands import TORCH_OUT, describe

EPILOGUES = ("none", "silu_mul", "residual", "rope_append")
PDL_MODES = ("off", "wait", "prefetch")
MAX_M = 64  # the decode buckets'


ROPE_DTYPES = ("bfloat16", "float16")  # "rope_append": C's dtype, which the caches share


@dataclass(frozen=True)
class RopeLayout:
    """Static facts of the "rope_append" epilogue (compile key; GemmQuery.rope): q / kv head counts,
    the head dim D (a power of two >= 16: a pair (j, j + D/2) is found with a shift and a mask) and
    the paged cache's page size. The weight has rows = (q_heads + 2 kv_heads) D."""

    q_heads: int
    kv_heads: int
    head_dim: int
    page_size: int

    @property
    def rows(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim

    @property
    def pairs(self) -> int:
        """Rotation pairs (j, j + D/2) of all heads: what the kernel's CTAs split."""
        return self.rows // 2


def rope_reason(layout) -> str | None:
    """None when `layout` is a RopeLayout the kernel implements, else the reason."""
    if not isinstance(layout, RopeLayout):
        return f"must be a RopeLayout(q_heads, kv_heads, head_dim, page_size), got {type(layout).__name__}"
    for name in ("q_heads", "kv_heads", "head_dim", "page_size"):
        v = getattr(layout, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            return f"{name} must be an int >= 1, got {v!r}"
    d = layout.head_dim
    if d < 16 or d & (d - 1):
        return f"head_dim must be a power of two >= 16 (pairs j, j + D/2 by shift and mask), got {d}"
    return None


@dataclass(frozen=True, eq=False)
class RopeAppend:
    """The tensors of `mm(..., epilogue="rope_append", rope=RopeAppend(...))` (T = M tokens):
    cos, sin fp32 [T, D/2]; k_cache, v_cache [pages, page_size, Hkv, D] contiguous in C's dtype;
    slot_page, slot_off int64 [T]: token t's k and v go to row slot_page[t] * page_size + slot_off[t]
    (the slots of one call must be distinct). Head counts and D come from the shapes."""

    cos: torch.Tensor
    sin: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    slot_page: torch.Tensor
    slot_off: torch.Tensor

    def tensors(self) -> tuple:
        return (self.cos, self.sin, self.k_cache, self.v_cache, self.slot_page, self.slot_off)


def normalize(epilogue) -> str:
    epilogue = "none" if epilogue is None else epilogue
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue must be None or one of {EPILOGUES}, got {epilogue!r}")
    return epilogue


def check_query(q) -> None:
    """GemmQuery's epilogue / pdl fields (ValueError naming the field)."""
    if q.epilogue not in EPILOGUES:
        raise ValueError(f"query.epilogue must be one of {EPILOGUES}, got {q.epilogue!r}")
    if q.pdl not in PDL_MODES:
        raise ValueError(f"query.pdl must be one of {PDL_MODES}, got {q.pdl!r}")
    if not isinstance(q.norm, bool):
        raise ValueError(f"query.norm must be a bool, got {q.norm!r}")
    if q.norm and (q.a_format not in ("bfloat16", "float16") or q.b_format == "fp8_block"):
        raise ValueError(
            f"query.norm normalizes 16-bit activations (not against fp8_block weights), got {q.a_format} x {q.b_format}"
        )
    if q.epilogue == "rope_append":
        reason = rope_reason(q.rope)
        if reason is not None:
            raise ValueError(f"query.rope {reason}")
        if q.n != q.rope.rows:
            raise ValueError(
                f"query.epilogue='rope_append' needs N = (q_heads + 2 kv_heads) head_dim = {q.rope.rows} rows "
                f"(query.rope {q.rope}), got N={q.n}"
            )
        if q.out_dtype not in ROPE_DTYPES:
            raise ValueError(f"query.epilogue='rope_append' needs out_dtype bfloat16 or float16, got {q.out_dtype}")
    elif q.rope is not None:
        raise ValueError(f"query.rope is only read with epilogue='rope_append', got epilogue={q.epilogue!r}")
    if not fused(q.epilogue, q.pdl, q.norm):
        return
    if q.max_m > MAX_M:
        raise ValueError(
            f"query.epilogue={q.epilogue!r} / query.pdl={q.pdl!r} / query.norm={q.norm} run in the decode buckets: max_m must be <= "
            f"{MAX_M}, got {q.max_m}"
        )
    if q.epilogue == "silu_mul" and q.n % 32:
        raise ValueError(f"query.epilogue='silu_mul' needs N = 2I rows with I % 16 == 0, got N={q.n}")
    if q.epilogue == "residual" and q.out_dtype not in ("bfloat16", "float16"):
        raise ValueError(f"query.epilogue='residual' needs out_dtype bfloat16 or float16, got {q.out_dtype}")


def fused(epilogue: str, pdl: str = "off", norm: bool = False) -> bool:
    return epilogue != "none" or pdl != "off" or norm


def out_cols(n: int, epilogue: str) -> int:
    """C's columns for a weight of n rows."""
    return n // 2 if epilogue == "silu_mul" else n


def check_call(p, epilogue: str, residual, out_dtype: str, device) -> None:
    """mm's epilogue arguments against the resolved problem p (resolve() ran with out=None for
    silu_mul, whose out is [M, N/2])."""
    if epilogue == "none":
        if residual is not None:
            raise ValueError("residual is only read with epilogue='residual'")
        return
    if p.batch:
        raise ValueError(f"epilogue={epilogue!r} takes 2-D operands, got a batch of {p.batch}")
    if epilogue == "silu_mul" and p.n % 32:
        raise ValueError(f"epilogue='silu_mul' needs a [2I, K] weight with I % 16 == 0, got N={p.n}")
    if epilogue == "residual":
        if out_dtype not in ("bfloat16", "float16"):
            raise ValueError(f"epilogue='residual' needs a bfloat16 / float16 output, got {out_dtype}")
        want = (p.m, p.n)
        if (
            not isinstance(residual, torch.Tensor)
            or tuple(residual.shape) != want
            or str(residual.dtype).removeprefix("torch.") != out_dtype
            or residual.device != device
            or not residual.is_contiguous()
        ):
            got = describe(residual) if isinstance(residual, torch.Tensor) else type(residual).__name__
            raise ValueError(f"residual must be a contiguous {out_dtype} {list(want)} tensor on {device}, got {got}")
        check_aligned("residual", residual, 16)  # the kernel's R is 16-byte aligned
    elif residual is not None:
        raise ValueError(f"residual is only read with epilogue='residual', got epilogue={epilogue!r}")
    if device.type == "cuda" and L.bucket_for(p.m) not in L.BUCKETS[:4]:
        raise ValueError(f"epilogue={epilogue!r} runs in the decode buckets (M <= {MAX_M}), got M = {p.m}")


def _tensor_reason(t, shape, dtype, device) -> str | None:
    """None when t is a contiguous `dtype` tensor of `shape` on `device` (None in shape: any extent)."""
    if not isinstance(t, torch.Tensor):
        return f"got {type(t).__name__}"
    ok = (
        t.dim() == len(shape)
        and all(w is None or w == g for w, g in zip(shape, t.shape))
        and t.dtype == dtype
        and t.device == device
        and t.is_contiguous()
    )
    return None if ok else f"got {describe(t)}"


def check_rope(p, rope, out, out_dtype: str, device) -> RopeLayout:
    """mm's `rope` (a RopeAppend) and out (q [M, Hq, D] or [M, Hq * D], or None) against the resolved
    problem; returns the RopeLayout the shapes give."""
    if not isinstance(rope, RopeAppend):
        raise ValueError(
            f"epilogue='rope_append' needs rope=RopeAppend(cos, sin, k_cache, v_cache, slot_page, slot_off), got {type(rope).__name__}"
        )
    if p.batch:
        raise ValueError(f"epilogue='rope_append' takes 2-D operands, got a batch of {p.batch}")
    if out_dtype not in ROPE_DTYPES:
        raise ValueError(f"epilogue='rope_append' needs a bfloat16 / float16 output, got {out_dtype}")
    dt = TORCH_OUT[out_dtype]
    kc = rope.k_cache
    reason = _tensor_reason(kc, (None, None, None, None), dt, device)
    if reason is not None:
        raise ValueError(
            f"rope.k_cache must be a contiguous {out_dtype} [pages, page_size, Hkv, D] tensor on {device}, {reason}"
        )
    pages, page_size, hkv, d = kc.shape
    reason = _tensor_reason(rope.v_cache, tuple(kc.shape), dt, device)
    if reason is not None:
        raise ValueError(
            f"rope.v_cache must be a contiguous {out_dtype} {list(kc.shape)} tensor on {device} (k_cache's), {reason}"
        )
    hq = p.n // d - 2 * hkv if d and p.n % d == 0 else 0
    layout = RopeLayout(hq, hkv, d, page_size)
    reason = rope_reason(layout)
    if hq < 1 or reason is not None:
        raise ValueError(
            f"rope.k_cache's [pages, page_size, Hkv, D] = {list(kc.shape)} does not fit the weight's N = {p.n} rows "
            f"= (Hq + 2 Hkv) D with Hq >= 1 and D a power of two >= 16"
        )
    for name in ("cos", "sin"):
        reason = _tensor_reason(getattr(rope, name), (p.m, d // 2), torch.float32, device)
        if reason is not None:
            raise ValueError(f"rope.{name} must be a contiguous float32 [{p.m}, {d // 2}] tensor on {device}, {reason}")
    for name in ("slot_page", "slot_off"):
        reason = _tensor_reason(getattr(rope, name), (p.m,), torch.int64, device)
        if reason is not None:
            raise ValueError(f"rope.{name} must be a contiguous int64 [{p.m}] tensor on {device}, {reason}")
    if out is not None:
        ok = tuple(out.shape) in ((p.m, hq, d), (p.m, hq * d)) and out.dtype == dt and out.is_contiguous()
        if not ok or out.device != device:
            raise ValueError(
                f"out must be a contiguous {out_dtype} [{p.m}, {hq}, {d}] tensor on {device} (the rotated q), got {describe(out)}"
            )
    if device.type == "cuda":
        for name, t in zip(("cos", "sin", "k_cache", "v_cache", "slot_page", "slot_off"), rope.tensors()):
            check_aligned(f"rope.{name}", t, 8 if name.startswith("slot") else 4)
        if L.bucket_for(p.m) not in L.BUCKETS[:4]:
            raise ValueError(f"epilogue='rope_append' runs in the decode buckets (M <= {MAX_M}), got M = {p.m}")
    return layout


def check_norm(p, norm_weight, norm_eps, device) -> float:
    """mm's norm_weight / norm_eps against the resolved problem; returns eps as a float."""
    if norm_weight is None:
        return 1e-6
    if p.batch or p.a.fmt not in ("bfloat16", "float16") or p.b.fmt == "fp8_block":
        raise ValueError(
            f"norm_weight normalizes 2-D 16-bit activations (not against fp8_block weights), got {p.a.fmt} x {p.b.fmt}"
        )
    dt = p.a.values.dtype
    if (
        not isinstance(norm_weight, torch.Tensor)
        or tuple(norm_weight.shape) != (p.k,)
        or norm_weight.dtype != dt
        or norm_weight.device != device
        or not norm_weight.is_contiguous()
    ):
        got = describe(norm_weight) if isinstance(norm_weight, torch.Tensor) else type(norm_weight).__name__
        raise ValueError(
            f"norm_weight must be a contiguous {str(dt).removeprefix('torch.')} [{p.k}] tensor on {device}, got {got}"
        )
    check_aligned("norm_weight", norm_weight, 16)  # the kernel's G is 16-byte aligned (16-byte loads)
    if isinstance(norm_eps, bool) or not isinstance(norm_eps, (int, float)) or not 0 <= float(norm_eps) < 1:
        raise ValueError(f"norm_eps must be a float in [0, 1), got {norm_eps!r}")
    if device.type == "cuda" and L.bucket_for(p.m) not in L.BUCKETS[:4]:
        raise ValueError(f"norm_weight runs in the decode buckets (M <= {MAX_M}), got M = {p.m}")
    return float(norm_eps)


def check_out(out, m: int, cols: int, out_dtype: str) -> None:
    if out is not None and (list(out.shape) != [m, cols] or str(out.dtype).removeprefix("torch.") != out_dtype):
        raise ValueError(f"out must be {out_dtype} [{m}, {cols}], got {describe(out)}")
