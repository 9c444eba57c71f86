"""Plain-torch codecs and quantizer references shared by the gemm, moe and quantization ops.

These are the bit-exact oracles the GPU quantizers must match (FORMATS.md). Each module's docstring
gives its formula as an ordered list of fp32 ops and its NaN/Inf rules. Runs on any device; importing
this package loads torch only.
"""

from .block_fp8 import (
    BLOCK_FP8_ACT_GROUP,
    BLOCK_FP8_WEIGHT_BLOCK,
    dequantize_block_fp8_act,
    dequantize_block_fp8_weight,
    quantize_block_fp8_act,
    quantize_block_fp8_weight,
    requantize_block_fp8_to_mx,
)
from .checkpoint import (
    BlockFp8Linear,
    MxFp4Experts,
    MxFp8Linear,
    NvFp4Linear,
    deepseek_block_fp8_linear,
    deepseek_block_fp8_linear_to_mx,
    modelopt_nvfp4_linear,
    ocp_mxfp4_experts,
)
from .e2m1 import E2M1_GRID, E2M1_MAX, e2m1_decode, e2m1_encode, e2m1_values, pack_e2m1, unpack_e2m1
from .mx import (
    MX_BLOCK,
    dequantize_mxfp4,
    dequantize_mxfp8,
    mxfp4_scale_floor,
    quantize_mxfp4,
    quantize_mxfp8,
)
from .nvfp4 import NVFP4_BLOCK, dequantize_nvfp4, nvfp4_global_scale, quantize_nvfp4
from .scales import (
    E4M3_MAX,
    UE8M0_NAN_BYTE,
    UE8M0_ONE_BYTE,
    block_amax,
    e4m3_decode,
    e4m3_encode,
    mx_scale_round_up,
    ue8m0_decode,
    ue8m0_round_up,
)
from .swizzle import swizzle_scales, swizzled_size, unswizzle_scales

__all__ = [
    "BLOCK_FP8_ACT_GROUP",
    "BLOCK_FP8_WEIGHT_BLOCK",
    "E2M1_GRID",
    "E2M1_MAX",
    "E4M3_MAX",
    "MX_BLOCK",
    "NVFP4_BLOCK",
    "UE8M0_NAN_BYTE",
    "UE8M0_ONE_BYTE",
    "BlockFp8Linear",
    "MxFp4Experts",
    "MxFp8Linear",
    "NvFp4Linear",
    "block_amax",
    "deepseek_block_fp8_linear",
    "deepseek_block_fp8_linear_to_mx",
    "dequantize_block_fp8_act",
    "dequantize_block_fp8_weight",
    "dequantize_mxfp4",
    "dequantize_mxfp8",
    "dequantize_nvfp4",
    "e2m1_decode",
    "e2m1_encode",
    "e2m1_values",
    "e4m3_decode",
    "e4m3_encode",
    "modelopt_nvfp4_linear",
    "mx_scale_round_up",
    "mxfp4_scale_floor",
    "nvfp4_global_scale",
    "ocp_mxfp4_experts",
    "pack_e2m1",
    "quantize_block_fp8_act",
    "quantize_block_fp8_weight",
    "quantize_mxfp4",
    "quantize_mxfp8",
    "quantize_nvfp4",
    "requantize_block_fp8_to_mx",
    "swizzle_scales",
    "swizzled_size",
    "ue8m0_decode",
    "ue8m0_round_up",
    "unpack_e2m1",
    "unswizzle_scales",
]
