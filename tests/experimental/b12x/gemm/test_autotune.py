"""gemm.blockscaled under PreparationSession(autotune=True) (`blockscaled/_autotune.py`): the candidates a plan
offers (CPU) and the measurement's arithmetic (a stand-in clock). The measured selection on a GPU:
test_gpu.py::test_autotune_selects_a_candidate_and_caches_it."""

import pytest

import b12x
from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import _autotune as AT
from flashinfer.experimental.b12x.gemm.blockscaled import api as A

pytestmark = pytest.mark.contract

QUERIES = {
    "w4a16-nvfp4-m16": A.GemmQuery("bfloat16", "nvfp4", 4096, 4096, max_m=16, m_values=(1, 16)),
    "w4a16-mxfp4-all": A.GemmQuery("bfloat16", "mxfp4", 28672, 4096, max_m=8192),
    "mxfp8-m64": A.GemmQuery("mxfp8", "mxfp8", 4096, 4096, max_m=64),
    "fp8block-m4096": A.GemmQuery("fp8_block", "fp8_block", 4096, 7168, max_m=4096),
    "nvfp4-m1": A.GemmQuery("nvfp4", "nvfp4", 7168, 2048, max_m=1),
}


@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("name", QUERIES)
def test_candidates_start_with_the_heuristic_and_are_all_legal(name, arch):
    q = QUERIES[name]
    p = A.plan(q)
    cands = p.candidates(arch)
    assert cands[0] == p.heuristic(arch) and 2 <= len(cands) <= AT.MAX_CANDIDATES
    assert len(set(cands)) == len(cands)
    buckets = [b for b, _ in cands[0]]
    for sel in cands:
        assert [b for b, _ in sel] == buckets
        for b, cfg in sel:
            assert L.why_not(q.a_format, q.b_format, q.out_dtype, b, cfg) is None, (b, cfg)
    # every bucket whose family has alternatives gets at least one of them tried
    for i, (b, h) in enumerate(cands[0]):
        if len(AT.bucket_configs(q, b, h)) > 1:
            assert any(sel[i][1] != h for sel in cands), b


def test_fp4_weights_try_the_other_fp4_placements():
    q = QUERIES["w4a16-nvfp4-m16"]
    h = dict(A.plan(q).heuristic("sm_90a"))["decode8"]
    placements = {c.fp4 for c in AT.bucket_configs(q, "decode8", h)}
    assert h.fp4 in placements and len(placements) > 1
    assert AT.bucket_configs(QUERIES["mxfp8-m64"], "decode8", h)[0] == h  # (any heuristic is kept first)


@pytest.mark.parametrize(
    "query",
    [
        A.GemmQuery("bfloat16", "nvfp4", 4096, 4096, max_m=16, pdl="wait"),  # fused / pdl configs: their own
        A.GemmQuery("bfloat16", "nvfp4", 4096, 4096, max_m=8, epilogue="residual"),
    ],
)
def test_fused_plans_and_overrides_keep_the_heuristic_alone(query):
    p = A.plan(query)
    assert p.candidates("sm_90a") == (p.heuristic("sm_90a"),)
    assert A.plan(query).candidates(None) == (None,)
    over = A.plan(QUERIES["mxfp8-m64"], override=dict(A.plan(QUERIES["mxfp8-m64"]).heuristic("sm_90a")))
    assert over.candidates("sm_90a") == (over.heuristic("sm_90a"),)


def test_the_product_is_cut_from_the_longest_list():
    q = QUERIES["w4a16-mxfp4-all"]
    sel = A.plan(q).heuristic("sm_90a")
    lists = [AT.bucket_configs(q, b, c) for b, c in sel]
    cands = AT.candidates(q, sel)
    kept = [len({s[i][1] for s in cands}) for i in range(len(sel))]
    assert len(cands) == __import__("math").prod(kept) <= AT.MAX_CANDIDATES
    assert all(k <= len(x) for k, x in zip(kept, lists)) and max(kept) - min(k for k in kept if k > 1) <= 1


def test_tuned_m_is_the_largest_m_the_plan_serves_in_the_bucket():
    assert AT.tuned_m(QUERIES["w4a16-nvfp4-m16"], "decode8") == 1
    assert AT.tuned_m(QUERIES["w4a16-nvfp4-m16"], "decode16") == 16
    assert AT.tuned_m(QUERIES["w4a16-mxfp4-all"], "decode32") == 32
    assert AT.tuned_m(QUERIES["w4a16-mxfp4-all"], "tiled128") == 4096
    assert AT.tuned_m(QUERIES["nvfp4-m1"], "decode8") == 1


def test_measure_sums_each_bucket_at_its_m(monkeypatch):
    """The measurement times one launch a bucket (its prepared launcher, synthetic operands at tuned_m) and adds."""
    from flashinfer.experimental.b12x._lib import timing

    q = QUERIES["w4a16-nvfp4-m16"]
    sel = A.plan(q).heuristic("sm_90a")
    calls = []

    def fake_call(a_fmt, b_fmt, n, k, m, out_dtype, device, launch, cfg):
        calls.append((launch, m))
        return lambda: m

    monkeypatch.setattr(timing, "seconds_per_run", lambda fn: fn() * 1e-6)
    state = type("S", (), {})()
    state.selection, state.device = sel, "cuda"
    state.extra = {"launchers": {b: (f"launch-{b}", cfg) for b, cfg in sel}}
    assert AT.measure(q, state, fake_call) == pytest.approx(17e-6)
    assert calls == [("launch-decode8", 1), ("launch-decode16", 16)]


def test_a_cpu_session_with_autotune_runs_the_reference():
    p = A.plan(QUERIES["mxfp8-m64"])
    with b12x.PreparationSession("cpu", autotune=True) as s:
        s.prepare([p])
    assert p.state.selection is None and p.state.selection_source == "reference"
