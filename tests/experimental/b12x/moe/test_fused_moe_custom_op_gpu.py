"""moe.fused_moe's custom op on the GPU (-m gpu): `run(binding=bind(...))` inside torch.compile(fullgraph=True)
(inductor) gives the eager call's bits, the output and the plan's intermediates NaN-poisoned before each call, for
an nvfp4 and a w4a16 (MXFP4 weights, int64 ids) layer, and keeps doing so when the compiled function is called
again with new inputs and new token counts (micro routing, the counting sort, other expert buckets, then back);
the functional form (output=None) too. The recorded graphs hold the op, so inductor compiled it rather than
falling back to eager. A binding made eagerly and a caller's scratch are refused inside the compiled region.
The CPU tier is test_fused_moe_custom_op.py. First run: an H100, session 47 (4 passed)."""

import re

import pytest
import torch

from b12x.moe import fused_moe as fm

from .test_fused_moe_gpu import SHAPES, build, inputs

pytestmark = pytest.mark.gpu

OP = "b12x.moe_fused_moe_run_.default"
NAN = float("nan")
# T * k = 40 and 8 routes (micro routing), 1600 (above micro_max_routes: the counting sort), then a first T again
TOKENS = (5, 64, 1, 200, 5)


def _inductor_recording(graphs):
    def backend(gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        graphs.append(gm)
        return compile_fx(gm, example_inputs)

    return backend


def _poison(p):
    """NaN in the plan's FC1 intermediate and a dequant bucket's operands (`test_fused_moe_gpu.run_poisoned`)."""
    s = p.state.scratch
    for name in ("c1", "a1_deq", "a2_deq"):
        if name in s:
            s[name].fill_(NAN)


def _has_op(graphs):
    return bool(graphs) and all(OP in [str(n.target) for n in gm.graph.nodes] for gm in graphs)


@pytest.mark.parametrize(
    "mode, source, act, ids_dtype",
    [("nvfp4", "modelopt_nvfp4", "silu", torch.int32), ("w4a16", "fp4_e8m0_k32", "relu2", torch.int64)],
)
def test_compiled_equals_eager(mode, source, act, ids_dtype):
    shape = SHAPES[0]
    e, k, h, _ = shape
    p, experts = build(mode, source, act, shape, max(TOKENS))

    def step(a, ids, w, out):
        fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids, output=out))
        return out.float().sum(dim=-1)

    graphs = []
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend=_inductor_recording(graphs))
    for call, t in enumerate(TOKENS):
        a, ids, w = inputs(t, k, e, h, seed=100 + call, ids_dtype=ids_dtype)
        out = torch.full_like(a, NAN)
        _poison(p)
        want = step(a, ids, w, out)
        want_out = out.clone()
        out.fill_(NAN)
        _poison(p)
        got = compiled(a, ids, w, out)
        torch.cuda.synchronize()
        assert not torch.isnan(want_out.float()).any(), f"call {call} (T={t}): eager left rows unwritten"
        assert torch.equal(out, want_out), f"call {call} (T={t})"  # the op's writes, bitwise
        torch.testing.assert_close(got, want)  # inductor's reduction of them: its own summation order
    assert _has_op(graphs), [str(n.target) for gm in graphs for n in gm.graph.nodes]


def test_the_functional_form_equals_eager():
    shape = SHAPES[0]
    e, k, h, _ = shape
    p, experts = build("nvfp4", "modelopt_nvfp4", "swiglu_oai", shape, 64)

    def step(a, ids, w):
        return fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids))

    graphs = []
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend=_inductor_recording(graphs))
    for call, t in enumerate((7, 64, 7)):
        a, ids, w = inputs(t, k, e, h, seed=200 + call)
        _poison(p)
        want = step(a, ids, w).clone()
        _poison(p)
        got = compiled(a, ids, w)
        torch.cuda.synchronize()
        assert got.shape == a.shape and got.dtype == torch.bfloat16
        assert not torch.isnan(want.float()).any() and torch.equal(got, want), f"call {call} (T={t})"
    assert _has_op(graphs)


def test_an_eager_binding_and_a_caller_s_scratch_are_refused():
    shape = SHAPES[0]
    e, k, h, _ = shape
    p, experts = build("w4a16", "modelopt_nvfp4", "silu", shape, 16)
    a, ids, w = inputs(7, k, e, h, seed=1)
    kw = dict(experts=experts, topk_weights=w, topk_ids=ids)
    binding = fm.bind(p, a=a, **kw)

    def eager_binding(a):
        return fm.run(binding=binding) + a

    def caller_scratch(a):
        return fm.run(binding=fm.bind(p, a=a, scratch=dict(p.state.scratch), **kw))

    for fn, message in (
        (eager_binding, "a binding made outside torch.compile cannot run inside it"),
        (caller_scratch, "scratch must be None under torch.compile"),
    ):
        torch._dynamo.reset()
        with pytest.raises(Exception, match=re.escape(message)):
            torch.compile(fn, fullgraph=True, backend="eager")(a)
