"""Small generated safetensors checkpoints for the loader tests (every dtype, several shards, an index)."""

from __future__ import annotations

import json
import os

import torch
from safetensors.torch import save_file


def _bits(shape, dtype, g) -> torch.Tensor:
    """Random bit patterns of `dtype` (every encoding, NaNs included, for bitwise checks)."""
    nbytes = torch.Size(shape).numel() * dtype.itemsize
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


def all_dtype_tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = {
        "model.embed.weight": torch.randn(257, 48, generator=g).to(torch.bfloat16),
        "model.layers.0.attn.q.weight": torch.randn(96, 48, generator=g).to(torch.bfloat16),
        "model.layers.0.attn.q.bias": torch.randn(96, generator=g).to(torch.float16),
        "model.layers.0.mlp.up.weight": torch.randn(33, 48, generator=g).to(torch.float8_e4m3fn),
        "model.layers.0.mlp.up.weight_scale": torch.rand(33, generator=g),
        "model.layers.0.mlp.down.weight": torch.randn(48, 40, generator=g).to(torch.float8_e5m2),
        "model.layers.0.experts.w13_packed": torch.randint(0, 256, (16, 24), dtype=torch.uint8, generator=g),
        "model.layers.0.experts.w13_fp4": _bits((16, 12), torch.float4_e2m1fn_x2, g),
        "model.layers.0.experts.w13_scale_e8m0": _bits((16, 3), torch.float8_e8m0fnu, g),
        "model.layers.0.fnuz_a": _bits((5, 3), torch.float8_e4m3fnuz, g),
        "model.layers.0.fnuz_b": _bits((5, 3), torch.float8_e5m2fnuz, g),
        "model.layers.1.f64": torch.randn(7, 3, generator=g, dtype=torch.float64),
        "model.layers.1.i64": torch.randint(-(2**62), 2**62, (9,), generator=g),
        "model.layers.1.i32": torch.randint(-(2**31), 2**31 - 1, (4, 5), generator=g, dtype=torch.int32),
        "model.layers.1.i16": torch.randint(-(2**15), 2**15 - 1, (11,), generator=g, dtype=torch.int16),
        "model.layers.1.i8": torch.randint(-128, 127, (13,), generator=g, dtype=torch.int8),
        "model.layers.1.u16": _bits((6,), torch.uint16, g),
        "model.layers.1.u32": _bits((6,), torch.uint32, g),
        "model.layers.1.u64": _bits((6,), torch.uint64, g),
        "model.layers.1.mask": torch.rand(3, 7, generator=g) > 0.5,
        "model.layers.1.c64": torch.randn(4, generator=g, dtype=torch.complex64),
        "model.layers.1.scalar": torch.tensor(2.5),
        "model.layers.1.empty": torch.zeros(0, 4),
        "model.norm.weight": torch.randn(48, generator=g),
        "lm_head.weight": torch.randn(257, 48, generator=g).to(torch.bfloat16),
    }
    return t


def write_checkpoint(directory, tensors: dict[str, torch.Tensor], shards: int = 3, index: bool = True) -> list[str]:
    """Split `tensors` round-robin over `shards` files (plus model.safetensors.index.json)."""
    os.makedirs(directory, exist_ok=True)
    names = list(tensors)
    parts = [names[i::shards] for i in range(shards)]
    paths, weight_map = [], {}
    for i, part in enumerate(parts):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n].contiguous() for n in part}, os.path.join(directory, fname), {"format": "pt"})
        paths.append(os.path.join(directory, fname))
        weight_map.update({n: fname for n in part})
    if index:
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    return paths


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))
