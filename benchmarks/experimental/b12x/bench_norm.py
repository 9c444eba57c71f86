"""norm.mhc (hyper-connection mixing, multiplicity 4) against torch.compile of its reference.

    python -m benchmarks.experimental.b12x.bench_norm [--quick] [--timer graph] [--json PATH]
        [--calls-per-graph N] [--variants NAME ...] [--norm-weight none|act|f32]

Cases: T in {1, 8, 64, 1024, 8192} tokens (--quick: 1 and 1024) at H = 7168 (--hidden), for
run_pre, run_post and run_post_pre, in the caller-buffer form (no allocation in the timed call).
Peer, timed in the same run: `torch.compile` of reference.py's function for the same entry point.

Bytes (the minimum an implementation must move; e = element size of the activations):
    pre      = T * (4H + H) * e + T * 80 + 96H * 4           residual in, y out, post/comb out, fn
    post     = T * (H + 4H + 4H) * e + T * 80                x and residual in, residual out, weights
    post_pre = T * (H + 4H + 4H + H) * e + T * 160 + 96H * 4
Ours moves more than that: the two-pass path (sm_90a's default at every T) has pass 2 read the
residual again (4H * e per token from HBM); the one-launch ("fused") kernel re-reads it from L2. % of
the copy ceiling uses the minimum above; the targets are >= 75% of it at T >= 1024, >= 2x the peer,
and run_post_pre at T = 1 under 8 us. --sweep also times alternative tiles (plan overrides) to pick
the heuristic: `--variants fused_default` (--variants implies --sweep and keeps only the names given)
times the default against session 6's (the one-launch pre from 8192 tokens) in one run (fused_*
variants: other one-launch tiles, all derived from fused_default). Issue #5's T = 1 candidates, each
beside the default in one command: `--timer graph --calls-per-graph 8 --tokens 1 --variants pdl
ctas1 pdl_ctas1 last_h64 ...` (sweep_configs() says what each is). --norm-weight act|f32 passes
the synthetic norm weight (activation dtype / fp32) to run_pre and run_post_pre and the peer (case
labels gain w=...): the wide and tiny kernels serve only calls without one, so T <= 4 then runs the
row pass 2 (or MhcConfig.last / small when a variant sets them). --per-pass also times pass 1 and
pass 2 of pre and post_pre alone (rows "pre.pass1", ...; without a norm weight), each through the
plan's own two-pass launchers (_stream / _apply of norm.mhc._execute; a fused plan's two-pass
kernels serve T = 1), with the bytes that pass moves as implemented (pass_bytes); their sum against
the whole call shows the launch gap. Where pre's pass 1 reads fn split once into hi / lo, a "pre.split"
row times that split launch alone (pass 1's row includes it).
--calls-per-graph N (graph timer) captures N back-to-back calls (same buffers) in each graph and
reports the time per call, ours and the peer alike: in a serving stack's decode graph an op pays the
launch gap between kernels, not a graph launch of its own, which the one-call graph (the default, a
floor of ~3.6 µs per replay on the H200) adds to every T = 1 figure. Report both where a target is
close (the T = 1 target is checked on whichever the run used; its check names the count).
Without --json the report goes to $OUT/b12x_bench_norm.json when $OUT is set.
"""

from __future__ import annotations

import dataclasses
import sys

import torch

from benchmarks.experimental.b12x.common import (
    Case,
    Table,
    add_calls_per_graph,
    ceilings,
    check_calls_per_graph,
    measure,
    require_cuda,
    standard_parser,
    write_report,
)

MODULE = "benchmarks.experimental.b12x.bench_norm"
TOKENS, QUICK_TOKENS = (1, 8, 64, 1024, 8192), (1, 1024)
OPS = ("pre", "post", "post_pre")
SCAL = dict(rms_eps=1e-6, hc_eps=1e-6, sinkhorn_iters=20)


def case_bytes(op: str, tokens: int, hidden: int, elem: int = 2) -> int:
    """The minimum bytes of one call (see the module docstring)."""
    fn_bytes = 96 * hidden * 4
    if op == "pre":
        return tokens * 5 * hidden * elem + tokens * 80 + fn_bytes
    if op == "post":
        return tokens * 9 * hidden * elem + tokens * 80
    if op == "post_pre":
        return tokens * 10 * hidden * elem + tokens * 160 + fn_bytes
    raise ValueError(f"op must be one of {OPS}, got {op!r}")


