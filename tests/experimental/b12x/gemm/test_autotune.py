"""gemm.blockscaled under PreparationSession(autotune=True) (`blockscaled/_autotune.py`): the per-bucket alternatives
a plan offers, the rounds that time them (CPU), the measurement's arithmetic and the session's per-bucket choice
(stand-in clocks). The measured selection on a GPU:
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
    parts, cands = p.candidate_parts(arch), p.candidates(arch)
    assert cands[0] == p.heuristic(arch) == tuple(alts[0] for alts in parts)
    assert 2 <= len(cands) == max(len(alts) for alts in parts) <= AT.PER_BUCKET
    assert len(set(cands)) == len(cands)
    for i, alts in enumerate(parts):
        assert len(set(alts)) == len(alts) and {b for b, _ in alts} == {cands[0][i][0]}
        for b, cfg in alts:
            assert L.why_not(q.a_format, q.b_format, q.out_dtype, b, cfg) is None, (b, cfg)
        # the rounds time every alternative of every bucket, each once
        assert {sel[i] for sel in cands} == set(alts)


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
    assert all(len(alts) == 1 for alts in p.candidate_parts("sm_90a"))
    assert A.plan(query).candidates(None) == (None,)
    over = A.plan(QUERIES["mxfp8-m64"], override=dict(A.plan(QUERIES["mxfp8-m64"]).heuristic("sm_90a")))
    assert over.candidates("sm_90a") == (over.heuristic("sm_90a"),) and over.candidate_parts("sm_90a") is None


def test_rounds_repeat_a_short_part_s_last_alternative():
    from flashinfer.experimental.b12x.preparation.plan import rounds

    assert rounds((("a0", "a1", "a2"), ("b0",), ("c0", "c1"))) == (
        ("a0", "b0", "c0"),
        ("a1", "b0", "c1"),
        ("a2", "b0", "c1"),
    )
    q = QUERIES["w4a16-mxfp4-all"]  # every bucket: rounds, not the product of six lists
    parts = A.plan(q).candidate_parts("sm_90a")
    assert len(parts) == len(L.BUCKETS) and len(A.plan(q).candidates("sm_90a")) == max(map(len, parts))


def test_tuned_m_is_the_largest_m_the_plan_serves_in_the_bucket():
    assert AT.tuned_m(QUERIES["w4a16-nvfp4-m16"], "decode8") == 1
    assert AT.tuned_m(QUERIES["w4a16-nvfp4-m16"], "decode16") == 16
    assert AT.tuned_m(QUERIES["w4a16-mxfp4-all"], "decode32") == 32
    assert AT.tuned_m(QUERIES["w4a16-mxfp4-all"], "tiled128") == 4096
    assert AT.tuned_m(QUERIES["nvfp4-m1"], "decode8") == 1


def test_measure_times_each_bucket_at_its_m(monkeypatch):
    """The measurement times one launch a bucket (its prepared launcher, synthetic operands at tuned_m)."""
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
    assert AT.measure_parts(q, state, fake_call) == pytest.approx((1e-6, 16e-6))
    assert calls == [("launch-decode8", 1), ("launch-decode16", 16)]


def test_a_cpu_session_with_autotune_runs_the_reference():
    p = A.plan(QUERIES["mxfp8-m64"])
    with b12x.PreparationSession("cpu", autotune=True) as s:
        s.prepare([p])
    assert p.state.selection is None and p.state.selection_source == "reference"


def test_the_session_keeps_each_bucket_s_fastest(monkeypatch, tmp_path):
    """With a stand-in clock: the session times len(longest list) rounds, keeps per bucket the fastest alternative
    (a mix no single round ran), stores it, and a later session takes it from the cache."""
    from flashinfer.experimental.b12x.preparation import session as S

    q = QUERIES["w4a16-nvfp4-m16"]
    p = A.plan(q)
    parts = p.candidate_parts("sm_90a")
    assert len(parts) == 2 and len(parts[0]) > 2
    fastest = (parts[0][-1], parts[1][1])  # the last of one, the second of the other: never one round
    assert fastest not in p.candidates("sm_90a")
    timed = []

    def clock(self, state):
        timed.append(state.selection)
        return tuple(0.5 if choice == fastest[i] else 1.0 + i for i, choice in enumerate(state.selection))

    monkeypatch.setattr(S.PreparationSession, "_device_arch", lambda self: "sm_90a")
    monkeypatch.setattr(S.PreparationSession, "_selection_file", lambda self, plan: tmp_path / f"{plan.op}.json")
    monkeypatch.setattr(type(p), "kernels", lambda self, config, arch: ())
    monkeypatch.setattr(type(p), "prime", lambda self, state: None)
    monkeypatch.setattr(type(p), "measure_parts", clock)
    with b12x.PreparationSession("cpu", autotune=True, compile_workers=1) as s:
        s.prepare([p])
    assert timed == list(p.candidates("sm_90a")) and len(timed) == max(map(len, parts))
    assert p.state.selection == fastest and p.state.selection_source == "measured"
    again = A.plan(q)
    with b12x.PreparationSession("cpu", compile_workers=1) as s:
        s.prepare([again])
    assert again.state.selection == fastest and again.state.selection_source == "cached"
