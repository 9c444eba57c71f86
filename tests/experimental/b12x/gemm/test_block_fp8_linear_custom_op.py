"""block_fp8_linear's torch custom ops (`torch.ops.b12x.block_fp8_linear_run_`, and `..._quantize_input_` for
`quantize_input` called on its own): under torch.compile(fullgraph=True)
`run(x, w, plan=p, bias=...)` and `run(binding=bind(...))` trace to one op node with no graph break and give the
eager call's bits on the CPU's reference backend, in both output modes, with and without bias, for several token
counts; aot_eager (AOTAutograd's functionalization) keeps the op's write of its output. The compiled output is a new
tensor (never the plan's scratch); a caller's workspace, a stream and a binding made eagerly are refused under
compile; the ops pass torch.library.opcheck and check their output buffers when they run."""

import re

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib import quant as Q
from flashinfer.experimental.b12x._lib.custom_op import registered_ops
from flashinfer.experimental.b12x.gemm.block_fp8_linear import _ops
from tests.experimental.b12x.conftest import _compile_recording

pytestmark = [pytest.mark.contract, pytest.mark.usefixtures("quiet_cpu_reference")]

BF = b12x.gemm.block_fp8_linear
OP = "b12x.block_fp8_linear_run_.default"
QOP = "b12x.block_fp8_linear_quantize_input_.default"
N, K = 48, 256


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _x(t, seed=0, dtype=torch.bfloat16):
    return (torch.randn(t, K, generator=_gen(seed)) * 2).to(dtype)


def _weight(seed=1):
    wq, ws = Q.quantize_block_fp8_weight(torch.randn(N, K, generator=_gen(seed)) * 0.03)
    return BF.pack_weight(wq, ws)


def _bias(seed=2, dtype=torch.bfloat16):
    return torch.randn(N, generator=_gen(seed)).to(dtype)


def _prepared(device="cpu", max_tokens=16, k=K, n=N, **kw):
    """A block_fp8_linear plan prepared on `device` (shared with test_block_fp8_linear_custom_op_gpu.py)."""
    p = BF.plan(BF.Caps(device, max_tokens=max_tokens, in_features=k, out_features=n, **kw))
    with b12x.PreparationSession(device) as s:
        s.prepare([p])
    return p


def _poison(p):
    """NaN (and E4M3 NaN bytes) in every scratch buffer of the plan: what a run reads must have been written."""
    for name, t in p.state.scratch.items():
        t.fill_(255 if name == "act_values" else float("nan"))


def _eager(p, x, w, bias):
    _poison(p)
    y = BF.run(x, w, plan=p, bias=bias).clone()
    assert not torch.isnan(y.float()).any()
    return y


def _compiled(fn, *args, backend="eager"):
    got, targets = _compile_recording(fn, *args, backend=backend)
    ops = [t for t in targets if "b12x" in t]
    assert ops == [OP], targets
    return got


