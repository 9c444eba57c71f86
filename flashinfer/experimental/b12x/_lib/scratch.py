"""Scratch (workspace) buffers: specs, one aligned arena, and bind-time checks.

A plan declares its workspace as `ScratchBufferSpec`s sized from capacities. PreparationSession
allocates one uint8 arena per plan at fixed capacity and carves every buffer from it at a 1 KiB
aligned offset, so the addresses are stable for the life of the plan (CUDA graphs replay them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALIGN = 1024  # bytes; covers 128-byte TMA/cp.async alignment and keeps buffers on separate lines

_ITEMSIZE = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e8m0fnu": 1,
}


def dtype_name(dtype) -> str:
    """'bfloat16' for torch.bfloat16 or 'bfloat16'; stdlib only (no torch import)."""
    name = dtype if isinstance(dtype, str) else str(dtype)
    return name.removeprefix("torch.")


@dataclass(frozen=True)
class ScratchBufferSpec:
    """One workspace buffer: a name unique within its plan, a static shape, a dtype, a device.

    dtype is a torch dtype or its name; device is a string ("cuda:0", "cpu") or torch.device.
    """

    name: str
    shape: tuple[int, ...]
    dtype: object
    device: object = "cuda"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ScratchBufferSpec.name must be a non-empty str, got {self.name!r}")
        shape = tuple(self.shape)
        if any(not isinstance(d, int) or d < 0 for d in shape):
            raise ValueError(f"ScratchBufferSpec {self.name!r}: shape must be ints >= 0, got {shape}")
        object.__setattr__(self, "shape", shape)
        if dtype_name(self.dtype) not in _ITEMSIZE:
            raise ValueError(f"ScratchBufferSpec {self.name!r}: unsupported dtype {self.dtype!r}")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[dtype_name(self.dtype)]

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True)
class ArenaLayout:
    """Byte offsets of each spec inside one arena; `total` is the arena size in bytes."""

    offsets: dict
    total: int


def _align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def layout(specs) -> ArenaLayout:
    """Place `specs` back to back at ALIGN-byte offsets (names must be unique)."""
    offsets: dict[str, int] = {}
    cursor = 0
    for spec in specs:
        if spec.name in offsets:
            raise ValueError(f"duplicate scratch buffer name {spec.name!r}")
        offsets[spec.name] = cursor
        cursor = _align(cursor + max(spec.nbytes, 1))
    return ArenaLayout(offsets=offsets, total=cursor)


def carve(arena, specs, arena_layout: ArenaLayout | None = None) -> dict:
    """Views of `arena` (a 1-D uint8 torch tensor) for each spec, at the layout's offsets."""
    import torch

    lay = arena_layout or layout(specs)
    if arena.dtype != torch.uint8 or arena.dim() != 1 or not arena.is_contiguous():
        raise ValueError(f"arena must be a contiguous 1-D uint8 tensor, got {arena.dtype} {tuple(arena.shape)}")
    if arena.numel() < lay.total:
        raise ValueError(f"arena holds {arena.numel()} bytes, the layout needs {lay.total}")
    if arena.data_ptr() % ALIGN:
        raise ValueError(f"arena must start {ALIGN}-byte aligned, got address {arena.data_ptr():#x}")
    views = {}
    for spec in specs:
        start = lay.offsets[spec.name]
        raw = arena[start : start + spec.nbytes]
        views[spec.name] = raw.view(getattr(torch, dtype_name(spec.dtype))).view(spec.shape)
    return views


def allocate_arena(specs, device):
    """One aligned uint8 arena for `specs` on `device` (over-allocates ALIGN bytes to align it)."""
    import torch

    lay = layout(specs)
    raw = torch.empty(lay.total + ALIGN, dtype=torch.uint8, device=device)
    skip = (-raw.data_ptr()) % ALIGN
    return raw[skip : skip + lay.total], lay


def check_buffer(name: str, tensor, *, shape, dtype, device) -> None:
    """Bind-time check of a caller-provided buffer; raises ValueError naming `name`."""
    import torch

    want_dtype = getattr(torch, dtype_name(dtype))
    want_shape = tuple(shape)
    problems = []
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype != want_dtype:
        problems.append(f"dtype {want_dtype}")
    if tuple(tensor.shape) != want_shape:
        problems.append(f"shape {list(want_shape)}")
    if torch.device(device) != tensor.device and not (
        torch.device(device).type == tensor.device.type and torch.device(device).index is None
    ):
        problems.append(f"device {device}")
    if not tensor.is_contiguous():
        problems.append("contiguous")
    if problems:
        raise ValueError(
            f"{name} must be {', '.join(problems)}; got {tensor.dtype} {list(tensor.shape)} on "
            f"{tensor.device}{'' if tensor.is_contiguous() else ' (non-contiguous)'}"
        )
