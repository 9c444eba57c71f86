"""moe.fused_moe device path on the host: workspace specs, bind's views and errors for a plan prepared
for kernels. `meta` tensors stand in for CUDA (a plan whose state says sm_90a, set up by hand: no
GPU, no compile), so every check bind does before a launch runs here."""

import dataclasses

import pytest
import torch

from b12x.moe import fused_moe as fm
from flashinfer.experimental.b12x._lib.quant import swizzled_size
from flashinfer.experimental.b12x._lib.scratch import dtype_name, layout
from flashinfer.experimental.b12x.moe.fused_moe import _combine, _routing, api

from .moe_cases import activations, checkpoint, routing, weight_plan

pytestmark = pytest.mark.contract
E, H, INTER, T, K = 4, 64, 32, 5, 2


def exact(exc, message, fn, *args, **kwargs):
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert str(info.value) == message


def config(h=H, i=INTER):
    return api.MoeConfig(_routing.default_config(h), _combine.default_config(i), None)


def device_plan(mode="nvfp4", source="modelopt_nvfp4", act="silu", max_tokens=8):
    """A plan in the state PreparationSession leaves on a GPU, on meta tensors."""
    wplan = weight_plan(source, act, (mode,), e=E, h=H, i=INTER)
    caps = fm.Caps(max_tokens=max_tokens, num_topk=K, device="meta", weight_plan=wplan, quant_mode=mode)
    p = fm.plan(caps)
    st = p._state
    st.device, st.arch, st.selection, st.selection_source = torch.device("meta"), "sm_90a", config(), "heuristic"
    specs = p.scratch_specs(st.selection, "cuda")
    st.scratch = {s.name: torch.empty(s.shape, dtype=getattr(torch, dtype_name(s.dtype)), device="meta") for s in specs}
    p._assign_handle()
    ex = fm.prepare_weights(plan=wplan, **checkpoint(wplan))
    moved = {f.name: getattr(ex, f.name) for f in dataclasses.fields(ex) if f.name != "plan"}
    experts = dataclasses.replace(ex, **{n: None if v is None else v.to("meta") for n, v in moved.items()})
    ids, w = routing(T, K, E)
    tensors = dict(a=activations(T, H).to("meta"), experts=experts, topk_weights=w.to("meta"), topk_ids=ids.to("meta"))
    return p, tensors


