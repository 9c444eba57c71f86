"""The demo block with fused GEMM epilogues (`prepare(fused=True)`: gate_up + SiLU * up and down +
residual, eight launches instead of ten), programmatic dependent GEMM launches (`pdl`) and the glue
launched the same way (--glue triton-pdl): the CPU lifecycle (contract) and the CUDA graph path (gpu),
each against the fp32 reference of the block."""

import subprocess
import sys

import pytest

AGREEMENT = "agreement with the fp32 torch reference"
OK = "-> OK (cosine >= 0.999)"


def _demo(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "b12x", "demo", *args], capture_output=True, text=True, timeout=timeout
    )


def _cpu_demo(monkeypatch, capsys, tokens, **options):
    """run_demo on the CPU with `options`: (exit code, the agreement line, the one DecodeStep it built)."""
    import torch

    from flashinfer.experimental.b12x._demo import run

    steps = []
    init = run.DecodeStep.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        steps.append(self)

    monkeypatch.setattr(run.DecodeStep, "__init__", spy)
    with pytest.warns(UserWarning, match="reference backend"):
        rc = run.run_demo("llama-small", tokens, torch.device("cpu"), **options)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(AGREEMENT))
    (step,) = steps
    return rc, line, step


@pytest.mark.contract
def test_cpu_fused_demo_has_eight_ops_and_agrees(monkeypatch, capsys):
    rc, line, step = _cpu_demo(monkeypatch, capsys, 2, fused=True, pdl="prefetch")
    assert rc == 0 and line.endswith(OK), line
    names = [name for name, _, _ in step.ops]
    assert len(names) == 8 and "silu * up" not in names and "residual" not in names, names
    assert names[-2:] == ["gate_up_proj + silu * up", "down_proj + residual"]
    assert step.plans["gate_up"].caps.epilogue == "silu_mul" and step.plans["down"].caps.epilogue == "residual"
    assert all(step.plans[n].caps.pdl == "prefetch" for n in ("qkv", "o", "gate_up", "down"))


def test_cpu_demo_gemm_opts_reach_the_plan(monkeypatch, capsys):
    """`gemm_opts` (the fast preset's "down": "upfront=4") overrides that plan's heuristic config, chosen for a
    shape-only query on the CPU (`run._plan_arch`), and the block still agrees with the reference."""
    import torch

    from flashinfer.experimental.b12x._demo import run

    assert run._plan_arch(torch.device("cpu")) is None
    rc, line, step = _cpu_demo(monkeypatch, capsys, 2, fused=True, pdl="prefetch", gemm_opts={"down": "upfront=4"})
    assert rc == 0 and line.endswith(OK), line
    ((bucket, cfg),) = step.plans["down"].override
    assert bucket == "decode8" and cfg.decode.upfront == 4 and cfg.epilogue == "residual" and cfg.pdl == "prefetch"
    assert step.plans["gate_up"].override is None


@pytest.mark.contract
def test_cpu_six_launch_demo_agrees(monkeypatch, capsys):
    """--fused-norms: the RMSNorms inside qkv / gate_up, the first residual inside o: six ops."""
    rc, line, step = _cpu_demo(monkeypatch, capsys, 3, fused=True, pdl="wait", fused_norms=True)
    assert rc == 0 and line.endswith(OK), line
    names = [name for name, _, _ in step.ops]
    assert names == ["rmsnorm + qkv_proj", "rope + kv append", "attention", "o_proj + residual",
                     "rmsnorm + gate_up_proj + silu * up", "down_proj + residual"], names  # fmt: skip
    assert step.plans["qkv"].caps.norm and step.plans["gate_up"].caps.norm and not step.plans["o"].caps.norm
    assert step.plans["o"].caps.epilogue == "residual"


@pytest.mark.contract
def test_fused_demo_agreement_check_can_fail(monkeypatch, capsys):
    """A fused block whose down GEMM forgets the residual must fail the block-level check."""
    import torch

    from flashinfer.experimental.b12x._demo import run

    mm = run.DecodeStep._mm

    def no_residual(self, name, lhs, dst, residual=None):
        if residual is None:
            return mm(self, name, lhs, dst)
        self.buf[dst].copy_(self.G.mm(lhs, self.w[name], epilogue="residual", residual=torch.zeros_like(self.buf[dst])))

    monkeypatch.setattr(run.DecodeStep, "_mm", no_residual)
    with pytest.warns(UserWarning, match="reference backend"):
        rc = run.run_demo("llama-small", 1, torch.device("cpu"), fused=True)
    assert rc == 1


