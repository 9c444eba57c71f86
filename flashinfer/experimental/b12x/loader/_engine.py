"""The read engine: byte-range planning, file readers and delivery of bytes into destination tensors.

A flush turns queued requests (a byte span of one file -> one destination) into chunks: spans sorted
by offset, merged where they overlap or nearly touch, cut at page-aligned offsets every `limit` bytes. Worker threads take chunks in file order,
read each with one system call into a bounce buffer from a ring, and deliver its pieces:

- "bytes": same dtype, contiguous destination -> one byte copy (async host-to-device from pinned
  memory on CUDA; the buffer is reused only after its copy event completed);
- "convert": contiguous destination of another dtype through a registered elementwise conversion,
  piece by piece (pieces of a tensor that is element-aligned in the file start on element boundaries);
- "staged": anything else (strided views, conversions cut mid-element) -> the whole span is gathered
  in a staging buffer, converted once when its last piece arrives.

Readers: "direct" = O_DIRECT, offsets and lengths widened to 4 KiB pages, page-aligned buffers, so the
page cache is bypassed (a checkpoint larger than RAM does not evict everything else); "buffered" =
plain pread (with CPU destinations the bytes land in the destination itself through preadv, no
bounce copy); "gds" = kvikio/cuFile reads into device buffers. os.preadv releases the GIL, so
Python threads keep several reads in flight.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ._format import TensorEntry
from .errors import CheckpointReadError

PAGE = 4096
IOV_MAX = 1000  # below the kernel's 1024 iovecs per call
READ_MODES = ("auto", "direct", "buffered", "gds")


@dataclass(eq=False)
class ReadRequest:
    """Bytes [begin, end) of `entry.file` -> `dst`. `kind` is fixed at planning (see module doc)."""

    entry: TensorEntry
    begin: int
    end: int
    dst: torch.Tensor
    src_dtype: torch.dtype
    convert: Callable | None  # None: same dtype byte copy
    view: tuple  # (shape, stride, element offset into the span) of the source
    kind: str = "bytes"
    unit: int = 1  # pieces are cut at multiples of this many bytes from `begin`
    pending: int = 0
    staging: torch.Tensor | None = None

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(eq=False)
class Piece:
    tag: object  # the ReadRequest (or, in a shared read, a (rank, index) pair)
    begin: int
    end: int


@dataclass(eq=False)
class Chunk:
    file: str
    begin: int
    end: int
    pieces: list = field(default_factory=list)
    owner: int = 0

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


def plan_chunks(spans, limit: int, max_gap: int) -> list[Chunk]:
    """spans: (file, begin, end, tag) -> chunks of at most `limit` bytes in (file, offset) order.

    Spans of a file are merged into covered intervals (overlaps, and gaps up to `max_gap` bytes,
    which are cheaper to read through than to seek over), intervals are cut at page-aligned offsets,
    and every span becomes one piece per chunk it meets. Overlapping spans (one tensor loaded twice,
    or requested by several ranks) are read once. Empty spans are dropped.
    """
    by_file: dict[str, list] = {}
    for span in spans:
        if span[1] < span[2]:
            by_file.setdefault(span[0], []).append(span)
    chunks: list[Chunk] = []
    for file in sorted(by_file):
        group = sorted(by_file[file], key=lambda s: (s[1], s[2]))
        intervals: list[list[int]] = []
        for _, begin, end, _ in group:
            if intervals and begin <= intervals[-1][1] + max_gap:
                intervals[-1][1] = max(intervals[-1][1], end)
            else:
                intervals.append([begin, end])
        file_chunks: list[Chunk] = []
        for begin, end in intervals:
            pos = begin
            while pos < end:
                cut = end if end - pos <= limit else (pos + limit) // PAGE * PAGE
                file_chunks.append(Chunk(file, pos, cut))
                pos = cut
        starts = [c.begin for c in file_chunks]
        for _, begin, end, tag in group:
            i = bisect.bisect_right(starts, begin) - 1
            while i < len(file_chunks) and file_chunks[i].begin < end:
                chunk = file_chunks[i]
                lo, hi = max(begin, chunk.begin), min(end, chunk.end)
                if lo < hi:
                    chunk.pieces.append(Piece(tag, lo, hi))
                i += 1
        chunks += file_chunks
    return chunks


def settle_requests(chunks: list[Chunk]) -> None:
    """Fix each request's delivery once its pieces are known.

    A conversion cut mid-element (a chunk boundary not on an element boundary of the span, only when
    the tensor itself is not element aligned in the file) falls back to staging; staged requests
    count their pieces so the last one to arrive converts.
    """
    for chunk in chunks:
        for piece in chunk.pieces:
            req = piece.tag
            if req.kind == "convert" and (piece.begin - req.begin) % req.unit:
                req.kind = "staged"
    for chunk in chunks:
        for piece in chunk.pieces:
            if piece.tag.kind == "staged":
                piece.tag.pending += 1


def memoryview_of(t: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's memory (no copy)."""
    n = t.numel() * t.element_size()
    if n == 0:
        return memoryview(bytearray(0))
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B")


