"""Checkpoint loading throughput: b12x.loader (direct, buffered) vs safetensors.safe_open + .to(device).

    python benchmarks/experimental/b12x/bench_loader.py --size-gb 4 --device cpu --json out.json

Generates a checkpoint of `--size-gb` GB (bf16 matrices of mixed sizes over `--shards` files) unless
`--dir` already holds one, then per repeat and per method drops the page cache (drop_caches as root,
else posix_fadvise(DONTNEED) per file; the state used is printed) and loads every tensor:

- raw:      the disk ceiling measured by this harness: O_DIRECT preadv of every file, same threads and
            read size as the loader, bytes discarded;
- direct:   DirectWeightSession(read_mode="direct") into preallocated, prefaulted destinations;
- buffered: DirectWeightSession(read_mode="buffered"), same destinations;
- peer:     for each tensor `safe_open(file).get_tensor(name).to(device)` (new tensors each time; on
            CPU `.to` is a no-op and safetensors hands back tensors on its private file mapping, so a
            warm-cache "peer" copies nothing);
- peer_copy: the same, then `dst.copy_(t)` into the loader's destinations: the like-for-like peer
            on CPU (values in prepared weights).

Bytes moved = the checkpoint's tensor bytes; GB/s = bytes / wall seconds; the table shows the median
over repeats, the ratio to the peer and the fraction of raw. Self-contained (no common.py).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import platform
import shutil
import statistics
import subprocess
import threading
import time


def _generate(directory: str, size_gb: float, shards: int) -> None:
    import torch
    from safetensors.torch import save_file

    os.makedirs(directory, exist_ok=True)
    per_shard = int(size_gb * 1e9 / shards)
    g = torch.Generator().manual_seed(0)
    # a layer's worth of shapes: big projections, mid MLP slices, small norms and scales
    shapes = [(4096, 4096), (4096, 1024), (14336, 512), (4096,), (1024,)]
    weight_map = {}
    for s in range(shards):
        tensors, nbytes, i = {}, 0, 0
        while nbytes < per_shard:
            shape = shapes[i % len(shapes)]
            t = torch.randint(-(2**15), 2**15, shape, dtype=torch.int16, generator=g).view(torch.bfloat16)
            name = f"model.layers.{s}.t{i}"
            tensors[name] = t
            nbytes += t.numel() * 2
            i += 1
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file(tensors, os.path.join(directory, fname))
        weight_map.update({n: fname for n in tensors})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    subprocess.run(["sync"], check=False)


def _drop_cache(files: list[str]) -> str:
    """Evict the checkpoint from the page cache; returns how (or 'warm' when it could not)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "cold (drop_caches)"
    except OSError:
        pass
    try:
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        return "cold (fadvise DONTNEED)"
    except (OSError, AttributeError):
        return "warm (could not drop)"


def _raw(files: list[str], threads: int, chunk: int) -> int:
    """O_DIRECT sequential reads of whole files on `threads` threads; returns bytes read."""
    jobs = [(p, off) for p in files for off in range(0, os.path.getsize(p), chunk)]
    fds = {p: os.open(p, os.O_RDONLY | os.O_DIRECT) for p in files}
    lock, total = threading.Lock(), [0]

    def work():
        buf = mmap.mmap(-1, chunk)
        n = 0
        while True:
            with lock:
                if not jobs:
                    break
                path, off = jobs.pop(0)
            n += os.preadv(fds[path], [buf], off)
        with lock:
            total[0] += n

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for fd in fds.values():
        os.close(fd)
    return total[0]


def _loader(directory, device, mode, threads, chunk, dests) -> int:
    from flashinfer.experimental.b12x.loader import DirectWeightSession

    with DirectWeightSession(device, threads, read_mode=mode, chunk_bytes=chunk) as s:
        for name, meta in s.weights(directory):
            s.session(dests[name], meta)
    return s.stats().bytes


