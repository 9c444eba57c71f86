"""Per-token x 128 E4M3 quantization of bf16/fp16 activations, bit-exact with `_lib.quant.quantize_block_fp8_act`.

    amax = max |x_i| over the 128-group (NaN ignored: max.f32 returns the non-NaN operand)
    s    = amax / 448 (div.rn.f32), 1.0 when it is 0
    q_i  = cvt.rn.satfinite.e4m3(x_i / s) (div.rn.f32 per element: a true division, as the oracle)

Half a warp owns one (token, group): 16 lanes x 8 values, one 16-byte load each; the amax reduces
over the half-warp with xor shuffles (masks < 16 never cross halves). (token, group) pairs are
numbered token * G + group, two per warp, so any T and G = K / 128 work with full warps.
Bytes: 2 T K read, T K + 4 T K / 128 written.
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from ..._lib.compile import cute_compile, kernel
from ..._lib.ptx import DEVICE

_SOURCES = ("flashinfer.experimental.b12x._lib.ptx",)
_CUTE = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}
GROUP = 128


@dataclass(frozen=True)
class QuantConfig:
    """warps per CTA (two (token, group) pairs per warp)."""

    warps: int = 4


class QuantLogic:
    """The straight-line per-warp work (run by the kernel and by the CPU emulator)."""

    def __init__(self, dtype: str, config: QuantConfig) -> None:
        if dtype not in _CUTE or config.warps not in (1, 2, 4, 8, 16):
            raise ValueError(
                f"block-FP8 quantizer: dtype must be bfloat16/float16 and warps 1..16, got {dtype}, {config}"
            )
        self.dtype, self.cfg = dtype, config

    def warp(self, ops, src_base, val_base, sc_base, t, k, gwarp, lane):
        """Quantize pair 2 * gwarp + lane // 16 (pairs past T * K / 128 do nothing)."""
        groups = k >> 7
        pair = gwarp * 2 + (lane >> 4)
        hl = lane & 15
        live = pair < t * groups
        token = pair // groups
        group = pair - token * groups
        elem = ops.i64(token) * ops.i64(k) + ops.i64(group * GROUP + hl * 8)
        words = ops.ldg_v4(src_base + elem * 2, live)
        vals = [v for w in words for v in ops.half2_to_f32(self.dtype, w)]
        amax = ops.f32_zero()
        for v in vals:
            amax = ops.fmax(amax, ops.fmax(v, -v))
        for mask in (8, 4, 2, 1):
            amax = ops.fmax(amax, ops.shfl_xor(amax, mask))
        s = ops.div_rn(amax, ops.f32(448.0))
        s = ops.select_f32(s == 0, ops.f32(1.0), s)
        q = [ops.f32_to_e4m3x2(ops.div_rn(vals[2 * i], s), ops.div_rn(vals[2 * i + 1], s)) for i in range(4)]
        ops.stg_u32(val_base + elem, q[0] | (q[1] << 16), live)
        ops.stg_u32(val_base + elem + 4, q[2] | (q[3] << 16), live)
        ops.stg_f32(sc_base + (ops.i64(token) * ops.i64(groups) + ops.i64(group)) * 4, s, live & (hl == 0))


class BlockFp8Quant:
    def __init__(self, logic: QuantLogic) -> None:
        self.logic = logic

    @cute.jit
    def __call__(self, mX: cute.Tensor, mQ: cute.Tensor, mS: cute.Tensor, stream: cuda.CUstream):
        pairs = mX.shape[0] * (mX.shape[1] // GROUP)
        per_cta = 2 * self.logic.cfg.warps
        self.kernel(mX, mQ, mS).launch(
            grid=[(pairs + per_cta - 1) // per_cta, 1, 1], block=[32 * self.logic.cfg.warps, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mQ: cute.Tensor, mS: cute.Tensor):
        tid, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gwarp = bidx * self.logic.cfg.warps + (tid >> 5)
        self.logic.warp(
            DEVICE,
            mX.iterator.toint(),
            mQ.iterator.toint(),
            mS.iterator.toint(),
            mX.shape[0],
            mX.shape[1],
            gwarp,
            tid & 31,
        )


@kernel("gemm.block_fp8_linear.quantize", sources=_SOURCES)
def compile_quant(dtype: str, config: QuantConfig, arch: str):
    """tvm-ffi launcher `fn(x [T, K], values uint8 [T, K], scales fp32 [T, K/128])`."""
    logic = QuantLogic(dtype, config)
    t, k = cute.sym_int(), cute.sym_int()
    x = make_fake_compact_tensor(_CUTE[dtype], (t, k), stride_order=(1, 0), assumed_align=16)
    q = make_fake_compact_tensor(cutlass.Uint8, (t, k), stride_order=(1, 0), assumed_align=16)
    s = make_fake_compact_tensor(cutlass.Float32, (t, cute.sym_int()), stride_order=(1, 0), assumed_align=4)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(BlockFp8Quant(logic), x, q, s, stream, arch=arch)