def pass_bytes(
    op: str, which: str, tokens: int, hidden: int, splits: int, elem: int = 2, reads: int = 2, split: bool = False
) -> int:
    """Bytes one pass of `op` moves as implemented (--per-pass): pass 1 of pre reads the residual
    and fn and writes the fp32 partials [splits, T, 32]; pass 1 of post_pre also reads x and the
    previous weights and writes the new residual, and with `split` (MhcConfig.post_pre_split: post's
    kernel, then pre's pass 1 on what it stored) reads that new residual once more; pass 2 reads the
    partials, reads the residual `reads` times (the "apply" pass 2: twice, mean square then y, the
    second an L2 hit only while the programs in flight fit in L2; the "row" pass 2: once) and writes
    y, post and comb."""
    h, partials = hidden, splits * tokens * 32 * 4
    if which == "split" and op in ("pre", "post_pre"):  # fp32 fn [24, 4H] read, hi + lo [48, 4H] written
        return 2 * 96 * h * 4
    if which == "pass1":
        if op == "pre":
            return tokens * 4 * h * elem + 96 * h * 4 + partials
        if op == "post_pre":
            return tokens * (13 if split else 9) * h * elem + tokens * 80 + 96 * h * 4 + partials
    elif which == "pass2" and op in ("pre", "post_pre"):
        return partials + tokens * (reads * 4 * h + h) * elem + tokens * 80
    raise ValueError(f"pass_bytes: op must be pre or post_pre and which split, pass1 or pass2, got {op!r}, {which!r}")


def per_pass_calls(ex, plan, op: str, ins: dict, outs: dict, scal: dict = SCAL):
    """(splits, {"pass1": fn, "pass2": fn[, "split": fn]}) of `op` through the plan's launchers (`ex`: the module
    norm.mhc._execute), exactly as its execute_pre / execute_post_pre issue them. Pass 1 runs once
    here so that pass 2, timed alone, reads partials of this very call; `outs` holds y, post, comb
    (and residual for post_pre). "split": fn's hi / lo split launch alone, when the pre pass 1 that runs
    reads a pre-split fn (pass 1's time includes it)."""
    res, x, post, comb, fn = ins["residual"], ins["x"], ins["post"], ins["comb"], ins["fn"]
    t = res.shape[0]
    pouts = {"y_out": outs["y"], "post_out": outs["post"], "comb_out": outs["comb"]}
    ex._launchers(plan)
    if op == "pre":
        pass1 = lambda: ex._stream(plan, "pre", t, res, None, None, None, None, fn, None)  # noqa: E731
        src, form = res, "pre"
    elif op == "post_pre":
        new = outs["residual"]
        sel, form = plan.state.selection, "post_pre"
        if sel.splits_post_pre(t):  # as execute_post_pre: post, then pre's pass 1
            form = "pre"

            def pass1():
                ex._stream(plan, "post", t, res, x, post, comb, new, ex._workspace(plan, None), None)
                return ex._stream(plan, "pre", t, new, None, None, None, None, fn, None)
        else:
            pass1 = lambda: ex._stream(plan, "post_pre", t, res, x, post, comb, new, fn, None)  # noqa: E731
        src = new
    else:
        raise ValueError(f"per_pass_calls: op must be pre or post_pre, got {op!r}")
    splits = pass1()
    hc, scal = (ins["hc_scale"], ins["hc_base"]), {"norm_eps": 0.0} | dict(scal)  # run_pre's default norm_eps
    pass2 = lambda: ex._apply(plan, form, t, splits, src, *hc, None, pouts, None, **scal)  # noqa: E731
    passes = {"pass1": pass1, "pass2": pass2}
    if form == "pre" and plan.state.selection.stream("pre", t).fn_split != "kernel":
        passes["split"] = lambda: ex._split_fn(plan, fn, None)  # noqa: E731
    return splits, passes


def _fn_split(cfg, mode: str, sq: str | None = None):
    """`cfg` with fn_split=`mode` on every pre pass-1 tile (two-pass small / large, fused), and with
    sq set to `sq` on those and bcast's when given (post_pre's tiles spill with sq="diag")."""
    tiles = dict(pre_small=cfg.pre_small, pre_large=cfg.pre_large, fused_pre=cfg.fused_pre)
    out = {k: None if t is None else dataclasses.replace(t, fn_split=mode) for k, t in tiles.items()}
    if sq is not None:
        out |= {
            k: None if t is None else dataclasses.replace(t, sq=sq) for k, t in (out | {"bcast": cfg.bcast}).items()
        }
    return dataclasses.replace(cfg, **out)


