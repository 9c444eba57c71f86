"""Compile progress: one stderr line per compile or disk load, and a progress bar for many jobs.

`B12X_PRINT_COMPILE_PROGRESS=1` turns the lines on:

    [b12x] compile gemm.blockscaled dtype=bfloat16 n=4096 (sm_120a) 1.23s (total 4.56s)
    [b12x] load gemm.blockscaled dtype=bfloat16 n=4096 (sm_120a) 0.01s (total 0.02s)

`total` is the running sum of that event's seconds in this process, so the last line says what
compiling (or loading) cost overall. `progress_bar` serves PreparationSession: a rich bar on a
terminal, plain lines otherwise (logs, CI, worker pipes). Stdlib only at import time.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

_lock = threading.Lock()
_totals: dict[str, float] = {}


def enabled() -> bool:
    return os.environ.get("B12X_PRINT_COMPILE_PROGRESS", "0").lower() not in ("", "0", "false", "no", "off")


def report(event: str, op: str, summary: str, arch: str, seconds: float) -> None:
    """Record one compile/load and print its line when progress printing is on."""
    with _lock:
        total = _totals.get(event, 0.0) + seconds
        _totals[event] = total
    if enabled():
        detail = f" {summary}" if summary else ""
        print(f"[b12x] {event} {op}{detail} ({arch}) {seconds:.2f}s (total {total:.2f}s)", file=sys.stderr, flush=True)


def note(message: str) -> None:
    """A free-form progress line (cache repairs, lock waits), shown only when progress is on."""
    if enabled():
        print(f"[b12x] {message}", file=sys.stderr, flush=True)


def totals() -> dict[str, float]:
    """Seconds spent per event ("compile", "load") in this process."""
    with _lock:
        return dict(_totals)


class _PlainBar:
    """Progress as lines: one per advance, for logs and non-terminal stderr."""

    def __init__(self, total: int, description: str, stream) -> None:
        self.total, self.description, self.stream, self.done = total, description, stream, 0

    def advance(self, n: int = 1, note: str | None = None) -> None:
        self.done += n
        tail = f" {note}" if note else ""
        print(f"[b12x] {self.description} {self.done}/{self.total}{tail}", file=self.stream, flush=True)


class _RichBar:
    def __init__(self, progress, task) -> None:
        self._progress, self._task = progress, task

    def advance(self, n: int = 1, note: str | None = None) -> None:
        if note:
            self._progress.update(self._task, advance=n, note=note)
        else:
            self._progress.update(self._task, advance=n)


@contextlib.contextmanager
def progress_bar(total: int, description: str, *, stream=None):
    """Yield an object with `advance(n=1, note=None)`, drawn as a rich bar on a TTY.

    Falls back to plain lines when `stream` (default stderr) is not a terminal or rich is missing.
    """
    stream = sys.stderr if stream is None else stream
    use_rich = bool(getattr(stream, "isatty", lambda: False)())
    if use_rich:
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:
            use_rich = False
    if not use_rich:
        yield _PlainBar(total, description, stream)
        return
    columns = (
        TextColumn("[b12x] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
    )
    with Progress(*columns, console=Console(file=stream), transient=False) as progress:
        task = progress.add_task(description, total=total, note="")
        yield _RichBar(progress, task)
