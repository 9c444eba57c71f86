"""moe.fused_moe's torch custom op (`torch.ops.b12x.moe_fused_moe_run_`): under torch.compile(fullgraph=True)
`run(binding=bind(...))` traces to one op node with no graph break and writes what the eager call writes, bit for
bit, on the CPU's reference backend (nvfp4 / w4a16 / w4a8_mx recipes, int32 and int64 ids), into a new output or
the caller's (poisoned with NaN first); aot_eager (AOTAutograd's functionalization) keeps those writes. The experts
travel as their tensors, so two layers' weights share one graph. A binding made eagerly is refused inside the
compiled region, and the op passes torch.library.opcheck."""

import re

import pytest
import torch

from b12x.moe import fused_moe as fm
from flashinfer.experimental.b12x.moe.fused_moe import _ops
from tests.experimental.b12x.conftest import _compile_recording

from .moe_cases import activations, checkpoint, routing, weight_plan

pytestmark = [pytest.mark.contract, pytest.mark.usefixtures("quiet_cpu_reference")]

OP = "b12x.moe_fused_moe_run_.default"
T, K = 5, 2  # odd token count; E = 4, H = 64, I = 32 (`weight_plan`'s defaults)
NAN = float("nan")


def _layer(prepared, source="modelopt_nvfp4", mode="nvfp4", activation="silu", seed=0):
    wplan = weight_plan(source, activation)
    experts = fm.prepare_weights(plan=wplan, **checkpoint(wplan, seed=seed))
    p = prepared(fm.Caps(max_tokens=8, num_topk=K, device="cpu", weight_plan=wplan, quant_mode=mode))
    ids, w = routing(T, K, wplan.num_experts)
    return p, experts, activations(T, wplan.hidden_size), ids, w


def _compiled(step, *args, backend="eager"):
    got, ops = _compile_recording(step, *args, backend=backend)
    assert ops.count(OP) == 1, ops
    return got


def test_the_op_is_registered_with_its_schema():
    schema = str(torch.ops.b12x.moe_fused_moe_run_.default._schema)
    assert schema == (
        "b12x::moe_fused_moe_run_(SymInt handle, Tensor a, Tensor topk_weights, Tensor topk_ids, Tensor(a4!) output, "
        "Tensor w1_values, Tensor w1_scales, Tensor w1_alpha, Tensor w2_values, Tensor w2_scales, Tensor w2_alpha, "
        "Tensor? a1_gscale, Tensor? a2_gscale) -> ()"
    )


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize(
    "source, mode, activation, ids_dtype",
    [
        ("modelopt_nvfp4", "nvfp4", "silu", torch.int32),
        ("modelopt_nvfp4", "w4a16", "relu2", torch.int64),
        ("fp4_e8m0_k32", "w4a8_mx", "swiglu_oai", torch.int32),
    ],
)
def test_compiled_equals_eager(prepared, backend, source, mode, activation, ids_dtype):
    """The functional form (output=None): the compiled call returns a new tensor, the eager call's bits."""
    p, experts, a, ids, w = _layer(prepared, source, mode, activation)
    ids = ids.to(ids_dtype)
    want = fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids))

    def step(a):
        return fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids))

    got = _compiled(step, a, backend=backend)
    assert got.dtype == torch.bfloat16 and got.shape == (T, 64)
    assert torch.equal(got, want)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_the_caller_s_output_is_written(prepared, backend):
    p, experts, a, ids, w = _layer(prepared, seed=1)
    want = fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids))
    out = torch.full((T, 64), NAN, dtype=torch.bfloat16)

    def step(a):
        got = fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids, output=out))
        return got.float().sum()

    total = _compiled(step, a, backend=backend)
    assert torch.equal(out, want)
    torch.testing.assert_close(total, want.float().sum())


