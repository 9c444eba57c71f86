"""What byte the device's fp32 -> E4M3 conversion (`cvt.rn.satfinite.e4m3x2.f32`, what Triton's
`.to(tl.float8e4nv)` emits) writes for NaN of either sign and payload, +-Inf and out-of-range values.

Why: the MXFP8 quantizer selects 0x7F for every NaN value itself (one FSETP + SEL a value, plus the
byte unpacking around it: ~3 of its ~7.5 instructions a value). If the hardware already writes 0x7F
for every NaN, the select is redundant. Prints one line per input; exits 1 on no GPU.

    python3 scripts/probe_e4m3_nan.py
"""

import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _cvt(x_ptr, q_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(q_ptr + offs, x.to(tl.float8e4nv).to(tl.uint8, bitcast=True), mask=offs < n)


def main() -> int:
    if not torch.cuda.is_available():
        print("no GPU")
        return 1
    bits = [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FA00000, 0xFFA00000]
    bits += [0x7F800000, 0xFF800000]
    vals = torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
    vals = torch.cat([vals, torch.tensor([448.0, -448.0, 464.0, -464.0, 1e30, -1e30, 0.0, -0.0])])
    x = vals.cuda()
    q = torch.full((x.numel(),), 0x55, dtype=torch.uint8, device="cuda")
    _cvt[(1,)](x, q, x.numel(), BLOCK=32)
    for v, b in zip(vals.view(torch.int32).tolist(), q.cpu().tolist()):
        print(f"fp32 bits 0x{v & 0xFFFFFFFF:08X} -> e4m3 byte 0x{b:02X}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
