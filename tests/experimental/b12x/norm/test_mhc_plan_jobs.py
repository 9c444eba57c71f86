"""norm.mhc's compile jobs are bounded by the plan's max_tokens and still cover every call up to it: for each
selection, form and live T <= max_tokens, the pass-1 tiles (post_pre_split's borrowed post and pre too), the fn split
launch, the pass-2 tile (row, walk, wide; with and without a norm weight) and the one-launch tile that `_execute`
asks for are among the plan's jobs (run never compiles: a missing job raises mid-call)."""

import dataclasses

import pytest

from b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import _config, api

pytestmark = pytest.mark.contract
H = 256
DEFAULT = _config.default_config("sm_90a")
SELECTIONS = {
    "sm90": DEFAULT,
    "sm90_pdl_large": _config.with_large_t_pdl(DEFAULT),
    "sm90_walk_all": dataclasses.replace(DEFAULT, walk_max_tokens=1 << 20),
    "sm90_walk_bounded": dataclasses.replace(DEFAULT, walk_all_max_hidden=0),  # (H here is narrow: walks at every T)
    "sm120": _config.default_config("sm_120a"),
    "fused": _config.fused_config("sm_90a"),
    "session6": _config.MhcConfig(),
    "apply": _config.MhcConfig(pass2="apply"),
}
EDGES = (1, 2, 3, 4, 5, 16, 17, 32, 33, 63, 64, 65, 66, 127, 128, 129, 511, 512, 513, 2048, 2049, 4096, 4097, 8192)


def _needed(cfg, form, t):
    """(kind, args without dtype / device / arch) of every job a call of `form` at t live tokens runs."""
    tile = cfg.fused(form, t)
    if tile is not None:
        return {("compile_fused", (form, tile))} | (_split(tile) if form == "pre" else set())  # FN_SPLIT: pre only
    passes = ("post", "pre") if form == "post_pre" and cfg.splits_post_pre(t) else (form,)
    out = set()
    for f in passes:
        if f == "pre" and form == "post_pre" and cfg.fused("pre", t) is not None:
            tile = cfg.fused("pre", t)
            out |= {("compile_fused", ("pre", tile))} | _split(tile)
            continue
        tile = cfg.stream(f, t)
        out |= {("compile_stream", (f, tile))} | (_split(tile) if f == "pre" else set())
    if form == "post":
        return out
    for weighted in (False, True):
        if cfg.wide is not None and t <= cfg.wide.max_tokens and not weighted:
            out.add(("compile_wide", (cfg.wide_for(t, form),)))
        elif cfg.walk_for(t, weighted, H) is not None:
            out.add(("compile_walk", (cfg.walk_for(t, weighted, H),)))
        else:
            tile = cfg.apply(t, form)
            out.add(("compile_row" if isinstance(tile, _config.RowConfig) else "compile_apply", (tile,)))
    return out


def _split(tile):
    return {("compile_split_fn", ())} if tile.fn_split != "kernel" else set()


def _jobs(cfg, max_tokens, forms):
    """The plan's jobs as _needed spells them (the stream form and tile; the pass-2 / fused tile)."""
    out = set()
    plan = mhc.plan(mhc.Caps(device="cpu", max_tokens=max_tokens, hidden_size=H), invocation=forms)
    for k, args in plan.kernels(cfg, "sm_90a"):
        name = k.__name__
        if name == "compile_stream":
            out.add((name, (args[0], args[3])))
        elif name == "compile_fused":
            out.add((name, (args[0], args[4])))
        elif name == "compile_split_fn":
            out.add((name, ()))
        elif name in ("compile_wide", "compile_walk"):
            out.add((name, (args[2],)))
        elif name in ("compile_row", "compile_apply"):
            out.add((name, (args[3],)))
    return out


@pytest.mark.parametrize("name", list(SELECTIONS))
@pytest.mark.parametrize("max_tokens", [1, 8, 64, 65, 128, 200, 2048, 2049, 8192])
@pytest.mark.parametrize("forms", [None, ("post_pre",), ("pre",), ("bcast", "post")], ids=str)
def test_jobs_cover_every_call_up_to_max_tokens(name, max_tokens, forms):
    cfg = SELECTIONS[name]
    jobs = _jobs(cfg, max_tokens, forms)
    needed = set()
    for form in forms or api.FORMS:
        for t in sorted({t for t in EDGES if t <= max_tokens} | {max_tokens}):
            needed |= _needed(cfg, form, t)
    assert needed <= jobs, sorted(map(str, needed - jobs))[:3]
    # ... and nothing more (the pass-2 and fused tiles take two weight dtypes, one entry here)
    assert jobs == needed, sorted(map(str, jobs - needed))[:3]


def test_small_plans_skip_the_large_tiles_and_the_split():
    """sm_90a plans to 128 tokens compile no walk tile (to 64 no mid or large tile either); to 2048 no fn split launch and no fn_split
    scratch (pre splits fn in its loop there, session 59); from 2049 both."""
    kinds = lambda n: [
        k.__name__ for k, _ in mhc.plan(mhc.Caps(device="cpu", max_tokens=n, hidden_size=H)).kernels(DEFAULT, "sm_90a")
    ]  # noqa: E731, E501
    assert "compile_walk" not in kinds(128) and "compile_walk" in kinds(129)  # above the mid tiles
    assert "compile_split_fn" not in kinds(2048) and "compile_split_fn" in kinds(2049)
    specs = lambda n: [
        s.name for s in mhc.plan(mhc.Caps(device="cuda", max_tokens=n, hidden_size=H)).scratch_specs(DEFAULT)
    ]  # noqa: E731, E501
    assert "fn_split" not in specs(2048) and "fn_split" in specs(2049)
