"""moe.fused_moe launches as programmatic dependents (`api.with_pdl`, `_expert_pdl.py`) on the CPU:

- the configs: `with_pdl` on the heuristic's plan (the grouped bucket untouched), bad modes named;
- compile tier: both archs build every mode; the PTX waits (griddepcontrol.wait) before its first
  global load and holds no L2 prefetch, and "off" is the kernel without any griddepcontrol; the
  Triton kernels likewise with `launch_pdl` in their metadata.
The GPU tier (test_fused_moe_pdl_gpu.py) checks the outputs bit for bit against plain launches."""

from __future__ import annotations

import dataclasses
import re

import pytest

from flashinfer.experimental.b12x.moe import fused_moe as fm
from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X
from flashinfer.experimental.b12x.moe.fused_moe import api

from .moe_cases import weight_plan

W4P1 = X.sweep_tiling(1, "w4p1h")  # the heuristic's 8-token tiling (FC1, FC2)


def test_with_pdl_configs():
    fc1 = W4P1[0]
    assert X.with_pdl(fc1, "off") == fc1 and type(X.with_pdl(fc1, "off")) is type(fc1)
    wait = X.with_pdl(fc1, "wait")
    assert isinstance(wait, X.ExpertConfig) and wait.pdl == "wait"
    assert X.with_pdl(wait, "off") == fc1 and type(X.with_pdl(wait, "off")) is type(fc1)
    early = dataclasses.replace(wait, early=True)
    assert X.with_pdl(early, "off") == dataclasses.replace(early, pdl="off")  # keeps its own option
    assert X.why_not(1, "bfloat16", "nvfp4", "silu", wait) is None
    for mode in ("early", "prefetch"):  # "prefetch" was removed in session 19 (_expert_pdl.py)
        bad = dataclasses.replace(wait, pdl=mode)
        assert f"pdl must be one of ('off', 'wait'), got '{mode}'" in X.why_not(1, "bfloat16", "nvfp4", "silu", bad)


def test_with_pdl_on_the_heuristic_plan():
    mode = "wait"
    wplan = weight_plan("modelopt_nvfp4", "silu", e=128, h=2048, i=768)
    caps = fm.Caps(max_tokens=4096, num_topk=8, device="cuda", weight_plan=wplan, quant_mode="nvfp4")
    heuristic = fm.plan(caps).heuristic("sm_90a")
    base = api.with_pdl(heuristic, "off")  # plain launches
    assert not base.routing.pdl and not base.combine.pdl
    assert base.experts == api.heuristic_buckets(caps)  # gemm's plain DecodeConfigs again
    assert heuristic == api.with_pdl(base, api.PDL)  # the heuristic is the plain plan with api.PDL
    cfg = api.with_pdl(base, mode)
    assert cfg.routing.pdl and cfg.combine.pdl
    assert dataclasses.replace(cfg.routing, pdl=False) == base.routing
    assert any(b.tiled for b in cfg.experts) and not all(b.tiled for b in cfg.experts)
    for got, was in zip(cfg.experts, base.experts):
        if was.tiled:
            assert got == was  # the grouped kernels keep plain launches
        else:
            assert got.fc1.pdl == got.fc2.pdl == mode
            assert dataclasses.replace(got, fc1=was.fc1, fc2=was.fc2) == was
    assert api.with_pdl(cfg, "off") == base
    fm.plan(caps, override=cfg)  # a checked override
    for bad_mode in ("on", "prefetch"):
        with pytest.raises(ValueError, match=rf"pdl must be one of \('off', 'wait'\), got '{bad_mode}'"):
            api.with_pdl(base, bad_mode)
    bad = dataclasses.replace(cfg.experts[0], fc2=dataclasses.replace(cfg.experts[0].fc2, pdl="on"))
    with pytest.raises(ValueError, match=r"override.experts\[0\].fc2: pdl must be one of"):
        fm.plan(caps, override=dataclasses.replace(cfg, experts=(bad, *cfg.experts[1:])))


# ---- compile tier ---------------------------------------------------------------------------------
def _after_params(ptx: str) -> str:
    return ptx[ptx.index("{", ptx.index(".entry")) :]


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("grid", X.GRIDS)
@pytest.mark.parametrize("mode", ["off", "wait"])
def test_expert_kernels_wait_before_their_first_load(mode, grid, arch):
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    for fc, a_fmt, b_fmt, act in ((1, "bfloat16", "nvfp4", "silu"), (2, "nvfp4", "nvfp4", None)):
        cfg = X.with_pdl(W4P1[fc - 1], mode)
        if fc == 1:
            fn = X.compile_fc1(a_fmt, b_fmt, act, cfg, arch, grid)
        else:
            fn = X.compile_fc2(a_fmt, b_fmt, cfg, arch, grid)
        body = _after_params(fn.artifacts.PTX)
        assert re.search(rf"\.target {arch}\b", fn.artifacts.PTX) and ".local" not in body
        assert "prefetch.global.L2" not in body
        if mode == "off":
            assert "griddepcontrol" not in body
            continue
        wait = body.index("griddepcontrol.wait")
        assert body.count("griddepcontrol.wait") == 1 and "griddepcontrol.launch_dependents" in body[wait:]
        assert "ld.global" not in body[:wait], f"fc{fc} {mode} {grid}: a global load before the wait"


@pytest.mark.compile
@pytest.mark.parametrize("pdl", [False, True])
def test_triton_kernels_enter_through_the_wait(pdl, tmp_path, monkeypatch):
    from flashinfer.experimental.b12x.moe.fused_moe import _combine, _routing

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    routing = dataclasses.replace(_routing.default_config(2048), pdl=pdl)
    r = _routing.compile_routing("int32", 8, 128, 2048, "nvfp4", False, routing, "sm_90a")
    c = _combine.compile_combine(
        8, 128, 2048, 768, "nvfp4", False, dataclasses.replace(_combine.CombineConfig(), pdl=pdl), "sm_90a"
    )
    for kern in (r.micro, r.gather, r.hist, r.scan, r.start, c.requant, c.combine):
        ptx = kern.compiled.asm["ptx"]
        assert kern.compiled.metadata.launch_pdl is pdl
        if not pdl:
            assert "griddepcontrol" not in ptx
            continue
        body = _after_params(ptx)
        wait = body.index("griddepcontrol.wait")
        assert "ld.global" not in body[:wait] and "griddepcontrol.launch_dependents" in body[wait:]


def test_interpreter_kernels_never_take_pdl():
    from flashinfer.experimental.b12x.moe.fused_moe import _routing

    k = _routing.TritonKernel(lambda: None, {}, {"A": 1}, 4, None, pdl=True)
    assert k.constexprs == {"A": 1, "PDL": 0} and not k.pdl
