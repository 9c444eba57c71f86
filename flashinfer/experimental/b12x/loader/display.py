"""CheckpointDisplay: progress of a checkpoint load (files, bytes, GB/s, phase).

A rich live bar on a terminal, plain progress lines otherwise (logs, CI), nothing when disabled.
Thread-safe: the session's reader threads call `advance`.
"""

from __future__ import annotations

import os
import sys
import threading
import time


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


class CheckpointDisplay:
    """enabled: None -> on unless B12X_LOADER_PROGRESS=0. stream: default sys.stderr.

    interval: seconds between plain progress lines (phase changes and completion always print).
    """

    def __init__(self, enabled: bool | None = None, stream=None, *, interval: float = 2.0):
        if enabled is None:
            enabled = os.environ.get("B12X_LOADER_PROGRESS", "1") != "0"
        self.enabled = bool(enabled)
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        isatty = getattr(self.stream, "isatty", None)
        self.live = self.enabled and bool(isatty and isatty())
        self._lock = threading.Lock()
        self._progress = None
        self._task = None
        self._reset()

    def _reset(self) -> None:
        self.description = ""
        self.total_bytes = 0
        self.total_files = 0
        self.done_bytes = 0
        self.files_seen: dict[str, int] = {}
        self.current_file = ""
        self.current_phase = ""
        self._t0 = None
        self._last_line = 0.0

    # ----- events ----------------------------------------------------------------------------
    def source(self, description: str, total_bytes: int | None = None, files: int | None = None) -> None:
        """A checkpoint starts: what it is, how many bytes and files it holds."""
        if not self.enabled:
            return
        with self._lock:
            self.description = description
            self.total_bytes += total_bytes or 0
            self.total_files += files or 0
            self.current_phase = self.current_phase or "headers"
        self._emit(force=True)

    def file(self, path: str, nbytes: int | None = None) -> None:
        """A file starts being read."""
        if not self.enabled:
            return
        with self._lock:
            self.current_file = os.path.basename(path)
            self.files_seen.setdefault(path, 0)
        self._emit()

    def advance(self, nbytes: int, file: str | None = None) -> None:
        """`nbytes` more bytes landed (from `file`)."""
        if not self.enabled:
            return
        with self._lock:
            if self._t0 is None:
                self._t0 = time.perf_counter()
            self.done_bytes += nbytes
            if file is not None:
                self.files_seen[file] = self.files_seen.get(file, 0) + nbytes
                self.current_file = os.path.basename(file)
        self._emit()

    def phase(self, name: str) -> None:
        """headers, reading, exchange, done, ..."""
        if not self.enabled:
            return
        with self._lock:
            changed = name != self.current_phase
            self.current_phase = name
        self._emit(force=changed)

    def complete(self, stats=None) -> None:
        """The load finished; print the summary line (stats: a LoadStats, optional)."""
        if not self.enabled:
            return
        with self._lock:
            self.current_phase = "done"
            if stats is not None:
                self.done_bytes = max(self.done_bytes, stats.bytes)
        self._emit(force=True, stats=stats)
        self.stop()

    def stop(self) -> None:
        """Tear the live view down (idempotent)."""
        with self._lock:
            progress, self._progress = self._progress, None
        if progress is not None:
            progress.stop()

    # ----- rendering -------------------------------------------------------------------------
    def rate(self) -> float:
        if self._t0 is None:
            return 0.0
        dt = time.perf_counter() - self._t0
        return self.done_bytes / dt / 1e9 if dt > 0 else 0.0

    def line(self, stats=None) -> str:
        total = f"/{_gb(self.total_bytes)}" if self.total_bytes else ""
        pct = f" ({100 * self.done_bytes / self.total_bytes:.0f}%)" if self.total_bytes else ""
        files = f", files {len(self.files_seen)}/{self.total_files}" if self.total_files else ""
        gbps = stats.gbps if stats is not None else self.rate()
        return (
            f"b12x.loader [{self.current_phase or 'idle'}] {self.description}: "
            f"{_gb(self.done_bytes)}{total}{pct} at {gbps:.2f} GB/s{files}"
        )

    def _emit(self, force: bool = False, stats=None) -> None:
        if self.live:
            self._render_live(stats)
            return
        now = time.perf_counter()
        with self._lock:
            if not force and now - self._last_line < self.interval:
                return
            self._last_line = now
            text = self.line(stats)
        print(text, file=self.stream, flush=True)

    def _render_live(self, stats) -> None:
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        with self._lock:
            if self._progress is None:
                self._progress = Progress(
                    TextColumn("[bold]{task.description}"),
                    BarColumn(),
                    DownloadColumn(),
                    TransferSpeedColumn(),
                    TextColumn("{task.fields[detail]}"),
                    console=Console(file=self.stream),
                    transient=False,
                )
                self._task = self._progress.add_task("b12x.loader", total=self.total_bytes or None, detail="")
                self._progress.start()
            files = f"files {len(self.files_seen)}/{self.total_files}" if self.total_files else ""
            self._progress.update(
                self._task,
                description=escape(f"b12x.loader [{self.current_phase}]"),
                total=self.total_bytes or None,
                completed=self.done_bytes,
                detail=f"{files} {self.current_file}".strip(),
            )
