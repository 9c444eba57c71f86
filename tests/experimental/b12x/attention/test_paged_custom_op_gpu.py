"""attention.paged's custom op on the GPU (-m gpu): `run(binding=bind(...))` inside torch.compile(fullgraph=True)
(inductor) gives the eager call's bits, its output buffers poisoned first, for decode (bf16 and fp8 KV with
descales) and extend, and keeps doing so when the compiled function is called again with new queries and new
lengths in the same buffers. Written in session 46 (no GPU then): first run staged in scripts/jobs/next_session.txt."""

import pytest
import torch

from .paged_cases import make_case
from .test_paged_extend_gpu import caps_for as extend_caps
from .test_paged_gpu import DEV, FP8, caps_for, paged, prepared

pytestmark = pytest.mark.gpu


def _check(plan, case, extend=False):
    lens, table = case.cache_seqlens.clone(), case.page_table.clone()
    kw = dict(k_cache=case.k_cache, v_cache=case.v_cache, page_table=table, cache_seqlens=lens)
    if extend:
        kw["cu_seqlens_q"] = case.cu_seqlens_q
    if case.k_cache.dtype == FP8:
        kw.update(k_descale=case.k_descale, v_descale=case.v_descale)
    out = torch.empty(case.q.shape, dtype=case.q.dtype, device=DEV)
    lse = torch.empty(case.q.shape[:2], dtype=torch.float32, device=DEV)

    def step(q):
        paged.run(binding=paged.bind(plan, q=q, output=out, lse=lse, **kw))
        return out.float().sum(dim=-1) + lse

    compiled = torch.compile(step, fullgraph=True)
    g = torch.Generator(device=DEV).manual_seed(torch.seed())
    for call in range(3):  # new queries (and shorter lengths from the second call) in the same buffers
        q = (torch.randn(case.q.shape, generator=g, device=DEV) * 2).to(case.q.dtype)
        if call:
            lens.copy_((case.cache_seqlens - call).clamp(min=1))
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        want = step(q)
        want_out, want_lse = out.clone(), lse.clone()
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        got = compiled(q)
        torch.cuda.synchronize()
        assert not torch.isnan(lse).any(), f"call {call}: unwritten rows"
        assert torch.equal(out, want_out) and torch.equal(lse, want_lse), f"call {call}"  # the op's writes, bitwise
        torch.testing.assert_close(got, want)  # inductor's reduction of them: its own summation order


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_compiled_decode_equals_eager(kv_dtype):
    case = make_case([300, 40, 1000, 7], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=31)  # fmt: skip
    _check(prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype)), case)


def test_compiled_extend_equals_eager():
    case = make_case([300, 40, 1000], [17, 3, 64], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     device=DEV, seed=32)  # fmt: skip
    _check(prepared(extend_caps(case)), case, extend=True)