def test_two_layers_share_one_graph(prepared):
    """The experts are the compiled function's arguments: another layer's weights (same plan) give that layer's
    bits from the same graph, and every layer's op is one node."""
    p, experts, a, ids, w = _layer(prepared, seed=2)
    other = fm.prepare_weights(plan=experts.plan, **checkpoint(experts.plan, seed=3))
    want = [fm.run(binding=fm.bind(p, a=a, experts=e, topk_weights=w, topk_ids=ids)) for e in (experts, other)]
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def step(a, e):
        return fm.run(binding=fm.bind(p, a=a, experts=e, topk_weights=w, topk_ids=ids))

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    got = [compiled(a, e) for e in (experts, other)]
    assert all(torch.equal(g, x) for g, x in zip(got, want)) and not torch.equal(want[0], want[1])
    assert len(graphs) == 1


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_new_token_counts_reuse_the_compiled_call(prepared, backend):
    """T changes between calls (dynamo recompiles once, with a symbolic T): each call writes the eager bits into
    the caller's output, poisoned first; a T above max_tokens still raises bind's error, while tracing."""
    p, experts, *_ = _layer(prepared, seed=5)

    def step(a, ids, w, out):
        fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids, output=out))

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    for t in (5, 3, 8, 1):
        a, (ids, w) = activations(t, 64, seed=t), routing(t, K, 4, seed=t)
        want = fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids))
        out = torch.full((t, 64), NAN, dtype=torch.bfloat16)
        compiled(a, ids, w, out)
        assert torch.equal(out, want), f"T={t}"
    a, (ids, w) = activations(9, 64), routing(9, K, 4)
    with pytest.raises(Exception, match=re.escape("a has T = 9 tokens, above the caps' max_tokens = 8")):
        compiled(a, ids, w, torch.empty(9, 64, dtype=torch.bfloat16))


def test_empty_batch_compiles(prepared):
    p, experts, _, _, _ = _layer(prepared)
    a = torch.empty(0, 64, dtype=torch.bfloat16)
    ids, w = torch.empty(0, K, dtype=torch.int32), torch.empty(0, K)

    def step(a):
        return fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids))

    assert _compiled(step, a).shape == (0, 64)


def test_bad_shapes_raise_while_tracing(prepared):
    p, experts, a, ids, w = _layer(prepared)

    def step(a):
        return fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids[:, :1]))

    with pytest.raises(Exception, match=re.escape("topk_ids must be int32 (or int64) [5, 2], got")):
        _compile_recording(step, a)


def test_a_binding_made_eagerly_cannot_run_compiled(prepared):
    p, experts, a, ids, w = _layer(prepared)
    binding = fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids)

    def step(a):
        return fm.run(binding=binding) + a

    with pytest.raises(Exception, match=re.escape("a binding made outside torch.compile cannot run inside it")):
        _compile_recording(step, a)


def test_eager_bindings_are_not_traced(prepared):
    p, experts, a, ids, w = _layer(prepared)
    assert fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids).traced is False


@pytest.mark.parametrize("mode", ["nvfp4", "w4a16"])
def test_opcheck(prepared, mode):
    """torch.library.opcheck (schema, fake, autograd registration, AOT dispatch) on its own copies of the arguments;
    then the op called directly writes the eager result. w4a16 reads no activation scales: passed as None."""
    p, ex, a, ids, w = _layer(prepared, mode=mode, seed=4)
    out = torch.full((T, 64), NAN, dtype=torch.bfloat16)
    g1, g2 = (ex.a1_gscale, ex.a2_gscale) if mode == "nvfp4" else (None, None)
    u8 = torch.uint8
    args = (p.state.handle, a, w, ids, out, ex.w1_values, ex.w1_scales.view(u8), ex.w1_alpha, ex.w2_values,
            ex.w2_scales.view(u8), ex.w2_alpha, g1, g2)  # fmt: skip
    torch.library.opcheck(_ops.OP, args)
    _ops.OP(*args)
    assert torch.equal(out, fm.run(binding=fm.bind(p, a=a, experts=ex, topk_weights=w, topk_ids=ids)))
