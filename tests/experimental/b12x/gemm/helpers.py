"""Operand factories and the tolerance rule for the gemm tests (shared by the CPU and GPU tiers)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flashinfer.experimental.b12x._lib import quant as Q
from flashinfer.experimental.b12x.gemm._shared.weight import pack_weight
from flashinfer.experimental.b12x.gemm.blockscaled import reference as R

TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
PAIRS = (
    ("nvfp4", "nvfp4"),
    ("mxfp4", "mxfp4"),
    ("mxfp8", "mxfp8"),
    ("fp8_block", "fp8_block"),
    ("fp8_tensor", "fp8_tensor"),
    ("bfloat16", "nvfp4"),
    ("bfloat16", "mxfp4"),
    ("bfloat16", "mxfp8"),
    ("bfloat16", "fp8_block"),
    ("bfloat16", "fp8_tensor"),
    ("float16", "nvfp4"),
    ("float16", "mxfp8"),
)


_DEQ: dict = {}


def dequantized_weight(weight) -> torch.Tensor:
    """fp32 [N, K] of a Weight WITHOUT its alpha, cached for the most recent weights (GPU tests reuse
    one weight across many M)."""
    key = id(weight)
    hit = _DEQ.get(key)
    if hit is None or hit[0] is not weight:
        if len(_DEQ) >= 2:
            _DEQ.pop(next(iter(_DEQ)))
        hit = _DEQ[key] = (weight, R.dequantize(weight.recipe, weight.values, weight.scales, weight.n, weight.k, "b"))
    return hit[1]


@dataclass
class Operands:
    a_fmt: str
    b_fmt: str
    a_values: torch.Tensor
    a_scales: torch.Tensor | None
    weight: object  # the packed Weight (b values, scales, alpha)
    alpha: float
    m: int
    n: int
    k: int

    @property
    def b_values(self):
        return self.weight.values

    @property
    def b_scales(self):
        return self.weight.scales

    def reference(self, out_dtype="float32") -> torch.Tensor:
        alpha = self.alpha * float(self.weight.alpha)
        a = R.dequantize(self.a_fmt, self.a_values, self.a_scales, self.m, self.k, "a")
        return ((a @ dequantized_weight(self.weight).t()) * alpha).to(TORCH[out_dtype])

    def torch_same_precision(self, out_dtype: str) -> torch.Tensor:
        """The same product done by torch in the kernel's precision: operands dequantized and rounded
        to the compute dtype (bf16, or fp16 for fp16 activations), matmul, one rounding to the output."""
        compute = torch.float16 if self.a_fmt == "float16" else torch.bfloat16
        a = R.dequantize(self.a_fmt, self.a_values, self.a_scales, self.m, self.k, "a").to(compute)
        b = dequantized_weight(self.weight).to(compute)
        c = a.float() @ b.float().t()  # exact products of the rounded operands, fp32 sums (no TF32)
        alpha = self.alpha * float(self.weight.alpha)
        return (c.float() * alpha).to(TORCH[out_dtype])


def make_operands(
    a_fmt: str, b_fmt: str, m: int, n: int, k: int, *, seed: int = 0, device="cpu", weight=None
) -> Operands:
    """Random activations and weight in the given formats, quantized on `device` with the `_lib.quant`
    oracles (pass `weight`, a packed Weight, to reuse one across M values)."""
    g = torch.Generator(device=device).manual_seed(seed)  # drawn where they are used: no host copies
    x = torch.randn(m, k, generator=g, device=device) * 1.5
    alpha = 1.0
    if weight is None:
        w = torch.randn(n, k, generator=g, device=device) * 0.05
        weight = pack_weight(w, recipe=b_fmt)
    if a_fmt in ("bfloat16", "float16"):
        a_values, a_scales = x.to(TORCH[a_fmt]), None
    elif a_fmt == "nvfp4":
        gs = Q.nvfp4_global_scale(x)
        a_values, sf = Q.quantize_nvfp4(x, gs)
        a_scales = Q.swizzle_scales(sf, 0)
        alpha = 1.0 / float(gs)
    elif a_fmt == "mxfp4":
        a_values, sc = Q.quantize_mxfp4(x)
        a_scales = Q.swizzle_scales(sc, Q.UE8M0_ONE_BYTE)
    elif a_fmt == "mxfp8":
        a_values, sc = Q.quantize_mxfp8(x)
        a_scales = Q.swizzle_scales(sc, Q.UE8M0_ONE_BYTE)
    elif a_fmt == "fp8_block":
        a_values, a_scales = Q.quantize_block_fp8_act(x)
    elif a_fmt == "fp8_tensor":
        a_values, a_scales = R.quantize_tensor_fp8(x)
    else:
        raise ValueError(a_fmt)
    return Operands(a_fmt, b_fmt, a_values, a_scales, weight, alpha, m, n, k)


_CPU_WEIGHTS: dict = {}


def on_cpu(ops: Operands) -> Operands:
    """`ops` with the activations and weight on the CPU (bf16 activations only: the fused and rope gpu tests'
    references, whose fp32 matmuls the GPU might run in TF32). One CPU copy per weight object, kept beside the
    weight so its id is never reused, and so dequantized_weight's cache serves every M. Keyed by the object, never
    by (N, K): such a key handed session 52's MXFP4 fused test the NVFP4 weight an earlier test had cached at the
    same shape (a reference of the wrong weight, errors of 30-200)."""
    w = ops.weight
    if id(w) not in _CPU_WEIGHTS:
        _CPU_WEIGHTS[id(w)] = (w, type(w)(w.recipe, w.values.cpu(), w.scales.cpu(), w.alpha.cpu(), w.n, w.k))
    cpu_w = _CPU_WEIGHTS[id(w)][1]
    return Operands(ops.a_fmt, ops.b_fmt, ops.a_values.cpu(), None, cpu_w, ops.alpha, ops.m, ops.n, ops.k)


def check_tolerance(out: torch.Tensor, ops: Operands, out_dtype: str, bias=None) -> None:
    """The project's rule: max |ours - fp32 reference| <= 2 x max |torch same precision - reference|,
    plus a floor of 2^-20 of the reference's largest magnitude for outputs that are nearly exact.
    With a bias, torch's same-precision peer adds it in the output dtype after the product's rounding."""
    ref = ops.reference("float32").float()
    peer = ops.torch_same_precision(out_dtype).to(ref.device)
    if bias is not None:
        ref = ref + bias.float()
        peer = peer + bias.to(peer.dtype)
    peer = peer.float()
    ours = out.float().to(ref.device)
    assert not torch.isnan(ours).any(), "output holds NaN (unwritten or poisoned elements)"
    err = (ours - ref).abs().max().item()
    peer_err = (peer - ref).abs().max().item()
    floor = ref.abs().max().item() * 2.0**-20
    # When torch's peer IS the reference's computation (an fp32 output of exact operands), its error
    # is 0 and the rule degenerates; then the kernel may differ only by fp32 summation order, whose
    # deterministic bound is |ours - ref| <= 2 * K * 2^-24 * (|A| @ |B|^T) * |alpha| per element.
    alpha = abs(ops.alpha * float(ops.weight.alpha))
    a = R.dequantize(ops.a_fmt, ops.a_values, ops.a_scales, ops.m, ops.k, "a").float().abs()
    order = (a @ dequantized_weight(ops.weight).abs().t()) * alpha * (2 * ops.k * 2.0**-24)
    order_err = ((ours - ref).abs() - order.to(ref.device)).max().item()
    ok = err <= 2 * peer_err + floor or order_err <= 0
    assert ok, f"max error {err:.3e} > 2 x torch's {peer_err:.3e} (+{floor:.1e}) and above the fp32 summation bound"
