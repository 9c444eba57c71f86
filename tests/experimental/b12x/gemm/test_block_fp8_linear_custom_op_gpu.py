"""block_fp8_linear's custom op on the GPU (-m gpu): `run` inside torch.compile(fullgraph=True) (inductor) gives the
eager call's bits, the plan's scratch NaN-poisoned before each call, in both output modes, with and without bias,
and keeps doing so when the compiled function is called again with new inputs and new token counts (decode and
tiled buckets, then back). The recorded graphs hold the op, so inductor compiled it rather than falling back to
eager. First run: an H100, session 47 (4 passed). `quantize_input` on its own compiles to its op and gives the
oracle's bytes and scales at every token count (session 48)."""

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib import quant as Q

from .test_block_fp8_linear_custom_op import _poison
from .test_block_fp8_linear_custom_op import _prepared as _prepared_on

pytestmark = pytest.mark.gpu

BF = b12x.gemm.block_fp8_linear
OP = "b12x.block_fp8_linear_run_.default"
N, K = 1024, 2048
TOKENS = (7, 64, 129, 200, 7)  # decode buckets, tiled buckets, and a first shape again


def _prepared(mode):
    return _prepared_on("cuda", max_tokens=256, k=K, n=N, output_mode=mode)


def _inductor_recording(graphs):
    def backend(gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        graphs.append(gm)
        return compile_fx(gm, example_inputs)

    return backend


@pytest.mark.parametrize("mode", ["scratch", "new"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_compiled_run_equals_eager(mode, with_bias):
    """mode "scratch" calls run(x, w, plan=p, bias=b); mode "new" calls run(binding=bind(...)) in the region."""
    g = torch.Generator(device="cuda").manual_seed(torch.seed())
    wq, ws = Q.quantize_block_fp8_weight(torch.randn(N, K, device="cuda", generator=g) * 0.02)
    w = BF.pack_weight(wq, ws)
    bias = torch.randn(N, device="cuda", generator=g).to(torch.bfloat16) if with_bias else None
    p = _prepared(mode)

    def step(x):
        if mode == "scratch":
            y = BF.run(x, w, plan=p, bias=bias)
        else:
            y = BF.run(binding=BF.bind(p, source=x, packed_weight=w, bias=bias))
        return y, y.float().sum(dim=-1)

    torch._dynamo.reset()
    graphs = []
    compiled = torch.compile(step, fullgraph=True, backend=_inductor_recording(graphs))
    for call, t in enumerate(TOKENS):
        x = (torch.randn(t, K, device="cuda", generator=g) * 3).to(torch.bfloat16)
        _poison(p)
        want_y, want_sum = step(x)
        want_y = want_y.clone()  # mode "scratch": a view of the plan's scratch, poisoned next
        torch.cuda.synchronize()
        assert not torch.isnan(want_y.float()).any(), f"call {call} (T={t}): eager left rows unwritten"
        _poison(p)
        got_y, got_sum = compiled(x)
        torch.cuda.synchronize()
        assert got_y.shape == (t, N) and got_y.dtype == torch.bfloat16
        assert not torch.isnan(got_y.float()).any(), f"call {call} (T={t}): unwritten rows"
        assert torch.equal(got_y, want_y), f"call {call} (T={t})"  # the op's writes, bitwise
        torch.testing.assert_close(got_sum, want_sum)  # inductor's reduction of them: its own summation order
        if mode == "scratch":
            assert got_y.data_ptr() != p.state.scratch["output"].data_ptr()
    targets = [str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
    assert graphs and targets.count(OP) == len(graphs), targets  # one op per graph, no graph break


def test_compiled_quantize_input_equals_the_oracle():
    g = torch.Generator(device="cuda").manual_seed(torch.seed())
    p = _prepared("new")
    graphs = []
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda x: BF.quantize_input(x, plan=p), fullgraph=True, backend=_inductor_recording(graphs)
    )
    for t in TOKENS:
        x = (torch.randn(t, K, device="cuda", generator=g) * 3).to(torch.bfloat16)
        x[0, :128] = 0  # an all-zero block
        q, sc = Q.quantize_block_fp8_act(x)
        values, scales = compiled(x)
        torch.cuda.synchronize()
        assert torch.equal(values, q.view(torch.uint8)) and torch.equal(scales, sc), t
    targets = [str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
    assert graphs and targets.count("b12x.block_fp8_linear_quantize_input_.default") == len(graphs), targets
