"""The Triton GEMV (gemm.blockscaled `_kernel_gemv`) under TRITON_INTERPRET=1, through its real host
launcher and the blockscaled launch contract (`launch.launch_args`), against the fp32 reference on
fresh random operands, outputs NaN-poisoned. Run by test_gemv.py in a subprocess: the variable must
be set before `triton.jit` decorates the kernel.

Interpreter fixes (they change how the interpreter executes, never what is asserted): the bf16
tl.dot and fp32 -> bf16 rounding patches of tests/experimental/b12x/norm/conftest.py (loaded from
there), and one more here: the interpreter multiplies bf16 tensors as their raw uint16 bits (as it
does in dots), and the GEMV scales bit-placed bf16 codes by a bf16 factor. The patch multiplies the
bf16 operands as fp32 and rounds to nearest even, what the GPU's mul.rn.bf16 computes;
`test_interpreter_patch_multiplies_bf16` checks it, so a fixed Triton shows up.
"""

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.interpret
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_gemv.py"


def _load_norm_patches() -> None:
    path = Path(__file__).resolve().parents[1] / "norm" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_b12x_norm_interpret_patches", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # patches at import (TRITON_INTERPRET=1)


def _patch_bf16_mul() -> None:
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_fmul, "_b12x_bf16_mul", False):
        return
    original = builder.create_fmul

    def as_f32(h):
        return (h.data.astype(np.uint32) << np.uint32(16)).view(np.float32)

    def create_fmul(self, lhs, rhs):
        if lhs.dtype.scalar != tl.bfloat16:
            return original(self, lhs, rhs)
        prod = np.multiply(as_f32(lhs), as_f32(rhs)).astype(np.float32)
        bits = prod.view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        return interpreter.TensorHandle(np.where(np.isnan(prod), np.uint16(0x7FC0), rounded), tl.bfloat16)

    create_fmul._b12x_bf16_mul = True
    builder.create_fmul = create_fmul


_load_norm_patches()
_patch_bf16_mul()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from flashinfer.experimental.b12x.gemm._shared import launch as L  # noqa: E402
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_gemv as KG  # noqa: E402
from flashinfer.experimental.b12x.gemm.blockscaled._gemv_config import GemvConfig  # noqa: E402

from .helpers import TORCH, check_tolerance, make_operands  # noqa: E402


