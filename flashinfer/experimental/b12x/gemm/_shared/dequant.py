"""Register-level operand transforms shared by the GEMM kernels, written against an `ops` backend.

`ops` is `ptx.DEVICE` inside a CuTe kernel and the numpy emulator in the tests, so this exact code is
what the CPU tests execute. Values are 32-bit registers; a "half2" register holds two 16-bit floats
(bf16 or f16, the compute dtype), the lower-indexed element in the low half.

The unit of work is a SPAN: 32 consecutive K values of one row, starting at a multiple of 32 (one
MXFP4/MXFP8 block, two NVFP4 blocks, a quarter of a block-FP8 block). Its values are handled in four
GROUPS of 8, and each group becomes four half2 registers in the K order `K_ORDER[family]`:

    fp4 family: (v0,v4) (v1,v5) (v2,v6) (v3,v7)   -- nibbles i and i+4 of one word (cheap shifts)
    fp8 family: (v0,v2) (v1,v3) (v4,v6) (v5,v7)   -- bytes i and i+2 of each word

Both operands of a product use the weight's family order, so dot products over a group are unchanged
(16-bit activations are permuted to match with `prmt`).

Bit placement (exactness argument). E2M1 code s.e1e0.m put into a 16-bit float as sign -> bit 15 and
e1e0m -> the two low exponent bits and the top mantissa bit gives, for e = e1e0 >= 1,
2^(e - bias) * (1 + m/2) and for e = 0 the subnormal m * 2^(1 - bias - 1): both are the E2M1 value
times 2^-E with E = bias - 1 (bf16: 126, f16: 14). E4M3 s.eeee.mmm placed as the low four exponent
bits and the top three mantissa bits gives its value times 2^-E, E = bias - 7 (bf16: 120, f16: 8),
subnormals included. Multiplying by a factor F = scale * 2^(E - C) (one packed fma with -0) is exact
whenever the result is representable, and leaves value * scale * 2^-C (C in formats.DEQUANT_SHIFT).
Not propagated: E4M3 NaN bytes (0x7F/0xFF) become finite 480 * 2^-E-scaled values; a UE8M0 255 scale
clamps to the largest factor.
"""

from __future__ import annotations

from .formats import DEQUANT_SHIFT, FORMAT, PLACEMENT_EXP

K_ORDER = {
    "fp4": (0, 4, 1, 5, 2, 6, 3, 7),
    # FP4 weights whose nibbles were stored pre-permuted (the stream layout's order "natural": nibble
    # i holds value 2i, nibble i + 4 value 2i + 1), so `fp4_pair` yields (v2i, v2i+1) and 16-bit
    # activations need no permute
    "natural": (0, 1, 2, 3, 4, 5, 6, 7),
    "fp8": (0, 2, 1, 3, 4, 6, 5, 7),
}
_MANT = {"bfloat16": 7, "float16": 10}
_BIAS = {"bfloat16": 127, "float16": 15}
_MAX_FIELD = {"bfloat16": 254, "float16": 30}
_SIGNS = 0x80008000


def _shift(x, s: int):
    return x if s == 0 else (x << s if s > 0 else x >> (-s))


def pow2_bits(exp: int, compute: str) -> int:
    """The half2 register holding 2^exp twice (a static constant; exp must be a normal exponent)."""
    field = exp + _BIAS[compute]
    if not 1 <= field <= _MAX_FIELD[compute]:
        raise ValueError(f"2^{exp} is not a normal {compute}")
    bits = field << _MANT[compute]
    return bits | (bits << 16)


# E4M3 bytes of the E2M1 magnitudes 0..7 (0, 0.5, 1, 1.5 | 2, 3, 4, 6), little-endian in two words: a prmt table
E2M1_AS_E4M3 = (0x3C383000, 0x4C484440)


