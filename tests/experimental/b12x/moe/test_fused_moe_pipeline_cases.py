"""moe.fused_moe's Triton pipeline under TRITON_INTERPRET=1 on CPU tensors (run by
test_fused_moe_pipeline.py in a fresh interpreter: the variable must be set before triton.jit runs).

The real host path runs: `api.device_binding` + `api.execute` on a NaN/garbage-poisoned workspace laid
out by the plan's scratch specs, with the interpreted routing/requantize/combine launchers and the
torch stand-ins of the expert GEMMs (stand_in.py). Checked:
- routing metadata (micro and dynamic paths, int32/int64 ids, ignored routes, T = 1, 7, capacity);
- gather and requantize bytes against the `_lib.quant` oracles, bit for bit;
- combine bit for bit against the reference's fp32 sum order;
- the whole layer against reference.py (per-row cosine and the tolerance rule), with the gpu tier's
  workspace read-back: operand bytes vs the oracles and FC1's intermediate vs act(FC1) (stand_in).

Interpreter patches (its conversions differ from the GPU's; these make it do what the GPU does):
quantization/_interpret_run.py's (fp32 -> e4m3 RNE-satfinite, exact bf16 -> fp32) and
norm/conftest.py's (fp32 -> bf16 round-to-nearest-even).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from pathlib import Path

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("runs inside test_fused_moe_pipeline.py's TRITON_INTERPRET=1 subprocess", allow_module_level=True)

from flashinfer.experimental.b12x._lib import quant as Q  # noqa: E402
from flashinfer.experimental.b12x._lib.scratch import dtype_name  # noqa: E402
from flashinfer.experimental.b12x.moe import fused_moe as fm  # noqa: E402
from flashinfer.experimental.b12x.moe.fused_moe import _combine, _routing, api  # noqa: E402
from flashinfer.experimental.b12x.moe.fused_moe import reference as REF  # noqa: E402

from .moe_cases import activations, checkpoint, weight_plan  # noqa: E402
from .stand_in import (  # noqa: E402
    assert_bf16_close,
    check_intermediate,
    check_layer,
    check_operands,
    dense_layer,
    fc1_routes,
    fc1_stand_in,
    fc2_stand_in,
    kernel_intermediate,
    row_cosine,
)

pytestmark = pytest.mark.interpret
HERE = Path(__file__).resolve().parent


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_quant_run = _load(HERE.parent / "quantization" / "_interpret_run.py", "_b12x_moe_quant_interpret")
_quant_run._patch_conversions()
_load(HERE.parent / "norm" / "conftest.py", "_b12x_moe_norm_conftest")  # patches at import
make_input = _quant_run.make_input

E, H, INTER, K, MAX_T = 6, 64, 32, 3, 8
# Tiny tiles so every loop runs more than once: several route blocks and compare chunks, experts in
# two blocks, the scan in several steps, H in two chunks, and each chunk gathered in two column steps
# (gather_tile 64 over 4 rows: 16 columns a step; MXFP8's 32-column scale block keeps one).
TINY = dict(block_r=4, block_h=32, chunk=8, e_block=4, dyn_block_r=4, scan_b=2, gather_tile=64)
MICRO = _routing.RoutingConfig(**TINY, micro_max_routes=64)
DYNAMIC = _routing.RoutingConfig(**TINY, micro_max_routes=1)
MICRO_C, DYNAMIC_C = (dataclasses.replace(c, compact_grid=True) for c in (MICRO, DYNAMIC))


def poisoned(spec) -> torch.Tensor:
    dt = getattr(torch, dtype_name(spec.dtype))
    if dt.is_floating_point:
        return torch.full(spec.shape, float("nan"), dtype=dt)
    return torch.full(spec.shape, 0xAB if dt == torch.uint8 else -7777, dtype=dt)


def workspace(p, routing_cfg):
    config = api.MoeConfig(routing_cfg, _combine.default_config(p.caps.weight_plan.intermediate_size), None)
    s = {spec.name: poisoned(spec) for spec in p.scratch_specs(config, "cuda")}
    api._fill_constants(p, s)
    s["route_row"].fill_(-7777)  # _fill_constants' -1 would hide a missing write
    if routing_cfg.compact_grid:
        s["active"].fill_(-7777)  # the routing must write all of it
    return s


def layer(wplan, mode, *, on_input=False, routing_cfg=MICRO, max_tokens=MAX_T, k=K, **swiglu):
    caps = fm.Caps(
        max_tokens=max_tokens,
        num_topk=k,
        device="cpu",
        weight_plan=wplan,
        quant_mode=mode,
        apply_router_weight_on_input=on_input,
        **swiglu,
    )
    p = fm.plan(caps)
    a1, a2 = p.operand_formats
    e, h, i = wplan.num_experts, wplan.hidden_size, wplan.intermediate_size
    # the grid variants the plan would compile (api.expert_grids), so a binding that picks another fails
    grids = api.expert_grids(routing_cfg.compact_grid, e, k, max_tokens)
    launchers = api.Launchers(
        routing={d: _routing.interpreted_routing(d, k, e, h, a1, on_input, routing_cfg) for d in api.IDS_DTYPES},
        combine=_combine.interpreted_combine(k, e, h, i, a2, on_input),
        experts={
            (g, 0): (
                fc1_stand_in(a1, wplan.weight_format, wplan.activation, g),
                fc2_stand_in(a2 or "bfloat16", wplan.weight_format, g),
            )
            for g in grids
        },
    )
    return p, workspace(p, routing_cfg), launchers


def ids_with_ignored(t, k, e, seed, dtype=torch.int32):
    """Random ids in [-2, e + 2): ignored routes on both sides, repeats inside a token."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-2, e + 2, (t, k), generator=g).to(dtype)