@pytest.mark.contract
def test_demo_cli_has_the_fused_and_pdl_options():
    out = _demo("--help")
    assert out.returncode == 0, out.stderr
    assert "--fused-epilogues" in out.stdout and "--gemm-pdl" in out.stdout and "--fused-norms" in out.stdout
    assert "--attention-pdl" in out.stdout and "--l2-prefetch" in out.stdout and "--fused-rope" in out.stdout
    bad = _demo("--gemm-pdl", "sometimes")
    assert bad.returncode == 2 and "--gemm-pdl" in bad.stderr
    bad = _demo("--attention-pdl", "early")
    assert bad.returncode == 2 and "--attention-pdl" in bad.stderr


@pytest.mark.gpu
@pytest.mark.parametrize(
    "tokens, pdl, glue, fuse, attention_pdl, l2",
    [
        (1, "prefetch", "triton-pdl", "--fused-epilogues", "off", "off"),
        (8, "wait", "triton", "--fused-epilogues", "off", "off"),
        (1, "prefetch", "triton-pdl", "--fused-norms", "off", "off"),
        (16, "off", "triton", "--fused-norms", "off", "off"),
        (1, "prefetch", "triton-pdl", "--fused-epilogues", "prefetch", "off"),
        (8, "prefetch", "triton-pdl", "--fused-epilogues", "wait", "off"),
        (32, "prefetch", "triton-pdl", "--fused-epilogues", "prefetch", "off"),
        (1, "prefetch", "triton-pdl", "--fused-epilogues", "off", "weights"),
        (8, "prefetch", "triton-pdl", "--fused-epilogues", "wait", "weights+kv"),
        (1, "prefetch", "triton-pdl", "--fused-rope", "off", "off"),
        (8, "prefetch", "triton-pdl", "--fused-rope", "off", "weights"),
        (32, "off", "triton", "--fused-rope", "off", "off"),
        (1, "prefetch", "triton-pdl", "--fused-rope", "wait", "mlp"),
    ],
)
def test_cuda_fused_demo_captures_and_agrees(tokens, pdl, glue, fuse, attention_pdl, l2):
    out = _demo("--tokens", str(tokens), fuse, "--gemm-pdl", pdl, "--glue", glue, "--attention-pdl", attention_pdl,
                "--l2-prefetch", l2, timeout=1800)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[6] CUDA graph: one decode step captured" in out.stdout
    assert "down_proj + residual" in out.stdout
    if fuse == "--fused-rope":  # no rope launch of its own
        assert "qkv_proj + rope + kv append" in out.stdout
        assert not any(ln.startswith("rope + kv append") for ln in out.stdout.splitlines())
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith(AGREEMENT))
    assert line.endswith(OK), line


@pytest.mark.contract
def test_step_presets_and_flag_overrides():
    """--step picks the defaults (fast: the measured fastest step; base: the plain one); a flag given
    overrides its one option; on CPU the glue stays the CPU default (None: torch)."""
    import argparse

    from flashinfer.experimental.b12x import _demo

    def opts(*argv, cuda=True):
        parser = argparse.ArgumentParser()
        _demo.add_parser(parser.add_subparsers())
        return _demo.step_options(parser.parse_args(["demo", *argv]), cuda)

    fast = opts()
    assert fast == dict(glue="triton-pdl", fused=True, pdl="prefetch", fused_norms=False, fused_rope=True,
                        attention_pdl="wait", attention_min_chunk=128, l2_prefetch=None,
                        gemm_opts={"down": "upfront=4"})  # fmt: skip
    base = opts("--step", "base")
    assert base == dict(glue="triton", fused=False, pdl="off", fused_norms=False, fused_rope=False,
                        attention_pdl="off", attention_min_chunk=None, l2_prefetch=None, gemm_opts=None)  # fmt: skip
    # the preset's GEMM options need the fused kernel: none once neither epilogues nor pdl are on
    assert opts("--no-fused-epilogues", "--gemm-pdl", "off")["gemm_opts"] is None
    assert opts("--no-fused-epilogues")["gemm_opts"] == {"down": "upfront=4"}
    assert opts("--no-fused-rope")["fused_rope"] is False and opts("--no-fused-rope")["fused"] is True
    assert opts("--step", "base", "--fused-norms")["fused"] is True
    assert opts("--gemm-pdl", "wait", "--glue", "triton")["pdl"] == "wait"
    assert opts(cuda=False)["glue"] is None and opts("--glue", "torch", cuda=False)["glue"] == "torch"
