"""Benchmark the activation quantizers (b12x.quantization.nvfp4 / .mxfp8) against torch.compile.

    python -m benchmarks.experimental.b12x.bench_quantization [--quick] [--op nvfp4|mxfp8|all]
        [--dtype bfloat16|float16] [--all-configs] [--encode E ...] [--ms M ...] [--ks K ...]
        [--dispatch-tiles] [--match S ...] [--cute WxR[xN] ...] [--cute-mx WxR ...] [--pdl] [--sets N] [--rotate-outputs] [--timer events|graph] [--json PATH]

Shapes: M in {1, 16, 128, 4096, 16384} x K in {4096, 7168} (--quick: M in {1, 4096}, K = 4096).
Bytes (the minimum each op must move; the TB/s and % of the copy ceiling columns use them):
  nvfp4: read 2*M*K + 4 (x, global scale) + write M*K/2 (packed) + ceil128(M)*ceil4(K/16) (scales)
  mxfp8: read 2*M*K + write M*K (values) + 2*M*K/32 (row-major and swizzled scales)
Ours: a prepared plan at capacity M, `run` / `quantize_rows(plan=...)`. Peer: torch.compile (inductor)
of the oracle's math (`_lib/quant`; for NVFP4 the oracle's host-side check of the global scale is
left out so the compiled graph has no host sync and the scale stays on the device). Before timing,
each config checks ours against the oracle bit for bit (and the default notes the peer's distance): the
plan's own selection stops the run on a mismatch, a candidate row is reported (MISMATCH) and skipped.
--encode E [E ...] (NVFP4) adds a row only for the candidates of those encodes (e.g. steps); --match S
[S ...] only for those whose config repr contains one of the strings (e.g. "unroll=True"); --ms/--ks
pick shapes. --cute WxR[xN] ... (NVFP4) adds a row per CuTe DSL tile (`nvfp4/_kernel_cute.py`: W warps a
CTA, R rows a warp, N row tiles a CTA), bits checked like every row; --cute-mx WxR ... the same for MXFP8
(`mxfp8/_kernel_cute.py`). Every case also times a "copy (same bytes)" reference row: a plain device copy
(`common.kernel_copy_fn`: an SM kernel, not a memcpy, which a captured graph may run on a copy
engine at a lower rate; session 7's memcpy row read 60-64% of the ceiling at 43-300 MB) of half the
case's bytes each way, so it moves the same byte count, with the
same timer and (graph timer) the same number of rotated source sets; the "% copy" column is that
copy's time / the row's time (what fraction of a same-size copy a row reaches: at 42 MB the copy
itself stays well below the 2 GiB ceiling that "% ceil" uses). The NVFP4 "b12x" row is the plan's selection: from `_dispatch.LARGE_FROM_M` rows of
capacity the live-M dispatch (`_dispatch.default_selection`: the small tile below the threshold, the
preload tile, then the Triton large tile; the CuTe tile from `_dispatch.CUTE_FROM_M` rows when its switch is on); the
config rows run one tile at every M
(`--dispatch-tiles --ms 256 512 1024 2048` times each of the dispatch's tiles and the Triton large tile
alone: the crossovers). --pdl adds a "... pdl" twin of every row (the plan's selection and each
candidate row) launched as a programmatic dependent (`nvfp4.plan(..., pdl=True)`, `MxFp8Query(pdl=True)`), so under the graph timer each
call's launch overlaps the previous call's drain (its bits checked like every row). --sets N (graph timer)
rotates N input sets, one call each in the graph, instead of enough for 3x L2 (at least 2); --rotate-outputs
(graph timer) rotates as many output sets with them in every row (by default a row's outputs are fixed, as a
caller's are, and stay in L2 between calls where they fit; the copy reference always rotates its destinations,
since a fixed one read above the ceiling at 4096 rows: session 45). --all-configs adds a row per candidate kernel config, GPU-validated or not (it sets
B12X_QUANT_UNVALIDATED_CANDIDATES=1), and prints the fastest config per shape (data for the
heuristic in each `_kernel.py`; also under "best_config" in the JSON). Without --json the report goes
to $OUT/b12x_quantization.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

import b12x
from benchmarks.experimental.b12x.common import (
    COPY_IMPL,
    Case,
    Result,
    Table,
    ceilings,
    measure,
    require_cuda,
    rotate,
    same_size_copy,
    sets_to_exceed_l2,
    standard_parser,
    write_report,
)
from flashinfer.experimental.b12x._lib.arch import target_arch
from flashinfer.experimental.b12x._lib.quant import (
    block_amax,
    e2m1_encode,
    e4m3_decode,
    e4m3_encode,
    nvfp4_global_scale,
    pack_e2m1,
    quantize_nvfp4,
    swizzle_scales,
    swizzled_size,
)
from flashinfer.experimental.b12x._lib.quant.scales import fp32_const
from flashinfer.experimental.b12x.quantization import mxfp8, nvfp4
from flashinfer.experimental.b12x.quantization.mxfp8 import reference as mxfp8_reference
from flashinfer.experimental.b12x.quantization.mxfp8._kernel import candidate_configs as mxfp8_configs
from flashinfer.experimental.b12x.quantization.mxfp8._kernel_cute import CuteMxTile
from flashinfer.experimental.b12x.quantization.mxfp8._kernel_cute import why_not as cute_mx_why_not
from flashinfer.experimental.b12x.quantization.nvfp4._dispatch import _triton_large as nvfp4_triton_large
from flashinfer.experimental.b12x.quantization.nvfp4._dispatch import default_selection as nvfp4_default_selection
from flashinfer.experimental.b12x.quantization.nvfp4._kernel import ENCODES as NVFP4_ENCODES
from flashinfer.experimental.b12x.quantization.nvfp4._kernel import candidate_configs as nvfp4_configs
from flashinfer.experimental.b12x.quantization.nvfp4._kernel_cute import CuteTile
from flashinfer.experimental.b12x.quantization.nvfp4._kernel_cute import why_not as cute_why_not

MODULE = "benchmarks.experimental.b12x.bench_quantization"
MS, KS = (1, 16, 128, 4096, 16384), (4096, 7168)
QUICK_MS, QUICK_KS = (1, 4096), (4096,)
MAX_SETS = 64  # graph timer: input sets rotated per graph (tiny shapes stay L2-resident past this)


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def nvfp4_bytes(m: int, k: int) -> int:
    return 2 * m * k + 4 + m * k // 2 + _round_up(m, 128) * _round_up(k // 16, 4)


def mxfp8_bytes(m: int, k: int) -> int:
    return 2 * m * k + m * k + 2 * m * k // 32


# Same-size copy reference (common.COPY_IMPL / same_size_copy: rotated sources, as the quantizers read
# rotated inputs into fixed outputs) ----------------------------------------------------------------
class QuantTable(Table):
    """`Table` plus a "% copy" column: the same case's `COPY_IMPL` row time / this row's time."""

    def copy_time(self, row: Result) -> float | None:
        for r in self.rows:
            if r.impl == COPY_IMPL and r.case == row.case:
                return r.time_us
        return None

    def pct_of_copy(self, row: Result) -> float | None:
        ref = self.copy_time(row)
        return None if ref is None or row.time_us <= 0 else 100.0 * ref / row.time_us

    def ratios(self, row: Result) -> dict[str, float]:
        return {} if row.impl == COPY_IMPL else super().ratios(row)

    def row_dict(self, row: Result) -> dict:
        return super().row_dict(row) | {"pct_of_same_size_copy": self.pct_of_copy(row)}

    def _cells(self):
        head, body = super()._cells()
        at = head.index("% ceil") + 1
        head = head[:at] + ["% copy"] + head[at:]
        for cells, row in zip(body, self.rows):
            pct = self.pct_of_copy(row)
            cells.insert(at, "-" if pct is None else f"{pct:.1f}%")
        return head, body


def add_copy_row(table, case: Case, args, dev, n_sets: int) -> None:
    """Time the same-size copy of `case` (same timer, `n_sets` rotated sources, as many rotated destinations) as
    its reference row (its own generator: the cases' inputs stay those of runs without it). The destinations
    rotate whatever --rotate-outputs says: with one fixed destination the copy's writes stay in L2 where they fit
    (session 45, H100: 102.5% of the 2 GiB ceiling at NVFP4 4096 x 4096, 85.4% rotated), and it is no longer
    the streaming reference the column needs."""
    fn = same_size_copy(case.bytes, n_sets, dev, torch.Generator(device=dev).manual_seed(1))
    table.add(case, COPY_IMPL, _time(fn, args, n_sets), note="reference: plain device copy, same bytes")
    del fn
    torch.cuda.empty_cache()


# Peers ----------------------------------------------------------------------------------------------
def nvfp4_peer_math(x: torch.Tensor, gs: torch.Tensor):
    """`_lib.quant.quantize_nvfp4` + swizzle with `gs` a 0-d device tensor: the oracle's op sequence
    built from its own codecs, without the host-side scale check (which would break the graph)."""
    m, k = x.shape
    blocks = x.float().reshape(m, k // 16, 16)
    t = (gs * block_amax(blocks)) / fp32_const(x, 6.0)
    sf = e4m3_encode(torch.minimum(t, fp32_const(x, 448.0)))
    sf32 = e4m3_decode(sf).unsqueeze(-1)
    y = torch.where(sf32 == 0, torch.zeros_like(blocks), (blocks * gs) / sf32).clamp(-6.0, 6.0)
    return pack_e2m1(e2m1_encode(y).reshape(m, k)), swizzle_scales(sf, 0)


def mxfp8_peer_math(x: torch.Tensor):
    return mxfp8_reference.quantize_rows(x)


def _note_peer_bits(label: str, *pairs) -> None:
    """The peer is a speed reference: inductor may contract or reorder the oracle's fp32 steps, so its
    bits can differ from the oracle's. Say how much, without stopping the run (ours is checked)."""
    diff = sum(int((a.view(torch.uint8) != b.view(torch.uint8)).sum()) for a, b in pairs)
    if diff:
        print(f"note {label}: the torch.compile peer differs from the oracle in {diff} bytes", flush=True)


def _compiled(fn):
    for knob in ("recompile_limit", "cache_size_limit"):  # one compile per static shape
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 256)
    return torch.compile(fn, dynamic=False)


# Cases ----------------------------------------------------------------------------------------------
def _inputs(m: int, k: int, dtype, n_sets: int, dev, gen):
    xs = []
    for _ in range(n_sets):
        x = torch.randn(m, k, device=dev, generator=gen)
        x *= 10 ** (torch.rand(m, 1, device=dev, generator=gen) * 4 - 2)  # row magnitudes over 4 decades
        xs.append(x.to(dtype))
    return xs


def nvfp4_case(m: int, k: int, dtype) -> Case:
    return Case("nvfp4", {"M": m, "K": k, "dtype": dtype_str(dtype)}, bytes=nvfp4_bytes(m, k), ceiling="copy")


def mxfp8_case(m: int, k: int, dtype) -> Case:
    return Case("mxfp8", {"M": m, "K": k, "dtype": dtype_str(dtype)}, bytes=mxfp8_bytes(m, k), ceiling="copy")


def _bits_ok(ok: bool, op: str, m: int, k: int, config, plan) -> bool:
    """A row's bit check against the oracle: the plan's own selection (config None) stops the run on a
    mismatch; a candidate of a sweep is reported (MISMATCH, and in the report's mismatches) and skipped."""
    if ok:
        return True
    if config is None:
        raise SystemExit(f"{op} M={m} K={k} {plan.selection}: ours and the oracle disagree; not timing")
    print(f"MISMATCH {op} M={m} K={k} {config}: ours and the oracle disagree; not timed", flush=True)
    MISMATCHES.append(f"{op} M={m} K={k} {config}")
    return False


def nvfp4_bench_configs(k: int, args) -> list:
    """The NVFP4 rows of a case: None (the plan's own selection: from LARGE_FROM_M rows of capacity the
    live-M dispatch of two tiles), then candidate configs alone: all (--all-configs), those of some
    encodes (--encode), those whose repr contains one of --match's strings (with --encode: both), and
    the dispatch's tiles (--dispatch-tiles: every tile of a full-capacity plan's dispatch, and the Triton large tile)."""
    configs = [None] + (list(nvfp4_configs(k, unvalidated=True)) if args.all_configs else [])
    if args.encode or args.match:
        configs = [None] + [
            c
            for c in nvfp4_configs(k, unvalidated=True)
            if (not args.encode or c.encode in args.encode)
            and (not args.match or any(s in repr(c) for s in args.match))
        ]
    if args.dispatch_tiles:  # the live-M dispatch's tiles (and the Triton large tile), each alone at every M
        tiles = nvfp4_default_selection(1 << 30, k).configs() + (nvfp4_triton_large(k),)
        configs += [c for c in dict.fromkeys(tiles) if c not in configs]
    return configs + list(args.cute or ())


def bench_nvfp4(table, args, dev, m, k, dtype, gen, peer_fn, sets_for):
    case = nvfp4_case(m, k, dtype)
    add_copy_row(table, case, args, dev, sets_for(case.bytes))
    xs = _inputs(m, k, dtype, sets_for(nvfp4_bytes(m, k)), dev, gen)
    gs = nvfp4_global_scale(xs[0]).reshape(1)
    configs = nvfp4_bench_configs(k, args)
    session = b12x.PreparationSession(dev)
    ref_packed, ref_scales = quantize_nvfp4(xs[0], gs)
    ref_scales = swizzle_scales(ref_scales, 0).view(torch.uint8)
    for config, pdl in _with_pdl_rows(configs, args):
        plan = nvfp4.plan(m, k, invocation=dtype, override=config, pdl=pdl)
        session.prepare([plan])
        out = nvfp4.allocate_outputs(plan, device=dev)
        # Bits first, for every config: ours == oracle (and, once, how far the peer is).
        out.packed.fill_(0xFF)
        out.scales.view(torch.uint8).fill_(0xFF)
        nvfp4.run(plan=plan, x=xs[0], global_scale=gs, outputs=out)
        ok = torch.equal(out.packed, ref_packed) and torch.equal(out.scales.view(torch.uint8), ref_scales)
        if not _bits_ok(ok, "nvfp4", m, k, config, plan):
            session.release(plan)
            continue
        if config is None:
            peer_packed, peer_scales = peer_fn(xs[0], gs[0])
            _note_peer_bits(f"nvfp4 M={m} K={k}", (peer_packed, out.packed), (peer_scales, out.scales))
        outs = _output_sets(out, len(xs), args, lambda: nvfp4.allocate_outputs(plan, device=dev))  # noqa: B023
        nxt, nxo = rotate(xs), rotate(outs)
        run = lambda: nvfp4.run(plan=plan, x=nxt(), global_scale=gs, outputs=nxo())  # noqa: B023
        impl = _impl(config, pdl)
        timing = _time(run, args, len(xs))
        table.add(case, impl, timing, note="" if config else str(plan.selection))
        _note_best(("nvfp4", m, k), timing, plan.selection)
        session.release(plan)
    if not args.no_peers:
        nxt = rotate(xs)
        table.add(case, "torch.compile", _time(lambda: peer_fn(nxt(), gs[0]), args, len(xs)), peer=True)