# ---- workspace ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["w4a16", "nvfp4", "w4a8_nvfp4"])
def test_scratch_specs_follow_the_recipe(mode):
    p, _ = device_plan(mode)
    specs = {s.name: (s.shape, dtype_name(s.dtype)) for s in p.scratch_specs(config(), "cuda")}
    r = 8 * K
    want = {
        "expert_start": ((E + 1,), "int32"),
        "expert_count": ((E,), "int32"),
        "sorted_token": ((r,), "int32"),
        "sorted_expert": ((r,), "int32"),
        "route_row": ((r,), "int32"),
        "active": ((E,), "int32"),
        "hist": ((1, E), "int32"),  # 16 routes fit the micro path: no histogram
        "alpha1": ((E,), "float32"),
        "alpha2": ((E,), "float32"),
        "act_params": ((3,), "float32"),
        "dummy": ((16,), "uint8"),
        "c1": ((r, INTER), "bfloat16"),
        "c2": ((r, H), "float32"),
    }
    if mode == "w4a16":
        want["a1"] = ((r, H), "bfloat16")
    elif mode == "nvfp4":
        want |= {"a1": ((r, H // 2), "uint8"), "a1_scales": ((swizzled_size(r, H // 16),), "uint8")}
        want |= {"a2": ((r, INTER // 2), "uint8"), "a2_scales": ((swizzled_size(r, INTER // 16),), "uint8")}
    else:
        want |= {"a1": ((r, H), "uint8"), "a1_scales": ((swizzled_size(r, H // 32),), "uint8")}
        want |= {"a2": ((r, INTER), "uint8"), "a2_scales": ((swizzled_size(r, INTER // 32),), "uint8")}
    assert specs == want
    assert p.scratch_specs(config(), "cpu") == () and fm.plan(p.caps).memory_requirements("cpu") == 0


def test_dynamic_path_capacity_adds_the_histogram():
    wplan = weight_plan("modelopt_nvfp4", "silu", ("w4a16",), e=E, h=H, i=INTER)
    p = fm.plan(fm.Caps(max_tokens=4096, num_topk=K, device="cuda", weight_plan=wplan, quant_mode="w4a16"))
    specs = {s.name: s for s in p.scratch_specs(config(), "cuda")}
    cfg = config().routing
    assert specs["hist"].shape == (4096 * K // cfg.dyn_block_r, E)
    assert p.memory_requirements("cuda") == layout(p.scratch_specs(None, "cuda")).total > 4096 * K * H * 6


# ---- bind ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["w4a16", "nvfp4", "w4a8_nvfp4"])
def test_device_bind_is_views_of_the_workspace(mode, monkeypatch):
    p, tensors = device_plan(mode)
    assert p.state.selection.routing.compact_grid  # the heuristic's; the full grid is checked here
    p.state.selection = dataclasses.replace(
        p.state.selection, routing=dataclasses.replace(p.state.selection.routing, compact_grid=False)
    )
    out = torch.empty(T, H, dtype=torch.bfloat16, device="meta")

    def no_alloc(*args, **kwargs):
        raise AssertionError("bind allocated")

    for name in ("empty", "zeros", "empty_like", "zeros_like", "full", "ones", "tensor"):
        monkeypatch.setattr(torch, name, no_alloc)
    b = fm.bind(p, output=out, **tensors)
    monkeypatch.undo()
    s, ex = p.state.scratch, tensors["experts"]
    assert b.scratch is s and b.output is out and b.a is tensors["a"]
    A1, SFA1, B1, SFB1, C1, start, wa1, aa1, act, active = b.fc1_args
    A2, SFA2, B2, SFB2, C2, start2, wa2, aa2, active2 = b.fc2_args
    assert A1 is s["a1"] and C1 is s["c1"] and C2 is s["c2"] and start is start2 is s["expert_start"]
    assert active is active2 is s["active"]  # compact_grid off: the grid covers every expert
    assert b.grid == "identity"  # ... without reading the list
    assert B1 is ex.w1_values and B2 is ex.w2_values and wa1 is ex.w1_alpha and wa2 is ex.w2_alpha
    assert aa1 is s["alpha1"] and aa2 is s["alpha2"] and act is s["act_params"]
    assert SFB1.dtype == SFB2.dtype == torch.uint8 and SFB1.shape == ex.w1_scales.shape
    if mode == "w4a16":
        assert SFA1 is s["dummy"] and A2 is s["c1"] and SFA2 is s["dummy"]
    else:
        assert SFA1 is s["a1_scales"] and A2 is s["a2"] and SFA2 is s["a2_scales"]
    assert b.gscales == ((ex.a1_gscale, ex.a2_gscale) if mode == "nvfp4" else (s["alpha1"], s["alpha2"]))


class _Recorder:
    """Launchers that record (name, args) instead of launching; `grids` the expert grids it holds
    (an expert GEMM's name carries its grid: "fc1:list")."""

    expert_gemms = api.Launchers.expert_gemms
    routing_for = api.Launchers.routing_for
    requantizer = api.Launchers.requantizer
    dequant = None

    def __init__(self, log, requant, grids=("identity", "list")):
        self.log = log
        rec = lambda name: lambda *a: log.append((name, a))  # noqa: E731
        self.routing = {"int32": rec("routing"), "int64": rec("routing64")}
        self.experts = {(g, 0): (rec(f"fc1:{g}"), rec(f"fc2:{g}")) for g in grids}
        self.combine = self
        self.requant = object() if requant else None
        self.requantize = rec("requantize")

    def __call__(self, *a):
        self.log.append(("combine", a))


@pytest.mark.parametrize("mode", ["w4a16", "nvfp4"])
def test_steps_are_execute_one_by_one(mode):
    p, tensors = device_plan(mode)
    out = torch.empty(T, H, dtype=torch.bfloat16, device="meta")
    b = fm.bind(p, output=out, **tensors)
    ran, stepped = [], []
    api.execute(_Recorder(ran, mode != "w4a16"), b, out)
    steps = api.steps(_Recorder(stepped, mode != "w4a16"), b, out)
    for _, step in steps:
        step()
    names = ["route+gather", "fc1"] + (["requantize"] if mode != "w4a16" else []) + ["fc2", "combine"]
    assert [n for n, _ in steps] == names and len(ran) == len(names)
    for (n1, a1), (n2, a2) in zip(ran, stepped):
        assert n1 == n2 and len(a1) == len(a2) and all(x is y for x, y in zip(a1, a2))
    empty = fm.bind(p, output=out[:0], **{**tensors, "a": tensors["a"][:0]} | {
        "topk_ids": tensors["topk_ids"][:0], "topk_weights": tensors["topk_weights"][:0]})  # fmt: skip
    assert api.steps(_Recorder([], False), empty, out[:0]) == []


def test_bench_step_prefixes_run_each_prefix_per_binding():
    from benchmarks.experimental.b12x.bench_moe import step_prefixes

    p, tensors = device_plan("nvfp4")
    out = torch.empty(T, H, dtype=torch.bfloat16, device="meta")
    log = []
    p.state.extra["launchers"] = _Recorder(log, True)
    try:
        bindings = [fm.bind(p, output=out, **tensors) for _ in range(2)]
        prefixes = step_prefixes(p, bindings, out)
        names = ["route+gather", "fc1", "requantize", "fc2", "combine"]
        assert [last for last, _ in prefixes] == names
        for n, (_, calls) in enumerate(prefixes, 1):
            assert len(calls) == 2
            log.clear()
            calls[1]()
            want = ["routing", "fc1:identity", "requantize", "fc2:identity", "combine"]  # T * K >= E
            assert [name for name, _ in log] == want[:n]
    finally:
        del p.state.extra["launchers"]


def test_compact_grid_binds_min_e_tk_rows_of_the_active_list():
    p, tensors = device_plan("nvfp4")
    _with_compact(p, True)
    s = p.state.scratch
    for t in (1, T):  # T * K = 2 and 10 routes; E = 4 experts
        part = {
            "a": tensors["a"][:t], "topk_ids": tensors["topk_ids"][:t], "topk_weights": tensors["topk_weights"][:t]
        }  # fmt: skip
        b = fm.bind(p, **{**tensors, **part})
        active = b.fc1_args[-1]
        assert active is b.fc2_args[-1] and active.shape == (min(E, t * K),)
        if t * K >= E:
            assert active is s["active"] and b.grid == "identity"  # the whole buffer, never read
            continue
        root = s["active"]._base if s["active"]._base is not None else s["active"]
        assert active._base is root and active.storage_offset() == s["active"].storage_offset()  # a view


def test_bench_grid_flags():
    from argparse import Namespace

    from benchmarks.experimental.b12x.bench_moe import grid_choice

    assert grid_choice(Namespace(full_grid=True, compact_grid=False)) is False
    assert grid_choice(Namespace(full_grid=False, compact_grid=True)) is True
    assert grid_choice(Namespace(full_grid=False, compact_grid=False)) is None  # the heuristic's
    assert grid_choice(Namespace()) is None


def _with_compact(p, compact: bool):
    p.state.selection = dataclasses.replace(
        p.state.selection, routing=dataclasses.replace(p.state.selection.routing, compact_grid=compact)
    )


@pytest.mark.parametrize("compact", [False, True], ids=["full_grid", "compact_grid"])
@pytest.mark.parametrize("t", [1, 2, T])  # T * K = 2, 4, 10 routes; E = 4 experts
def test_bind_picks_the_list_grid_only_below_e_routes(compact, t):
    p, tensors = device_plan("nvfp4")
    _with_compact(p, compact)
    part = {"a": tensors["a"][:t], "topk_ids": tensors["topk_ids"][:t], "topk_weights": tensors["topk_weights"][:t]}
    b = fm.bind(p, **{**tensors, **part})
    listed = compact and t * K < E
    assert b.grid == ("list" if listed else "identity")
    active = b.fc1_args[-1]
    assert active is b.fc2_args[-1]
    assert active.shape == ((t * K,) if listed else (E,))
    out = torch.empty(t, H, dtype=torch.bfloat16, device="meta")
    log = []
    api.execute(_Recorder(log, True), b, out)
    assert [n for n, _ in log if n.startswith("fc")] == [f"fc1:{b.grid}", f"fc2:{b.grid}"]
    with pytest.raises(
        ValueError, match=f"launches the '{b.grid}' expert grid of tile bucket 0, which this plan did not"
    ):
        api.execute(_Recorder([], True, grids=()), b, out)


def test_resolve_launchers_groups_the_expert_grids_and_prime_launches_each():
    wplan = weight_plan("modelopt_nvfp4", "silu", ("nvfp4",), e=E, h=H, i=INTER)
    p = fm.plan(fm.Caps(max_tokens=8, num_topk=K, device="cuda", weight_plan=wplan, quant_mode="nvfp4"))
    # compact (the heuristic's), k < E < 8 k; two buckets: T = 1 packed (T k < E: the list grid only)
    # and T = 2..8 on the dequantized operands (_buckets.DECODE_DEQUANT_FROM = 2; the identity grid)
    cfg = p.heuristic("sm_90a")
    jobs = p.kernels(cfg, "sm_90a")

    def stub(fn):
        out = lambda *args, name=fn.__name__: (name, args)  # noqa: E731
        out.__name__ = fn.__name__
        return out

    fake = [(stub(fn), args) for fn, args in jobs]
    experts = {key: tuple((stub(fn), args) for fn, args in pair) for key, pair in p.expert_jobs(cfg, "sm_90a").items()}
    L = api.resolve_launchers(fake, experts)
    assert [b.max_tokens for b in cfg.experts] == [1, 8] and [b.dequant for b in cfg.experts] == [False, True]
    assert sorted(L.experts) == [("identity", 1), ("list", 0)] and L.routing["int64"][1][0] == "int64"
    for (g, i), (fc1, fc2) in L.experts.items():
        assert fc1[0] == "compile_fc1" and fc2[0] == "compile_fc2" and fc1[1][-1] == fc2[1][-1] == g
        assert fc1[1][3] is cfg.experts[i].fc1 and fc2[1][2] is cfg.experts[i].fc2
    # prime's expert launches: every compiled variant of FC1 and FC2, once each
    p2, _ = device_plan("nvfp4")
    log = []
    p2.state.extra["launchers"] = _Recorder(log, True)
    try:
        api._prime_experts(p2, p2.state)
    finally:
        del p2.state.extra["launchers"]
    assert sorted(n for n, _ in log) == ["fc1:identity", "fc1:list", "fc2:identity", "fc2:list"]


def test_device_bind_errors():
    p, tensors = device_plan()
    bad_a = torch.empty(H, T, dtype=torch.bfloat16, device="meta").t()
    exact(
        ValueError,
        "a must be contiguous on CUDA, got bfloat16 [5, 64] on meta (non-contiguous)",
        fm.bind,
        p,
        **dict(tensors, a=bad_a),
    )
    scratch = dict(p.state.scratch)
    del scratch["hist"]
    names = sorted(p.state.scratch)
    exact(
        ValueError,
        f"scratch must hold exactly the plan's buffers {names}, got {sorted(scratch)}",
        fm.bind,
        p,
        scratch=scratch,
        **tensors,
    )
    scratch = dict(p.state.scratch, hist=torch.empty(1, E, dtype=torch.int64, device="meta"))
    exact(
        ValueError,
        "scratch['hist'] must be dtype torch.int32; got torch.int64 [1, 4] on meta",
        fm.bind,
        p,
        scratch=scratch,
        **tensors,
    )
    b = fm.bind(p, scratch=dict(p.state.scratch), **tensors)  # a caller's own workspace of the same layout
    assert b.scratch == p.state.scratch


def test_device_tensors_need_a_device_plan(prepared):
    wplan = weight_plan("modelopt_nvfp4", "silu", ("nvfp4",), e=E, h=H, i=INTER)
    p = prepared(fm.Caps(max_tokens=8, num_topk=K, device="meta", weight_plan=wplan, quant_mode="nvfp4"))
    _, tensors = device_plan()
    msg = (
        "moe.fused_moe: tensors on meta need a plan prepared on a CUDA device; this plan was prepared on cpu, "
        "which runs the reference backend for CPU tensors only"
    )
    exact(ValueError, msg, fm.bind, p, **tensors)


def test_out_of_range_ids_are_ignored_routes_not_errors(prepared):
    """The contract (api docstring): ids < 0 or >= E add nothing; bind accepts them."""
    wplan = weight_plan("modelopt_nvfp4", "silu", ("w4a16",), e=E, h=H, i=INTER)
    p = prepared(fm.Caps(max_tokens=8, num_topk=K, device="cpu", weight_plan=wplan, quant_mode="w4a16"))
    experts = fm.prepare_weights(plan=wplan, **checkpoint(wplan))
    a = activations(T, H)
    ids, w = routing(T, K, E)
    out = fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids))
    ids2 = ids.clone()
    ids2[:, 1] = torch.tensor([-1, E, 100, -5, E + 1], dtype=torch.int32)
    w2 = w.clone()
    w2[:, 1] = 0.0  # an ignored route with weight 0 and a valid route with weight 0 agree
    got = fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids2))
    ref = fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w2, topk_ids=ids))
    assert torch.equal(got, ref) and not torch.equal(got, out)


# ---- live-T buckets of the expert GEMMs' tilings ---------------------------------------------------
class _BucketRecorder(_Recorder):
    """_Recorder whose expert GEMMs exist per (grid, bucket) and carry both in their names."""

    def __init__(self, log, keys):
        super().__init__(log, True, grids=())
        rec = lambda name: lambda *a: log.append((name, a))  # noqa: E731
        self.experts = {(g, i): (rec(f"fc1:{g}:{i}"), rec(f"fc2:{g}:{i}")) for g, i in keys}


@pytest.mark.parametrize("compact", [False, True], ids=["full_grid", "compact_grid"])
def test_bind_picks_the_expert_bucket_by_live_t(compact):
    p, tensors = device_plan("nvfp4")  # max_tokens 8, E = 4, K = 2
    buckets = (api.ExpertBucket(1, "fc1 small", "fc2 small"), api.ExpertBucket(8, "fc1 large", "fc2 large"))
    p.state.selection = dataclasses.replace(p.state.selection, experts=buckets)
    _with_compact(p, compact)
    keys = api.expert_variants(compact, E, K, 8, buckets)
    # compact: T = 1 lists 2 experts (< E), T >= 2 covers E; full grid: identity for every T
    assert keys == ((("identity", 0), ("identity", 1)) if not compact else (("identity", 1), ("list", 0)))
    for t, want in ((1, 0), (2, 1), (T, 1)):
        part = {"a": tensors["a"][:t], "topk_ids": tensors["topk_ids"][:t], "topk_weights": tensors["topk_weights"][:t]}
        b = fm.bind(p, **{**tensors, **part})
        assert b.bucket == want and (b.grid, b.bucket) in keys
        log = []
        api.execute(_BucketRecorder(log, keys), b, torch.empty(t, H, dtype=torch.bfloat16, device="meta"))
        assert [n for n, _ in log if n.startswith("fc")] == [f"fc1:{b.grid}:{want}", f"fc2:{b.grid}:{want}"]
        with pytest.raises(ValueError, match=f"expert grid of tile bucket {want}, which this plan did not compile"):
            api.execute(_BucketRecorder([], [k for k in keys if k[1] != want]), b, torch.empty(t, H, device="meta"))


@pytest.mark.parametrize(
    "compact, max_tokens, k, tops, want",
    [
        (False, 64, 2, (8, 64), (("identity", 0), ("identity", 1))),
        (True, 64, 2, (8, 64), (("identity", 0), ("identity", 1), ("list", 0))),  # T * 2 >= 8 from T = 4
        (True, 64, 2, (2, 64), (("identity", 1), ("list", 0), ("list", 1))),  # T = 3 lists, T = 4 does not
        (True, 4, 2, (8, 64), (("identity", 0), ("list", 0))),  # the second bucket is past max_tokens
        (True, 64, 8, (8, 64), (("identity", 0), ("identity", 1))),  # k = E: never a list
        (True, 64, 1, (4, 16, 64), (("identity", 1), ("identity", 2), ("list", 0), ("list", 1))),  # list T < 8
    ],
)
def test_expert_variants_are_what_some_live_t_binds(compact, max_tokens, k, tops, want):
    buckets = tuple(api.ExpertBucket(top, None, None) for top in tops)
    got = api.expert_variants(compact, 8, k, max_tokens, buckets)
    assert got == want
    bound = {(api.expert_grid(compact, 8, k, t), api.expert_bucket(buckets, t)) for t in range(1, max_tokens + 1)}
    assert bound == set(got)  # exactly: nothing compiled that no T binds, nothing bound uncompiled


def test_bench_expert_sweep_rows_are_valid_overrides():
    from argparse import Namespace

    from benchmarks.experimental.b12x.bench_moe import expert_variants, sweep_labels

    pytest.importorskip("cutlass")  # the sweep's tilings are gemm DecodeConfigs
    assert expert_variants(Namespace(), 16, 64) == [("", None)]  # no --expert-sweep: the heuristic only
    small = expert_variants(Namespace(expert_sweep=[]), 4, 64)
    large = expert_variants(Namespace(expert_sweep=[]), 16, 64)
    assert small[0] == ("", None) and all(label.startswith(" n1 ") for label, _ in small[1:])
    assert {label[:4] for label, _ in large[1:]} == {" n1 ", " n2 "}  # 16-token groups swept above T = 8
    assert [label for label, _ in expert_variants(Namespace(expert_sweep=["w4p1"]), 16, 64)] == [
        "",
        " n1 w4p1",
        " n2 w4p1",
    ]
    assert "base" in sweep_labels() and "w4p1" in sweep_labels()
    wplan = weight_plan("modelopt_nvfp4", "silu", ("nvfp4", "w4a16"), e=E, h=256, i=128)
    for mode in ("nvfp4", "w4a16"):
        caps = fm.Caps(max_tokens=64, num_topk=K, device="cuda", weight_plan=wplan, quant_mode=mode)
        cfg = fm.plan(caps).heuristic("sm_90a")
        for _, experts in large[1:]:
            p = fm.plan(caps, override=dataclasses.replace(cfg, experts=experts))  # checked: raises if invalid
            assert len(p.kernels(p.override, "sm_90a")) == 3 + 4  # routing x2, combine, fc1/fc2 x 2 grids
