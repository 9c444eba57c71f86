"""`python -m b12x demo`: the CPU lifecycle end to end (contract) and the CUDA graph path (gpu)."""

import subprocess
import sys
import time

import pytest

AGREEMENT = "agreement with the fp32 torch reference"
CPU_NOTICE = "CPU: reference backends, no kernels ran"


def _demo(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "b12x", "demo", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.contract
def test_cpu_demo_runs_end_to_end():
    start = time.perf_counter()
    out = _demo("--device", "cpu", "--tokens", "2")
    seconds = time.perf_counter() - start
    assert out.returncode == 0, out.stdout + out.stderr
    assert CPU_NOTICE in out.stdout
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith(AGREEMENT))
    assert line.endswith("-> OK (cosine >= 0.999)"), line
    for step in ("[1] ", "[2] DirectWeightSession", "[3] pack_weight", "[4] PreparationSession", "[5] ", "[6] "):
        assert step in out.stdout, step
    assert "kernel resolution frozen: True" in out.stdout
    assert "total (eager, sum of ops)" in out.stdout and "CUDA graph replay" not in out.stdout
    assert "b12x prepare (5 plans)" in out.stderr  # the preparation progress display
    assert "b12x.loader [done]" in out.stderr  # the checkpoint display
    assert seconds < 60, f"the CPU demo took {seconds:.1f} s"


@pytest.mark.contract
def test_demo_help_and_arguments():
    out = _demo("--help")
    assert out.returncode == 0, out.stderr
    for word in ("--model", "llama-small", "--tokens", "--device"):
        assert word in out.stdout
    top = subprocess.run([sys.executable, "-m", "b12x", "--help"], capture_output=True, text=True)
    assert "demo" in top.stdout
    for bad in (("--tokens", "0"), ("--tokens", "x"), ("--model", "nope")):
        out = _demo(*bad)
        assert out.returncode == 2 and bad[0] in out.stderr, out.stderr


@pytest.mark.contract
def test_demo_package_is_light_and_models_agree(run_python):
    out = run_python(
        "import sys, flashinfer.experimental.b12x._demo as d\n"
        "assert 'torch' not in sys.modules, 'the demo package imported torch'\n"
        "print(d.MODEL_NAMES)"
    )
    assert out.returncode == 0, out.stderr
    from flashinfer.experimental.b12x._demo import MODEL_NAMES, block

    assert MODEL_NAMES == tuple(block.MODELS)
    for spec in block.MODELS.values():
        for k, parts in spec.fused().values():  # what gemm.blockscaled takes
            assert k % 128 == 0 and all(rows % 16 == 0 for _, rows in parts)


@pytest.mark.contract
def test_agreement_check_fails_on_a_wrong_block(monkeypatch, capsys):
    """The comparison really computes both sides: a block with GELU instead of SiLU must fail."""
    import torch

    from flashinfer.experimental.b12x._demo import run

    def wrong_act(self):
        gate, up = self.buf["gu"].chunk(2, dim=-1)
        self.buf["act"].copy_(torch.nn.functional.gelu(gate.float()) * up.float())

    monkeypatch.setattr(run.DecodeStep, "_act", wrong_act)
    with pytest.warns(UserWarning, match="reference backend"):
        rc = run.run_demo("llama-small", 1, torch.device("cpu"))
    assert rc == 1
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(AGREEMENT))
    assert "-> FAIL" in line, line
    from flashinfer.experimental.b12x._lib import freeze

    assert not freeze.kernel_resolution_frozen()  # the demo restores the unfrozen state


@pytest.mark.gpu
@pytest.mark.parametrize("step", [(), ("--step", "base")], ids=["fast", "base"])
def test_cuda_demo_captures_and_agrees(step):
    out = _demo("--tokens", "4", *step, timeout=1800)
    assert out.returncode == 0, out.stdout + out.stderr
    assert CPU_NOTICE not in out.stdout
    assert "[6] CUDA graph: one decode step captured" in out.stdout
    assert "total (CUDA graph replay)" in out.stdout
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith(AGREEMENT))
    assert line.endswith("-> OK (cosine >= 0.999)"), line


