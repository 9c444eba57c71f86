"""Weight-only decode GEMM in Triton (M <= 16): C[M, N] = scale * A[M, K] B[N, K]^T, A bf16/fp16, B
NVFP4 / MXFP4 / MXFP8 exactly as `Weight` stores it (values [N, K*bits/8] K-major, scales 128x4
swizzled, FORMATS.md), bandwidth-first.

Why a second decode kernel: at M <= 16 the product is a stream of N * K * bits / 8 weight bytes and
nothing else; the CuTe decode kernel (`_kernel_decode`) keeps few bytes in flight per SM (measured at
47% of the copy ceiling at 28672 x 4096, 18% at 4096 x 4096). Here every program streams a
[BLOCK_N, BLOCK_K] weight tile per step through Triton's software pipeline (cp.async into shared
memory, `num_stages` tiles in flight), so bytes in flight per SM are BLOCK_N * BLOCK_K * bits / 8 *
(num_stages - 1) * programs per SM.

Work split: program (n, s) owns rows [n * BLOCK_N, +BLOCK_N) and the K steps s, s + SPLIT_K, ...
of BLOCK_K values. Tokens are one tl.dot tile of 16 (rows >= M masked: never loaded, never stored),
so the tensor cores' work is the same at M = 1 and M = 16 and the weight bytes are all there is.
SPLIT_K > 1 (for N too small to fill the GPU): each split writes its fp32 partial tile to a
workspace slot, takes a ticket from a per-tile counter (acq_rel atomic), and the last split of a
tile sums the SPLIT_K partials in a fixed order (deterministic), writes C and resets the counter
to 0, so the workspace needs no clearing between launches (graph-safe).

Dequantization (exact, the CuTe kernels' arithmetic, `_shared/dequant.py` has the proof): a code is
bit-placed into a 16-bit float of the compute dtype, which scales it by 2^-E (E = PLACEMENT_EXP),
then multiplied by F = block scale * 2^(E - C) in the compute dtype; the product is the true value
times 2^-C (C = DEQUANT_SHIFT), exact wherever the CuTe kernel is (EXACT_RANGES), and the epilogue
multiplies the fp32 accumulator by 2^C * alpha * S0 * S1 * S2. FP4 bytes split into their low
(even k) and high (odd k) nibbles and are re-interleaved with tl.join.

Bytes: N * K * bits / 8 weight values + N * K / sf_vec scale bytes (+ M * K * 2 activation bytes
per program, from L2) + M * N outputs. FLOPs issued: 2 * 16 * N * K (useful 2 * M * N * K).
Constraints: K % 128 == 0, N % 16 == 0 (formats.check_shape); K % BLOCK_K is masked.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..._lib.compile import kernel
from ..._lib.triton_build import interpreting
from .._shared.formats import DEQUANT_SHIFT, FORMAT, PLACEMENT_EXP, compute_dtype
from ._gemv_config import MAX_M, GemvConfig, why_not

_SOURCES = (
    "flashinfer.experimental.b12x.gemm._shared.formats",
    "flashinfer.experimental.b12x.gemm.blockscaled._gemv_config",
)


# ---- device code --------------------------------------------------------------------------------
@triton.jit
def _pair(q, I: tl.constexpr, FAMILY: tl.constexpr, LOW: tl.constexpr, CT: tl.constexpr):
    """Two codes of the uint32 words q, bit-placed into 16-bit floats of dtype CT (values times 2^-E):
    FP4 nibbles I and I + 4 (k = I, I + 4 of the word's 8), FP8 bytes I and I + 2. One shift and mask
    per field moves both halves at once (`_shared/dequant.fp4_pair` / `fp8_pair`, same bits)."""
    STEP: tl.constexpr = FAMILY  # bits between consecutive codes
    MAG: tl.constexpr = 0x7 if FAMILY == 4 else 0x7F
    SIGN_AT: tl.constexpr = FAMILY - 1  # the code's sign bit
    mag_shift: tl.constexpr = LOW - STEP * I
    sign_shift: tl.constexpr = 15 - SIGN_AT - STEP * I
    if mag_shift >= 0:
        mag = q << mag_shift
    else:
        mag = q >> (-mag_shift)
    if sign_shift >= 0:
        sign = q << sign_shift
    else:
        sign = q >> (-sign_shift)
    bits = (mag & ((MAG << LOW) * 0x10001)) | (sign & 0x80008000)
    lo = (bits & 0xFFFF).to(tl.uint16).to(CT, bitcast=True)
    hi = (bits >> 16).to(tl.uint16).to(CT, bitcast=True)
    return lo, hi


@triton.jit
def _unpack_words(q, f, FAMILY: tl.constexpr, LOW: tl.constexpr, CT: tl.constexpr):
    """uint32 words [..., W] and their blocks' scale factors f [..., 1] (dtype CT) -> the scaled
    codes in K order, [..., W, 2, 2, 2] (FP4) or [..., W, 2, 2] (FP8), times 2^-C. Each placed half
    is scaled before the joins (4% fewer SASS instructions a loop than scaling the joined tile, Triton
    3.9 sm_90a); tl.join appends the fastest dim, so the last join pairs K neighbours."""
    if FAMILY == 4:
        l0, h0 = _pair(q, 0, 4, LOW, CT)  # k = 0, 4
        l1, h1 = _pair(q, 1, 4, LOW, CT)  # k = 1, 5
        l2, h2 = _pair(q, 2, 4, LOW, CT)  # k = 2, 6
        l3, h3 = _pair(q, 3, 4, LOW, CT)  # k = 3, 7
        even = tl.join(tl.join(l0 * f, h0 * f), tl.join(l2 * f, h2 * f))  # k = 0 4 2 6: [b2, b1], b0 = 0
        odd = tl.join(tl.join(l1 * f, h1 * f), tl.join(l3 * f, h3 * f))
        return tl.join(even, odd)
    else:
        l0, h0 = _pair(q, 0, 8, LOW, CT)  # k = 0, 2
        l1, h1 = _pair(q, 1, 8, LOW, CT)  # k = 1, 3
        return tl.join(tl.join(l0 * f, h0 * f), tl.join(l1 * f, h1 * f))


@triton.jit
def _scale_factor(s, SCALE: tl.constexpr, SHIFT: tl.constexpr, CT: tl.constexpr):
    """Scale bytes s (int32) -> F = scale * 2^SHIFT in dtype CT (SHIFT = E - C).
    SCALE 0: E4M3 (exact in fp32, then exact in CT); 1: UE8M0 2^(s - 127), the biased exponent
    clamped to the normal range (a 255 NaN scale clamps to the largest factor, as the CuTe kernel)."""
    if SCALE == 0:
        f = s.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32) * (2.0**SHIFT)
    else:
        e = tl.minimum(tl.maximum(s + SHIFT, 1), 254)
        f = (e << 23).to(tl.float32, bitcast=True)
    return f.to(CT)


@triton.jit
def _weight_tile(
    b_ptr,
    sf_ptr,
    rows,
    k0,
    K,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    FAMILY: tl.constexpr,
    SF_VEC: tl.constexpr,
    SCALE: tl.constexpr,
    LOW: tl.constexpr,
    SHIFT: tl.constexpr,
    CT: tl.constexpr,
):
    """The dequantized [BLOCK_N, BLOCK_K] weight tile at K offset k0 (times 2^-C, dtype CT; K %
    BLOCK_K == 0). Values are loaded as uint32 words [BLOCK_N, G, W] (G scale blocks of W words) so
    each scale broadcasts over its block without a gather."""
    G: tl.constexpr = BLOCK_K // SF_VEC
    W: tl.constexpr = SF_VEC * FAMILY // 32  # uint32 words of values per scale block
    row_words = K * FAMILY // 32
    g = tl.arange(0, G)
    kg = k0 // SF_VEC + g  # scale column of each block
    offs = rows[:, None, None] * row_words + (kg * W)[None, :, None] + tl.arange(0, W)[None, None, :]
    q = tl.load(b_ptr.to(tl.pointer_type(tl.uint32)) + offs)
    # 128x4 swizzled scales (FORMATS.md): atoms of 128 rows x 4 columns, 512 bytes each.
    atoms_per_row = (K // SF_VEC + 3) // 4
    soffs = (rows // 128)[:, None] * atoms_per_row * 512 + (kg // 4)[None, :] * 512
    soffs += ((rows % 32) * 16 + ((rows // 32) % 4) * 4)[:, None] + (kg % 4)[None, :]
    f = _scale_factor(tl.load(sf_ptr + soffs).to(tl.int32), SCALE, SHIFT, CT)
    w = _unpack_words(q, f[:, :, None], FAMILY, LOW, CT)
    return tl.reshape(w, (BLOCK_N, BLOCK_K))


# M is a live size (a new M must not compile); the scalar and workspace pointers need no 16-byte
# alignment (a caller's alpha may be any fp32 element), so their alignment is no specialization
# either: the signature `compile_gemv` warms is the one every launch hits.
@triton.jit(do_not_specialize=["M"], do_not_specialize_on_alignment=["s0_ptr", "s1_ptr", "s2_ptr", "ws_ptr", "cnt_ptr"])
def _gemv_kernel(
    a_ptr,  # bf16/fp16 [M, K] activations, row stride stride_am
    b_ptr,  # uint8 [N, K * FAMILY / 8] weight values, K-major
    sf_ptr,  # uint8 flat 128x4-swizzled block scales of B
    c_ptr,  # bf16/fp16/fp32 [M, N] output, row stride N
    s0_ptr,  # fp32 [1]: the caller's alpha tensor (1.0 when alpha is a number)
    s1_ptr,  # fp32 [1]: A's alpha (1.0 for 16-bit activations)
    s2_ptr,  # fp32 [1]: B's alpha (the Weight's, NVFP4 1/gs)
    ws_ptr,  # fp32 [tiles, SPLIT_K, 16, BLOCK_N] split-K partials (unused when SPLIT_K == 1)
    cnt_ptr,  # int32 [tiles] split-K tickets, 0 between launches (unused when SPLIT_K == 1)
    alpha,  # fp32 scalar alpha baked into the launch
    M,  # live tokens (<= 16), not specialized: a new M never compiles
    N,
    K,
    stride_am,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    FAMILY: tl.constexpr,  # value bits: 4 (E2M1) or 8 (E4M3)
    SF_VEC: tl.constexpr,  # K values per scale: 16 (NVFP4) or 32 (MX)
    SCALE: tl.constexpr,  # 0: E4M3 scales, 1: UE8M0 scales
    LOW: tl.constexpr,  # bit placement: lowest magnitude bit in the 16-bit float
    SHIFT: tl.constexpr,  # E - C: exponent folded into the scale factor
    OUT_EXP: tl.constexpr,  # C: the epilogue multiplies by 2^C
):
    # ---- where this program works: rows of B, K steps of one split
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    CT: tl.constexpr = a_ptr.dtype.element_ty
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # rows past N (a partial last tile) read row N - 1 again instead of masking every load; their
    # results are never stored
    rows_in = tl.minimum(rows, N - 1)
    tok = tl.arange(0, 16)
    kk = tl.arange(0, BLOCK_K)
    tok_ok = tok < M
    acc = tl.zeros((16, BLOCK_N), dtype=tl.float32)

    # ---- main loop: one [BLOCK_N, BLOCK_K] weight tile and the 16 x BLOCK_K activations per step
    steps = tl.cdiv(K, BLOCK_K)
    for step in tl.range(pid_k, steps, SPLIT_K):
        k0 = step * BLOCK_K
        a_offs = tok[:, None] * stride_am + (k0 + kk)[None, :]
        a = tl.load(a_ptr + a_offs, mask=tok_ok[:, None], other=0.0)
        w = _weight_tile(b_ptr, sf_ptr, rows_in, k0, K, BLOCK_N, BLOCK_K, FAMILY, SF_VEC, SCALE, LOW, SHIFT, CT)
        acc = tl.dot(a, tl.trans(w), acc)

    # ---- epilogue: fp32 scale, then (split-K) the last split of this tile reduces
    scale = alpha * tl.load(s0_ptr) * tl.load(s1_ptr) * tl.load(s2_ptr) * (2.0**OUT_EXP)
    c_offs = tok[:, None] * N + rows[None, :]
    c_mask = tok_ok[:, None] & (rows < N)[None, :]
    if SPLIT_K == 1:
        tl.store(c_ptr + c_offs, (acc * scale).to(c_ptr.dtype.element_ty), mask=c_mask)
    else:
        slot = (tok[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]).to(tl.int64)
        tile = ws_ptr + pid_n.to(tl.int64) * (SPLIT_K * 16 * BLOCK_N)
        tl.store(tile + pid_k * (16 * BLOCK_N) + slot, acc)
        tl.debug_barrier()  # every thread's partial is written before the ticket releases them
        ticket = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if ticket == SPLIT_K - 1:
            total = tl.zeros((16, BLOCK_N), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                total += tl.load(tile + s * (16 * BLOCK_N) + slot, cache_modifier=".cg")
            tl.store(c_ptr + c_offs, (total * scale).to(c_ptr.dtype.element_ty), mask=c_mask)
            tl.atomic_xchg(cnt_ptr + pid_n, 0, sem="relaxed", scope="gpu")


# ---- host ---------------------------------------------------------------------------------------
def constexprs(a_fmt: str, b_fmt: str, config: GemvConfig) -> dict:
    """The kernel's constexprs for one (activation, weight, config)."""
    spec = FORMAT[b_fmt]
    compute = compute_dtype(a_fmt)
    family = "fp4" if spec.value_bits == 4 else "fp8"
    shift = DEQUANT_SHIFT[(b_fmt, compute)]
    place = PLACEMENT_EXP[(family, compute)]
    low = {("fp4", "bfloat16"): 6, ("fp4", "float16"): 9, ("fp8", "bfloat16"): 4, ("fp8", "float16"): 7}
    return dict(
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        SPLIT_K=config.split_k,
        FAMILY=spec.value_bits,
        SF_VEC=spec.sf_vec,
        SCALE=0 if spec.scale == "e4m3" else 1,
        LOW=low[(family, compute)],
        # UE8M0: the biased exponent byte plus (E - C) is F's fp32 biased exponent
        SHIFT=place - shift,
        OUT_EXP=shift,
    )


def workspace_numel(n: int, config: GemvConfig) -> tuple[int, int]:
    """(fp32 workspace elements, int32 counters) the split-K form needs for N rows (0, 0 without)."""
    if config.split_k == 1:
        return 0, 0
    tiles = -(-n // config.block_n)
    return tiles * config.split_k * MAX_M * config.block_n, tiles


class _Workspaces:
    """Split-K workspaces, one per (device, config, row tiles), allocated on the first launch outside
    capture (prepare's prime, prewarm) and never replaced or freed until `clear` (a captured graph
    keeps their addresses). Tickets start at 0 and every launch leaves them at 0. Launches sharing a
    workspace (one config, one N) must not overlap on two streams."""

    def __init__(self) -> None:
        self._bufs: dict = {}

    def get(self, device: torch.device, n: int, config: GemvConfig):
        need_ws, need_cnt = workspace_numel(n, config)
        key = (str(device), config, need_cnt)
        found = self._bufs.get(key)
        if found is None:
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    f"gemm.blockscaled Triton GEMV: split-K workspace for N={n} ({config}) was not allocated "
                    "before graph capture: prepare the plan or prewarm the weight first"
                )
            found = self._bufs[key] = (
                torch.empty(max(need_ws, 1), dtype=torch.float32, device=device),
                torch.zeros(max(need_cnt, 1), dtype=torch.int32, device=device),
            )
        return found

    def clear(self) -> None:
        self._bufs.clear()


WORKSPACES = _Workspaces()


_OPTS = {"enable_fp_fusion": True}  # Triton 3.9 warns when unset; the same at warmup and launch


def launch(consts: dict, config: GemvConfig, a, sfa, b, sfb, c, s0, s1, s2, alpha: float) -> None:
    """One launch with the blockscaled launch contract (`_shared/launch.launch_args`): A [M, K]
    16-bit, B uint8 [N, K * bits / 8], SFB flat swizzled bytes, C [M, N], S0..S2 fp32 [1]."""
    del sfa  # 16-bit activations carry no scales
    m, k = a.shape
    n = c.shape[1]
    if m > MAX_M:
        raise ValueError(f"the Triton GEMV serves M <= {MAX_M}, got M = {m}")
    if k % config.block_k:
        raise ValueError(f"the Triton GEMV config {config} needs K % block_k == 0, got K = {k}")
    ws, cnt = WORKSPACES.get(c.device, n, config) if config.split_k > 1 else (s0, s0)
    grid = (triton.cdiv(n, config.block_n), config.split_k)
    extra = {} if interpreting() else {"num_warps": config.num_warps, "num_stages": config.num_stages, **_OPTS}
    _gemv_kernel[grid](a, b, sfb, c, s0, s1, s2, ws, cnt, alpha, m, n, k, a.stride(0), **consts, **extra)


def _fake(dtype):
    return triton.runtime.jit.MockTensor(dtype)


_TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@kernel("gemm.blockscaled.gemv", backend="triton", sources=_SOURCES)
def compile_gemv(a_fmt: str, b_fmt: str, out_dtype: str, config: GemvConfig, arch: str):
    """Launcher `fn(A, SFA, B, SFB, C, S0, S1, S2, alpha)` (the decode kernel's contract), compiled
    now for the current CUDA device (Triton's own disk cache keeps the binary)."""
    reason = why_not(a_fmt, b_fmt, out_dtype, config)
    if reason is not None:
        raise ValueError(f"gemm.blockscaled Triton GEMV: {reason}")
    consts = constexprs(a_fmt, b_fmt, config)
    f32, u8 = torch.float32, torch.uint8
    args = (_fake(_TORCH[a_fmt]), _fake(u8), _fake(u8), _fake(_TORCH[out_dtype]), _fake(f32), _fake(f32))
    # ws / cnt as `launch` passes them (S0 twice without split-K): the same signature, no JIT later
    ws_cnt = (_fake(f32), _fake(torch.int32)) if config.split_k > 1 else (_fake(f32), _fake(f32))
    args += (_fake(f32), *ws_cnt, 1.0, 2, 4096, 4096, 4096)
    _gemv_kernel.warmup(
        *args,
        **consts,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        grid=(1, config.split_k),
        **_OPTS,
    )
    return functools.partial(launch, consts, config)
