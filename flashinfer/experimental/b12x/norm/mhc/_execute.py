"""norm.mhc execution on validated inputs (the entry points and the custom ops call these): the
plan's resolved launchers, pass 1 / pass 2 / the one-launch kernels, and the CPU reference path.
Nothing here compiles, allocates or syncs the host (CUDA-graph safe)."""

from __future__ import annotations

import functools

from . import reference
from ._config import RowConfig
from ._plan import OP, MhcPlan, _dname, _sm_count
from .reference import MIXES


def _workspace(p: MhcPlan, binding):
    scratch = binding.scratch if binding is not None else p.state.scratch
    return scratch["partials"]


def _launchers(p: MhcPlan) -> dict:
    """The plan's resolved launchers, looked up once: run never compiles (it raises instead)."""
    st = p.state
    table = st.extra.get("launchers")
    if table is None:
        table = {}
        for k, args in st.kernels:
            if not k.resolved(*args):
                raise RuntimeError(
                    f"{OP}: kernel {k.key_summary(*args)} is no longer resolved in memory "
                    "(clear_all_caches after preparation?); prepare the plan again in a PreparationSession"
                )
            table[(k.__name__, args[:-2])] = k(*args)
        st.extra["launchers"] = table
        st.extra["sms"] = _sm_count(st.device)
    return table


def _launcher(p: MhcPlan, kind: str, key: tuple):
    try:
        return _launchers(p)[(kind, key)]
    except KeyError:
        raise ValueError(f"{OP}: this plan was prepared for forms {p.forms()}; {key[0]} is not one of them") from None


def _target(p: MhcPlan, form: str, tokens: int) -> int:
    """Pass 1's target program count of `form` at `tokens` live tokens (split_for)."""
    return p.state.selection.target_ctas(tokens, p.state.extra["sms"], form)


def _split_fn(p: MhcPlan, fn, binding):
    """fn split once into hi, lo in the activation dtype (one launch) for a pre tile with
    fn_split "pre" / "hi"; returns the scratch it wrote, viewed [48, 4H] like a fn."""
    scratch = binding.scratch if binding is not None else p.state.scratch
    out = scratch["fn_split"]
    _launcher(p, "compile_split_fn", (_dname(p.caps.dtype), p.caps.hidden_size))(fn, out)
    return out.view(2 * MIXES, -1)


def _stream(p: MhcPlan, form: str, t: int, res, x, post, comb, out, fn, binding, fns=None) -> int:
    """Pass 1 of `form` at t tokens; returns the number of splits it wrote. `fns`: a dict that keeps
    fn's hi / lo split across the chunks of one call (split once; None: split for this pass)."""
    caps, cfg = p.caps, p.state.selection.stream(form, t)
    if form == "pre" and cfg.fn_split != "kernel":
        fns = {} if fns is None else fns
        if "split" not in fns:
            fns["split"] = _split_fn(p, fn, binding)
        fn = fns["split"]
    n_chunks = caps.hidden_size // cfg.block_h
    if form == "post":
        splits, cps = n_chunks, 1
    else:
        target = _target(p, form, t)
        splits, cps = p.state.selection.pass1_splits(form, t, cfg.block_t, n_chunks, target, caps.split_k)
    launch = _launcher(p, "compile_stream", (form, _dname(caps.dtype), caps.hidden_size, cfg))
    launch(res, x, post, comb, out, fn, _workspace(p, binding), T=t, splits=splits, cps=cps)
    return splits


def _apply(p: MhcPlan, form, t, splits, src, hc_scale, hc_base, w, outs, binding, **scal) -> None:
    """Pass 2 after `form`'s pass 1 at t tokens."""
    caps, dt = p.caps, _dname(p.caps.dtype)
    wdt = "float32" if w is None else _dname(w.dtype)
    sel = p.state.selection
    y, post, comb = outs["y_out"], outs["post_out"], outs["comb_out"]
    if sel.wide is not None and t <= sel.wide.max_tokens and w is None:
        launch = _launcher(p, "compile_wide", (dt, caps.hidden_size, sel.wide_for(t, form)))
        launch(src, _workspace(p, binding), hc_scale, hc_base, y, post, comb, T=t, splits=splits, **scal)
        return
    walk = sel.walk_for(t, w is not None, caps.hidden_size)
    if walk is not None:
        launch = _launcher(p, "compile_walk", (dt, caps.hidden_size, walk))
        programs = walk.walk * p.state.extra["sms"]  # all resident: walk programs an SM
        launch(src, _workspace(p, binding), hc_scale, hc_base, None, y, post, comb, T=t, splits=splits,
               programs=programs, **scal)  # fmt: skip
        return
    tile = sel.apply(t, form)
    kind = "compile_row" if isinstance(tile, RowConfig) else "compile_apply"
    launch = _launcher(p, kind, (dt, caps.hidden_size, wdt, tile))
    launch(src, _workspace(p, binding), hc_scale, hc_base, w, y, post, comb, T=t, splits=splits, **scal)


