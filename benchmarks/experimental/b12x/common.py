"""Shared benchmark harness for the b12x kernel families.

Every ``bench_<family>.py`` times its cases with the same clocks, reports them against the same
measured ceilings and writes the same JSON, so numbers from different families and runs compare:

- ``ceilings(device)``: copy bandwidth (bytes read + written) and cuBLAS bf16 / cuBLASLt fp8 matrix
  product rates measured on the GPU at hand, once per process.
- ``time_cuda_events`` (L2 flushed between iterations, the flush outside the timed region),
  ``time_graph_replay`` (fn captured in a CUDA graph, replays timed back to back) and ``rotate``
  (cycle input sets instead of flushing); each returns a ``Timing`` in microseconds.
- ``Case``/``Table``: a row per (case, implementation) with time, achieved TB/s and TFLOP/s, % of the
  relevant ceiling and ``peer time / our time`` for every peer timed on the same case in the same
  run (> 1 means ours is faster); ``Table.print()`` and ``Table.write_json(path)``.
- ``standard_parser(description)``: the flags every bench module shares; ``measure(fn, args)``.

Nothing touches CUDA at import: on a CPU-only machine the module imports and its table math runs;
the CUDA clocks raise a RuntimeError there, and ``time_cpu`` stands in for CPU tests.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import fcntl
import functools
import importlib.metadata
import importlib.util
import itertools
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

SCHEMA = "b12x-bench/1"
L2_BYTES = 60 * 2**20  # H200; the flush buffer and rotation sizes are multiples of it
FLUSH_BYTES = 256 * 2**20  # > 4x L2: a memset of it leaves nothing of the timed inputs in L2
CEILING_KINDS = ("copy", "bf16", "fp8")
_REPO_ROOT = Path(__file__).resolve().parents[3]

T = TypeVar("T")
Device = torch.device | str | int | None  # None: the current CUDA device
Fn = Callable[[], Any]


# Timing --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Timing:
    """Summary of per-call times in microseconds; ``n`` samples, ``method`` names the clock."""

    median_us: float
    p10_us: float
    p90_us: float
    n: int
    method: str

    @classmethod
    def from_samples(cls, samples_us: Iterable[float], method: str) -> Timing:
        xs = sorted(float(x) for x in samples_us)
        if not xs:
            raise ValueError(f"samples_us must hold at least one time, got none ({method})")
        if any(not math.isfinite(x) or x < 0 for x in xs):
            raise ValueError(f"samples_us must be finite and >= 0, got {xs[:8]} ({method})")
        return cls(_quantile(xs, 0.5), _quantile(xs, 0.1), _quantile(xs, 0.9), len(xs), method)


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    # Linear interpolation between closest ranks (numpy's default), so medians of even counts average.
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def require_cuda(what: str, device: Device = None) -> torch.device:
    """The CUDA device ``device`` names (index filled in), or a RuntimeError naming ``what``."""
    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} needs a CUDA device; torch {torch.__version__} sees none (on CPU: time_cpu)")
    dev = torch.device("cuda" if device is None else device)
    if dev.type != "cuda":
        raise RuntimeError(f"{what} needs a CUDA device, got device={dev}")
    return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())


_FLUSH: dict[int, torch.Tensor] = {}


def _flush_buffer(dev: torch.device) -> torch.Tensor:
    if dev.index not in _FLUSH:
        _FLUSH[dev.index] = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=dev)
    return _FLUSH[dev.index]


GPU_LOCK_ENV = "B12X_BENCH_GPU_LOCK"


def _one_at_a_time(timer: Callable[..., Timing]) -> Callable[..., Timing]:
    """With ``B12X_BENCH_GPU_LOCK=<file>`` set, benchmark processes started side by side take turns
    on the GPU: each timed region (warm-up included) holds an exclusive lock on that file, while
    their kernel compiles, which dominate sweeps, still run in parallel on the host's cores."""

    @functools.wraps(timer)
    def locked(*args: Any, **kwargs: Any) -> Timing:
        path = os.environ.get(GPU_LOCK_ENV)
        if not path:
            return timer(*args, **kwargs)
        with open(path, "a") as handle:  # closing the file releases the lock, also on an exception
            fcntl.flock(handle, fcntl.LOCK_EX)
            return timer(*args, **kwargs)

    return locked


