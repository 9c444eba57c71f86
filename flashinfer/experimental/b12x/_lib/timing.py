"""Per-kernel device time (`B12X_TIMING=1`): CUDA events around launches, aggregated per name.

Events are recorded on `torch.cuda.current_stream()` around each timed launch and resolved lazily
(when a summary is asked for, or when many are pending), so timing adds no host sync per launch.
Nothing is recorded while a CUDA graph is being captured: an event recorded in capture becomes a
graph node, and its elapsed time would be meaningless (and `elapsed_time` on it raises).

Kernels resolved by `_lib.compile.kernel` (cute and triton backends) are wrapped automatically when
`B12X_TIMING` is on at the time they are resolved; other launches can use `timed(name)`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from dataclasses import dataclass

_lock = threading.Lock()
_pending: list[tuple[str, object, object]] = []  # (name, start event, end event)
_stats: dict[str, list[float]] = {}  # name -> [count, total_ms, min_ms, max_ms]
_atexit_registered = False
_MAX_PENDING = 4096  # resolve completed pairs past this many, so a long run keeps memory flat


def enabled() -> bool:
    return os.environ.get("B12X_TIMING", "0").lower() not in ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class KernelTime:
    name: str
    count: int
    total_ms: float
    min_ms: float
    max_ms: float

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.count if self.count else 0.0


def _can_record() -> bool:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    return not torch.cuda.is_current_stream_capturing()


def _add(name: str, ms: float) -> None:
    s = _stats.get(name)
    if s is None:
        _stats[name] = [1, ms, ms, ms]
    else:
        s[0] += 1
        s[1] += ms
        s[2] = min(s[2], ms)
        s[3] = max(s[3], ms)


def _resolve(block: bool) -> None:
    """Move finished event pairs into the stats (all of them, waiting, when `block`)."""
    global _pending
    keep = []
    for name, start, end in _pending:
        if block:
            end.synchronize()
        elif not end.query():
            keep.append((name, start, end))
            continue
        _add(name, start.elapsed_time(end))
    _pending = keep


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        _atexit_registered = True
        atexit.register(_print_at_exit)


def _print_at_exit() -> None:
    try:
        if _pending or _stats:
            print_summary()
    except Exception:  # the CUDA context may already be gone at interpreter exit
        pass


@contextlib.contextmanager
def timed(name: str):
    """Time the launches inside the block on the current stream under `name` (when enabled)."""
    if not enabled() or not _can_record():
        yield
        return
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    try:
        yield
    finally:
        end.record()
        with _lock:
            _pending.append((name, start, end))
            _register_atexit()
            if len(_pending) > _MAX_PENDING:
                _resolve(block=False)


class _Timed:
    """A launcher that times each call; other attributes reach the wrapped object."""

    __slots__ = ("_fn", "_name")

    def __init__(self, name: str, fn) -> None:
        self._fn, self._name = fn, name

    def __call__(self, *args, **kwargs):
        with timed(self._name):
            return self._fn(*args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._fn, attr)

    def __repr__(self) -> str:
        return f"<timed {self._name}: {self._fn!r}>"


def instrument(name: str, fn):
    """`fn` wrapped to time every call under `name` when B12X_TIMING is on, else `fn` itself."""
    return _Timed(name, fn) if enabled() else fn


def summary() -> dict[str, KernelTime]:
    """Aggregated device time per name (waits for launches still in flight)."""
    with _lock:
        _resolve(block=True)
        return {name: KernelTime(name, int(s[0]), s[1], s[2], s[3]) for name, s in _stats.items()}


def format_summary(times: dict[str, KernelTime] | None = None) -> str:
    times = summary() if times is None else times
    if not times:
        return "[b12x] timing: no kernel launches recorded"
    rows = sorted(times.values(), key=lambda t: t.total_ms, reverse=True)
    width = max(len(t.name) for t in rows)
    lines = [f"[b12x] timing ({len(rows)} kernels, device ms)"]
    lines.append(f"  {'kernel'.ljust(width)}  {'count':>7}  {'total':>10}  {'mean':>9}  {'min':>9}  {'max':>9}")
    for t in rows:
        lines.append(
            f"  {t.name.ljust(width)}  {t.count:>7}  {t.total_ms:>10.3f}  {t.mean_ms:>9.4f}  "
            f"{t.min_ms:>9.4f}  {t.max_ms:>9.4f}"
        )
    return "\n".join(lines)


def print_summary(file=None) -> None:
    print(format_summary(), file=sys.stderr if file is None else file, flush=True)


def reset() -> None:
    """Forget every recorded launch (pending events are dropped unread)."""
    global _pending
    with _lock:
        _pending = []
        _stats.clear()


def seconds_per_run(fn, warmup: int = 3, iters: int = 20) -> float:
    """Mean device seconds of `fn()` on the current stream (CUDA events; the ops' Plan.measure for autotune)."""
    import torch

    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters
