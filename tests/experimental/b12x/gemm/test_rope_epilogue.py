"""The fused decode GEMM's "rope_append" epilogue (issue #10) on the CPU: the kernel's own logic on the PTX
emulator against a plain-torch composition (the GEMM's fp32 sums, NeoX rotate-half in fp32, one
rounding; q out and the scattered cache rows poisoned with NaN first, every other cache row checked
bitwise untouched), the CPU reference path of `mm(..., epilogue="rope_append")` against the same
composition, the api's checks, the plan's config, and compiles for sm_90a / sm_120a."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from flashinfer.experimental.b12x.gemm import blockscaled as G
from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode_fused as F
from flashinfer.experimental.b12x.gemm.blockscaled import api as API
from flashinfer.experimental.b12x.gemm.blockscaled import reference as R

from .helpers import TORCH, dequantized_weight, make_operands
from .test_decode_fused import FusedEmuOps, run_fused

RopeAppend, RopeLayout = API.RopeAppend, API.RopeLayout


# ---- the plain-torch composition the epilogue must equal ------------------------------------------
def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D] fp32 -> x * [c, c] + rotate_half(x) * [s, s] (rotate_half(x) = [-x2, x1]): the
    same fp32 values as x1 c - x2 s, x2 c + x1 s, written the other common way."""
    x1, x2 = x.chunk(2, dim=-1)
    c, s = torch.cat([cos, cos], -1)[:, None, :], torch.cat([sin, sin], -1)[:, None, :]
    return x * c + torch.cat([-x2, x1], dim=-1) * s


def expected(prod: torch.Tensor, lay: RopeLayout, cos, sin):
    """(q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D]) fp32 of the fp32 product [T, N]."""
    t, d = prod.shape[0], lay.head_dim
    q, k, v = prod.float().split([lay.q_heads * d, lay.kv_heads * d, lay.kv_heads * d], dim=-1)
    return rotate(q.reshape(t, -1, d), cos, sin), rotate(k.reshape(t, -1, d), cos, sin), v.reshape(t, -1, d)