@_one_at_a_time
def time_cuda_events(
    fn: Fn,
    *,
    warmup: int = 10,
    iters: int = 100,
    flush_l2: bool = True,
    device: Device = None,
    before: Fn | None = None,
) -> Timing:
    """Time ``fn()`` on the current stream with one CUDA event pair per call.

    With ``flush_l2`` a 256 MB memset runs before each call, outside its event pair, so every call
    reads its inputs from HBM; the memset also keeps the GPU busy while the host enqueues the call.
    ``before()`` (if given) runs before every call, warmup ones included, outside the event pair:
    the reset a kernel needs between calls (counters zeroed, say), untimed.
    For calls of a few microseconds launch overhead dominates: prefer ``time_graph_replay``.
    """
    dev = require_cuda("time_cuda_events", device)
    if iters < 1 or warmup < 0:
        raise ValueError(f"iters must be >= 1 and warmup >= 0, got iters={iters}, warmup={warmup}")
    with torch.cuda.device(dev):
        flush = _flush_buffer(dev) if flush_l2 else None
        for _ in range(warmup):
            if before is not None:
                before()
            fn()
        torch.cuda.synchronize(dev)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for start, end in zip(starts, ends):
            if before is not None:
                before()
            if flush is not None:
                flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(dev)  # surfaces any asynchronous CUDA error of fn
        samples = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    return Timing.from_samples(samples, "cuda_events" + ("+flush" if flush_l2 else ""))


@_one_at_a_time
def time_graph_replay(
    fn: Fn,
    *,
    iters: int = 20,
    replays_per_sample: int = 10,
    calls_per_graph: int = 1,
    warmup: int = 3,
    device: Device = None,
) -> Timing:
    """Capture ``calls_per_graph`` calls of ``fn`` in one CUDA graph and time its replays.

    Each of ``iters`` samples times ``replays_per_sample`` back-to-back replays with one event pair
    and reports time per call. Nothing is timed inside capture. L2 is not flushed between replays:
    to stream from HBM, let ``fn`` draw from ``rotate(...)`` and make ``calls_per_graph`` a
    multiple of the number of input sets, so the graph holds one call per set.
    """
    dev = require_cuda("time_graph_replay", device)
    if min(iters, replays_per_sample, calls_per_graph) < 1 or warmup < 0:
        counts = f"iters={iters}, replays_per_sample={replays_per_sample}, calls_per_graph={calls_per_graph}"
        raise ValueError(f"{counts} must all be >= 1 and warmup={warmup} >= 0")
    with torch.cuda.device(dev):
        # Warm up on a side stream (torch.cuda.graphs docs): lazy init, allocator and cuBLAS
        # workspaces must happen before capture, on a stream other than the legacy default.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(warmup, 1) * calls_per_graph):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize(dev)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls_per_graph):
                fn()
        graph.replay()
        torch.cuda.synchronize(dev)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for start, end in zip(starts, ends):
            start.record()
            for _ in range(replays_per_sample):
                graph.replay()
            end.record()
        torch.cuda.synchronize(dev)  # surfaces any asynchronous CUDA error of the replays
        per_call = replays_per_sample * calls_per_graph
        samples = [s.elapsed_time(e) * 1e3 / per_call for s, e in zip(starts, ends)]
        del graph
    return Timing.from_samples(samples, "graph_replay")


def time_cpu(fn: Fn, *, warmup: int = 1, iters: int = 10) -> Timing:
    """Host wall-clock time of ``fn()`` (perf_counter): for CPU tests of the harness, not for kernels."""
    if iters < 1 or warmup < 0:
        raise ValueError(f"iters must be >= 1 and warmup >= 0, got iters={iters}, warmup={warmup}")
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    return Timing.from_samples(samples, "cpu")


