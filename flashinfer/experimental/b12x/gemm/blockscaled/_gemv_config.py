"""The Triton GEMV's config, validity predicate and heuristic (stdlib only: plan-time code imports this
without Triton). The kernel is `_kernel_gemv`; `_shared/launch.py` selects it.

Selection: a plan override {"decode8" | "decode16": GemvConfig(...)}, or B12X_GEMM_DECODE_KERNEL=triton
(the heuristic below replaces the CuTe decode config for weight-only NVFP4 / MXFP4 / MXFP8 at M <= 16).
The CuTe decode kernel stays the default until the H200 run decides.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from .._shared.formats import FORMAT, OUT_DTYPES, RAW16

RECIPES = ("nvfp4", "mxfp4", "mxfp8")  # weight formats with swizzled per-block scales
MAX_M = 16  # one tl.dot token tile
BUCKETS = ("decode8", "decode16")
ENV = "B12X_GEMM_DECODE_KERNEL"
SMEM_LIMIT = 160 * 1024  # pipeline buffers per program (H200: 227 KB per SM; sm_120: 99 KB per block)
# Programs the heuristic aims for before it splits K: 1.5 waves of the H200's 132 SMs, so every SM
# holds at least one program and the tail wave is short (a prediction, docs/predictions/gemm.md).
TARGET_PROGRAMS = 200


@dataclass(frozen=True)
class GemvConfig:
    """block_n: weight rows per program; block_k: K values per pipeline step (K % block_k == 0);
    split_k: programs per row tile along K (an fp32 workspace slot each); num_stages: Triton's
    pipeline depth (num_stages - 1 steps of loads in flight); num_warps: warps per program (Triton
    gives each warp 16 of the block_n columns of the 16 x block_n tl.dot, so block_n >= 16 * warps
    keeps every warp busy)."""

    block_n: int = 64
    block_k: int = 256
    split_k: int = 1
    num_stages: int = 4
    num_warps: int = 4

    def stage_bytes(self, b_fmt: str) -> int:
        """Shared memory of one pipeline stage: the weight tile, its scales and 16 activation rows."""
        spec = FORMAT[b_fmt]
        return self.block_n * (spec.row_bytes(self.block_k) + self.block_k // spec.sf_vec) + MAX_M * self.block_k * 2


def config_reason(config: GemvConfig, b_fmt: str = "nvfp4") -> str | None:
    """None when `config` is in range for weights in `b_fmt`, else why not."""
    c = config
    if c.block_n not in (16, 32, 64, 128, 256):
        return f"block_n must be 16, 32, 64, 128 or 256, got {c.block_n}"
    if c.block_k not in (128, 256, 512, 1024):
        return f"block_k must be 128, 256, 512 or 1024, got {c.block_k}"
    if c.split_k not in (1, 2, 3, 4, 6, 8, 16):
        return f"split_k must be one of 1, 2, 3, 4, 6, 8, 16, got {c.split_k}"
    if c.num_stages not in range(1, 7) or c.num_warps not in (1, 2, 4, 8):
        return f"num_stages must be 1..6 and num_warps 1/2/4/8, got {c.num_stages} / {c.num_warps}"
    if c.block_n < 16 * c.num_warps:
        return f"block_n = {c.block_n} leaves warps idle at num_warps = {c.num_warps} (needs block_n >= 16 * warps)"
    smem = c.stage_bytes(b_fmt) * c.num_stages
    if smem > SMEM_LIMIT:
        return f"{c.num_stages} stages x {c.stage_bytes(b_fmt)} bytes = {smem} bytes of shared memory > {SMEM_LIMIT}"
    return None


def why_not(a_fmt: str, b_fmt: str, out_dtype: str, config, bucket: str | None = None) -> str | None:
    """None when the Triton GEMV implements this combination (and bucket, when given), else why not."""
    if not isinstance(config, GemvConfig):
        return f"config must be a GemvConfig, got {type(config).__name__}"
    if bucket is not None and bucket not in BUCKETS:
        return f"the Triton GEMV serves M <= {MAX_M} (buckets {BUCKETS}), got bucket {bucket}"
    if a_fmt not in RAW16 or b_fmt not in RECIPES:
        return f"the Triton GEMV is weight-only: A bfloat16/float16 x B in {RECIPES}, got {a_fmt} x {b_fmt}"
    if out_dtype not in OUT_DTYPES:
        return f"out dtype must be one of {OUT_DTYPES}, got {out_dtype}"
    return config_reason(config, b_fmt)


def selected(a_fmt: str | None, b_fmt: str | None, bucket: str) -> bool:
    """Whether B12X_GEMM_DECODE_KERNEL=triton routes this case to the Triton GEMV."""
    if os.environ.get(ENV, "cute") != "triton" or a_fmt is None or b_fmt is None:
        return False
    return bucket in BUCKETS and a_fmt in RAW16 and b_fmt in RECIPES


def default_config(n: int | None = None, k: int | None = None, b_fmt: str | None = None) -> GemvConfig:
    """The heuristic (an untuned prediction until the H200 run; docs/predictions/gemm.md).

    block_k: 256 values for FP4 (128 bytes of a row per step), 128 for FP8 (the same bytes); 128 when
    K is not a multiple (K % 128 == 0 always). block_n: 128 rows (8 warps) for N >= 16384, else 64 (4
    warps); at M = 16 every program also reads 16 x block_k activations per step, and 128 rows halve
    that against the weight bytes. split_k: doubled while the grid is below TARGET_PROGRAMS and every
    split keeps at least 2 steps, so N = 4096 (64 tiles) splits 4 ways and N = 2048 8 ways.
    Shape-blind (n or k None): 64 x 128, no split."""
    if n is None or k is None:
        return GemvConfig(block_n=64, block_k=128, split_k=1, num_stages=4, num_warps=4)
    bits = FORMAT[b_fmt].value_bits if b_fmt in FORMAT else 4
    block_k = 256 if bits == 4 else 128
    if k % block_k:
        block_k = 128
    block_n = 128 if n >= 16384 else 64
    split = _split_for(-(-n // block_n), k // block_k)
    return GemvConfig(block_n=block_n, block_k=block_k, split_k=split, num_stages=4, num_warps=block_n // 16)


def _split_for(tiles: int, steps: int) -> int:
    split = 1
    while tiles * split < TARGET_PROGRAMS and steps >= 2 * (2 * split) and split < 8:
        split *= 2
    return split


def candidate_configs(n: int, k: int, b_fmt: str) -> tuple[GemvConfig, ...]:
    """What `bench_gemm --sweep --sweep-subset gemv` times, one knob at a time around the heuristic:
    the heuristic; num_stages 3 and 6; block_k doubled; split_k halved and doubled; the other
    block_n (64 <-> 128, its own split). Valid ones only (K % block_k == 0, every split >= 2 steps),
    8 at most."""
    base = default_config(n, k, b_fmt)
    other_n = 64 if base.block_n == 128 else 128
    other_split = _split_for(-(-n // other_n), k // base.block_k)
    variants = [
        base,
        replace(base, num_stages=3),
        replace(base, num_stages=6),
        replace(base, block_k=2 * base.block_k, split_k=max(1, base.split_k // 2)),
        replace(base, split_k=max(1, base.split_k // 2)),
        replace(base, split_k=2 * base.split_k),
        replace(base, block_n=other_n, num_warps=other_n // 16, split_k=other_split),
    ]
    out = []
    for cfg in variants:
        steps = k // cfg.block_k if k % cfg.block_k == 0 else 0
        ok = config_reason(cfg, b_fmt) is None and steps >= 2 * cfg.split_k
        if ok and cfg not in out:
            out.append(cfg)
    return tuple(out[:8])
