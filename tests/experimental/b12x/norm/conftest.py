"""Interpret tier fixes for bf16 (applied only when TRITON_INTERPRET=1).

Triton's CPU interpreter stores bf16 tensors as raw uint16 and its `create_dot` multiplies those
bits as integers (seen in triton 3.6 and 3.9; fp16/fp32/fp8 dots are right), so any kernel with a
bf16 `tl.dot` (norm.mhc pass 1 on bf16 activations) computes garbage under the interpreter. This
patch upcasts bf16 operands of the interpreter's dot to float32 exactly (bf16 is the top half of an
fp32) before the matmul. It changes how the interpreter executes, never what the tests assert;
interpret_mhc.py checks the patch itself (a bf16 dot against torch) so a fixed Triton shows up.

Second fix: the interpreter's fp32 -> bf16 conversion truncates by default, and its "rtne" mode
drops the carry when the mantissa rounds up to the next power of two (the value comes out halved
when the exponent is odd). The GPU rounds to nearest even (cvt.rn.bf16.f32). norm.mhc's pass 1
splits fn into hi = bf16(fn) + lo = bf16(fn - hi); with the interpreter's rounding the split is
off by up to a factor 2 on a few elements. The patch gives fp32 -> bf16 the GPU's rounding (numpy
integer round-to-nearest-even on the bit pattern; NaN stays NaN); interpret_mhc.py checks it.
"""

import os


def _patch_interpreter_bf16_dot() -> None:
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_dot, "_b12x_bf16_upcast", False):
        return
    original = builder.create_dot

    def upcast(h):
        if h.dtype.scalar == tl.bfloat16:
            bits = h.data.astype(np.uint32) << np.uint32(16)
            return interpreter.TensorHandle(bits.view(np.float32), tl.float32)
        return h

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, upcast(a), upcast(b), d, input_precision, max_num_imprecise_acc)

    create_dot._b12x_bf16_upcast = True
    builder.create_dot = create_dot

    original_convert = interpreter._convert_float

    def convert_float(input, input_dtype, output_dtype, rounding_mode):
        if input_dtype == tl.float32 and output_dtype == tl.bfloat16:
            bits = np.ascontiguousarray(input).view(np.uint32).astype(np.uint64)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            nan = np.isnan(np.ascontiguousarray(input).view(np.float32))
            return np.where(nan, np.uint16(0x7FC0), rounded).reshape(np.shape(input))
        return original_convert(input, input_dtype, output_dtype, rounding_mode)

    interpreter._convert_float = convert_float


if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    _patch_interpreter_bf16_dot()
