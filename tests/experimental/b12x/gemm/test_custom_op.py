"""gemm's torch custom ops (`torch.ops.b12x.gemm_mm_`, and mxfp8's `quantization_mxfp8_quantize_rows_` under
mxfp8_linear): under torch.compile(fullgraph=True) every entry point (mm with pairs, packed Weights, 16-bit
activations, epilogues, norm, rope, batches, a plan, out=) traces to the op, with no graph break, and gives what the
eager call gives, bit for bit, on the CPU's reference backend; the op passes torch.library.opcheck."""

import pytest
import torch

import b12x
from flashinfer.experimental.b12x.gemm.blockscaled import _ops
from flashinfer.experimental.b12x.gemm.blockscaled._epilogue import RopeAppend, RopeLayout
from flashinfer.experimental.b12x.preparation.plan import PlanNotPreparedError
from tests.experimental.b12x.conftest import _compile_recording

pytestmark = [pytest.mark.contract, pytest.mark.usefixtures("quiet_cpu_reference")]

G = b12x.gemm.blockscaled
MX = b12x.gemm.mxfp8_linear
TF = b12x.gemm.tensor_fp8_linear


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _x(m, k, seed=0):
    return (torch.randn(m, k, generator=_gen(seed)) * 2).bfloat16()


def _w(n, k, seed=1):
    return torch.randn(n, k, generator=_gen(seed)) * 0.05


def _compiled(fn, *args, backend="eager"):
    """fn compiled with fullgraph; returns (outputs, the b12x ops in its graph)."""
    got, targets = _compile_recording(fn, *args, backend=backend)
    return got, [t for t in targets if "b12x" in t]


def _traced_graph(fn, *args):
    """dynamo's graph of fn(*args) as a no-argument replay over the same input tensors (mutate them to change the
    inputs): the graph alone, without the guards that would retrace it."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, fullgraph=True, backend=keep)(*args)
    ((gm, inputs),) = graphs
    return lambda: gm(*inputs)


def _batch_last(t):
    """[L, rows, K] batch-first storage as mm's batch-last [rows, K, L] view."""
    return t.movedim(0, -1)


def _case(name):
    """(args, fn) of one entry point: fn(*args) makes the call (weights packed outside it, as a model does)."""
    if name == "w4a16":
        w = G.pack_weight(_w(48, 256), recipe="nvfp4")
        return (_x(5, 256),), lambda x: G.w4a16(x, w)
    if name == "nvfp4_pair":
        w = G.pack_weight(_w(32, 256), recipe="nvfp4")
        a = G.pack_weight(_x(3, 256, 4).float(), recipe="nvfp4")  # quantized activations as a (values, scales) pair
        return (_x(3, 32),), lambda x: G.mm((a.values, a.scales), w, alpha=0.5) + x
    if name == "alpha_tensor":
        w = G.pack_weight(_w(32, 128), recipe="mxfp8")
        return (_x(4, 128), torch.tensor([0.25])), lambda x, a: G.mm(x, w, alpha=a, c_dtype=torch.float32)
    if name == "residual":
        w = G.pack_weight(_w(64, 128), recipe="nvfp4")
        return (_x(4, 128), _x(4, 64, 7)), lambda x, r: G.mm(x, w, epilogue="residual", residual=r)
    if name == "silu_mul_norm":
        w = G.pack_weight(_w(64, 128), recipe="nvfp4")
        return (_x(2, 128), _x(1, 128, 9)[0]), lambda x, g: G.mm(x, w, epilogue="silu_mul", norm_weight=g)
    if name == "out_given":
        w = G.pack_weight(_w(32, 128), recipe="fp8_block")
        out = torch.full((4, 32), float("nan"), dtype=torch.bfloat16)
        return (_x(4, 128), out), lambda x, out: G.mm(x, w, out) * 1
    if name == "batched":
        b = _batch_last(torch.randn(2, 16, 64, generator=_gen(2)).to(torch.float8_e4m3fn))
        sb = torch.tensor([0.5])
        a = _batch_last(torch.randn(2, 3, 64, generator=_gen(3)).to(torch.float8_e4m3fn))
        return (a, torch.tensor([1.5])), lambda a, sa: G.mm((a, sa), (b, sb))
    if name == "mxfp8_linear":
        w = MX.pack_weight(_w(48, 256))
        return (_x(5, 256),), lambda x: MX.mm(x, w)
    assert name == "tensor_fp8_linear"
    w = TF.pack_weight(_w(48, 256), input_scale=0.05)
    return (_x(5, 256),), lambda x: TF.mm(x, w)


CASES = ("w4a16", "nvfp4_pair", "alpha_tensor", "residual", "silu_mul_norm", "out_given", "batched", "mxfp8_linear")
CASES += ("tensor_fp8_linear",)


def _bits(t):
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t


@pytest.mark.parametrize("name", CASES)
def test_entry_points_compile_to_the_op_and_match_eager(name):
    args, fn = _case(name)
    eager_args = [a.clone() for a in args]
    want = fn(*eager_args)
    got, ops = _compiled(fn, *args)
    assert "b12x.gemm_mm_.default" in ops, ops
    if name == "mxfp8_linear":
        assert "b12x.quantization_mxfp8_quantize_rows_.default" in ops, ops
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(
        got.view(torch.uint8) if got.dtype.itemsize == 1 else got,
        want.view(torch.uint8) if want.dtype.itemsize == 1 else want,
    )
    assert not torch.isnan(got.float()).any()


def test_functionalized_backend_keeps_the_mutation_of_out():
    """aot_eager functionalizes the graph: the op's write of a caller's `out` must survive it."""
    w = G.pack_weight(_w(32, 128), recipe="nvfp4")

    def step(x, out):
        G.mm(x, w, out)
        return out + 1

    x = _x(4, 128)
    eager_out = torch.zeros(4, 32, dtype=torch.bfloat16)
    want = step(x, eager_out)
    out = torch.zeros(4, 32, dtype=torch.bfloat16)
    got, ops = _compiled(step, x, out, backend="aot_eager")
    assert (
        ops and torch.equal(got, want) and torch.equal(out, eager_out) and not torch.equal(out, torch.zeros_like(out))
    )


def test_rope_append_writes_the_caches_under_compile():
    lay = RopeLayout(2, 1, 32, 8)
    w = G.pack_weight(_w(lay.rows, 128), recipe="nvfp4")
    g = _gen(5)
    caches = [torch.randn(4, 8, 1, 32, generator=g).bfloat16() for _ in range(2)]
    pos = torch.randint(0, 100, (3,), generator=g).float()
    cos, sin = torch.cos(pos[:, None] * torch.ones(16)), torch.sin(pos[:, None] * torch.ones(16))
    slots = (torch.tensor([0, 2, 3]), torch.tensor([1, 5, 7]))

    def step(x, k_cache, v_cache):
        return G.mm(x, w, epilogue="rope_append", rope=RopeAppend(cos, sin, k_cache, v_cache, *slots))

    x = _x(3, 128)
    want_caches = [c.clone() for c in caches]
    want = step(x, *want_caches)
    got, ops = _compiled(step, x, *caches)
    assert ops == ["b12x.gemm_mm_.default"]
    assert torch.equal(got, want) and all(torch.equal(a, b) for a, b in zip(caches, want_caches))


def test_a_prepared_plan_travels_by_handle_and_an_unprepared_one_is_named():
    w = G.pack_weight(_w(48, 256), recipe="nvfp4")
    plan = G.plan(G.GemmQuery("bfloat16", "nvfp4", 48, 256, max_m=8))
    x = _x(5, 256)
    with pytest.raises(PlanNotPreparedError, match="PreparationSession"):
        G.mm(x, w, plan=plan)
    with pytest.raises(Exception, match="this plan is not prepared.*PreparationSession"):  # dynamo wraps it
        _compiled(lambda x: G.mm(x, w, plan=plan), x)
    b12x.PreparationSession("cpu").prepare([plan])
    got, ops = _compiled(lambda x: G.mm(x, w, plan=plan), x)
    assert ops == ["b12x.gemm_mm_.default"] and torch.equal(got, G.mm(x, w, plan=plan))


def test_a_plan_prepared_again_keeps_its_handle_for_a_compiled_graph():
    """The handle is a constant in the traced graph: a plan released and prepared again must answer to it again."""
    w = G.pack_weight(_w(48, 256), recipe="nvfp4")
    plan = G.plan(G.GemmQuery("bfloat16", "nvfp4", 48, 256, max_m=8))
    session = b12x.PreparationSession("cpu")
    session.prepare([plan])
    handle = plan.handle
    x = _x(3, 256)
    replay = _traced_graph(lambda x: G.mm(x, w, plan=plan), x)  # replayed without dynamo's guards, as a server does
    session.release(plan)
    with pytest.raises(KeyError, match=f"handle {handle} \\(released"):
        replay()
    session.prepare([plan])
    assert plan.handle == handle
    x.copy_(_x(3, 256, seed=7))
    got = replay()[0]
    assert torch.equal(got, G.mm(x, w, plan=plan))


def test_stream_is_refused_under_compile():
    w = G.pack_weight(_w(32, 128), recipe="nvfp4")
    with pytest.raises(Exception, match="stream= is not supported under torch.compile"):
        _compiled(lambda x: G.mm(x, w, stream=1), _x(2, 128))


def test_opcheck():
    """torch's own checks of the op: its schema's mutations, fake tensors, autograd registration, AOT dispatch."""
    w = G.pack_weight(_w(32, 128), recipe="mxfp4")  # uint8 values and scales: opcheck does arithmetic on inputs
    x, out = _x(4, 128), torch.empty(4, 32, dtype=torch.bfloat16)
    lf, lr, lt, ln, lk = _ops.encode_operand(x)
    rf, rr, rt, rn, rk = _ops.encode_operand(w)
    tensors = [*lt, *rt, None, None, None, None, None, None, None]
    ints = [ln, lk, rn, rk, -1, 0, -1]
    args = (out, [], tensors, ints, lf, lr, rf, rr, "", "", "bfloat16", "", 1.0, 1e-6)
    torch.library.opcheck(torch.ops.b12x.gemm_mm_.default, args)
