"""The two-pass large-M path: dequantize each operand once, then a 16-bit cp.async GEMM.

    (live M >= min_m; below it the one-pass tiled kernel runs)
    A16 = deq(A) * 2^-C_a          (`_kernel_dequant`; a 16-bit A is used as it is)
    for each panel of B rows [r0, r0 + P):  B16 = deq(B[r0 : r0 + P]) * 2^-C_b;  C[:, r0 : r0 + P] = GEMM
                                   (`_kernel_mma16`, epilogue alpha * S0 * S1 * S2 * 2^(C_a + C_b))

Exact like the tiled kernel (every dequantized value is a 16-bit float; fp32 sums), so the same
reference tolerances hold. Why: the tiled kernel dequantizes a weight value once per M-tile of the
grid (16 times at M = 2048 with bm = 128) and an FP4 activation value once per N-tile, in registers
between its loads and its shared stores; here both happen once, and the GEMM's loads are cp.async.
Cost of the first pass: the operand read once and 2 K bytes a row written (28672 x 4096 NVFP4:
~60 MB read, 235 MB written, ~70 us at the copy ceiling, against ~1400 us of tiled GEMM at M = 2048).

Workspace: A16 (M x K) and one B16 panel of at most `panel_elems` values (rows a multiple of 128),
taken from torch's caching allocator on the current stream at each call (a CUDA graph captures them
in its private pool). Formats: NVFP4, MXFP4, MXFP8 and tensor-FP8 weights with the same-format or a
16-bit activation; block-FP8 keeps the tiled kernel (its weight scales fold into the activation).
With `Mma16Config.e4m3` (tensor-FP8 x tensor-FP8, a candidate) there is no first pass: the GEMM runs on
the raw E4M3 operands in one launch over all of N, no workspace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .._shared.formats import FORMAT, RAW16, compute_dtype, pair_ok
from .._shared.operands import TORCH_OUT
from . import _kernel_dequant as KD
from . import _kernel_mma16 as KM
from . import _kernel_tiled as KT


@dataclass(frozen=True)
class TwoPassConfig:
    """gemm: the second pass's tiles; dequant: the first pass's CTA size; panel_elems: the most B16
    values a call holds at once (the weight is dequantized and multiplied in row panels of that size;
    the default, 2^26, is 128 MB of bf16: session 23 measured 2^25 splitting 4096 x 14336 in two
    panels, 741.8 against 584.5 us at M = 2048 and 577 against 320 at M = 1024, and 2^26 within 1% of
    one whole-weight panel at every shape timed); min_m: a live M below it runs the one-pass tiled kernel
    with `tiled` instead (chosen at each call, no recompile: the bucket is compiled for both).

    min_m 512 (H200, session 22, events with L2 flushed, bench_gemm --sweep-subset twopass, staged
    dequantize stores and the pipelined K loop): at M = 512 two-pass ties the tiled kernel at nvfp4
    28672 x 4096 (423 vs 422 us) and wins the rest (w4a16 420 vs 489; 4096 x 4096 100 vs 119 nvfp4,
    96 vs 139 w4a16); at M = 768 it wins 3 of those 4 (nvfp4 28672 x 4096 660 vs 628 the exception);
    from M = 1024 on it wins every shape and recipe timed (2048 x 28672 x 4096 nvfp4 1221 vs 1413 us).
    Session 21 (before both changes) had set 1024: M = 512 534 vs 424 then."""

    gemm: KM.Mma16Config = field(default_factory=KM.Mma16Config)
    dequant: KD.DequantConfig = field(default_factory=KD.DequantConfig)
    panel_elems: int = 1 << 26
    min_m: int = 512
    tiled: KT.TiledConfig = field(default_factory=lambda: KT.default_config(1 << 30))  # the shape-blind heuristic's


def why_not(a_fmt: str, b_fmt: str, out_dtype: str, config: TwoPassConfig) -> str | None:
    if not isinstance(config, TwoPassConfig):
        return f"config must be a TwoPassConfig, got {type(config).__name__}"
    if not eligible(a_fmt, b_fmt):
        return f"the two-pass path takes {KD.FORMATS} weights with the same format or 16-bit activations, got {a_fmt} x {b_fmt}"
    if config.panel_elems < 128 * 128:
        return f"panel_elems must be at least 128 x 128, got {config.panel_elems}"
    if config.min_m < 0:
        return f"min_m must be >= 0, got {config.min_m}"
    compute = compute_dtype(a_fmt)
    reason = KM.why_not(a_fmt, b_fmt, out_dtype, config.gemm) or KD.why_not(b_fmt, compute, config.dequant)
    if reason is None and config.min_m > 0:
        reason = KT.why_not(a_fmt, b_fmt, out_dtype, config.tiled)
    return reason


def kernel_keys(a_fmt: str, b_fmt: str, out_dtype: str, config: TwoPassConfig, arch: str) -> tuple:
    """((compile function, key), ...) of the kernels the path launches: the dequantize pass (B's, and
    A's when A is quantized: pair_ok makes it B's format) and the GEMM."""
    keys = ((KM.compile_mma16, (a_fmt, b_fmt, out_dtype, config.gemm, arch)),)
    if not config.gemm.e4m3:
        keys = ((KD.compile_dequant, (b_fmt, compute_dtype(a_fmt), config.dequant, arch)),) + keys
    if config.min_m > 0:  # live M below min_m: the tiled kernel
        keys += ((KT.compile_tiled, (a_fmt, b_fmt, out_dtype, config.tiled, arch)),)
    return keys


def eligible(a_fmt: str | None, b_fmt: str | None) -> bool:
    """Whether the two-pass path implements A in a_fmt x B in b_fmt."""
    return b_fmt in KD.FORMATS and a_fmt is not None and pair_ok(a_fmt, b_fmt)


def runs_tiled(config: TwoPassConfig, m: int) -> bool:
    """Whether a live M takes the one-pass tiled kernel (below config.min_m)."""
    return m < config.min_m


def panel_rows(n: int, k: int, panel_elems: int) -> int:
    """Rows of B a panel takes: a multiple of 128 (whole swizzled scale atoms, whole GEMM tiles) with
    at most panel_elems values (at least 128 rows), the fewest panels that allows, of equal size up
    to the rounding to 128 rows (no short last panel: each panel's GEMM is its own launch, and a
    small one leaves SMs idle)."""
    most = max(128, (panel_elems // k) // 128 * 128)
    panels = -(-n // most)
    per_panel = -(-n // panels)
    return -(-per_panel // 128) * 128


class TwoPassLauncher:
    """Called like the single-kernel launchers: fn(A, SFA, B, SFB, C, S0, S1, S2, alpha)."""

    def __init__(self, a_fmt: str, b_fmt: str, out_dtype: str, config: TwoPassConfig, arch: str) -> None:
        self.a_fmt, self.b_fmt, self.config = a_fmt, b_fmt, config
        self.compute = compute_dtype(a_fmt)
        self.kernels = [fn(*key) for fn, key in kernel_keys(a_fmt, b_fmt, out_dtype, config, arch)]

    def __call__(self, a, sfa, b, sfb, c, s0, s1, s2, alpha) -> None:
        m, n = c.shape
        if runs_tiled(self.config, m):
            self.kernels[-1](a, sfa, b, sfb, c, s0, s1, s2, alpha)
            return
        if self.config.gemm.e4m3:  # the raw E4M3 operands, no first pass
            self.kernels[0](a.view(torch.uint8), b.view(torch.uint8), c, s0, s1, s2, alpha, 0, n)
            return
        k = b.shape[1] * 8 // FORMAT[self.b_fmt].value_bits
        dt = TORCH_OUT[self.compute]
        deq, gemm = self.kernels[:2]
        if self.a_fmt in RAW16:
            a16 = a
        else:
            a16 = torch.empty(m, k, dtype=dt, device=c.device)
            deq(a, _bytes(sfa), a16, 0, m)
        rows = panel_rows(n, k, self.config.panel_elems)
        b16 = torch.empty(rows, k, dtype=dt, device=c.device)
        for r0 in range(0, n, rows):
            p = min(rows, n - r0)
            deq(b, _bytes(sfb), b16, r0, p)
            gemm(a16, b16, c, s0, s1, s2, alpha, r0, p)


def _bytes(scales: torch.Tensor) -> torch.Tensor:
    """The dequantize pass reads swizzled scales as bytes; tensor-FP8's fp32 scalar (the launch's
    S1 / S2 carry it) stands in as its own bytes, never read."""
    return scales.view(torch.uint8).reshape(-1)
