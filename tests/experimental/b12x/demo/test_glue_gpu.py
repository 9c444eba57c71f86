"""The demo's Triton glue on CUDA against the torch glue on CUDA (T = 1, 8, 32), inside a CUDA graph,
and its compile contract: one compile per kernel serves every T, nothing compiles at launch or in
capture, and resolution obeys freeze."""

import dataclasses

import pytest
import torch

from flashinfer.experimental.b12x._demo import block as B
from flashinfer.experimental.b12x._demo import glue as G
from flashinfer.experimental.b12x._lib import freeze

from .glue_cases import check_add, check_rmsnorm, check_rope_append, check_silu_mul, inputs, nan_like

pytestmark = pytest.mark.gpu

DENSE, MOE = B.MODELS["llama-small"], B.MODELS["qwen3-moe-small"]
KERNELS = (G._rmsnorm_kernel, G._rope_append_kernel, G._silu_mul_kernel, G._add_kernel)


def _variants() -> int:
    """Compiled variants Triton holds in memory for the glue kernels (all devices)."""
    return sum(len(c[0]) for k in KERNELS for c in k.device_caches.values())


@pytest.mark.parametrize("choice", ["triton", "triton-pdl"])
@pytest.mark.parametrize("tokens", [1, 8, 32])
@pytest.mark.parametrize("spec", [DENSE, MOE], ids=["llama-small", "qwen3-moe-small"])
def test_triton_glue_matches_torch_glue(spec, tokens, choice):
    glue = G.make_glue(choice, spec, torch.device("cuda"))
    inp = inputs(spec, tokens, "cuda", seed=tokens)
    check_rmsnorm(glue, spec, inp, residual=False)
    check_rmsnorm(glue, spec, inp, residual=True)
    check_rope_append(glue, spec, inp)  # bitwise
    check_add(glue, spec, inp)  # bitwise
    if spec.moe is None:
        check_silu_mul(glue, spec, inp)


def test_launches_hit_the_warmed_variant_and_replay_in_a_graph():
    spec, tokens, dev = DENSE, 8, torch.device("cuda")
    glue = G.TritonGlue(spec, dev)  # compiles (warmup) every kernel
    fns = glue.functions()
    inp = inputs(spec, tokens, dev, seed=3)
    c = inp["cache"]
    hq, hkv, d = spec.q_heads, spec.kv_heads, spec.head_dim
    bufs = {
        "h": nan_like(inp["x"]), "x1": nan_like(inp["x"]), "h2": nan_like(inp["x"]), "out": nan_like(inp["x"]),
        "q": torch.empty(tokens, hq, d, dtype=torch.bfloat16, device=dev),
        "act": torch.empty(tokens, spec.intermediate, dtype=torch.bfloat16, device=dev),
    }  # fmt: skip

    def step():
        fns["rmsnorm"](inp["x"], inp["w"], spec.eps, bufs["h"])
        fns["rope_append"](inp["qkv"], inp["cos"], inp["sin"], bufs["q"], c["k_cache"], c["v_cache"], c["slot_page"],
                           c["slot_off"], hq, hkv, d)  # fmt: skip
        fns["rmsnorm"](inp["x"], inp["w"], spec.eps, bufs["h2"], inp["r"], bufs["x1"])
        fns["silu_mul"](inp["gu"], bufs["act"])
        fns["add"](bufs["x1"], inp["r"], bufs["out"])

    before = _variants()
    step()  # the first real launches: they must find the variants the warmup compiled
    torch.cuda.synchronize()
    assert _variants() == before, "a launch compiled a new Triton variant (warmup and launch keys differ)"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    assert _variants() == before
    fresh = inputs(spec, tokens, dev, seed=4)  # new values into the captured buffers, outputs poisoned
    for name in ("x", "r", "w", "qkv", "gu"):
        inp[name].copy_(fresh[name])
    for t in bufs.values():
        t.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    want = {k: torch.full_like(v, float("nan")) for k, v in bufs.items()}
    G.rmsnorm_into(inp["x"], inp["w"], spec.eps, want["h"])
    G.rmsnorm_into(inp["x"], inp["w"], spec.eps, want["h2"], inp["r"], want["x1"])
    G.silu_mul_into(inp["gu"], want["act"])
    G.add_into(want["x1"], inp["r"], want["out"])
    want["q"].copy_(G.apply_rope(inp["qkv"][:, : hq * d].reshape(tokens, hq, d), inp["cos"], inp["sin"]))
    for k in bufs:
        assert torch.isfinite(bufs[k]).all(), k
        diff = (bufs[k].float() - want[k].float()).abs().max().item()
        assert diff <= 0.02 * want[k].float().abs().max().item(), f"{k}: replay differs from torch by {diff}"


def test_resolution_obeys_freeze():
    dev = torch.device("cuda")
    G.TritonGlue(DENSE, dev)
    freeze.freeze_kernel_resolution("test")
    G.TritonGlue(DENSE, dev)  # in memory: allowed
    with pytest.raises(freeze.KernelResolutionFrozenError):
        G.TritonGlue(dataclasses.replace(DENSE, hidden=1024), dev)
