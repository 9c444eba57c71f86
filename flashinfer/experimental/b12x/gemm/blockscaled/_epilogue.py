"""Host side of `mm(..., epilogue=..., residual=...)` and `GemmQuery(epilogue=..., pdl=...)`: checks,
output shapes and the launcher's residual argument (the kernel is `_kernel_decode_fused`).

    epilogue="none"      C = alpha * A B^T                               [M, N]
    epilogue="silu_mul"  C = silu(P[:, :I]) * P[:, I:], P = alpha A B^T  [M, I] for a [2I, K] weight
    epilogue="residual"  C = alpha * A B^T + residual                    [M, N], residual [M, N] in C's dtype
    pdl="off" | "wait" | "prefetch"  (plans only) programmatic dependent launch, with an L2 prefetch of
                         the weights before the wait for "prefetch" (_kernel_decode_fused docstring)
    norm_weight=g, norm_eps  A replaced by rmsnorm(A) = A * rsqrt(mean(A^2) + eps) * g (16-bit A, g [K] in
                         A's dtype; plans: GemmQuery(norm=True))

All in fp32 before one rounding to C's dtype (reference.apply_epilogue). Fused epilogues and pdl run
in the decode buckets (M <= 64) of 2-D operands; a plan compiles them at prepare time like any
variant, the one-shot `mm` compiles on first use.
"""

from __future__ import annotations

import torch

from ..._lib.checks import check_aligned
from .._shared import launch as L
from .._shared.operands import describe

EPILOGUES = ("none", "silu_mul", "residual")
PDL_MODES = ("off", "wait", "prefetch")
MAX_M = 64  # the decode buckets'


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