def _two_pass(p: MhcPlan, form: str, t: int, res, x, post_in, comb_in, fn, hc_scale, hc_base, w, outs, binding, **scal):
    """The two-pass path of `form` at t tokens, chunk by chunk (MhcConfig.chunks; one chunk, the common case: the
    tensors as given, no views); "split" is post_pre as post's kernel, then pre's two passes on what it stored."""
    runs = p.state.selection.chunks(t)
    if len(runs) == 1:
        return _passes(p, form, t, res, x, post_in, comb_in, fn, hc_scale, hc_base, w, outs, binding, None, scal)
    fns = {}  # fn's hi / lo split, once a call
    for t0, n in runs:
        o = {k: None if v is None else v[t0 : t0 + n] for k, v in outs.items()}
        r, xs, ps, cs = (None if v is None else v[t0 : t0 + n] for v in (res, x, post_in, comb_in))
        _passes(p, form, n, r, xs, ps, cs, fn, hc_scale, hc_base, w, o, binding, fns, scal)
    return None


def _passes(p: MhcPlan, form, t, res, x, post_in, comb_in, fn, hc_scale, hc_base, w, outs, binding, fns, scal):
    """Pass 1, then pass 2 on what pass 1 read (pre, bcast) or stored (post_pre, split), at t tokens."""
    if form == "split":
        new = outs["residual_out"]
        _stream(p, "post", t, res, x, post_in, comb_in, new, _workspace(p, None), None)
        splits = _stream(p, "pre", t, new, None, None, None, None, fn, binding, fns)
        _apply(p, "pre", t, splits, new, hc_scale, hc_base, w, outs, binding, **scal)
    elif form == "post_pre":
        new = outs["residual_out"]
        splits = _stream(p, form, t, res, x, post_in, comb_in, new, fn, binding, fns)
        _apply(p, form, t, splits, new, hc_scale, hc_base, w, outs, binding, **scal)
    else:
        splits = _stream(p, form, t, res, None, None, None, outs.get("residual_out"), fn, binding, fns)
        _apply(p, form, t, splits, res, hc_scale, hc_base, w, outs, binding, **scal)


def _one_launch(
    p: MhcPlan, form, t, res, x, post_in, comb_in, out, fn, hc_scale, hc_base, w, outs, binding, small=True, **scal
):
    """A one-launch path when the selection has one for `form` at t tokens: the small-T kernels
    (MhcConfig.last, tiny, small, in that order, unless small=False), else the fused kernel
    (MhcConfig.fused_*); True if one ran."""
    sel, caps = p.state.selection, p.caps
    dt, wdt = _dname(caps.dtype), "float32" if w is None else _dname(w.dtype)
    tile = sel.fused(form, t)
    if small and sel.last is not None and t <= sel.last.max_tokens:
        launch = _launcher(p, "compile_last", (form, dt, caps.hidden_size, wdt, sel.last))
    elif small and sel.tiny is not None and t <= sel.tiny.max_tokens and w is None:
        stream = sel.stream(form, 1)  # the small tile (tiny.max_tokens <= small_max_tokens)
        n_chunks, target = caps.hidden_size // stream.block_h, _target(p, form, t)
        splits, cps = sel.pass1_splits(form, t, stream.block_t, n_chunks, target, caps.split_k)
        kernel = _launcher(p, "compile_tiny", (form, dt, caps.hidden_size, stream, sel.tiny))
        scratch = binding.scratch if binding is not None else p.state.scratch
        kernel(res, x, post_in, comb_in, out, fn, scratch["partials"], scratch["counter"], hc_scale, hc_base,
               outs["y_out"], outs["post_out"], outs["comb_out"], T=t, splits=splits, cps=cps, **scal)  # fmt: skip
        return True
    elif small and sel.small is not None and t <= sel.small.max_tokens:
        launch = _launcher(p, "compile_small", (form, dt, caps.hidden_size, wdt, sel.small))
    elif tile is not None:
        if form == "pre" and tile.fn_split != "kernel":
            fn = _split_fn(p, fn, binding)
        splits, cps = tile.split(caps.hidden_size, caps.split_k)
        kernel = _launcher(p, "compile_fused", (form, dt, caps.hidden_size, wdt, tile))
        launch = functools.partial(kernel, splits=splits, cps=cps)
    else:
        return False
    scratch = binding.scratch if binding is not None else p.state.scratch
    y, post, comb = outs["y_out"], outs["post_out"], outs["comb_out"]
    launch(
        res,
        x,
        post_in,
        comb_in,
        out,
        fn,
        scratch["partials"],
        scratch["counter"],
        hc_scale,
        hc_base,
        w,
        y,
        post,
        comb,
        T=t,
        **scal,
    )
    return True


