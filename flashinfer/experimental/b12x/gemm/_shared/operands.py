"""Operand normalisation and validation for the GEMM entry points (errors name the argument).

An operand is a (values, scales) pair, a packed `Weight`, or (A only) a 16-bit activation tensor.
`resolve` turns mm's arguments into one `Problem`: formats, the 2-D slices of each batch, M, N, K.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..._lib.checks import check_aligned, describe  # describe: also imported from here by the gemm ops
from ..._lib.quant import swizzled_size
from .formats import FORMAT, OUT_DTYPES, RAW16, dtype_key, pair_ok, recipe_from_kwargs
from .weight import Weight

_E8M0 = getattr(torch, "float8_e8m0fnu", None)
_FP4X2 = getattr(torch, "float4_e2m1fn_x2", None)
TORCH_OUT = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass
class Operand:
    fmt: str
    values: torch.Tensor  # [rows, bytes] or [rows, bytes, L]
    scales: torch.Tensor | None
    alpha: torch.Tensor | None  # a Weight's alpha (fp32 [1])


@dataclass
class Problem:
    a: Operand
    b: Operand
    m: int
    n: int
    k: int
    batch: int  # L; 0 when the operands are 2-D (the output is [M, N])
    out_dtype: str

    def slice(self, op: Operand, index: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.batch == 0:
            return op.values, op.scales
        vals = op.values[..., index]
        scales = op.scales
        if scales is not None and scales.dim() >= 2 and scales.shape[-1] == self.batch:
            scales = scales[..., index]
        return vals, scales


def infer_recipe(values: torch.Tensor, scales) -> str:
    """Recipe of a (values, scales) pair from its dtypes (uint8 scales with FP4 values mean MX)."""
    fp8 = values.dtype == torch.float8_e4m3fn
    if not isinstance(scales, torch.Tensor):
        raise ValueError(f"scales must be a tensor, got {type(scales).__name__}")
    if scales.dtype == torch.float32:
        if not fp8 and values.dtype != torch.uint8:
            raise ValueError(f"fp32 scales go with float8_e4m3fn values, got values {describe(values)}")
        return "fp8_tensor" if scales.numel() == 1 or scales.dim() == 1 else "fp8_block"
    if scales.dtype == torch.float8_e4m3fn:
        return "nvfp4"
    if scales.dtype == torch.uint8 or (_E8M0 is not None and scales.dtype == _E8M0):
        return "mxfp8" if fp8 else "mxfp4"
    raise ValueError(f"cannot infer a recipe from values {describe(values)} and scales {describe(scales)}")


def _pair(name: str, x, recipe: str | None) -> Operand:
    if isinstance(x, Weight):
        return Operand(x.recipe, x.values, x.scales, x.alpha)
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], torch.Tensor):
        values, scales = x
        if values.dtype not in (torch.uint8, torch.float8_e4m3fn) and values.dtype != _FP4X2:
            raise ValueError(f"{name} values must be uint8 (packed FP4) or float8_e4m3fn, got {describe(values)}")
        if _FP4X2 is not None and values.dtype == _FP4X2:
            values = values.view(torch.uint8)
        fmt = recipe or infer_recipe(values, scales)
        return Operand(fmt, values, scales, None)
    raise ValueError(f"{name} must be a (values, scales) pair or a packed Weight, got {type(x).__name__}")


def resolve(lhs, rhs, out, *, ab_dtype=None, sf_dtype=None, c_dtype=None, sf_vec_size=None) -> Problem:
    """mm's arguments -> a validated Problem (shapes and dtypes; device checks are the caller's)."""
    recipe = None
    if ab_dtype is not None or sf_dtype is not None or sf_vec_size is not None:
        recipe = recipe_from_kwargs(ab_dtype, sf_dtype, sf_vec_size)
    b = _pair("rhs", rhs, recipe)
    if recipe is not None and b.fmt != recipe:
        raise ValueError(f"rhs is a {b.fmt} Weight but the kwargs name recipe {recipe}")
    if isinstance(lhs, torch.Tensor):
        if dtype_key(lhs.dtype) not in RAW16:
            raise ValueError(
                f"lhs must be a (values, scales) pair or bf16/fp16 activations [M, K], got {describe(lhs)}"
            )
        a = Operand(dtype_key(lhs.dtype), lhs, None, None)
    else:
        a = _pair("lhs", lhs, recipe or b.fmt)
    if not pair_ok(a.fmt, b.fmt):
        raise ValueError(f"lhs format {a.fmt} does not pair with rhs format {b.fmt} (same recipe, or 16-bit lhs)")

    dims = a.values.dim()
    if dims not in (2, 3) or b.values.dim() != dims:
        raise ValueError(
            f"lhs values and rhs values must both be [rows, K] or [rows, K, L], got {describe(a.values)} "
            f"and {describe(b.values)}"
        )
    batch = 0 if dims == 2 else b.values.shape[2]
    if dims == 3 and a.values.shape[2] != batch:
        raise ValueError(f"lhs and rhs batch sizes differ: {a.values.shape[2]} vs {batch}")
    bits_b = FORMAT[b.fmt].value_bits
    k = b.values.shape[1] * 8 // bits_b
    m, n = a.values.shape[0], b.values.shape[0]
    want = k if a.fmt in RAW16 else k * FORMAT[a.fmt].value_bits // 8
    if a.values.shape[1] != want:
        raise ValueError(
            f"lhs must have {want} columns ({a.fmt}, K={k} from rhs {describe(b.values)}), got {describe(a.values)}"
        )
    _check_scales("lhs", a, m, k, batch, side="a")
    _check_scales("rhs", b, n, k, batch, side="b")

    if out is not None:
        out_dtype = dtype_key(out.dtype)
        if c_dtype is not None and dtype_key(c_dtype) != out_dtype:
            raise ValueError(f"c_dtype {dtype_key(c_dtype)} does not match out {describe(out)}")
    else:
        out_dtype = dtype_key(c_dtype) if c_dtype is not None else "bfloat16"
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"the output dtype must be one of {OUT_DTYPES}, got {out_dtype}")
    if out is not None:
        shape = [m, n] if batch == 0 else [m, n, batch]
        if list(out.shape) != shape:
            raise ValueError(f"out must be {out_dtype} {shape}, got {describe(out)}")
    return Problem(a, b, m, n, k, batch, out_dtype)


def _check_scales(name: str, op: Operand, rows: int, k: int, batch: int, side: str) -> None:
    spec = FORMAT[op.fmt]
    s = op.scales
    if spec.family == "raw16":
        return
    if not isinstance(s, torch.Tensor):
        raise ValueError(f"{name} scales must be a tensor for {op.fmt}, got {type(s).__name__}")
    per_batch = s[..., 0] if batch and s.dim() >= 2 and s.shape[-1] == batch else s
    if spec.swizzled:
        need = swizzled_size(rows, k // spec.sf_vec)
        if per_batch.element_size() != 1 or per_batch.numel() < need:
            raise ValueError(
                f"{name} scales must be one-byte swizzled storage of at least {need} bytes ({op.fmt}, "
                f"{rows} rows, K={k}), got {describe(s)}"
            )
    elif spec.scale == "fp32_block":
        grid = [rows, k // 128] if side == "a" else [-(-rows // 128), k // 128]
        if per_batch.dtype != torch.float32 or list(per_batch.shape) != grid:
            raise ValueError(f"{name} scales must be float32 {grid} for fp8_block, got {describe(s)}")
    elif per_batch.dtype != torch.float32 or per_batch.numel() != 1:
        raise ValueError(f"{name} scale must be a float32 scalar for fp8_tensor, got {describe(s)}")


def check_layout(p: Problem) -> None:
    """Every per-batch slice of values and scales must be contiguous (a batch-last view of
    batch-first storage, e.g. torch.stack(per_batch).movedim(0, -1))."""
    for li in range(max(p.batch, 1)):
        for name, op in (("lhs", p.a), ("rhs", p.b)):
            vals, scales = p.slice(op, li)
            if not vals.is_contiguous():
                raise ValueError(
                    f"{name} values must have contiguous [rows, K] slices per batch, got {describe(op.values)}"
                )
            if scales is not None and not scales.is_contiguous():
                raise ValueError(f"{name} scales must have contiguous slices per batch, got {describe(op.scales)}")


def check_device_operands(p: Problem, out: torch.Tensor) -> None:
    """CUDA launch preconditions: one device, contiguous 2-D slices, 16-byte aligned bases, K and N."""
    from .formats import check_shape

    check_shape("gemm.blockscaled", p.n, p.k)
    dev = out.device
    for name, t in (("lhs values", p.a.values), ("rhs values", p.b.values)):
        if t.device != dev:
            raise ValueError(f"{name} must be on {dev} (the output's device), got {describe(t)}")
    check_layout(p)
    for li in range(max(p.batch, 1)):
        for name, op in (("lhs", p.a), ("rhs", p.b)):
            vals, scales = p.slice(op, li)
            check_aligned(f"{name} values", vals, 16)
            if scales is not None and scales.device != dev:
                raise ValueError(f"{name} scales must be on {dev}, got {describe(scales)}")
        c = out if p.batch == 0 else out[..., li]
        if not c.is_contiguous() or c.data_ptr() % 16:
            raise ValueError(f"out must have contiguous [M, N] slices starting 16-byte aligned, got {describe(out)}")
