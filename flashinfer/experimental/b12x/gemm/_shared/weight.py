"""`Weight`: a linear layer's weight in the GEMM kernels' layout, and `pack_weight` from every checkpoint form.

Layouts (N = out_features rows, K = in_features, K-major):
- nvfp4: values uint8 [N, K/2] (element 2i in the low nibble), scales float8_e4m3fn flat 128x4 swizzled
  [swizzled_size(N, K/16)] (padding 0), alpha = 1/gs_w (the product's dequant multiplier).
- mxfp4: values uint8 [N, K/2], scales uint8 UE8M0 swizzled [swizzled_size(N, K/32)] (padding 127).
- mxfp8: values float8_e4m3fn [N, K], scales uint8 UE8M0 swizzled (padding 127).
- fp8_block: values float8_e4m3fn [N, K], scales fp32 [ceil(N/128), ceil(K/128)] (`weight_scale_inv`).
- fp8_tensor: values float8_e4m3fn [N, K], scales fp32 [1] (w ~ q * s).

Bytes a checkpoint defines pass through unchanged; only scale layouts move (swizzling), except two
conversions that requantize on purpose: a high-precision weight with a `recipe`, and block-FP8 ->
mxfp8 (`_lib.quant.requantize_block_fp8_to_mx`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..._lib import quant as Q
from ..._lib.quant.scales import as_bytes
from .formats import FORMAT, QUANTIZED, check_shape

_E8M0 = getattr(torch, "float8_e8m0fnu", None)
_FP4X2 = getattr(torch, "float4_e2m1fn_x2", None)
_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
GLOBAL_SCALE_KINDS = ("multiplier", "dequant")


@dataclass(frozen=True, eq=False)
class Weight:
    """A packed weight (module docstring). `alpha` fp32 [1] multiplies the GEMM product; `input_scale`
    fp32 [1] or None is the checkpoint's activation scale (NVFP4: gs_a multiplier; fp8_tensor: the
    static activation dequant scale)."""

    recipe: str
    values: torch.Tensor
    scales: torch.Tensor
    alpha: torch.Tensor
    n: int
    k: int
    input_scale: torch.Tensor | None = None

    @property
    def format(self):
        return FORMAT[self.recipe]

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    def values_bytes(self) -> torch.Tensor:
        return self.values.view(torch.uint8)

    def scales_bytes(self) -> torch.Tensor:
        return self.scales.view(torch.uint8) if self.scales.element_size() == 1 else self.scales

    def to(self, device) -> Weight:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Weight(
            self.recipe,
            move(self.values),
            move(self.scales),
            move(self.alpha),
            self.n,
            self.k,
            move(self.input_scale),
        )

    def __repr__(self) -> str:
        return f"Weight({self.recipe}, N={self.n}, K={self.k}, on {self.device})"


def _describe(t) -> str:
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    return f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}"


def _scalar_tensor(value, name: str, device) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=torch.float32).detach().reshape(-1)
    if t.numel() != 1:
        raise ValueError(f"{name} must be a scalar (float or 1-element tensor), got shape {list(t.shape)}")
    v = float(t[0])
    if not (0 < v < float("inf")):
        raise ValueError(f"{name} must be finite and > 0, got {v}")
    return t.to(device=device, dtype=torch.float32).clone()


def _alpha_from_global(global_scale, kind: str, device) -> torch.Tensor:
    if kind not in GLOBAL_SCALE_KINDS:
        raise ValueError(f"global_scale_kind must be one of {GLOBAL_SCALE_KINDS}, got {kind!r}")
    if global_scale is None:
        return torch.ones(1, dtype=torch.float32, device=device)
    gs = _scalar_tensor(global_scale, "global_scale", device)
    # "multiplier": x ~ q * sf / gs (FORMATS.md), so the product is scaled by 1/gs; "dequant" is the
    # ModelOpt weight_scale_2 = 1/gs, a multiplier of the product already.
    return torch.ones_like(gs) / gs if kind == "multiplier" else gs


def _swizzled_or_grid(scale: torch.Tensor, n: int, k: int, sf_vec: int, pad: int, name: str) -> torch.Tensor:
    """Row-major [N, K/sf] scales -> swizzled flat; an already swizzled flat tensor passes through."""
    cols = k // sf_vec
    size = Q.swizzled_size(n, cols)
    if scale.dim() == 2 and list(scale.shape) == [n, cols]:
        return Q.swizzle_scales(scale, pad).contiguous()
    if scale.dim() == 1 and scale.numel() == size:
        return scale.contiguous()
    raise ValueError(
        f"{name} must be [{n}, {cols}] row-major or flat swizzled [{size}] for weight [N={n}, K={k}], "
        f"got {_describe(scale)}"
    )


def _quantize(weight: torch.Tensor, recipe: str, global_scale, kind: str) -> Weight:
    n, k = weight.shape
    dev = weight.device
    one = torch.ones(1, dtype=torch.float32, device=dev)
    if recipe == "nvfp4":
        if global_scale is None:
            gs = Q.nvfp4_global_scale(weight).reshape(1).float()
        elif kind == "dequant":  # weight_scale_2 = 1 / gs
            ws2 = _scalar_tensor(global_scale, "global_scale", dev)
            gs = torch.ones_like(ws2) / ws2
        else:
            gs = _scalar_tensor(global_scale, "global_scale", dev)
        packed, sf = Q.quantize_nvfp4(weight, gs)
        return Weight("nvfp4", packed, Q.swizzle_scales(sf, 0), torch.ones_like(gs) / gs, n, k)
    if recipe == "mxfp4":
        packed, sc = Q.quantize_mxfp4(weight)
        return Weight("mxfp4", packed, Q.swizzle_scales(sc, Q.UE8M0_ONE_BYTE), one, n, k)
    if recipe == "mxfp8":
        vals, sc = Q.quantize_mxfp8(weight)
        return Weight("mxfp8", vals, Q.swizzle_scales(sc, Q.UE8M0_ONE_BYTE), one, n, k)
    if recipe == "fp8_block":
        vals, sc = Q.quantize_block_fp8_weight(weight)
        return Weight("fp8_block", vals, sc, one, n, k)
    amax = Q.block_amax(weight.float().reshape(1, -1))
    s = amax / Q.scales.fp32_const(amax, Q.E4M3_MAX)
    s = torch.where(s == 0, torch.ones_like(s), s)
    vals = Q.e4m3_encode(weight.float() / s)
    return Weight("fp8_tensor", vals, s.reshape(1).float(), one, n, k)


def pack_weight(
    weight: torch.Tensor,
    scale: torch.Tensor | None = None,
    *,
    recipe: str | None = None,
    global_scale=None,
    global_scale_kind: str = "multiplier",
    input_scale=None,
) -> Weight:
    """Checkpoint tensors (or a high-precision weight plus a recipe) -> `Weight`.

    weight: uint8 / float4_e2m1fn_x2 [N, K/2] (or OCP [N, K/32, 16]) packed FP4; float8_e4m3fn [N, K];
    or bf16/fp16/fp32 [N, K] with `recipe` (quantized here with the `_lib.quant` oracles).
    scale: NVFP4 float8_e4m3fn [N, K/16]; MX UE8M0 (uint8 or float8_e8m0fnu) [N, K/32]; block-FP8 fp32
    [ceil(N/128), ceil(K/128)]; tensor-FP8 fp32 scalar. Row-major grids are swizzled here; flat
    swizzled storage is accepted as is.
    recipe: inferred from the dtypes when None; "mxfp8" with block-FP8 inputs requantizes to MXFP8.
    global_scale: NVFP4's weight global scale; global_scale_kind "multiplier" (gs, x ~ q*sf/gs) or
    "dequant" (ModelOpt weight_scale_2 = 1/gs).
    input_scale: optional activation scale kept on the Weight (NVFP4 gs_a multiplier; tensor-FP8
    static activation dequant scale).
    On CUDA the weight must also fit the kernels (K % 128 == 0, N % 16 == 0: `formats.check_shape`), so a shape no
    kernel takes fails here, at pack time; a CPU weight packs whatever its format allows (the reference runs it).
    """
    on_cuda = isinstance(weight, torch.Tensor) and weight.device.type == "cuda"
    if on_cuda and (nk := logical_nk(weight)) is not None:
        check_shape("pack_weight", *nk)  # before any quantization or requantization runs
    w = _pack(weight, scale, recipe, global_scale, global_scale_kind, input_scale)
    if on_cuda:
        check_shape("pack_weight", w.n, w.k)  # shapes logical_nk cannot read (and any it misread)
    return w


def logical_nk(weight: torch.Tensor) -> tuple[int, int] | None:
    """(N, K) of a checkpoint weight from its shape alone: [N, K] high precision or FP8, [N, K/2] packed FP4 bytes,
    [N, K/32, 16] OCP FP4; None for a shape `_pack` will reject with its own message."""
    fp4 = weight.dtype == torch.uint8 or (_FP4X2 is not None and weight.dtype == _FP4X2)
    if weight.dim() == 2:
        return int(weight.shape[0]), int(weight.shape[1]) * (2 if fp4 else 1)
    if weight.dim() == 3 and fp4 and weight.shape[2] == 16:
        return int(weight.shape[0]), int(weight.shape[1]) * 32
    return None


def _pack(weight, scale, recipe, global_scale, global_scale_kind, input_scale) -> Weight:
    if not isinstance(weight, torch.Tensor):
        raise ValueError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    if recipe is not None and recipe not in QUANTIZED:
        raise ValueError(f"recipe must be one of {QUANTIZED} or None, got {recipe!r}")
    if global_scale_kind not in GLOBAL_SCALE_KINDS:
        raise ValueError(f"global_scale_kind must be one of {GLOBAL_SCALE_KINDS}, got {global_scale_kind!r}")
    dev = weight.device
    in_s = None if input_scale is None else _scalar_tensor(input_scale, "input_scale", dev)

    if weight.dtype in _FLOATS:
        if recipe is None:
            raise ValueError(f"weight is {_describe(weight)} (high precision): pass recipe= one of {QUANTIZED}")
        if weight.dim() != 2:
            raise ValueError(f"weight must be [N, K], got {_describe(weight)}")
        if scale is not None:
            raise ValueError("scale must be None when a high-precision weight is quantized here")
        _check_k(recipe, weight.shape[1])
        if global_scale is not None and recipe != "nvfp4":
            raise ValueError(f"global_scale is an NVFP4 argument; recipe {recipe} has none")
        w = _quantize(weight, recipe, global_scale, global_scale_kind)
        return _with_input_scale(w, in_s)

    if weight.dtype == torch.uint8 or (_FP4X2 is not None and weight.dtype == _FP4X2):
        w = _pack_fp4(as_bytes(weight) if weight.dtype != _FP4X2 else weight.view(torch.uint8), scale, recipe)
        if w.recipe == "nvfp4":
            w = Weight(w.recipe, w.values, w.scales, _alpha_from_global(global_scale, global_scale_kind, dev), w.n, w.k)
        elif global_scale is not None:
            raise ValueError(f"global_scale is an NVFP4 argument; recipe {w.recipe} has none")
        return _with_input_scale(w, in_s)

    if weight.dtype == torch.float8_e4m3fn:
        if global_scale is not None:
            raise ValueError("global_scale is an NVFP4 argument; FP8 weights carry their scale in `scale`")
        return _with_input_scale(_pack_fp8(weight, scale, recipe), in_s)

    raise ValueError(
        "weight must be uint8/float4_e2m1fn_x2 (packed FP4), float8_e4m3fn, or bf16/fp16/fp32 with recipe=, "
        f"got {_describe(weight)}"
    )


def own_recipe(op: str, own: str, recipe) -> str:
    """The recipe of a one-recipe linear module's pack_weight (mxfp8_linear, tensor_fp8_linear): None or its own,
    which it takes keyword-compatibly with gemm.blockscaled.pack_weight."""
    if recipe is not None and recipe != own:
        raise ValueError(f"{op}.pack_weight packs recipe {own!r} only (recipe=None or {own!r}), got recipe={recipe!r}")
    return own


def _with_input_scale(w: Weight, in_s) -> Weight:
    if in_s is None:
        return w
    return Weight(w.recipe, w.values, w.scales, w.alpha, w.n, w.k, in_s)


def _check_k(recipe: str, k: int) -> None:
    vec = FORMAT[recipe].sf_vec or 1
    if k % max(vec, 2):
        raise ValueError(f"weight K must be a multiple of {max(vec, 2)} for recipe {recipe}, got K={k}")


def _pack_fp4(values: torch.Tensor, scale, recipe) -> Weight:
    if values.dim() == 3:
        if values.shape[-1] != 16:
            raise ValueError(f"OCP FP4 blocks must be [N, K/32, 16], got {_describe(values)}")
        values = values.reshape(values.shape[0], -1)
    if values.dim() != 2:
        raise ValueError(f"packed FP4 weight must be uint8 [N, K/2], got {_describe(values)}")
    if not isinstance(scale, torch.Tensor):
        raise ValueError(f"scale is required for a packed FP4 weight (E4M3 per 16 or UE8M0 per 32), got {scale!r}")
    if recipe is None:
        if scale.dtype == torch.float8_e4m3fn:
            recipe = "nvfp4"
        elif scale.dtype == torch.uint8 or (_E8M0 is not None and scale.dtype == _E8M0):
            recipe = "mxfp4"
        else:
            raise ValueError(
                f"scale of a packed FP4 weight must be float8_e4m3fn or UE8M0 bytes, got {_describe(scale)}"
            )
    if recipe not in ("nvfp4", "mxfp4"):
        raise ValueError(f"a packed FP4 weight takes recipe 'nvfp4' or 'mxfp4', got {recipe!r}")
    n, k = values.shape[0], values.shape[1] * 2
    _check_k(recipe, k)
    if recipe == "nvfp4":
        if scale.element_size() != 1:
            raise ValueError(f"NVFP4 scale must be float8_e4m3fn [N, K/16], got {_describe(scale)}")
        sw = _swizzled_or_grid(as_bytes(scale).view(torch.float8_e4m3fn), n, k, 16, 0, "scale")
    else:
        if scale.element_size() != 1:
            raise ValueError(f"MXFP4 scale must be UE8M0 bytes [N, K/32], got {_describe(scale)}")
        sw = _swizzled_or_grid(as_bytes(scale), n, k, 32, Q.UE8M0_ONE_BYTE, "scale")
    one = torch.ones(1, dtype=torch.float32, device=values.device)
    return Weight(recipe, values.contiguous(), sw, one, n, k)


def _pack_fp8(values: torch.Tensor, scale, recipe) -> Weight:
    if values.dim() != 2:
        raise ValueError(f"FP8 weight must be float8_e4m3fn [N, K], got {_describe(values)}")
    n, k = values.shape
    one = torch.ones(1, dtype=torch.float32, device=values.device)
    if not isinstance(scale, torch.Tensor):
        raise ValueError(
            f"scale is required for an FP8 weight (UE8M0 [N, K/32], fp32 blocks or fp32 scalar), got {scale!r}"
        )
    if scale.dtype == torch.float32 and scale.numel() == 1 and recipe in (None, "fp8_tensor"):
        s = _scalar_tensor(scale, "scale", values.device)
        return Weight("fp8_tensor", values.contiguous(), s, one, n, k)
    if scale.dtype == torch.float32 and scale.dim() == 2:
        if recipe == "mxfp8":
            mx = Q.deepseek_block_fp8_linear_to_mx(values, scale)
            return Weight("mxfp8", mx.weight, mx.scales, one, n, k)
        if recipe not in (None, "fp8_block"):
            raise ValueError(f"fp32 block scales pack as recipe 'fp8_block' (or 'mxfp8' to requantize), got {recipe!r}")
        blk = Q.deepseek_block_fp8_linear(values, scale)
        return Weight("fp8_block", blk.weight, blk.weight_scale_inv, one, n, k)
    if scale.element_size() == 1 and recipe in (None, "mxfp8"):
        _check_k("mxfp8", k)
        sw = _swizzled_or_grid(as_bytes(scale), n, k, 32, Q.UE8M0_ONE_BYTE, "scale")
        return Weight("mxfp8", values.contiguous(), sw, one, n, k)
    raise ValueError(
        f"scale {_describe(scale)} does not fit an FP8 weight [{n}, {k}] with recipe {recipe!r}: expected UE8M0 "
        f"[{n}, {k // 32}] (mxfp8), fp32 [{-(-n // 128)}, {-(-k // 128)}] (fp8_block) or an fp32 scalar (fp8_tensor)"
    )
