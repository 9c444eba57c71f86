"""Strict safetensors header parsing: every malformed header raises CheckpointFormatError naming
the file (and the tensor), and whatever we accept, safetensors.torch.load_file loads the same."""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))
from checkpoints import same_bits  # noqa: E402

from flashinfer.experimental.b12x.loader import (  # noqa: E402
    CheckpointFormatError,
    DirectWeightSession,
    read_safetensors_header,
    resolve_checkpoint,
)


def _write(path, header, data: bytes, *, raw_header: bytes | None = None) -> str:
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    return str(path)


def _u8(begin, end, shape=None):
    return {"dtype": "U8", "shape": shape if shape is not None else [end - begin], "data_offsets": [begin, end]}


CASES = [
    ("short", None, b"", None, "shorter than the 8-byte header length"),
    ("too big", None, b"", struct.pack("<Q", 200_000_000) + b"{}", "exceeds the 100000000-byte limit"),
    ("past end", None, b"", struct.pack("<Q", 50) + b"{}", "runs past the end of the 10-byte file"),
    ("not json", None, b"", b"{nope", "header is not valid JSON"),
    ("not object", [1, 2], b"", None, "header must be a JSON object, got list"),
    ("dup key", None, b"\0\0", b'{"a":' + json.dumps(_u8(0, 2)).encode() * 0 + b'1,"a":2}', "duplicate JSON key 'a'"),
    ("nan", None, b"", b'{"__metadata__": {"x": NaN}}', "non-standard JSON constant NaN"),
    ("metadata", {"__metadata__": {"x": 1}}, b"", None, "__metadata__ must map strings to strings"),
    ("entry type", {"w": [1]}, b"", None, "tensor 'w': expected an object"),
    ("missing", {"w": {"dtype": "U8", "shape": [1]}}, b"\0", None, "tensor 'w': missing field(s) ['data_offsets']"),
    ("extra", {"w": {**_u8(0, 1), "x": 1}}, b"\0", None, "tensor 'w': unknown field(s) ['x']"),
    ("dtype", {"w": {**_u8(0, 1), "dtype": "u8"}}, b"\0", None, "tensor 'w': unknown dtype 'u8'"),
    ("f6", {"w": {**_u8(0, 3, [4]), "dtype": "F6_E2M3"}}, b"\0" * 3, None, "F6_E2M3 has no torch equivalent"),
    ("neg shape", {"w": _u8(0, 1, [-1])}, b"\0", None, "tensor 'w': shape must be a list of non-negative"),
    ("bool shape", {"w": _u8(0, 1, [True])}, b"\0", None, "tensor 'w': shape must be a list of non-negative"),
    ("float off", {"w": {**_u8(0, 1), "data_offsets": [0, 1.0]}}, b"\0", None, "data_offsets must be [begin, end]"),
    ("3 offsets", {"w": {**_u8(0, 1), "data_offsets": [0, 1, 1]}}, b"\0", None, "data_offsets must be [begin, end]"),
    (
        "backwards",
        {"w": {**_u8(0, 1), "data_offsets": [2, 1]}},
        b"\0\0",
        None,
        "tensor 'w': data_offsets [2, 1] run backwards",
    ),
    ("size", {"w": _u8(0, 4, [3])}, b"\0" * 4, None, "tensor 'w': U8 [3] needs 3 bytes but data_offsets [0, 4] hold 4"),
    ("out of file", {"w": _u8(0, 9)}, b"\0" * 4, None, "tensor 'w': data_offsets [0, 9] run past the end of the file"),
    ("overlap", {"a": _u8(0, 4), "b": _u8(2, 6)}, b"\0" * 6, None, "tensor 'b': data_offsets [2, 6] overlaps 'a'"),
    (
        "gap",
        {"a": _u8(0, 2), "b": _u8(4, 6)},
        b"\0" * 6,
        None,
        "tensor 'b': data_offsets [4, 6] leaves a gap of 2 bytes",
    ),
    ("trailing", {"a": _u8(0, 2)}, b"\0" * 6, None, "4 trailing bytes after the last tensor"),
    (
        "f4 odd",
        {"w": {**_u8(0, 2, [2, 2]), "dtype": "F4", "shape": [1, 3]}},
        b"\0\0",
        None,
        "not a whole number of bytes",
    ),
    ("f4 last", {"w": {"dtype": "F4", "shape": [2, 3], "data_offsets": [0, 3]}}, b"\0" * 3, None, "even last dim"),
    (
        "surrogate",
        None,
        b"",
        b'{"\\ud800": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}}',
        "not valid Unicode",
    ),
    ("utf8", None, b"", b'{"\xff": 1}', "header is not valid UTF-8"),
]


