"""attention.paged on the GPU (-m gpu) with bad live values under CUDA-graph replay, where bind's value checks
cannot run: page ids outside the cache and lengths past the page table's width make wrong rows (the kernels clamp
the page id into the cache and the column into the table), never an illegal memory access; a replay with good
values afterwards equals the reference again (the context survived). Decode (both dtypes) and extend."""

import pytest
import torch

from .paged_cases import make_case
from .test_paged_extend_gpu import caps_for as extend_caps
from .test_paged_gpu import DEV, FP8, caps_for, paged, poison, prepared

pytestmark = pytest.mark.gpu


def _bad_replays(plan, case, binding, lens, table):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        paged.run(binding=binding)
    good_lens, good_table = lens.clone(), table.clone()
    pages = case.k_cache.shape[0]
    width = table.shape[1]
    for bad in (2**30, -5, pages):  # ids far past the cache, negative, one past its end
        table.copy_(good_table)
        table[:, 1:] = bad
        graph.replay()
        torch.cuda.synchronize()
    table.copy_(good_table)
    lens.fill_(width * case.k_cache.shape[1] + 1000)  # every request past its row of the table
    graph.replay()
    torch.cuda.synchronize()
    lens.copy_(good_lens)
    poison(plan)
    graph.replay()
    torch.cuda.synchronize()
    want, want_lse = paged.paged_attention_reference(
        case.q, case.k_cache, case.v_cache, good_table, good_lens, case.cu_seqlens_q,
        k_descale=case.k_descale, v_descale=case.v_descale,
    )  # fmt: skip
    torch.testing.assert_close(binding.out.float(), want.float(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(binding.lse, want_lse, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_decode_replays_with_bad_page_ids_and_lengths(kv_dtype):
    case = make_case([300, 40, 1000, 7], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=21)  # fmt: skip
    plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype))
    lens, table = case.cache_seqlens.clone(), case.page_table.clone()
    kw = dict(k_descale=case.k_descale, v_descale=case.v_descale) if case.k_cache.dtype == FP8 else {}
    binding = paged.bind(plan, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=table,
                         cache_seqlens=lens, **kw)  # fmt: skip
    paged.run(binding=binding)
    _bad_replays(plan, case, binding, lens, table)


def test_extend_replays_with_bad_page_ids():
    case = make_case([300, 40, 1000], [17, 3, 64], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     device=DEV, seed=22)  # fmt: skip
    prepared_plan = prepared(extend_caps(case))
    lens, table = case.cache_seqlens.clone(), case.page_table.clone()
    binding = paged.bind(prepared_plan, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=table,
                         cache_seqlens=lens, cu_seqlens_q=case.cu_seqlens_q)  # fmt: skip
    paged.run(binding=binding)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        paged.run(binding=binding)
    good = table.clone()
    for bad in (2**30, -5, case.k_cache.shape[0]):
        table.copy_(good)
        table[:, 1:] = bad
        graph.replay()
        torch.cuda.synchronize()
    table.copy_(good)
    graph.replay()
    torch.cuda.synchronize()
    want, _ = paged.paged_attention_reference(
        case.q, case.k_cache, case.v_cache, good, lens, case.cu_seqlens_q
    )  # fmt: skip
    torch.testing.assert_close(binding.out.float(), want.float(), rtol=2e-2, atol=2e-2)
