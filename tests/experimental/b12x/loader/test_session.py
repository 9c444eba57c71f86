"""DirectWeightSession on the CPU: values bitwise equal to safetensors.torch.load_file."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))
from checkpoints import all_dtype_tensors, same_bits, write_checkpoint  # noqa: E402

from flashinfer.experimental.b12x.loader import (  # noqa: E402
    CheckpointDisplay,
    CheckpointFormatError,
    CheckpointReadError,
    DirectWeightSession,
    register_conversion,
    unregister_conversion,
)

MODES = ["direct", "buffered", "auto"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ckpt")
    paths = write_checkpoint(directory, all_dtype_tensors(), shards=3)
    reference = {}
    for p in paths:
        reference.update(load_file(p))
    return str(directory), paths, reference


def _load_all(session, source, **kw):
    out = {}
    for name, meta in session.weights(source, **kw):
        out[name] = torch.empty(meta.shape, dtype=meta.dtype) if meta.device.type == "meta" else None
        if out[name] is None:
            out[name] = meta
        else:
            assert session.session(out[name], meta)
    return out


@pytest.mark.reference
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("threads,chunk", [(1, 1 << 20), (3, 16384)])
def test_every_dtype_matches_load_file(ckpt, mode, threads, chunk):
    directory, _, reference = ckpt
    with DirectWeightSession("cpu", threads, read_mode=mode, chunk_bytes=chunk) as s:
        out = _load_all(s, directory)
    assert set(out) == set(reference)
    for name, ref in reference.items():
        assert same_bits(out[name], ref), name
    stats = s.stats()
    assert stats.bytes == sum(t.numel() * t.element_size() for t in reference.values())
    assert stats.gbps > 0 and stats.seconds > 0
    assert all(f["mode"] in ("direct", "buffered") for f in stats.files.values())


@pytest.mark.reference
@pytest.mark.parametrize("source", ["dir", "index", "files", "one"])
def test_checkpoint_sources(ckpt, source):
    directory, paths, reference = ckpt
    arg = {
        "dir": directory,
        "index": os.path.join(directory, "model.safetensors.index.json"),
        "files": paths,
        "one": paths[1],
    }[source]
    with DirectWeightSession("cpu", 2) as s:
        out = _load_all(s, arg)
    expected = load_file(paths[1]) if source == "one" else reference
    assert set(out) == set(expected)
    assert all(same_bits(out[n], expected[n]) for n in expected)


@pytest.mark.reference
def test_meta_tensors_and_needs_values(ckpt):
    directory, _, reference = ckpt
    scale = "model.layers.0.mlp.up.weight_scale"
    with DirectWeightSession("cpu") as s:
        seen = dict(s.weights(directory, needs_values={scale}))
        assert seen[scale].device.type == "cpu" and same_bits(seen[scale], reference[scale])
        fp4 = seen["model.layers.0.experts.w13_fp4"]
        assert fp4.device.type == "meta" and fp4.dtype == torch.float4_e2m1fn_x2 and tuple(fp4.shape) == (16, 12)
        dst = torch.empty(33)
        assert s.session(dst, seen[scale])  # an already materialised tensor is copied at once
        assert same_bits(dst, reference[scale])
        assert s.stats().bytes == 33 * 4  # only the scale was read


@pytest.mark.reference
def test_prefix_prefixes_and_skip(ckpt):
    directory, _, reference = ckpt
    with DirectWeightSession("cpu") as s:
        layer = dict(s.weights(directory, prefix="model.layers.0."))
        picked = dict(s.weights(directory, prefixes=("lm_head.", "model.norm."), skip={"model.norm.weight"}))
        pred = dict(s.weights(directory, skip=lambda n: not n.endswith(".bias")))
    assert set(layer) == {n[len("model.layers.0.") :] for n in reference if n.startswith("model.layers.0.")}
    assert set(picked) == {"lm_head.weight"}
    assert set(pred) == {"model.layers.0.attn.q.bias"}


@pytest.mark.reference
@pytest.mark.parametrize("mode", ["direct", "buffered"])
def test_views_read_only_their_bytes(ckpt, mode):
    """Tensor-parallel style slices, transposes and dtype views of the meta tensors."""
    directory, _, reference = ckpt
    emb = reference["model.embed.weight"]
    with DirectWeightSession("cpu", 2, read_mode=mode, chunk_bytes=16384) as s:
        w = dict(s.weights(directory))
        rows = torch.empty(64, 48, dtype=torch.bfloat16)
        cols = torch.empty(257, 8, dtype=torch.bfloat16)
        tr = torch.empty(48, 257, dtype=torch.bfloat16)
        raw = torch.empty(257, 96, dtype=torch.uint8)
        assert s.session(rows, w["model.embed.weight"][100:164])
        assert s.session(cols, w["model.embed.weight"][:, 40:])
        assert s.session(tr, w["model.embed.weight"].t())
        assert s.session(raw, w["model.embed.weight"].view(torch.uint8))
        s.flush()
        assert s.stats().files[os.path.join(directory, _shard_of(directory, "model.embed.weight"))]["bytes"] > 0
    assert torch.equal(rows, emb[100:164]) and torch.equal(cols, emb[:, 40:]) and torch.equal(tr, emb.t())
    assert torch.equal(raw, emb.view(torch.uint8))


def _shard_of(directory, name):
    import json

    with open(os.path.join(directory, "model.safetensors.index.json")) as f:
        return json.load(f)["weight_map"][name]


@pytest.mark.reference
def test_row_slice_reads_only_its_span(tmp_path):
    big = torch.arange(4096 * 64, dtype=torch.float32).reshape(4096, 64)
    save_file({"w": big}, tmp_path / "m.safetensors")
    with DirectWeightSession("cpu", read_mode="buffered") as s:
        w = dict(s.weights(tmp_path))
        half = torch.empty(2048, 64)
        s.session(half, w["w"][2048:])
    assert torch.equal(half, big[2048:])
    assert s.stats().bytes_read == 2048 * 64 * 4


@pytest.mark.reference
@pytest.mark.parametrize("mode", ["direct", "buffered"])
def test_conversions(ckpt, mode):
    directory, _, reference = ckpt
    with DirectWeightSession("cpu", 2, read_mode=mode, chunk_bytes=16384) as s:
        w = dict(s.weights(directory))
        emb = torch.empty(257, 48)
        up = torch.empty(33, 48, dtype=torch.bfloat16)
        emb_t = torch.empty(48, 257)
        s.session(emb, w["model.embed.weight"])  # bf16 -> fp32, cut into pieces on element boundaries
        s.session(up, w["model.layers.0.mlp.up.weight"])  # fp8 e4m3 -> bf16
        s.session(emb_t, w["model.embed.weight"].t())  # strided + conversion: staged
    assert torch.equal(emb, reference["model.embed.weight"].float())
    assert torch.equal(up, reference["model.layers.0.mlp.up.weight"].to(torch.bfloat16))
    assert torch.equal(emb_t, reference["model.embed.weight"].float().t())


@pytest.mark.contract
def test_unregistered_conversion_names_tensor(ckpt):
    directory, _, _ = ckpt
    with DirectWeightSession("cpu") as s:
        w = dict(s.weights(directory))
        with pytest.raises(TypeError, match=r"model\.norm\.weight.*float32 to torch\.bfloat16.*register"):
            s.session(torch.empty(48, dtype=torch.bfloat16), w["model.norm.weight"])
        register_conversion(torch.float32, torch.bfloat16)
        try:
            dst = torch.empty(48, dtype=torch.bfloat16)
            assert s.session(dst, w["model.norm.weight"])
            s.flush()
        finally:
            unregister_conversion(torch.float32, torch.bfloat16)
    assert torch.equal(
        dst,
        load_file(os.path.join(directory, _shard_of(directory, "model.norm.weight")))["model.norm.weight"].to(
            torch.bfloat16
        ),
    )


@pytest.mark.contract
def test_bad_destinations_and_foreign_sources(ckpt):
    directory, _, _ = ckpt
    with DirectWeightSession("cpu") as s:
        w = dict(s.weights(directory))
        with pytest.raises(ValueError, match=r"lm_head\.weight.*BF16 \[257, 48\].*destination shape \[256, 48\]"):
            s.session(torch.empty(256, 48, dtype=torch.bfloat16), w["lm_head.weight"])
        assert s.session(torch.empty(3), torch.zeros(3)) is False  # not from this session: caller copies
        assert s.session(torch.empty(3), torch.empty(3, device="meta")) is False
        with pytest.raises(KeyError, match="nope"):
            s.session(torch.empty(3), "nope")
        dst = torch.empty(257, 48, dtype=torch.bfloat16)
        assert s.session(dst, "lm_head.weight")  # by name
    with pytest.raises(RuntimeError, match="finished"):
        s.session(dst, "lm_head.weight")


@pytest.mark.contract
def test_file_changed_after_header_raises_naming_it(tmp_path):
    save_file({"a": torch.randn(1000), "b": torch.randn(1000)}, tmp_path / "m.safetensors")
    s = DirectWeightSession("cpu", read_mode="buffered")
    w = dict(s.weights(tmp_path))
    dst = torch.empty(1000)
    s.session(dst, w["b"])
    with open(tmp_path / "m.safetensors", "r+b") as f:
        f.truncate(os.path.getsize(tmp_path / "m.safetensors") - 100)
    with pytest.raises(CheckpointReadError, match="m.safetensors: file changed"):
        s.flush()
    s.finish()


@pytest.mark.contract
def test_short_read_names_file_and_tensor(tmp_path, monkeypatch):
    save_file({"a": torch.randn(1000)}, tmp_path / "m.safetensors")
    import flashinfer.experimental.b12x.loader._engine as engine

    real = engine._preadv_full
    monkeypatch.setattr(engine, "_preadv_full", lambda fd, views, off: real(fd, views, off) - 8)
    with pytest.raises(CheckpointReadError, match=r"m\.safetensors: file ended.*tensor\(s\) 'a'"):
        with DirectWeightSession("cpu", read_mode="direct") as s:
            w = dict(s.weights(tmp_path))
            s.session(torch.empty(1000), w["a"])


@pytest.mark.contract
def test_o_direct_refused_falls_back_in_auto(tmp_path, monkeypatch):
    """tmpfs before Linux 6.6 refuses O_DIRECT: auto reads buffered, explicit direct says why."""
    save_file({"a": torch.randn(100)}, tmp_path / "m.safetensors")
    import flashinfer.experimental.b12x.loader._capabilities as caps

    monkeypatch.setattr(caps, "o_direct_supported", lambda path: False)
    with DirectWeightSession("cpu", read_mode="auto") as s:
        w = dict(s.weights(tmp_path))
        dst = torch.empty(100)
        s.session(dst, w["a"])
    assert [f["mode"] for f in s.stats().files.values()] == ["buffered"]
    real_open = os.open

    def refuse(path, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(22, "Invalid argument")
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(CheckpointReadError, match="refuses O_DIRECT; use read_mode='buffered'"):
        with DirectWeightSession("cpu", read_mode="direct") as s:
            s.session(dst, dict(s.weights(tmp_path))["a"])


@pytest.mark.contract
def test_malformed_checkpoint_yields_nothing(tmp_path):
    save_file({"a": torch.randn(10)}, tmp_path / "a.safetensors")
    save_file({"a": torch.randn(10)}, tmp_path / "b.safetensors")
    with DirectWeightSession("cpu") as s:
        gen = s.weights(tmp_path)
        with pytest.raises(CheckpointFormatError, match=r"'a' is in both .*a\.safetensors and .*b\.safetensors"):
            next(gen)


@pytest.mark.contract
def test_constructor_arguments():
    with pytest.raises(ValueError, match="read_mode must be one of"):
        DirectWeightSession("cpu", read_mode="fast")
    with pytest.raises(ValueError, match="io_threads must be >= 1"):
        DirectWeightSession("cpu", 0)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        DirectWeightSession("cpu", read_mode="gds")


@pytest.mark.contract
def test_exception_in_block_reads_nothing(tmp_path):
    save_file({"a": torch.randn(10)}, tmp_path / "m.safetensors")
    dst = torch.full((10,), float("nan"))
    with pytest.raises(KeyError):
        with DirectWeightSession("cpu") as s:
            s.session(dst, dict(s.weights(tmp_path))["a"])
            raise KeyError("user code failed")
    assert dst.isnan().all()


@pytest.mark.contract
def test_display_reports_progress(ckpt):
    import io

    directory, _, reference = ckpt
    stream = io.StringIO()
    with DirectWeightSession("cpu", display=CheckpointDisplay(stream=stream, interval=0)) as s:
        _load_all(s, directory)
    lines = stream.getvalue().splitlines()
    total = sum(t.numel() * t.element_size() for t in reference.values())
    assert lines[0].startswith("b12x.loader [headers]")
    assert lines[-1].startswith("b12x.loader [done]") and f"{total / 1e9:.2f} GB" in lines[-1]
    assert "files 3/3" in lines[-1]