def fp4_as_e4m3(ops, words):
    """FP4 words (8 E2M1 codes each, nibble i = element i) -> twice as many words of their E4M3 bytes in element
    order (exact: every E2M1 value is an E4M3 value): per 16-bit half, a prmt over the magnitude table selected by
    the codes' low 3 bits, then each code's sign bit (4i + 3) moved to its byte's (8i + 7)."""
    lo, hi = ops.u32(E2M1_AS_E4M3[0]), ops.u32(E2M1_AS_E4M3[1])
    out = []
    for q in words:
        for half in (q & 0xFFFF, q >> 16):
            s = half & 0x8888
            sign = ((s & 0x8) << 4) | ((s & 0x80) << 8) | ((s & 0x800) << 12) | ((s & 0x8000) << 16)
            out.append(ops.prmt_r(lo, hi, half & 0x7777) | sign)
    return out


def fp4_pair(ops, q, i: int, compute: str):
    """Codes i and i+4 of the 8 E2M1 nibbles in q, placed as a half2 (times 2^-E)."""
    low = 6 if compute == "bfloat16" else 9  # where the magnitude's lowest bit lands
    mask = (0x7 << low) * 0x10001
    return (_shift(q, low - 4 * i) & ops.u32(mask)) | (_shift(q, 12 - 4 * i) & ops.u32(_SIGNS))


def fp4_pair_left(ops, q, q8, i: int, compute: str):
    """`fp4_pair` with left shifts only (the same bits): pairs 2 and 3 shift q8 = q >> 8 (one byte
    permute per word, shared by both) left instead of shifting q right, so every shift can issue as
    IMAD.SHL on the FMA pipe and the ALU pipe keeps only the masks and the byte permute."""
    low = 6 if compute == "bfloat16" else 9
    mask = (0x7 << low) * 0x10001
    src, base = (q, 4 * i) if i < 2 else (q8, 4 * i - 8)
    return (_shift(src, low - base) & ops.u32(mask)) | (_shift(q, 12 - 4 * i) & ops.u32(_SIGNS))


# The stream layout's "placed" order (bf16 only): each 16-bit half stores its 4 codes pre-placed so
# pair i needs one shift (or none) and one mask: pair 0 = m e0 e1 at bits 6..8 and s at 15 (mask
# only), pair 1 at 0..2 / 9 (<< 6), pair 2 at 3..5 / 12 (<< 3); pair 3 fills bits 10, 11, 13, 14
# (s 10, m 11, e0 13, e1 14: three shifts). 11 ALU instructions per word against fp4_pair's 15.
PLACED_MASK = 0x81C081C0  # sign at 15 and e1 e0 m at 8..6 of each bf16 half


def fp4_pair_placed(ops, q, i: int):
    """`fp4_pair(ops, q', i, "bfloat16")` of the natural-order word q' whose placed form is q."""
    mask = ops.u32(PLACED_MASK)
    if i == 0:
        return q & mask
    if i == 1:
        return (q << 6) & mask
    if i == 2:
        return (q << 3) & mask
    return ((q >> 6) & ops.u32(0x01800180)) | ((q >> 5) & ops.u32(0x00400040)) | ((q << 5) & ops.u32(_SIGNS))


def fp4_pair_mul(ops, q, q8, i: int):
    """`fp4_pair(ops, q, i, "bfloat16")` in three instructions a pair: keep the two codes (a mask), then one multiply
    by 2^a + 2^b writes two copies of each, one shifted so that its e1 e0 m land on bits 6..8 (22..24), one so that
    its sign lands on bit 15 (31), and a mask keeps those bits. The copies of a code are 6 bits apart and 4 wide and
    the codes 16 apart, so no two overlap and the sum carries nothing. Pairs 2 and 3 take q8 = q >> 8 as
    `fp4_pair_left` does (no right shift is a multiply). 13 instructions a word with q8's, against 16."""
    src, base = (q, 4 * i) if i < 2 else (q8, 4 * i - 8)
    codes = src & ops.u32((0xF << base) * 0x10001)
    return ops.mul_lo(codes, (1 << (6 - base)) + (1 << (12 - base))) & ops.u32(PLACED_MASK)


def fp8_pair(ops, q, i: int, compute: str):
    """Bytes i and i+2 of the 4 E4M3 bytes in q, placed as a half2 (times 2^-E)."""
    low = 4 if compute == "bfloat16" else 7
    mask = (0x7F << low) * 0x10001
    return (_shift(q, low - 8 * i) & ops.u32(mask)) | (_shift(q, 8 - 8 * i) & ops.u32(_SIGNS))


