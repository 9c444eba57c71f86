"""SharedReadGroup: ranks on one host read each checkpoint byte from disk once, then exchange.

Every rank queues its own reads (all tensors when replicated, a slice when sharded). On flush the
ranks gather their byte spans, plan the same chunks over the union (so a byte two ranks want is one
chunk), and split the chunks into contiguous runs by bytes: rank r reads the r-th run. Then rounds:
each rank reads its next `io_threads` chunks (in parallel) into exchange slots, the ranks agree that
every read succeeded, and every chunk a peer needs moves over the transport:

- "ipc" (CUDA devices): slots are one device buffer per rank shared through CUDA IPC handles; a rank
  copies what it needs straight from its peers' slots (NVLink / PCIe peer-to-peer).
- "broadcast": a torch.distributed broadcast per chunk from its reader over the group's backend
  (gloo: host buffers, so it runs on CPU-only CI; nccl: device buffers).

Failure on one rank fails all: every phase ends in an all-gather of each rank's status, and a rank
that leaves its session through an exception tells the others in place of its next flush; all ranks
raise SharedReadError naming the failed rank. Every flush is collective.
"""

from __future__ import annotations

import socket

import torch
import torch.distributed as dist

from ._engine import plan_chunks, settle_requests
from .errors import SharedReadError

TRANSPORTS = ("auto", "ipc", "broadcast")


