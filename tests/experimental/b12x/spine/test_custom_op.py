"""b12x:: torch custom ops: registration rules and torch.compile(fullgraph=True) tracing."""

import pytest
import torch

from flashinfer.experimental.b12x._lib import custom_op, selftest

pytestmark = pytest.mark.contract


@pytest.fixture(scope="module")
def axpby_op():
    return selftest.register_custom_ops()


def _inputs(shape=(5, 12), dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype)


def test_registered_op_runs_the_cpu_reference_in_place(axpby_op):
    assert torch.ops.b12x.selftest_axpby_.default is not None
    x, y = _inputs()
    expect = selftest.axpby_reference(x, y, 2.0, -0.5)
    assert torch.ops.b12x.selftest_axpby_(x, y, 2.0, -0.5) is None
    torch.testing.assert_close(y, expect, rtol=0, atol=0)


def test_registration_is_idempotent_and_conflicts_raise(axpby_op):
    assert selftest.register_custom_ops() is axpby_op
    with pytest.raises(ValueError, match="already registered"):
        custom_op.register_op("selftest_axpby_", lambda x, y, a, b: None, mutates_args=("y",))
    assert "b12x::selftest_axpby_" in custom_op.registered_ops()


def test_ops_returning_tensors_need_a_fake():
    def spine_twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    with pytest.raises(TypeError, match="pass fake="):
        custom_op.register_op("spine_twice_nofake", spine_twice, mutates_args=())
    with pytest.raises(ValueError, match="identifier"):
        custom_op.register_op("bad-name", spine_twice, mutates_args=())
    with pytest.raises(TypeError, match="tuple of argument names"):
        custom_op.register_op("spine_x", spine_twice, mutates_args="x")


def test_functional_op_with_fake_passes_opcheck():
    @custom_op.register_op("spine_scaled", mutates_args=(), fake=lambda x, s: torch.empty_like(x))
    def spine_scaled(x: torch.Tensor, s: float) -> torch.Tensor:
        return x * s

    x = torch.randn(4, 3)
    torch.testing.assert_close(torch.ops.b12x.spine_scaled(x, 3.0), x * 3.0)
    torch.library.opcheck(torch.ops.b12x.spine_scaled.default, (x, 3.0))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_fullgraph_traces_through_the_op(axpby_op, backend, compile_recording):
    def step(x, y):
        torch.ops.b12x.selftest_axpby_(x, y, 3.0, 0.25)
        return y + 1

    x, y = _inputs(dtype=torch.bfloat16)
    y_eager = y.clone()
    expect = step(x, y_eager)
    got, targets = compile_recording(step, x, y, backend=backend)
    torch.testing.assert_close(got, expect, rtol=0, atol=0)
    torch.testing.assert_close(y, y_eager, rtol=0, atol=0)
    assert sum("b12x.selftest_axpby_" in t for t in targets) == 1, targets


@pytest.mark.slow
def test_torch_compile_inductor_cpu(axpby_op):
    def step(x, y):
        torch.ops.b12x.selftest_axpby_(x, y, 3.0, 0.25)
        return y * 2

    torch._dynamo.reset()
    x, y = _inputs()
    y2 = y.clone()
    expect = step(x, y2)
    torch.testing.assert_close(torch.compile(step, fullgraph=True)(x, y), expect)