def rotate(buffers: Sequence[T]) -> Callable[[], T]:
    """Return a callable that yields ``buffers[0], buffers[1], ...`` cyclically, one per call.

    Use it instead of an L2 flush: ``nxt = rotate(sets); time_...(lambda: op(*nxt()))`` with enough
    sets that their total is several times L2 (see ``sets_to_exceed_l2``).
    """
    if len(buffers) == 0:
        raise ValueError("buffers must hold at least one input set, got an empty sequence")
    it = itertools.cycle(list(buffers))
    return lambda: next(it)


def sets_to_exceed_l2(bytes_per_set: int, *, factor: float = 3.0, l2_bytes: int = L2_BYTES) -> int:
    """Number of input sets whose total is at least ``factor`` times L2 (at least 2)."""
    if bytes_per_set <= 0:
        raise ValueError(f"bytes_per_set must be > 0, got {bytes_per_set}")
    return max(2, math.ceil(factor * l2_bytes / bytes_per_set))


# Ceilings ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ceilings:
    """Rates measured on one GPU; ``fp8_tflops`` is None where ``_scaled_mm`` fp8 is unavailable."""

    device_name: str
    cc: tuple[int, int]
    copy_tbps: float  # (bytes read + bytes written) / time of a large device-to-device copy
    bf16_tflops: float  # 2*M*N*K / time of torch.mm on bf16
    fp8_tflops: float | None  # same for torch._scaled_mm, e4m3 operands, tensorwise scales
    copy_bytes: int  # bytes of the copied tensor (moved: twice that)
    mm_shape: tuple[int, int, int]  # (M, N, K)
    fp8_note: str = ""

    def rate(self, kind: str) -> float | None:
        """The ceiling of ``kind`` ('copy' in TB/s, 'bf16' or 'fp8' in TFLOP/s)."""
        if kind not in CEILING_KINDS:
            raise ValueError(f"kind must be one of {CEILING_KINDS}, got {kind!r}")
        return {"copy": self.copy_tbps, "bf16": self.bf16_tflops, "fp8": self.fp8_tflops}[kind]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Ceilings:
        d = dict(d)
        d["cc"] = tuple(d["cc"])
        d["mm_shape"] = tuple(d["mm_shape"])
        return cls(**d)


def copy_fn(nbytes: int, device: torch.device, generator: torch.Generator | None = None) -> Callable[[], Any]:
    """A call copying ``nbytes`` random bytes device to device; it owns (and frees) its two buffers."""
    # Random bytes, never zeros: zeros can run faster than real data.
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device, generator=generator)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def kernel_copy_fn(
    nbytes: int, device: torch.device, generator: torch.Generator | None = None, sources: int = 1, dests: int = 1
) -> Callable[[], Any]:
    """A call moving ``nbytes`` (rounded down to 16) from one of ``sources`` rotated random buffers
    into one of ``dests`` rotated destinations through an SM kernel (an elementwise bitwise NOT on int32
    words: same bytes read and written as a copy). ``dst.copy_(src)`` is a memcpy, which a captured CUDA
    graph turns into a memcpy node that may run on a copy engine at a lower rate than a kernel, so this is
    the copy to compare a graph-timed kernel with. One destination (the default) stays in L2 between calls
    when it fits there, as a kernel's fixed outputs do."""
    words = nbytes // 16 * 4
    if words < 4:
        raise ValueError(f"nbytes must be >= 16, got {nbytes}")
    if sources < 1 or dests < 1:
        raise ValueError(f"sources and dests must be >= 1, got {sources} and {dests}")
    srcs = [
        torch.randint(-(2**31), 2**31 - 1, (words,), dtype=torch.int32, device=device, generator=generator)
        for _ in range(sources)
    ]
    nxt, dst = rotate(srcs), rotate([torch.empty_like(srcs[0]) for _ in range(dests)])
    return lambda: torch.bitwise_not(nxt(), out=dst())