def sweep_configs():
    """Named alternatives to the heuristic (MhcConfig overrides) for --sweep."""
    from flashinfer.experimental.b12x.norm.mhc._config import (
        FUSED_POST_PRE,
        FUSED_PRE,
        LARGE_T_PDL_TILES,
        MID_T_PDL_TILES,
        ApplyConfig,
        FusedConfig,
        LastConfig,
        MhcConfig,
        RowConfig,
        SmallConfig,
        SmallLaunch,
        StreamConfig,
        WideConfig,
        default_config,
        fused_config,
        with_large_t_pdl,
        with_pdl,
        with_small_t_pdl,
        with_tile_fields,
    )

    base = MhcConfig()  # the two-pass path (no one-launch tiles), session 1-6 tiles
    fused = fused_config("sm_90a")  # session 6's default: the one-launch pre from 8192 tokens
    default = default_config("sm_90a")
    pre_mid_plain = with_tile_fields(default, ("pre_mid",), pdl=False, pdl_at_exit=False)
    pdl_fast = with_pdl(default, fast=True)
    small_plain = dataclasses.replace(default, small_launches=())  # apart alone
    one_token = tuple(SmallLaunch(form, 1, 1, 1) for form in ("pre", "post_pre"))  # session 29's small launches
    row = dataclasses.replace(base, pass2="row")
    apply = dataclasses.replace(base, pass2="apply")
    return {
        # session 6's default (one launch from 8192 tokens), the two-pass path with the old tiles, and
        # other one-launch tiles
        "fused_default": fused,
        # T <= 4 (8, 16) in ONE launch, the last program to arrive finishing the call (_kernel_last.py:
        # every partial in one tile, y from the L2-resident row, one Sinkhorn chain for all tokens), on
        # the default. sm_90a (CPU compile): the default 32 x 8 warps is 224 programs at 145 (pre) / 218
        # (post_pre) registers = one program per SM, two waves; h64: 112 programs, post_pre 255
        # registers + 24 bytes of stack; h16_s4 / h16_s2: 112 / 224 programs of 4 / 2 steps; r128:
        # ptxas capped at 128 registers (two programs per SM, one wave; the finish spills); pf: token
        # t + 1's loads issued before token t's y
        "last": dataclasses.replace(default, last=LastConfig()),
        "last8": dataclasses.replace(default, last=LastConfig(max_tokens=8)),
        "last16": dataclasses.replace(default, last=LastConfig(max_tokens=16)),
        "last_h64": dataclasses.replace(default, last=LastConfig(block_h=64)),
        "last_h16_s2": dataclasses.replace(default, last=LastConfig(block_h=16, steps=2)),
        "last_h16_s4": dataclasses.replace(default, last=LastConfig(block_h=16, steps=4)),
        "last_r128": dataclasses.replace(default, last=LastConfig(maxnreg=128)),
        "last8_r128": dataclasses.replace(default, last=LastConfig(max_tokens=8, maxnreg=128)),
        "last8_pf": dataclasses.replace(default, last=LastConfig(max_tokens=8, prefetch=True)),
        "last8_pf_r128": dataclasses.replace(default, last=LastConfig(max_tokens=8, prefetch=True, maxnreg=128)),
        "two_pass": base,
        # the default's two passes in token chunks of at most N tokens (MhcConfig.chunk_tokens: each chunk's passes
        # back to back, pass 2 re-reading the chunk's residual out of L2; at H = 7168 a 256-token chunk's residual
        # is 14.7 MB, 512 29.4 MB, 1024 58.7 MB against the 50 MB L2)
        **{f"chunk{n}": dataclasses.replace(default, chunk_tokens=n) for n in (192, 256, 384, 512, 1024)},
        # pass 1's split count rounded down: at most 4 programs an SM (sm_90a's pre_large holds 4), so no short second
        # wave (T = 8192: 512 programs, not 640 over 528 slots; 4096: 512, not 576; 2048: 512, not 544): sm_90a's default
        # since session 57; round_up is the split count before it
        "whole_wave": dataclasses.replace(default, whole_wave=True),
        "round_up": dataclasses.replace(default, whole_wave=False),
        # ... with pre_large's pipeline 3 deep instead of 4 (32 KB of stages: 5 programs an SM by its 184 registers,
        # not 4 by shared memory; sm_90a CPU build, session 57) and a split target of 5 an SM (T = 8192: 640
        # programs over 660 slots): 10 warps an SM instead of 8, 80 KB of loads in flight instead of 96. Session 57
        # (H100): pre +8 to +12%, pass 1 alone +14 to +24% against whole_wave: pass 1 wants bytes in flight
        "whole_wave_s3c5": dataclasses.replace(
            default, whole_wave=True, ctas_per_sm=5, pre_large=dataclasses.replace(default.pre_large, num_stages=3)
        ),
        # pass 2 as the walk (_kernel_walk.py: 5 or 6 resident programs an SM dealt runs of (token, 1024-wide chunk)
        # units, so no short last wave; 1.55 waves of the row kernel's 5 an SM at T = 1024 on 132 SMs) at every T above
        # the mid tiles, without a norm weight (with one: the row pass 2)
        # (session 59 also timed the walk with an L2 prefetch of each program's first units, row_walk_pf1 / pf2 /
        # pdl_pf2: falsified and removed, in dc370d9)
        **{
            name: dataclasses.replace(
                default,
                row_walk=RowConfig(block_h=1024, block_s=16, num_warps=4, stages=st, walk=w, pdl=default.row_large.pdl),
                walk_max_tokens=1 << 20,
            )
            for name, st, w in (("row_walk", 6, 5), ("row_walk6", 5, 6))
        },
        # the walk to walk_max_tokens at every hidden size (session 60's default; sm_90a's walks at every T up to
        # H = 5120 since session 61)
        "walk_bounded": dataclasses.replace(default, walk_all_max_hidden=0),
        # pre's pass 1 splitting fp32 fn into hi + lo in every program each step (fn_split "kernel") at every T, not in
        # one launch before it: one launch fewer a call, the split's ALU in the loop. sm_90a's default does so below
        # 2049 tokens since session 59 (fn_split_min_tokens: pre -7.7% at T = 1024 H = 7168 on an H100)
        "fnk": dataclasses.replace(default, pre_large=dataclasses.replace(default.pre_large, fn_split="kernel")),
        # T = 1 (issue #5's < 8 µs): every two-pass kernel launched with programmatic dependent launch
        # (pass 2's programs launched while pass 1 runs, waiting on it in griddepcontrol.wait), the
        # wide pass 2's Sinkhorn on approximate reciprocals, both, and both with pass 1's small tiles
        # 64 wide (pre only, 112 splits at H = 7168: fewer partial rows for pass 2; post_pre's 16 x 64
        # spills, 255 registers + 80 bytes of stack) or 16 wide (448 splits: each program reads half)
        "pdl": with_pdl(default),
        # the large tiles only (pass 1's large tiles, the large row and walk pass 2; not the mid tiles, session 61) as
        # programmatic dependents: the candidate for sm_90a's LARGE_PDL_90 (docs/predictions/norm_mhc.md)
        "pdl_large": with_large_t_pdl(default),
        # the large tiles plain (sm_90a's default before session 61), and the mid tiles (T = 65-128) as dependents one
        # pass at a time: session 61 measured both together 4-40% slower, each alone 0 to -6.5%, and made row_mid one
        # (MID_ROW_PDL_90), so pdl_mid_p1 is now the losing pair and pdl_mid_p2 the default
        "plain_large": with_tile_fields(default, LARGE_T_PDL_TILES, pdl=False),
        "pdl_mid_p1": with_tile_fields(default, ("pre_mid",), pdl=True, pdl_at_exit=False),
        "pdl_mid_p2": with_tile_fields(default, ("row_mid",), pdl=True),
        # pre_mid a dependent that releases the next kernel as its programs exit (StreamConfig.pdl_at_exit), not at
        # entry: the pair without the early release; and the large tiles so (pass 1 is one wave there)
        "pdl_mid_exit": with_tile_fields(default, ("pre_mid",), pdl=True, pdl_at_exit=True),
        "large_exit": with_tile_fields(default, LARGE_T_PDL_TILES, pdl=True, pdl_at_exit=True),
        # session 62: pre_mid plain (the default before MID_PRE_EXIT_90), row_mid released at exit too (both mid tiles)
        # and alone (pre_mid plain)
        "pre_mid_plain": pre_mid_plain,
        "mid_exit2": with_tile_fields(default, MID_T_PDL_TILES, pdl=True, pdl_at_exit=True),
        "row_mid_exit": with_tile_fields(pre_mid_plain, ("row_mid",), pdl=True, pdl_at_exit=True),
        # T = 1 with pass 1 in 112 splits of 2 steps instead of 224 of one (ctas_per_sm=1: split_for
        # aims at 132 programs), so pass 2 sums half the partial rows; plain and launched as
        # programmatic dependents (no new kernel: the split is a runtime argument)
        "ctas1": dataclasses.replace(default, ctas_per_sm=1),
        "pdl_ctas1": dataclasses.replace(with_pdl(default), ctas_per_sm=1),
        # the wide pass 2's post and comb in one more program of their own (no y store before the
        # Sinkhorn chain), plain and with pdl_ctas1 (session 29: apart is the default's since)
        "apart": dataclasses.replace(default, wide=dataclasses.replace(default.wide, apart=True)),
        "pdl_ctas1_apart": dataclasses.replace(
            with_pdl(default), ctas_per_sm=1, wide=dataclasses.replace(with_pdl(default).wide, apart=True)
        ),
        # the default's parts one by one (session 29): session 28's default (post and comb after program
        # (t, 0)'s y, no programmatic dependents, one split target), apart alone, apart with every
        # T <= small_max_tokens kernel a programmatic dependent (one split target / one program an SM for
        # one token: 19:08's default; the default now takes that only at T = 1)
        "session28": dataclasses.replace(small_plain, wide=dataclasses.replace(small_plain.wide, apart=False)),
        "apart_plain": small_plain,
        "apart_pdl_ctas4": with_small_t_pdl(small_plain),
        "small_pdl_ctas1": dataclasses.replace(with_small_t_pdl(small_plain), small_launches=one_token),
        # session 29's default: one-token calls only as programmatic dependents, one program an SM
        "session29": dataclasses.replace(small_plain, small_launches=one_token),
        # session 30: the small-T programmatic dependents with one split target at every T (1 or 2 pass-1
        # programs an SM), for the T = 2..64 sweep against apart_plain / apart_pdl_ctas4
        "small_pdl_all_ctas1": dataclasses.replace(with_small_t_pdl(small_plain), ctas_per_sm=1),
        "small_pdl_all_ctas2": dataclasses.replace(with_small_t_pdl(small_plain), ctas_per_sm=2),
        "wide_fast": dataclasses.replace(default, wide=dataclasses.replace(default.wide, fast=True)),
        "pdl_fast": pdl_fast,
        "pdl_fast_h64": dataclasses.replace(
            pdl_fast,
            pre_small=StreamConfig(16, 64, 4, 2, pdl=True),
        ),
        "pdl_fast_h16": dataclasses.replace(
            pdl_fast,
            pre_small=StreamConfig(16, 16, 4, 2, pdl=True),
            post_pre_small=StreamConfig(16, 16, 4, 2, pdl=True),
        ),
        "fused_all": dataclasses.replace(fused, fused_min_tokens=1, post_pre_split=False),
        "fused_t1": dataclasses.replace(fused, fused_min_tokens=1),
        "fused_from64": dataclasses.replace(fused, fused_min_tokens=64),
        "fused_pp_all": dataclasses.replace(fused, post_pre_split=False),
        "fused_lazy": dataclasses.replace(fused, fused_pre=dataclasses.replace(FUSED_PRE, sq="lazy")),
        "fused_step": dataclasses.replace(fused, fused_pre=dataclasses.replace(FUSED_PRE, sq="step")),
        "fused_sps8": dataclasses.replace(fused, fused_pre=dataclasses.replace(FUSED_PRE, steps_per_split=8)),
        "fused_sps32": dataclasses.replace(fused, fused_pre=dataclasses.replace(FUSED_PRE, steps_per_split=32)),
        "fused_fh32": dataclasses.replace(fused, fused_pre=dataclasses.replace(FUSED_PRE, finish_h=32)),
        "fused_nopf": dataclasses.replace(fused, fused_pre=dataclasses.replace(FUSED_PRE, prefetch=False)),
        "fused_t64_w2": dataclasses.replace(
            fused, fused_pre=FusedConfig(64, 16, 16, 2, 4, sq="step", block_s=1, finish_h=16)
        ),
        "fused_pp_t16_w8": dataclasses.replace(
            fused, post_pre_split=False, fused_post_pre=FusedConfig(16, 32, 8, 8, 2, sq="step")
        ),
        "fused_pp_sps8": dataclasses.replace(
            fused, post_pre_split=False, fused_post_pre=dataclasses.replace(FUSED_POST_PRE, steps_per_split=8)
        ),
        # pre's fn split once per call by its own launch (hi + lo in bf16: no split ALU in the
        # pass-1 loop; "hi": hi only, one dot a step) in every pre pass 1 (small, large, fused)
        "fn_pre": _fn_split(fused, "pre"),
        "fn_hi": _fn_split(fused, "hi"),
        "two_pass_fn_pre": _fn_split(base, "pre"),
        "two_pass_fn_hi": _fn_split(base, "hi"),
        # square sums from the 16 x 16 diagonal blocks of a @ a^T (one batched mma.sync dot a step)
        # on pre's and bcast's pass-1 tiles: the pre_large loop goes from 430 (fn_pre) to ~190
        # instructions per warp-step (SASS, sm_90a)
        "diag": _fn_split(fused, "kernel", "diag"),
        "fn_pre_diag": _fn_split(fused, "pre", "diag"),
        "fn_hi_diag": _fn_split(fused, "hi", "diag"),
        "two_pass_diag": _fn_split(base, "kernel", "diag"),
        "two_pass_fn_pre_diag": _fn_split(base, "pre", "diag"),
        # the row pass 2 streaming its row in pipelined 2048-wide chunks (66 registers, 40 KB of
        # shared memory at 4 warps x 3 stages: 5 programs per SM instead of the one-shot tile's 2),
        # alone and under pass 1 with fn split once + diagonal-block squares (two passes everywhere)
        "row_stream": dataclasses.replace(fused, row_large=RowConfig(2048, 16, 4, stages=3)),
        "row_stream_s4": dataclasses.replace(fused, row_large=RowConfig(2048, 16, 4, stages=4)),
        "row_stream_w8": dataclasses.replace(fused, row_large=RowConfig(2048, 16, 8, stages=3)),
        "two_pass_row_stream": dataclasses.replace(base, row_large=RowConfig(2048, 16, 4, stages=3)),
        "two_pass_fn_pre_diag_stream": dataclasses.replace(
            _fn_split(base, "pre", "diag"), row_large=RowConfig(2048, 16, 4, stages=3)
        ),
        # the row pass 2's weights as scalars (one partial reduction, shuffle-free Sinkhorn: the
        # per-token chain that bounds pass 2 at T <= ~1024), one-shot rows / streamed rows
        # (1024-wide chunks, 3 stages, 4 warps: 126 registers; scalar with the one-shot tile spills)
        "row_scalar": dataclasses.replace(
            fused,
            row_small=RowConfig(1024, 256, 4, stages=3, scalar=True),
            row_large=RowConfig(1024, 16, 4, stages=3, scalar=True),
        ),
        "two_pass_row_scalar": dataclasses.replace(
            base,
            row_small=RowConfig(1024, 256, 4, stages=3, scalar=True),
            row_large=RowConfig(1024, 16, 4, stages=3, scalar=True),
        ),
        "two_pass_fn_pre_diag_scalar": dataclasses.replace(
            _fn_split(base, "pre", "diag"),
            row_small=RowConfig(1024, 256, 4, stages=3, scalar=True),
            row_large=RowConfig(1024, 16, 4, stages=3, scalar=True),
        ),
        # T <= 4 without a norm weight (the bench's case): the wide pass 2 (y over H / block_y
        # programs, scalar Sinkhorn), or the whole call in one launch ("tiny": pass 1 producers +
        # wide-finish consumers waiting on them); the heuristic's path everywhere else
        "wide": dataclasses.replace(fused, wide=WideConfig()),
        "wide_y128": dataclasses.replace(fused, wide=WideConfig(block_y=128)),
        "wide_y512_w8": dataclasses.replace(fused, wide=WideConfig(block_y=512, num_warps=8)),
        "tiny": dataclasses.replace(fused, tiny=WideConfig()),
        "tiny_y128": dataclasses.replace(fused, tiny=WideConfig(block_y=128)),
        "tiny_y512": dataclasses.replace(fused, tiny=WideConfig(block_y=512)),
        # pass 2 kind: the row kernel (the row read once) vs the apply kernel, and row tiles
        # the one-launch path at T <= 4 (16), the row pass 2 above
        "small": dataclasses.replace(row, small=SmallConfig()),
        "small_w4": dataclasses.replace(row, small=SmallConfig(num_warps=4)),
        "small_h64": dataclasses.replace(row, small=SmallConfig(block_h=64)),
        "small16": dataclasses.replace(row, small=SmallConfig(max_tokens=16)),
        "post_pre_fused": dataclasses.replace(row, post_pre_split=False),
        "pass2_apply": apply,
        "pass2_row": row,
        "row_w16": dataclasses.replace(row, row_small=RowConfig(8192, 256, 16), row_large=RowConfig(8192, 16, 16)),
        "row_w8": dataclasses.replace(row, row_small=RowConfig(8192, 256, 8), row_large=RowConfig(8192, 16, 8)),
        "post_pre_t32_h32": dataclasses.replace(row, post_pre_large=StreamConfig(32, 32, 4, 2)),
        "row_w4": dataclasses.replace(row, row_small=RowConfig(8192, 64, 4), row_large=RowConfig(8192, 16, 4)),
        "row_w4_chunk": dataclasses.replace(row, row_small=RowConfig(2048, 64, 4), row_large=RowConfig(2048, 16, 4)),
        "row_w4_chunk4k": dataclasses.replace(row, row_small=RowConfig(4096, 64, 4), row_large=RowConfig(4096, 16, 4)),
        "row_small_s64": dataclasses.replace(row, row_small=RowConfig(8192, 64, 8)),
        # pass 1 at small T: fewer, wider splits (fewer partial rows for pass 2 to sum)
        "row_pre_small_h128": dataclasses.replace(
            row,
            pre_small=StreamConfig(16, 128, 4, 2),
            post_pre_small=StreamConfig(16, 64, 4, 2),
        ),
        "row_pre_small_h64": dataclasses.replace(row, pre_small=StreamConfig(16, 64, 4, 2)),
        "row_pre_t32": dataclasses.replace(row, pre_large=StreamConfig(32, 32, 4, 3)),
        "apply_t2": dataclasses.replace(base, apply_large=ApplyConfig(tokens=2, block_h=512, stages=4)),
        "apply_nopipe": dataclasses.replace(base, apply_large=ApplyConfig(tokens=4, block_h=256, stages=1)),
        "apply_small_t4": dataclasses.replace(base, apply_small=ApplyConfig(tokens=4, block_h=256, stages=4)),
        "pre_t32": dataclasses.replace(base, pre_large=StreamConfig(32, 32, 4, 3)),
        "pre_t64_s3": dataclasses.replace(base, pre_large=StreamConfig(64, 16, 2, 3)),
        "pre_t128_w2": dataclasses.replace(base, pre_large=StreamConfig(128, 8, 2, 4)),
        "post_pre_t16": dataclasses.replace(base, post_pre_large=StreamConfig(16, 32, 4, 2)),
        "ctas2": dataclasses.replace(base, ctas_per_sm=2),
        "ctas8": dataclasses.replace(base, ctas_per_sm=8),
        "small_t32": dataclasses.replace(base, pre_small=StreamConfig(32, 32, 4, 2), small_max_tokens=16),
    }


