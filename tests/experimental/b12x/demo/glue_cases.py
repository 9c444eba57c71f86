"""Shared pieces of the glue tests (interpret and gpu tiers): inputs, bf16 ulp distance, and one
check per glue op of a glue implementation against the torch glue, outputs NaN-poisoned first."""

import dataclasses

import torch

from flashinfer.experimental.b12x._demo import block as B
from flashinfer.experimental.b12x._demo import glue as G

# Small llama-like block for the interpreter: H = 320 is not a power of two (the norm's masked
# tail), I = 1100 leaves a partial 1024 tile, head_dim 64 (rope halves of 32), GQA 3:1.
SMALL = dataclasses.replace(
    B.MODELS["llama-small"], hidden=320, q_heads=6, kv_heads=2, head_dim=64, intermediate=1100, page_size=16
)


def ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in bf16 ulps, elementwise (bf16 bit patterns mapped to a monotone integer line)."""

    def line(x):
        i = x.contiguous().view(torch.int16).int()
        return torch.where(i < 0, -(i & 0x7FFF), i)

    return (line(a) - line(b)).abs()


def assert_close_bf16(got, want, what, *, max_ulps=1, max_frac=0.01):
    """Finite, within max_ulps everywhere and off by any ulp on at most max_frac of the elements."""
    assert torch.isfinite(got).all(), f"{what}: non-finite output (a row left unwritten?)"
    d = ulps(got, want)
    frac = (d > 0).float().mean().item()
    assert int(d.max()) <= max_ulps and frac <= max_frac, f"{what}: max {int(d.max())} ulps, {frac:.2%} differ"


def nan_like(t: torch.Tensor) -> torch.Tensor:
    return torch.full_like(t, float("nan"))


def inputs(spec, tokens: int, device, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    bf = lambda *s, scale=1.0: (scale * torch.randn(*s, generator=gen)).to(torch.bfloat16).to(device)  # noqa: E731
    hq, hkv, d = spec.q_heads, spec.kv_heads, spec.head_dim
    cache = B.make_cache(spec, tokens, torch.device(device), gen)
    cos, sin = B.rope_tables(spec, cache["positions"])
    return {
        "x": bf(tokens, spec.hidden, scale=3.0),
        "r": bf(tokens, spec.hidden),
        "w": (1.0 + 0.1 * torch.randn(spec.hidden, generator=gen)).to(torch.bfloat16).to(device),
        "qkv": bf(tokens, (hq + 2 * hkv) * d, scale=2.0),
        "gu": bf(tokens, 2 * spec.intermediate, scale=4.0),
        "cache": cache,
        "cos": cos,
        "sin": sin,
    }


def check_rmsnorm(glue, spec, inp, residual: bool, **tol):
    x, r, w = inp["x"], inp["r"], inp["w"]
    outs = [nan_like(x) for _ in range(4)]
    for f, (out, x1) in ((glue["rmsnorm"], outs[:2]), (G.rmsnorm_into, outs[2:])):
        f(x, w, 1e-5, out, r, x1) if residual else f(x, w, 1e-5, out)
    if residual:
        assert torch.equal(outs[1], outs[3]), "x + residual differs from torch.add"
    assert_close_bf16(outs[0], outs[2], "rmsnorm", **tol)


def check_rope_append(glue, spec, inp):
    c = inp["cache"]
    hq, hkv, d = spec.q_heads, spec.kv_heads, spec.head_dim
    caches = []
    for f in (glue["rope_append"], G.rope_append_into):
        k, v = c["k_cache"].clone(), c["v_cache"].clone()
        k[c["slot_page"], c["slot_off"]] = float("nan")  # the append must write them
        v[c["slot_page"], c["slot_off"]] = float("nan")
        q = torch.full((inp["qkv"].shape[0], hq, d), float("nan"), dtype=torch.bfloat16, device=k.device)
        f(inp["qkv"], inp["cos"], inp["sin"], q, k, v, c["slot_page"], c["slot_off"], hq, hkv, d)
        caches.append((q, k, v))
    (q1, k1, v1), (q2, k2, v2) = caches
    assert torch.isfinite(q1).all() and torch.isfinite(k1).all() and torch.isfinite(v1).all()
    assert torch.equal(q1, q2), f"q differs: max {int(ulps(q1, q2).max())} ulps"
    assert torch.equal(k1, k2), "k cache differs (a wrong slot, or the rotation)"
    assert torch.equal(v1, v2), "v cache differs"


def check_silu_mul(glue, spec, inp, **tol):
    gu = inp["gu"]
    a1 = torch.full((gu.shape[0], spec.intermediate), float("nan"), dtype=torch.bfloat16, device=gu.device)
    a2 = a1.clone()
    glue["silu_mul"](gu, a1)
    G.silu_mul_into(gu, a2)
    assert_close_bf16(a1, a2, "silu * up", **tol)


def check_add(glue, spec, inp):
    x, r = inp["x"], inp["r"]
    o1, o2 = nan_like(x), nan_like(x)
    glue["add"](x, r, o1)
    G.add_into(x, r, o2)
    assert torch.equal(o1, o2)
