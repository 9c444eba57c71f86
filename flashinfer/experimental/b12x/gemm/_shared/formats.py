"""Operand formats and recipes of the b12x GEMMs, and the static facts kernels are keyed on (stdlib only).

An operand is one of:

    name        values                      scales                                   family
    bf16/f16    16-bit activations [M, K]   none                                     raw16
    nvfp4       E2M1, two per byte [R, K/2] E4M3 per 16, 128x4 swizzled (pad 0)      fp4
    mxfp4       E2M1, two per byte          UE8M0 per 32, 128x4 swizzled (pad 127)   fp4
    mxfp8       E4M3 [R, K]                 UE8M0 per 32, 128x4 swizzled (pad 127)   fp8
    fp8_block   E4M3 [R, K]                 fp32: A [M, K/128] per token, B [ceil(N/128), K/128]
    fp8_tensor  E4M3 [R, K]                 one fp32 scalar

A recipe pairs them: nvfp4 x nvfp4, mxfp4 x mxfp4, mxfp8 x mxfp8, fp8_block x fp8_block, fp8_tensor x
fp8_tensor, or a 16-bit activation x any weight format (weight-only: W4A16 for fp4, W8A16 for fp8).

How the kernels dequantize (`dequant.py` has the bit-level code, the docstrings there the proofs):
every quantized value becomes an exact 16-bit float in registers by placing its code bits into the
16-bit word ("bit placement", which scales it by 2^-E) and one packed multiply by a factor F that
holds the block scale times 2^(E - C). The product is the true value times 2^-C; `C` per (format,
compute dtype) is chosen so every product of realistic scales is exact, and the epilogue multiplies
by 2^(C_a + C_b). Exactness ranges are in `EXACT_RANGES`.
"""

from __future__ import annotations

from dataclasses import dataclass

RAW16 = ("bfloat16", "float16")
QUANTIZED = ("nvfp4", "mxfp4", "mxfp8", "fp8_block", "fp8_tensor")
FORMATS = RAW16 + QUANTIZED
RECIPES = QUANTIZED  # a recipe is named after the format both operands share
OUT_DTYPES = ("bfloat16", "float16", "float32")

# K granularity every kernel needs (one decode chunk; two tiled K-tiles; one block-FP8 block).
K_ALIGN = 128
# N granularity: output rows start 32-byte aligned and the swizzled scale atoms stay whole per tile.
N_ALIGN = 16


@dataclass(frozen=True)
class Format:
    """Static facts of one operand format (see the module table)."""

    name: str
    family: str  # "raw16", "fp4", "fp8"
    scale: str  # "none", "e4m3", "ue8m0", "fp32_block", "fp32_scalar"
    sf_vec: int  # K elements per scale (0: none or one per tensor)

    @property
    def value_bits(self) -> int:
        return {"raw16": 16, "fp4": 4, "fp8": 8}[self.family]

    def row_bytes(self, k: int) -> int:
        return k * self.value_bits // 8

    @property
    def swizzled(self) -> bool:
        return self.scale in ("e4m3", "ue8m0")


FORMAT = {
    "bfloat16": Format("bfloat16", "raw16", "none", 0),
    "float16": Format("float16", "raw16", "none", 0),
    "nvfp4": Format("nvfp4", "fp4", "e4m3", 16),
    "mxfp4": Format("mxfp4", "fp4", "ue8m0", 32),
    "mxfp8": Format("mxfp8", "fp8", "ue8m0", 32),
    "fp8_block": Format("fp8_block", "fp8", "fp32_block", 128),
    "fp8_tensor": Format("fp8_tensor", "fp8", "fp32_scalar", 0),
}

# (ab_dtype, sf_dtype, sf_vec_size) spellings of `mm(**kwargs)` -> recipe.
RECIPE_BY_KWARGS = {
    ("float4_e2m1fn", "float8_e4m3fn", 16): "nvfp4",
    ("float4_e2m1fn", "float8_e8m0fnu", 32): "mxfp4",
    ("float8_e4m3fn", "float8_e8m0fnu", 32): "mxfp8",
    ("float8_e4m3fn", "float32", 128): "fp8_block",
    ("float8_e4m3fn", "float32", 0): "fp8_tensor",
}
_DTYPE_ALIASES = {
    "float4_e2m1fn_x2": "float4_e2m1fn",
    "e2m1": "float4_e2m1fn",
    "fp4": "float4_e2m1fn",
    "e4m3": "float8_e4m3fn",
    "fp8": "float8_e4m3fn",
    "ue8m0": "float8_e8m0fnu",
    "e8m0": "float8_e8m0fnu",
    "fp32": "float32",
}


def dtype_key(dtype) -> str:
    """Canonical name of a dtype given as a torch dtype or a string ('e2m1', 'torch.float8_e4m3fn'...)."""
    name = str(dtype).removeprefix("torch.")
    return _DTYPE_ALIASES.get(name, name)


