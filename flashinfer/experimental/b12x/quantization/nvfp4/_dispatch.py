"""Live-M dispatch of the NVFP4 quantizer: one plan, two or three compiled tiles, the live row count picks.

Why. No single tile is the fastest at every M on the H200 (2026-11-30, docs/performance.md): the
"search" tile with skip_dead takes 5.1-5.6 µs at M = 1, where the large-M "steps" tile takes 7.4
(no dead-program skip, four column tiles per program), and the "steps" tile takes 113.1 µs at
16384 x 7168, where "search" takes 151.8. A plan's capacity says little about its live M (one
plan serves decode and prefill), so a plan whose capacity reaches `large_from` compiles both tiles
at prepare time and `run` picks one by x.shape[0]: host metadata, no device read, no sync. A CUDA
graph holds the launch of the M it captured (its tile included), as it holds that M's grid.

`NvFp4Dispatch` is the plan's selection (or an `override`): frozen and hashable like `NvFp4Config`,
so the autotune cache stores it by repr. Below `large_from` rows of capacity the selection is a plain
`NvFp4Config` (one kernel), as before. Session 27 added an optional mid tile (the preload tile,
`MID_PRELOAD`) between large_from and mid_until live rows: the large tile loses at 4096 rows to its
launch-and-tail share and the preload tile loses where L2 is the bound (16384 x 7168).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from . import _kernel
from ._kernel import NvFp4Config, can_implement, candidate_configs, capped_config, default_config
from ._kernel_cute import CuteTile
from ._kernel_cute import why_not as cute_why_not

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


# Session 27 (issue #4 at the 4096-row shapes): the preload tile (the first of `_UNVALIDATED_PRELOAD`:
# the large tile's 8 x 256 x 4-warp groups of 4, every load of a group before its math) runs for live M
# from large_from while M x K <= MID_MAX_ELEMENTS. H200 2026-12-03 13:45 (graph timer, one process,
# docs/performance.md session 27): 4096 x 4096 14.74 against the large tile's 15.46 us, 4096 x 7168 23.49
# vs 24.08, 16384 x 4096 49.19 vs 50.32 (-2 to -5%), and 16384 x 7168 109.4 vs 88.7 (+23%: with eight
# loads a thread in flight the second 16-byte half of each sector no longer hits in L1, and L2, at 89.6%
# of its throughput there under the large tile (ncu), takes the extra requests).
MID_PRELOAD: tuple | None = _kernel._UNVALIDATED_PRELOAD[0]
MID_MAX_ELEMENTS = 1 << 26  # 16384 x 4096: the largest measured shape where preload still won
# Session 31: at rows of at most this many columns the mid tile's programs run in K-major order
# (`NvFp4Config.k_major`: the resident programs read whole rows). H200 2026-12-04 (graph timer, one process,
# docs/performance.md session 31): 4096 x 4096 14.69 -> 14.28 µs (as a programmatic dependent 14.09 -> 13.69),
# 16384 x 4096 48.58 -> 48.48; at K = 7168 +0.7% (23.47 -> 23.63), hence the bound. Session 32 (s32_a, M = 4096 / 8192):
# K = 2048 -2.1 / -4.7%, K = 3072 +1.6 / -0.1%, K = 5120 +1.7 / +1.0%: the bound stands.
MID_K_MAJOR_MAX_K = 4096


@dataclass(frozen=True)
class NvFp4Dispatch:
    """Tiles of one plan by live M: `small` for M < large_from, then `mid` (when set) for M < mid_until,
    then `large`; each an `NvFp4Config` (Triton) or a `CuteTile` (CuTe DSL)."""

    small: NvFp4Config | CuteTile
    large: NvFp4Config | CuteTile
    large_from: int = LARGE_FROM_M
    mid: NvFp4Config | CuteTile | None = None
    mid_until: int = 0

    def configs(self) -> tuple[NvFp4Config, ...]:
        """The configs to compile, small first, each once."""
        out = (self.small,)
        for cfg in (self.mid, self.large):
            if cfg is not None and cfg not in out:
                out += (cfg,)
        return out

    @cached_property
    def _above_small(self) -> tuple[int, int]:
        """(index in `configs()` of the tile below mid_until, of the large tile): computed once, as `tile`
        runs on every call (a dataclass comparison costs about half a microsecond)."""
        cfgs = self.configs()
        return cfgs.index(self.large if self.mid is None else self.mid), cfgs.index(self.large)

    def tile(self, m: int) -> int:
        """Index into `configs()` of the tile that runs m live rows (mid_until is 0 without a mid tile)."""
        if m < self.large_from:
            return 0
        mid, large = self._above_small
        return mid if m < self.mid_until else large


# Session 42: the CuTe DSL tile (`_kernel_cute.py`) in place of the Triton tiles from CUTE_FROM_M live rows, when set.
# On an H100 (2026-12-05 12:52, docs/performance.md session 42) `CuteTile()` was equal to or 0.3-3.6% faster than the
# Triton dispatch at every M >= 4096 shape and slower at M <= 16. Session 44 (H100 again, 16:24; the H200 was not lent
# in sessions 42-44): 4 x 4 was 0.7-3.0% under the Triton dispatch at all four (4096 x 4096 17.77 against 17.98 µs,
# 4096 x 7168 28.88 / 29.50, 16384 x 4096 59.72 / 60.13, 16384 x 7168 100.09 / 103.14), the fastest of the four row
# tiles at three and 0.6% behind 8 x 2 at 4096 x 4096 (8 x 2 was only 0.3% under the dispatch at 16384 x 4096), and
# bit-exact there; so it is on, from 4096 rows only: between LARGE_FROM_M and 4096 it is unmeasured and the Triton
# tiles keep those rows. Where the preload tile's range ends inside them (2^26 / CUTE_FROM_M < K <= 2^26 /
# LARGE_FROM_M) the Triton dispatch stays whole (a dispatch of four tiles is not built). Set it to None for the Triton
# dispatch alone.
# Session 45 (H100, outputs rotated, two processes each; docs/performance.md session 45): 4 x 2 (8 rows a CTA, not
# in session 44's sweep) beat 4 x 4 at all four M >= 4096 shapes by 1.0-2.0% (4096 x 4096 18.05 -> 17.68 / 17.72 µs,
# 80.4 / 80.2% of the ceiling) and the Triton dispatch at 3072 rows at both K (14.30 -> 14.03, 23.50 -> 22.16 µs),
# so it is the tile and it starts at 3072 rows. At 2048 rows it tied the dispatch at K = 4096 (10.49 against 10.46)
# and won at 7168 (-5%); at 1024 rows 4 x 2 lost 9% at K = 4096 (4 x 1 won 2-4% there): those rows stay Triton.
# Session 46, the first H200 run of the CuTe default (outputs rotated, one process, docs/performance.md session 46):
# the Triton dispatch beat `CuteTile(4, 2)` at every shape from 3072 rows, by 5-10% (4096 x 4096 14.60 against 15.49
# µs, 16384 x 4096 47.70 / 52.45, 4096 x 7168 23.50 / 25.29, 16384 x 7168 85.66 / 91.52); 4 x 4 tied the dispatch
# at three of the four and lost 4% at 4096 x 4096. The H200 is the targets' machine, so the switch is off again:
# the Triton dispatch runs every M. `CUTE_TILE` is the tile the switch turns on (the H100's best, session 45).
CUTE_TILE = CuteTile(warps=4, rows=2)
CUTE_ABOVE_SMALL: CuteTile | None = None
CUTE_FROM_M = 3072


def _triton_large(k: int) -> NvFp4Config:
    """The Triton large-M tile at K: `LARGE_M_STEPS`, or `LARGE_M_PAIRS` once PAIRS_GPU_VALIDATED, or `LARGE_M_S7`
    when set (its block_k capped to the padded row, as every candidate's is)."""
    if LARGE_M_S7 is not None and _kernel.PAIRS_GPU_VALIDATED:
        return capped_config(k, LARGE_M_S7)
    return capped_config(k, _kernel.LARGE_M_PAIRS if _kernel.PAIRS_GPU_VALIDATED else _kernel.LARGE_M_STEPS)


def large_config(k: int) -> NvFp4Config | CuteTile:
    """The tile of the most rows at K: `CUTE_ABOVE_SMALL` when set, else the Triton large-M tile."""
    return CUTE_ABOVE_SMALL if CUTE_ABOVE_SMALL is not None else _triton_large(k)


def mid_config(k: int) -> NvFp4Config | None:
    """The Triton tile between large_from and MID_MAX_ELEMENTS // k rows: `MID_PRELOAD` once PRELOAD_GPU_VALIDATED
    (capped to the padded row; K-major up to MID_K_MAJOR_MAX_K columns once ORDER_GPU_VALIDATED), else None."""
    if MID_PRELOAD is None or not _kernel.PRELOAD_GPU_VALIDATED:
        return None
    cfg = capped_config(k, MID_PRELOAD)
    return replace(cfg, k_major=True) if k <= MID_K_MAJOR_MAX_K and _kernel.ORDER_GPU_VALIDATED else cfg


def default_selection(max_rows: int, k: int):
    """The heuristic: `default_config(k)` alone below LARGE_FROM_M rows of capacity, else a dispatch from it to the
    Triton mid tile up to MID_MAX_ELEMENTS // k rows (`mid_config`) and the Triton large-M tile after. With
    `CUTE_ABOVE_SMALL` set and a capacity of CUTE_FROM_M rows or more, the CuTe tile runs from CUTE_FROM_M rows and the
    one Triton tile those rows ran (the mid tile where its range reaches CUTE_FROM_M, the large one where there is no
    mid tile) below them; where the mid tile's range ends between, the Triton dispatch stays as it is."""
    if max_rows < LARGE_FROM_M:
        return default_config(k)
    small, mid = default_config(k), mid_config(k)
    mid_until = MID_MAX_ELEMENTS // k + 1 if mid is not None and MID_MAX_ELEMENTS // k >= LARGE_FROM_M else 0
    if CUTE_ABOVE_SMALL is not None and max_rows >= CUTE_FROM_M and (not mid_until or mid_until >= CUTE_FROM_M):
        below = mid if mid_until else _triton_large(k)
        return NvFp4Dispatch(small, CUTE_ABOVE_SMALL, mid=below, mid_until=CUTE_FROM_M)
    if not mid_until:
        return NvFp4Dispatch(small, _triton_large(k))
    return NvFp4Dispatch(small, _triton_large(k), mid=mid, mid_until=mid_until)


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


def is_tile(k: int, tile) -> bool:
    """A Triton `NvFp4Config` or a CuTe `CuteTile` (`_kernel_cute.py`) valid for k."""
    if isinstance(tile, NvFp4Config):
        return can_implement(k, tile)
    return isinstance(tile, CuteTile) and cute_why_not(k, tile) is None


def can_select(k: int, selection) -> bool:
    """A tile valid for k (`is_tile`), or an `NvFp4Dispatch` of valid tiles with an int large_from >= 1 and,
    with a mid tile, an int mid_until > large_from."""
    if isinstance(selection, (NvFp4Config, CuteTile)):
        return is_tile(k, selection)
    is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
    return (
        isinstance(selection, NvFp4Dispatch)
        and all(is_tile(k, c) for c in (selection.small, selection.large))
        and is_int(selection.large_from)
        and selection.large_from >= 1
        and is_int(selection.mid_until)
        and (
            (selection.mid is None and selection.mid_until == 0)
            or (is_tile(k, selection.mid) and selection.mid_until > selection.large_from)
        )
    )


def with_pdl(selection, pdl: bool):
    """The selection (a tile or a dispatch) with `pdl` set to `pdl` on every tile."""
    if isinstance(selection, (NvFp4Config, CuteTile)):
        return replace(selection, pdl=pdl)
    mid = None if selection.mid is None else replace(selection.mid, pdl=pdl)
    return replace(selection, small=replace(selection.small, pdl=pdl), large=replace(selection.large, pdl=pdl), mid=mid)


def selection_configs(selection) -> tuple:
    """The tiles a selection compiles (a plain tile: itself)."""
    return selection.configs() if isinstance(selection, NvFp4Dispatch) else (selection,)