def aligned_empty(nbytes: int, *, pin: bool, device=None) -> torch.Tensor:
    """uint8 buffer whose first byte is page aligned (O_DIRECT needs aligned addresses)."""
    if device is not None and torch.device(device).type == "cuda":
        return torch.empty(nbytes, dtype=torch.uint8, device=device)
    raw = torch.empty(nbytes + PAGE, dtype=torch.uint8, pin_memory=pin)
    skip = (-raw.data_ptr()) % PAGE
    return raw[skip : skip + nbytes]


class _Buffer:
    __slots__ = ("tensor", "view", "event")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor
        self.view = memoryview_of(tensor) if tensor.device.type == "cpu" else None
        self.event = None


@dataclass
class FileStats:
    mode: str = ""
    bytes: int = 0  # payload delivered to destinations
    bytes_read: int = 0  # read from disk (with page widening and merged gaps)
    reads: int = 0
    seconds: float = 0.0  # summed over threads
    ranges: list = field(default_factory=list)  # (begin, end) read, in this file


def _preadv_full(fd: int, views: list, offset: int) -> int:
    """preadv until the views are full or EOF; returns bytes read."""
    total, want = 0, sum(len(v) for v in views)
    while views:
        n = os.preadv(fd, views, offset + total)
        if n == 0:
            break
        total += n
        while views and n >= len(views[0]):
            n -= len(views[0])
            views = views[1:]
        if views and n:
            views = [views[0][n:], *views[1:]]
    assert total <= want
    return total


