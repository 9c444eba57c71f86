"""norm.mhc's programmatic dependent launch selections on the CPU: with_pdl, with_large_t_pdl, sm_90a's small-T
launches (SmallLaunch) and their compile jobs."""

import dataclasses
import re

import pytest

from b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import _config, api

from .mhc_cases import sm90_default

pytestmark = pytest.mark.contract


def caps(**kw):
    base = dict(device="cpu", max_tokens=16, hidden_size=256)
    return mhc.Caps(**(base | kw))


def test_pdl_and_fast_config():
    """with_pdl marks every two-pass tile (pass 1, row and wide pass 2) for programmatic dependent
    launch, and fast the wide pass 2's Sinkhorn; new compile jobs; the sm_90a default has the fast
    Sinkhorn and (session 30) pdl only where its small_launches say."""
    for cls, kw in ((_config.StreamConfig, dict(block_t=16, block_h=32)), (_config.RowConfig, {})):
        with pytest.raises(ValueError, match=re.escape(f"{cls.__name__}.pdl must be a bool, got 1")):
            cls(**kw, pdl=1)
    with pytest.raises(ValueError, match=re.escape("WideConfig.fast must be a bool, got 'yes'")):
        _config.WideConfig(fast="yes")
    cfg = sm90_default()
    pdl = _config.with_pdl(cfg, fast=True)
    tiles = [pdl.stream(f, t) for f in ("pre", "post_pre", "bcast", "post") for t in (1, 65)]
    assert all(t.pdl for t in tiles + [pdl.apply(1), pdl.apply(65), pdl.wide]) and pdl.wide.fast
    plain_tiles = [cfg.stream("pre", 33), cfg.stream("bcast", 1), cfg.apply(1), cfg.apply(65), cfg.wide]
    assert not any(t.pdl for t in plain_tiles + [cfg.apply(2, "bcast"), cfg.wide_for(2, "bcast")]) and cfg.wide.fast
    assert all(t.pdl for t in [cfg.stream("pre", 1), cfg.stream("post_pre", 64), cfg.wide_for(1, "pre")])
    assert _config.with_pdl(cfg).wide == dataclasses.replace(cfg.wide, pdl=True)
    plain = dataclasses.replace(cfg, small_launches=())
    p = mhc.plan(caps(max_tokens=4096))
    jobs, base = set(p.kernels(pdl, "sm_90a")), set(p.kernels(plain, "sm_90a"))
    assert len(jobs) == len(base) and len(jobs & base) == 1  # only the fn split launch (T >= 2049) is shared


def test_large_t_pdl_config():
    """with_large_t_pdl (sm_90a's default when LARGE_PDL_90) marks the large tiles, pass 1's and pass 2's (walk
    included): pre's calls above mid_max_tokens, post_pre's above small_max_tokens (its large tile; sm_90a splits
    post_pre there, so its pass 1 is pre's), and nothing else: no small or mid tile, no wide pass 2, not bcast's or
    post's pass 1; the plan compiles the marked tiles as jobs of their own."""
    cfg = dataclasses.replace(sm90_default(), small_launches=())
    default = _config.default_config("sm_90a")
    assert (_config.with_large_t_pdl(sm90_default()).pre_large == default.pre_large) == _config.LARGE_PDL_90
    big = _config.with_large_t_pdl(cfg)
    small = [cfg.small_max_tokens, 1]
    for form in ("pre", "post_pre", "bcast", "post"):
        for t in small + [cfg.small_max_tokens + 1, cfg.mid_max_tokens, cfg.mid_max_tokens + 1, 1024, 4096, 8192]:
            large = t > cfg.mid_max_tokens
            first = {"pre": cfg.mid_max_tokens, "post_pre": cfg.small_max_tokens}.get(form)
            assert big.stream(form, t).pdl == (first is not None and t > first), (form, t)
            assert big.apply(t, form).pdl == large and not cfg.stream(form, t).pdl, (form, t)
            walk = big.walk_for(t, weighted=False)
            assert walk is None or walk.pdl, (form, t)
    assert big.wide == cfg.wide and not big.wide.pdl
    p = mhc.plan(caps(max_tokens=8192))
    jobs, base = set(p.kernels(big, "sm_90a")), set(p.kernels(cfg, "sm_90a"))
    assert len(jobs) == len(base) and jobs != base


