"""Persistent CTAs of the paged extend kernel (`ExtendConfig.persistent`, the live tile choice only).

Why: with two tiles (`ExtendConfig.small`) both kernels launch and the unchosen one gets 0 items,
so its grid (one CTA per (work row, KV head): 1152 CTAs of the 256-row tile at L = 512, 4-8k of
the 128-row tile from L = 1k in bench_attention's cases) exits wave after wave, one L2 round trip
each, at the occupancy its registers and shared memory allow: ~0.5 µs a wave, 4-9 µs a run
measured on the H200 (docs/predictions/attention_extend.md, session 8). A persistent grid has at
most `persistent_ctas` CTAs (one wave: CTAs an SM x SMs, `_config_extend.resident_ctas`), so the
dead kernel costs one wave.

How (CUDA-graph safe; the live kernel keeps the hardware's greedy order): CTA (kvh, row) first runs
linear item row * Hkv + kvh, as the one-item grid would; each further item comes from a counter
(count[1] of its (2,) view, zeroed by the dual schedule before every run) that hands out linear
indices grid CTAs, grid CTAs + 1, ... in the order the hardware would launch new CTAs (heads
fastest, work rows in the schedule's order: last tile of a request first). Thread 0 draws the next
index after its item's prologue issue (the atomic's round trip overlaps the Q / first-tile loads),
stores it in shared memory after the prologue barrier (every thread has read the previous item's
value by then) and all threads read it after the barrier that ends the item (which also frees the
ring and Q for the next item's prologue). A static stride (decode's persistent form) would hand one
CTA the same tile position of every request: the causal tiles' work differs by up to 16x.
"""

from __future__ import annotations

import cutlass.cute as cute
from cutlass import Int32


class ExtendPersistent:
    """Device helpers of `PagedExtend` for `persistent_ctas > 0` (see the module docstring)."""

    @cute.jit
    def _persistent(self, tensors, layouts, copies, scalars, kvh, item, tidx, lane):
        """Items of this CTA until the drawn index runs past the live count (a dead kernel: at once)."""
        mCount = tensors[7]
        count = mCount[0]
        ctas = cute.arch.grid_dim()[1] * self.hkv
        while item < count:
            drawn = self._item(tensors, layouts, copies, scalars, item, kvh, tidx, lane)
            linear = ctas + drawn
            item = linear // self.hkv
            kvh = linear % self.hkv

    @cute.jit
    def _draw_next(self, mCount, tidx):
        """Thread 0: the next item's draw (relaxed: the counter orders nothing but itself); others 0."""
        drawn = Int32(0)
        if tidx == 0:
            counter = mCount.iterator + cute.crd2idx(1, mCount.layout)
            drawn = cute.arch.atomic_add(counter, Int32(1), sem="relaxed", scope="gpu")
        return drawn

    @cute.jit
    def _publish_next(self, sNext, drawn, tidx):
        """Thread 0 stores its draw (read after the barrier that ends the item; every thread has read
        the previous item's before the prologue barrier this follows)."""
        if tidx == 0:
            sNext[0] = drawn
