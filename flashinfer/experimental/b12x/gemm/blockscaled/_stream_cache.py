"""The stream-layout copies of NVFP4 weights (`_shared/stream_layout`), made once per weight and kc.

`stream_weight(values, scales, n, k, kc, order, major)` returns the packed bytes as uint8 [n, 9k/16] on the
weight's device; the first call packs (allocates and runs torch permutations: not during CUDA-graph
capture, so warm with `prewarm` or one eager call first), later calls hit the cache. An entry lives as
long as the `values` tensor object it was made from (a weak reference drops it with the weight); a
new scales tensor, kc, code order or slab order makes a new entry. Costs 9/16 byte per weight value on top of the weight.
"""

from __future__ import annotations

import weakref

import torch

from .._shared import stream_layout as SL

_CACHE: dict = {}  # id(values) -> (weakref(values), {(scales ptr, kc): packed})


def _drop(key):
    _CACHE.pop(key, None)


def stream_weight(
    values: torch.Tensor, scales: torch.Tensor, n: int, k: int, kc: int, order: str = "fp4", major: str = "tile"
) -> torch.Tensor:
    key = id(values)
    entry = _CACHE.get(key)
    if entry is None or entry[0]() is not values:
        entry = _CACHE[key] = (weakref.ref(values, lambda _, key=key: _drop(key)), {})
    sub = (scales.data_ptr(), kc, order, major)
    packed = entry[1].get(sub)
    if packed is None:
        if values.is_cuda and torch.cuda.is_current_stream_capturing():
            raise ValueError(
                "the stream decode kernel's weight layout is made on first use, which cannot happen during "
                "CUDA-graph capture: run the GEMM once (or prewarm the weight) before capturing"
            )
        packed = entry[1][sub] = SL.pack_stream(values, scales, n, k, kc, order, major).reshape(n, -1)
    return packed


def clear() -> None:
    _CACHE.clear()