def mxfp8_bench_configs(k: int, args, arch: str | None = None) -> list:
    """The MXFP8 rows of a case: None (the plan's own selection on `arch`), then every other candidate
    (--all-configs, unvalidated ones included) or those whose repr contains one of --match's strings."""
    candidates = list(mxfp8_configs(k, unvalidated=True, arch=arch))[1:]  # [0]: the arch's default, the None row
    cute = list(args.cute_mx or ())
    if args.match:
        return [None] + [c for c in candidates if any(t in repr(c) for t in args.match)] + cute
    return [None] + (candidates if args.all_configs else []) + cute


def bench_mxfp8(table, args, dev, m, k, dtype, gen, peer_fn, sets_for):
    case = mxfp8_case(m, k, dtype)
    add_copy_row(table, case, args, dev, sets_for(case.bytes))
    xs = _inputs(m, k, dtype, sets_for(mxfp8_bytes(m, k)), dev, gen)
    values = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=dev)
    rows = torch.empty(m, k // 32, dtype=torch.uint8, device=dev)
    mma = torch.full((swizzled_size(m, k // 32),), 127, dtype=torch.uint8, device=dev)
    configs = mxfp8_bench_configs(k, args, target_arch(dev))
    session = b12x.PreparationSession(dev)
    ref_values, ref_rows, ref_mma = mxfp8_reference.quantize_rows(xs[0])  # the oracle, eager
    for config, pdl in _with_pdl_rows(configs, args):
        plan = mxfp8.plan(mxfp8.MxFp8Query(k, dtype, m, pdl=pdl), override=config)
        session.prepare([plan])
        # Bits first, for every config: ours == oracle (and, once, how far the peer is).
        values.view(torch.uint8).fill_(0xFF)
        rows.fill_(0xFF)
        mxfp8.quantize_rows(xs[0], values, rows, mma, plan=plan)
        ok = torch.equal(values.view(torch.uint8), ref_values.view(torch.uint8)) and torch.equal(rows, ref_rows)
        ok &= torch.equal(mma[: ref_mma.numel()], ref_mma.view(torch.uint8).reshape(-1))
        if not _bits_ok(ok, "mxfp8", m, k, config, plan):
            session.release(plan)
            continue
        if config is None:
            peer_values, peer_rows, peer_mma = peer_fn(xs[0])
            _note_peer_bits(f"mxfp8 M={m} K={k}", (peer_values, values), (peer_rows, rows), (peer_mma, mma))
        nxt = rotate(xs)
        nxo = rotate(
            _output_sets((values, rows, mma), len(xs), args, lambda: tuple(map(torch.empty_like, (values, rows, mma))))
        )
        run = lambda: mxfp8.quantize_rows(nxt(), *nxo(), plan=plan)  # noqa: B023
        impl = _impl(config, pdl)
        timing = _time(run, args, len(xs))
        table.add(case, impl, timing, note="" if config else str(plan.selection))
        _note_best(("mxfp8", m, k), timing, plan.selection)
        session.release(plan)
    if not args.no_peers:
        nxt = rotate(xs)
        table.add(case, "torch.compile", _time(lambda: peer_fn(nxt()), args, len(xs)), peer=True)


def _output_sets(first, n_sets: int, args, allocate) -> list:
    """The outputs a timed row writes: `first` alone (fixed outputs, as a caller's), or with --rotate-outputs
    `first` and n_sets - 1 more from `allocate`, rotated with the input sets so no output stays in L2."""
    return [first] + ([allocate() for _ in range(n_sets - 1)] if args.rotate_outputs else [])


def _with_pdl_rows(configs: list, args) -> list:
    """(config, pdl) per row: each config plain, and with --pdl each once more as a programmatic dependent
    (the plan's selection, None, and every candidate row)."""
    rows = [(c, False) for c in configs]
    return rows + ([(c, True) for c in configs] if args.pdl else [])


def _impl(config, pdl: bool) -> str:
    return ("b12x" if config is None else f"b12x {config}") + (" pdl" if pdl else "")


BEST: dict = {}  # (op, M, K) -> (median µs, config): the fastest config seen, for the heuristics
MISMATCHES: list = []  # candidate configs whose bits differed from the oracle (not timed)


def _note_best(key, timing, config) -> None:
    if key not in BEST or timing.median_us < BEST[key][0]:
        BEST[key] = (timing.median_us, config)


def _time(fn, args, n_sets: int):
    if args.timer == "graph":
        return measure(fn, args, calls_per_graph=n_sets)
    return measure(fn, args)


def _tile_type(make, why_not, k: int, expected: str):
    """An argparse type: 'WxR' (and 'WxRxN' where `make` takes a third number) -> make(W, R[, N]), which `why_not`
    must accept at k."""

    def parse(text: str):
        try:
            tile = make(*(int(v) for v in text.lower().split("x")))
        except (ValueError, TypeError):  # not numbers, or not as many as make takes
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        reason = why_not(k, tile)
        if reason is not None:
            raise argparse.ArgumentTypeError(reason)
        return tile

    return parse


# '8x4' / '8x2x4' -> a CuteTile (8 warps, 4 / 2 rows a warp, 1 / 4 row tiles a CTA); '8x2' -> a CuteMxTile
_cute_shape = _tile_type(
    lambda w, r, n=1: CuteTile(w, r, repeat=n), cute_why_not, 16, "WARPSxROWS[xREPEAT] such as 8x4 or 8x2x4"
)
_cute_mx_shape = _tile_type(lambda w, r: CuteMxTile(w, r), cute_mx_why_not, 32, "WARPSxROWS such as 8x2")


def dtype_str(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def main(argv: list[str] | None = None) -> int:
    parser = standard_parser(__doc__.splitlines()[0])
    parser.add_argument("--op", choices=("nvfp4", "mxfp8", "all"), default="all", help="which quantizer")
    parser.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16", help="activation dtype")
    parser.add_argument("--all-configs", action="store_true", help="also time every candidate kernel config")
    parser.add_argument(
        "--encode",
        nargs="+",
        choices=NVFP4_ENCODES,
        default=None,
        help="NVFP4: time only the candidate configs of these encodes",
    )
    parser.add_argument(
        "--dispatch-tiles",
        action="store_true",
        help="NVFP4: also time each tile of the live-M dispatch alone (and the Triton large tile)",
    )
    parser.add_argument(
        "--match",
        nargs="+",
        default=None,
        help="time only the candidate configs whose repr contains one of these strings (e.g. unroll=True, layout='flat')",
    )
    parser.add_argument(
        "--cute",
        nargs="+",
        type=_cute_shape,
        default=None,
        metavar="WxR[xN]",
        help="NVFP4: also time the CuTe DSL quantizer with these tiles: W warps, R rows a warp, N row tiles a CTA "
        "(e.g. 8x4 4x8 8x2x4)",
    )
    parser.add_argument(
        "--cute-mx",
        nargs="+",
        type=_cute_mx_shape,
        default=None,
        metavar="WxR",
        help="MXFP8: also time the CuTe DSL quantizer with these tiles: W warps, R rows a warp (e.g. 8x2 4x4)",
    )
    parser.add_argument(
        "--pdl",
        action="store_true",
        help="also time every row (plan and candidates) launched as a programmatic dependent",
    )
    parser.add_argument(
        "--sets", type=int, default=None, help="graph timer: rotate this many input sets (default: 3x L2, >= 2)"
    )
    parser.add_argument(
        "--rotate-outputs",
        action="store_true",
        help="graph timer: rotate the outputs with the input sets in every row (default: fixed outputs, which stay "
        "in L2 between calls where they fit; the copy reference rotates its destinations either way)",
    )
    parser.add_argument("--ms", type=int, nargs="+", default=None, help="only these M (default: the standard set)")
    parser.add_argument("--ks", type=int, nargs="+", default=None, help="only these K (default: the standard set)")
    args = parser.parse_args(argv)
    if args.sets is not None and (args.sets < 1 or args.timer != "graph"):
        parser.error(f"--sets needs --timer graph and N >= 1, got --sets {args.sets} --timer {args.timer}")
    if args.rotate_outputs and args.timer != "graph":
        parser.error(f"--rotate-outputs needs --timer graph (the events timer flushes L2), got --timer {args.timer}")
    if args.all_configs or args.encode or args.match:  # every candidate, GPU-validated or not: bits checked below
        os.environ["B12X_QUANT_UNVALIDATED_CANDIDATES"] = "1"
    dev = require_cuda("bench_quantization", args.device)
    torch.cuda.set_device(dev)
    dtype = getattr(torch, args.dtype)
    ms, ks = (QUICK_MS, QUICK_KS) if args.quick else (MS, KS)
    ms, ks = args.ms or ms, args.ks or ks
    ops = ("nvfp4", "mxfp8") if args.op == "all" else (args.op,)
    table = QuantTable(
        f"b12x quantization ({args.dtype}) on {torch.cuda.get_device_name(dev)}", ceilings(dev, fp8=False)
    )
    gen = torch.Generator(device=dev).manual_seed(0)
    # The events timer flushes L2 before every call: one input set is enough. Graph replays rotate
    # sets totalling 3x L2 (capped at MAX_SETS for tiny shapes).
    sets_for = (lambda nbytes: min(MAX_SETS, sets_to_exceed_l2(nbytes))) if args.timer == "graph" else (lambda _: 1)
    if args.sets is not None:
        sets_for = lambda _: args.sets  # noqa: E731
    peers = {"nvfp4": _compiled(nvfp4_peer_math), "mxfp8": _compiled(mxfp8_peer_math)}
    benches = {"nvfp4": bench_nvfp4, "mxfp8": bench_mxfp8}
    for op in ops:
        for k in ks:
            for m in ms:
                benches[op](table, args, dev, m, k, dtype, gen, peers[op], sets_for)
                torch.cuda.empty_cache()
    torch.cuda.synchronize(dev)
    table.print()
    if args.all_configs:  # what each _kernel.py heuristic should pick, per shape
        for (op, m, k), (us, cfg) in sorted(BEST.items()):
            print(f"best {op} M={m} K={k}: {us:.2f} us {cfg}")
    best = {f"{op} M={m} K={k}": [us, str(cfg)] for (op, m, k), (us, cfg) in sorted(BEST.items())}
    for line in MISMATCHES:
        print(f"MISMATCH (not timed): {line}")
    extra = {"bitwise_checked": True, "dtype": args.dtype, "best_config": best, "mismatches": list(MISMATCHES)}
    write_report(table, args, "b12x_quantization.json", MODULE, argv, dev, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