def _status(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class SharedReadGroup:
    """process_group: a torch.distributed group of ranks on one host (None: the default group).

    device: where this rank's destinations live. transport: "auto" ("ipc" for CUDA, else
    "broadcast"), "ipc" or "broadcast".
    """

    def __init__(self, process_group=None, device=None, *, transport: str = "auto"):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("SharedReadGroup needs torch.distributed initialised (init_process_group)")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        self.group = process_group
        self.rank = dist.get_rank(process_group)
        self.world = dist.get_world_size(process_group)
        self.device = torch.device(device if device is not None else "cpu")
        if transport == "auto":
            transport = "ipc" if self.device.type == "cuda" else "broadcast"
        if transport == "ipc" and self.device.type != "cuda":
            raise ValueError(f"transport 'ipc' needs a CUDA device, got {self.device}")
        self.transport = transport
        backend = dist.get_backend(process_group)
        self.comm_device = self.device if backend == "nccl" else torch.device("cpu")
        self._failed = False
        self._slots: list[torch.Tensor] = []
        self._staging = None
        self._peers: list = []
        self._recv = None
        self._batch = 1

    # ----- collectives -----------------------------------------------------------------------
    def _gather(self, obj) -> list:
        out = [None] * self.world
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def _agree(self, error: BaseException | None, what: str) -> None:
        """All ranks raise if any rank failed `what` (a collective; also a barrier)."""
        statuses = self._gather(None if error is None else _status(error))
        failed = [(r, s) for r, s in enumerate(statuses) if s is not None]
        if failed:
            self._failed = True
            rank, status = failed[0]
            others = f" (and ranks {[r for r, _ in failed[1:]]})" if len(failed) > 1 else ""
            raise SharedReadError(
                f"shared read failed during {what} on rank {rank} of {self.world}{others}: {status}", rank=rank
            ) from error

    def _src(self, rank: int) -> int:
        return dist.get_global_rank(self.group, rank) if self.group is not None else rank

    # ----- lifecycle -------------------------------------------------------------------------
    def start(self, session) -> None:
        """Join `session` to the group (collective): same host, same chunking, exchange slots ready."""
        engine = session.engine
        error = None
        info = {"host": socket.gethostname(), "chunk": engine.chunk_bytes, "threads": engine.io_threads}
        infos = self._gather(info)
        if len({i["host"] for i in infos}) > 1:
            error = RuntimeError(f"ranks are on several hosts {sorted({i['host'] for i in infos})}")
        elif len({i["chunk"] for i in infos}) > 1:
            error = ValueError(f"ranks use different chunk_bytes {[i['chunk'] for i in infos]}")
        self._batch = min(i["threads"] for i in infos)
        if error is None:
            try:
                self._setup_slots(engine.chunk_bytes)
            except Exception as exc:  # noqa: BLE001 - reported to every rank by _agree
                error = exc
        self._agree(error, "start")

    def _setup_slots(self, chunk_bytes: int) -> None:
        if self.transport == "ipc":
            from torch.multiprocessing.reductions import reduce_tensor

            self._staging = torch.empty(self._batch * chunk_bytes, dtype=torch.uint8, device=self.device)
            handles = self._gather(reduce_tensor(self._staging))
            self._peers = [None if r == self.rank else fn(*args) for r, (fn, args) in enumerate(handles)]
            slots_of = lambda t: [t[j * chunk_bytes : (j + 1) * chunk_bytes] for j in range(self._batch)]
            self._slots = slots_of(self._staging)
            self._peers = [slots_of(p) if p is not None else None for p in self._peers]
        else:
            pin = self.comm_device.type == "cpu" and self.device.type == "cuda"
            make = lambda: torch.empty(chunk_bytes, dtype=torch.uint8, device=self.comm_device, pin_memory=pin)
            self._slots = [make() for _ in range(self._batch)]
            self._recv = make()

    def abort(self, session, exc: BaseException) -> None:
        """`session` is leaving through `exc`: fail the other ranks' matching flush instead of hanging."""
        if self._failed:
            return
        self._failed = True
        try:
            self._gather({"error": _status(exc), "spans": []})  # matches the peers' next flush
        finally:
            self._release()

    def finish(self, session) -> None:
        """Leave the group (collective): peers stop reading this rank's slots before they are freed."""
        if self._failed:
            self._release()
            return
        try:
            self._agree(None, "finish")
        finally:
            self._release()

    def _release(self) -> None:
        self._peers = []
        self._slots = []
        self._staging = None
        self._recv = None

    # ----- one collective flush --------------------------------------------------------------
    def read(self, session, requests) -> None:
        """Deliver `requests` (this rank's) reading each byte once across the group (collective)."""
        if self._failed:
            raise SharedReadError("this shared read group already failed; start a new session", rank=None)
        engine = session.engine
        requests = [r for r in requests if r is not None]
        error, spans = None, []
        try:
            for r in requests:
                session.check_file(r.entry.file)
            spans = [(r.entry.file, r.begin, r.end) for r in requests]
        except Exception as exc:  # noqa: BLE001 - reported to every rank
            error = exc
        payloads = self._gather({"error": None if error is None else _status(error), "spans": spans})
        failed = [(r, p["error"]) for r, p in enumerate(payloads) if p["error"] is not None]
        if failed:
            self._failed = True
            raise SharedReadError(
                f"shared read failed during plan on rank {failed[0][0]} of {self.world}: {failed[0][1]}",
                rank=failed[0][0],
            ) from error

        all_spans = [
            (file, b, e, (rank, i)) for rank, p in enumerate(payloads) for i, (file, b, e) in enumerate(p["spans"])
        ]
        chunks = plan_chunks(all_spans, engine.limit, engine.max_gap)
        for chunk in chunks:
            for piece in chunk.pieces:
                rank, i = piece.tag
                piece.tag = requests[i] if rank == self.rank else rank
        settle_requests_local(chunks)
        owned = self._assign(chunks)
        rounds = max((len(o) + self._batch - 1) // self._batch for o in owned) if chunks else 0
        display = session.display
        if display is not None:
            display.phase("reading+exchange")
        for k in range(rounds):
            batch = [o[k * self._batch : (k + 1) * self._batch] for o in owned]
            self._round(session, batch)

    def _assign(self, chunks) -> list[list]:
        """Contiguous runs of chunks, about equal bytes per rank (each rank reads sequentially)."""
        total = sum(c.nbytes for c in chunks) or 1
        owned: list[list] = [[] for _ in range(self.world)]
        done = 0
        for chunk in chunks:
            chunk.owner = min(self.world - 1, (done + chunk.nbytes // 2) * self.world // total)
            owned[chunk.owner].append(chunk)
            done += chunk.nbytes
        return owned

    def _round(self, session, batch: list[list]) -> None:
        engine = session.engine
        mine = batch[self.rank]
        slot_of = {id(c): j for j, c in enumerate(mine)}
        error = None

        def to_slot(chunk, src, base):
            self._slots[slot_of[id(chunk)]][: chunk.nbytes].copy_(
                src[chunk.begin - base : chunk.end - base], non_blocking=True
            )

        try:
            engine.run(mine, session._files, deliver=to_slot, count_payload=False)
        except Exception as exc:  # noqa: BLE001 - reported to every rank
            error = exc
        self._agree(error, "read")  # every slot of every rank is filled past this point

        for owner in range(self.world):
            for j, chunk in enumerate(batch[owner]):
                local = [p for p in chunk.pieces if not isinstance(p.tag, int)]
                wanted = {p.tag for p in chunk.pieces if isinstance(p.tag, int)} | ({self.rank} if local else set())
                data = None
                if owner == self.rank:
                    data = self._slots[j][: chunk.nbytes]
                    if self.transport == "broadcast" and wanted - {owner}:
                        dist.broadcast(data, src=self._src(owner), group=self.group)
                elif self.transport == "broadcast":
                    if wanted - {owner}:
                        data = self._recv[: chunk.nbytes]
                        dist.broadcast(data, src=self._src(owner), group=self.group)
                elif local:
                    data = self._peers[owner][j][: chunk.nbytes]
                if error is not None or not local:
                    continue
                try:
                    for piece in local:
                        engine.deliver(piece.tag, piece.begin, piece.end, data, chunk.begin)
                    delivered = sum(p.end - p.begin for p in local)
                    session.file_stats(chunk.file).bytes += delivered
                    if session.display is not None:
                        session.display.advance(delivered, file=chunk.file)
                except Exception as exc:  # noqa: BLE001 - keep joining the broadcasts, report below
                    error = exc
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # peers may overwrite their slots after the next agree
        self._agree(error, "exchange")


def settle_requests_local(chunks) -> None:
    """settle_requests over this rank's pieces only (peer pieces carry the peer's rank)."""
    mine = []
    for chunk in chunks:
        pieces = [p for p in chunk.pieces if not isinstance(p.tag, int)]
        if pieces:
            mine.append(type(chunk)(chunk.file, chunk.begin, chunk.end, pieces))
    settle_requests(mine)
