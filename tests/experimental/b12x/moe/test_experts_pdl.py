"""moe.fused_moe launches as programmatic dependents (`api.with_pdl`, `_expert_pdl.py`) on the CPU:

- the "prefetch" mode's L2 lines of each expert CTA against the lines its weight rows and their
  swizzled scales occupy, enumerated here from the layout (FORMATS.md), for every kind of CTA
  (gated FC1, relu2 FC1, FC2; NVFP4 and MXFP4; one and two column tiles; N and K tails);
- the configs: `with_pdl` on the heuristic's plan (the grouped bucket untouched), bad modes named;
- compile tier: both archs build every mode; the PTX waits (griddepcontrol.wait) before its first
  global load, prefetches only in the identity grid's "prefetch" mode, and "off" is the kernel
  without any griddepcontrol; the Triton kernels likewise with `launch_pdl` in their metadata.
The GPU tier (test_fused_moe_pdl_gpu.py) checks the outputs bit for bit against plain launches."""

from __future__ import annotations

import dataclasses
import re

import pytest

from flashinfer.experimental.b12x._lib import quant as Q
from flashinfer.experimental.b12x.gemm._shared import addressing as AD
from flashinfer.experimental.b12x.moe import fused_moe as fm
from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X
from flashinfer.experimental.b12x.moe.fused_moe import api

from .moe_cases import weight_plan

LINE = 128
W4P1 = X._sweep_tiling(1, "w4p1")  # the heuristic's 8-token tiling (FC1, FC2)


class _IntOps:
    """The ops the prefetch addresses use, on Python ints."""

    i64 = staticmethod(int)
    i32 = staticmethod(int)


