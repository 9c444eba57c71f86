"""moe.fused_moe expert GEMMs launched as programmatic dependents (`ExpertConfig.pdl`, sm_90+).

    "off"       a plain launch (the kernels as before).
    "wait"      launched with the programmatic-stream-serialization attribute (a programmatic edge
                under CUDA graph capture): the CTAs may become resident while the launch before
                still runs; each waits (griddepcontrol.wait: that launch complete, its writes
                visible) before its first read of anything the launches before write (expert_start,
                active, A, the alphas), then lets the next launch start (launch_dependents).
    "prefetch"  "wait", and before the wait an identity-grid CTA (expert = CTA row, known without
                the routing) issues `prefetch.global.L2` for every 128-byte line of its weight rows
                and of their swizzled scales, so the CTAs resident during the gather (or FC1's last
                wave, for FC2) turn that time into weight bytes in L2, and their K loop hits L2. A
                list-grid CTA learns its expert only from the routing: it just waits.

Why: at decode sizes a layer is 4-5 dependent launches (docs/moe.md), each with a ramp (CTAs
launched, first loads in flight) and a drain (the last wave's stragglers) in which HBM idles. The
weights are most of the bytes and never depend on the launch before, so their stream can start
during it. The math is the kernel's own: the same bits as "off".

Bytes: the prefetch touches each weight line once more per CTA (an L2 hit after the first); the
scale lines of an atom are shared by the CTAs of one 128-row tile (8-row groups, FORMATS.md).

Measured (H200 2026-12-02, E = 128, docs/performance.md "Session 18"): "wait" 0.6-3.2 µs faster than
plain at T = 1..64 (the heuristic's mode, `api.PDL`); "prefetch" ~20 µs slower at T = 16 / 64: every
CTA of the grid prefetches, not only the first wave resident during the gather, and at T = 16 a third
of the experts have no rows. A prefetch limited to the first wave is the untested next form.
"""

from __future__ import annotations

from ...gemm._shared import addressing as AD
from ...gemm._shared.formats import FORMAT

PDL_MODES = ("off", "wait", "prefetch")


class WeightPrefetch:
    """The "prefetch" mode's addresses (a mixin of `_kernel_experts.ExpertLogic`: uses its gated,
    cols, span, b_fmt, prefetch_ctas and tile_n0). Items are spread over the CTA's threads by the
    kernel."""

    def _row_blocks(self):
        """Weight row blocks of one column tile: gate and up rows (gated FC1), else one."""
        return 2 if self.gated else 1

    def _block_row0(self, bidx, blk, n):
        """(first output column, first weight row) of the CTA's row block blk (tile blk // blocks;
        a gated FC1's second block is the up rows n + ..)."""
        nb = self._row_blocks()
        n0 = self.tile_n0(bidx, blk // nb)
        return n0, (n0 + n * (blk % nb)) if nb > 1 else n0

    def value_prefetch_items(self, k):
        """128-byte lines of the CTA's weight rows: span x blocks x (cols rows of K * bits / 8 bytes,
        a multiple of 128: cols >= 16, K % 32 == 0)."""
        return self.span * self._row_blocks() * ((self.cols * AD.row_bytes(self.b_fmt, k)) >> 7)

    def first_wave(self, ops, linear):
        """None (every CTA prefetches), or with `prefetch_ctas` > 0 whether the CTA of this linear
        index (row * grid_n + x) is one of the first prefetch_ctas: a trace-time choice, so the
        default builds exactly the kernel without it."""
        if not self.prefetch_ctas:
            return None
        return linear < ops.i32(self.prefetch_ctas)

    @staticmethod
    def _live(ok, first):
        return ok if first is None else ok & first

    def value_prefetch_line(self, ops, b_base, n, k, bidx, i, first=None):
        """(address, in range) of item i < value_prefetch_items(k): line i % L of row block i // L
        (L lines a block); out of range where the line's row is past the GEMM's n output rows, or the
        CTA is not in the first wave (`first_wave`)."""
        ldb = AD.row_bytes(self.b_fmt, k)
        lines = (self.cols * ldb) >> 7
        blk = i // lines
        off = (i - blk * lines) * 128
        n0, row0 = self._block_row0(bidx, blk, n)
        return b_base + ops.i64(row0) * ops.i64(ldb) + ops.i64(off), self._live((n0 + off // ldb) < n, first)

    def _scale_cols4(self, k):
        shift = FORMAT[self.b_fmt].sf_vec.bit_length() - 1
        return (((k >> shift) + 3) >> 2) << 2

    def scale_prefetch_items(self, k):
        """Swizzled-scale lines of the CTA's rows: per block, its 8-row groups (8 rows' 16-byte units
        are one aligned 128-byte line of an atom, FORMATS.md) x the atoms along K; 0 unswizzled."""
        if not FORMAT[self.b_fmt].swizzled:
            return 0
        return self.span * self._row_blocks() * (self.cols >> 3) * (self._scale_cols4(k) >> 2)

    def scale_prefetch_line(self, ops, sfb_base, n, k, bidx, i, first=None):
        """(address, in range) of item i < scale_prefetch_items(k): 8-row group i % G of atom
        (i // G) % A of row block i // (G A)."""
        groups = self.cols >> 3  # a power of two
        cols4 = self._scale_cols4(k)
        per = groups * (cols4 >> 2)
        blk = i // per
        rem = i - blk * per
        g = rem & (groups - 1)
        atom = rem >> (groups.bit_length() - 1)
        n0, row0 = self._block_row0(bidx, blk, n)
        return sfb_base + AD.swizzled_offset(ops, row0 + g * 8, atom * 4, cols4), self._live((n0 + g * 8) < n, first)