@triton.jit
def _mul_kernel(x_ptr, y_ptr, o_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(o_ptr + i, tl.load(x_ptr + i) * tl.load(y_ptr + i))


def test_interpreter_patch_multiplies_bf16():
    x = torch.tensor([1.5, -3.0, 2.0**-130, 0.1], dtype=torch.bfloat16)
    y = torch.tensor([2.0, 0.5, 2.0**8, 3.0], dtype=torch.bfloat16)
    out = torch.empty(4, dtype=torch.bfloat16)
    _mul_kernel[(1,)](x, y, out, N=4)
    assert torch.equal(out.float(), (x.float() * y.float()).to(torch.bfloat16).float())


def _run(a_fmt, b_fmt, m, n, k, config, *, out_dtype="bfloat16", alpha=1.0, seed=0, spare_rows=1):
    """One launch; out is the first m rows of a NaN buffer with spare rows that must stay NaN."""
    ops = make_operands(a_fmt, b_fmt, m, n, k, seed=seed)
    buf = torch.full((m + spare_rows, n), float("nan"), dtype=TORCH[out_dtype])
    out = buf[:m]
    args, alpha_f = L.launch_args(
        a_fmt, ops.a_values, None, None, b_fmt, ops.weight.values, ops.weight.scales, ops.weight.alpha, alpha, out
    )
    KG.launch(KG.constexprs(a_fmt, b_fmt, config), config, *args, alpha_f)
    assert torch.isnan(buf[m:]).all(), "the kernel wrote rows >= M"
    ops.alpha = float(alpha) if not isinstance(alpha, torch.Tensor) else float(alpha)
    return out, ops


CASES = [
    # (a_fmt, b_fmt, m, n, k, config)
    ("bfloat16", "nvfp4", 1, 64, 256, GemvConfig(32, 128, 1, 2, 2)),
    ("bfloat16", "nvfp4", 3, 96, 512, GemvConfig(32, 256, 1, 2, 2)),
    ("bfloat16", "nvfp4", 2, 80, 256, GemvConfig(32, 128, 2, 2, 2)),  # partial last row tile
    ("bfloat16", "mxfp8", 9, 176, 256, GemvConfig(128, 128, 1, 2, 8)),  # 48 rows of 128 past N
    ("bfloat16", "nvfp4", 16, 32, 384, GemvConfig(16, 128, 3, 2, 1)),
    ("bfloat16", "mxfp4", 1, 256, 128, GemvConfig(64, 128, 1, 2, 4)),
    ("bfloat16", "mxfp4", 16, 48, 512, GemvConfig(16, 256, 2, 2, 1)),
    ("bfloat16", "mxfp8", 3, 32, 256, GemvConfig(32, 128, 2, 2, 2)),
    ("bfloat16", "mxfp8", 16, 160, 128, GemvConfig(32, 128, 1, 2, 2)),
    ("float16", "nvfp4", 7, 64, 256, GemvConfig(64, 128, 2, 2, 4)),
    ("float16", "mxfp8", 1, 48, 384, GemvConfig(16, 128, 1, 2, 1)),
]


@pytest.mark.parametrize("a_fmt, b_fmt, m, n, k, config", CASES)
def test_gemv_matches_the_reference(a_fmt, b_fmt, m, n, k, config):
    out, ops = _run(a_fmt, b_fmt, m, n, k, config, seed=m + n)
    check_tolerance(out, ops, "bfloat16")


@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
def test_output_dtypes_and_a_device_alpha(out_dtype):
    alpha = torch.tensor([0.375], dtype=torch.float32)
    out, ops = _run("bfloat16", "nvfp4", 5, 64, 256, GemvConfig(32, 128, 2, 2, 2), out_dtype=out_dtype, alpha=alpha)
    check_tolerance(out, ops, out_dtype)


def test_split_k_leaves_the_counters_at_zero_and_reruns_equal():
    """The last split resets its tile's ticket, so the next launch (a graph replay) needs no clearing."""
    cfg = GemvConfig(16, 128, 3, 2, 1)
    ops = make_operands("bfloat16", "mxfp4", 4, 64, 384, seed=3)
    outs = []
    for _ in range(2):
        out = torch.full((4, 64), float("nan"), dtype=torch.bfloat16)
        args, alpha_f = L.launch_args(
            "bfloat16", ops.a_values, None, None, "mxfp4", ops.weight.values, ops.weight.scales, None, 1.0, out
        )
        KG.launch(KG.constexprs("bfloat16", "mxfp4", cfg), cfg, *args, alpha_f)
        outs.append(out)
        _, cnt = KG.WORKSPACES.get(out.device, 64, cfg)
        assert int(cnt.abs().sum()) == 0
    assert torch.equal(outs[0], outs[1])
    check_tolerance(outs[0], ops, "bfloat16")


def test_launch_rejects_k_not_a_multiple_of_block_k_and_m_above_16():
    cfg = GemvConfig(32, 256, 1, 2, 2)
    ops = make_operands("bfloat16", "nvfp4", 2, 32, 384, seed=1)
    out = torch.empty(2, 32, dtype=torch.bfloat16)
    args, alpha_f = L.launch_args(
        "bfloat16", ops.a_values, None, None, "nvfp4", ops.weight.values, ops.weight.scales, None, 1.0, out
    )
    with pytest.raises(ValueError, match="K % block_k == 0, got K = 384"):
        KG.launch(KG.constexprs("bfloat16", "nvfp4", cfg), cfg, *args, alpha_f)
    big = make_operands("bfloat16", "nvfp4", 17, 32, 256, seed=1)
    out = torch.empty(17, 32, dtype=torch.bfloat16)
    args, alpha_f = L.launch_args(
        "bfloat16", big.a_values, None, None, "nvfp4", big.weight.values, big.weight.scales, None, 1.0, out
    )
    with pytest.raises(ValueError, match="M <= 16, got M = 17"):
        KG.launch(KG.constexprs("bfloat16", "nvfp4", cfg), cfg, *args, alpha_f)
