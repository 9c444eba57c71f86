"""Can norm.mhc's pre run in one pass? A skeleton of the cooperative kernel, timed against the copy ceiling.

    python3 scripts/probe_group_barrier.py [--hidden 7168] [--tokens 1024 8192] [--json out.json]

Issue #5 asks pre for >= 75% of the copy ceiling on its ideal bytes (the residual [T, 4, H] read once, y [T, H]
written once). Today's two passes read the residual twice (capped near 55%), and a program cannot hold a token
block's residual and fn's 2.75 MB at once, so a one-pass kernel needs programs that share token blocks: a GROUP
of persistent programs, program j holding columns [j H / GROUP, (j + 1) H / GROUP) of all four streams of BT
tokens, fn's matching slice resident, partial mixes exchanged through global memory behind a group barrier, then
y's slice written from the registers that still hold the tile. This probe is that kernel without the mixes' math:

- each program loads its [BT, 4, H / GROUP] tile of a token block (round r: block r * groups + group);
- sums it per token into a "partial" (stands in for the 24 mixes and the sum of squares) and stores PW copies
  of it into the block's exchange slots;
- BARRIER: a CTA barrier, one release atomic add on the block's counter, one thread polling it (acquire) until
  all GROUP programs arrived, a CTA barrier (the cooperative-groups grid-sync pattern, per group);
- reads the block's [GROUP, BT, PW] slots (L2 only), s = their sum per token, and writes
  y[t, cols] = sum_i x[t, i, cols] / (1 + |s_t|) from the tile it still holds;
- LOOKAHEAD: the next block's tile is loaded before this block's barrier (two tiles in registers).

BARRIER=0 is the same kernel with no exchange and no wait (every program reads back only its own slots): the
memory program alone, the ceiling of the design. LOAD=0 (with BARRIER) keeps only the exchange and barrier:
its time a round is the barrier's round trip. A poll loop gives up after MAX_SPINS polls and counts a timeout
(reported; any timeout makes the row invalid), so a grid that is not co-resident cannot hang the GPU.
Rows report µs, TB/s on the ideal bytes (T x 4H x 2 read + T x H x 2 written) and % of the copy ceiling measured
in the same process (the benchmarks' 2 GiB device copy, bytes read + written). Timing: the benchmarks'
`time_cuda_events` (L2 flushed before each launch, the reset outside the timed pair; session 35's runs used a
sleep kernel and no flush, so their T = 1024 rows, 58 MB of residual, may have hit L2). The CPU tests run the kernel under the
interpreter against `reference_y` (GROUP 1; GROUP 2 times out by design there: programs run one at a time).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: the probes' shared module
from _mhc_probe import bench_common, check, close, parser, rounds_for, write_json  # noqa: E402


class Row(NamedTuple):
    """One timed configuration (GROUP programs share a block of BT tokens; groups = programs // GROUP)."""

    group: int
    bt: int
    barrier: bool = True
    lookahead: bool = False
    pw: int = 1  # floats a token each program publishes and every program reads back (1: minimum; 8: pre's 5, padded)
    load: bool = True
    warps: int = 8

    @property
    def label(self) -> str:
        kind = ("barrier" if self.barrier else "no-barrier") if self.load else "barrier-only"
        return f"g{self.group} bt{self.bt} pw{self.pw} {kind}{' +lookahead' if self.lookahead else ''} w{self.warps}"


ROWS = (
    Row(64, 32, barrier=False),
    Row(64, 32, barrier=False, lookahead=True),
    Row(64, 32),
    Row(64, 32, lookahead=True),
    Row(64, 32, lookahead=True, pw=8),
    Row(64, 16, lookahead=True),
    Row(32, 32, barrier=False),
    Row(32, 32, barrier=False, lookahead=True),
    Row(32, 32, lookahead=True),
    Row(32, 16, lookahead=True),
    Row(64, 32, load=False),
    Row(32, 32, load=False),
)


@triton.jit
def _tile(x_ptr, t, inner, cmask, T, H: tl.constexpr, BT: tl.constexpr, COLS: tl.constexpr, LOAD: tl.constexpr):
    """The [BT, 4, COLS] tile of tokens t (zeros past T, or everywhere without LOAD)."""
    if LOAD:
        return tl.load(x_ptr + t[:, None, None] * (4 * H) + inner, mask=cmask & (t < T)[:, None, None], other=0.0)
    else:
        return tl.zeros([BT, 4, COLS], x_ptr.dtype.element_ty)


@triton.jit
def _skeleton(
    x_ptr, y_ptr, slots_ptr, counters_ptr, timeouts_ptr, ROUNDS, GROUPS, T,
    H: tl.constexpr, GROUP: tl.constexpr, BT: tl.constexpr, COLS: tl.constexpr, PW: tl.constexpr,
    BARRIER: tl.constexpr, LOOKAHEAD: tl.constexpr, LOAD: tl.constexpr, MAX_SPINS: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    g = pid // GROUP
    j = pid % GROUP
    run: tl.constexpr = H // GROUP
    tok = tl.arange(0, BT)
    col = tl.arange(0, COLS)
    stream = tl.arange(0, 4)
    inner = stream[None, :, None] * H + j * run + col[None, None, :]
    cmask = (col < run)[None, None, :]
    slot_cols = tl.arange(0, PW)
    members = tl.arange(0, GROUP)
    timeouts = 0
    t0 = (g * BT + tok).to(tl.int64)
    nxt = _tile(x_ptr, t0, inner, cmask, T, H, BT, COLS, LOAD)
    for r in range(ROUNDS):
        block = r * GROUPS + g
        t = (block * BT + tok).to(tl.int64)
        live = t < T
        if LOOKAHEAD:
            x = nxt
            nxt = _tile(x_ptr, ((block + GROUPS) * BT + tok).to(tl.int64), inner, cmask, T, H, BT, COLS, LOAD)
        else:
            x = _tile(x_ptr, t, inner, cmask, T, H, BT, COLS, LOAD)
        xf = x.to(tl.float32)
        ysum = tl.sum(xf, axis=1)  # [BT, COLS]
        part = tl.sum(ysum, axis=1)  # [BT]
        base = slots_ptr + block.to(tl.int64) * (GROUP * BT * PW)
        mine = base + j * (BT * PW) + tok[:, None] * PW + slot_cols[None, :]
        tl.store(mine, part[:, None] + tl.zeros([BT, PW], tl.float32))
        if BARRIER:
            tl.debug_barrier()  # every thread's slot stores before the one release below
            ctr = counters_ptr + block
            tl.atomic_add(ctr, 1, sem="release", scope="gpu")
            seen = tl.atomic_add(ctr, 0, sem="acquire", scope="gpu")
            spins = 0
            while (seen < GROUP) & (spins < MAX_SPINS):
                seen = tl.atomic_add(ctr, 0, sem="acquire", scope="gpu")
                spins += 1
            timeouts += (seen < GROUP).to(tl.int32)
            tl.debug_barrier()
            src = base + members[:, None, None] * (BT * PW) + tok[None, :, None] * PW + slot_cols[None, None, :]
        else:  # the same loads, of this program's own slots only: no cross-program dependence
            src = mine[None, :, :] + members[:, None, None] * 0
        got = tl.load(src, cache_modifier=".cg")  # [GROUP, BT, PW]
        s = tl.sum(tl.sum(got, axis=2), axis=0) / PW
        if not BARRIER:
            s = s / GROUP  # GROUP copies of its own partial
        y = ysum / (1.0 + tl.abs(s))[:, None]
        if LOAD:
            ymask = live[:, None] & (col < run)[None, :]
            tl.store(y_ptr + t[:, None] * H + j * run + col[None, :], y.to(y_ptr.dtype.element_ty), mask=ymask)
    tl.store(timeouts_ptr + pid, timeouts)


def compiled(row: Row, hidden: int, arch: str):
    """The skeleton of `row` at `hidden` compiled for `arch` through `_lib.triton_build` (the CPU tests' gate)."""
    from triton.compiler import ASTSource

    from flashinfer.experimental.b12x._lib.triton_build import aot_compile, aot_options

    consts = dict(H=hidden, GROUP=row.group, BT=row.bt, COLS=cols_for(hidden, row.group), PW=row.pw,
                  BARRIER=row.barrier, LOOKAHEAD=row.lookahead, LOAD=row.load, MAX_SPINS=1 << 22)  # fmt: skip
    names = ("x_ptr", "y_ptr", "slots_ptr", "counters_ptr", "timeouts_ptr", "ROUNDS", "GROUPS", "T")
    types = ("*bf16", "*bf16", "*fp32", "*i32", "*i32", "i32", "i32", "i32")
    signature = {**dict(zip(names, types)), **{n: "constexpr" for n in consts}}
    return aot_compile(ASTSource(_skeleton, signature, consts, {}), arch, aot_options(row.warps))


def cols_for(hidden: int, group: int) -> int:
    """The tile's column extent: H / GROUP rounded up to a power of two (Triton tiles are powers of two)."""
    if hidden % group:
        raise ValueError(f"hidden ({hidden}) must be a multiple of the group ({group})")
    return triton.next_power_of_2(hidden // group)


def prepare(x, row: Row, groups: int, *, max_spins: int = 1 << 22):
    """Buffers for the skeleton on x [T, 4, H] (bf16) with `groups` groups of row.group programs; returns
    (reset, go, y, timeouts): reset() zeroes the block counters (before every launch), go() launches."""
    import torch

    t, _, h = x.shape
    rounds = rounds_for(t, groups, row.bt)
    programs = groups * row.group
    y = torch.full((t, h), float("nan"), dtype=x.dtype, device=x.device)
    slots = torch.zeros(rounds * groups * row.group * row.bt * row.pw, dtype=torch.float32, device=x.device)
    counters = torch.zeros(rounds * groups, dtype=torch.int32, device=x.device)
    timeouts = torch.full((programs,), -1, dtype=torch.int32, device=x.device)
    consts = dict(H=h, GROUP=row.group, BT=row.bt, COLS=cols_for(h, row.group), PW=row.pw, BARRIER=row.barrier,
                  LOOKAHEAD=row.lookahead, LOAD=row.load, MAX_SPINS=max_spins, num_warps=row.warps)  # fmt: skip

    def go():
        _skeleton[(programs,)](x, y, slots, counters, timeouts, rounds, groups, t, **consts)

    return counters.zero_, go, y, timeouts


def reference_y(x):
    """What the skeleton writes: y[t] = sum_i x[t, i] / (1 + |sum of x[t]|), in fp32, cast to x's dtype."""
    xf = x.float()
    ysum = xf.sum(dim=1)
    return (ysum / (1.0 + ysum.sum(dim=1, keepdim=True).abs())).to(x.dtype)


def main(argv=None) -> int:
    p = parser(__doc__, "H (a multiple of every row's group)")
    args = p.parse_args(argv)
    for row in ROWS:
        if args.hidden % row.group:
            p.error(f"--hidden must be a multiple of {row.group} (row {row.label}), got {args.hidden}")
    check(p, args)
    import torch

    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    common = bench_common()
    ceiling = common.ceilings(dev, fp8=False).copy_tbps
    print(f"copy ceiling: {ceiling:.2f} TB/s (benchmarks' 2 GiB device copy)", flush=True)
    out = []
    for t in args.tokens:
        x = torch.randn(t, 4, args.hidden, device=dev).to(torch.bfloat16)
        ideal = t * 5 * args.hidden * 2
        want = reference_y(x)
        for row in ROWS:
            groups = sms // row.group
            reset, go, y, timeouts = prepare(x, row, groups)
            us = common.time_cuda_events(go, before=reset, warmup=2, iters=args.reps).median_us
            stuck = int(timeouts.sum().item())
            ok = bool(close(y, want)) if row.load and row.barrier else None
            rec = {"tokens": t, "hidden": args.hidden, **row._asdict(), "groups": groups, "us": us,
                   "rounds": rounds_for(t, groups, row.bt), "us_a_round": us / rounds_for(t, groups, row.bt),
                   "tb_s": ideal / (us * 1e-6) / 1e12, "pct_copy": 100 * ideal / (us * 1e-6) / 1e12 / ceiling,
                   "timeouts": stuck, "y_equal": ok}  # fmt: skip
            out.append(rec)
            print(f"T {t:5d} {row.label:38s} {us:9.1f} us  {rec['us_a_round']:6.2f} us a round  "
                  f"{rec['tb_s']:5.2f} TB/s  {rec['pct_copy']:5.1f}% copy  timeouts {stuck}  y ok {ok}",
                  flush=True)  # fmt: skip
        del x, want
    write_json(args.json, out, ceiling, torch.cuda.get_device_name(dev))
    return 0


if __name__ == "__main__":
    sys.exit(main())
