"""The quantizers' torch custom ops (`torch.ops.b12x.quantization_nvfp4_quantize_`,
`quantization_mxfp8_quantize_rows_`): under torch.compile(fullgraph=True) `nvfp4.run`, `nvfp4.quantize` and
`mxfp8.quantize_rows` trace to their op with no graph break and write what the eager calls write, bit for bit, on the
CPU's reference backend; aot_eager keeps the writes into the caller's tensors."""

import pytest
import torch

import b12x
from tests.experimental.b12x.conftest import _compile_recording

pytestmark = [pytest.mark.contract, pytest.mark.usefixtures("quiet_cpu_reference")]

NV = b12x.quantization.nvfp4
MX = b12x.quantization.mxfp8


def _x(m=5, k=256, seed=0):
    return (torch.randn(m, k, generator=torch.Generator().manual_seed(seed)) * 3).bfloat16()


def _bytes(*ts):
    return [t.view(torch.uint8) for t in ts]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("gs", [0.75, "tensor"])
def test_nvfp4_run_compiles_to_its_op(backend, gs):
    plan = NV.plan(8, 256)
    b12x.PreparationSession("cpu").prepare([plan])
    gs = torch.tensor([0.75]) if gs == "tensor" else gs
    x = _x()
    want, got = NV.allocate_outputs(plan, device="cpu"), NV.allocate_outputs(plan, device="cpu")
    NV.run(plan=plan, x=x, global_scale=gs, outputs=want)

    def step(x):
        NV.run(plan=plan, x=x, global_scale=gs, outputs=got)
        return got.packed[:1].clone()

    _, ops = _compile_recording(step, x, backend=backend)
    assert ops.count("b12x.quantization_nvfp4_quantize_.default") == 1, ops
    assert all(torch.equal(a, b) for a, b in zip(_bytes(*got.view(5)), _bytes(*want.view(5))))


def test_nvfp4_quantize_compiles_to_its_op():
    x = _x(3, 128, 1)
    want = NV.quantize(x, 2.0)
    got, ops = _compile_recording(lambda x: NV.quantize(x, 2.0), x)
    assert ops.count("b12x.quantization_nvfp4_quantize_.default") == 1, ops
    assert all(torch.equal(a, b) for a, b in zip(_bytes(*got), _bytes(*want)))


def test_mxfp8_quantize_rows_compiles_to_its_op():
    x = _x(4, 256, 2)
    outs = [torch.empty(4, 256, dtype=torch.float8_e4m3fn), torch.empty(4, 8, dtype=torch.uint8)]
    outs.append(torch.zeros(128 * 8, dtype=torch.uint8))
    want = [t.clone() for t in outs]
    MX.quantize_rows(x, *want)

    def step(x):
        MX.quantize_rows(x, *outs)
        return outs[1] + 0

    _, ops = _compile_recording(step, x, backend="aot_eager")
    assert ops.count("b12x.quantization_mxfp8_quantize_rows_.default") == 1, ops
    assert all(torch.equal(a, b) for a, b in zip(_bytes(*outs), _bytes(*want)))


def test_a_plan_must_be_prepared_under_compile_too():
    plan = NV.plan(8, 256)
    out = NV.allocate_outputs(NV.plan(8, 256), device="cpu")
    with pytest.raises(Exception, match="this plan is not prepared"):
        _compile_recording(lambda x: NV.run(plan=plan, x=x, global_scale=1.0, outputs=out), _x())
