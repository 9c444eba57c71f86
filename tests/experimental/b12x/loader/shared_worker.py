"""One rank of the 2-process SharedReadGroup test (gloo over a file store); run by test_shared.py.

usage: python shared_worker.py RANK WORLD STORE CHECKPOINT_DIR OUT_DIR [DEVICE [TRANSPORT]]
DEVICE cpu (default) or cuda (rank r on cuda:r); TRANSPORT auto, ipc or broadcast (nccl on cuda).
Writes OUT_DIR/rank{RANK}.json (stats, error messages) and rank{RANK}_{scenario}.safetensors.
"""

from __future__ import annotations

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
from safetensors.torch import save_file

from flashinfer.experimental.b12x.loader import DirectWeightSession, SharedReadGroup

DEVICE = torch.device("cpu")
TRANSPORT = "auto"


def _group():
    return SharedReadGroup(None, DEVICE, transport=TRANSPORT)


def _session(group):
    mode = "buffered" if DEVICE.type == "cpu" else "auto"
    return DirectWeightSession(DEVICE, 2, shared_read_group=group, read_mode=mode, chunk_bytes=16384)


def _empty(shape, dtype=torch.float32):
    t = torch.empty(shape, dtype=dtype, device=DEVICE)
    t.reshape(-1).view(torch.uint8).fill_(0xFF)  # poisoned: every byte must be written by the load
    return t


def _stats(s):
    st = s.stats()
    return {"bytes": st.bytes, "bytes_read": st.bytes_read, "ranges": {f: v["ranges"] for f, v in st.files.items()}}


def main() -> None:
    global DEVICE, TRANSPORT
    rank, world, store, ckpt, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    backend = "gloo"
    if len(sys.argv) > 6 and sys.argv[6] == "cuda":
        torch.cuda.set_device(rank)
        DEVICE = torch.device("cuda", rank)
        TRANSPORT = sys.argv[7] if len(sys.argv) > 7 else "auto"
        backend = "nccl" if TRANSPORT == "broadcast" else "gloo"
    dist.init_process_group(
        backend, init_method=f"file://{store}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60)
    )
    result = {}

    # replicated: every rank loads every tensor
    with _session(_group()) as s:
        loaded = {}
        for name, meta in s.weights(ckpt):
            loaded[name] = _empty(meta.shape, meta.dtype)
            assert s.session(loaded[name], meta)
    save_file({k: v.cpu() for k, v in loaded.items()}, os.path.join(out, f"rank{rank}_replicated.safetensors"))
    result["replicated"] = _stats(s)

    # sharded: each rank its half of the rows; rank 0 also one small tensor
    with _session(_group()) as s:
        w = dict(s.weights(ckpt))
        emb = w["model.embed.weight"]
        half = emb[:128] if rank == 0 else emb[128:]
        mine = {"rows": _empty(half.shape, half.dtype)}
        s.session(mine["rows"], half)
        if rank == 0:
            mine["norm"] = _empty((48,))
            s.session(mine["norm"], w["model.norm.weight"])
    save_file({k: v.cpu() for k, v in mine.items()}, os.path.join(out, f"rank{rank}_sharded.safetensors"))
    result["sharded"] = _stats(s)

    # rank 1 fails in its own code while rank 0 flushes: both fail, nobody hangs
    try:
        with _session(_group()) as s:
            w = dict(s.weights(ckpt))
            s.session(_empty((257, 48), torch.bfloat16), w["lm_head.weight"])
            if rank == 1:
                raise RuntimeError("rank 1 user code failed")
        result["user_failure"] = None
    except Exception as exc:
        result["user_failure"] = f"{type(exc).__name__}: {exc}"

    # rank 0's disk read fails mid-load: both fail
    try:
        with _session(_group()) as s:
            w = dict(s.weights(ckpt))
            s.session(_empty((257, 48), torch.bfloat16), w["lm_head.weight"])
            if rank == 0:

                def broken(chunk, buf, stats):
                    raise OSError(5, "Input/output error")

                s.engine.read_chunk = broken
        result["read_failure"] = None
    except Exception as exc:
        result["read_failure"] = f"{type(exc).__name__}: {exc}"

    dist.barrier()  # still in step after both failures
    dist.destroy_process_group()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
