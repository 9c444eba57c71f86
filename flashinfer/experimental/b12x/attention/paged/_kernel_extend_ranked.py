"""The extend work list in rank-major order (`ExtendConfig.ranked`), on device: one CTA.

Why: `ExtendSchedule` lists request by request (each request's tiles last first), so with one
256-row CTA an SM the hardware starts the last request's longest tiles in the last wave and the
run ends on them while other SMs idle (bench_attention's L = 512: 16 requests x 8 tiles x 8 heads
= 1024 CTAs on 132 SMs; a list-scheduling model with each tile's cost its KV tiles + 1 gives a
makespan 9% over the mean load, 1% for the longest-first order; 1% / 0.1% at 1k / 2k).

Order: rank r of request b's tile j is tiles_b - 1 - j (rank 0: the request's last tile, the one
that sees the most keys of a causal request); items are listed by class min(r, CLASSES - 1)
ascending, so every request's last tile comes first, then every second-to-last, ... (for a batch
of one q_len: the longest-processing-time-first order). Within a class the order is the arrival
order of shared-memory atomics (any order is correct: an item's result does not depend on when it
runs). Items: as `ExtendSchedule` (request b's ceil(L_b / T) tiles, count[0] = their number).

Three phases, two barriers: a class histogram (one shared-memory atomic per tile of rank < 63, one
for the rest of a request), its exclusive prefix (warp 0, two classes a lane), each tile's slot =
its class's prefix + an atomic ticket in that class.
`ranked_extend_schedule_reference` (`_config_extend`) is the order in Python (one valid order of
each class).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from ..._lib.compile import cute_compile, kernel
from ._config import SCHEDULE_THREADS
from ._config_extend import RANK_CLASSES


class RankedExtendSchedule:
    """One CTA: see the module docstring. tokens_per_tile: query tokens a tile (block_m // G)."""

    def __init__(self, tokens_per_tile: int) -> None:
        self.tq = tokens_per_tile
        self.threads = SCHEDULE_THREADS
        self.classes = RANK_CLASSES  # two a lane of warp 0 in the prefix

    @cute.jit
    def __call__(
        self,
        mCu: cute.Tensor,  # (batch + 1,) int32: cu_seqlens_q
        mWork: cute.Tensor,  # (cap, 2) int32: request, first token
        mCount: cute.Tensor,  # (1,) int32
        stream: cuda.CUstream,
    ):
        self.kernel(mCu, mWork, mCount).launch(grid=[1, 1, 1], block=[self.threads, 1, 1], stream=stream)

    @cute.jit
    def _tiles(self, mCu, b):
        return (cutlass.max(mCu[b + 1] - mCu[b], 0) + self.tq - 1) // self.tq

    @cute.kernel
    def kernel(self, mCu: cute.Tensor, mWork: cute.Tensor, mCount: cute.Tensor):
        tid, _, _ = cute.arch.thread_idx()
        smem = cutlass.memory.SmemAllocator()
        sHist = smem.allocate_tensor(Int32, cute.make_layout(self.classes), 16)  # items of each class
        sFill = smem.allocate_tensor(Int32, cute.make_layout(self.classes), 16)  # tickets handed out
        sOff = smem.allocate_tensor(Int32, cute.make_layout(self.classes), 16)  # first slot of each
        batch = mCu.shape[0] - 1
        cap = mWork.shape[0]
        per = (batch + self.threads - 1) // self.threads
        b0 = cutlass.min(tid * per, batch)
        b1 = cutlass.min(b0 + per, batch)
        last = self.classes - 1
        if tid < self.classes:
            sHist[tid] = Int32(0)
            sFill[tid] = Int32(0)
        cute.arch.sync_threads()

        # ---- 1: the class histogram: ranks 0 .. last - 1 one item each, the rest in class `last` ----
        for b in range(b0, b1):
            tiles = self._tiles(mCu, b)
            for c in range(cutlass.min(tiles, last)):
                cute.arch.atomic_add(sHist.iterator + c, Int32(1), scope="cta")
            if tiles > last:
                cute.arch.atomic_add(sHist.iterator + last, tiles - last, scope="cta")
        cute.arch.sync_threads()

        # ---- 2: each class's first slot (warp 0: lane l holds classes 2l and 2l + 1) -------------
        if tid < 32:
            lo = sHist[2 * tid]
            hi = sHist[2 * tid + 1]
            incl = lo + hi
            for k in cutlass.range_constexpr(5):
                up = cute.arch.shuffle_sync_up(incl, offset=1 << k)
                if tid >= (1 << k):
                    incl = incl + up
            sOff[2 * tid] = incl - lo - hi
            sOff[2 * tid + 1] = incl - hi
            if tid == 31:
                mCount[0] = cutlass.min(incl, cap)
        cute.arch.sync_threads()

        # ---- 3: each tile's slot: its class's first slot + a ticket ------------------------------
        for b in range(b0, b1):
            tiles = self._tiles(mCu, b)
            for j in range(tiles):
                c = cutlass.min(tiles - 1 - j, last)
                slot = sOff[c] + cute.arch.atomic_add(sFill.iterator + c, Int32(1), scope="cta")
                if slot < cap:  # cannot overflow for valid cu_seqlens_q; bad ones must not fault
                    mWork[slot, 0] = b
                    mWork[slot, 1] = j * self.tq


@kernel(
    "attention.paged.ranked_extend_schedule",
    sources=(
        "flashinfer.experimental.b12x.attention.paged._config",
        "flashinfer.experimental.b12x.attention.paged._config_extend",
    ),
)
def compile_ranked_extend_schedule(tokens_per_tile: int, arch: str):
    """tvm-ffi launcher `fn(cu_seqlens_q, work, count)` (one CTA), the same contract as
    `_kernel_split.compile_extend_schedule`'s."""
    cu = make_fake_compact_tensor(Int32, (cute.sym_int(),), assumed_align=4)
    work = make_fake_compact_tensor(Int32, (cute.sym_int(), 2), stride_order=(1, 0), assumed_align=8)
    count = make_fake_compact_tensor(Int32, (1,), assumed_align=4)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(RankedExtendSchedule(tokens_per_tile), cu, work, count, stream, arch=arch)
