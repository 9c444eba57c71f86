"""bench_block's CPU-checkable parts: the plain-torch peer computes the demo's block (so the
comparison is like for like), the byte accounting, and the startup child's argument handling."""

import dataclasses
import importlib
import math
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[4]
if str(REPO) not in sys.path:  # benchmarks/ is not installed
    sys.path.insert(0, str(REPO))
BB = importlib.import_module("benchmarks.experimental.b12x.bench_block")
B = importlib.import_module("flashinfer.experimental.b12x._demo.block")

SPEC = dataclasses.replace(B.MODELS["llama-small"], hidden=256, q_heads=4, kv_heads=2, head_dim=64, intermediate=512)


def _ref(gen):
    ref = {k: torch.randn(r, c, generator=gen) / math.sqrt(c) for k, (r, c) in BB._dense(SPEC).items()}
    ref |= {g: 1.0 + 0.1 * torch.randn(SPEC.hidden, generator=gen) for g in B.NORMS}
    return ref


@pytest.mark.parametrize("tokens,context", [(1, 5), (3, 17)])
def test_torch_peer_decode_is_the_demo_block(tokens, context):
    gen = torch.Generator().manual_seed(tokens)
    ref = _ref(gen)
    ref = {k: v.to(torch.bfloat16).float() for k, v in ref.items()}  # the peer's bf16 weights, exactly
    cache = B.make_cache(SPEC, tokens, torch.device("cpu"), gen, lens=[context] * tokens)
    peer = BB.TorchBlock(SPEC, ref, tokens, context, torch.device("cpu"), cache)
    x = torch.randn(tokens, SPEC.hidden, generator=gen).to(torch.bfloat16)
    got = peer.decode(x).float()
    want = B.reference_step(SPEC, ref, x, cache["prefix_k"], cache["prefix_v"], cache["positions"])
    assert torch.isfinite(got).all()
    assert BB.cosine(got, want) > 0.9995, BB.cosine(got, want)
    assert (got - want).abs().max() < 0.1


def test_torch_peer_prefill_is_causal_attention():
    gen = torch.Generator().manual_seed(0)
    ref = {k: v.to(torch.bfloat16).float() for k, v in _ref(gen).items()}
    peer = BB.TorchBlock(SPEC, ref, 1, 0, torch.device("cpu"))
    n = 9
    x = torch.randn(n, SPEC.hidden, generator=gen).to(torch.bfloat16)
    cos, sin = B.rope_tables(SPEC, torch.arange(n))
    got = peer.prefill(x, cos, sin).float()
    # row i of a causal prefill == a decode of token i over the i previous tokens' K/V
    hq, hkv, d = SPEC.q_heads, SPEC.kv_heads, SPEC.head_dim
    h = B.rms_norm(x, ref["input_layernorm"], SPEC.eps)
    _, k, v = (h @ ref["qkv"].t()).split([hq * d, hkv * d, hkv * d], dim=-1)
    k = B.apply_rope(k.reshape(n, hkv, d), cos, sin)
    v = v.reshape(n, hkv, d)
    for i in (0, 4, n - 1):
        want = B.reference_step(SPEC, ref, x[i : i + 1], [k[:i]], [v[:i]], torch.tensor([i]))
        assert BB.cosine(got[i], want[0]) > 0.9995


def test_byte_accounting():
    assert BB.kv_bytes(SPEC, 2, 10) == 2 * 2 * 11 * SPEC.kv_heads * SPEC.head_dim * 2

    class W:
        values = torch.empty(4, 8, dtype=torch.uint8)
        scales = torch.empty(4, 1, dtype=torch.float8_e4m3fn)

    assert BB.weight_bytes({"a": W(), "b": W()}) == 2 * (32 + 4)


def test_extend_availability_is_reported():
    reason = BB.extend_available()
    assert reason is None or "extend" in reason


def test_main_requires_cuda_and_checks_arguments(capsys):
    if torch.cuda.is_available():
        pytest.skip("CPU-only check")
    with pytest.raises((RuntimeError, SystemExit)):
        BB.main(["--tokens", "1"])


def test_prefill_step_matches_the_reference_block_on_cpu():
    prefill = importlib.import_module("benchmarks.experimental.b12x._block_prefill")
    step = prefill.PrefillStep(SPEC, 40, torch.device("cpu"), seed=1)
    note = step.check(rows=(0, 17, None))
    assert "min cosine" in note
    # a step that disagrees with the reference must fail the check (here: the reference's O projection changes)
    step.ref = {k: v * (1.5 if k == "o" else 1.0) for k, v in step.ref.items()}
    with pytest.raises(AssertionError, match="row 17"):
        step.check(rows=(17,))


def test_prefill_flops_count_the_dense_weights_and_causal_attention():
    n = 8
    dense = sum(r * c for r, c in BB._dense(SPEC).values())
    hq, hkv, d = SPEC.q_heads, SPEC.kv_heads, SPEC.head_dim
    assert dense == (hq + 2 * hkv) * d * SPEC.hidden + SPEC.hidden * hq * d + 3 * SPEC.intermediate * SPEC.hidden
    assert BB._attn_flops(SPEC, n) == 4 * hq * d * n * (n + 1) // 2