def test_small_launches_programmatic_dependents_and_split():
    """sm_90a's selection (session 30): pre / post_pre calls that a SmallLaunch covers run the small pass-1
    tile and the wide or row pass 2 as programmatic dependents (their own compile jobs) with its split
    target, every other call (bcast, post, pre above 32 tokens) the plain tiles with ctas_per_sm's; the
    workspace covers every target; bad entries are refused. with_small_t_pdl (a bench variant) marks the
    T <= small_max_tokens tiles only."""
    cfg = sm90_default()
    assert cfg.small_launches == _config.SMALL_LAUNCHES_90 and not cfg.wide.pdl
    for form, last in (("pre", 32), ("post_pre", 64)):
        small = getattr(cfg, f"{form}_small")
        for t in range(1, last + 1):
            assert cfg.stream(form, t) == dataclasses.replace(small, pdl=True) and cfg.apply(t, form).pdl
            assert cfg.wide_for(t, form).pdl
        assert dataclasses.replace(small, pdl=True) in cfg.streams(form) and small in cfg.streams(form)
    assert not cfg.stream("pre", 33).pdl and not cfg.apply(33, "pre").pdl
    assert not cfg.apply(65, "post_pre").pdl  # LARGE_PDL_90 stripped by sm90_default
    assert not cfg.stream("bcast", 1).pdl and not cfg.stream("post", 1).pdl and not cfg.wide_for(1, "bcast").pdl
    assert cfg.wides() == (cfg.wide, cfg.wide_for(1, "pre")) and _config.MhcConfig(wide=cfg.wide).wides() == (cfg.wide,)
    p = mhc.plan(caps(max_tokens=8))
    jobs = p.kernels(cfg, "sm_90a")
    assert sorted(a[2].pdl for k, a in jobs if k.__name__ == "compile_wide") == [False, True]
    rows = {a[3] for k, a in jobs if k.__name__ == "compile_row"}
    assert {cfg.row_small, dataclasses.replace(cfg.row_small, pdl=True)} <= rows
    small = _config.with_small_t_pdl(cfg)
    assert all(getattr(small, n).pdl for n in _config.SMALL_T_PDL_TILES) and small.wide.pdl
    assert not any(t.pdl for t in (small.pre_large, small.post_pre_large, small.row_large, small.bcast, small.post))
    targets = [cfg.target_ctas(t, 132, "pre") for t in (1, 2, 4, 5, 32, 33)]
    assert targets == [132, 264, 132, 264, 264, 528]
    assert [cfg.target_ctas(t, 132, "post_pre") for t in (3, 4, 64)] == [132, 264, 132]
    assert cfg.target_ctas(1, 132, "bcast") == cfg.target_ctas(1, 132) == 528
    eight = dataclasses.replace(cfg, small_max_tokens=8)  # no entry applies above small_max_tokens
    assert eight.stream("pre", 8).pdl and eight.small_launch("pre", 9) is None and not eight.apply(9, "pre").pdl
    # the workspace: the largest splits x T over every target (T = 32 at one program an SM: 2 token blocks)
    one_sm = dataclasses.replace(cfg, small_launches=(_config.SmallLaunch("pre", 1, 64, 1),))
    rows = _config.workspace_rows(one_sm, api.FORMS, 7168, 64, 1, sms=132)
    assert rows >= _config.split_for(32, 16, 7168 // 32, 132)[0] * 32
    assert rows > _config.workspace_rows(cfg, api.FORMS, 7168, 64, 1)
    for kw, message in (
        (dict(ctas_per_sm=0), "MhcConfig.ctas_per_sm must be an int >= 1, got 0"),
        (dict(small_launches=[]), "MhcConfig.small_launches must be a tuple of SmallLaunch, got []"),
        (
            dict(small_launches=(_config.SmallLaunch("pre", 1, 4, 1), _config.SmallLaunch("pre", 4, 8, 2))),
            "overlaps SmallLaunch(form='pre', first=4, last=8, ctas_per_sm=2)",
        ),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            _config.MhcConfig(**kw)
    for kw, message in (
        (dict(form="bcast"), "SmallLaunch.form must be one of ('pre', 'post_pre'), got 'bcast'"),
        (dict(first=0), "SmallLaunch.first must be an int >= 1, got 0"),
        (dict(ctas_per_sm=True), "SmallLaunch.ctas_per_sm must be an int >= 1, got True"),
        (dict(first=5, last=4), "SmallLaunch.last must be >= first=5, got 4"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            _config.SmallLaunch(**({"form": "pre", "first": 1, "last": 4, "ctas_per_sm": 1} | kw))


def test_pdl_at_exit_config():
    """pdl_at_exit (a dependent that releases the next kernel as its programs exit) needs pdl; the PDL constexpr is 2
    then, 1 for a dependent released at entry, 0 for a plain launch (and under the interpreter, which has no
    griddepcontrol: test_mhc_compile checks the PTX)."""
    from flashinfer.experimental.b12x._lib import triton_build

    for make in (
        lambda: _config.StreamConfig(32, 16, pdl_at_exit=True),
        lambda: _config.RowConfig(pdl_at_exit=True),
    ):
        with pytest.raises(ValueError, match=r"pdl_at_exit needs pdl=True"):
            make()
    with pytest.raises(ValueError, match=r"RowConfig.pdl_at_exit must be a bool, got 1"):
        _config.RowConfig(pdl=True, pdl_at_exit=1)
    assert _config.StreamConfig(32, 16, pdl=True, pdl_at_exit=True).pdl_at_exit
    if not triton_build.interpreting():
        cases = ((False,), (True,), (True, True), (False, True))
        assert [triton_build.pdl_constexpr(*a) for a in cases] == [0, 1, 2, 0]
    at_exit = {n for n, t in vars(_config.default_config("sm_90a")).items() if getattr(t, "pdl_at_exit", False)}
    assert at_exit == ({"pre_mid"} if _config.MID_PRE_EXIT_90 else set())  # session 62's rule
