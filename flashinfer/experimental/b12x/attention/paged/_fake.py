"""Fake tensors of the runtime contract that the paged decode and extend kernels share, for compiling
on the CPU (`cute.compile` on fake tensors; shared symbols are checked for agreement by tvm-ffi at
each call): q, the paged K / V caches (fp8 KV travels as 16-bit words, two e4m3 values each), the
page table, out, lse, the sinks and the K / V descales; each kernel adds its own work tensors."""

from __future__ import annotations

from typing import NamedTuple

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_tensor

CUTE_DTYPES = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}


class PagedIO(NamedTuple):
    q: object
    k: object
    v: object
    page_table: object
    out: object
    lse: object
    sink: object
    k_descale: object
    v_descale: object
    batch: object  # the request count's symbol (the page table's rows), for the kernel's own tensors


def paged_io(q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size) -> PagedIO:
    fp8 = kv_dtype == "float8_e4m3fn"
    qt = CUTE_DTYPES[q_dtype]
    kvt = cutlass.Float16 if fp8 else qt
    de, dve = (head_dim // 2, head_dim_v // 2) if fp8 else (head_dim, head_dim_v)
    total_q, batch = cute.sym_int(), cute.sym_int()

    def s64():
        return cute.sym_int64(divisibility=8)

    def descale():
        return make_fake_tensor(
            Float32, (batch, num_kv_heads), stride=(cute.sym_int64(), cute.sym_int64()), assumed_align=4
        )

    kv_shape = (cute.sym_int(), page_size, num_kv_heads)
    return PagedIO(
        q=make_fake_tensor(qt, (total_q, num_q_heads, head_dim), stride=(s64(), s64(), 1), assumed_align=16),
        k=make_fake_tensor(kvt, (*kv_shape, de), stride=(s64(), s64(), s64(), 1), assumed_align=16),
        v=make_fake_tensor(kvt, (*kv_shape, dve), stride=(s64(), s64(), s64(), 1), assumed_align=16),
        page_table=make_fake_tensor(Int32, (batch, cute.sym_int()), stride=(cute.sym_int64(), 1), assumed_align=4),
        out=make_fake_tensor(qt, (total_q, num_q_heads, head_dim_v), stride=(s64(), s64(), 1), assumed_align=16),
        lse=make_fake_tensor(Float32, (total_q, num_q_heads), stride=(cute.sym_int64(), 1), assumed_align=4),
        sink=make_fake_compact_tensor(Float32, (num_q_heads,), assumed_align=4),
        k_descale=descale(),
        v_descale=descale(),
        batch=batch,
    )