@pytest.mark.contract
@pytest.mark.parametrize("header,data,raw,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_headers_name_file_and_problem(tmp_path, header, data, raw, message):
    path = tmp_path / "bad.safetensors"
    if raw is not None and header is None and message.startswith(("exceeds", "runs past")):
        with open(path, "wb") as f:
            f.write(raw)
    elif raw is None and header is None:
        with open(path, "wb") as f:
            f.write(b"\0\0\0")
    else:
        _write(path, header, data, raw_header=raw)
    with pytest.raises(CheckpointFormatError) as info:
        read_safetensors_header(path)
    assert message in str(info.value)
    assert str(info.value).startswith(str(path)) and info.value.file == str(path)


@pytest.mark.contract
def test_valid_edge_cases_parse(tmp_path):
    header = {
        "__metadata__": {"format": "pt"},
        "z": _u8(0, 0, [0]),  # empty tensors may sit anywhere on the tiling
        "a": _u8(0, 2),
        "f4": {"dtype": "F4", "shape": [2, 4], "data_offsets": [2, 6]},
    }
    path = _write(tmp_path / "ok.safetensors", header, b"\1\2\3\4\5\6")
    parsed = read_safetensors_header(path)
    assert [e.name for e in parsed.entries] == ["z", "a", "f4"]
    f4 = parsed.entries[2]
    assert f4.torch_shape == (2, 2) and f4.torch_dtype() == torch.float4_e2m1fn_x2 and f4.nbytes == 4
    assert parsed.metadata == {"format": "pt"}


@pytest.mark.contract
def test_index_consistency(tmp_path):
    save_file({"a": torch.zeros(2)}, tmp_path / "s1.safetensors")
    save_file({"b": torch.zeros(2)}, tmp_path / "s2.safetensors")
    index = tmp_path / "model.safetensors.index.json"

    def write(weight_map):
        index.write_text(json.dumps({"weight_map": weight_map}))

    write({"a": "s1.safetensors", "b": "s2.safetensors"})
    assert set(resolve_checkpoint(tmp_path).entries) == {"a", "b"}
    write({"a": "s2.safetensors", "b": "s1.safetensors"})
    with pytest.raises(CheckpointFormatError, match=r"tensor 'a' is stored in .*s1.safetensors but the index maps it"):
        resolve_checkpoint(index)
    write({"a": "s1.safetensors"})
    with pytest.raises(CheckpointFormatError, match="shards"):
        resolve_checkpoint([tmp_path / "s1.safetensors", tmp_path / "s2.safetensors"], index)
    write({"a": "s1.safetensors", "c": "s1.safetensors"})
    with pytest.raises(CheckpointFormatError, match=r"tensor 'c' is mapped to .*s1.safetensors, whose header does not"):
        resolve_checkpoint(tmp_path)
    write({"a": "missing.safetensors"})
    with pytest.raises(CheckpointFormatError, match=r"tensor 'a' is mapped to .*missing.safetensors, which does not"):
        resolve_checkpoint(index)
    index.write_text("[1]")
    with pytest.raises(CheckpointFormatError, match="weight_map"):
        resolve_checkpoint(tmp_path)
    os.unlink(index)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointFormatError, match="no \\*.safetensors files"):
        resolve_checkpoint(empty)
    with pytest.raises(CheckpointFormatError, match="no such checkpoint file"):
        resolve_checkpoint(tmp_path / "nope.safetensors")


# ----- fuzz ----------------------------------------------------------------------------------


def _base_file() -> bytes:
    g = torch.Generator().manual_seed(1)
    tensors = {
        "w": torch.randn(4, 6, generator=g).to(torch.bfloat16),
        "s": torch.rand(3, generator=g),
        "q": torch.randint(0, 255, (8,), dtype=torch.uint8, generator=g),
        "f8": torch.randn(5, generator=g).to(torch.float8_e4m3fn),
    }
    with tempfile.TemporaryDirectory() as d:
        save_file(tensors, os.path.join(d, "b.safetensors"))
        with open(os.path.join(d, "b.safetensors"), "rb") as f:
            return f.read()


BASE = _base_file()
N = struct.unpack("<Q", BASE[:8])[0]
DOC = json.loads(BASE[8 : 8 + N])

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=8,
)


@st.composite
def corrupted(draw):
    """A mutated copy of BASE: byte edits, JSON field edits, or a truncated/extended file."""
    kind = draw(st.sampled_from(["bytes", "field", "length", "truncate", "entry"]))
    data = bytearray(BASE)
    if kind == "bytes":
        for _ in range(draw(st.integers(1, 4))):
            pos = draw(st.integers(0, 8 + N - 1))
            data[pos] = draw(st.integers(0, 255))
        return bytes(data)
    if kind == "length":
        return struct.pack("<Q", draw(st.integers(0, 2**64 - 1))) + bytes(data[8:])
    if kind == "truncate":
        return bytes(data[: draw(st.integers(0, len(data) - 1))])
    doc = json.loads(json.dumps(DOC))
    name = draw(st.sampled_from(sorted(k for k in doc if k != "__metadata__")))
    if kind == "field":
        field = draw(st.sampled_from(["dtype", "shape", "data_offsets"]))
        doc[name][field] = draw(
            st.sampled_from(["F32", "I32", "U8", "BF16", "F4", "F8_E5M2", "X"])
            | st.lists(st.integers(-3, 40), max_size=3)
            | _json_values
        )
    else:
        doc[draw(st.text(max_size=4))] = draw(_json_values)
    header = json.dumps(doc).encode()
    return struct.pack("<Q", len(header)) + header + bytes(data[8 + N :])


@pytest.mark.contract
@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(blob=corrupted())
def test_fuzz_corrupted_headers(blob):
    """Either CheckpointFormatError (and nothing else), or a file the reference loads identically."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.safetensors")
        with open(path, "wb") as f:
            f.write(blob)
        try:
            parsed = read_safetensors_header(path)
        except CheckpointFormatError as exc:
            assert str(exc).startswith(path)
            return
        reference = load_file(path)  # we accepted: the reference must accept too
        with DirectWeightSession("cpu", 2, read_mode="buffered") as s:
            out = {}
            for name, meta in s.weights(path):
                out[name] = torch.empty(meta.shape, dtype=meta.dtype)
                s.session(out[name], meta)
        assert set(out) == set(reference) == {e.name for e in parsed.entries}
        for name, ref in reference.items():
            assert same_bits(out[name], ref), name
