"""SharedReadGroup with 2 processes over gloo: each byte read once, identical tensors, failure on one
rank fails both."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(__file__))
from checkpoints import all_dtype_tensors, same_bits, write_checkpoint  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "shared_worker.py")


def run_workers(tmp_path_factory, *extra):
    """Run 2 shared_worker.py ranks; returns (shard paths, out dir, per-rank results, reference)."""
    ckpt = tmp_path_factory.mktemp("ckpt")
    out = tmp_path_factory.mktemp("out")
    paths = write_checkpoint(ckpt, all_dtype_tensors(seed=3), shards=2)
    store = out / "store"
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, str(rank), "2", str(store), str(ckpt), str(out), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=120)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("shared read workers hung")
    for rank, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {rank} exited {p.returncode}:\n{log}"
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    reference = {}
    for p in paths:
        reference.update(load_file(p))
    return paths, out, results, reference


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    return run_workers(tmp_path_factory)


def _data_bytes(path):
    import struct

    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
    return os.path.getsize(path) - 8 - n


def _disjoint_cover(results, key):
    ranges = {}
    for r in results:
        for f, rs in r[key]["ranges"].items():
            ranges.setdefault(f, []).extend(map(tuple, rs))
    for rs in ranges.values():
        rs.sort()
        assert all(a[1] <= b[0] for a, b in zip(rs, rs[1:])), f"a byte range was read twice: {rs}"
    return ranges


@pytest.mark.reference
def test_replicated_load_reads_each_byte_once(shared_run):
    paths, out, results, reference = shared_run
    for rank in range(2):
        got = load_file(out / f"rank{rank}_replicated.safetensors")
        assert set(got) == set(reference)
        for name, ref in reference.items():
            assert same_bits(got[name], ref), (rank, name)
    read = [r["replicated"]["bytes_read"] for r in results]
    assert sum(read) == sum(_data_bytes(p) for p in paths)  # every byte once, in total
    assert all(b > 0 for b in read)  # and both ranks did read
    _disjoint_cover(results, "replicated")
    assert all(r["replicated"]["bytes"] == sum(_data_bytes(p) for p in paths) for r in results)


@pytest.mark.reference
def test_sharded_rows(shared_run):
    _, out, results, reference = shared_run
    emb = reference["model.embed.weight"]
    r0 = load_file(out / "rank0_sharded.safetensors")
    r1 = load_file(out / "rank1_sharded.safetensors")
    assert same_bits(r0["rows"], emb[:128]) and same_bits(r1["rows"], emb[128:])
    assert same_bits(r0["norm"], reference["model.norm.weight"]) and "norm" not in r1
    _disjoint_cover(results, "sharded")
    assert sum(r["sharded"]["bytes_read"] for r in results) == emb.numel() * 2 + 48 * 4


@pytest.mark.contract
def test_failure_on_one_rank_fails_all(shared_run):
    _, _, results, _ = shared_run
    assert results[0]["user_failure"].startswith("SharedReadError: shared read failed during plan on rank 1 of 2")
    assert "rank 1 user code failed" in results[0]["user_failure"]
    assert results[1]["user_failure"] == "RuntimeError: rank 1 user code failed"
    for r in results:
        assert r["read_failure"].startswith("SharedReadError: shared read failed during read on rank 0 of 2")
        assert "Input/output error" in r["read_failure"]
