"""The glue choice of the demo's decode step (CPU contract checks; kernels: interpret/compile/gpu tiers)."""

import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.contract


def test_glue_choices_and_defaults():
    from flashinfer.experimental.b12x import _demo
    from flashinfer.experimental.b12x._demo import glue as G
    from flashinfer.experimental.b12x._demo import run as R

    assert G.GLUE_CHOICES == _demo.GLUE_CHOICES == ("triton", "torch.compile", "torch", "triton-pdl")
    assert R.L2_PREFETCH_CHOICES == _demo.L2_PREFETCH_CHOICES
    assert G.default_choice("cpu") == "torch" and G.default_choice(torch.device("cuda", 0)) == "triton"
    assert G.make_glue("torch", None, torch.device("cpu")) == G.TORCH_GLUE
    with pytest.raises(ValueError, match="glue must be one of"):
        G.make_glue("inductor", None, torch.device("cpu"))
    with pytest.raises(ValueError, match="glue must be one of"):
        G.warm("cuda", None, torch.device("cpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only check")
def test_triton_glue_needs_cuda_or_the_interpreter(monkeypatch):
    from flashinfer.experimental.b12x._demo import block as B
    from flashinfer.experimental.b12x._demo import glue as G

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="device must be cuda .*got cpu"):
        G.TritonGlue(B.MODELS["llama-small"], torch.device("cpu"))


def test_cli_glue_argument():
    def demo(*args):
        return subprocess.run([sys.executable, "-m", "b12x", "demo", *args], capture_output=True, text=True)

    out = demo("--help")
    assert "--glue" in out.stdout and "torch.compile" in out.stdout
    out = demo("--glue", "nope")
    assert out.returncode == 2 and "--glue" in out.stderr
    out = demo("--glue", "triton", "--device", "cpu")
    assert out.returncode == 2 and "--glue triton needs a CUDA device" in out.stdout
