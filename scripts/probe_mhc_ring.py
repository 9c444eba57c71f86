"""The cooperative one-pass pre's memory program through a shared-memory ring (CuTe DSL), timed against copy.

    python3 scripts/probe_mhc_ring.py [--hidden 7168] [--tokens 1024 8192] [--json out.json]

Session 35's Triton skeleton (`probe_group_barrier.py`) held one token block's tile in registers per program and
reached 70% of the copy ceiling without any barrier, 58% with the group barrier: an SM had at most one tile of
loads in flight. This is the same memory program with the tile in a ring of STAGES shared-memory buffers filled
by 16-byte cp.async, STAGES - 1 blocks ahead of the math, so an SM keeps (STAGES - 1) tiles of loads in flight
while it sums a block and, in a barrier row, while its signal lane waits at the block's group counter:

- GROUP programs share a block of BT tokens; program j holds columns [j H / GROUP, (j + 1) H / GROUP) of the four
  streams (4 x BT rows of H / GROUP bf16 in one stage); round r is block r * groups + group;
- y[t, cols] = sum_i x[t, i, cols] (fp32 sum, one bf16 rounding) from the stage, 8 columns a thread a step;
- barrier rows: after the block has landed, a CTA barrier and the signal lane's `red.release.gpu` on the block's
  counter (arrive); `lag` rounds later that lane polls the counter with `ld.acquire.gpu` until all GROUP programs
  arrived, a CTA barrier, and the block's y is stored. The stages hold a block from its load to its y: lag + 1
  blocks waiting or summed, stages - 1 - lag loading ahead. poll "atom": both as atomic adds (RMWs); "early": the
  counter is read relaxed a round before it is needed, and a complete value is followed by an acquire fence only;
- sync_warp: the last warp issues no copies and no y stores and its first lane is the signal lane (the release's
  MEMBAR.ALL.GPU then waits for nothing of its own; otherwise thread 0, whose copies are in flight);
- exchange: before arriving, each (token, 8-column chunk) of the block reduces its sum into slot `chunk` of the
  token's SLOTS floats in the block's accumulator (and 0 into slot chunk + cpr), SLOTS reductions a token a program
  like pre's 24 mixes and sum of squares; y reads READ_SLOTS of them back and scales by 1 / (1 + |their sum|);
- mixes: pre's own math instead of the stand-in: fn's hi / lo bf16 slice (24 x 4 streams x H / group) resident in
  shared memory, warp w < bt / 16 multiplies its 16 tokens of the block by it (`mix_warp`: ldmatrix + m16n8k16 bf16
  mma, swizzled rows, the sums of squares from the A fragments) and reduces the 24 partial mixes and the sum of
  squares a token into the block's slots; y = sum_i pre_i x_i with pre_i = sigmoid(mix_i rsqrt(ssq / 4H + eps) s0 +
  b_i) + hc_eps from the reduced slots: norm.mhc pre's y (FORMATS.md), checked against `reference_pre_y`.
- split_roles (mixes rows): the warps that run `mix_warp` do so for the block that landed while the other worker
  warps and the signal warp (a named barrier) wait for and store y of the block `lag` rounds older; the arrival
  follows the round's closing CTA barrier.
- hoist (mixes rows, session 36): after the wait, y thread t < bt computes token t's 4 pre weights once into shared
  memory and a barrier publishes them (session 35's mixes rows recomputed them, 5 L2 reads and 4 exponentials,
  for each of a token's 8-column chunks); vec: the partials as `red.global.add.v4.f32` (16-byte slots, quad pairs
  trade halves: `quad_v4`), 3 vector + 1 scalar reductions a lane instead of 12 + 1.

Post and comb (Sinkhorn) are not computed; everything else of pre's y is in the mixes rows.
Rows report µs, TB/s on pre's ideal bytes (T x 4H x 2 read + T x H x 2 written) and % of the benchmarks' 2 GiB
device copy measured in the same process, timed by the benchmarks' `time_cuda_events` (L2 flushed before each
launch, the counters' reset outside the timed pair; session 35's runs used a sleep kernel and no flush, so their
T = 1024 rows, 58 MB of residual, may have hit L2). Every row's y is checked against `reference_y` (a wrong y
marks the row; a mixes row's miss within TERMS_TOL of its terms passes) and a barrier row's give-ups are counted
(any makes the row invalid). A mixes row also reports its reduced slots against `reference_slots` (the largest
error relative to the largest value) and, where y is off, how many values and by how much (session 35's mixes rows
"failed" at T = 8192: s36_b showed one cancelling value in ~70 tokens, within 2e-6 of its terms).
"""

import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: the probes' shared module
from _mhc_probe import bench_common, check, close, parser, rounds_for, write_json  # noqa: E402

THREADS = 256
SLOTS = 25  # floats a token each program reduces into its block's accumulator (pre: 24 mixes + sum of squares)
READ_SLOTS = 5  # of them read back for y (pre: its 4 weights' mixes + the sum of squares)
SLOT_STRIDE = 28  # floats from one token's slots to the next's: 112 bytes, so a v4 reduction's 4 slots are aligned
TERMS_TOL = 2**-16  # a mixes row's y miss over sum_i |pre_i x_i| still counted right (fp32 sums and weights)
MAX_SPINS = 1 << 22  # polls of one block's counter before a program gives up (counted)
SMEM_BUDGET = 227 * 1024  # an sm_90a block's opt-in shared memory (SM120: 99 KB; `why_not` takes the budget)


