"""GPU paths of the loader: pinned bounce buffers + async host-to-device copies, GDS, CUDA IPC exchange.

Run on the device machine (`pytest -m gpu tests/experimental/b12x/loader`); CI has no GPU.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(__file__))
from checkpoints import all_dtype_tensors, same_bits, write_checkpoint  # noqa: E402
from test_shared import run_workers  # noqa: E402

from flashinfer.experimental.b12x.loader import DirectWeightSession, capabilities  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ckpt")
    paths = write_checkpoint(directory, all_dtype_tensors(seed=7), shards=3)
    reference = {}
    for p in paths:
        reference.update(load_file(p))
    return str(directory), reference


def _poisoned(shape, dtype):
    t = torch.empty(shape, dtype=dtype, device="cuda")
    t.reshape(-1).view(torch.uint8).fill_(0xFF)
    return t


@pytest.mark.parametrize("mode", ["direct", "buffered", "auto"])
def test_cuda_destinations_match_load_file(ckpt, mode):
    directory, reference = ckpt
    with DirectWeightSession("cuda", 4, read_mode=mode, chunk_bytes=16384) as s:
        out = {}
        for name, meta in s.weights(directory):
            out[name] = _poisoned(meta.shape, meta.dtype)
            assert s.session(out[name], meta)
        s.flush()
        assert all(b.tensor.is_pinned() for b in s.engine._buffers) or mode == "auto"
    for name, ref in reference.items():
        assert out[name].device.type == "cuda"
        assert same_bits(out[name].cpu(), ref), name


def test_cuda_views_and_conversions(ckpt):
    directory, reference = ckpt
    emb = reference["model.embed.weight"]
    with DirectWeightSession("cuda", 2, chunk_bytes=16384) as s:
        w = dict(s.weights(directory))
        f32 = _poisoned((257, 48), torch.float32)
        rows = _poisoned((64, 48), torch.bfloat16)
        tr = _poisoned((48, 257), torch.float32)
        s.session(f32, w["model.embed.weight"])
        s.session(rows, w["model.embed.weight"][10:74])
        s.session(tr, w["model.embed.weight"].t())
    torch.cuda.synchronize()
    assert torch.equal(f32.cpu(), emb.float())
    assert torch.equal(rows.cpu(), emb[10:74])
    assert torch.equal(tr.cpu(), emb.float().t())


def test_flush_orders_after_caller_stream(ckpt):
    """Destinations written on the caller's stream before the session must not overwrite the load."""
    directory, reference = ckpt
    dst = torch.empty(257, 48, dtype=torch.bfloat16, device="cuda")
    torch.cuda._sleep(50_000_000)  # keep the caller's stream busy
    dst.fill_(3.0)
    with DirectWeightSession("cuda") as s:
        s.session(dst, dict(s.weights(directory))["lm_head.weight"])
    assert torch.equal(dst.cpu(), reference["lm_head.weight"])


@pytest.mark.skipif(not capabilities("cuda").gds, reason="kvikio with GPUDirect Storage is not available")
def test_gds_mode(ckpt):
    directory, reference = ckpt
    with DirectWeightSession("cuda", read_mode="gds", chunk_bytes=1 << 20) as s:
        out = {}
        for name, meta in s.weights(directory):
            out[name] = _poisoned(meta.shape, meta.dtype)
            s.session(out[name], meta)
    assert all(same_bits(out[n].cpu(), r) for n, r in reference.items())
    assert {f["mode"] for f in s.stats().files.values()} == {"gds"}


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("transport", ["ipc", "broadcast"])
def test_shared_read_group_on_two_gpus(tmp_path_factory, transport):
    paths, out, results, reference = run_workers(tmp_path_factory, "cuda", transport)
    for rank in range(2):
        got = load_file(out / f"rank{rank}_replicated.safetensors")
        assert all(same_bits(got[n], r) for n, r in reference.items())
    read = [r["replicated"]["bytes_read"] for r in results]
    assert all(b > 0 for b in read)
    for r in results:
        assert r["read_failure"].startswith("SharedReadError")