def make_rope(lay: RopeLayout, t: int, dtype, seed: int, pages: int | None = None, device="cpu"):
    """Tables for random positions, a cache of random rows (pages x page_size), distinct scattered slots
    whose rows are NaN. Returns (RopeAppend, (k, v) copies of the caches before the call)."""
    g = torch.Generator().manual_seed(seed)
    d, ps = lay.head_dim, lay.page_size
    pages = pages or max(2, (3 * t) // ps + 2)
    pos = torch.randint(0, 4096, (t,), generator=g)
    inv = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos.double()[:, None] * inv[None, :]
    cos, sin = ang.cos().float(), ang.sin().float()
    k_cache = torch.randn(pages, ps, lay.kv_heads, d, generator=g).to(dtype)
    v_cache = torch.randn(pages, ps, lay.kv_heads, d, generator=g).to(dtype)
    slots = torch.randperm(pages * ps, generator=g)[:t]
    slot_page, slot_off = slots // ps, slots % ps
    k_cache[slot_page, slot_off] = float("nan")
    v_cache[slot_page, slot_off] = float("nan")
    before = (k_cache.clone(), v_cache.clone())
    rope = RopeAppend(*(x.to(device) for x in (cos, sin, k_cache, v_cache, slot_page, slot_off)))
    return rope, before


def check_untouched(after: torch.Tensor, before: torch.Tensor, rope: RopeAppend) -> torch.Tensor:
    """Every cache row but the call's slots bitwise as before; returns the slots' rows [T, Hkv, D]."""
    mask = torch.ones(after.shape[:2], dtype=torch.bool)
    mask[rope.slot_page.cpu(), rope.slot_off.cpu()] = False
    a, b = after.cpu().view(torch.int16), before.view(torch.int16)
    assert torch.equal(a[mask], b[mask]), "a cache row outside the call's slots changed"
    return after.cpu()[rope.slot_page.cpu(), rope.slot_off.cpu()]


def check_values(name: str, ours: torch.Tensor, ref: torch.Tensor, peer: torch.Tensor) -> None:
    """The project's rule: max |ours - fp32 ref| <= 2 x max |torch same precision - ref| + 2^-20 max |ref|."""
    ours = ours.float()
    assert not torch.isnan(ours).any(), f"{name} holds NaN (unwritten or poisoned elements)"
    err = (ours - ref).abs().max().item()
    peer_err = (peer.float() - ref).abs().max().item()
    floor = ref.abs().max().item() * 2.0**-20
    assert err <= 2 * peer_err + floor, f"{name}: max error {err:.3e} > 2 x the unfused peer's {peer_err:.3e}"


def check_outputs(q, k_rows, v_rows, ops, lay, rope, out_dtype, norm=None) -> None:
    """q [T, Hq, D] and the slots' k / v rows against the fp32 composition; the peer is torch with
    operands rounded to the compute dtype (and the product rounded to out_dtype before the rotation,
    as the unfused GEMM + rope kernels do)."""
    cos, sin = rope.cos.cpu(), rope.sin.cpu()
    if norm is None:
        prod = ops.reference("float32").float()
        peer_prod = ops.torch_same_precision(out_dtype).float()
    else:
        h = R.rms_norm(ops.a_values, *norm)
        w = dequantized_weight(ops.weight)
        alpha = ops.alpha * float(ops.weight.alpha)
        prod = (h @ w.t()) * alpha
        peer_prod = ((h.bfloat16().float() @ w.bfloat16().float().t()) * alpha).to(TORCH[out_dtype]).float()
    refs = expected(prod, lay, cos, sin)
    peers = [x.to(TORCH[out_dtype]) for x in expected(peer_prod, lay, cos, sin)]
    for name, ours, ref, peer in zip(("q", "k", "v"), (q, k_rows, v_rows), refs, peers):
        assert ours.shape == ref.shape, (name, ours.shape, ref.shape)
        check_values(name, ours.cpu(), ref, peer)


# ---- the kernel's logic on the emulator -----------------------------------------------------------
EMU_CASES = [  # (RopeLayout, t, K, DecodeConfig, pdl, norm)
    (RopeLayout(2, 1, 16, 4), 1, 256, KD.DecodeConfig(2, 1, 1, 2), "prefetch", False),
    (RopeLayout(3, 1, 32, 16), 3, 256, KD.DecodeConfig(2, 2, 1, 1), "off", False),  # 80 pairs: a tail CTA
    (RopeLayout(2, 2, 16, 8), 8, 384, KD.DecodeConfig(4, 1, 1, 1, 1), "wait", False),  # the prefetch pipeline
    (RopeLayout(4, 2, 32, 16), 3, 256, KD.DecodeConfig(2, 4, 1, 1), "off", True),  # norm, BN 64 > D
    (RopeLayout(2, 1, 64, 16), 8, 256, KD.DecodeConfig(2, 2, 1, 2, clamp=True), "prefetch", False),
    (RopeLayout(1, 1, 16, 16), 12, 256, KD.DecodeConfig(2, 1, 2, 1), "off", False),  # two token tiles
]


def emulate(lay, t, k, cfg, pdl, norm, seed, early=False, a_fmt="bfloat16", b_fmt="nvfp4"):
    """Run the rope kernel on the emulator; returns (q, k rows, v rows, ops, rope, norm args)."""
    out_dtype = "bfloat16"
    ops = make_operands(a_fmt, b_fmt, t, lay.rows, k, seed=seed)
    rope, before = make_rope(lay, t, torch.bfloat16, seed)
    q = torch.full((t, lay.q_heads * lay.head_dim), float("nan"), dtype=torch.bfloat16)
    args, alpha = L.launch_args(ops.a_fmt, ops.a_values, ops.a_scales, None, ops.b_fmt, ops.b_values,
                                ops.b_scales, ops.weight.alpha, ops.alpha, q)  # fmt: skip
    nargs = None
    if norm:
        g = (1.0 + 0.2 * torch.randn(k, generator=torch.Generator().manual_seed(seed))).bfloat16()
        nargs = (g, 1e-5)
    *tensors, alpha, eps = L.fused_args(args, alpha, q, None, *(nargs or (None, 1e-6)), rope=rope)
    config = F.FusedConfig(cfg, "rope_append", pdl, norm, lay, early)
    out, gmem, bases = run_fused(a_fmt, b_fmt, out_dtype, config, tuple(tensors), alpha, eps)
    caches = []
    for i, before_i in zip((12, 13), before):
        after = torch.from_numpy(gmem.get(bases[i]).copy()).view(torch.bfloat16).reshape(before_i.shape)
        caches.append(check_untouched(after, before_i, rope))
    return out.reshape(t, lay.q_heads, lay.head_dim), *caches, ops, rope, nargs


@pytest.mark.interpret
@pytest.mark.parametrize("early", [False, True])
@pytest.mark.parametrize("case", range(len(EMU_CASES)))
def test_rope_append_on_the_emulator(case, early):
    """early: the tables loaded after the wait, before the K loop (FusedConfig.early)."""
    lay, t, k, cfg, pdl, norm = EMU_CASES[case]
    q, k_rows, v_rows, ops, rope, nargs = emulate(lay, t, k, cfg, pdl, norm, seed=case, early=early)
    check_outputs(q, k_rows, v_rows, ops, lay, rope, "bfloat16", nargs)


@pytest.mark.interpret
def test_rope_check_can_fail():
    """Swapping the two halves of every head's weight rows (the pairing) or dropping the rotation must
    fail the check."""
    lay, t, k, cfg, pdl, norm = EMU_CASES[1]
    q, k_rows, v_rows, ops, rope, _ = emulate(lay, t, k, cfg, pdl, norm, seed=1)
    d = lay.head_dim
    with pytest.raises(AssertionError):  # no rotation: q is the plain product
        plain = ops.reference("float32").float()[:, : lay.q_heads * d].reshape(t, lay.q_heads, d)
        check_values("q", plain.bfloat16(), expected(ops.reference("float32"), lay, rope.cos, rope.sin)[0],
                     expected(ops.torch_same_precision("bfloat16").float(), lay, rope.cos, rope.sin)[0].bfloat16())  # fmt: skip
    swapped = torch.cat([q[..., d // 2 :], q[..., : d // 2]], dim=-1)
    with pytest.raises(AssertionError):
        check_outputs(swapped, k_rows, v_rows, ops, lay, rope, "bfloat16")


@pytest.mark.interpret
@pytest.mark.parametrize("tiles", [1, 2])
def test_rope_prefetch_lines_are_the_k_loops_weight_lines(tiles):
    """pdl="prefetch" prefetches exactly the 128-byte lines of B and its scales that the rope pairing's K
    loop reads (80 pairs: a tail CTA)."""
    lay, k = RopeLayout(3, 1, 32, 16), 512
    ops = make_operands("bfloat16", "nvfp4", 2, lay.rows, k, seed=tiles)
    rope, _ = make_rope(lay, 2, torch.bfloat16, tiles)
    q = torch.full((2, lay.q_heads * lay.head_dim), float("nan"), dtype=torch.bfloat16)
    args, alpha = L.launch_args(ops.a_fmt, ops.a_values, ops.a_scales, None, ops.b_fmt, ops.b_values,
                                ops.b_scales, ops.weight.alpha, ops.alpha, q)  # fmt: skip
    *tensors, alpha, eps = L.fused_args(args, alpha, q, rope=rope)
    config = F.FusedConfig(KD.DecodeConfig(2, tiles, 1, 1), "rope_append", "prefetch", rope=lay)
    _, gmem, bases = run_fused("bfloat16", "nvfp4", "bfloat16", config, tuple(tensors), alpha, eps)
    weight = set()
    for i in (2, 3):  # B, SFB
        lo, size = bases[i], gmem.get(bases[i]).size
        weight |= {line for line in gmem.loaded if lo // F.LINE <= line <= (lo + size - 1) // F.LINE}
    assert weight and gmem.prefetched == weight
    # per CTA (the sets above are unions): the prefetch's local row r is the row the K loop's lane group
    # loads for r = 16 tt + 8 h + g, and the rows of pair p are head D + j and head D + D/2 + j
    logic = F.FusedLogic("bfloat16", "nvfp4", "bfloat16", config)
    ops = FusedEmuOps(gmem)
    rt = F.FusedRuntime(*([0] * 8), np.int32(2), np.int32(lay.pairs), np.int32(k), np.float32(1))
    g = np.arange(32, dtype=np.int32) >> 2
    half = lay.head_dim // 2
    for n0 in range(0, lay.pairs, logic.cols):
        for tt in range(tiles):
            for h in range(2):
                row, ok = logic.weight_row(ops, rt, np.int32(n0), tt, h, g)
                r = 16 * tt + 8 * h + g
                prow, pok = logic._local_row(ops, rt, np.int32(n0), r)
                assert np.array_equal(row[ok], prow[ok]) and np.array_equal(ok, pok)
                second = (r >= logic.cols).astype(np.int32)
                p = n0 + r - second * logic.cols
                want = (p // half) * lay.head_dim + p % half + second * half
                assert np.array_equal(row[ok], want[ok]) and np.array_equal(ok, p < lay.pairs)


# ---- the CPU reference path of mm --------------------------------------------------------------------
@pytest.mark.reference
@pytest.mark.parametrize("t", [1, 3, 8])
def test_mm_rope_append_reference_on_cpu(t):
    """mm(..., epilogue="rope_append") on CPU tensors (the reference backend) == the plain-torch
    composition rounded once, bitwise; q poisoned first; only the slots' cache rows change."""
    lay = RopeLayout(4, 2, 32, 16)
    ops = make_operands("bfloat16", "nvfp4", t, lay.rows, 256, seed=10 + t)
    rope, before = make_rope(lay, t, torch.bfloat16, seed=t)
    q = torch.full((t, lay.q_heads, lay.head_dim), float("nan"), dtype=torch.bfloat16)
    got = G.mm(ops.a_values, ops.weight, q, epilogue="rope_append", rope=rope)
    assert got is q
    prod = G.mm(ops.a_values, ops.weight, c_dtype=torch.float32)  # the GEMM reference's fp32 sums
    q_ref, k_ref, v_ref = (x.bfloat16() for x in expected(prod, lay, rope.cos, rope.sin))
    torch.testing.assert_close(q, q_ref, rtol=0, atol=0)
    torch.testing.assert_close(check_untouched(rope.k_cache, before[0], rope), k_ref, rtol=0, atol=0)
    torch.testing.assert_close(check_untouched(rope.v_cache, before[1], rope), v_ref, rtol=0, atol=0)
    fresh = G.mm(ops.a_values, ops.weight, epilogue="rope_append", rope=rope)  # out allocated [T, Hq, D]
    assert fresh.shape == (t, lay.q_heads, lay.head_dim) and torch.equal(fresh, q)


@pytest.mark.reference
def test_mm_rope_append_with_norm_on_cpu():
    lay = RopeLayout(2, 1, 16, 4)
    ops = make_operands("bfloat16", "nvfp4", 3, lay.rows, 256, seed=3)
    rope, _ = make_rope(lay, 3, torch.bfloat16, seed=3)
    g = (1.0 + 0.2 * torch.randn(256, generator=torch.Generator().manual_seed(3))).bfloat16()
    q = G.mm(ops.a_values, ops.weight, epilogue="rope_append", rope=rope, norm_weight=g, norm_eps=1e-5)
    prod = G.mm(ops.a_values, ops.weight, c_dtype=torch.float32, norm_weight=g, norm_eps=1e-5)
    torch.testing.assert_close(q, expected(prod, lay, rope.cos, rope.sin)[0].bfloat16(), rtol=0, atol=0)


# ---- checks -------------------------------------------------------------------------------------------
@pytest.mark.contract
def test_mm_rope_errors_name_the_argument():
    lay = RopeLayout(2, 1, 16, 4)
    ops = make_operands("bfloat16", "nvfp4", 3, lay.rows, 256, seed=4)
    x, w = ops.a_values, ops.weight
    rope, _ = make_rope(lay, 3, torch.bfloat16, seed=4)

    def with_(**kw):
        return RopeAppend(**{**{f: getattr(rope, f) for f in ("cos", "sin", "k_cache", "v_cache", "slot_page",
                                                               "slot_off")}, **kw})  # fmt: skip

    def call(r=rope, **kw):
        return G.mm(x, w, epilogue="rope_append", rope=r, **kw)

    with pytest.raises(ValueError, match="needs rope=RopeAppend"):
        G.mm(x, w, epilogue="rope_append")
    with pytest.raises(ValueError, match="rope is only read with epilogue='rope_append'"):
        G.mm(x, w, rope=rope)
    with pytest.raises(ValueError, match=r"rope.cos must be a contiguous float32 \[3, 8\]"):
        call(with_(cos=rope.cos.double()))
    with pytest.raises(ValueError, match=r"rope.sin must be a contiguous float32 \[3, 8\]"):
        call(with_(sin=rope.sin[:2]))
    with pytest.raises(ValueError, match="rope.k_cache must be a contiguous bfloat16"):
        call(with_(k_cache=rope.k_cache.float()))
    with pytest.raises(ValueError, match="rope.k_cache must be a contiguous bfloat16"):
        call(with_(k_cache=torch.zeros(4, 4, 1, 32).bfloat16()[..., :16]))  # strided
    with pytest.raises(ValueError, match="rope.v_cache must be a contiguous bfloat16"):
        call(with_(v_cache=rope.v_cache[:1]))
    with pytest.raises(ValueError, match=r"rope.slot_page must be a contiguous int64 \[3\]"):
        call(with_(slot_page=rope.slot_page.int()))
    with pytest.raises(ValueError, match=r"rope.slot_off must be a contiguous int64 \[3\]"):
        call(with_(slot_off=rope.slot_off[:1]))
    with pytest.raises(ValueError, match="does not fit the weight's N"):  # D = 32 does not divide into 64 rows
        call(with_(k_cache=torch.zeros(2, 4, 1, 32).bfloat16(), v_cache=torch.zeros(2, 4, 1, 32).bfloat16()))
    with pytest.raises(ValueError, match=r"out must be a contiguous bfloat16 \[3, 2, 16\]"):
        call(out=torch.empty(3, 64, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="bfloat16 / float16 output"):
        call(c_dtype=torch.float32)
    with pytest.raises(ValueError, match="residual is only read"):
        call(residual=torch.zeros(3, 64).bfloat16())


@pytest.mark.contract
def test_query_and_plan_for_rope_append():
    lay = RopeLayout(16, 4, 128, 16)
    with pytest.raises(ValueError, match="query.rope must be a RopeLayout"):
        G.GemmQuery("bfloat16", "nvfp4", lay.rows, 2048, max_m=8, epilogue="rope_append")
    with pytest.raises(ValueError, match=r"needs N = \(q_heads \+ 2 kv_heads\) head_dim = 3072"):
        G.GemmQuery("bfloat16", "nvfp4", 2048, 2048, max_m=8, epilogue="rope_append", rope=lay)
    with pytest.raises(ValueError, match="query.rope is only read"):
        G.GemmQuery("bfloat16", "nvfp4", lay.rows, 2048, max_m=8, rope=lay)
    with pytest.raises(ValueError, match="head_dim must be a power of two"):
        G.GemmQuery(
            "bfloat16", "nvfp4", 2 * 96 * 3, 2048, max_m=8, epilogue="rope_append", rope=RopeLayout(1, 1, 96, 16)
        )
    with pytest.raises(ValueError, match="out_dtype bfloat16 or float16"):
        G.GemmQuery("bfloat16", "nvfp4", lay.rows, 2048, "float32", max_m=8, epilogue="rope_append", rope=lay)
    with pytest.raises(ValueError, match="max_m must be <= 64"):
        G.GemmQuery("bfloat16", "nvfp4", lay.rows, 2048, max_m=128, epilogue="rope_append", rope=lay)
    q = G.GemmQuery("bfloat16", "nvfp4", lay.rows, 2048, max_m=32, m_values=(1, 8, 32), epilogue="rope_append",
                    pdl="prefetch", norm=True, rope=lay)  # fmt: skip
    sel = G.plan(q).heuristic("sm_90a")
    assert [b for b, _ in sel] == ["decode8", "decode32"]
    for bucket, cfg in sel:
        assert L.is_fused(cfg) and (cfg.epilogue, cfg.pdl, cfg.norm, cfg.rope) == ("rope_append", "prefetch", True, lay)
        assert L.why_not("bfloat16", "nvfp4", "bfloat16", bucket, cfg) is None
    # T = 1 keeps the plain qkv kernel's 16-row tiles (192 CTAs of 8 pairs), not silu_mul's doubling
    assert sel[0][1].decode.tiles == L.decode_config_for(8, lay.rows, 2048, "nvfp4", "bfloat16").tiles
    assert not any(cfg.early for _, cfg in sel)


@pytest.mark.contract
def test_rope_early_env_switch(monkeypatch):
    """B12X_GEMM_ROPE_EARLY=1 turns FusedConfig.early on for rope_append configs up to 32 tokens only."""
    lay = RopeLayout(16, 4, 128, 16)
    monkeypatch.setenv(L.ROPE_EARLY_ENV, "1")
    assert L.fused_config("decode8", lay.rows, 2048, "nvfp4", "bfloat16", "rope_append", "prefetch", rope=lay).early
    assert not L.fused_config("decode8", 2048, 5632, "nvfp4", "bfloat16", "residual", "prefetch").early
    assert L.fused_config("decode32", lay.rows, 2048, "nvfp4", "bfloat16", "rope_append", rope=lay).early
    assert not L.fused_config("decode64", lay.rows, 2048, "nvfp4", "bfloat16", "rope_append", rope=lay).early
    monkeypatch.setenv(L.ROPE_EARLY_ENV, "0")
    assert not L.fused_config("decode8", lay.rows, 2048, "nvfp4", "bfloat16", "rope_append", rope=lay).early


@pytest.mark.contract
def test_kernel_why_not_for_rope():
    d = KD.DecodeConfig(8, 1, 1, 2)
    lay = RopeLayout(16, 4, 128, 16)
    assert "must be a RopeLayout" in F.why_not("bfloat16", "nvfp4", "bfloat16", F.FusedConfig(d, "rope_append"))
    assert "16-bit output" in F.why_not("bfloat16", "nvfp4", "float32", F.FusedConfig(d, "rope_append", rope=lay)) or (
        "bfloat16 / float16" in F.why_not("bfloat16", "nvfp4", "float32", F.FusedConfig(d, "rope_append", rope=lay))
    )
    assert "fp8_block" in F.why_not("fp8_block", "fp8_block", "bfloat16", F.FusedConfig(d, "rope_append", rope=lay))
    assert "only read with" in F.why_not("bfloat16", "nvfp4", "bfloat16", F.FusedConfig(d, "none", rope=lay))
    assert "early" in F.why_not("bfloat16", "nvfp4", "bfloat16", F.FusedConfig(d, "residual", early=True))
    assert F.why_not("bfloat16", "nvfp4", "bfloat16", F.FusedConfig(d, "rope_append", "prefetch", rope=lay)) is None


@pytest.mark.compile
def test_rope_launch_contract_symbols():
    """The rope launcher's extra tensors: symbolic extents (the host checks them), the two caches one
    shape (tvm-ffi then rejects a v_cache unlike k_cache)."""
    pytest.importorskip("cutlass")
    cos, sin, kc, vc, sp, so = F.rope_fake_args("bfloat16")
    assert len(kc.shape) == 4 and all(a is b for a, b in zip(kc.shape, vc.shape))
    assert len({id(x) for x in kc.shape}) == 4
    assert cos.shape[0] is not sin.shape[0] and sp.shape[0] is not so.shape[0]


@pytest.mark.contract
def test_rope_launch_arguments_line_up_with_the_launcher():
    """launch.fused_args(..., rope=) hands the rope launcher its tensors in its parameter order."""
    import inspect

    lay = RopeLayout(2, 1, 16, 4)
    ops = make_operands("bfloat16", "nvfp4", 2, lay.rows, 256, seed=6)
    rope, _ = make_rope(lay, 2, torch.bfloat16, 6)
    q = torch.empty(2, lay.q_heads * lay.head_dim, dtype=torch.bfloat16)
    args, alpha = L.launch_args(ops.a_fmt, ops.a_values, ops.a_scales, None, ops.b_fmt, ops.b_values,
                                ops.b_scales, ops.weight.alpha, ops.alpha, q)  # fmt: skip
    got = L.fused_args(args, alpha, q, rope=rope)
    names = list(inspect.signature(F.RopeDecodeGemm.__call__).parameters)[1:-1]  # not self, stream
    assert len(got) == len(names) and names[-2:] == ["alpha", "eps"]
    by_name = dict(zip(names, got))
    assert by_name["mC"] is q and by_name["mR"] is q
    for name, t in zip(("mCos", "mSin", "mKC", "mVC", "mSP", "mSO"), rope.tensors()):
        assert by_name[name] is t, name
    plain = list(inspect.signature(F.FusedDecodeGemm.__call__).parameters)[1:-1]
    assert len(L.fused_args(args, alpha, q)) == len(plain)


# ---- compiles -------------------------------------------------------------------------------------
@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize(
    "m, pdl, norm, early", [(1, "prefetch", False, False), (8, "off", True, False), (32, "prefetch", True, False),
                            (1, "prefetch", False, True), (32, "prefetch", False, True)]
)  # fmt: skip
def test_rope_kernel_compiles_for_both_archs(arch, m, pdl, norm, early):
    """The heuristic's rope_append configs at the demo block's qkv (Hq 16, Hkv 4, D 128, page 16, K 2048)
    build without spills, with the slot loads (ld.global.b64) and 16-bit stores."""
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    lay = RopeLayout(16, 4, 128, 16)
    cfg = L.fused_config(L.bucket_for(m), lay.rows, 2048, "nvfp4", "bfloat16", "rope_append", pdl, norm=norm, rope=lay)
    cfg = dataclasses.replace(cfg, early=early)
    fn = F.compile_decode_fused("bfloat16", "nvfp4", "bfloat16", cfg, arch=arch)
    ptx = fn.artifacts.PTX
    assert fn.artifacts.CUBIN[:4] == b"\x7fELF"
    assert ".local" not in ptx, f"the kernel spills to local memory ({cfg})"
    assert "ld.global.b64" in ptx and "st.global.u16" in ptx
    assert ("griddepcontrol.wait" in ptx) == (pdl != "off")
    assert ("prefetch.global.L2" in ptx) == (pdl == "prefetch")
    assert ("rsqrt.approx.f32" in ptx) == norm


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
def test_rope_kernel_compiles_at_64_tokens(arch):
    """decode64 (8 token tiles, 4 finish passes): 211 registers a lane on sm_90a, no local memory."""
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    lay = RopeLayout(16, 4, 128, 16)
    cfg = L.fused_config("decode64", lay.rows, 2048, "nvfp4", "bfloat16", "rope_append", "prefetch", rope=lay)
    fn = F.compile_decode_fused("bfloat16", "nvfp4", "bfloat16", cfg, arch=arch)
    assert fn.artifacts.CUBIN[:4] == b"\x7fELF" and ".local" not in fn.artifacts.PTX
