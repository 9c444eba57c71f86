"""The demo's Triton glue under TRITON_INTERPRET=1 against the torch glue (run by test_glue_interpret.py
in a subprocess: the variable must be set before the kernels are defined).

The interpreter rounds fp32 -> bf16 like the GPU only with norm's conftest patch (loaded below, the
same one the norm.mhc interpret tier uses); with it, every op here is bitwise equal to torch.
"""

import dataclasses
import importlib.util
import os
from pathlib import Path

import pytest
import torch

from flashinfer.experimental.b12x._demo import block as B
from flashinfer.experimental.b12x._demo import glue as G

from .glue_cases import SMALL, check_add, check_rmsnorm, check_rope_append, check_silu_mul, inputs

pytestmark = pytest.mark.interpret
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_glue_interpret.py"

_conf = Path(__file__).resolve().parents[1] / "norm" / "conftest.py"
_spec = importlib.util.spec_from_file_location("_b12x_norm_interpret_patch", _conf)
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))  # patches the interpreter on import

TOKENS = (1, 3, 5)
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def glue():
    return G.make_glue("triton", SMALL, CPU)


@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("residual", [False, True], ids=["rmsnorm", "residual+rmsnorm"])
def test_rmsnorm(glue, tokens, residual):
    check_rmsnorm(glue, SMALL, inputs(SMALL, tokens, CPU, seed=tokens), residual, max_ulps=0)


@pytest.mark.parametrize("tokens", TOKENS)
def test_rope_append(glue, tokens):
    check_rope_append(glue, SMALL, inputs(SMALL, tokens, CPU, seed=10 + tokens))


@pytest.mark.parametrize("tokens", TOKENS)
def test_silu_mul(glue, tokens):
    check_silu_mul(glue, SMALL, inputs(SMALL, tokens, CPU, seed=20 + tokens), max_ulps=0)


@pytest.mark.parametrize("tokens", TOKENS)
def test_add(glue, tokens):
    check_add(glue, SMALL, inputs(SMALL, tokens, CPU, seed=30 + tokens))


def test_checks_fail_on_a_wrong_kernel(glue):
    """The checks compare real values: a norm without its weight, or v appended into k, must fail."""
    inp = inputs(SMALL, 3, CPU, seed=40)
    bad = dict(glue, rmsnorm=lambda x, w, eps, out, *a: glue["rmsnorm"](x, torch.ones_like(w), eps, out, *a))
    with pytest.raises(AssertionError, match="rmsnorm"):
        check_rmsnorm(bad, SMALL, inp, False)

    def swapped(qkv, cos, sin, q, k, v, *rest):
        glue["rope_append"](qkv, cos, sin, q, v, k, *rest)

    with pytest.raises(AssertionError):
        check_rope_append(dict(glue, rope_append=swapped), SMALL, inp)


def test_bad_arguments_name_the_argument(glue):
    inp = inputs(SMALL, 2, CPU, seed=50)
    x, w = inp["x"], inp["w"]
    with pytest.raises(ValueError, match="out must be a contiguous bfloat16 \\[2, 320\\]"):
        glue["rmsnorm"](x, w, 1e-5, torch.empty(2, 320))
    with pytest.raises(ValueError, match="weight must be"):
        glue["rmsnorm"](x, w[:-1], 1e-5, torch.empty_like(x))
    with pytest.raises(ValueError, match="residual_out must be"):
        glue["rmsnorm"](x, w, 1e-5, torch.empty_like(x), inp["r"], None)
    with pytest.raises(ValueError, match="gu must be .*strided"):
        glue["silu_mul"](torch.empty(2, 4 * SMALL.intermediate, dtype=torch.bfloat16)[:, ::2], torch.empty(2, 1100))
    c = inp["cache"]
    q = torch.empty(2, SMALL.q_heads, SMALL.head_dim, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="slot_page must be a contiguous int64"):
        glue["rope_append"](inp["qkv"], inp["cos"], inp["sin"], q, c["k_cache"], c["v_cache"], c["slot_page"].int(),
                            c["slot_off"], SMALL.q_heads, SMALL.kv_heads, SMALL.head_dim)  # fmt: skip
    with pytest.raises(ValueError, match="heads"):
        glue["rope_append"](inp["qkv"], inp["cos"], inp["sin"], q, c["k_cache"], c["v_cache"], c["slot_page"],
                            c["slot_off"], SMALL.q_heads, SMALL.kv_heads * 2, SMALL.head_dim)  # fmt: skip


def _demo(monkeypatch, capsys, model, spec, tokens):
    from flashinfer.experimental.b12x._demo import run

    monkeypatch.setitem(B.MODELS, model, spec)
    with pytest.warns(UserWarning, match="reference backend"):
        rc = run.run_demo(model, tokens, CPU, glue="triton")
    return rc, capsys.readouterr().out


def test_cpu_demo_with_triton_glue_agrees(monkeypatch, capsys):
    """The whole block with the Triton glue wired into DecodeStep (interpreted) against the fp32
    reference: a glue op reading or writing the wrong buffer fails the demo's agreement check."""
    # gemm.blockscaled needs K % 128 == 0: H = 256, I = 384 (a partial silu tile), Hq * D = 384
    spec = dataclasses.replace(SMALL, hidden=256, intermediate=384)
    rc, out = _demo(monkeypatch, capsys, "llama-small", spec, 3)
    line = next(ln for ln in out.splitlines() if ln.startswith("agreement with the fp32 torch reference"))
    assert rc == 0 and line.endswith("-> OK (cosine >= 0.999)"), line
    assert "glue triton: 5 Triton kernels" in out
    for op in ("rmsnorm", "rope + kv append", "residual + rmsnorm", "silu * up", "residual"):
        assert any(ln.startswith(op + " ") and " triton " in ln for ln in out.splitlines()), op


def test_cpu_moe_demo_with_triton_glue_agrees(monkeypatch, capsys):
    from flashinfer.experimental.b12x._demo import moe

    spec = dataclasses.replace(B.MODELS["qwen3-moe-small"], hidden=256, q_heads=4, kv_heads=2, head_dim=64,
                               moe=moe.MoeSpec(8, 2, 128))  # fmt: skip
    rc, out = _demo(monkeypatch, capsys, "qwen3-moe-small", spec, 2)
    line = next(ln for ln in out.splitlines() if ln.startswith("agreement with the fp32 torch reference"))
    assert rc == 0 and line.endswith("-> OK (cosine >= 0.999)"), line
    assert "glue triton: 4 Triton kernels" in out  # no SiLU * up: the experts do it