NORM_WEIGHTS = {"none": None, "act": "w_act", "f32": "w_f32"}  # --norm-weight: synthetic_inputs' keys


def _calls(mhc, reference, plan, ins, outs, norm_weight=None):
    """(ours, peer function, peer args) per op; ours writes the preallocated `outs`; pre and
    post_pre (ours and the peer) get `norm_weight` (None: no norm weight)."""
    res, x, post, comb = ins["residual"], ins["x"], ins["post"], ins["comb"]
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    pre_out = dict(y_out=outs["y"], post_out=outs["post"], comb_out=outs["comb"])
    scal = SCAL | {"norm_weight": norm_weight}
    return {
        "pre": (
            lambda: mhc.run_pre(res, *mix, plan=plan, **pre_out, **scal),
            lambda *a: reference.mhc_pre(*a, **scal),
            (res, *mix),
        ),
        "post": (
            lambda: mhc.run_post(x, res, post, comb, plan=plan, out=outs["residual"]),
            reference.mhc_post,
            (x, res, post, comb),
        ),
        "post_pre": (
            lambda: mhc.run_post_pre(
                x, res, post, comb, *mix, plan=plan, residual_out=outs["residual"], **pre_out, **scal
            ),
            lambda *a: reference.mhc_post_pre(*a, **scal),
            (x, res, post, comb, *mix),
        ),
    }