class Row(NamedTuple):
    group: int
    bt: int
    stages: int
    barrier: bool = False
    lag: int = 0  # rounds between a block's arrival and its wait (the stages then hold lag + 1 blocks)
    poll: str = "ld"  # "ld": red.release arrivals, ld.acquire polls; "atom": atom.add for both (RMWs); "early":
    # "ld", but the counter is read (relaxed) a round before it is needed (lag >= 1)
    sync_warp: bool = False  # arrivals and polls by a warp that issues no copies or stores (see RingSkeleton)
    exchange: bool = False  # SLOTS reductions a token a program before the arrival, READ_SLOTS read back for y
    mixes: bool = False  # pre's real math: mma partials over fn's resident slice reduced as the exchange, y = pre's
    split_roles: bool = False  # mixes of block r by their warps while the others wait for and store y of r - lag
    hoist: bool = False  # mixes: each token's 4 pre weights once into shared memory (not once per 8-column chunk)
    vec: bool = False  # mixes: the partials as 16-byte reductions (quad pairs trade halves: `quad_v4`)

    @property
    def label(self) -> str:
        kind = (f" barrier lag{self.lag}" if self.lag else " barrier") if self.barrier else ""
        kind += f" {self.poll}" if self.barrier else ""
        kind += " syncwarp" if self.sync_warp else ""
        kind += " exchange" if self.exchange else ""
        kind += " mixes" if self.mixes else ""
        kind += " split" if self.split_roles else ""
        kind += " hoist" if self.hoist else ""
        kind += " vec" if self.vec else ""
        return f"g{self.group} bt{self.bt} s{self.stages}{kind}"

    def stage_bytes(self, hidden: int) -> int:
        return self.bt * 4 * (hidden // self.group) * 2


ROWS = (
    Row(64, 32, 2),
    Row(64, 32, 3),
    Row(64, 32, 4),
    Row(64, 32, 6),
    Row(32, 32, 2),
    Row(32, 32, 3),
    Row(64, 16, 8),
    Row(64, 32, 4, barrier=True, poll="atom"),  # session 35's third run's RMW polls, beside the loads
    Row(64, 32, 5, barrier=True, lag=2, poll="atom"),
    Row(64, 32, 4, barrier=True),
    Row(64, 32, 3, barrier=True, lag=1),
    Row(64, 32, 5, barrier=True, lag=2),
    Row(64, 32, 7, barrier=True, lag=4),
    Row(32, 32, 3, barrier=True),
    Row(32, 32, 3, barrier=True, lag=1),
    Row(64, 16, 8, barrier=True, lag=4),
    Row(64, 32, 4, barrier=True, sync_warp=True),
    Row(64, 32, 3, barrier=True, lag=1, sync_warp=True),
    Row(64, 32, 5, barrier=True, lag=2, sync_warp=True),
    Row(32, 32, 3, barrier=True, lag=1, sync_warp=True),
    Row(64, 32, 2, sync_warp=True),
    Row(64, 32, 5, barrier=True, lag=2, poll="early", sync_warp=True),
    Row(64, 32, 6, barrier=True, lag=3, poll="early", sync_warp=True),
    Row(32, 32, 3, barrier=True, lag=1, poll="early", sync_warp=True),
    Row(64, 16, 8, barrier=True, lag=4, poll="early", sync_warp=True),
    Row(64, 64, 2),  # g32 bt32's 57 KB stages with g64's 43 KB slice of fn: s3 + fn fit 227 KB
    Row(64, 64, 3, barrier=True, lag=1, poll="early", sync_warp=True),
    Row(64, 64, 3, barrier=True, lag=1, sync_warp=True),
    Row(64, 64, 3, barrier=True, lag=1, poll="early", sync_warp=True, exchange=True),
    Row(64, 32, 5, barrier=True, lag=2, poll="early", sync_warp=True, exchange=True),
    Row(64, 64, 3, barrier=True, lag=1, poll="early", sync_warp=True, mixes=True),
    Row(64, 32, 4, barrier=True, lag=1, poll="early", sync_warp=True, mixes=True),
    Row(64, 64, 3, barrier=True, lag=1, poll="early", sync_warp=True, mixes=True, split_roles=True),
    Row(64, 32, 4, barrier=True, lag=1, poll="early", sync_warp=True, mixes=True, split_roles=True),
    # session 36: the mixes rows' y weights once a token, their partials as 16-byte reductions
    Row(64, 64, 3, barrier=True, lag=1, poll="early", sync_warp=True, mixes=True, hoist=True),
    Row(64, 64, 3, barrier=True, lag=1, poll="early", sync_warp=True, mixes=True, hoist=True, vec=True),
    Row(64, 64, 3, barrier=True, lag=1, poll="early", sync_warp=True, mixes=True, split_roles=True, hoist=True),
    Row(
        64, 64, 3, barrier=True, lag=1, poll="early", sync_warp=True, mixes=True, split_roles=True, hoist=True, vec=True
    ),
    Row(
        64, 32, 4, barrier=True, lag=1, poll="early", sync_warp=True, mixes=True, split_roles=True, hoist=True, vec=True
    ),
)


def why_not(row: Row, hidden: int, smem_budget: int = SMEM_BUDGET) -> str | None:
    """Why `row` cannot run at `hidden` (None when it can)."""
    if hidden % (row.group * 8):
        return f"hidden ({hidden}) must be a multiple of 8 x group ({8 * row.group}): 16-byte rows"
    if row.stages < 2 + row.lag:
        return f"stages must be >= 2 + lag ({2 + row.lag}), got {row.stages}"
    if row.exchange and not row.barrier:
        return "exchange needs a barrier row"
    if row.exchange and not READ_SLOTS <= hidden // row.group // 8 <= SLOTS:
        return f"exchange needs {READ_SLOTS} .. {SLOTS} chunks a row, got {hidden // row.group // 8}"
    if row.mixes and (row.exchange or not row.sync_warp or row.bt % 16 or row.bt // 16 > 7):
        return "mixes needs sync_warp, no emulated exchange and bt a multiple of 16 up to 112 (an m16 tile a warp)"
    if row.mixes and (hidden // row.group) % 16:
        return f"mixes needs H / group a multiple of 16 (k16 steps), got {hidden // row.group}"
    if (
        row.mixes
        and row.stages * row.stage_bytes(hidden) + fn_slice_bytes(hidden, row.group) + 16 * row.bt > smem_budget
    ):
        fn_bytes = fn_slice_bytes(hidden, row.group)
        return f"{row.stages} stages + fn's {fn_bytes}-byte slice exceed {smem_budget} bytes (with {16 * row.bt} of weights)"
    if row.split_roles and not (row.mixes and row.poll == "early" and row.bt // 16 <= 4):
        return "split_roles needs a mixes row with poll 'early' and at most 4 mma warps (bt <= 64)"
    if (row.hoist or row.vec) and not row.mixes:
        return "hoist and vec need a mixes row"
    if row.poll == "early" and not (row.barrier and row.lag >= 1):
        return "poll 'early' needs a barrier row with lag >= 1"
    if row.stages * row.stage_bytes(hidden) > smem_budget:
        return f"{row.stages} stages of {row.stage_bytes(hidden)} bytes exceed {smem_budget} bytes of shared memory"
    return None


def fn_slice_bytes(hidden: int, group: int) -> int:
    """fn's hi / lo bf16 slice a program keeps in shared memory (24 mixes x 4 streams x H / group columns, twice)."""
    return 2 * 24 * 4 * (hidden // group) * 2


def stage_chunk(t, kc, per_row: int):
    """16-byte chunk index of token t's K-chunk kc in a mixes stage (a token row holds per_row = 4 x cpr chunks, its
    chunk index XOR t mod 8 so ldmatrix's 8 rows of one column hit 8 bank groups). DSL values or numpy arrays."""
    return t * per_row + (kc ^ (t % 8))


def fn_chunk(row, kc, per_row: int):
    """16-byte chunk index of fn slice row `row` (hl x 24 + mix) chunk kc, swizzled by the mix index mod 8."""
    return row * per_row + (kc ^ (row % 24 % 8))


def mix_warp(ops, lane, a_base, f_base, per_row: int):
    """One warp's 16 tokens (rows of the stage from a_base) times fn's slice at f_base: per 16 K values one A ldmatrix,
    hi and lo B ldmatrix (n8 tiles 0, 1 by one x4, tile 2 by an x4 whose upper lanes repeat its rows) and three
    m16n8k16 bf16 mma each (hi and lo into separate accumulators, six independent chains, summed at the end), and the
    rows' sums of squares from the A fragments. Returns (acc, sq): acc[nt] the 4
    accumulators of n8 tile nt (rows g, g, g + 8, g + 8; mixes nt 8 + 2 q, + 1), sq[h] row g + 8 h's sum of squares
    (every lane of a quad holds it). Plain Python on `ops` (ptx.DEVICE in the kernel, the test emulator on CPU)."""
    ra = lane % 16
    nb = lane % 8 + (lane // 16) * 8
    nb2 = 16 + lane % 8
    acc = [[[ops.f32_zero() for _ in range(4)] for _ in range(3)] for _ in range(2)]  # [hl][nt]: six mma chains
    sq = [ops.f32_zero(), ops.f32_zero()]
    for ks in range(per_row // 2):
        a = ops.ldmatrix_x4(a_base + stage_chunk(ra, 2 * ks + lane // 16, per_row) * 16)
        for v in range(4):  # a0, a2: row g; a1, a3: row g + 8
            lo, hi = ops.half2_to_f32("bfloat16", a[v])
            sq[v % 2] = sq[v % 2] + lo * lo + hi * hi
        kcb = 2 * ks + (lane // 8) % 2
        for hl in range(2):
            b01 = ops.ldmatrix_x4(f_base + fn_chunk(hl * 24 + nb, kcb, per_row) * 16)
            b2 = ops.ldmatrix_x4(f_base + fn_chunk(hl * 24 + nb2, kcb, per_row) * 16)
            acc[hl][0] = list(ops.mma("bfloat16", a, (b01[0], b01[1]), acc[hl][0]))
            acc[hl][1] = list(ops.mma("bfloat16", a, (b01[2], b01[3]), acc[hl][1]))
            acc[hl][2] = list(ops.mma("bfloat16", a, (b2[0], b2[1]), acc[hl][2]))
    acc = [[acc[0][nt][v] + acc[1][nt][v] for v in range(4)] for nt in range(3)]
    for h in range(2):
        sq[h] = sq[h] + ops.shfl_xor(sq[h], 1)
        sq[h] = sq[h] + ops.shfl_xor(sq[h], 2)
    return acc, sq


def quad_v4(ops, lane, acc):
    """`mix_warp`'s accumulators regrouped into four consecutive mixes a lane, for 16-byte reductions: the lanes of a
    quad pair (q, q ^ 1) trade halves, so lane q even holds row g's mixes nt 8 + 4 (q // 2) .. + 3 and lane q odd row
    g + 8's same four (two shuffles a tile). Returns the 3 tiles' (v0, v1, v2, v3); the row is g + 8 (lane % 2)."""
    odd = lane % 2
    out = []
    for nt in range(3):
        c = acc[nt]
        r0 = ops.shfl_xor(ops.select_f32(odd, c[0], c[2]), 1)  # even lanes send row g + 8, odd lanes row g
        r1 = ops.shfl_xor(ops.select_f32(odd, c[1], c[3]), 1)
        out.append((
            ops.select_f32(odd, r0, c[0]),
            ops.select_f32(odd, r1, c[1]),
            ops.select_f32(odd, c[2], r0),
            ops.select_f32(odd, c[3], r1),
        ))  # fmt: skip
    return out


def _kernel_class():
    """The CuTe DSL kernel (imported lazily: the contract tests need no CUTLASS)."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32, Int32, Int64
    from cutlass._mlir.dialects import llvm
    from cutlass.cutlass_dsl import T, dsl_user_op

    from flashinfer.experimental.b12x._lib.ptx import DEVICE as ops

    def gmem_op(text: str, ret=None, value=None):
        """A one-instruction global access at address $0 (stores) or $1 (loads, result $0) as a DSL op. ret: Int32 /
        Float32 for a load's result; value: Int32 / Float32 for a reduction's operand."""

        @dsl_user_op
        def op(addr, operand=None, *, loc=None, ip=None):
            ins = [Int64(addr).ir_value(loc=loc, ip=ip)]
            if value is not None:
                ins.append(value(operand).ir_value(loc=loc, ip=ip))
                reg = "f" if value is Float32 else "r"
                llvm.inline_asm(
                    None, ins, text, f"l,{reg}", has_side_effects=True, is_align_stack=False, loc=loc, ip=ip
                )
                return None
            ty, reg = (T.f32(), "f") if ret is Float32 else (T.i32(), "r")
            res = llvm.inline_asm(
                ty, ins, text, f"={reg},l", has_side_effects=True, is_align_stack=False, loc=loc, ip=ip
            )
            return ret(res)

        return op

    # the arrival: a reduction, no value back
    red_release_add = gmem_op("red.release.gpu.global.add.u32 [$0], $1;", value=Int32)
    # a poll that reads (several pollers of one line do not serialize as RMWs)
    ld_acquire = gmem_op("ld.acquire.gpu.global.u32 $0, [$1];", ret=Int32)
    # the early poll: no invalidation, no ordering; only a value that shows the group complete is followed by a fence
    ld_relaxed = gmem_op("ld.relaxed.gpu.global.u32 $0, [$1];", ret=Int32)
    # a partial into the block's accumulator (ordered by the arrival's release), and a reduced one read back
    red_add_f32 = gmem_op("red.relaxed.gpu.global.add.f32 [$0], $1;", value=Float32)

    @dsl_user_op
    def red_add_v4(addr, v, *, loc=None, ip=None):
        """Four partials into 16-byte-aligned slots in one reduction (sm_90's vector `red`)."""
        ins = [Int64(addr).ir_value(loc=loc, ip=ip)] + [Float32(x).ir_value(loc=loc, ip=ip) for x in v]
        llvm.inline_asm(None, ins, "red.relaxed.gpu.global.add.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f",
                        has_side_effects=True, is_align_stack=False, loc=loc, ip=ip)  # fmt: skip

    ld_f32_l2 = gmem_op("ld.relaxed.gpu.global.f32 $0, [$1];", ret=Float32)

    class RingSkeleton:
        def __init__(self, row: Row, hidden: int) -> None:
            self.row, self.hidden = row, hidden
            self.run = hidden // row.group  # columns a program holds
            self.cpr = self.run // 8  # 16-byte chunks a row
            self.stage = row.stage_bytes(hidden)
            self.loads = 4 * row.bt * self.cpr  # chunks a block
            self.sums = row.bt * self.cpr  # y chunks a block
            # sync_warp: the last warp issues no copies and no y stores, so its release (the arrival) orders
            # nothing of its own still in flight; its first lane arrives and polls
            self.workers = THREADS - 32 if row.sync_warp else THREADS
            self.signal = THREADS - 32 if row.sync_warp else 0
            # split_roles: warps below y_first run the mixes of the block that landed while the others (and the
            # signal warp) wait for and store y of the block `lag` rounds older
            self.y_first = (row.bt // 16) * 32 if row.split_roles else 0
            self.y_threads = self.workers - self.y_first

        @cute.jit
        def __call__(self, mX: cute.Tensor, mY: cute.Tensor, mC: cute.Tensor, mA: cute.Tensor, mF: cute.Tensor,
                     mP: cute.Tensor, rounds: Int32, groups: Int32,
                     T: Int32, stream: cuda.CUstream):  # fmt: skip
            self.kernel(mX, mY, mC, mA, mF, mP, rounds, groups, T).launch(
                grid=[groups * self.row.group, 1, 1], block=[THREADS, 1, 1], stream=stream
            )

        @cute.jit
        def load(self, xb, sbase, tid, block, stage, j, T):
            """This thread's cp.async chunks of `block` into `stage` (zero-filled past T)."""
            if tid < self.workers:
                self.load_chunks(xb, sbase, tid, block, stage, j, T)

        @cute.jit
        def load_chunks(self, xb, sbase, tid, block, stage, j, T):
            for i in cutlass.range_constexpr((self.loads + self.workers - 1) // self.workers):
                idx = tid + i * self.workers
                row, chunk = idx // self.cpr, idx % self.cpr
                tok = block * self.row.bt + row // 4
                live = Int32(0)
                if tok < T:
                    live = Int32(1)
                off = ((Int64(tok) * 4 + row % 4) * self.hidden + j * self.run) * 2 + chunk * 16
                saddr = self.chunk_addr(sbase, stage, row // 4, row % 4, chunk)
                if cutlass.const_expr((self.loads % self.workers) != 0):
                    if idx < self.loads:
                        ops.cp_async16(saddr, xb + off * live, live)
                else:
                    ops.cp_async16(saddr, xb + off * live, live)

        @cute.jit
        def arrive(self, cb, block, tid):
            """The signal thread's release reduction on the block's counter (after a CTA barrier: every thread's work)."""
            if tid == self.signal:
                if cutlass.const_expr(self.row.poll != "atom"):
                    red_release_add(cb + Int64(block) * 4, 1)
                else:
                    cute.arch.atomic_add(
                        cute.make_ptr(Int32, cb + Int64(block) * 4, cute.AddressSpace.gmem),
                        Int32(1),
                        sem="release",
                        scope="gpu",
                    )

        @cute.jit
        def await_group(self, cb, block, stuck, tid):
            """Thread 0 polls (acquire) until the block's GROUP programs arrived, or gives up after MAX_SPINS polls
            and counts it at `stuck` (a grid that is not co-resident cannot hang); then a CTA barrier."""
            if tid == self.signal:
                seen = self.poll(cb + Int64(block) * 4)
                spins = Int32(0)
                while seen < self.row.group:
                    seen = self.poll(cb + Int64(block) * 4)
                    spins = spins + 1
                    if spins > MAX_SPINS:
                        cute.arch.atomic_add(stuck, Int32(1))
                        seen = Int32(self.row.group)
            ops.barrier()

        @cute.jit
        def await_early(self, cb, block, nxt, pending, stuck, tid):
            """poll "early": `pending` is the counter of `block` as read a round ago (relaxed); a complete one needs
            only an acquire fence, an incomplete one falls back to acquire polls. Then the next round's read of block
            `nxt` (>= 0) is issued, and its value returned; a CTA barrier, or with split_roles a named barrier of
            the y warps and the signal warp (the mma warps are busy with the next block meanwhile)."""
            new = pending
            if tid == self.signal:
                if pending < self.row.group:
                    seen = ld_acquire(cb + Int64(block) * 4)
                    spins = Int32(0)
                    while seen < self.row.group:
                        seen = ld_acquire(cb + Int64(block) * 4)
                        spins = spins + 1
                        if spins > MAX_SPINS:
                            cute.arch.atomic_add(stuck, Int32(1))
                            seen = Int32(self.row.group)
                else:
                    cute.arch.fence_acq_rel_gpu()
                if nxt >= 0:
                    new = ld_relaxed(cb + Int64(nxt) * 4)
            if cutlass.const_expr(self.row.split_roles):
                ops.bar_sync(1, THREADS - self.y_first)
            else:
                ops.barrier()
            return new

        @cute.jit
        def poll(self, addr):
            if cutlass.const_expr(self.row.poll == "ld"):
                return ld_acquire(addr)
            else:
                return cute.arch.atomic_add(
                    cute.make_ptr(Int32, addr, cute.AddressSpace.gmem), Int32(0), sem="acquire", scope="gpu"
                )

        @cute.jit
        def sum_store(self, yb, ab, pb, sbase, wbase, tid, block, stage, j, T):
            """y's chunks of `block` from `stage`: the four streams' 8 values summed in fp32."""
            if tid >= self.y_first and tid < self.workers:
                self.sum_chunks(yb, ab, pb, sbase, wbase, tid - self.y_first, block, stage, j, T)

        @cute.jit
        def stage_weights(self, ab, pb, wbase, tid, block):
            """hoist: y thread t < bt computes token t's 4 pre weights once into shared memory (then a barrier)."""
            t = tid - self.y_first
            if t < self.row.bt:
                w = self.pre_weights(ab, pb, block, t)
                for k in cutlass.range_constexpr(4):
                    ops.sts_f32(wbase + (t * 4 + k) * 4, w[k])
            if cutlass.const_expr(self.row.split_roles):
                ops.bar_sync(1, THREADS - self.y_first)
            else:
                ops.barrier()

        @cute.jit
        def chunk_addr(self, sbase, stage, t, s, chunk):
            """Shared address of (token t, stream s, chunk) in `stage`: a token's 4 x cpr chunks are one K-contiguous
            row (mixes: its chunk index XOR t mod 8, so ldmatrix's 8 rows of a 16-byte column hit 8 bank groups)."""
            kc = s * self.cpr + chunk
            if cutlass.const_expr(self.row.mixes):
                return sbase + stage * self.stage + stage_chunk(t, kc, 4 * self.cpr) * 16
            return sbase + stage * self.stage + (t * 4 * self.cpr + kc) * 16

        @cute.jit
        def chunk_sums(self, sbase, stage, t, chunk, w=None):
            """The 8 columns of `chunk` of token t summed over the four streams (weighted by w[s]), in fp32."""
            acc = [Float32(0.0)] * 8
            for s in cutlass.range_constexpr(4):
                words = ops.lds_v4(self.chunk_addr(sbase, stage, t, s, chunk))
                for v in cutlass.range_constexpr(4):
                    lo, hi = ops.half2_to_f32("bfloat16", words[v])
                    if cutlass.const_expr(w is None):
                        acc[2 * v] = acc[2 * v] + lo
                        acc[2 * v + 1] = acc[2 * v + 1] + hi
                    else:
                        acc[2 * v] = acc[2 * v] + w[s] * lo
                        acc[2 * v + 1] = acc[2 * v + 1] + w[s] * hi
            return acc

        @cute.jit
        def pre_weights(self, ab, pb, block, t):
            """pre_i = sigmoid(mix_i * rsqrt(ssq / 4H + rms_eps) * s0 + b_i) + hc_eps from the block's reduced slots
            (read after the group's counter was acquired); pb: s0, b0..b3, rms_eps, hc_eps."""
            base = ab + (Int64(block) * self.row.bt + t) * (SLOT_STRIDE * 4)
            ssq = ld_f32_l2(base + 24 * 4)
            r = cute.math.rsqrt(ssq * Float32(1.0 / (4 * self.hidden)) + ops.ldg_f32(pb + 5 * 4, Int32(1)))
            s0 = ops.ldg_f32(pb, Int32(1))
            eps = ops.ldg_f32(pb + 6 * 4, Int32(1))
            w = []
            for i in cutlass.range_constexpr(4):
                z = ld_f32_l2(base + i * 4) * r * s0 + ops.ldg_f32(pb + (1 + i) * 4, Int32(1))
                w.append(Float32(1.0) / (Float32(1.0) + cute.math.exp(-z)) + eps)
            return w

        @cute.jit
        def mix_partials(self, ab, sbase, fbase, tid, block, stage):
            """mixes: warp w < bt / 16 multiplies tokens [16 w, 16 w + 16) of the stage by fn's slice (hi, then lo:
            m16n8k16 bf16, fp32 accumulators, 3 n8 tiles for the 24 mixes), sums their squares from the same A
            fragments, and reduces its 16 x 24 partials and 16 sums of squares into the block's slots."""
            warp, lane = tid // 32, tid % 32
            if warp < self.row.bt // 16:
                m0 = warp * 16
                gq, tq = lane // 4, lane % 4
                per_row = 4 * self.cpr
                acc, sq = mix_warp(ops, lane, sbase + stage * self.stage + m0 * per_row * 16, fbase, per_row)
                if cutlass.const_expr(self.row.vec):
                    h = lane % 2
                    base = ab + (Int64(block) * self.row.bt + m0 + gq + 8 * h) * (SLOT_STRIDE * 4)
                    for nt, v in enumerate(quad_v4(ops, lane, acc)):
                        red_add_v4(base + (nt * 8 + 4 * (tq // 2)) * 4, v)
                    if tq < 2:  # lane q of a quad: row g + 8 q's sum of squares
                        red_add_f32(base + 24 * 4, ops.select_f32(h, sq[1], sq[0]))
                else:
                    for h in cutlass.range_constexpr(2):  # rows g, g + 8
                        base = ab + (Int64(block) * self.row.bt + m0 + gq + 8 * h) * (SLOT_STRIDE * 4)
                        for nt in cutlass.range_constexpr(3):
                            red_add_f32(base + (nt * 8 + 2 * tq) * 4, acc[nt][2 * h])
                            red_add_f32(base + (nt * 8 + 2 * tq + 1) * 4, acc[nt][2 * h + 1])
                        if tq == 0:
                            red_add_f32(base + 24 * 4, sq[h])

        @cute.jit
        def load_fn(self, fb, fbase, tid, j):
            """fn's hi / lo slice of program j into shared memory once: row (hl, n) = the 4 streams' columns
            [j run, (j + 1) run), swizzled like the stages."""
            per_row = 4 * self.cpr
            total = 48 * per_row
            for i in cutlass.range_constexpr((total + THREADS - 1) // THREADS):
                idx = tid + i * THREADS
                if idx < total:
                    row, kc = idx // per_row, idx % per_row
                    s, c = kc // self.cpr, kc % self.cpr
                    src = fb + (Int64(row) * 4 * self.hidden + s * self.hidden + j * self.run + c * 8) * 2
                    w = ops.ldg_v4(src, Int32(1))
                    ops.sts_v4(fbase + fn_chunk(row, kc, per_row) * 16, w[0], w[1], w[2], w[3])

        @cute.jit
        def sum_chunks(self, yb, ab, pb, sbase, wbase, tid, block, stage, j, T):
            for i in cutlass.range_constexpr((self.sums + self.y_threads - 1) // self.y_threads):
                idx = tid + i * self.y_threads
                t, chunk = idx // self.cpr, idx % self.cpr
                tok = block * self.row.bt + t
                if idx < self.sums:
                    if cutlass.const_expr(self.row.hoist):
                        w = [ops.lds_f32(wbase + (t * 4 + k) * 4) for k in range(4)]
                        acc = self.chunk_sums(sbase, stage, t, chunk, w)
                    elif cutlass.const_expr(self.row.mixes):
                        acc = self.chunk_sums(sbase, stage, t, chunk, self.pre_weights(ab, pb, block, t))
                    else:
                        acc = self.chunk_sums(sbase, stage, t, chunk)
                    if cutlass.const_expr(self.row.exchange):  # pre's weights stand-in: 1 / (1 + |slots 0..4|)
                        base = ab + (Int64(block) * self.row.bt + t) * (SLOT_STRIDE * 4)
                        sw = Float32(0.0)
                        for k in cutlass.range_constexpr(READ_SLOTS):
                            sw = sw + ld_f32_l2(base + k * 4)
                        f = Float32(1.0) / (Float32(1.0) + cute.math.absf(sw))
                        acc = [a * f for a in acc]
                    out = [ops.f32_to_half2("bfloat16", acc[2 * w], acc[2 * w + 1]) for w in range(4)]
                    live = Int32(0)
                    if tok < T:
                        live = Int32(1)
                    addr = yb + ((Int64(tok) * self.hidden + j * self.run) * 2 + chunk * 16) * live
                    ops.stg_v4(addr, out[0], out[1], out[2], out[3], live)

        @cute.jit
        def publish(self, ab, sbase, tid, block, stage):
            """exchange: each (token, chunk) adds its 32 values' sum into slot `chunk` of the token's SLOTS, and
            0 into slot chunk + cpr (< SLOTS): SLOTS reductions a token a program, like pre's 24 mixes + sum of
            squares."""
            if tid < self.workers:
                for i in cutlass.range_constexpr((self.sums + self.workers - 1) // self.workers):
                    idx = tid + i * self.workers
                    t, chunk = idx // self.cpr, idx % self.cpr
                    if idx < self.sums:
                        acc = self.chunk_sums(sbase, stage, t, chunk)
                        part = Float32(0.0)
                        for a in acc:
                            part = part + a
                        base = ab + (Int64(block) * self.row.bt + t) * (SLOT_STRIDE * 4)
                        red_add_f32(base + chunk * 4, part)
                        if chunk + self.cpr < SLOTS:
                            red_add_f32(base + (chunk + self.cpr) * 4, part * 0.0)

        @cute.kernel
        def kernel(
            self,
            mX: cute.Tensor,
            mY: cute.Tensor,
            mC: cute.Tensor,
            mA: cute.Tensor,
            mF: cute.Tensor,
            mP: cute.Tensor,
            rounds: Int32,
            groups: Int32,
            T: Int32,
        ):
            tid, _, _ = cute.arch.thread_idx()
            pid, _, _ = cute.arch.block_idx()
            g, j = pid // self.row.group, pid % self.row.group
            smem = cutlass.memory.SmemAllocator()
            ring = smem.allocate_tensor(cutlass.Uint8, cute.make_layout(self.row.stages * self.stage), 128)
            sbase = ring.iterator.toint()
            xb, yb, ab = mX.iterator.toint(), mY.iterator.toint(), mA.iterator.toint()
            pb = mP.iterator.toint()
            fbase = sbase
            if cutlass.const_expr(self.row.mixes):
                fslice = smem.allocate_tensor(
                    cutlass.Uint8, cute.make_layout(fn_slice_bytes(self.hidden, self.row.group)), 128
                )
                fbase = fslice.iterator.toint()
                self.load_fn(mF.iterator.toint(), fbase, tid, j)
                ops.barrier()
            wbase = sbase
            if cutlass.const_expr(self.row.hoist):
                wbuf = smem.allocate_tensor(cutlass.Uint8, cute.make_layout(self.row.bt * 16), 16)
                wbase = wbuf.iterator.toint()
            S, D = self.row.stages, self.row.lag
            A = S - 1 - D  # blocks loaded ahead of the one that lands
            cb = mC.iterator.toint()
            stuck = mC.iterator + rounds * groups
            for s in cutlass.range_constexpr(A):  # blocks 0 .. A - 1
                if s < rounds:
                    self.load(xb, sbase, tid, s * groups + g, s, j, T)
                ops.cp_async_commit()
            pending = Int32(0)  # poll "early": block r - D's counter as read a round ago
            for r in cutlass.range(rounds + D):
                nxt = r + A
                if nxt < rounds:  # into block nxt - S's stage: its y was stored by the last iteration's end
                    self.load(xb, sbase, tid, nxt * groups + g, nxt % S, j, T)
                ops.cp_async_commit()
                if r < rounds:
                    ops.cp_async_wait(A)  # block r has landed (this thread's copies) ...
                    ops.barrier()  # ... everyone's
                    if cutlass.const_expr(self.row.exchange):
                        self.publish(ab, sbase, tid, r * groups + g, r % S)
                        ops.barrier()  # every thread's reductions issued before the arrival's release
                    if cutlass.const_expr(self.row.mixes):
                        self.mix_partials(ab, sbase, fbase, tid, r * groups + g, r % S)
                        if cutlass.const_expr(not self.row.split_roles):
                            ops.barrier()
                    if cutlass.const_expr(self.row.barrier and not self.row.split_roles):
                        self.arrive(cb, r * groups + g, tid)
                if r >= D:  # block r - D: its group has (most likely) arrived by now
                    q = r - D
                    if tid >= self.y_first:  # every thread, or with split_roles the y and signal warps
                        if cutlass.const_expr(self.row.barrier and self.row.poll == "early"):
                            nxt = Int32(-1)
                            if q + 1 < rounds:
                                nxt = (q + 1) * groups + g
                            pending = self.await_early(cb, q * groups + g, nxt, pending, stuck, tid)
                        elif cutlass.const_expr(self.row.barrier):
                            self.await_group(cb, q * groups + g, stuck, tid)
                        if cutlass.const_expr(self.row.hoist):
                            self.stage_weights(ab, pb, wbase, tid, q * groups + g)
                        self.sum_store(yb, ab, pb, sbase, wbase, tid, q * groups + g, q % S, j, T)
                ops.barrier()  # the stage of block r - D is refilled next round (split_roles: and the mixes are in)
                if cutlass.const_expr(self.row.split_roles):
                    if r < rounds:
                        self.arrive(cb, r * groups + g, tid)

    return RingSkeleton


def compiled(row: Row, hidden: int, arch: str):
    """The ring skeleton of `row` at `hidden`, compiled for `arch` (tvm-ffi launcher fn(x, y, counters, rounds,
    groups, T) on torch's current stream)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int32
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

    from flashinfer.experimental.b12x._lib.compile import cute_compile

    reason = why_not(row, hidden)
    if reason:
        raise ValueError(f"row {row.label}: {reason}")
    t = cute.sym_int()
    x = make_fake_compact_tensor(cutlass.BFloat16, (t, 4, hidden), stride_order=(2, 1, 0), assumed_align=16)
    y = make_fake_compact_tensor(cutlass.BFloat16, (t, hidden), stride_order=(1, 0), assumed_align=16)
    c = make_fake_compact_tensor(cutlass.Int32, (cute.sym_int(),), assumed_align=4)
    a = make_fake_compact_tensor(cutlass.Float32, (cute.sym_int(),), assumed_align=4)
    f = make_fake_compact_tensor(cutlass.BFloat16, (cute.sym_int(), 4 * hidden), stride_order=(1, 0), assumed_align=16)
    p = make_fake_compact_tensor(cutlass.Float32, (8,), assumed_align=4)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    kern = _kernel_class()(row, hidden)
    return cute_compile(kern, x, y, c, a, f, p, Int32(1), Int32(1), Int32(1), stream, arch=arch)


def reference_y(x, group: int | None = None):
    """sum_i x[t, i] in fp32, one rounding to x's dtype; with `group` (an exchange row) times 1 / (1 + |s_t|),
    s_t the sum of token t's first READ_SLOTS 8-column chunks of every program's slice, all four streams."""
    xf = x.float()
    y = xf.sum(dim=1)
    if group is not None:
        t, _, h = x.shape
        parts = xf.view(t, 4, group, h // group // 8, 8).sum(dim=(1, 2, 4))
        y = y * (1.0 / (1.0 + parts[:, :READ_SLOTS].sum(dim=1).abs()))[:, None]
    return y.to(x.dtype)


def mixes_inputs(hidden: int, seed: int = 3):
    """fn [24, 4H] split into bf16 hi / lo rows [48, 4H] (what the kernel holds), the fp32 fn they sum to, and the
    scalars row (s0, b0..b3, rms_eps, hc_eps, 0)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    fn = torch.randn(24, 4 * hidden, generator=gen) * (4 * hidden) ** -0.5
    hi = fn.to(torch.bfloat16)
    lo = (fn - hi.float()).to(torch.bfloat16)
    scalars = torch.tensor([0.7, 0.1, -0.2, 0.3, 0.05, 1e-6, 1e-3, 0.0])
    return torch.cat([hi, lo]), hi.float() + lo.float(), scalars


def reference_slots(x, fn):
    """What a mixes row's programs reduce into a token's slots, in fp64: the 24 mixes flat @ fn^T and the sum of
    squares of flat ([T, 25]; flat = x as [T, 4H])."""
    import torch

    flat = x.double().reshape(x.shape[0], -1)
    return torch.cat([flat @ fn.to(flat.device).double().T, flat.pow(2).sum(dim=1, keepdim=True)], dim=1)


def mismatch(y, want, slots=None, want_slots=None, terms=None) -> dict:
    """Where y is off the reference (count of values outside `close`'s tolerance, the largest error, the largest
    |want|) and, for a mixes row, the reduced slots' largest error relative to the largest slot value; with `terms`
    (sum_i |pre_i x_i| a value) the tokens holding a miss and the largest miss over its terms (near 1e-6: a
    cancelling sum rounded another way; far above: a wrong weight)."""
    import torch

    err = (y.float() - want.float()).abs()
    bad = ~torch.isclose(y.float(), want.float(), rtol=2**-7, atol=2**-20)
    out = {"bad_values": int(bad.sum()), "max_err": float(err.max()), "max_want": float(want.float().abs().max())}
    if terms is not None and out["bad_values"]:
        out["bad_tokens"] = int(bad.any(dim=1).sum())
        out["bad_err_over_terms"] = float((err[bad] / terms[bad]).max())
    if slots is not None:
        d = (slots.double() - want_slots).abs()
        out["slots_rel_err"] = float(d.max() / want_slots.abs().max())
    return out


def reference_pre_y(x, fn, scalars, terms: bool = False):
    """norm.mhc pre's y (FORMATS.md: mixes = flat @ fn^T * rsqrt(mean(flat^2) + eps), pre = sigmoid(mixes[:4] s0 +
    b) + hc_eps, y = sum_i pre_i x_i) in fp32 with fn as given, rounded once to x's dtype; with `terms`, also
    sum_i |pre_i x_i| (fp32), the scale a value's rounding error is relative to."""
    import torch

    xf = x.float()
    flat = xf.reshape(x.shape[0], -1)
    s0, b, rms_eps, hc_eps = scalars[0], scalars[1:5], scalars[5], scalars[6]
    mixes = (flat @ fn.to(flat.device).T) * torch.rsqrt(flat.pow(2).mean(dim=1, keepdim=True) + rms_eps)
    pre = torch.sigmoid(mixes[:, :4] * s0 + b.to(flat.device)) + hc_eps
    y = (pre[:, :, None] * xf).sum(dim=1).to(x.dtype)
    return (y, (pre[:, :, None] * xf).abs().sum(dim=1)) if terms else y


def main(argv=None) -> int:
    p = parser(__doc__, "H (a multiple of 8 x every row's group)")
    args = p.parse_args(argv)
    for row in ROWS:
        reason = why_not(row, args.hidden)
        if reason:
            p.error(f"--hidden {args.hidden}: row {row.label}: {reason}")
    check(p, args)
    import torch

    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    from flashinfer.experimental.b12x._lib.arch import target_arch

    dev = torch.device("cuda")
    arch = target_arch()
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    common = bench_common()
    ceiling = common.ceilings(dev, fp8=False).copy_tbps
    print(f"copy ceiling: {ceiling:.2f} TB/s (benchmarks' 2 GiB device copy); arch {arch}", flush=True)
    kernels = {row: compiled(row, args.hidden, arch) for row in ROWS}
    out = []
    for t in args.tokens:
        x = torch.randn(t, 4, args.hidden, device=dev).to(torch.bfloat16)
        plain = reference_y(x)
        fn_rows, fn_sum, scalars = mixes_inputs(args.hidden)
        fn_rows, scalars_dev = fn_rows.to(dev), scalars.to(dev)
        want_slots = reference_slots(x, fn_sum)
        no_fn = torch.zeros(1, 4 * args.hidden, dtype=torch.bfloat16, device=dev)
        ideal = t * 5 * args.hidden * 2
        for row, fn in kernels.items():
            groups = sms // row.group
            rounds = rounds_for(t, groups, row.bt)
            y = torch.full((t, args.hidden), float("nan"), dtype=torch.bfloat16, device=dev)
            counters = torch.zeros(rounds * groups + 1, dtype=torch.int32, device=dev)  # + the give-ups
            acc = torch.zeros(rounds * groups * row.bt * SLOT_STRIDE if row.exchange or row.mixes else 1, device=dev)

            def reset(counters=counters, acc=acc):
                counters.zero_()
                acc.zero_()

            call = (x, y, counters, acc, fn_rows if row.mixes else no_fn, scalars_dev, rounds, groups, t)
            go = lambda fn=fn, call=call: fn(*call)  # noqa: E731
            us = common.time_cuda_events(go, before=reset, warmup=2, iters=args.reps).median_us
            want = reference_y(x, row.group) if row.exchange else plain
            if row.mixes:
                want, terms = reference_pre_y(x, fn_sum, scalars, terms=True)
            ok = close(y, want, atol=2**-20)
            if row.mixes:
                got_slots = acc.view(-1, SLOT_STRIDE)[:t, :SLOTS]
                diag = mismatch(y, want, got_slots, want_slots, terms)
                # a miss within TERMS_TOL of its terms is a cancelling sum rounded another way (s36_b: <= 2e-6)
                ok = ok or diag["bad_err_over_terms"] <= TERMS_TOL
            else:
                diag = {} if ok else mismatch(y, want)
            stuck = int(counters[-1].item())
            rec = {"tokens": t, "hidden": args.hidden, **row._asdict(), "groups": groups, "rounds": rounds, "us": us,
                   "tb_s": ideal / (us * 1e-6) / 1e12, "pct_copy": 100 * ideal / (us * 1e-6) / 1e12 / ceiling,
                   "y_close": ok, "timeouts": stuck, **diag}  # fmt: skip
            out.append(rec)
            print(f"T {t:5d} {row.label:22s} {us:9.1f} us  {us / rounds:6.2f} us a round  {rec['tb_s']:5.2f} TB/s  "
                  f"{rec['pct_copy']:5.1f}% copy  y ok {ok}  timeouts {stuck}  {diag or ''}", flush=True)  # fmt: skip
        del x, plain
    write_json(args.json, out, ceiling, torch.cuda.get_device_name(dev))
    return 0


if __name__ == "__main__":
    sys.exit(main())