def _peer(files, device, dests=None) -> int:
    import torch
    from safetensors import safe_open

    n = 0
    for path in files:
        with safe_open(path, framework="pt", device="cpu") as f:
            for name in f.keys():
                t = f.get_tensor(name).to(device)
                if dests is not None:
                    dests[name].copy_(t)
                n += t.numel() * t.element_size()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dir", default="/tmp/b12x_bench_loader", help="checkpoint directory (generated if empty)")
    ap.add_argument("--size-gb", type=float, default=4.0, help="size of the generated checkpoint")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--threads", type=int, default=8, help="io_threads (and raw read threads)")
    ap.add_argument("--chunk-mb", type=int, default=16, help="read size / bounce buffer MiB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--methods", default="raw,direct,buffered,peer,peer_copy")
    ap.add_argument("--warm", action="store_true", help="do not drop the page cache (warm-cache numbers)")
    ap.add_argument("--json", help="write results to this file")
    ap.add_argument("--keep", action="store_true", help="keep a generated checkpoint")
    args = ap.parse_args(argv)

    import torch

    from flashinfer.experimental.b12x.loader import capabilities, checkpoint_files

    generated = not os.path.isdir(args.dir) or not os.listdir(args.dir)
    if generated:
        t0 = time.perf_counter()
        _generate(args.dir, args.size_gb, args.shards)
        print(f"generated {args.size_gb} GB in {args.shards} shards at {args.dir} ({time.perf_counter() - t0:.0f} s)")
    files = checkpoint_files(args.dir)
    device = torch.device(args.device)
    chunk = args.chunk_mb << 20
    methods = args.methods.split(",")
    dests = {}
    if {"direct", "buffered", "peer_copy"} & set(methods):
        from flashinfer.experimental.b12x.loader import DirectWeightSession

        with DirectWeightSession(device) as s:
            for name, meta in s.weights(args.dir):
                dests[name] = torch.zeros(meta.shape, dtype=meta.dtype, device=device)  # prefaulted
    results: dict[str, list[float]] = {m: [] for m in methods}
    cache_state = set()
    try:
        for _ in range(args.repeats):
            for method in methods:
                cache_state.add("warm (--warm)" if args.warm else _drop_cache(files))
                t0 = time.perf_counter()
                if method == "raw":
                    nbytes = _raw(files, args.threads, chunk)
                elif method == "peer":
                    nbytes = _peer(files, device)
                elif method == "peer_copy":
                    nbytes = _peer(files, device, dests)
                else:
                    nbytes = _loader(args.dir, device, method, args.threads, chunk, dests)
                results[method].append(nbytes / (time.perf_counter() - t0) / 1e9)
    finally:
        if generated and not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)

    caps = capabilities(device, files[0] if not generated or args.keep else "/tmp")
    total = sum(os.path.getsize(f) for f in files) if os.path.exists(files[0]) else None
    median = {m: statistics.median(v) for m, v in results.items()}
    peer, raw = median.get("peer_copy" if device.type == "cpu" else "peer", median.get("peer")), median.get("raw")
    print(
        f"\nb12x.loader benchmark: {len(dests) or '?'} tensors, {args.size_gb} GB, device {device}, "
        f"threads {args.threads}, read {args.chunk_mb} MiB, page cache: {', '.join(sorted(cache_state))}"
    )
    print(f"{'method':<10} {'GB/s (median)':>14} {'runs':>24} {'x peer*':>8} {'% raw':>7}")
    for m, v in results.items():
        xp = f"{median[m] / peer:.2f}" if peer else "-"
        pr = f"{100 * median[m] / raw:.0f}%" if raw else "-"
        runs = " ".join(f"{x:.2f}" for x in v)
        print(f"{m:<10} {median[m]:>14.2f} {runs:>24} {xp:>8} {pr:>7}")
    print("* peer = peer_copy on CPU (like for like), peer on CUDA")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "host": platform.node(),
                    "device": str(device),
                    "size_gb": args.size_gb,
                    "checkpoint_bytes": total,
                    "threads": args.threads,
                    "chunk_mb": args.chunk_mb,
                    "page_cache": sorted(cache_state),
                    "capabilities": caps.__dict__,
                    "gbps": results,
                    "median_gbps": median,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