def raw16_group(ops, family: str, x):
    """8 consecutive 16-bit values in 4 registers (x[r] = elements 2r, 2r+1) -> the family's order."""
    if family == "natural":
        return tuple(x)
    if family == "fp4":
        return (
            ops.prmt(x[0], x[2], 0x5410),
            ops.prmt(x[0], x[2], 0x7632),
            ops.prmt(x[1], x[3], 0x5410),
            ops.prmt(x[1], x[3], 0x7632),
        )
    return (
        ops.prmt(x[0], x[1], 0x5410),
        ops.prmt(x[0], x[1], 0x7632),
        ops.prmt(x[2], x[3], 0x5410),
        ops.prmt(x[2], x[3], 0x7632),
    )


def natural_group(ops, family: str, g):
    """The inverse of `raw16_group`: a group's four half2 registers in `family` order -> elements
    (0, 1), (2, 3), (4, 5), (6, 7) (what a 16-bit row in memory holds)."""
    if family == "natural":
        return tuple(g)
    if family == "fp4":  # g = (v0,v4) (v1,v5) (v2,v6) (v3,v7)
        return (
            ops.prmt(g[0], g[1], 0x5410),
            ops.prmt(g[2], g[3], 0x5410),
            ops.prmt(g[0], g[1], 0x7632),
            ops.prmt(g[2], g[3], 0x7632),
        )
    return raw16_group(ops, family, g)  # the fp8 order's pair swap is its own inverse


def raw16_scaled_group(ops, family: str, compute: str, x, s):
    """Like raw16_group, each value multiplied by the fp32 `s` in fp32 and rounded once (block-FP8
    weight scale folded into 16-bit activations)."""
    f = [ops.half2_to_f32(compute, r) for r in x]  # f[r] = (element 2r, element 2r+1)
    v = [e * s for pair in f for e in pair]  # v[i] = element i * s
    order = K_ORDER[family]
    return tuple(ops.f32_to_half2(compute, v[order[2 * r]], v[order[2 * r + 1]]) for r in range(4))


def fp8_scaled_group(ops, words, s):
    """Two E4M3 words (8 values) -> bf16 half2 in the fp8 order, each value times the fp32 `s`,
    rounded once (block-FP8 activation scale times weight scale folded into the activation)."""
    out = []
    for q in words:
        swapped = ops.prmt(q, q, 0x3120)  # bytes (b0, b2, b1, b3): pairs (0,2) and (1,3) per half
        for half in (swapped, swapped >> 16):
            lo, hi = ops.half2_to_f32("float16", ops.e4m3x2_to_f16x2(half))
            out.append(ops.f32_to_half2("bfloat16", lo * s, hi * s))
    return tuple(out)


# ---- scale factors --------------------------------------------------------------------------------
def mx_factor(ops, fmt: str, compute: str, e):
    """half2 splat of F = 2^(e - 127) * 2^(E - C) from a UE8M0 byte e (uint32), clamped to normals."""
    family = FORMAT[fmt].family
    offset = PLACEMENT_EXP[(family, compute)] - DEQUANT_SHIFT[(fmt, compute)] - 127 + _BIAS[compute]
    field = ops.imax(ops.imin(ops.i32(e) + offset, _MAX_FIELD[compute]), 1)
    bits = ops.u32(field) << _MANT[compute]
    return bits | (bits << 16)


def nvfp4_factors(ops, compute: str, sf2):
    """(F0, F1) half2 splats of sf * 2^(E - C) for the two E4M3 scales in the low 16 bits of sf2."""
    h = ops.e4m3x2_to_f16x2(sf2)  # exact: every E4M3 value is an fp16
    shift = PLACEMENT_EXP[("fp4", compute)] - DEQUANT_SHIFT[("nvfp4", compute)]
    if compute == "float16":
        h = ops.hmul2("float16", h, ops.u32(pow2_bits(shift, "float16")))  # sf * 64 <= 28672
        return ops.prmt(h, h, 0x1010), ops.prmt(h, h, 0x3232)
    lo, hi = ops.half2_to_f32("float16", h)
    k = ops.f32(float(2.0**shift))
    return ops.f32_to_half2("bfloat16", lo * k, lo * k), ops.f32_to_half2("bfloat16", hi * k, hi * k)


