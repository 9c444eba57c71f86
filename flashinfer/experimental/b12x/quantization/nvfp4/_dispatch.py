"""Live-M dispatch of the NVFP4 quantizer: one plan, two compiled tiles, the live row count picks.

Why. No single tile is the fastest at every M on the H200 (2026-11-30, docs/performance.md): the
"search" tile with skip_dead takes 5.1-5.6 µs at M = 1, where the large-M "steps" tile takes 7.4
(no dead-program skip, four column tiles per program), and the "steps" tile takes 113.1 µs at
16384 x 7168, where "search" takes 151.8. A plan's capacity says little about its live M (one
plan serves decode and prefill), so a plan whose capacity reaches `large_from` compiles both tiles
at prepare time and `run` picks one by x.shape[0]: host metadata, no device read, no sync. A CUDA
graph holds the launch of the M it captured (its tile included), as it holds that M's grid.

`NvFp4Dispatch` is the plan's selection (or an `override`): frozen and hashable like `NvFp4Config`,
so the autotune cache stores it by repr. Below `large_from` rows the selection is a plain
`NvFp4Config` (one kernel), as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import _kernel
from ._kernel import NvFp4Config, can_implement, candidate_configs, default_config
from ._kernel import _block_k_cap as block_k_cap

# Live M from which the large tile runs. The large tile's grid is ceil128(M) / 8 x 7 programs of
# 4 column tiles each at K = 7168: below ~1024 rows it has fewer programs than the H200 holds at
# once (132 SMs x ~10), so each program's serial column loop is exposed, while "search" spreads 4x
# as many one-tile programs. Not yet measured between M = 128 and 4096: `bench_quantization
# --encode search steps --ms 256 512 1024 2048` times both tiles there (predictions in
# docs/predictions/quantization.md); move this to the measured crossover.
LARGE_FROM_M = 1024

# Session 7 (issue #4): the large tile's switch to one of `_kernel._UNVALIDATED_PAIRS_S7` (unrolled /
# persistent "pairs" tiles). Set it to that tuple only after the H200 passes it bit for bit
# (test_gpu_candidates) and times it faster than LARGE_M_PAIRS at M >= 4096 (bench --encode pairs);
# with S7_PAIRS_GPU_VALIDATED, so autotune offers the same config.
# Session 15: on by default. With the flat load pointers (no barriers on the H200's Triton 3.6) the
# unrolled lane-table tile (k_iters 4, prefetch) is the fastest "pairs" tile at 3 of the 4 shapes
# (H200 2026-12-01 21:38-21:41, graph timer, three runs: 16384x7168 84.7-85.0 µs vs 88.6-88.8 for
# LARGE_M_PAIRS, 16384x4096 51.2-51.4 vs 52.7, 4096x7168 23.9-24.0 vs 25.0-25.1; 4096x4096 15.87 vs
# 15.39, 3% slower) and passed test_gpu_candidates and test_gpu_nvfp4_s7 on that tree (the
# quantization tier, 783 passed).
LARGE_M_S7: tuple | None = (8, 256, 4, "pairs", False, False, "halves", 4, True, True, 0, False, 0, True)


@dataclass(frozen=True)
class NvFp4Dispatch:
    """Two tiles of one plan: `small` runs for live M < large_from, `large` for M >= large_from."""

    small: NvFp4Config
    large: NvFp4Config
    large_from: int = LARGE_FROM_M

    def configs(self) -> tuple[NvFp4Config, ...]:
        """The configs to compile, small first (one when both are the same)."""
        return (self.small,) if self.small == self.large else (self.small, self.large)

    def tile(self, m: int) -> int:
        """Index into `configs()` of the tile that runs m live rows."""
        return int(m >= self.large_from and self.small != self.large)


def large_config(k: int) -> NvFp4Config:
    """The large-M tile at K: `LARGE_M_STEPS`, or `LARGE_M_PAIRS` once PAIRS_GPU_VALIDATED, or `LARGE_M_S7`
    when set (its block_k capped to the padded row, as every candidate's is)."""
    if LARGE_M_S7 is not None and _kernel.PAIRS_GPU_VALIDATED:
        bm, bk, nw, *rest = LARGE_M_S7
        return NvFp4Config(bm, block_k_cap(k, bk), nw, *rest)
    bm, bk, nw, *rest = _kernel.LARGE_M_PAIRS if _kernel.PAIRS_GPU_VALIDATED else _kernel.LARGE_M_STEPS
    return NvFp4Config(bm, block_k_cap(k, bk), nw, *rest)


def default_selection(max_rows: int, k: int):
    """The heuristic: `default_config(k)` alone below LARGE_FROM_M rows of capacity, else a dispatch
    between it and the large-M tile (`large_config`)."""
    if max_rows < LARGE_FROM_M:
        return default_config(k)
    return NvFp4Dispatch(default_config(k), large_config(k))


def candidate_selections(max_rows: int, k: int) -> tuple:
    """What autotune measures (at min(capacity, 16384) rows, where the large tile is what differs):
    the heuristic's selection first, then each candidate config as the large tile of a dispatch
    (or, below LARGE_FROM_M rows of capacity, each candidate config alone)."""
    configs = candidate_configs(k)
    if max_rows < LARGE_FROM_M:
        return configs
    out = [default_selection(max_rows, k)]
    for cfg in configs:
        d = NvFp4Dispatch(default_config(k), cfg)
        if d not in out:
            out.append(d)
    return tuple(out)


def can_select(k: int, selection) -> bool:
    """An `NvFp4Config` valid for k, or an `NvFp4Dispatch` of two with an int large_from >= 1."""
    if isinstance(selection, NvFp4Config):
        return can_implement(k, selection)
    return (
        isinstance(selection, NvFp4Dispatch)
        and all(isinstance(c, NvFp4Config) and can_implement(k, c) for c in (selection.small, selection.large))
        and isinstance(selection.large_from, int)
        and not isinstance(selection.large_from, bool)
        and selection.large_from >= 1
    )


def selection_configs(selection) -> tuple[NvFp4Config, ...]:
    """The configs a selection compiles (a plain config: itself)."""
    return selection.configs() if isinstance(selection, NvFp4Dispatch) else (selection,)
