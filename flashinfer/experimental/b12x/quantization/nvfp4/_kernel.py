"""NVFP4 activation quantizer (Triton): bf16/fp16 [M, K] -> packed E2M1 [M, K/2] + swizzled E4M3 scales.

Per 16-element block of a row, with `gs` the fp32 global scale (a multiplier), exactly the fp32 op
sequence of `_lib/quant/nvfp4.py` (the oracle; bits must match):

    amax = max |x_i| (NaN ignored)      t = min(div_rn(gs * amax, 6), 448)      sf = e4m3_rn(t)
    q_i  = e2m1(div_rn(x_i * gs, f32(sf)))     (all codes 0 when sf == 0)

- Divisions are `tl.math.div_rn` (PTX `div.rn.f32`): Triton's `/` is `div.full.f32`, which is not
  correctly rounded. FP fusion is off so no multiply is contracted into an FMA.
- `t` is in [0, 448], so the hardware `cvt.rn.satfinite.e4m3x2.f32` is the oracle's RNE encoding.
- E2M1 codes come from comparisons against the grid midpoints (ties to the even code; NaN fails
  every comparison -> +0; +-Inf -> +-6): SM90 has no FP4 conversion instruction.
- Scales land in the 128x4 swizzled layout (FORMATS.md). The grid covers ceil128(M) rows and
  ceil64(K) columns: rows >= M and blocks >= K/16 load zeros, so their scale is 0, which is the
  oracle's padding byte for NVFP4. Bytes past ceil128(M) rows are never touched.

Constraints: K % 16 == 0 (static), M < 2^31 (live, never a compile key), x/packed/scales
contiguous and 16-byte aligned (the compiled kernel assumes it; api.py checks it).
Bytes moved: 2*M*K read + M*K/2 written + ceil128(M)*ceil4(K/16) scale bytes written.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from ..._lib.compile import kernel
from ..._lib.freeze import check_may_resolve
from .._shared import _triton_helpers
from .._shared._triton_helpers import block_amax, swizzled_scale_offsets

OP = "quantization.nvfp4"
BLOCK = 16  # elements per E4M3 scale
DTYPES = {"bfloat16": "bf16", "float16": "fp16"}
CC_BY_ARCH = {"sm_90a": 90, "sm_120a": 120, "sm_121a": 121}


# -------------------------------------------------------------------------------------------------
# Config and heuristic
# -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NvFp4Config:
    """One program quantizes block_m rows x block_k columns with num_warps warps."""

    block_m: int = 16
    block_k: int = 256
    num_warps: int = 4


def can_implement(k: int, config: NvFp4Config) -> bool:
    """block_m divides 128 (programs tile the padded 128-row scale atoms exactly); both powers of two."""
    pow2 = lambda n: n > 0 and n & (n - 1) == 0
    return (
        k > 0
        and k % BLOCK == 0
        and pow2(config.block_m)
        and config.block_m <= 128
        and pow2(config.block_k)
        and config.block_k >= BLOCK
        and config.num_warps in (1, 2, 4, 8, 16)
    )


def default_config(k: int) -> NvFp4Config:
    # Not yet measured on the H200: bench_quantization.py --all-configs times every candidate;
    # 16 x 256 keeps 8 KiB of input per program (~32 fp32 values per thread at 4 warps).
    return NvFp4Config(block_m=16, block_k=min(256, triton.next_power_of_2(_round_up(k, 64))), num_warps=4)


def candidate_configs(k: int) -> tuple[NvFp4Config, ...]:
    out = [default_config(k)]
    for bm, bk, nw in ((4, 512, 4), (8, 512, 4), (16, 512, 8), (32, 256, 8), (32, 128, 4), (64, 128, 8)):
        cfg = NvFp4Config(bm, bk, nw)
        if can_implement(k, cfg) and cfg not in out:
            out.append(cfg)
    return tuple(out)


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def grid(m: int, k: int, config: NvFp4Config) -> tuple[int, int, int]:
    """Programs over ceil128(m) rows (scale padding included) x ceil64(k) columns."""
    return (_round_up(m, 128) // config.block_m, triton.cdiv(_round_up(k, 64), config.block_k), 1)


# -------------------------------------------------------------------------------------------------
# Kernel
# -------------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["gs_ptr", "gs_value", "gs_on_device", "m"], do_not_specialize_on_alignment=["gs_ptr"])
def _nvfp4_quantize_kernel(
    x_ptr,  # [m, K] bf16/fp16, row-major, 16-byte aligned
    packed_ptr,  # [m, K/2] uint8 out: element 2i in the low nibble
    scales_ptr,  # uint8 out: E4M3 scales in the 128x4 swizzled layout, ceil128(m) rows
    gs_ptr,  # fp32 [1]: the global scale when gs_on_device != 0 (any valid fp32 address otherwise)
    gs_value,  # fp32: the global scale when gs_on_device == 0
    gs_on_device,  # int: which of the two holds the global scale
    m,  # live rows (runtime: a new m never compiles)
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    NB: tl.constexpr = K // 16  # scale columns
    NB_PAD: tl.constexpr = (NB + 3) // 4 * 4
    TILE_NB: tl.constexpr = BLOCK_K // 16
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)

    # Phase 1: load the tile (rows >= m and columns >= K read as zeros).
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    row_ok = rows < m
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * K + cols[None, :], mask=row_ok[:, None] & (cols < K)[None, :], other=0.0).to(
        tl.float32
    )
    gs_dev = tl.load(gs_ptr)
    gs = tl.where(gs_on_device != 0, gs_dev, gs_value)

    # Phase 2: per-16 amax (NaN ignored) -> E4M3 scale.
    xb = tl.reshape(x, (BLOCK_M, TILE_NB, 16))
    amax = block_amax(xb)  # [BLOCK_M, TILE_NB]
    t = tl.minimum(tl.math.div_rn(gs * amax, 6.0), 448.0)  # never NaN: amax is not, gs is finite
    sf8 = t.to(tl.float8e4nv)
    sf = sf8.to(tl.float32)

    # Phase 3: scale and encode E2M1 (ties to the even code, NaN -> +0, +-Inf saturate to +-6).
    y = tl.math.div_rn(xb * gs, sf[:, :, None])
    a = tl.abs(y)
    code = (a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
    code += (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32) + (a > 5.0).to(tl.int32)
    code = tl.where((y < 0) & (code != 0), code | 8, code)
    code = tl.where(sf[:, :, None] == 0, 0, code)  # the block underflowed

    # Phase 4: pack pairs (element 2i low nibble) and store the live rows.
    lo, hi = tl.split(tl.reshape(code, (BLOCK_M, BLOCK_K // 2, 2)))
    packed = (lo | (hi << 4)).to(tl.uint8)
    pcols = pid_k * (BLOCK_K // 2) + tl.arange(0, BLOCK_K // 2)
    tl.store(
        packed_ptr + rows64[:, None] * (K // 2) + pcols[None, :],
        packed,
        mask=row_ok[:, None] & (pcols < K // 2)[None, :],
    )

    # Phase 5: scales at their swizzled offsets, padding rows and columns included (they hold 0).
    scols = pid_k * TILE_NB + tl.arange(0, TILE_NB)
    tl.store(
        scales_ptr + swizzled_scale_offsets(rows64, scols, NB),
        sf8.to(tl.uint8, bitcast=True),
        mask=(scols < NB_PAD)[None, :] & (rows64 >= 0)[:, None],
    )


# -------------------------------------------------------------------------------------------------
# Launcher and compile function
# -------------------------------------------------------------------------------------------------
class NvFp4Launcher:
    """`launcher(x, packed, scales, gs_ptr, gs_value, gs_on_device, m)`: one launch on the current
    stream of x's device. Arguments are trusted (api.py validated them); m == 0 launches nothing.

    `load(device_index)` gives an object indexable by grid (a Triton CompiledKernel loaded on that
    device, or the JIT function under TRITON_INTERPRET); `compiled` says which.
    """

    def __init__(self, k: int, config: NvFp4Config, load, *, compiled: bool, key: str = "") -> None:
        self.k, self.config, self.compiled, self.key = k, config, compiled, key
        self._load = load
        self._by_device: dict = {}

    def _kernel_for(self, index):
        fn = self._by_device.get(index)
        if fn is None:
            # Loading a module onto a device is resolution too: not while frozen or capturing.
            check_may_resolve(OP, f"{self.key} (load on device {index})")
            fn = self._by_device[index] = self._load(index)
        return fn

    def __call__(self, x, packed, scales, gs_ptr, gs_value, gs_on_device, m) -> None:
        if m == 0:
            return
        cfg = self.config
        g = grid(m, self.k, cfg)
        args = (x, packed, scales, gs_ptr, gs_value, gs_on_device, m, self.k, cfg.block_m, cfg.block_k)
        if not self.compiled:
            _nvfp4_quantize_kernel[g](*args, num_warps=cfg.num_warps)
            return
        index = x.device.index
        fn = self._kernel_for(index)
        import torch

        if index != torch.cuda.current_device():
            with torch.cuda.device(index):
                fn[g](*args, stream=torch._C._cuda_getCurrentRawStream(index))
        else:
            fn[g](*args, stream=torch._C._cuda_getCurrentRawStream(index))


def _source(dtype: str, k: int, config: NvFp4Config):
    from triton.compiler import ASTSource

    aligned = [["tt.divisibility", 16]]
    signature = {
        "x_ptr": f"*{DTYPES[dtype]}",
        "packed_ptr": "*u8",
        "scales_ptr": "*u8",
        "gs_ptr": "*fp32",
        "gs_value": "fp32",
        "gs_on_device": "i32",
        "m": "i32",
        "K": "constexpr",
        "BLOCK_M": "constexpr",
        "BLOCK_K": "constexpr",
    }
    constexprs = {"K": k, "BLOCK_M": config.block_m, "BLOCK_K": config.block_k}
    attrs = {(0,): aligned, (1,): aligned, (2,): aligned}
    return ASTSource(_nvfp4_quantize_kernel, signature, constexprs, attrs)


def compile_for_target(dtype: str, k: int, config: NvFp4Config, arch: str):
    """The Triton CompiledKernel for `arch`, built without a GPU (Triton's disk cache keeps it)."""
    from triton.backends.compiler import GPUTarget

    if dtype not in DTYPES:
        raise ValueError(f"{OP}: dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if not can_implement(k, config):
        raise ValueError(f"{OP}: cannot implement k={k} with {config}")
    options = {"num_warps": config.num_warps, "num_stages": 1, "enable_fp_fusion": False}
    return triton.compile(_source(dtype, k, config), target=GPUTarget("cuda", CC_BY_ARCH[arch], 32), options=options)


@kernel(OP, backend="triton", sources=(_triton_helpers.__name__,))
def compile_nvfp4(dtype: str, k: int, config: NvFp4Config, arch: str) -> NvFp4Launcher:
    """Compile the quantizer for (dtype, K, config) on `arch` and return its launcher."""
    first = [compile_for_target(dtype, k, config, arch)]

    def load(index):
        import torch

        # The kernel compiled above serves the first device; another device gets its own module
        # (Triton's disk cache makes that a file read).
        compiled = first.pop() if first else compile_for_target(dtype, k, config, arch)
        with torch.cuda.device(index):
            compiled[(1, 1, 1)]  # loads the module on this device without launching
        return compiled

    key = f"dtype={dtype} k={k} {config} ({arch})"
    return NvFp4Launcher(k, config, load, compiled=True, key=key)


def interpreted_launcher(k: int, config: NvFp4Config | None = None) -> NvFp4Launcher:
    """A launcher through the JIT function, for TRITON_INTERPRET=1 runs on CPU tensors (tests)."""
    config = config or default_config(k)
    if not can_implement(k, config):
        raise ValueError(f"{OP}: cannot implement k={k} with {config}")
    return NvFp4Launcher(k, config, None, compiled=False)