def capture_graph(fn, device):
    """Warm `fn` on a side stream, capture one call in a CUDA graph, replay it once, return the graph."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize(device)
    return graph


def profiled_replays(graph, replays: int) -> None:
    """Replay a captured CUDA graph `replays` times between cudaProfilerStart and Stop (what the
    scripts/ncu_*.py profilers bracket for `ncu --profile-from-start off --graph-profiling node`)."""
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def int_dims(text: str, count: int) -> tuple[int, ...] | None:
    """'AxBx...' -> its `count` non-negative ints, or None when `text` is not that form (each caller
    raises its own message, naming the form and what else it requires)."""
    parts = text.split("x")
    if len(parts) != count or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


COPY_IMPL = "copy (same bytes)"  # the same-size copy reference row (bench_quantization, bench_attention)


def copy_bytes_each_way(nbytes: int) -> int:
    """Bytes the reference copy reads (and writes) for a case moving `nbytes` in all: half, so read +
    write is the case's byte count (rounded down to even)."""
    if nbytes < 2:
        raise ValueError(f"nbytes must be >= 2, got {nbytes}")
    return nbytes // 2


def same_size_copy(nbytes: int, n_sets: int, dev, gen, dests: int | None = None):
    """A call copying `copy_bytes_each_way(nbytes)` random bytes from one of `n_sets` rotated sources into
    one of `dests` rotated destinations (`kernel_copy_fn`; default as many as sources): the device traffic of
    an op that moves `nbytes` in all, streamed. With one fixed destination a reference's writes stay in L2 where
    they fit and it is no streaming reference (session 45, H100: 102.5% of the 2 GiB ceiling at 42 MB)."""
    return kernel_copy_fn(
        copy_bytes_each_way(nbytes), dev, gen, sources=n_sets, dests=n_sets if dests is None else dests
    )


def read_fn(nbytes: int, device: torch.device, generator: torch.Generator | None = None) -> Callable[[], Any]:
    """A call reading ``nbytes`` (rounded down to 16) once: ``torch.amax`` over fp32 words into a 0-d
    output (torch's reduction: a lower bound of what a streaming read can reach at that size)."""
    words = nbytes // 16 * 4
    if words < 4:
        raise ValueError(f"nbytes must be >= 16, got {nbytes}")
    src = torch.randn(words, dtype=torch.float32, device=device, generator=generator)
    out = torch.empty((), dtype=torch.float32, device=device)
    return lambda: torch.amax(src, dim=0, out=out)


def measure_ceilings(
    device: Device = None, *, copy_bytes: int = 2**31, mm_n: int = 8192, warmup: int = 5, iters: int = 20, fp8=True
) -> Ceilings:
    """Measure the ceilings now (uncached); ``ceilings()`` is the cached entry point."""
    dev = require_cuda("measure_ceilings", device)
    gen = torch.Generator(device=dev).manual_seed(1234)
    kw = {"warmup": warmup, "iters": iters, "device": dev}
    # 2 GiB is 34x L2: no flush needed; the buffers are freed with the closure.
    copy_tbps = 2 * copy_bytes / time_cuda_events(copy_fn(copy_bytes, dev, gen), flush_l2=False, **kw).median_us / 1e6

    m = n = k = mm_n
    flops = 2 * m * n * k
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16, generator=gen)
    c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    bf16_tflops = flops / time_cuda_events(lambda: torch.mm(a, b, out=c), **kw).median_us / 1e6

    fp8_tflops, note = None, "not measured (fp8=False)"
    cc = tuple(torch.cuda.get_device_capability(dev))
    if fp8 and (cc < (8, 9) or not hasattr(torch, "_scaled_mm")):
        note = f"fp8 _scaled_mm needs sm_89+ and torch._scaled_mm, got sm_{cc[0]}{cc[1]}, torch {torch.__version__}"
    elif fp8:
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # cuBLASLt wants B column-major
        one = torch.ones((), device=dev, dtype=torch.float32)
        mm8 = lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        try:
            fp8_tflops = flops / time_cuda_events(mm8, **kw).median_us / 1e6
            note = "e4m3 x e4m3 -> bf16, tensorwise scales"
        except (RuntimeError, TypeError) as exc:  # an older torch or cuBLASLt without this path
            note = f"fp8 _scaled_mm failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    name = torch.cuda.get_device_name(dev)
    return Ceilings(name, cc, copy_tbps, bf16_tflops, fp8_tflops, copy_bytes, (m, n, k), note)


