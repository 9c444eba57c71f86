"""GPU tier: the quantizers planned as programmatic dependents (`nvfp4.plan(..., pdl=True)`,
`MxFp8Query(pdl=True)`) give the oracle's bits, eagerly and replayed from a CUDA graph, and a PDL
quantizer reads what the PDL kernel before it wrote (its griddepcontrol.wait is what orders them).

The chain: the MXFP8 quantizer (PDL) writes its E4M3 values; the NVFP4 quantizer (PDL) quantizes those
bytes viewed as fp16 (K/2 halves a row: any 16-bit pattern, NaN and Inf included, has defined bits). A
memset poisons the values before each link, so an NVFP4 run that started before the MXFP8 writes landed
would quantize the poison.
"""

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib.quant import quantize_mxfp8, quantize_nvfp4, swizzle_scales, swizzled_size

pytestmark = pytest.mark.gpu

nvfp4 = b12x.quantization.nvfp4
mxfp8 = b12x.quantization.mxfp8
POISON = 0xFF


def _x(m, k, seed, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    scale = 10 ** ((torch.rand(m, k // 16, 1, device="cuda", generator=g) - 0.5) * 6)
    return (torch.randn(m, k // 16, 16, device="cuda", generator=g) * scale).view(m, k).to(dtype)


def _nvfp4_want(x, gs):
    packed, scales = quantize_nvfp4(x, gs)
    return packed, swizzle_scales(scales, 0).view(torch.uint8)


@pytest.mark.parametrize("m", [1, 7, 128, 4097, 8192])
@pytest.mark.parametrize("k", [64, 4096, 7168])
def test_nvfp4_pdl_bits(session, m, k):
    # capacity 8192: from 1024 live rows the dispatch's mid (preload) and large tiles run, both PDL
    p = nvfp4.plan(8192, k, pdl=True)
    session.prepare([p])
    assert all(args[2].pdl for _, args in p.state.kernels)
    out = nvfp4.allocate_outputs(p)
    for seed, gs in ((m * 7 + k, 1.0), (m * 7 + k + 1, None)):
        x = _x(m, k, seed)
        g = torch.tensor([float(448 * 6 / x.float().abs().amax()) if gs is None else gs], device="cuda")
        out.packed.fill_(POISON)
        out.scales.view(torch.uint8).fill_(POISON)
        nvfp4.run(plan=p, x=x, global_scale=g, outputs=out)
        packed, scales = out.view(m)
        want_packed, want_scales = _nvfp4_want(x, g)
        assert torch.equal(packed, want_packed) and torch.equal(scales.view(torch.uint8), want_scales)
        assert (out.packed[m:] == POISON).all()


@pytest.mark.parametrize("m", [1, 16, 4096])
@pytest.mark.parametrize("k", [64, 7168])
def test_mxfp8_pdl_bits(session, m, k):
    p = mxfp8.plan(mxfp8.MxFp8Query(k, "bfloat16", 4096, pdl=True))
    session.prepare([p])
    x = _x(m, k, m + k)
    values = torch.full((m, k), POISON, dtype=torch.uint8, device="cuda")
    rows = torch.full((m, k // 32), POISON, dtype=torch.uint8, device="cuda")
    mma = torch.full((swizzled_size(m, k // 32),), 127, dtype=torch.uint8, device="cuda")
    mxfp8.quantize_rows(x, values, rows, mma, plan=p)
    want_values, want_rows = quantize_mxfp8(x)
    assert torch.equal(values, want_values.view(torch.uint8)) and torch.equal(rows, want_rows.view(torch.uint8))
    assert torch.equal(mma, swizzle_scales(want_rows, 127).view(torch.uint8).reshape(-1))


@pytest.mark.parametrize("m, k", [(1, 4096), (16, 7168), (4096, 4096)])
def test_pdl_chain_reads_the_previous_kernels_writes(session, m, k):
    mp = mxfp8.plan(mxfp8.MxFp8Query(k, "bfloat16", m, pdl=True))
    np_ = nvfp4.plan(m, k // 2, invocation=torch.float16, pdl=True)
    session.prepare([mp, np_])
    values = torch.empty(m, k, dtype=torch.uint8, device="cuda")
    rows = torch.empty(m, k // 32, dtype=torch.uint8, device="cuda")
    mma = torch.empty(swizzled_size(m, k // 32), dtype=torch.uint8, device="cuda")
    out = nvfp4.allocate_outputs(np_)
    gs = torch.tensor([0.5], device="cuda")
    xs = [_x(m, k, 100 + i) for i in range(3)]
    x = torch.empty_like(xs[0])

    def step():
        values.fill_(POISON)  # a plain kernel between: the PDL quantizer after it must see its bytes too
        mxfp8.quantize_rows(x, values, rows, mma, plan=mp)
        nvfp4.run(plan=np_, x=values.view(torch.float16), global_scale=gs, outputs=out)

    def check(src):
        want_values, _ = quantize_mxfp8(src)
        want_packed, want_scales = _nvfp4_want(want_values.view(torch.uint8).view(torch.float16), gs)
        assert torch.equal(out.packed[:m], want_packed)
        assert torch.equal(out.scales.view(torch.uint8)[: want_scales.numel()], want_scales)

    x.copy_(xs[0])
    step()
    torch.cuda.synchronize()
    check(xs[0])
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm the side stream once (allocations outside capture)
        with torch.cuda.graph(graph, stream=side):
            for _ in range(4):  # four chained links a replay: PDL edges between them
                step()
    torch.cuda.current_stream().wait_stream(side)
    for src in xs[1:]:
        x.copy_(src)
        out.packed.fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        check(src)