def test_glue_rows_take_the_demos_choices(capsys):
    from flashinfer.experimental.b12x._demo import GLUE_CHOICES

    assert BB.GLUE_CHOICES == GLUE_CHOICES
    with pytest.raises(SystemExit):
        BB.main(["--glue", "inductor"])
    assert "--glue" in capsys.readouterr().err


def test_variants_name_valid_gemm_options():
    """Every --variant maps to prepare()'s (fused, pdl) with a pdl mode GemmQuery takes; base is the
    unchanged step."""
    import dataclasses
    import inspect

    from flashinfer.experimental.b12x._demo import PDL_CHOICES
    from flashinfer.experimental.b12x._demo import run as R
    from flashinfer.experimental.b12x.attention.paged._config import DecodeConfig, ScheduleConfig
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    assert BB.VARIANTS["base"] == dict(fused=False, pdl="off", gemm_opts=None, norms=False, attention_pdl="off",
                                       attention_opts=None, l2=None, rope=False)  # fmt: skip
    assert set(BB.VARIANTS["base"]) - {"l2"} <= set(inspect.signature(R.prepare).parameters)
    fields = {f.name for f in dataclasses.fields(DecodeConfig)} | {f.name for f in dataclasses.fields(ScheduleConfig)}
    for v in BB.VARIANTS.values():
        fused, pdl, norms = v["fused"], v["pdl"], v["norms"]
        opts = (v["gemm_opts"] or {}).get("gate_up")
        assert fused or not norms  # the norms fuse only into the fused step
        assert isinstance(fused, bool) and pdl in PDL_CHOICES and v["attention_pdl"] in PDL_CHOICES
        assert set(v["attention_opts"] or ()) <= fields
        if v["l2"] is not None:  # (DecodeStep's l2_prefetch, PrefetchConfig fields or None)
            from flashinfer.experimental.b12x._lib.l2_prefetch import PrefetchConfig, why_not

            assert v["l2"][0] in R.L2_PREFETCH_CHOICES
            assert v["l2"][1] is None or why_not(PrefetchConfig(*v["l2"][1])) is None
        assert set(v) - {"l2"} <= set(inspect.signature(R.prepare).parameters)
        shapes = {"qkv": (3072, 2048, "none"), "o": (2048, 2048, "none"), "gate_up": (11264, 2048, "silu_mul"),
                  "down": (2048, 5632, "residual")}  # fmt: skip
        assert set(v["gemm_opts"] or ()) <= set(shapes) == set(BB.GEMM_NAMES)
        for m in (1, 8, 16, 32):  # the fused GEMMs' configs with these options are ones the kernel takes
            bucket = L.bucket_for(m)
            cfg = L.fused_config(bucket, 11264, 2048, "nvfp4", "bfloat16", "silu_mul", pdl, opts, norm=norms)
            assert L.why_not("bfloat16", "nvfp4", "bfloat16", bucket, cfg) is None, cfg
            for name, gemm_opts in (v.get("gemm_opts") or {}).items():
                n, k, epilogue = shapes[name]
                cfg = L.fused_config(bucket, n, k, "nvfp4", "bfloat16", epilogue, pdl, gemm_opts)
                assert L.why_not("bfloat16", "nvfp4", "bfloat16", bucket, cfg) is None, cfg


def test_variant_spelling_adds_gemm_options():
    """--variant BASE@NAME=OPTS...: the base's keyword arguments with gemm_opts[NAME] = OPTS (later items
    win, the base's other GEMMs' options kept); bad spellings name what is wrong."""
    import argparse

    kw = BB.variant_kwargs("fast+dnup2@gate_up=warps=4,upfront=4@o=warps=16,unroll=1")
    assert kw["gemm_opts"] == {"down": "upfront=2", "gate_up": "warps=4,upfront=4", "o": "warps=16,unroll=1"}
    assert {k: v for k, v in kw.items() if k != "gemm_opts"} == {
        k: v for k, v in BB.VARIANTS["fast+dnup2"].items() if k != "gemm_opts"
    }
    assert BB.variant_kwargs("fast") == BB.VARIANTS["fast"]
    assert BB.variant_kwargs("fast@down=warps=8@down=warps=4")["gemm_opts"] == {"down": "warps=4"}
    for bad, said in (
        ("nope", "must start with one of VARIANTS"),
        ("fast@lm_head=warps=4", "NAME=OPTS"),
        ("fast@gate_up", "NAME=OPTS"),
        ("fast@gate_up=", "NAME=OPTS"),
        ("base@gate_up=warps=4", "fused or pdl base"),
    ):
        with pytest.raises(ValueError, match=said):
            BB.variant_kwargs(bad)
        with pytest.raises(argparse.ArgumentTypeError):
            BB._variant_arg(bad)
