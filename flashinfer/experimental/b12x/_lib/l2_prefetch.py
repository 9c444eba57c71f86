"""Fire-and-forget L2 prefetch of a list of device byte ranges (issue #10: a decode step's weights).

A decode step at T = 1 reads every weight once and each GEMM is bound by its weight read; a real
model's layers never find their weights in L2. Launched at the start of the step on a side branch
(a second stream forked from the main one and joined at the end, `L2Prefetch.side_branch`), one
short kernel asks L2 for every 128-byte line of every weight tensor, in the order the step uses
them, so DRAM streams the whole block while the chain of kernels runs, and the GEMMs' weight loads
hit L2. The kernel only issues prefetches and exits: it holds SMs for the issue time alone.

The kernel takes a device int64 table [R, 2] of (address, bytes) rows and a CTA count. Its items
are, in table order, the 128-byte lines (mode "line": one `prefetch.global.L2` each) or the
`bulk_bytes` chunks (mode "bulk": one `cp.async.bulk.prefetch.L2.global` each, the TMA unit splits
it into lines) of every range, the range widened to whole 128-byte lines (a line that holds one
byte of an allocation is mapped, so no widened address faults). Items are dealt grid-stride over
the concatenation of all ranges: thread g of G issues items g, g + G, g + 2G, ..., so the first
wave of the grid requests the first G items, the earliest ranges first. Nothing is read back, no
register waits on a prefetch, no shared memory is used.

Moves nothing itself: it makes DRAM deliver sum(bytes) (rounded up to lines) into L2, which at the
copy ceiling (4.28 TB/s on the H200) takes bytes / 4.28e12 s; issuing takes items / (SMs x issue
rate), about 1 µs for the llama-small block's ~200k lines (module docstring of the bench).

Both instructions exist on sm_90 and later (sm_90a and sm_120a). On CPU tensors the record is built
(table, sizes) but `launch` and `side_branch` do nothing: the reference backend has no L2.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

LINE = 128  # bytes per L2 line, the unit of prefetch.global.L2
MODES = ("line", "bulk")


@dataclass(frozen=True)
class PrefetchConfig:
    """The kernel's compile key (with the arch). mode: one of MODES; threads: per CTA (a multiple of
    32, <= 1024); bulk_bytes: the chunk of one bulk prefetch (mode "bulk"; a multiple of 128)."""

    mode: str = "line"
    threads: int = 256
    bulk_bytes: int = 4096

    @property
    def item_bytes(self) -> int:
        return LINE if self.mode == "line" else self.bulk_bytes


BULK = PrefetchConfig("bulk", threads=64, bulk_bytes=4096)  # the bulk variant the bench sweeps first


def why_not(config: PrefetchConfig) -> str | None:
    """None when the kernel implements `config`, else the reason."""
    if not isinstance(config, PrefetchConfig):
        return f"config must be a PrefetchConfig, got {type(config).__name__}"
    if config.mode not in MODES:
        return f"config.mode must be one of {MODES}, got {config.mode!r}"
    if config.threads % 32 or not 32 <= config.threads <= 1024:
        return f"config.threads must be a multiple of 32 in [32, 1024], got {config.threads}"
    if config.mode == "bulk" and (config.bulk_bytes % LINE or not LINE <= config.bulk_bytes <= 2**20):
        return f"config.bulk_bytes must be a multiple of {LINE} in [{LINE}, 2**20], got {config.bulk_bytes}"
    return None


def range_items(addr: int, nbytes: int, item_bytes: int) -> int:
    """Items (lines or chunks) the kernel issues for one range (see `widened`)."""
    return widened(PyOps, addr, nbytes, item_bytes)[2]


# The grid: enough CTAs that each thread issues about `items_per_thread` items (a handful of
# instructions, so the whole list is in flight within ~1 µs of the launch), at most `ctas_per_sm`
# per SM (the prefetch CTAs share the SMs with the step's first kernels: they are small, 20
# registers and no shared memory, and leave fast). Line mode: 8 items a thread; for the llama-small
# block 198k lines / (256 x 8) = 97 CTAs. Bulk mode: 1 item a thread, since a warp's 32 bulk
# prefetches go one lane after another (the instruction takes uniform operands: ptxas loops over
# the lanes) and each SM's TMA unit splits its chunks into lines: spread them over the SMs
# (25.4 MB / 4 KB = 6.2k chunks / 64 threads = 97 CTAs). Unmeasured guesses: the lead's sweep of
# bench_l2_prefetch decides.
ITEMS_PER_THREAD = {"line": 8, "bulk": 1}
CTAS_PER_SM = 2


def grid_ctas(items: int, threads: int, sms: int, items_per_thread: int, ctas_per_sm: int = CTAS_PER_SM) -> int:
    """CTAs for `items` (see the comment above): ceil(items / (threads x items_per_thread)), in
    [1, ctas_per_sm x sms]."""
    if items_per_thread < 1 or ctas_per_sm < 1 or sms < 1:
        raise ValueError(
            f"items_per_thread, ctas_per_sm and sms must be >= 1, got {items_per_thread}, {ctas_per_sm}, {sms}"
        )
    return max(1, min(math.ceil(items / (threads * items_per_thread)), ctas_per_sm * sms))


# ---- the kernel's per-range arithmetic, shared by the kernel (cutlass numbers) and `emulate` -------
class PyOps:
    """The numbers `widened` and `next_first` run on: Python ints here, cutlass Int64 / Int32 with
    cutlass.min / max in the kernel (every division there has nonnegative operands, so C's
    truncation and Python's floor agree)."""

    i64 = i32 = staticmethod(int)
    min = staticmethod(min)
    max = staticmethod(max)


def widened(ops, addr, nbytes, item: int):
    """(start, end, items) of one table row: [start, end) the range widened to whole 128-byte lines,
    items its count of `item`-byte items. n >= 1 bytes span at most n lines, so the min leaves a
    non-empty range's count alone and makes an empty (or negative) one's 0."""
    start = addr & ops.i64(-LINE)
    end = (addr + nbytes + ops.i64(LINE - 1)) & ops.i64(-LINE)
    items = ops.min((end - start + ops.i64(item - 1)) // ops.i64(item), ops.max(nbytes, ops.i64(0)))
    return start, end, ops.i32(items)


def next_first(ops, first, items, stride):
    """The thread's first item in the next range: its items in this one were first + k G < items, k =
    ceil((items - first) / G) of them (none when first >= items); the next is first + k G - items."""
    left = items - first
    k = (ops.max(left, ops.i32(0)) + stride - ops.i32(1)) // stride
    return k * stride - left


def emulate(ranges, ctas: int, config: PrefetchConfig) -> list[list[tuple[int, int]]]:
    """What each thread of the kernel issues, in order: [(address, bytes), ...] per global thread
    (bytes: the item's, 128 for a line). The kernel's loops over `widened` / `next_first`."""
    threads = ctas * config.threads
    out = []
    for g in range(threads):
        first, issued = g, []
        for addr, nbytes in ranges:
            start, end, items = widened(PyOps, addr, nbytes, config.item_bytes)
            for i in range(first, items, threads):
                at = start + i * config.item_bytes
                issued.append((at, min(end - at, config.item_bytes)))
            first = next_first(PyOps, first, items, threads)
        out.append(issued)
    return out


def _describe(t) -> str:
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    layout = "" if t.is_contiguous() else " (non-contiguous)"
    return f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)} on {t.device}{layout}"