class ReadEngine:
    """Threads, bounce buffers and file handles of one session; reusable across flushes."""

    def __init__(self, device: torch.device, mode: str, io_threads: int, chunk_bytes: int):
        if mode not in READ_MODES:
            raise ValueError(f"read_mode must be one of {READ_MODES}, got {mode!r}")
        if io_threads < 1:
            raise ValueError(f"io_threads must be >= 1, got {io_threads}")
        if chunk_bytes < 4 * PAGE or chunk_bytes % PAGE:
            raise ValueError(f"chunk_bytes must be a multiple of {PAGE} and >= {4 * PAGE}, got {chunk_bytes}")
        self.device = device
        self.mode = mode
        self.io_threads = io_threads
        self.chunk_bytes = chunk_bytes
        self.limit = chunk_bytes - 2 * PAGE  # logical bytes per chunk; page widening fits the buffer
        self.max_gap = min(1 << 20, self.limit // 4)
        self.cuda = device.type == "cuda"
        self._buffers: list[_Buffer] = []
        self._fds: dict[tuple[str, str], int] = {}
        self._kvikio_files: dict = {}
        self._file_mode: dict[str, str] = {}
        self._lock = threading.Lock()

    # ----- files -----------------------------------------------------------------------------
    def file_mode(self, path: str) -> str:
        """The reader used for `path`: the session's mode, or for "auto" the best one that works."""
        mode = self._file_mode.get(path)
        if mode is not None:
            return mode
        mode = self.mode
        if mode == "auto":
            from ._capabilities import gds_available, o_direct_supported

            if self.cuda and gds_available():
                mode = "gds"
            else:
                mode = "direct" if o_direct_supported(path) else "buffered"
        self._file_mode[path] = mode
        return mode

    def _fd(self, path: str, mode: str) -> int:
        key = (path, mode)
        with self._lock:
            fd = self._fds.get(key)
            if fd is None:
                flags = os.O_RDONLY | (os.O_DIRECT if mode == "direct" else 0)
                try:
                    fd = os.open(path, flags)
                except OSError as exc:
                    hint = " (this filesystem refuses O_DIRECT; use read_mode='buffered')" if mode == "direct" else ""
                    raise CheckpointReadError(f"{path}: cannot open for {mode} reads: {exc}{hint}", file=path) from exc
                self._fds[key] = fd
            return fd

    def check_unchanged(self, path: str, size: int, mtime_ns: int) -> None:
        st = os.fstat(self._fd(path, "buffered"))
        if (st.st_size, st.st_mtime_ns) != (size, mtime_ns):
            raise CheckpointReadError(
                f"{path}: file changed since its header was read (size {size} -> {st.st_size}); reload the checkpoint",
                file=path,
            )

    # ----- buffers ---------------------------------------------------------------------------
    def _ensure_buffers(self, count: int, mode: str) -> None:
        gds = mode == "gds"
        while len(self._buffers) < count:
            if gds:
                t = aligned_empty(self.chunk_bytes, pin=False, device=self.device)
            else:
                t = aligned_empty(self.chunk_bytes, pin=self.cuda and torch.cuda.is_available())
            self._buffers.append(_Buffer(t))

    # ----- reading ---------------------------------------------------------------------------
    def read_chunk(self, chunk: Chunk, buf: _Buffer, stats: FileStats | None) -> int:
        """Read `chunk` into `buf`; returns the file offset of buf.tensor[0]."""
        mode = self.file_mode(chunk.file)
        t0 = time.perf_counter()
        if mode == "gds":
            base, got, need = self._read_gds(chunk, buf)
        else:
            if mode == "direct":
                base = chunk.begin - chunk.begin % PAGE
                length = -(-chunk.end // PAGE) * PAGE - base
            else:
                base, length = chunk.begin, chunk.nbytes
            need = chunk.end - base
            try:
                got = _preadv_full(self._fd(chunk.file, mode), [buf.view[:length]], base)
            except OSError as exc:
                if mode == "direct" and exc.errno == errno.EINVAL and self.mode == "auto":
                    self._file_mode[chunk.file] = "buffered"  # the filesystem refused an O_DIRECT read
                    return self.read_chunk(chunk, buf, stats)
                raise CheckpointReadError(
                    f"{chunk.file}: read of bytes [{chunk.begin}, {chunk.end}) failed: {exc}", file=chunk.file
                ) from exc
        if got < need:
            raise CheckpointReadError(
                f"{chunk.file}: file ended at byte {base + got}, expected data up to byte {chunk.end} "
                "(truncated after its header was read?)",
                file=chunk.file,
            )
        if stats is not None:
            with self._lock:
                stats.mode = mode
                stats.bytes_read += got
                stats.reads += 1
                stats.seconds += time.perf_counter() - t0
                stats.ranges.append((chunk.begin, chunk.end))
        return base

    def _read_gds(self, chunk: Chunk, buf: _Buffer):
        import kvikio

        with self._lock:
            f = self._kvikio_files.get(chunk.file)
            if f is None:
                f = self._kvikio_files[chunk.file] = kvikio.CuFile(chunk.file, "r")
        got = f.pread(buf.tensor[: chunk.nbytes], chunk.nbytes, chunk.begin).get()
        return chunk.begin, got, chunk.nbytes

    def scatter_read(self, chunk: Chunk, scratch: _Buffer, stats: FileStats | None) -> bool:
        """Buffered reads of same-dtype contiguous CPU destinations go straight into them (preadv).

        Returns False when the chunk does not qualify (overlaps, conversions, too many pieces).
        """
        if self.file_mode(chunk.file) != "buffered" or len(chunk.pieces) * 2 > IOV_MAX:
            return False
        views, pos = [], chunk.begin
        for piece in chunk.pieces:
            req = piece.tag
            if req.kind != "bytes" or req.dst.device.type != "cpu" or piece.begin < pos:
                return False
            if piece.begin > pos:
                views.append(scratch.view[: piece.begin - pos])
            dst = memoryview_of(req.dst)
            views.append(dst[piece.begin - req.begin : piece.end - req.begin])
            pos = piece.end
        t0 = time.perf_counter()
        try:
            got = _preadv_full(self._fd(chunk.file, "buffered"), views, chunk.begin)
        except OSError as exc:
            raise CheckpointReadError(
                f"{chunk.file}: read of bytes [{chunk.begin}, {chunk.end}) failed: {exc}", file=chunk.file
            ) from exc
        if got < chunk.nbytes:
            raise CheckpointReadError(
                f"{chunk.file}: file ended at byte {chunk.begin + got}, expected data up to byte {chunk.end}",
                file=chunk.file,
            )
        if stats is not None:
            with self._lock:
                stats.mode = "buffered"
                stats.bytes_read += got
                stats.reads += 1
                stats.seconds += time.perf_counter() - t0
                stats.ranges.append((chunk.begin, chunk.end))
        return True

    # ----- delivery --------------------------------------------------------------------------
    def deliver(self, req: ReadRequest, begin: int, end: int, src: torch.Tensor, base: int) -> None:
        """Bytes [begin, end) of req's span, found in `src` (uint8) at file offset `base`, -> req.dst."""
        part = src[begin - base : end - base]
        lo, hi = begin - req.begin, end - req.begin
        if req.kind == "bytes":
            req.dst.view(-1).view(torch.uint8)[lo:hi].copy_(part, non_blocking=True)
        elif req.kind == "convert":
            size = req.src_dtype.itemsize
            if (begin - base) % size:  # an unaligned start cannot be viewed as the wider dtype
                part = part.clone()
            req.convert(req.dst.view(-1)[lo // size : hi // size], part.view(req.src_dtype))
        else:
            with self._lock:
                if req.staging is None:
                    pin = req.dst.device.type == "cuda" and torch.cuda.is_available()
                    req.staging = aligned_empty(req.nbytes, pin=pin)
            req.staging[lo:hi].copy_(part)
            with self._lock:
                req.pending -= 1
                last = req.pending == 0
            if last:
                shape, stride, offset = req.view
                typed = req.staging.view(req.src_dtype)
                whole = typed.as_strided(shape, stride, typed.storage_offset() + offset)  # offset is absolute
                req.convert(req.dst, whole)

    # ----- the pool --------------------------------------------------------------------------
    def run(
        self, chunks: list[Chunk], files: dict[str, FileStats], progress=None, deliver=None, count_payload=True
    ) -> None:
        """Read and deliver every chunk on `io_threads` threads; re-raises the first failure."""
        if not chunks:
            return
        modes = {self.file_mode(c.file) for c in chunks}
        nthreads = min(self.io_threads, len(chunks))
        self._ensure_buffers(nthreads + 2 if nthreads > 1 else 1, "gds" if "gds" in modes else "host")
        free: queue.SimpleQueue = queue.SimpleQueue()
        for b in self._buffers:
            free.put(b)
        scatter = deliver is None  # reading straight into destinations bypasses a custom deliver
        deliver = deliver or self._deliver_chunk
        cursor = iter(chunks)
        cursor_lock = threading.Lock()
        errors: list[BaseException] = []
        streams = []
        main_stream = torch.cuda.current_stream(self.device) if self.cuda else None

        def worker():
            stream = None
            if self.cuda:
                stream = torch.cuda.Stream(self.device)
                stream.wait_stream(main_stream)  # destinations were allocated/zeroed on the caller's stream
                with self._lock:
                    streams.append(stream)
            ctx = torch.cuda.stream(stream) if stream is not None else _nullcontext()
            with ctx:
                while not errors:
                    with cursor_lock:
                        chunk = next(cursor, None)
                    if chunk is None:
                        return
                    buf = free.get()
                    try:
                        if buf.event is not None:
                            buf.event.synchronize()  # its previous async copy has landed
                            buf.event = None
                        with self._lock:
                            stats = files.setdefault(chunk.file, FileStats())
                        if not (scatter and self.scatter_read(chunk, buf, stats)):
                            base = self.read_chunk(chunk, buf, stats)
                            deliver(chunk, buf.tensor, base)
                            if stream is not None:
                                buf.event = torch.cuda.Event()
                                buf.event.record(stream)
                        if stats is not None and count_payload:
                            with self._lock:
                                stats.bytes += sum(p.end - p.begin for p in chunk.pieces)
                        if progress is not None:
                            progress(chunk)
                    except BaseException as exc:  # noqa: BLE001 - re-raised by run() on the caller's thread
                        errors.append(_name_tensors(exc, chunk))
                        return
                    finally:
                        free.put(buf)

        threads = [threading.Thread(target=worker, name=f"b12x-loader-{i}", daemon=True) for i in range(nthreads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for stream in streams:
            stream.synchronize()
        for b in self._buffers:
            b.event = None
        if errors:
            raise errors[0]

    def _deliver_chunk(self, chunk: Chunk, src: torch.Tensor, base: int) -> None:
        for piece in chunk.pieces:
            self.deliver(piece.tag, piece.begin, piece.end, src, base)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        for f in self._kvikio_files.values():
            f.close()
        self._kvikio_files.clear()
        self._buffers.clear()


def _name_tensors(exc: BaseException, chunk: Chunk) -> BaseException:
    """Add the tensors a failed chunk carried to a read error that names only the file."""
    if not isinstance(exc, CheckpointReadError) or exc.tensor is not None:
        return exc
    names = [p.tag.entry.name for p in chunk.pieces if isinstance(p.tag, ReadRequest)]
    if not names:
        return exc
    shown = ", ".join(repr(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    named = CheckpointReadError(f"{exc} while loading tensor(s) {shown}", file=exc.file, tensor=names[0])
    named.__cause__ = exc.__cause__
    return named


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
