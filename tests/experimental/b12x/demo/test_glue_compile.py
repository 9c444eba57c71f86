"""The demo's Triton glue compiles on the CPU for sm_90a and sm_120a, at llama-small's and
qwen3-moe-small's shapes, with the options the compile functions use: no register spills, no FMA
contraction in the rope products (torch rounds each product; glue.py promises bitwise q/K) and a
rounded division in silu (div.rn, not div.full)."""

import re

import pytest
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource

from flashinfer.experimental.b12x._demo import block as B
from flashinfer.experimental.b12x._demo import glue as G
from flashinfer.experimental.b12x._lib import cuda_binary as CB

pytestmark = pytest.mark.compile

ARCHS = [pytest.param(90, id="sm_90a"), pytest.param(120, id="sm_120a")]
SPECS = [pytest.param(s, id=name) for name, s in B.MODELS.items()]


@pytest.fixture(autouse=True)
def _triton_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))  # not ~/.triton


def _compile(fn, sig, constexprs, num_warps, cc):
    # Pointers 16-byte aligned, as the JIT specializes torch's allocations (tt.divisibility).
    constexprs = {"PDL": 0} | constexprs  # the plain launch unless a test asks for the PDL variant
    names = list(fn.arg_names)
    attrs = {(names.index(k),): CUDABackend.parse_attr("D") for k, v in sig.items() if v.startswith("*")}
    src = ASTSource(fn=fn, signature=sig | {k: "constexpr" for k in constexprs}, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(
        src, target=GPUTarget("cuda", cc, 32), options={"num_warps": num_warps, "enable_fp_fusion": G.FP_FUSION}
    )
    usage = CB.resources(compiled.asm["cubin"])
    assert usage["STACK"] == 0 and usage["LOCAL"] == 0, f"{fn.__name__}: spills ({usage})"
    return compiled.asm["ptx"]


BF = "*bf16"


@pytest.mark.parametrize("cc", ARCHS)
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("residual", [False, True], ids=["rmsnorm", "residual+rmsnorm"])
def test_rmsnorm(spec, residual, cc):
    sig = dict(x_ptr=BF, r_ptr=BF, w_ptr=BF, x1_ptr=BF, out_ptr=BF, eps="fp32")
    consts = dict(H=spec.hidden, BLOCK_H=triton.next_power_of_2(spec.hidden), RESIDUAL=residual)
    _compile(G._rmsnorm_kernel, sig, consts, G.NORM_WARPS, cc)


@pytest.mark.parametrize("cc", ARCHS)
@pytest.mark.parametrize("spec", SPECS)
def test_rope_append_has_no_fma(spec, cc):
    sig = dict(qkv_ptr=BF, cos_ptr="*fp32", sin_ptr="*fp32", q_ptr=BF, k_cache_ptr=BF, v_cache_ptr=BF)
    sig |= dict(slot_page_ptr="*i64", slot_off_ptr="*i64")
    consts = dict(HQ=spec.q_heads, HKV=spec.kv_heads, D=spec.head_dim, PAGE=spec.page_size)
    ptx = _compile(G._rope_append_kernel, sig, consts, 1, cc)
    assert "fma.rn.f32" not in ptx, "rope: products contracted into FMAs (torch rounds each product)"
    assert re.search(r"\bmul\.rn\.f32|\bmul\.f32", ptx) and re.search(r"\bsub(\.rn)?\.f32", ptx), "rope math missing"


@pytest.mark.parametrize("cc", ARCHS)
def test_silu_mul_divides_rounded(cc):
    spec = B.MODELS["llama-small"]
    ptx = _compile(
        G._silu_mul_kernel, dict(gu_ptr=BF, out_ptr=BF), dict(INTER=spec.intermediate, BLOCK=G.ELEMENT_BLOCK), 4, cc
    )
    assert "div.rn.f32" in ptx and "div.full.f32" not in ptx


@pytest.mark.parametrize("cc", ARCHS)
def test_add(cc):
    _compile(G._add_kernel, dict(a_ptr=BF, b_ptr=BF, out_ptr=BF, n="i32"), dict(BLOCK=G.ELEMENT_BLOCK), 4, cc)


@pytest.mark.parametrize("cc", ARCHS)
def test_pdl_variants_wait_then_trigger(cc):
    """glue "triton-pdl": every kernel waits for the previous grid, then lets the next one launch, before
    its first global access; the plain variant has neither instruction."""
    spec = B.MODELS["llama-small"]
    norm = dict(x_ptr=BF, r_ptr=BF, w_ptr=BF, x1_ptr=BF, out_ptr=BF, eps="fp32")
    rope = dict(qkv_ptr=BF, cos_ptr="*fp32", sin_ptr="*fp32", q_ptr=BF, k_cache_ptr=BF, v_cache_ptr=BF,
                slot_page_ptr="*i64", slot_off_ptr="*i64")  # fmt: skip
    cases = [
        (G._rmsnorm_kernel, norm, dict(H=spec.hidden, BLOCK_H=2048, RESIDUAL=True), G.NORM_WARPS),
        (G._rope_append_kernel, rope, dict(HQ=spec.q_heads, HKV=spec.kv_heads, D=spec.head_dim, PAGE=16), 1),
        (G._silu_mul_kernel, dict(gu_ptr=BF, out_ptr=BF), dict(INTER=spec.intermediate, BLOCK=G.ELEMENT_BLOCK), 4),
        (G._add_kernel, dict(a_ptr=BF, b_ptr=BF, out_ptr=BF, n="i32"), dict(BLOCK=G.ELEMENT_BLOCK), 4),
    ]
    for fn, sig, consts, warps in cases:
        ptx = _compile(fn, sig, consts | {"PDL": 1}, warps, cc)
        body = ptx[ptx.index(".entry") :]
        wait, trig = body.find("griddepcontrol.wait"), body.find("griddepcontrol.launch_dependents")
        first_ld = min(i for i in (body.find("ld.global"), body.find("st.global")) if i >= 0)
        assert 0 <= wait < trig < first_ld, f"{fn.__name__}: wait, trigger, then the first global access"
        plain = _compile(fn, sig, consts, warps, cc)
        assert "griddepcontrol" not in plain, fn.__name__