def _check_tensors(tensors, device) -> torch.device:
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, Sequence) or len(tensors) == 0:
        raise ValueError(f"tensors must be a non-empty list of tensors, got {type(tensors).__name__}")
    want = None if device is None else torch.device(device)
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"tensors[{i}] must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_contiguous() or t.numel() == 0:
            raise ValueError(f"tensors[{i}] must be a contiguous non-empty tensor (one byte span), got {_describe(t)}")
        if t.device.type not in ("cuda", "cpu"):
            raise ValueError(f"tensors[{i}] must be on a CUDA device (or CPU: a no-op), got {_describe(t)}")
        if want is None:
            want = t.device
        same = t.device.type == want.type and (want.index is None or t.device.index == want.index)
        if not same:
            raise ValueError(f"tensors[{i}] must be on {want} like the others, got {_describe(t)}")
        want = t.device
    return want


class L2Prefetch:
    """A prefetch of fixed byte ranges, built at prepare time (`from_tensors`): table, grid and the
    compiled kernel; `launch()` only launches (CUDA-graph capture safe, no compile, no allocation)."""

    def __init__(self, ranges, table, device, config, ctas, fn, tensors=()) -> None:
        self.ranges = ranges  # ((address, bytes), ...) in the order given
        self._tensors = tuple(tensors)  # kept alive: a freed span's memory may be unmapped
        self.table = table  # int64 [R, 2] on `device`: the same rows
        self.device, self.config, self.ctas, self._fn = device, config, ctas, fn

    @classmethod
    def from_tensors(
        cls,
        tensors: Sequence[torch.Tensor],
        device=None,
        *,
        config: PrefetchConfig | None = None,
        items_per_thread: int | None = None,
        ctas_per_sm: int = CTAS_PER_SM,
        arch: str | None = None,
    ) -> L2Prefetch:
        """One range per tensor (its data_ptr and nbytes), in the order given, nothing merged; the
        record holds the tensors (their memory stays allocated while it lives).

        tensors: contiguous non-empty tensors on one CUDA device (`device` when given), or on CPU
        (then `launch` is a no-op and nothing compiles). items_per_thread (default by mode,
        ITEMS_PER_THREAD) and ctas_per_sm choose the grid (`grid_ctas`). Compiles (or loads) the
        kernel now, so build it before `freeze_kernel_resolution` and outside graph capture."""
        config = PrefetchConfig() if config is None else config
        reason = why_not(config)
        if reason is not None:
            raise ValueError(reason)
        dev = _check_tensors(tensors, device)
        ranges = tuple((t.data_ptr(), t.numel() * t.element_size()) for t in tensors)
        table = torch.tensor(ranges, dtype=torch.int64).to(dev)
        if dev.type != "cuda":
            return cls(ranges, table, dev, config, 0, None, tensors)
        from .arch import resolve_device, sm_count, target_arch

        dev = resolve_device(dev)
        items = sum(range_items(a, n, config.item_bytes) for a, n in ranges)
        per_thread = ITEMS_PER_THREAD[config.mode] if items_per_thread is None else items_per_thread
        ctas = grid_ctas(items, config.threads, sm_count(dev), per_thread, ctas_per_sm)
        fn = compile_l2_prefetch(config, arch=target_arch(dev, arch))
        return cls(ranges, table, dev, config, ctas, fn, tensors)

    @property
    def nbytes(self) -> int:
        return sum(n for _, n in self.ranges)

    @property
    def items(self) -> int:
        return sum(range_items(a, n, self.config.item_bytes) for a, n in self.ranges)

    def launch(self) -> None:
        """Issue the prefetches on torch's current stream (CPU record: nothing)."""
        if self._fn is not None:
            self._fn(self.table, self.ctas)

    @contextlib.contextmanager
    def side_branch(self, stream: torch.cuda.Stream | None):
        """Fork `stream` off the current stream, launch the prefetch on it, run the body on the
        current stream, join at exit (the current stream waits for `stream`):

            with prefetch.side_branch(side):   # side waits on main; prefetch on side
                step()                         # main stream, overlapped with the prefetch
            # main waits on side: the fork and the join are edges of a captured CUDA graph

        `stream` must be a stream of the record's device other than the current one (None on a
        CPU record, where this only runs the body)."""
        if self._fn is None:
            yield
            return
        main = torch.cuda.current_stream(self.device)
        if not isinstance(stream, torch.cuda.Stream) or stream.device != self.device or stream == main:
            got = stream if not isinstance(stream, torch.cuda.Stream) else f"{stream} on {stream.device}"
            raise ValueError(
                f"stream must be a torch.cuda.Stream on {self.device} other than the current one, got {got}"
            )
        stream.wait_stream(main)
        with torch.cuda.stream(stream):
            self.launch()
        try:
            yield
        finally:
            main.wait_stream(stream)

    def __repr__(self) -> str:
        c = self.config
        return (
            f"L2Prefetch({len(self.ranges)} ranges, {self.nbytes} bytes, {c.mode} x {self.items}, "
            f"{self.ctas} CTAs x {c.threads} on {self.device})"
        )


# ---- the CuTe kernel (imported lazily: cutlass costs seconds to import) --------------------------
def compile_l2_prefetch(config: PrefetchConfig, arch: str):
    """The tvm-ffi launcher `fn(table, ctas)` on torch's current stream (see `_l2_prefetch_kernel`)."""
    from ._l2_prefetch_kernel import compile_prefetch

    return compile_prefetch(config, arch=arch)