def weights(t, k, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(t, k, generator=g) + 0.25


# ---- routing metadata ------------------------------------------------------------------------------
def check_routing(s, ids, e, k):
    flat = ids.reshape(-1).long()
    valid = (flat >= 0) & (flat < e)
    counts = torch.bincount(flat[valid], minlength=e)
    start = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    assert torch.equal(s["expert_start"].long(), start), (s["expert_start"], start)
    rr = s["route_row"][: flat.numel()].long()
    assert (rr[~valid] == -1).all()
    for x in range(e):  # each expert's routes take its rows in route order
        assert torch.equal(rr[flat == x], start[x] + torch.arange(int(counts[x])))
    rows = rr[valid]
    assert torch.equal(s["sorted_token"][rows].long(), (torch.arange(flat.numel()) // k)[valid])
    assert torch.equal(s["sorted_expert"][rows].long(), flat[valid])
    n = int(start[-1])
    assert (s["sorted_token"][n:] == -7777).all() and (s["sorted_expert"][n:] == -7777).all()


@pytest.mark.parametrize("cfg", [MICRO, DYNAMIC], ids=["micro", "dynamic"])
@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("t", [1, 7, MAX_T])
def test_routing_metadata(cfg, ids_dtype, t):
    p, s, L = layer(weight_plan("modelopt_nvfp4", "silu", e=E, h=H, i=INTER), "w4a16", routing_cfg=cfg)
    ids = ids_with_ignored(t, K, E, seed=t, dtype=ids_dtype)
    a = activations(t, H)
    L.routing[dtype_name(ids_dtype)](t, ids, weights(t, K, 3), a, s, s["alpha1"], s["alpha2"])
    check_routing(s, ids, E, K)
    assert (s["alpha1"] == 1).all() and (s["alpha2"] == 1).all()


def check_active(s, ids, e):
    """compact_grid: active = the hit experts ascending, then e."""
    flat = ids.reshape(-1).long()
    hit = torch.unique(flat[(flat >= 0) & (flat < e)])
    want = torch.cat([hit, torch.full((e - hit.numel(),), e, dtype=torch.long)])
    assert torch.equal(s["active"].long(), want), (s["active"], want)


@pytest.mark.parametrize("cfg", [MICRO_C, DYNAMIC_C], ids=["micro", "dynamic"])
@pytest.mark.parametrize("t", [1, 7, MAX_T])
def test_compact_grid_lists_the_hit_experts(cfg, t):
    for ids in (ids_with_ignored(t, K, E, seed=t + 40), torch.full((t, K), -1, dtype=torch.int32)):
        p, s, L = layer(weight_plan("modelopt_nvfp4", "silu", e=E, h=H, i=INTER), "nvfp4", routing_cfg=cfg)
        L.routing["int32"](t, ids, weights(t, K, 3), activations(t, H), s, torch.rand(E) + 1, torch.rand(E) + 1)
        check_routing(s, ids, E, K)
        check_active(s, ids, E)


def test_routing_all_ignored_and_strided_ids():
    p, s, L = layer(weight_plan("modelopt_nvfp4", "silu", e=E, h=H, i=INTER), "w4a16")
    none = torch.full((5, K), -1, dtype=torch.int32)
    L.routing["int32"](5, none, weights(5, K, 1), activations(5, H), s, s["alpha1"], s["alpha2"])
    assert (s["expert_start"] == 0).all() and (s["route_row"][: 5 * K] == -1).all()
    wide = ids_with_ignored(7, 2 * K, E, seed=9)[:, ::2]  # strides (2k, 2)
    w = weights(7, 2 * K, 2)[:, 1::2]
    L.routing["int32"](7, wide, w, activations(7, H), s, s["alpha1"], s["alpha2"])
    check_routing(s, wide, E, K)


# ---- gather / requantize / combine bytes -----------------------------------------------------------
def _oracle_row(fmt, x, gs):
    """(values bytes [cols'], scale bytes [cols / block]) of one fp32 row, or bf16 values."""
    if fmt == "bfloat16":
        return x.bfloat16(), None
    if fmt == "nvfp4":
        q, sf = Q.quantize_nvfp4(x, gs)
        return q, sf.view(torch.uint8)
    v, sc = Q.quantize_mxfp8(x)
    return v.view(torch.uint8), sc


def _check_operand(fmt, values, scales, rows_x, n_rows, gs_of_row, cols):
    block = {"nvfp4": 16, "mxfp8": 32}.get(fmt)
    grid = None if block is None else Q.unswizzle_scales(scales, values.shape[0], cols // block)
    for p_row in range(n_rows):
        want_v, want_s = _oracle_row(fmt, rows_x[p_row], gs_of_row[p_row])
        got_v = values[p_row]
        assert torch.equal(
            got_v.view(torch.int16) if fmt == "bfloat16" else got_v,
            want_v.view(torch.int16) if fmt == "bfloat16" else want_v,
        ), f"row {p_row} values"
        if grid is not None:
            assert torch.equal(grid[p_row], want_s), f"row {p_row} scales {grid[p_row]} vs {want_s}"


MODES = {"bfloat16": "w4a16", "nvfp4": "nvfp4", "mxfp8": "w4a8_nvfp4"}
# Per-expert a1 global scales: ties; and extremes for the "pairs" encode's branches (below 2^-64 its
# prologue scales by 2^64, above 2^100 its thresholds are all computed, not doubled), one per expert.
GSCALES = {
    "ties": torch.tensor([1.0, 0.5, 2.0, 3.0, 1.0, 0.75]),
    "gscales": torch.tensor([1e-30, 3e-20, 0.37, 2e30, 1e37, 5e4]),
}


@pytest.mark.parametrize("cfg", [MICRO, DYNAMIC], ids=["micro", "dynamic"])
@pytest.mark.parametrize("on_input", [False, True])
@pytest.mark.parametrize(
    "fmt, data",
    [
        ("bfloat16", "wide"),
        ("nvfp4", "wide"),
        ("nvfp4", "specials"),
        ("nvfp4", "ties"),
        ("nvfp4", "gscales"),
        ("mxfp8", "wide"),
        ("mxfp8", "specials"),
        ("mxfp8", "ties"),
    ],
)
def test_gather_matches_oracles(cfg, on_input, fmt, data):
    p, s, L = layer(
        weight_plan("modelopt_nvfp4", "silu", e=E, h=H, i=INTER), MODES[fmt], on_input=on_input, routing_cfg=cfg
    )
    t = 7
    kind = "wide" if data == "gscales" else data
    a = make_input(kind, t, H, torch.bfloat16, 16 if fmt == "nvfp4" else 32, seed=len(data) + on_input)
    ids = ids_with_ignored(t, K, E, seed=5)
    w = weights(t, K, 6) if data != "ties" else torch.ones(t, K)
    g1 = GSCALES.get(data, torch.rand(E) * 100 + 1)
    g2 = torch.rand(E) * 10 + 1
    L.routing["int32"](t, ids, w, a, s, g1, g2)
    check_routing(s, ids, E, K)
    n = int(s["expert_start"][E])
    tok, ex = s["sorted_token"][:n].long(), s["sorted_expert"][:n].long()
    slot = torch.tensor(
        [int((s["route_row"][tt * K : tt * K + K] == pp).nonzero()) for pp, tt in enumerate(tok.tolist())]
    )
    x = a[tok].float() * (w[tok, slot][:, None] if on_input else 1.0)
    _check_operand(fmt, s["a1"], s.get("a1_scales"), x, n, g1[ex] if fmt == "nvfp4" else [None] * n, H)
    rest = s["a1"][n:]
    assert rest.isnan().all() if fmt == "bfloat16" else (rest == 0xAB).all(), "rows past start[E] were written"
    if fmt == "nvfp4":
        assert torch.equal(s["alpha1"], 1.0 / g1) and torch.equal(s["alpha2"], 1.0 / g2)
    else:
        assert (s["alpha1"] == 1).all() and (s["alpha2"] == 1).all()


@pytest.mark.parametrize("cfg", [MICRO, DYNAMIC], ids=["micro", "dynamic"])
def test_gather_nvfp4_encodes_agree(cfg):
    """RoutingConfig.nvfp4_encode: "pairs" (the default) and "search" write the same bytes, ignored
    routes' scale bytes included (untouched by both)."""
    wplan = weight_plan("modelopt_nvfp4", "silu", e=E, h=H, i=INTER)
    t, out = 7, []
    a = make_input("specials", t, H, torch.bfloat16, 16, seed=3)
    ids, w = ids_with_ignored(t, K, E, seed=8), weights(t, K, 9)
    for enc in ("pairs", "search"):
        p, s, L = layer(wplan, "nvfp4", routing_cfg=dataclasses.replace(cfg, nvfp4_encode=enc))
        assert _routing.uses_pairs("nvfp4", False, L.routing["int32"].config) == (enc == "pairs")
        L.routing["int32"](t, ids, w, a, s, GSCALES["gscales"], GSCALES["ties"])
        out.append((s["a1"].clone(), s["a1_scales"].clone()))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


@pytest.mark.parametrize(
    "fmt, data", [("nvfp4", "wide"), ("nvfp4", "specials"), ("mxfp8", "wide"), ("mxfp8", "specials")]
)
def test_requantize_matches_oracles(fmt, data):
    p, s, L = layer(weight_plan("modelopt_nvfp4", "silu", e=E, h=H, i=INTER), MODES[fmt])
    t = 7
    n = 15  # live rows of 21 routes: the rest must stay untouched
    s["c1"].copy_(make_input(data, MAX_T * K, INTER, torch.bfloat16, 16 if fmt == "nvfp4" else 32, seed=11))
    ex = torch.randint(0, E, (MAX_T * K,), generator=torch.Generator().manual_seed(4)).to(torch.int32)
    s["sorted_expert"].copy_(ex)
    s["expert_start"].copy_(torch.tensor([0, 2, 5, 9, 9, 12, n], dtype=torch.int32))
    g2 = torch.rand(E) * 50 + 1
    L.combine.requantize(t, s, g2)
    _check_operand(
        fmt, s["a2"], s["a2_scales"], s["c1"].float(), n, g2[ex.long()] if fmt == "nvfp4" else [None] * n, INTER
    )
    assert (s["a2"][n:] == 0xAB).all()


@pytest.mark.parametrize("on_input", [False, True])
@pytest.mark.parametrize("t", [1, 7])
def test_combine_is_the_reference_sum(on_input, t):
    p, s, L = layer(weight_plan("modelopt_nvfp4", "silu", e=E, h=H, i=INTER), "w4a16", on_input=on_input)
    g = torch.Generator().manual_seed(t)
    s["c2"].copy_(torch.randn(MAX_T * K, H, generator=g) * torch.logspace(-3, 3, H))
    rr = torch.randperm(MAX_T * K, generator=g)[: t * K].to(torch.int32)
    rr[torch.rand(t * K, generator=g) < 0.3] = -1
    s["route_row"][: t * K] = rr
    w = weights(t, K, 8)
    out = torch.full((t, H), float("nan"), dtype=torch.bfloat16)
    L.combine(t, s, w, out)
    want = torch.zeros(t, H)
    for j in range(K):
        for tt in range(t):
            row = int(rr[tt * K + j])
            if row >= 0:
                want[tt] += s["c2"][row] if on_input else w[tt, j] * s["c2"][row]
    assert torch.equal(out.view(torch.int16), want.bfloat16().view(torch.int16))


# ---- the whole layer --------------------------------------------------------------------------------
CASES = [
    ("modelopt_nvfp4", "w4a16", "silu"),
    ("modelopt_nvfp4", "nvfp4", "silu"),
    ("modelopt_nvfp4", "nvfp4", "relu2"),
    ("modelopt_nvfp4", "nvfp4", "swiglu_oai"),
    ("modelopt_nvfp4", "w4a8_nvfp4", "swiglu_oai"),
    ("fp4_e8m0_k32", "w4a16", "relu2"),
    ("fp4_e8m0_k32", "w4a16", "swiglu_oai"),
    ("fp4_e8m0_k32", "w4a8_mx", "silu"),
]


@pytest.mark.parametrize("cfg", [MICRO, DYNAMIC], ids=["micro", "dynamic"])
@pytest.mark.parametrize("on_input", [False, True])
@pytest.mark.parametrize("t", [1, 7, MAX_T])
@pytest.mark.parametrize("source, mode, act", CASES)
def test_layer_matches_reference(source, mode, act, t, on_input, cfg):
    wplan = weight_plan(source, act, (mode,), e=E, h=H, i=INTER, layout="w31" if t == 7 else "w13")
    experts = fm.prepare_weights(plan=wplan, **checkpoint(wplan, seed=t))
    p, s, L = layer(wplan, mode, on_input=on_input, routing_cfg=cfg)
    a = activations(t, H, seed=t + 10)
    ids = ids_with_ignored(t, K, E, seed=t + 20, dtype=torch.int64 if on_input else torch.int32)
    w = weights(t, K, t + 30)
    out = torch.full((t, H), float("nan"), dtype=torch.bfloat16)
    api.execute(L, api.device_binding(p, s, a, experts, w, ids, out, compact=cfg.compact_grid), out)
    kw = dict(quant_mode=mode, on_input=on_input)
    # the gpu tier's workspace read-back (its stages 1 and 2) on the interpreted pipeline
    check_operands(s, p.operand_formats, on_input, experts, a, ids, w)
    g, spread = fc1_routes(a, experts, w, ids, **kw)
    valid = (ids >= 0) & (ids < E)
    check_intermediate(kernel_intermediate(s, ids, E), g, spread, valid, what=f"{mode} {act} T={t}")
    ref = REF.fused_moe(a, experts, w, ids, quant_mode=mode, apply_router_weight_on_input=on_input)
    ref32 = dense_layer(a, experts, w, ids, **kw)
    assert_bf16_close(ref32, ref)  # the vectorized reference is reference.py's math
    # Both round act(FC1) to bf16 before FC2's quantization (reference.py's definition; FC1 stores
    # bf16 C). A different fp32 summation order can still flip one FP4 code near a rounding boundary:
    # at I = 32 one code of a row's 2 blocks moves its cosine by up to ~2e-3 (0.9999 is the GPU tier's
    # bar, at real I), so the quantized recipes get that much room here.
    peer = dense_layer(a, experts, w, ids, bf16=True, **kw)
    check_layer(out, ref32, peer, what=f"{mode} {act} T={t}")
    floor = 0.9999 if mode == "w4a16" else 0.9999 - 2e-3
    assert bool((row_cosine(out.float(), ref32) >= floor).all())


@pytest.mark.parametrize("cfg", [MICRO_C, DYNAMIC_C], ids=["micro", "dynamic"])
@pytest.mark.parametrize("t", [1, MAX_T])
@pytest.mark.parametrize("source, mode, act", [CASES[2], CASES[6]])
def test_layer_with_compact_grid(source, mode, act, t, cfg):
    # the stand-in GEMMs visit only the listed experts, as the kernels' grid does: a hit expert
    # missing from the list leaves its rows NaN
    test_layer_matches_reference(source, mode, act, t, False, cfg)


def test_workspace_read_back_sees_one_wrong_byte():
    """The gpu tier's read-back checks fail on one corrupted operand byte or intermediate element."""
    wplan = weight_plan("modelopt_nvfp4", "relu2", ("nvfp4",), e=E, h=H, i=INTER)
    experts = fm.prepare_weights(plan=wplan, **checkpoint(wplan, seed=3))
    p, s, L = layer(wplan, "nvfp4")
    t = 7
    a, ids, w = activations(t, H, seed=13), ids_with_ignored(t, K, E, seed=23), weights(t, K, 33)
    out = torch.full((t, H), float("nan"), dtype=torch.bfloat16)
    api.execute(L, api.device_binding(p, s, a, experts, w, ids, out), out)
    args = (s, p.operand_formats, False, experts, a, ids, w)
    check_operands(*args)
    g, spread = fc1_routes(a, experts, w, ids, quant_mode="nvfp4")
    valid = (ids >= 0) & (ids < E)
    check_intermediate(kernel_intermediate(s, ids, E), g, spread, valid)
    for name in ("a1", "a2"):
        s[name][1, 3] ^= 0x10
        with pytest.raises(AssertionError, match=f"{name} values of expert"):
            check_operands(*args)
        s[name][1, 3] ^= 0x10
    live = kernel_intermediate(s, ids, E)
    tt, j = (valid & (g.abs().amax(-1) > 0)).nonzero()[0].tolist()
    col = int(g[tt, j].abs().argmax())
    s["c1"][int(s["route_row"][tt * K + j]), col] *= 1.02  # two bf16 ulps off
    with pytest.raises(AssertionError, match="outside bf16 rounding"):
        check_intermediate(kernel_intermediate(s, ids, E), g, spread, valid)
    assert not torch.equal(live, kernel_intermediate(s, ids, E))