_CEILINGS: dict[tuple[int, bool], Ceilings] = {}


def ceilings(device: Device = None, *, fp8: bool = True) -> Ceilings:
    """Ceilings of ``device`` (default: current CUDA device), measured once per process."""
    dev = require_cuda("ceilings", device)
    key = (dev.index, fp8)
    if key not in _CEILINGS:
        _CEILINGS[key] = measure_ceilings(dev, fp8=fp8)
    return _CEILINGS[key]


# Cases, results, table -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One problem: ``bytes``/``flops`` are the minimum the op must move/do (formula in the caller).

    ``ceiling``: 'copy', 'bf16', 'fp8', or 'auto' (the bound whose floor time, bytes / copy rate or
    flops / bf16 rate, is larger; bytes alone -> copy, flops alone -> bf16).
    """

    name: str
    shape: Mapping[str, Any] = field(default_factory=dict, hash=False)
    bytes: int | None = None
    flops: int | None = None
    ceiling: str = "auto"

    def __post_init__(self) -> None:
        for what, v in (("bytes", self.bytes), ("flops", self.flops)):
            if v is not None and v < 0:
                raise ValueError(f"Case {self.name!r}: {what} must be >= 0 or None, got {v}")
        if self.ceiling not in ("auto", *CEILING_KINDS):
            raise ValueError(f"Case {self.name!r}: ceiling must be auto, copy, bf16 or fp8, got {self.ceiling!r}")
        object.__setattr__(self, "shape", dict(self.shape))

    @property
    def label(self) -> str:
        dims = " ".join(f"{k}={v}" for k, v in self.shape.items())
        return f"{self.name} {dims}".strip()


@dataclass(frozen=True)
class Result:
    """One implementation timed on one case; ``peer`` marks a baseline rather than ours."""

    case: Case
    impl: str
    timing: Timing
    peer: bool = False
    note: str = ""

    @property
    def time_us(self) -> float:
        return self.timing.median_us


def tbps(nbytes: int | None, time_us: float) -> float | None:
    """Achieved TB/s (1e12 bytes per second) for ``nbytes`` moved in ``time_us``."""
    return None if nbytes is None or time_us <= 0 else nbytes / time_us / 1e6


def tflops(flops: int | None, time_us: float) -> float | None:
    """Achieved TFLOP/s (1e12 operations per second) for ``flops`` done in ``time_us``."""
    return None if flops is None or time_us <= 0 else flops / time_us / 1e6


def relevant_ceiling(case: Case, ceil: Ceilings | None) -> str | None:
    """The ceiling kind a case is measured against (see ``Case.ceiling``), or None if it has none."""
    if case.ceiling != "auto":
        return case.ceiling
    if case.bytes is None and case.flops is None:
        return None
    if case.flops is None:
        return "copy"
    if case.bytes is None or ceil is None:
        return "bf16" if case.bytes is None else "copy"
    return "copy" if case.bytes / ceil.copy_tbps >= case.flops / ceil.bf16_tflops else "bf16"


def pct_of_ceiling(case: Case, time_us: float, ceil: Ceilings | None) -> float | None:
    """Achieved rate as % of the relevant measured ceiling; None without ceilings or a formula."""
    kind = relevant_ceiling(case, ceil)
    if kind is None or ceil is None:
        return None
    rate = ceil.rate(kind)
    achieved = tbps(case.bytes, time_us) if kind == "copy" else tflops(case.flops, time_us)
    if rate is None or achieved is None:
        return None
    return 100.0 * achieved / rate


@dataclass
class Table:
    """Rows of results; ratios compare each of our rows with every peer row of the same case."""

    title: str
    ceilings: Ceilings | None = None
    rows: list[Result] = field(default_factory=list)

    def add(self, case: Case, impl: str, timing: Timing, *, peer: bool = False, note: str = "") -> Result:
        if not isinstance(timing, Timing):
            raise TypeError(f"timing must be a Timing, got {type(timing).__name__}")
        row = Result(case, impl, timing, peer, note)
        self.rows.append(row)
        return row

    def peers(self) -> list[str]:
        """Names of peer implementations, in first-seen order."""
        return list(dict.fromkeys(r.impl for r in self.rows if r.peer))

    def ratios(self, row: Result) -> dict[str, float]:
        """``peer time / our time`` for each peer on ``row``'s case (> 1: ours is faster); {} for peers."""
        if row.peer:
            return {}
        return {p.impl: p.time_us / row.time_us for p in self.rows if p.peer and p.case == row.case and row.time_us > 0}

    def row_dict(self, row: Result) -> dict[str, Any]:
        """One row as JSON-ready data: inputs, then derived rates, % of ceiling and peer ratios."""
        c, t = row.case, row.timing
        d = {"case": c.name, "label": c.label, "shape": dict(c.shape), "impl": row.impl, "peer": row.peer}
        d |= {"time_us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us, "n": t.n, "method": t.method}
        d |= {"bytes": c.bytes, "flops": c.flops, "ceiling_kind": c.ceiling}
        d |= {"tbps": tbps(c.bytes, t.median_us), "tflops": tflops(c.flops, t.median_us)}
        d |= {"ceiling": relevant_ceiling(c, self.ceilings)}
        d |= {"pct_of_ceiling": pct_of_ceiling(c, t.median_us, self.ceilings), "ratios": self.ratios(row)}
        return d | {"note": row.note}

    # ---- text ----
    def _cells(self) -> tuple[list[str], list[list[str]]]:
        peers = self.peers()
        head = ["case", "impl", "us", "p10-p90", "TB/s", "TFLOP/s", "% ceil", *[f"vs {p}" for p in peers]]
        body = []
        for r in self.rows:
            d = self.row_dict(r)
            pct, ratio = d["pct_of_ceiling"], d["ratios"]
            cells = [r.case.label, r.impl + (" (peer)" if r.peer else ""), _fmt(r.time_us, 4)]
            cells += [f"{_fmt(r.timing.p10_us, 3)}-{_fmt(r.timing.p90_us, 3)}"]
            cells += ["-" if d["tbps"] is None else f"{d['tbps']:.2f}"]
            cells += ["-" if d["tflops"] is None else f"{d['tflops']:.1f}"]
            cells += ["-" if pct is None else f"{pct:.1f}% {d['ceiling']}"]
            body.append(cells + ["-" if p not in ratio else f"{ratio[p]:.2f}x" for p in peers])
        return head, body

    def render(self) -> str:
        """The table as aligned plain text (numbers right-aligned)."""
        head, body = self._cells()
        widths = [max(len(c) for c in col) for col in zip(head, *body)]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        out = [self.title, line(head), "  ".join("-" * w for w in widths)]
        out += [line(row) for row in body]
        if self.ceilings is not None:
            c = self.ceilings
            fp8 = "n/a" if c.fp8_tflops is None else f"{c.fp8_tflops:.0f}"
            out.append(
                f"ceilings on {c.device_name}: copy {c.copy_tbps:.2f} TB/s, bf16 {c.bf16_tflops:.0f} "
                f"TFLOP/s, fp8 {fp8} TFLOP/s; vs X = X time / our time (>1: ours faster)"
            )
        return "\n".join(out)

    def print(self, file: Any = None, *, use_rich: bool | None = None) -> None:
        """Print with rich when it is installed and ``file`` is a TTY, else as plain text."""
        file = sys.stdout if file is None else file
        if use_rich is None:
            use_rich = importlib.util.find_spec("rich") is not None and hasattr(file, "isatty") and file.isatty()
        if not use_rich:
            print(self.render(), file=file, flush=True)
            return
        from rich.console import Console
        from rich.table import Table as RichTable

        head, body = self._cells()
        rt = RichTable(title=self.title)
        for i, h in enumerate(head):
            rt.add_column(h, justify="left" if i < 2 else "right")
        for row in body:
            rt.add_row(*row)
        console = Console(file=file)
        console.print(rt)
        if self.ceilings is not None:
            console.print(self.render().splitlines()[-1])

    # ---- JSON ----
    def to_dict(
        self, *, argv: Sequence[str] | None = None, extra: Mapping | None = None, device: Device = None
    ) -> dict:
        """The report: schema, title, env (see ``environment``), ceilings, rows, extra."""
        ceil = None if self.ceilings is None else self.ceilings.to_dict()
        d = {"schema": SCHEMA, "title": self.title, "env": environment(device, argv=argv), "ceilings": ceil}
        return d | {"rows": [self.row_dict(r) for r in self.rows], "extra": dict(extra or {})}

    def write_json(self, path: str | os.PathLike, **kwargs: Any) -> dict[str, Any]:
        """Write ``to_dict(**kwargs)`` to ``path`` (parents created); returns what was written."""
        report = self.to_dict(**kwargs)
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")
        return report

    @classmethod
    def from_dict(cls, report: Mapping[str, Any]) -> Table:
        """Rebuild a table from ``to_dict``/``write_json`` output (derived columns are recomputed)."""
        check_report(report)
        ceil = None if report["ceilings"] is None else Ceilings.from_dict(report["ceilings"])
        table = cls(report["title"], ceil)
        for r in report["rows"]:
            case = Case(r["case"], r["shape"], r["bytes"], r["flops"], r["ceiling_kind"])
            timing = Timing(r["time_us"], r["p10_us"], r["p90_us"], r["n"], r["method"])
            table.add(case, r["impl"], timing, peer=r["peer"], note=r["note"])
        return table


_REPORT_KEYS = "schema title env ceilings rows extra".split()
_ENV_KEYS = "device device_name cc torch cuda cutlass_dsl triton python git_commit git_dirty date command"
_ROW_KEYS = "case shape impl peer time_us p10_us p90_us n method bytes flops ceiling_kind tbps tflops ratios note"


def check_report(report: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first key a report lacks (schema ``b12x-bench/1``)."""
    if report.get("schema") != SCHEMA:
        raise ValueError(f"report schema must be {SCHEMA!r}, got {report.get('schema')!r}")
    parts = [("report", report, _REPORT_KEYS), ("report env", report["env"], _ENV_KEYS.split())]
    parts += [(f"report row {i}", row, _ROW_KEYS.split()) for i, row in enumerate(report["rows"])]
    for what, d, keys in parts:
        missing = [k for k in keys if k not in d]
        if missing:
            raise ValueError(f"{what} lacks key {missing[0]!r}")


def load_report(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check a JSON report written by ``Table.write_json``."""
    report = json.loads(Path(path).read_text())
    check_report(report)
    return report


def _fmt(x: float, sig: int) -> str:
    return f"{x:.{sig}g}" if x < 10**sig else f"{x:.0f}"


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=_REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def environment(device: torch.device | str | None = None, *, argv: Sequence[str] | None = None) -> dict:
    """What a result depends on. The device copy of the tree may lack .git or carry a stale one:
    B12X_GIT_COMMIT, when set, wins over `git rev-parse HEAD`."""
    cuda = torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda")
    if cuda:
        dev = require_cuda("environment", device)
        name, cc = torch.cuda.get_device_name(dev), list(torch.cuda.get_device_capability(dev))
    else:
        dev, name, cc = torch.device("cpu"), platform.processor() or platform.machine(), None
    commit = os.environ.get("B12X_GIT_COMMIT") or _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    env = {"device": str(dev), "device_name": name, "cc": cc, "torch": torch.__version__, "cuda": torch.version.cuda}
    env |= {"cutlass_dsl": _dist_version("nvidia-cutlass-dsl"), "triton": _dist_version("triton")}
    env |= {
        "python": platform.python_version(),
        "git_commit": commit,
        "git_dirty": status if status is None else bool(status),
    }
    env |= {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    return env | {"command": shlex.join(sys.argv if argv is None else argv)}


# Command line --------------------------------------------------------------------------------------
QUICK_WARMUP, QUICK_ITERS = 3, 10


def standard_parser(description: str) -> argparse.ArgumentParser:
    """The flags every bench module shares; add family flags to the returned parser."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--json", metavar="PATH", default=None, help="write the JSON report to PATH")
    p.add_argument("--iters", type=int, default=50, help="timed iterations (samples) per case")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls before timing")
    p.add_argument("--quick", action="store_true", help=f"few shapes, at most {QUICK_ITERS} iterations: a smoke run")
    p.add_argument("--device", default="cuda", help="torch device to run on")
    timer_help = "CUDA events with L2 flushed per call, or CUDA graph replays"
    p.add_argument("--timer", choices=("events", "graph"), default="events", help=timer_help)
    p.add_argument("--no-peers", action="store_true", help="time only our implementations")
    return p


def add_calls_per_graph(parser: argparse.ArgumentParser) -> None:
    """--calls-per-graph N: the graph timer captures N back-to-back calls a graph and reports the time a
    call (a serving step's graph holds many kernels, so one call a graph adds a graph launch the op does
    not pay there); check it with `check_calls_per_graph`; `measure` reads it."""
    parser.add_argument(
        "--calls-per-graph", type=int, default=1, metavar="N",
        help="graph timer: N back-to-back calls in each captured graph, time per call",
    )  # fmt: skip


def check_calls_per_graph(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """parser.error unless --calls-per-graph is >= 1, and 1 unless the timer is the graph timer."""
    if args.calls_per_graph < 1:
        parser.error(f"--calls-per-graph must be >= 1, got {args.calls_per_graph}")
    if args.calls_per_graph > 1 and args.timer != "graph":
        parser.error(f"--calls-per-graph {args.calls_per_graph} needs --timer graph, got --timer {args.timer}")


def report_path(args: argparse.Namespace, default_name: str) -> str | None:
    """Where a bench writes its JSON report: --json, else $OUT/default_name when $OUT is set, else None."""
    if args.json:
        return args.json
    return str(Path(os.environ["OUT"]) / default_name) if os.environ.get("OUT") else None


def write_report(table: Table, args: argparse.Namespace, default_name: str, module: str, argv, device, extra) -> None:
    """The JSON report at `report_path` (nothing when there is none), with the command that reproduces
    it (`python -m module` + argv, or this process's arguments when argv is None)."""
    path = report_path(args, default_name)
    if path:
        cmd = ["python", "-m", module, *(sys.argv[1:] if argv is None else argv)]
        table.write_json(path, argv=cmd, device=device, extra=extra)
        print(f"wrote {path}")


def timing_kwargs(args: argparse.Namespace) -> dict[str, int]:
    """``warmup``/``iters`` from parsed flags, capped under --quick."""
    if args.iters < 1 or args.warmup < 0:
        raise ValueError(f"--iters must be >= 1 and --warmup >= 0, got {args.iters} and {args.warmup}")
    if args.quick:
        return {"warmup": min(args.warmup, QUICK_WARMUP), "iters": min(args.iters, QUICK_ITERS)}
    return {"warmup": args.warmup, "iters": args.iters}


def measure(fn: Fn, args: argparse.Namespace, **kwargs: Any) -> Timing:
    """Time ``fn`` with the clock ``--timer`` selects and the iteration counts of ``timing_kwargs``."""
    tk = timing_kwargs(args)
    if args.timer == "graph":
        kwargs.setdefault("calls_per_graph", getattr(args, "calls_per_graph", 1))  # --calls-per-graph, when parsed
        return time_graph_replay(fn, iters=tk["iters"], warmup=tk["warmup"], device=args.device, **kwargs)
    return time_cuda_events(fn, **tk, device=args.device, **kwargs)
