"""The extend work list with a live tile choice (`ExtendConfig.small`), on device: one CTA.

Why: the 256-row tile (one CTA an SM) is the fastest from q_len 1k, but at 512 its CTAs run few
KV tiles each and the exposed prologue / epilogue of a lone CTA make it 4-8% slower than the
128-row tile (two CTAs an SM overlap each other's); the plan cannot know the live q_lens.

Design (CUDA-graph safe, no host read): the plan compiles both extend kernels (the large tile and
the small one) and this schedule. Per run the schedule
1. sums the live q_lens L_b = max(0, cu[b + 1] - cu[b]) and their squares over the batch (two
   64-bit block sums: exact for any int32 lengths);
2. picks the small tile when sum L_b^2 < small_below * sum L_b, i.e. the token-weighted mean q_len
   (the q_len of the request an average query token belongs to) is below small_below: short
   requests mean few KV tiles a CTA, where one 256-row CTA an SM leaves its prologue and epilogue
   exposed (a q_len * G of 128 rows also half-fills a 256-row tile), while one long request among
   many one-token ones still gets the large tile (its tokens are the work; a plain mean over
   requests would pick the small one). Uniform batches: the mean is their q_len;
3. writes the chosen tile's list exactly as `ExtendSchedule` does (request b's ceil(L_b / T)
   tiles, last first) into the one shared work list, sized for the small tile (more items:
   `extend_item_capacity` of the fewest tokens a tile, which also bounds the large tile's count);
4. writes count[0] = items if the large tile was chosen else 0, count[1] = items if the small
   one was else 0, zeroes count[2] / count[3] (the next-item counters of a persistent large / small
   kernel, `_kernel_extend_persistent`: each reads its (items, counter) pair as count[k::2]), and
   flags[0] / flags[1] = whether each kernel was chosen (one byte each).
Then both extend kernels launch (large, then small; `small_first`: small, then large), each over the
rows its own tile could need (a persistent one: one wave of CTAs looping over them)
and each reading its own count (count[0:1] and count[1:2]): the unchosen one reads 0 and every
CTA of it exits at its first load. That dead grid is the cost of the choice: (its rows x Hkv)
CTAs of one load each, at the occupancy its shared memory allows (the 128-row tile: 2 an SM,
the 256-row: 1); `docs/predictions/attention_extend.md` estimates it. With
`ExtendConfig.conditional`, a run captured into a torch CUDA graph puts each kernel in a
CUDA-graph if-node on its flag (`CUDAGraph.begin_capture_to_if_node`): the unchosen grid is not
launched at all, for two one-thread kernels that set the nodes' handles (torch's) instead.
With `ExtendConfig.early_launch` this kernel triggers at its start and the first extend kernel is its
programmatic dependent, waiting (griddepcontrol.wait) for these results before it reads anything:
its launch overlaps this kernel instead of following it.
`dual_extend_schedule_reference` (`_config_extend`) is the same algorithm in Python.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint8
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from ..._lib.compile import cute_compile, kernel
from ._config import SCHEDULE_THREADS
from ._kernel_split import Schedule


class DualExtendSchedule(Schedule):
    """One CTA: see the module docstring. large_tokens / small_tokens: query tokens a tile of each
    kernel (block_m // G); small_below: the threshold of the token-weighted mean q_len, in tokens."""

    def __init__(self, large_tokens: int, small_tokens: int, small_below: int, trigger: bool = False) -> None:
        self.large, self.small, self.below = large_tokens, small_tokens, small_below
        self.trigger = trigger  # early_launch: the first extend kernel launches while this one runs
        self.threads = SCHEDULE_THREADS
        self.warps = SCHEDULE_THREADS // 32

    @cute.jit
    def __call__(
        self,
        mCu: cute.Tensor,  # (batch + 1,) int32: cu_seqlens_q
        mWork: cute.Tensor,  # (cap, 2) int32: request, first token (cap: the small tile's rows)
        mCount: cute.Tensor,  # (4,) int32: items of the large kernel, of the small one, their counters
        mFlags: cute.Tensor,  # (2,) uint8: the large kernel chosen, the small one chosen
        stream: cuda.CUstream,
    ):
        self.kernel(mCu, mWork, mCount, mFlags).launch(grid=[1, 1, 1], block=[self.threads, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mCu: cute.Tensor, mWork: cute.Tensor, mCount: cute.Tensor, mFlags: cute.Tensor):
        tid, _, _ = cute.arch.thread_idx()
        if cutlass.const_expr(self.trigger):  # the dependent waits (griddepcontrol.wait) for our results
            cute.arch.griddepcontrol_launch_dependents()
        smem = cutlass.memory.SmemAllocator()
        sWarp = smem.allocate_tensor(Int32, cute.make_layout(self.warps), 16)
        sWarp64 = smem.allocate_tensor(Int64, cute.make_layout(self.warps), 16)
        batch = mCu.shape[0] - 1
        cap = mWork.shape[0]
        per = (batch + self.threads - 1) // self.threads
        b0 = cutlass.min(tid * per, batch)
        b1 = cutlass.min(b0 + per, batch)

        # ---- 1-2: the token-weighted mean q_len picks the tile ------------------------------------
        tokens = Int64(0)
        squares = Int64(0)
        for b in range(b0, b1):
            length = Int64(cutlass.max(mCu[b + 1] - mCu[b], 0))
            tokens = tokens + length
            squares = squares + length * length
        total = self._block_sum64(tokens, tid, sWarp64)
        total_sq = self._block_sum64(squares, tid, sWarp64)
        small = Int32(0)
        if total_sq < total * self.below:  # no live token: 0 < 0 is false, the large tile (nothing runs)
            small = Int32(1)
        tq = Int32(self.large)
        if small != 0:
            tq = Int32(self.small)

        # ---- 3: the chosen tile's list (ExtendSchedule's, with a live tile size) -------------------
        mine = Int32(0)
        for b in range(b0, b1):
            mine = mine + (cutlass.max(mCu[b + 1] - mCu[b], 0) + tq - 1) // tq
        first, n_items = self._block_scan(mine, tid, sWarp)
        item = first
        for b in range(b0, b1):
            tiles = (cutlass.max(mCu[b + 1] - mCu[b], 0) + tq - 1) // tq
            for j in range(tiles):
                if item < cap:  # cannot overflow for valid cu_seqlens_q; bad ones must not fault
                    mWork[item, 0] = b
                    mWork[item, 1] = (tiles - 1 - j) * tq
                item = item + 1

        # ---- 4: the chosen kernel's count and flag, 0 for the other ---------------------------------------
        if tid == 0:
            n_items = cutlass.min(n_items, cap)
            mCount[0] = Int32(0) if small != 0 else n_items
            mCount[1] = n_items if small != 0 else Int32(0)
            mCount[2] = Int32(0)
            mCount[3] = Int32(0)
            mFlags[0] = Uint8(0) if small != 0 else Uint8(1)
            mFlags[1] = Uint8(1) if small != 0 else Uint8(0)

    @cute.jit
    def _block_sum64(self, x, tid, sWarp64):
        """Sum of the Int64 x over the CTA (every thread gets it)."""
        for k in cutlass.range_constexpr(5):
            x = x + cute.arch.shuffle_sync_bfly(x, offset=1 << k)
        if tid % 32 == 0:
            sWarp64[tid // 32] = x
        cute.arch.sync_threads()
        total = Int64(0)
        for w in cutlass.range_constexpr(self.warps):
            total = total + sWarp64[w]
        cute.arch.sync_threads()  # sWarp64 is rewritten by the next sum
        return total


@kernel(
    "attention.paged.dual_extend_schedule",
    sources=(
        "flashinfer.experimental.b12x.attention.paged._config",
        "flashinfer.experimental.b12x.attention.paged._kernel_split",  # Schedule._block_scan
    ),
)
def compile_dual_extend_schedule(
    large_tokens: int, small_tokens: int, small_below: int, arch: str, trigger: bool = False
):
    """tvm-ffi launcher `fn(cu_seqlens_q, work, count, flags)` (one CTA; count: int32 [4], flags:
    uint8 [2]). trigger (`ExtendConfig.early_launch`): its CTA lets the next kernel (launched as a
    programmatic dependent that waits for this one's results) start at once."""
    cu = make_fake_compact_tensor(Int32, (cute.sym_int(),), assumed_align=4)
    work = make_fake_compact_tensor(Int32, (cute.sym_int(), 2), stride_order=(1, 0), assumed_align=8)
    count = make_fake_compact_tensor(Int32, (4,), assumed_align=4)
    flags = make_fake_compact_tensor(Uint8, (2,), assumed_align=1)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    schedule = DualExtendSchedule(large_tokens, small_tokens, small_below, trigger)
    return cute_compile(schedule, cu, work, count, flags, stream, arch=arch)
