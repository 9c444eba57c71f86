"""DirectWeightSession: enumerate a safetensors checkpoint as meta tensors, read bytes straight into
prepared destinations.

    with DirectWeightSession("cuda") as s:
        for name, t in s.weights("/models/qwen", needs_values={"lm_head.weight_scale"}):
            param = params.get(name)      # t is a meta tensor: shape and dtype, no data
            if param is not None:
                s.session(param, t)       # queued; a slice or transpose of t loads only its bytes
    # leaving the block flushes: every queued read lands, in file order, on io_threads threads

Headers are validated for the whole checkpoint before the first name is yielded, so a malformed
checkpoint raises CheckpointFormatError and loads nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch

from .._lib.arch import resolve_device
from ._checkpoint import Checkpoint, HeaderCache, resolve_checkpoint
from ._engine import FileStats, ReadEngine, ReadRequest, plan_chunks, settle_requests
from ._format import TensorEntry
from .conversions import cast, find_conversion


@dataclass(frozen=True)
class LoadStats:
    """What a session has read so far. `bytes` is payload delivered; `bytes_read` what came off disk."""

    read_mode: str
    tensors: int
    bytes: int
    bytes_read: int
    seconds: float  # wall time spent in flushes (and needs_values reads)
    files: dict = field(default_factory=dict, hash=False)  # path -> {mode, bytes, bytes_read, reads, seconds, ranges}

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "read_mode": self.read_mode,
            "tensors": self.tensors,
            "bytes": self.bytes,
            "bytes_read": self.bytes_read,
            "seconds": self.seconds,
            "gbps": self.gbps,
            "files": self.files,
        }


def _matcher(spec) -> Callable[[str], bool]:
    if callable(spec):
        return spec
    names = {spec} if isinstance(spec, str) else set(spec or ())
    return names.__contains__


class _Known:
    __slots__ = ("tensor", "entry", "materialized")

    def __init__(self, tensor, entry, materialized):
        self.tensor, self.entry, self.materialized = tensor, entry, materialized


class DirectWeightSession:
    """Reads safetensors checkpoints into caller-owned tensors with O_DIRECT, pinned bounce buffers
    and overlapped host-to-device copies.

    device: where destinations live (CPU or one CUDA device). io_threads: reads in flight.
    read_mode: "auto" (gds when kvikio/cuFile is in GDS mode, else direct where the filesystem takes
    O_DIRECT, else buffered), "direct", "buffered" or "gds". shared_read_group: a SharedReadGroup whose
    ranks split the bytes (every flush is then collective). display: a CheckpointDisplay for progress.
    chunk_bytes: size of one read / bounce buffer.
    """

    def __init__(
        self,
        device=None,
        io_threads: int = 8,
        *,
        shared_read_group=None,
        read_mode: str = "auto",
        chunk_bytes: int = 16 << 20,
        display=None,
    ):
        self.device = resolve_device(device if device is not None else "cpu")
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device}")
        if read_mode == "gds" and self.device.type != "cuda":
            raise ValueError("read_mode='gds' needs a CUDA device")
        self.read_mode = read_mode
        self.engine = ReadEngine(self.device, read_mode, io_threads, chunk_bytes)
        self.group = shared_read_group
        self.display = display
        self._headers = HeaderCache()
        self._known: dict[int, _Known] = {}
        self._names: dict[str, TensorEntry] = {}
        self._pending: list[ReadRequest] = []
        self._files: dict[str, FileStats] = {}
        self._file_ids: dict[str, tuple[int, int]] = {}
        self._tensors = 0
        self._seconds = 0.0
        self._lock = threading.Lock()
        self._started = False
        self._closed = False

    # ----- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> DirectWeightSession:
        self._start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.finish()
        else:
            self._abort(exc)
        return False

    def _start(self) -> None:
        if not self._started:
            self._started = True
            if self.group is not None:
                self.group.start(self)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this DirectWeightSession is finished; open a new one")

    def finish(self) -> LoadStats:
        """Flush, release buffers and file handles (and leave the shared group); returns the stats."""
        if self._closed:
            return self.stats()
        self._start()
        try:
            self.flush()
            if self.group is not None:
                self.group.finish(self)
        finally:
            if self.group is not None and self.group._failed:
                self.group.finish(self)  # a failed group only releases its buffers
            self._close()
        stats = self.stats()
        if self.display is not None:
            self.display.complete(stats)
        return stats

    def _abort(self, exc: BaseException) -> None:
        """Leave without reading; in a shared group, tell the other ranks so they fail too."""
        try:
            if self.group is not None and self._started and not self._closed:
                self.group.abort(self, exc)
        finally:
            self._pending.clear()
            self._close()
            if self.display is not None:
                self.display.stop()

    def _close(self) -> None:
        self._closed = True
        self.engine.close()
        self._known.clear()
        self._pending.clear()

    # ----- enumeration -----------------------------------------------------------------------
    def checkpoint(self, files, index_path=None) -> Checkpoint:
        """Validate a checkpoint's headers and index (cached per file identity)."""
        return resolve_checkpoint(files, index_path, self._headers)

    def weights(
        self,
        files,
        prefixes: Iterable[str] | None = None,
        prefix: str | None = None,
        index_path=None,
        needs_values=(),
        skip=(),
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield (name, tensor) for the checkpoint's tensors in file and offset order.

        files: a directory (its *.safetensors.index.json, else every *.safetensors), an index json,
        one .safetensors file or a list of them. prefixes: only names starting with one of these.
        prefix: only names starting with it, yielded with it removed. skip / needs_values: names (or a
        predicate on the full name) to leave out / to yield with values on the session's device
        (read before the file's first tensor is yielded; meant for small tensors such as scales).
        Every other tensor is a meta tensor: pass it (or a view of it) to `session(dst, t)`.
        """
        self._check_open()
        self._start()
        ckpt = self.checkpoint(files, index_path)
        skipped, wanted = _matcher(skip), _matcher(needs_values)
        prefixes = tuple(prefixes) if prefixes is not None else None
        if self.display is not None:
            self.display.source(str(files), total_bytes=ckpt.nbytes, files=len(ckpt.files))
        for shard in ckpt.files:
            self._file_ids[shard.path] = (shard.size, shard.mtime_ns)
            self._files.setdefault(shard.path, FileStats())
            chosen = []
            for entry in shard.entries:
                name = entry.name
                if skipped(name) or (prefixes is not None and not name.startswith(prefixes)):
                    continue
                if prefix is not None:
                    if not name.startswith(prefix):
                        continue
                    name = name[len(prefix) :]
                chosen.append((name, entry))
            values = self._read_values([e for _, e in chosen if wanted(e.name)])
            for name, entry in chosen:
                self._names[entry.name] = entry
                tensor = values.get(entry.name)
                if tensor is None:
                    tensor = torch.empty(entry.torch_shape, dtype=entry.torch_dtype(), device="meta")
                self._known[tensor.untyped_storage()._cdata] = _Known(tensor, entry, entry.name in values)
                yield name, tensor

    def _read_values(self, entries: list[TensorEntry]) -> dict[str, torch.Tensor]:
        if not entries:
            return {}
        out = {e.name: torch.empty(e.torch_shape, dtype=e.torch_dtype(), device=self.device) for e in entries}
        requests = []
        for e in entries:
            whole = torch.empty(e.torch_shape, dtype=e.torch_dtype(), device="meta")
            requests.append(self._request(out[e.name], whole, e))
        self._run_local(requests)
        return out

    # ----- queueing --------------------------------------------------------------------------
    def session(self, dst: torch.Tensor, src) -> bool:
        """Queue a read of checkpoint tensor `src` into `dst`; True when queued (or copied).

        src: a tensor yielded by `weights()` or any view of it (slice, transpose, dtype view: only the
        bytes it covers are read), or a checkpoint tensor name. Returns False, doing nothing, for a
        tensor this session did not yield (copy it yourself). dst: same shape, on the session's
        device or the CPU, same dtype or one reachable by a registered conversion. Values are there
        after `flush()` / `finish()` / leaving the `with` block.
        """
        self._check_open()
        if isinstance(src, str):
            entry = self._names.get(src)
            if entry is None:
                raise KeyError(f"tensor {src!r} was not yielded by weights() in this session")
            src = torch.empty(entry.torch_shape, dtype=entry.torch_dtype(), device="meta")
            known = _Known(src, entry, False)
        elif isinstance(src, torch.Tensor):
            known = self._known.get(src.untyped_storage()._cdata)
            if known is None:
                return False
        else:
            raise TypeError(f"src must be a tensor yielded by weights() or a name, got {type(src).__name__}")
        entry = known.entry
        if not isinstance(dst, torch.Tensor):
            raise TypeError(f"dst for {entry.name!r} must be a torch.Tensor, got {type(dst).__name__}")
        if known.materialized:
            _check_dst(dst, src, entry, self.device)
            conv = cast if dst.dtype == src.dtype else _conversion(src.dtype, dst.dtype, entry)
            conv(dst, src)
            return True
        request = self._request(dst, src, entry)
        if request is not None:
            with self._lock:
                self._pending.append(request)
                self._tensors += 1
        return True

    read_into = session

    def _request(self, dst: torch.Tensor, src: torch.Tensor, entry: TensorEntry) -> ReadRequest | None:
        _check_dst(dst, src, entry, self.device)
        size = src.dtype.itemsize
        if src.numel() == 0:
            return None
        if any(st < 0 for st in src.stride()):
            raise ValueError(f"{entry.file}: tensor {entry.name!r}: views with negative strides are not supported")
        lo = src.storage_offset()
        hi = lo + 1 + sum((n - 1) * st for n, st in zip(src.shape, src.stride()))
        if hi * size > entry.nbytes:
            raise ValueError(
                f"{entry.file}: tensor {entry.name!r} ({entry.describe()}, {entry.nbytes} bytes): the view "
                f"reaches byte {hi * size}, past the tensor"
            )
        same = dst.dtype == src.dtype
        convert = None if same else _conversion(src.dtype, dst.dtype, entry)
        dense = src.is_contiguous() and hi - lo == src.numel() and dst.is_contiguous()
        view = (tuple(src.shape), tuple(src.stride()), 0)  # the span starts at the view's first element
        if dense:
            kind, unit = ("bytes", 1) if same else ("convert", size)
        else:
            kind, unit = "staged", 1
            convert = convert or cast
        return ReadRequest(
            entry, entry.begin + lo * size, entry.begin + hi * size, dst, src.dtype, convert, view, kind, unit
        )

    # ----- reading ---------------------------------------------------------------------------
    def flush(self) -> None:
        """Read every queued request; returns when all destinations hold their values.

        In a shared read group this is collective: every rank must call it the same number of times.
        """
        self._check_open()
        self._start()
        pending, self._pending = self._pending, []
        if self.group is not None:
            t0 = time.perf_counter()
            self.group.read(self, pending)
            self._seconds += time.perf_counter() - t0
        else:
            self._run_local(pending)

    def _run_local(self, requests: list[ReadRequest]) -> None:
        requests = [r for r in requests if r is not None]
        if not requests:
            return
        t0 = time.perf_counter()
        chunks = self.plan(requests)
        for path in {c.file for c in chunks}:
            self.check_file(path)
        if self.display is not None:
            self.display.phase("reading")
        self.engine.run(chunks, self._files, progress=self._progress)
        self._seconds += time.perf_counter() - t0

    def plan(self, requests: list[ReadRequest]):
        chunks = plan_chunks(
            [(r.entry.file, r.begin, r.end, r) for r in requests], self.engine.limit, self.engine.max_gap
        )
        settle_requests(chunks)
        return chunks

    def check_file(self, path: str) -> None:
        ident = self._file_ids.get(path)
        if ident is not None:
            self.engine.check_unchanged(path, *ident)

    def _progress(self, chunk) -> None:
        if self.display is not None:
            self.display.advance(sum(p.end - p.begin for p in chunk.pieces), file=chunk.file)

    def file_stats(self, path: str) -> FileStats:
        return self._files.setdefault(path, FileStats())

    def stats(self) -> LoadStats:
        files = {
            path: {
                "mode": fs.mode,
                "bytes": fs.bytes,
                "bytes_read": fs.bytes_read,
                "reads": fs.reads,
                "seconds": fs.seconds,
                "ranges": list(fs.ranges),
            }
            for path, fs in self._files.items()
        }
        return LoadStats(
            self.read_mode,
            self._tensors,
            sum(f["bytes"] for f in files.values()),
            sum(f["bytes_read"] for f in files.values()),
            self._seconds,
            files,
        )


def _conversion(src_dtype, dst_dtype, entry: TensorEntry):
    fn = find_conversion(src_dtype, dst_dtype)
    if fn is None:
        raise TypeError(
            f"{entry.file}: tensor {entry.name!r} ({entry.describe()}): no conversion registered from "
            f"{src_dtype} to {dst_dtype} (register one with b12x.loader.register_conversion)"
        )
    return fn


def _check_dst(dst: torch.Tensor, src: torch.Tensor, entry: TensorEntry, device: torch.device) -> None:
    where = f"{entry.file}: tensor {entry.name!r} ({entry.describe()})"
    if tuple(dst.shape) != tuple(src.shape):
        raise ValueError(f"{where}: destination shape {list(dst.shape)} != source shape {list(src.shape)}")
    if dst.device.type == "cpu":
        return
    if dst.device != device:
        raise ValueError(f"{where}: destination is on {dst.device}; this session loads to {device} or cpu")


def checkpoint_files(files, index_path=None) -> list[str]:
    """The shard paths of a checkpoint (validated), e.g. for dropping them from the page cache."""
    return [f.path for f in resolve_checkpoint(files, index_path).files]