def execute_pre(p, residual, fn, hc_scale, hc_base, outs, norm_weight, binding=None, **scal) -> None:
    t = residual.shape[0]
    if p.state.arch is None:
        r, post, comb, y = reference.mhc_pre(residual, fn, hc_scale, hc_base, norm_weight=norm_weight, **scal)
        return _copy_outs(outs, residual_out=r, post_out=post, comb_out=comb, y_out=y)
    if t == 0:
        return None
    bcast = residual.dim() == 2
    _launchers(p)
    form = "bcast" if bcast else "pre"
    if _one_launch(
        p,
        form,
        t,
        residual,
        None,
        None,
        None,
        outs.get("residual_out"),
        fn,
        hc_scale,
        hc_base,
        norm_weight,
        outs,
        binding,
        **scal,
    ):
        return None
    _two_pass(p, form, t, residual, None, None, None, fn, hc_scale, hc_base, norm_weight, outs, binding, **scal)
    return None


def execute_post(p, x, residual, prev_post, prev_comb, out) -> None:
    t = residual.shape[0]
    if p.state.arch is None:
        out.copy_(reference.mhc_post(x, residual, prev_post, prev_comb))
        return
    if t:
        _launchers(p)
        ws = _workspace(p, None)  # stands in for fn (post reads no fn; no allocation)
        _stream(p, "post", t, residual, x, prev_post, prev_comb, out, ws, None)


def execute_post_pre(
    p, x, residual, prev_post, prev_comb, fn, hc_scale, hc_base, outs, norm_weight, binding=None, **scal
):
    t = residual.shape[0]
    if p.state.arch is None:
        res = reference.mhc_post_pre(
            x, residual, prev_post, prev_comb, fn, hc_scale, hc_base, norm_weight=norm_weight, **scal
        )
        return _copy_outs(outs, residual_out=res[0], post_out=res[1], comb_out=res[2], y_out=res[3])
    if t == 0:
        return None
    _launchers(p)
    args = (x, prev_post, prev_comb, outs["residual_out"], fn, hc_scale, hc_base, norm_weight, outs, binding)
    if _one_launch(p, "post_pre", t, residual, *args, **scal):
        return None
    sel = p.state.selection
    form = "post_pre"
    if sel.splits_post_pre(t):  # post's kernel, then pre on what it stored
        if sel.fused("pre", t) is not None:  # pre's one-launch kernel after post's (whole call)
            new = outs["residual_out"]
            _stream(p, "post", t, residual, x, prev_post, prev_comb, new, _workspace(p, None), None)
            args = (new, None, None, None, None, fn, hc_scale, hc_base, norm_weight, outs, binding)
            _one_launch(p, "pre", t, *args, small=False, **scal)
            return None
        form = "split"
    args = (residual, x, prev_post, prev_comb, fn, hc_scale, hc_base, norm_weight, outs, binding)
    _two_pass(p, form, t, *args, **scal)
    return None


def _copy_outs(outs: dict, **values) -> None:
    for name, buf in outs.items():
        if values[name] is not buf:
            buf.copy_(values[name])