def _run_with(monkeypatch, capsys, patch_step):
    import torch

    from flashinfer.experimental.b12x._demo import run

    init = run.DecodeStep.__init__

    def patched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        patch_step(self)

    monkeypatch.setattr(run.DecodeStep, "__init__", patched)
    with pytest.warns(UserWarning, match="reference backend"):
        rc = run.run_demo("llama-small", 1, torch.device("cpu"))
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(AGREEMENT))
    return rc, line


@pytest.mark.contract
def test_agreement_check_catches_attention_missing_the_new_token(monkeypatch, capsys):
    """Attention is a small share of the block update: it is checked on its own, tightly enough that
    attending to the cached prefix without the decode token's K/V fails."""
    from flashinfer.experimental.b12x.attention import paged

    def drop_new_token(step):
        c = step.cache
        b = step.binding
        step.binding = paged.bind(
            b.plan, q=step.buf["q"], k_cache=c["k_cache"], v_cache=c["v_cache"], page_table=c["page_table"],
            cache_seqlens=c["seqlens"] - 1, output=step.buf["attn"],
        )  # fmt: skip

    rc, line = _run_with(monkeypatch, capsys, drop_new_token)
    assert rc == 1 and "-> FAIL" in line, line


@pytest.mark.contract
def test_checked_run_must_write_the_new_kv(monkeypatch, capsys):
    """The new tokens' KV slots are poisoned before the checked run: a KV append that writes nothing
    cannot pass on the values an earlier run left there."""

    def append_only_on_warmup(step):
        calls = {"n": 0}
        real = step._rope_append

        def rope_append():
            calls["n"] += 1
            if calls["n"] == 1:
                real()
            else:
                hq, d, t = step.spec.q_heads, step.spec.head_dim, step.x.shape[0]
                q = step.buf["qkv"][:, : hq * d].reshape(t, hq, d)
                from flashinfer.experimental.b12x._demo import block as B

                step.buf["q"].copy_(B.apply_rope(q, step.cos, step.sin))

        step.ops = [(n, be, rope_append if n == "rope + kv append" else fn) for n, be, fn in step.ops]

    rc, line = _run_with(monkeypatch, capsys, append_only_on_warmup)
    assert rc == 1 and "-> FAIL" in line, line


def _small_moe(monkeypatch):
    """qwen3-moe-small shrunk (E = 8, top-2, H = 256) so the CPU reference backends run in seconds."""
    import dataclasses

    from flashinfer.experimental.b12x._demo import block, moe

    spec = dataclasses.replace(
        block.MODELS["qwen3-moe-small"], hidden=256, q_heads=4, kv_heads=2, head_dim=64, moe=moe.MoeSpec(8, 2, 128)
    )
    monkeypatch.setitem(block.MODELS, "qwen3-moe-small", spec)


@pytest.mark.contract
def test_cpu_moe_demo_agrees(monkeypatch, capsys):
    import torch

    from flashinfer.experimental.b12x._demo import run

    _small_moe(monkeypatch)
    with pytest.warns(UserWarning, match="reference backend"):
        rc = run.run_demo("qwen3-moe-small", 3, torch.device("cpu"))
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith(AGREEMENT))
    assert rc == 0 and line.endswith("-> OK (cosine >= 0.999)"), line
    assert "moe.fused_moe w4a16" in out and "[7] routing:" in out


@pytest.mark.contract
def test_moe_demo_check_catches_a_wrong_expert_output(monkeypatch, capsys):
    """The MoE layer's output is part of the checked block: flipping the sign of half of it must fail."""
    import torch

    from flashinfer.experimental.b12x._demo import run
    from flashinfer.experimental.b12x.moe import fused_moe

    _small_moe(monkeypatch)
    real = fused_moe.run

    def wrong(*, binding):
        out = real(binding=binding)
        out[:, ::2] *= -1
        return out

    monkeypatch.setattr(fused_moe, "run", wrong)
    with pytest.warns(UserWarning, match="reference backend"):
        rc = run.run_demo("qwen3-moe-small", 2, torch.device("cpu"))
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(AGREEMENT))
    assert rc == 1 and "-> FAIL" in line, line


@pytest.mark.gpu
def test_cuda_moe_demo_captures_and_agrees():
    out = _demo("--model", "qwen3-moe-small", "--tokens", "4", timeout=1800)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[6] CUDA graph: one decode step captured" in out.stdout
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith(AGREEMENT))
    assert line.endswith("-> OK (cosine >= 0.999)"), line