def test_the_op_is_registered():
    assert registered_ops()["b12x::block_fp8_linear_run_"] is _ops.OP
    schema = str(torch.ops.b12x.block_fp8_linear_run_.default._schema)
    assert "Tensor(a7!) out" in schema and schema.endswith("-> ()"), schema


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("mode", ["scratch", "new"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_run_compiles_to_its_op_and_matches_eager(backend, mode, with_bias):
    p, w, x = _prepared(output_mode=mode), _weight(), _x(5)
    bias = _bias() if with_bias else None
    want = _eager(p, x, w, bias)
    _poison(p)
    got = _compiled(lambda x: BF.run(x, w, plan=p, bias=bias), x, backend=backend)
    assert got.shape == (5, N) and got.dtype == torch.bfloat16 and torch.equal(got, want)
    if mode == "scratch":  # the compiled output is a new tensor, not the plan's scratch view
        assert got.data_ptr() != p.state.scratch["output"].data_ptr()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_bind_and_run_in_the_compiled_region(backend, with_bias):
    """A float16 source and a float32 output dtype: the op's output takes the plan's output dtype."""
    p, w = _prepared(source_dtype="float16", output_dtype="float32"), _weight()
    x, bias = _x(7, seed=3, dtype=torch.float16), _bias(dtype=torch.float32) if with_bias else None
    want = _eager(p, x, w, bias)
    _poison(p)

    def step(x):
        return BF.run(binding=BF.bind(p, source=x, packed_weight=w, bias=bias)) + 1

    got = _compiled(step, x, backend=backend)
    assert torch.equal(got, want + 1)


def test_new_token_counts_in_one_compiled_function():
    p, w, bias = _prepared(), _weight(), _bias()
    compiled = torch.compile(lambda x: BF.run(x, w, plan=p, bias=bias), fullgraph=True, backend="aot_eager")
    torch._dynamo.reset()
    for t in (5, 9, 16, 1, 0):
        x = _x(t, seed=t)
        want = _eager(p, x, w, bias)
        _poison(p)
        got = compiled(x)
        assert got.shape == (t, N) and torch.equal(got, want), t


def test_a_binding_made_eagerly_cannot_run_compiled():
    p, w, x = _prepared(), _weight(), _x(4)
    binding = BF.bind(p, source=x, packed_weight=w)
    message = "a binding made outside torch.compile cannot run inside it: call bind in the compiled region too"
    with pytest.raises(Exception, match=re.escape(message)):
        _compile_recording(lambda x: BF.run(binding=binding) + x.sum(), x)


def test_workspace_and_stream_are_refused_under_compile():
    p, w, x = _prepared(), _weight(), _x(4)
    ws = {n: torch.empty_like(t) for n, t in p.state.scratch.items()}
    assert torch.equal(BF.run(x, w, plan=p, workspace=ws), _eager(p, x, w, None))  # eager takes it
    with pytest.raises(Exception, match=re.escape("workspace must be None under torch.compile")):
        _compile_recording(lambda x: BF.run(x, w, plan=p, workspace=ws), x)
    with pytest.raises(Exception, match=re.escape("stream= is not supported under torch.compile")):
        _compile_recording(lambda x: BF.run(x, w, plan=p, stream=1), x)


def test_shapes_are_checked_while_tracing_and_an_unprepared_plan_is_named():
    w = _weight()
    with pytest.raises(Exception, match="this plan is not prepared.*PreparationSession"):  # dynamo wraps it
        _compile_recording(lambda x: BF.run(x, w, plan=BF.plan(BF.Caps("cpu", 16, K, N))), _x(4))
    p = _prepared()
    with pytest.raises(Exception, match=re.escape("source has 17 tokens, above the plan's capacity max_tokens=16")):
        _compile_recording(lambda x: BF.run(x, w, plan=p), _x(17))
    with pytest.raises(Exception, match=re.escape("bias must be bfloat16 [48] on cpu or None, got float32 [48]")):
        _compile_recording(lambda x: BF.run(x, w, plan=p, bias=torch.zeros(N)), _x(4))


def _op_args(p, w, x, bias, out):
    return (p.state.handle, x, w.values.view(torch.uint8), w.scales, w.alpha, w.input_scale, bias, out)


def test_the_op_binds_again_when_it_runs():
    """Called directly, the op runs the eager checks (bind's, and its output buffer's) and writes `out`."""
    p, w, x, bias = _prepared(output_mode="new"), _weight(), _x(3), _bias()
    out = torch.full((3, N), float("nan"), dtype=torch.bfloat16)
    torch.ops.b12x.block_fp8_linear_run_(*_op_args(p, w, x, bias, out))
    assert torch.equal(out, _eager(p, x, w, bias))
    with pytest.raises(ValueError, match=re.escape("out must be shape [3, 48]")):
        torch.ops.b12x.block_fp8_linear_run_(*_op_args(p, w, x, bias, torch.empty(4, N, dtype=torch.bfloat16)))
    with pytest.raises(ValueError, match=re.escape("bias must be bfloat16 [48] on cpu or None")):
        torch.ops.b12x.block_fp8_linear_run_(*_op_args(p, w, x, torch.zeros(N), out))
    with pytest.raises(KeyError, match="no prepared b12x plan has handle"):
        torch.ops.b12x.block_fp8_linear_run_(-1, *_op_args(p, w, x, bias, out)[1:])


def test_opcheck():
    """torch's own checks of the op: its schema's mutations, fake tensors, autograd registration, AOT dispatch."""
    p, w, x, bias = _prepared(), _weight(), _x(3), _bias()
    out = torch.empty(3, N, dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.b12x.block_fp8_linear_run_.default, _op_args(p, w, x, bias, out))
    torch.library.opcheck(torch.ops.b12x.block_fp8_linear_run_.default, _op_args(p, w, x, None, out))


def test_the_quantize_input_op_is_registered():
    assert registered_ops()["b12x::block_fp8_linear_quantize_input_"] is _ops.QUANT_OP
    schema = str(torch.ops.b12x.block_fp8_linear_quantize_input_.default._schema)
    assert "Tensor(a2!) values" in schema and "Tensor(a3!) scales" in schema and schema.endswith("-> ()"), schema


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("given_out", [False, True])
def test_quantize_input_compiles_to_its_op_and_matches_the_oracle(backend, given_out):
    p, x = _prepared(), _x(6, seed=4)
    q, sc = Q.quantize_block_fp8_act(x)

    def step(x):
        out = None
        if given_out:  # poisoned: E4M3 NaN bytes, NaN scales
            out = (torch.full((6, K), 255, dtype=torch.uint8), torch.full((6, K // 128), float("nan")))
        values, scales = BF.quantize_input(x, plan=p, out=out)
        return values, scales * 2

    (values, scales2), targets = _compile_recording(step, x, backend=backend)
    assert [t for t in targets if "b12x" in t] == [QOP], targets
    assert torch.equal(values, q.view(torch.uint8)) and torch.equal(scales2, sc * 2)


def test_the_quantize_input_op_checks_its_buffers_when_it_runs():
    p, x = _prepared(), _x(3)
    values, scales = torch.full((3, K), 255, dtype=torch.uint8), torch.full((3, K // 128), float("nan"))
    torch.ops.b12x.block_fp8_linear_quantize_input_(p.state.handle, x, values, scales)
    q, sc = Q.quantize_block_fp8_act(x)
    assert torch.equal(values, q.view(torch.uint8)) and torch.equal(scales, sc)
    with pytest.raises(ValueError, match=re.escape("out[1] must be shape [3, 2]")):
        torch.ops.b12x.block_fp8_linear_quantize_input_(p.state.handle, x, values, torch.empty(3, 3))
    with pytest.raises(ValueError, match=re.escape("source_tk has 17 tokens, above the plan's capacity")):
        torch.ops.b12x.block_fp8_linear_quantize_input_(p.state.handle, _x(17), values, scales)


def test_quantize_input_opcheck():
    p, x = _prepared(), _x(3)
    args = (p.state.handle, x, torch.empty(3, K, dtype=torch.uint8), torch.empty(3, K // 128))
    torch.library.opcheck(torch.ops.b12x.block_fp8_linear_quantize_input_.default, args)
