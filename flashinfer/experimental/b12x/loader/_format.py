"""Strict parsing of safetensors headers (no torch needed until a dtype is mapped).

File layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the data section.
The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
to the data section) plus an optional "__metadata__" of strings.

We accept a subset of what the reference `safetensors` library accepts, never more: the tensors,
sorted by offset, must tile the data section exactly (no gap, no overlap, nothing trailing), every
byte count must match shape x dtype, and on top of the reference we refuse duplicate JSON keys
(json keeps the last one silently) and unknown fields in a tensor entry. Every refusal raises
CheckpointFormatError naming the file and tensor, so a malformed file never loads partially.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field

from .errors import CheckpointFormatError

# The reference library refuses headers above this size; so do we (a header is names and shapes only).
MAX_HEADER_BYTES = 100_000_000

# safetensors dtype code -> (bits per stored value, torch dtype attribute)
DTYPES: dict[str, tuple[int, str]] = {
    "BOOL": (8, "bool"),
    "U8": (8, "uint8"),
    "I8": (8, "int8"),
    "F8_E5M2": (8, "float8_e5m2"),
    "F8_E4M3": (8, "float8_e4m3fn"),
    "F8_E8M0": (8, "float8_e8m0fnu"),
    "F8_E4M3FNUZ": (8, "float8_e4m3fnuz"),
    "F8_E5M2FNUZ": (8, "float8_e5m2fnuz"),
    "I16": (16, "int16"),
    "U16": (16, "uint16"),
    "F16": (16, "float16"),
    "BF16": (16, "bfloat16"),
    "I32": (32, "int32"),
    "U32": (32, "uint32"),
    "F32": (32, "float32"),
    "C64": (64, "complex64"),
    "F64": (64, "float64"),
    "I64": (64, "int64"),
    "U64": (64, "uint64"),
    # Two e2m1 values per byte; torch's element is the byte pair, so the last dim halves in torch.
    "F4": (4, "float4_e2m1fn_x2"),
}
# Codes the format defines but torch has no dtype for.
UNSUPPORTED_DTYPES = ("F6_E2M3", "F6_E3M2")

_ENTRY_KEYS = frozenset({"dtype", "shape", "data_offsets"})


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file; `begin`/`end` are absolute byte offsets in `file`."""

    name: str
    file: str
    dtype: str  # safetensors code, e.g. "BF16"
    shape: tuple[int, ...]  # as stored (for F4: the number of 4-bit values)
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def torch_shape(self) -> tuple[int, ...]:
        if self.dtype == "F4":
            return (*self.shape[:-1], self.shape[-1] // 2)
        return self.shape

    def torch_dtype(self):
        import torch

        return getattr(torch, DTYPES[self.dtype][1])

    def describe(self) -> str:
        return f"{self.dtype} {list(self.shape)}"


@dataclass(frozen=True)
class SafetensorsFile:
    """A validated safetensors header: entries sorted by offset, plus the file identity it was read from."""

    path: str
    size: int
    mtime_ns: int
    data_start: int
    metadata: dict = field(hash=False, compare=False)
    entries: tuple[TensorEntry, ...] = ()


def _fail(path: str, message: str, tensor: str | None = None) -> CheckpointFormatError:
    where = f"{path}: tensor {tensor!r}: " if tensor is not None else f"{path}: "
    return CheckpointFormatError(where + message, file=path, tensor=tensor)


def _reject_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def _unique_pairs(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate JSON key {key!r}")
        out[key] = value
    return out


def _is_uint(value) -> bool:
    return type(value) is int and value >= 0


def _check_entry(path: str, name: str, raw, data_len: int, data_start: int) -> TensorEntry:
    if not isinstance(raw, dict):
        raise _fail(path, f"expected an object with dtype/shape/data_offsets, got {type(raw).__name__}", name)
    missing = _ENTRY_KEYS - raw.keys()
    if missing:
        raise _fail(path, f"missing field(s) {sorted(missing)}", name)
    extra = raw.keys() - _ENTRY_KEYS
    if extra:
        raise _fail(path, f"unknown field(s) {sorted(extra)}; expected only dtype, shape, data_offsets", name)
    dtype, shape, offsets = raw["dtype"], raw["shape"], raw["data_offsets"]
    if not isinstance(dtype, str):
        raise _fail(path, f"dtype must be a string, got {dtype!r}", name)
    if dtype in UNSUPPORTED_DTYPES:
        raise _fail(path, f"dtype {dtype} has no torch equivalent; supported: {', '.join(DTYPES)}", name)
    if dtype not in DTYPES:
        raise _fail(path, f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}", name)
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        raise _fail(path, f"shape must be a list of non-negative integers, got {shape!r}", name)
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_uint(o) for o in offsets):
        raise _fail(path, f"data_offsets must be [begin, end] non-negative integers, got {offsets!r}", name)
    begin, end = offsets
    if begin > end:
        raise _fail(path, f"data_offsets [{begin}, {end}] run backwards", name)
    if end > data_len:
        raise _fail(
            path,
            f"data_offsets [{begin}, {end}] run past the end of the file: the data section holds "
            f"{data_len} bytes (file truncated?)",
            name,
        )
    bits = math.prod(shape) * DTYPES[dtype][0]
    if bits % 8:
        raise _fail(path, f"{dtype} {shape} is {bits} bits, not a whole number of bytes", name)
    if dtype == "F4" and (not shape or shape[-1] % 2):
        raise _fail(path, f"F4 {shape} must have an even last dim (torch packs two values per element)", name)
    if bits // 8 != end - begin:
        raise _fail(
            path,
            f"{dtype} {shape} needs {bits // 8} bytes but data_offsets [{begin}, {end}] hold {end - begin}",
            name,
        )
    return TensorEntry(name, path, dtype, tuple(shape), data_start + begin, data_start + end)


def parse_header(path: str, prefix: bytes, file_size: int, header: bytes | None = None) -> tuple:
    """Validate a header; returns (data_start, metadata, entries sorted by offset).

    `prefix` is the first 8 bytes of the file; `header` the N bytes after it (None: not read yet,
    only the length is checked and (None, ...) comes back for the caller to read and call again).
    """
    if file_size < 8 or len(prefix) < 8:
        raise _fail(path, f"file is {file_size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", prefix[:8])
    if n < 2:
        raise _fail(path, f"header length {n} is too small for a JSON object")
    if n > MAX_HEADER_BYTES:
        raise _fail(path, f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit (corrupt file?)")
    if 8 + n > file_size:
        raise _fail(path, f"header length {n} runs past the end of the {file_size}-byte file (truncated?)")
    if header is None:
        return None, None, None
    if len(header) != n:
        raise _fail(path, f"file ended inside the header: expected {n} bytes, read {len(header)}")
    try:
        text = header.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(path, f"header is not valid UTF-8 ({exc})") from None
    try:
        doc = json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise _fail(path, f"header is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _fail(path, f"header must be a JSON object, got {type(doc).__name__}")
    data_start = 8 + n
    data_len = file_size - data_start
    metadata = doc.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _fail(path, f"__metadata__ must map strings to strings, got {metadata!r:.200}")
    for text_value in (*doc, *metadata, *metadata.values()):
        try:
            text_value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate escape: valid JSON text, not a valid string
            raise _fail(path, f"header string {text_value!r} is not valid Unicode") from None
    entries = [_check_entry(path, name, raw, data_len, data_start) for name, raw in doc.items()]
    entries.sort(key=lambda e: (e.begin, e.end))
    offset, previous = data_start, None
    for entry in entries:
        if entry.begin != offset:
            rel = (entry.begin - data_start, entry.end - data_start)
            what = (
                f"leaves a gap of {entry.begin - offset} bytes after {previous!r}"
                if entry.begin > offset
                else f"overlaps {previous!r}"
            )
            raise _fail(path, f"data_offsets {list(rel)} {what} (tensors must tile the data section)", entry.name)
        offset = entry.end
        previous = entry.name
    if offset != file_size:
        raise _fail(path, f"{file_size - offset} trailing bytes after the last tensor (data section not covered)")
    return data_start, metadata, tuple(entries)


def read_safetensors_header(path: str | os.PathLike) -> SafetensorsFile:
    """Read and validate one file's header (two small reads; no tensor data)."""
    path = os.path.abspath(os.fspath(path))
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            prefix = f.read(8)
            parse_header(path, prefix, st.st_size)
            (n,) = struct.unpack("<Q", prefix)
            header = f.read(n)
    except FileNotFoundError:
        raise CheckpointFormatError(f"{path}: no such checkpoint file", file=path) from None
    except IsADirectoryError:
        raise CheckpointFormatError(f"{path}: expected a .safetensors file, got a directory", file=path) from None
    data_start, metadata, entries = parse_header(path, prefix, st.st_size, header)
    return SafetensorsFile(path, st.st_size, st.st_mtime_ns, data_start, metadata, entries)