def const_factor(fmt: str, compute: str) -> int:
    """F for formats without per-block factors (block/tensor FP8: the raw E4M3 value, exactly)."""
    family = FORMAT[fmt].family
    return pow2_bits(PLACEMENT_EXP[(family, compute)] - DEQUANT_SHIFT[(fmt, compute)], compute)


# ---- spans ----------------------------------------------------------------------------------------
def span_words(fmt: str) -> int:
    """32-bit words one span occupies in global memory."""
    return {"raw16": 16, "fp4": 4, "fp8": 8}[FORMAT[fmt].family]


def group_words(fmt: str, words, j: int):
    """The raw words of group j (0..3) of a span."""
    per = {"raw16": 4, "fp4": 1, "fp8": 2}[FORMAT[fmt].family]
    return words[per * j : per * (j + 1)]


def span_factors(ops, fmt: str, compute: str, scale):
    """The per-span factors of `span_group` from the span's loaded scale data.

    scale: nvfp4 -> the two E4M3 scale bytes in a uint32; mxfp4/mxfp8 -> the UE8M0 byte; fp8_block
    A side and 16-bit activations with a folded weight scale -> the fp32 scale; otherwise None.
    """
    fam = FORMAT[fmt].family
    if fam == "raw16":
        return ("perm",) if scale is None else ("fold16", scale)
    if fmt == "nvfp4":
        return ("nv", *nvfp4_factors(ops, compute, scale))
    if fmt in ("mxfp4", "mxfp8"):
        return ("f", mx_factor(ops, fmt, compute, scale))
    if scale is not None:  # fp8_block activations: (a * sa * sw) rounded once to bf16
        return ("fold8", scale)
    return ("f", ops.u32(const_factor(fmt, compute)))


def span_group(ops, fmt: str, family: str, compute: str, words, factors, j: int, fp4: str = "shift"):
    """Group j (0..3) of a span as four half2 registers in `family` order, dequantized and scaled.
    fp4: how FP4 codes are placed: "shift" (`fp4_pair`), "left" (`fp4_pair_left`, same bits), "mul"
    (`fp4_pair_mul`, same bits; bf16, else "left") or "placed" (`fp4_pair_placed`: words stored pre-placed by the
    stream layout, bf16 only)."""
    g = group_words(fmt, words, j)
    kind = factors[0]
    if kind == "perm":
        return raw16_group(ops, family, g)
    if kind == "fold16":
        return raw16_scaled_group(ops, family, compute, g, factors[1])
    if kind == "fold8":
        return fp8_scaled_group(ops, g, factors[1])
    if FORMAT[fmt].family == "fp4":
        f = factors[1 + (j >> 1)] if kind == "nv" else factors[1]
        if fp4 == "placed":  # the stream layout's pre-placed codes (bf16)
            return tuple(ops.hmul2(compute, fp4_pair_placed(ops, g[0], i), f) for i in range(4))
        if fp4 in ("left", "mul"):
            q8 = ops.prmt(g[0], ops.u32(0), 0x4321)  # q >> 8 (opaque to LLVM: no refolding into >>)
            if fp4 == "mul" and compute == "bfloat16":  # (f16's copies would overlap: "left" there)
                return tuple(ops.hmul2(compute, fp4_pair_mul(ops, g[0], q8, i), f) for i in range(4))
            return tuple(ops.hmul2(compute, fp4_pair_left(ops, g[0], q8, i, compute), f) for i in range(4))
        return tuple(ops.hmul2(compute, fp4_pair(ops, g[0], i, compute), f) for i in range(4))
    f = factors[1]
    return tuple(ops.hmul2(compute, fp8_pair(ops, q, i, compute), f) for q in g for i in range(2))