def _prefetched(logic, n: int, k: int, bidx: int, b_base: int, sf_base: int, slot: int = 0):
    """(value lines, scale lines) CTA (bidx, slot) prefetches (only those in range)."""
    values, scales = set(), set()
    first = logic.first_wave(_IntOps, slot * logic.grid_n(n) + bidx)
    for i in range(logic.value_prefetch_items(k)):
        addr, ok = logic.value_prefetch_line(_IntOps, b_base, n, k, bidx, i, first)
        if ok:
            values.add(addr // LINE)
    for i in range(logic.scale_prefetch_items(k)):
        addr, ok = logic.scale_prefetch_line(_IntOps, sf_base, n, k, bidx, i, first)
        if ok:
            scales.add(addr // LINE)
    return values, scales


def _owned(logic, n: int, k: int, bidx: int, b_base: int, sf_base: int, b_fmt: str):
    """The lines the CTA's weight rows (its output columns' gate/up or plain rows, below n) and their
    scales occupy: the oracle, from the layout alone."""
    ldb = AD.row_bytes(b_fmt, k)
    sf_vec = 16 if b_fmt == "nvfp4" else 32
    cols4 = -(-(k // sf_vec) // 4) * 4
    rows = []
    for j in range(logic.span):
        n0 = (bidx * logic.span + j) * logic.cols
        for c in range(n0, min(n0 + logic.cols, n)):
            rows += [c, n + c] if logic.gated else [c]
    values = {(b_base + r * ldb + off) // LINE for r in rows for off in range(0, ldb, 16)}
    scales = {(sf_base + AD.swizzled_offset(_IntOps, r, c, cols4)) // LINE for r in rows for c in range(k // sf_vec)}
    return values, scales


@pytest.mark.parametrize(
    "fc, activation, b_fmt, n, k, span",
    [
        (1, "silu", "nvfp4", 768, 2048, 1),  # E = 128's FC1: 16 gate + 16 up rows a CTA
        (1, "swiglu_oai", "mxfp4", 96, 160, 1),  # K not a multiple of 128 (MXFP4 atoms of 128 values)
        (1, "relu2", "nvfp4", 80, 96, 2),  # N past the last CTA's second tile, K = 96: a partial atom
        (2, None, "nvfp4", 2048, 768, 1),  # E = 128's FC2
        (2, None, "mxfp4", 112, 64, 2),
    ],
)
def test_prefetch_lines_are_the_ctas_weight_lines(fc, activation, b_fmt, n, k, span):
    logic = X.ExpertLogic(fc, "bfloat16", b_fmt, activation, X.with_pdl(W4P1[fc - 1], "prefetch"), "identity", span)
    b_base, sf_base = 1 << 20, 1 << 30  # an expert's weight and scale bases (128-byte aligned)
    ctas = logic.grid_n(n)
    seen = set()
    for bidx in range(ctas):
        got = _prefetched(logic, n, k, bidx, b_base, sf_base)
        want = _owned(logic, n, k, bidx, b_base, sf_base, b_fmt)
        assert got[0] == want[0], f"CTA {bidx}: value lines {sorted(got[0] ^ want[0])[:4]} differ"
        assert got[1] == want[1], f"CTA {bidx}: scale lines {sorted(got[1] ^ want[1])[:4]} differ"
        seen |= got[0]
    rows = 2 * n if activation in X.GATED else n
    assert len(seen) == rows * AD.row_bytes(b_fmt, k) // LINE  # every weight line of the expert, once


def test_first_wave_prefetch_stops_at_prefetch_ctas():
    """prefetch_ctas = P: CTA (x, row) prefetches its lines iff row * grid_n + x < P, else none."""
    n, k = 768, 2048
    full = X.ExpertLogic(1, "bfloat16", "nvfp4", "silu", X.with_pdl(W4P1[0], "prefetch"), "identity")
    logic = X.ExpertLogic(1, "bfloat16", "nvfp4", "silu", X.with_pdl(W4P1[0], "prefetch", 50), "identity")
    assert full.first_wave(_IntOps, 10**6) is None  # every CTA: the kernel without the check
    gn = logic.grid_n(n)
    for slot, bidx in ((0, 0), (0, gn - 1), (1, 50 - gn - 1), (1, 50 - gn), (3, 5)):
        got = _prefetched(logic, n, k, bidx, 1 << 20, 1 << 30, slot)
        want = _prefetched(full, n, k, bidx, 1 << 20, 1 << 30, slot) if slot * gn + bidx < 50 else (set(), set())
        assert got == want and (got[0] != set()) == (slot * gn + bidx < 50), (slot, bidx)


def test_with_pdl_configs():
    fc1 = W4P1[0]
    assert X.with_pdl(fc1, "off") == fc1 and type(X.with_pdl(fc1, "off")) is type(fc1)
    pre = X.with_pdl(fc1, "prefetch")
    assert isinstance(pre, X.ExpertConfig) and pre.pdl == "prefetch"
    assert X.with_pdl(pre, "off") == fc1 and type(X.with_pdl(pre, "off")) is type(fc1)
    early = dataclasses.replace(X.with_pdl(fc1, "wait"), early=True)
    assert X.with_pdl(early, "off") == dataclasses.replace(early, pdl="off")  # keeps its own option
    assert X.why_not(1, "bfloat16", "nvfp4", "silu", pre) is None
    bad = dataclasses.replace(pre, pdl="early")
    assert "pdl must be one of ('off', 'wait', 'prefetch'), got 'early'" in X.why_not(
        1, "bfloat16", "nvfp4", "silu", bad
    )
    assert X.with_pdl(fc1, "prefetch", 660).prefetch_ctas == 660 and X.with_pdl(fc1, "wait", 660).prefetch_ctas == 0
    for ctas, pdl in ((-1, "prefetch"), (True, "prefetch"), (8, "wait")):
        bad = dataclasses.replace(pre, pdl=pdl, prefetch_ctas=ctas)
        reason = X.why_not(2, "bfloat16", "nvfp4", None, bad)
        assert "prefetch_ctas must be an int >= 0, and 0 unless pdl is 'prefetch'" in reason


@pytest.mark.parametrize("mode", ["wait", "prefetch"])
def test_with_pdl_on_the_heuristic_plan(mode):
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
    with pytest.raises(ValueError, match=r"pdl must be one of \('off', 'wait', 'prefetch'\), got 'on'"):
        api.with_pdl(base, "on")
    with pytest.raises(ValueError, match=r"prefetch_ctas must be an int >= 0, got -3"):
        api.with_pdl(base, "prefetch", prefetch_ctas=-3)
    first = api.with_pdl(base, "prefetch", prefetch_ctas=660)
    assert all(b.tiled or (b.fc1.prefetch_ctas, b.fc2.prefetch_ctas) == (660, 660) for b in first.experts)
    bad = dataclasses.replace(cfg.experts[0], fc2=dataclasses.replace(cfg.experts[0].fc2, pdl="on"))
    with pytest.raises(ValueError, match=r"override.experts\[0\].fc2: pdl must be one of"):
        fm.plan(caps, override=dataclasses.replace(cfg, experts=(bad, *cfg.experts[1:])))


# ---- compile tier ---------------------------------------------------------------------------------
def _after_params(ptx: str) -> str:
    return ptx[ptx.index("{", ptx.index(".entry")) :]


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("grid", X.GRIDS)
@pytest.mark.parametrize("mode", ["off", "wait", "prefetch", "prefetch:660"])
def test_expert_kernels_wait_before_their_first_load(mode, grid, arch):
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    for fc, a_fmt, b_fmt, act in ((1, "bfloat16", "nvfp4", "silu"), (2, "nvfp4", "nvfp4", None)):
        pdl, _, ctas = mode.partition(":")
        cfg = X.with_pdl(W4P1[fc - 1], pdl, int(ctas or 0))
        if fc == 1:
            fn = X.compile_fc1(a_fmt, b_fmt, act, cfg, arch, grid)
        else:
            fn = X.compile_fc2(a_fmt, b_fmt, cfg, arch, grid)
        body = _after_params(fn.artifacts.PTX)
        assert re.search(rf"\.target {arch}\b", fn.artifacts.PTX) and ".local" not in body
        prefetches = body.count("prefetch.global.L2")
        if mode == "off":
            assert "griddepcontrol" not in body and prefetches == 0
            continue
        wait = body.index("griddepcontrol.wait")
        assert body.count("griddepcontrol.wait") == 1 and "griddepcontrol.launch_dependents" in body[wait:]
        assert "ld.global" not in body[:wait], f"fc{fc} {mode} {grid}: a global load before the wait"
        assert (prefetches > 0) == (pdl == "prefetch" and grid == "identity")
        assert "prefetch.global.L2" not in body[wait:]


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


def test_quant_layout_oracle_is_the_codec():
    """The scale oracle above is `_lib.quant`'s swizzle (a guard on the test itself)."""
    import torch

    rows, cols = 40, 6
    flat = torch.arange(rows * cols, dtype=torch.int32).reshape(rows, cols).to(torch.uint8)
    sw = Q.swizzle_scales(flat, 0)
    cols4 = -(-cols // 4) * 4
    for r in range(rows):
        for c in range(cols):
            assert int(sw.view(-1)[AD.swizzled_offset(_IntOps, r, c, cols4)]) == int(flat[r, c])