def recipe_from_kwargs(ab_dtype, sf_dtype, sf_vec_size) -> str:
    """The recipe named by mm's (ab_dtype, sf_dtype, sf_vec_size); ValueError lists the valid triples."""
    key = (dtype_key(ab_dtype), dtype_key(sf_dtype), int(sf_vec_size or 0))
    if key not in RECIPE_BY_KWARGS:
        valid = "; ".join(f"{a}/{s}/{v} ({r})" for (a, s, v), r in RECIPE_BY_KWARGS.items())
        raise ValueError(f"(ab_dtype, sf_dtype, sf_vec_size) = {key} is not a recipe; valid: {valid}")
    return RECIPE_BY_KWARGS[key]


def pair_ok(a_fmt: str, b_fmt: str) -> bool:
    """Whether the kernels implement A in `a_fmt` times B (the weight) in `b_fmt`."""
    if b_fmt not in QUANTIZED:
        return False
    return a_fmt in RAW16 or a_fmt == b_fmt


def pair_reason(a_fmt: str, b_fmt: str, out_dtype: str) -> str | None:
    """None when the kernels implement A in `a_fmt` x B in `b_fmt` into `out_dtype`, else why not (the first two
    checks of every blockscaled kernel's why_not)."""
    if not pair_ok(a_fmt, b_fmt):
        return f"A format {a_fmt} x B format {b_fmt} is not a supported pair"
    if out_dtype not in OUT_DTYPES:
        return f"out dtype must be one of {OUT_DTYPES}, got {out_dtype}"
    return None


def compute_dtype(a_fmt: str) -> str:
    """MMA input type: fp16 only for fp16 activations; everything quantized is exact in bf16."""
    return "float16" if a_fmt == "float16" else "bfloat16"


def k_family(a_fmt: str, b_fmt: str) -> str:
    """Which in-register K permutation both operands share: the weight's family decides."""
    return FORMAT[b_fmt].family


# Bit placement scales a code by 2^-E: (family, compute) -> E (dequant.py derives each).
PLACEMENT_EXP = {
    ("fp4", "bfloat16"): 126,
    ("fp4", "float16"): 14,
    ("fp8", "bfloat16"): 120,
    ("fp8", "float16"): 8,
}

# (format, compute) -> C: dequantized values are true value * 2^-C.
# bf16: C = 16 keeps NVFP4 (sf <= 448, code <= 6) and MX scales up to 2^17 exact (F = 2^(e-17)).
# fp16: NVFP4 needs C >= 7 (sf * 2^(14-C) <= 65504), C = 8 keeps 2^-18 codes exact; MXFP4 C = 0 and
# MXFP8 C = -4 centre the representable window on weight scales (EXACT_RANGES).
DEQUANT_SHIFT = {
    ("nvfp4", "bfloat16"): 16,
    ("nvfp4", "float16"): 8,
    ("mxfp4", "bfloat16"): 16,
    ("mxfp4", "float16"): 0,
    ("mxfp8", "bfloat16"): 16,
    ("mxfp8", "float16"): -4,
    ("fp8_block", "bfloat16"): 0,
    ("fp8_block", "float16"): 0,
    ("fp8_tensor", "bfloat16"): 0,
    ("fp8_tensor", "float16"): 0,
    ("bfloat16", "bfloat16"): 0,
    ("float16", "float16"): 0,
}

# UE8M0 bytes e for which MX dequantization in registers is exact (outside: clamped scale factor or
# flushed values). fp16 windows are narrower: prefer bf16 activations for MX weights.
EXACT_RANGES = {
    ("mxfp4", "bfloat16"): (11, 144),
    ("mxfp8", "bfloat16"): (19, 150),
    ("mxfp4", "float16"): (104, 128),
    ("mxfp8", "float16"): (108, 130),
}


def epilogue_exponent(a_fmt: str, b_fmt: str) -> int:
    """C_a + C_b: the accumulator holds the product times 2^-(C_a + C_b)."""
    compute = compute_dtype(a_fmt)
    return DEQUANT_SHIFT[(a_fmt, compute)] + DEQUANT_SHIFT[(b_fmt, compute)]


def swizzled_cols4(k: int, sf_vec: int) -> int:
    """Scale columns of a K-long row, rounded up to the 4-column atom (FORMATS.md swizzle)."""
    cols = k // sf_vec
    return (cols + 3) // 4 * 4


def check_shape(what: str, n: int, k: int) -> None:
    """ValueError unless the kernels can take N and K (plan and pack time, never in a launch)."""
    if k <= 0 or k % K_ALIGN:
        raise ValueError(f"{what}: K must be a positive multiple of {K_ALIGN} for the b12x GEMM kernels, got K={k}")
    if n <= 0 or n % N_ALIGN:
        raise ValueError(f"{what}: N must be a positive multiple of {N_ALIGN} for the b12x GEMM kernels, got N={n}")