def _as_tuple(v) -> tuple:
    return v if isinstance(v, tuple) else (v,)


def _agree(ours, peer) -> bool:
    """A sanity check before timing (not the accuracy test: tests/.../test_mhc_gpu.py is)."""
    return all(torch.allclose(a.float(), b.float(), rtol=0.05, atol=0.05) for a, b in zip(ours, _as_tuple(peer)))


def main(argv: list[str] | None = None) -> int:
    parser = standard_parser(__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[7168], help="hidden sizes")
    parser.add_argument(
        "--tokens",
        type=int,
        nargs="+",
        default=None,
        help="token counts; %(default)s means 1 8 64 1024 8192 (--quick: 1 1024)",
    )
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS), help="entry points to time")
    parser.add_argument("--sweep", action="store_true", help="also time the alternative tiles of sweep_configs()")
    parser.add_argument(
        "--variants",
        nargs="+",
        default=None,
        help="time these sweep_configs() names beside the default (implies --sweep)",
    )
    parser.add_argument(
        "--norm-weight", choices=list(NORM_WEIGHTS), default="none",
        help="pre / post_pre with the synthetic norm weight in the activation dtype (act) or fp32 (default: none)",
    )  # fmt: skip
    parser.add_argument(
        "--per-pass", action="store_true", help="also time pass 1 and pass 2 of pre and post_pre alone (plan launchers)"
    )
    add_calls_per_graph(parser)
    args = parser.parse_args(argv)
    check_calls_per_graph(parser, args)
    if args.per_pass and args.norm_weight != "none":
        parser.error(f"--per-pass times the passes without a norm weight, got --norm-weight {args.norm_weight}")
    graph_kw = {"calls_per_graph": args.calls_per_graph} if args.calls_per_graph > 1 else {}
    sweep = sweep_configs() if args.sweep or args.variants else {}
    unknown = sorted(set(args.variants or ()) - set(sweep))
    if unknown:
        parser.error(f"--variants: unknown {unknown} (known: {sorted(sweep)})")
    dev = require_cuda("bench_norm", args.device)
    torch.cuda.set_device(dev)

    import b12x
    from flashinfer.experimental.b12x.norm import mhc
    from flashinfer.experimental.b12x.norm.mhc import _execute, api, reference

    tokens = args.tokens or (QUICK_TOKENS if args.quick else TOKENS)
    for knob in ("recompile_limit", "cache_size_limit"):  # room for the peers' recompiles
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
    wkey = NORM_WEIGHTS[args.norm_weight]
    variants = {"b12x": None} | {k: v for k, v in sweep.items() if args.variants is None or k in args.variants}
    ceil = ceilings(dev)
    per_graph = f", {args.calls_per_graph} calls a graph" if graph_kw else ""
    table = Table(f"norm.mhc on {ceil.device_name} (timer: {args.timer}{per_graph})", ceil)
    checks, peers = [], {}
    for hidden in args.hidden:
        caps = mhc.Caps(device=dev, max_tokens=max(tokens), hidden_size=hidden)
        plans = {name: mhc.plan(caps, override=cfg) for name, cfg in variants.items()}
        with b12x.PreparationSession(dev) as session:
            session.prepare([p.request(name=name) for name, p in plans.items()])
        for t in tokens:
            gen = torch.Generator(device=dev).manual_seed(t)
            ins = api.synthetic_inputs(t, hidden, device=dev, generator=gen)
            outs = dict(
                residual=torch.empty(t, 4, hidden, dtype=torch.bfloat16, device=dev),
                y=torch.empty(t, hidden, dtype=torch.bfloat16, device=dev),
                post=torch.empty(t, 4, device=dev),
                comb=torch.empty(t, 4, 4, device=dev),
            )
            w = None if wkey is None else ins[wkey]
            for op in args.ops:
                shape = {"T": t, "H": hidden} | ({"w": args.norm_weight} if w is not None and op != "post" else {})
                case = Case(op, shape, bytes=case_bytes(op, t, hidden), ceiling="copy")
                result = None
                for name, p in plans.items():  # sweep variants are listed as peers: "vs X" > 1 means X is slower
                    ours, peer_fn, peer_args = _calls(mhc, reference, p, ins, outs, w)[op]
                    if name == "b12x":
                        result = tuple(r.clone() for r in _as_tuple(ours()))
                    table.add(
                        case,
                        name,
                        measure(ours, args, **graph_kw),
                        peer=name != "b12x",
                        note="" if name == "b12x" else "sweep",
                    )
                if args.per_pass and op in ("pre", "post_pre"):
                    for name, p in plans.items():  # every variant's passes (a sweep's too)
                        splits, passes = per_pass_calls(_execute, p, op, ins, outs)
                        sel = p.state.selection
                        reads = 1 if sel.pass2 == "row" else 2
                        split = op == "post_pre" and sel.splits_post_pre(t)  # as per_pass_calls runs it
                        for which, fn in passes.items():
                            pcase = Case(
                                f"{op}.{which}",
                                {"T": t, "H": hidden, "splits": splits},
                                bytes=pass_bytes(op, which, t, hidden, splits, reads=reads, split=split),
                                ceiling="copy",
                            )
                            note = "per-pass" if name == "b12x" else "per-pass sweep"
                            table.add(pcase, name, measure(fn, args, **graph_kw), peer=name != "b12x", note=note)
                if args.no_peers:
                    continue
                if op not in peers:  # automatic dynamic shapes: ~2 compiles per op, not one per T
                    peers[op] = torch.compile(peer_fn)
                try:
                    same = _agree(result, peers[op](*peer_args))
                    checks.append((f"{case.label}: agrees with the peer", same, 1.0 if same else 0.0))
                    peer_call = lambda op=op, a=peer_args: peers[op](*a)  # noqa: E731
                    table.add(case, "torch.compile(reference)", measure(peer_call, args, **graph_kw), peer=True)
                except Exception as exc:  # the peer failing must not hide our numbers
                    print(f"peer failed on {case.label}: {type(exc).__name__}: {str(exc)[:200]}")
    torch.cuda.synchronize(dev)
    table.print()
    checks += target_checks(table, args.calls_per_graph)
    for name, ok, value in checks:
        print(f"check {name}: {'ok' if ok else 'MISS'} ({value:.3g})")
    extra = {"checks": [{"name": n, "ok": ok, "value": v} for n, ok, v in checks], "scalars": SCAL}
    write_report(table, args, "b12x_bench_norm.json", MODULE, argv, dev, extra)
    return 0


def target_checks(table: Table, calls_per_graph: int = 1) -> list[tuple[str, bool, float]]:
    """(name, met, value) for the issue's targets, on our default rows (the T = 1 check names the
    timer's calls a graph when more than one)."""
    out = []
    for row in table.rows:
        if row.peer or "." in row.case.name:  # per-pass rows (--per-pass) carry no target
            continue
        t, d = row.case.shape["T"], table.row_dict(row)
        if t >= 1024 and d["pct_of_ceiling"] is not None:
            out.append((f"{row.case.label}: >= 75% of copy", d["pct_of_ceiling"] >= 75, d["pct_of_ceiling"]))
        ratio = d["ratios"].get("torch.compile(reference)")
        if t >= 1024 and ratio is not None:
            out.append((f"{row.case.label}: >= 2x torch.compile", ratio >= 2, ratio))
        if t == 1 and row.case.name == "post_pre":
            calls = f" ({calls_per_graph} calls a graph)" if calls_per_graph > 1 else ""
            out.append((f"{row.case.label}: under 8 us{calls}", row.time_us < 8, row.time_us))
    return out


if __name__ == "__main__":
    sys.exit(main())
