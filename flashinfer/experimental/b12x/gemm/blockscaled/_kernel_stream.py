"""Decode GEMM on the STREAM weight layout (M <= 16, W4A16 NVFP4; issue #6): C[M, N] = scale * A B^T.

The same math as `_kernel_decode` (swap AB on warp mma.sync, FP4 dequantized in registers: the
`DecodeLogic` chunk, reduction and epilogue run unchanged), but the weight comes pre-permuted by
`_shared/stream_layout.pack_stream`: a warp owns one 16-row tile and a set of SLABS (kc chunks of 128
K values), and each slab is `2 kc + kc / 4` warp loads of 512 consecutive bytes (16 aligned bytes a
lane), scales included. A CTA holds wn row tiles x kwarps warps per tile: warp w takes tile w //
kwarps and slabs w % kwarps, + kwarps, ...; the warps of a tile reduce through shared memory
(`DecodeLogic.reduce_stage` / `finish`, as the decode kernel with wn groups of tiles = 1).

Bytes in flight (Little: ~32-48 KB an SM at ~1 us loaded latency on the H200): load "bulk" (the
default) keeps `stages` whole slabs per warp in flight by construction (lane 0's cp.async.bulk into
the warp's shared buffers, an mbarrier each; 2 x 4.6 KB at kc 4); load "ldg" has each lane load its
words of a slab into registers (with prefetch = 1 the next slab's, carried over the math), but
ptxas decides when those loads issue (SASS: after the first dependent math, or at the loop's end).

Dequantization: the layout's code order "natural" stores each word's FP4 codes so that
`dequant.fp4_pair` yields pairs in the activations' own register order (no activation permute);
"placed" (bf16) also pre-places each code's bits (`dequant.fp4_pair_placed`: 11 ALU instructions
per 8 values instead of 15), bit-identical registers; "fp4" is the plain order.

Bytes: N K / 2 + N K / 16 weight (9/16 byte per value), M K 2 activation per CTA (L2), M N outputs.
Constraints: weight NVFP4, activations bf16 / fp16, N % 16 == 0, K % (128 kc) == 0 (plan / pack
time); M <= 8 ntiles is a run-time extent. Rows of a tile past N never happen (N % 16 == 0); a CTA's
tiles past the last (N / 16 not a multiple of wn) clamp to the last tile and store nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32
from cutlass.cute.runtime import make_fake_stream

from ..._lib.compile import cute_compile, kernel
from ..._lib.ptx import DEVICE
from .._shared import stream_layout as SL
from .._shared.formats import OUT_DTYPES
from ._config_decode import WarpShape
from ._kernel_decode import CHUNK, PROBE_ENV, DecodeConfig, DecodeLogic, Runtime, fake_args

_SOURCES = tuple(
    f"flashinfer.experimental.b12x.gemm._shared.{m}" for m in ("addressing", "dequant", "formats", "stream_layout")
) + ("flashinfer.experimental.b12x._lib.ptx", "flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode")

A_FORMATS = ("bfloat16", "float16")
WCACHE = ("nc", "na", "na256", "ef")  # the weight loads' cache hint (ptx.LDG_HINTS)
ACACHE = ("nc", "el")
LOADS = ("ldg", "bulk")
SMEM_LIMIT = 96 * 1024


@dataclass(frozen=True)
class StreamConfig(WarpShape):
    """warps: per CTA; wn: 16-row tiles per CTA (warps / wn warps split each tile's K); kc: chunks of
    128 values per slab (the layout's, 4 or 8); ntiles: 8-token MMA tiles (M <= 8 ntiles); unroll:
    slab-loop unroll; prefetch: 0 or 1 slab of weight loads carried ahead of the math; wcache /
    acache: cache hints of the weight / activation loads (as DecodeConfig's).
    load: "ldg" (each lane loads its 16-byte words of the slab into registers; ptxas decides when
    they issue) or "bulk" (lane 0 copies whole slabs, 4.6 / 9.2 KB contiguous, into the warp's
    `stages` shared-memory buffers with cp.async.bulk on an mbarrier, `stages` slabs in flight per
    warp whatever ptxas schedules; lanes read their words back with 128-bit shared loads; prefetch and
    wcache do not apply).
    order: the layout's nibble order (`stream_layout.ORDERS`): "natural" stores each word's nibbles
    so the weight pairs come out in the activations' own register order (no activation permute: 64 /
    128 fewer PRMT per slab at M <= 8 / 16), "fp4" the plain order (bit-identical sums to the decode
    kernel's chunk math); "placed" is "natural" with each code's bits pre-placed for bf16 (one shift
    and one mask per pair for 3 of 4 pairs: 11 instead of 15 ALU instructions per 8 values; bf16
    activations only; the same sums as "natural" bit for bit).
    min_ctas: the launch bound (nvvm.minctasm) ptxas compiles for: 1 lets it use registers up to the
    block's share of the file (no spills: without a bound ptxas capped 8-warp M <= 16 builds at 64
    registers and spilled 16-32 bytes in the loop), 0 gives no bound (ptxas's own choice).
    major: the layout's slab order (`stream_layout.MAJORS`): "tile" (a tile's slabs contiguous: each
    warp streams one 36 KB run at 4096 values of K) or "slab" (every tile's slab s together: the
    warps that are on slab s at the same time read one contiguous region, DRAM-row friendlier).
    lockstep (bulk, wn == warps: every warp streams its own whole tile, so all take the same number
    of slabs): a CTA barrier after each slab keeps the warps on the same slab, so the activation
    span every warp of the CTA reads next is one L2 read and L1 hits (at M = 16 each warp re-reads
    16 KB of activations per 4.6 KB slab; unsynchronised warps drift apart and miss L1).
    probe: "" or "loads", a timing probe (garbage output, B12X_GEMM_DECODE_PROBE=1 only): the same
    slab and activation loads XORed into one register instead of the dequant and MMAs, the layout's
    streaming ceiling under this config's CTA shape (`probe_variants`)."""

    @property
    def bulk_bytes(self) -> int:
        """Shared memory of the bulk buffers and their mbarriers (0 for ldg)."""
        if self.load != "bulk":
            return 0
        return self.warps * self.stages * (SL.slab_bytes(self.kc) + 8)

    @property
    def smem_bytes(self) -> int:
        """Reduction (warps x tokens x 16 rows fp32) + bulk buffers, with the allocator's alignment."""
        return 4 * self.warps * self.max_m * 16 + self.bulk_bytes + 256

    warps: int = 8
    wn: int = 1
    kc: int = 4
    ntiles: int = 1
    unroll: int = 1
    prefetch: int = 0
    wcache: str = "na"
    acache: str = "el"
    load: str = "ldg"
    stages: int = 2
    probe: str = ""
    order: str = "natural"
    major: str = "tile"
    min_ctas: int = 1
    lockstep: bool = False

    def decode(self) -> DecodeConfig:
        """The DecodeConfig whose chunk math, reduction and epilogue this kernel runs: tiles 1, wn
        tiles per CTA, tokens past M clamped (unpredicated activation loads)."""
        return DecodeConfig(
            warps=self.warps,
            tiles=1,
            ntiles=self.ntiles,
            unroll=self.unroll,
            wn=self.wn,
            clamp=True,
            wcache=self.wcache,
            acache=self.acache,
            probe=self.probe,
        )


def config_reason(config) -> str | None:
    if not isinstance(config, StreamConfig):
        return f"config must be a StreamConfig, got {type(config).__name__}"
    c = config
    if c.warps not in (1, 2, 4, 8, 16) or c.wn not in (1, 2, 4, 8) or c.warps % c.wn:
        return f"warps (1..16) and wn (1..8) must be powers of two with wn dividing warps, got {c.warps} / {c.wn}"
    if c.kc not in SL.KCS:
        return f"kc must be one of {SL.KCS}, got {c.kc}"
    if c.min_ctas not in (0, 1):
        return f"min_ctas must be 0 (no launch bound) or 1, got {c.min_ctas}"
    if c.major not in SL.MAJORS:
        return f"major must be one of {SL.MAJORS}, got {c.major!r}"
    if c.order not in SL.ORDERS:
        return f"order must be one of {SL.ORDERS}, got {c.order!r}"
    if c.ntiles not in (1, 2):
        return f"ntiles must be 1 or 2 (M <= 16), got {c.ntiles}"
    if c.unroll not in (1, 2) or c.prefetch not in (0, 1):
        return f"unroll must be 1 or 2 and prefetch 0 or 1, got {c.unroll} / {c.prefetch}"
    if c.wcache not in WCACHE or c.acache not in ACACHE:
        return f"wcache must be one of {WCACHE} and acache one of {ACACHE}, got {c.wcache!r} / {c.acache!r}"
    if c.load not in LOADS or c.stages not in (2, 3, 4):
        return f"load must be one of {LOADS} and stages 2, 3 or 4, got {c.load!r} / {c.stages}"
    if c.probe not in ("", "loads"):
        return f"probe must be '' or 'loads' (a timing probe: the slab and activation loads XORed, no math), got {c.probe!r}"
    if c.lockstep and (c.load != "bulk" or c.wn != c.warps):
        return "lockstep needs load='bulk' and wn == warps (whole tiles: every warp takes the same slabs)"
    if c.load == "bulk" and c.prefetch:
        return "prefetch applies to load='ldg' only (bulk keeps `stages` slabs in flight)"
    if c.smem_bytes > SMEM_LIMIT:
        return (
            f"shared memory {c.smem_bytes} bytes (reduction + {c.warps} warps x {c.stages} stages x "
            f"{SL.slab_bytes(c.kc)}-byte slabs) exceeds {SMEM_LIMIT} (sm_120 gives a block 99 KB): fewer warps or stages"
        )
    return None


def why_not(a_fmt: str, b_fmt: str, out_dtype: str, config) -> str | None:
    """None when the stream kernel implements this combination (shape limits: `shape_reason`)."""
    if a_fmt not in A_FORMATS or b_fmt != "nvfp4":
        return f"the stream decode kernel takes bf16 / fp16 activations x NVFP4 weights, got {a_fmt} x {b_fmt}"
    if out_dtype not in OUT_DTYPES:
        return f"out dtype must be one of {OUT_DTYPES}, got {out_dtype}"
    if isinstance(config, StreamConfig) and config.order == "placed" and a_fmt != "bfloat16":
        return f"order 'placed' places FP4 codes for bf16 activations, got {a_fmt}"
    if isinstance(config, StreamConfig) and config.probe and os.environ.get(PROBE_ENV) != "1":
        return f"probe {config.probe!r} computes garbage (a timing probe): set {PROBE_ENV}=1 to build it"
    return config_reason(config)


def shape_reason(n: int, k: int, config: StreamConfig) -> str | None:
    return SL.why_not(n, k, config.kc)


def default_config(max_m: int, n: int, k: int, a_fmt: str = "bfloat16") -> StreamConfig | None:
    """The prediction-backed starting point (docs/predictions/gemm_decode.md, session 7; not yet timed):
    bulk slab copies (load "bulk": 2 stages of 4.6 KB slabs per warp in flight whatever ptxas
    schedules), kc 4. Wide N (>= WIDE_TILES row tiles): 2-warp CTAs of whole tiles (wn 2, no K split,
    20 KB of shared memory): 28672 rows make 896 CTAs, 6.8 an SM, so the SMs' shares differ by one
    36 KB tile (3%) where 8-warp CTAs (224 of them, 2 an SM) leave 40 SMs with half the work of the
    rest (18% if the SMs' issue, not HBM, binds). Narrower N: 8 warps (78 KB, 2 CTAs an SM) with the
    fewest row tiles per CTA (wn; 8 / wn warps split each tile's K) whose grid fits one wave of
    WAVE_CTAS: 11264 -> wn 4 (176 CTAs; wn 2 would make 352, a second wave of 88), 7168 -> wn 2,
    4096 / 2048 -> wn 1. Order "placed" for bf16 activations (the fewest dequant
    instructions), "natural" for fp16. None when the shape has no kc-4 layout."""
    ntiles = 1 if max_m <= 8 else 2
    if SL.why_not(n, k, 4) is not None:
        return None
    order = "placed" if a_fmt == "bfloat16" else "natural"
    if n // 16 >= WIDE_TILES:
        return StreamConfig(warps=2, wn=2, kc=4, ntiles=ntiles, load="bulk", stages=2, order=order)
    return StreamConfig(warps=8, wn=_split_wn(n), kc=4, ntiles=ntiles, load="bulk", stages=2, order=order)


WAVE_CTAS = 264  # 8-warp bulk CTAs (78-82 KB of shared memory) resident at once: 2 an H200 SM x 132
WIDE_TILES = 1024  # N >= 16384: whole tiles per warp in small CTAs (default_config)


def _split_wn(n: int) -> int:
    """Row tiles of an 8-warp CTA: the fewest (8 / wn warps split K) whose grid fits WAVE_CTAS."""
    wn = 1
    while wn < 8 and -(-(n // 16) // wn) > WAVE_CTAS:
        wn *= 2
    return wn


def candidate_configs(max_m: int, n: int, k: int) -> tuple[StreamConfig, ...]:
    """What `bench_gemm --sweep-subset layout` times for bf16 activations, one hypothesis each (kc 4,
    order "placed" unless named). Bulk copies: the default; the same with order "natural", without
    the launch bound (min_ctas 0), and slab-major; 8-warp CTAs with the WAVE_CTAS rule and with half
    its tiles per CTA (twice the CTAs); 4 warps of 2 tiles; whole tiles per warp in CTAs of 1 (3
    stages), 2 and 4 warps; 4 warps of kc 8 slabs; 8 warps of whole tiles in lockstep (shared
    activation reads). Register loads ("ldg"): the next slab carried over the math (prefetch 1) in
    8-warp CTAs. (Order "fp4", no prefetch, more stages, the cache hints stay selectable, not swept:
    SASS shows unprefetched register loads issuing after the first dependent math.) Shapes the layout
    cannot hold, configs over the shared-memory limit and duplicates are dropped (10-13 a case; none
    when K has no kc-4 layout)."""
    base = default_config(max_m, n, k)
    if base is None:
        return ()
    nt, wn8 = base.ntiles, _split_wn(n)
    w4 = min(wn8, 4)

    def bulk(warps, wn, stages=2, kc=4):
        return StreamConfig(warps=warps, wn=wn, kc=kc, ntiles=nt, load="bulk", stages=stages, order="placed")

    def ldg(warps, wn, prefetch=1):
        return StreamConfig(warps=warps, wn=wn, kc=4, ntiles=nt, prefetch=prefetch, order="placed")

    cands = (
        base,
        replace(base, order="natural"),
        replace(base, min_ctas=0),
        replace(base, major="slab"),
        bulk(8, wn8),
        bulk(8, max(1, wn8 // 2)),
        bulk(4, 2),
        bulk(1, 1, stages=3),
        bulk(2, 2),
        bulk(4, 4),
        bulk(4, w4, kc=8),
        replace(bulk(8, 8), lockstep=True),
        ldg(8, wn8),
    )
    out = []
    for c in cands:
        if c not in out and shape_reason(n, k, c) is None and config_reason(c) is None:
            out.append(c)
    return tuple(out)


def probe_variants(base: StreamConfig) -> tuple[StreamConfig, ...]:
    """What `bench_gemm --sweep-subset layout-probe` times after the CuTe baseline: `base`, its
    loads-only probe, and the same pair for register loads with prefetch (the access pattern's
    ceiling against the full kernel, per load mode)."""
    ldg = replace(base, load="ldg", stages=2, prefetch=1)
    return (base, replace(base, probe="loads"), ldg, replace(ldg, probe="loads"))


# ---- per-thread logic (device and CPU emulator) ---------------------------------------------------
class StreamLogic(DecodeLogic):
    what = "gemm.blockscaled stream decode kernel"

    def __init__(self, a_fmt: str, b_fmt: str, out_dtype: str, config: StreamConfig) -> None:
        reason = why_not(a_fmt, b_fmt, out_dtype, config)
        if reason is not None:
            raise ValueError(f"{self.what}: {reason}")
        super().__init__(a_fmt, b_fmt, out_dtype, config.decode())
        if config.order in ("natural", "placed"):  # the weight's pairs come in the activations' order
            self.family = "natural"
        if config.order == "placed":  # and their bits pre-placed (dequant.fp4_pair_placed)
            self.cfg = replace(self.cfg, fp4="placed")
        self.scfg = config
        self.kc = config.kc
        self.nloads = SL.loads(config.kc)
        self.slab_bytes = SL.slab_bytes(config.kc)

    def slab_offset(self, ops, rt: Runtime, tile, s, slabs):
        """Byte offset of slab s of row tile `tile` in the layout (its `major`)."""
        if self.scfg.major == "slab":
            return (ops.i64(s) * ops.i64(rt.n >> 4) + ops.i64(tile)) * self.slab_bytes
        return (ops.i64(tile) * ops.i64(slabs) + ops.i64(s)) * self.slab_bytes

    def slab_loads(self, ops, rt: Runtime, lane, tile, s, slabs):
        """Slab s of row tile `tile`: the lane's 16-byte words of every load, in layout order."""
        base = rt.b_base + self.slab_offset(ops, rt, tile, s, slabs) + ops.i64(lane * 16)
        true = ops.boolean(True)
        hint = None if self.scfg.wcache == "nc" else self.scfg.wcache
        out = []
        for i in range(self.nloads):
            addr = base + SL.LOAD_BYTES * i
            out.append(ops.ldg_v4(addr, true) if hint is None else ops.ldg_v4_hint(addr, true, hint))
        return [w for words in out for w in words]

    # load = "bulk": per warp `stages` buffers of one slab and an mbarrier each (bases given per warp)
    def bulk_init(self, ops, lane, mbar):
        """Lane 0 initialises the warp's mbarriers (one arrival each: its own expect_tx)."""
        for st in range(self.scfg.stages):
            ops.mbar_init(mbar + 8 * st, lane == 0, 1)
        ops.sync_warp()

    def bulk_issue(self, ops, rt: Runtime, lane, tile, s, slabs, buf, mbar, ok):
        """Lane 0 (where ok) starts the copy of slab s of `tile` into `buf`, completing on `mbar`."""
        src = rt.b_base + self.slab_offset(ops, rt, tile, s, slabs)
        ops.bulk_g2s(buf, src, self.slab_bytes, mbar, (lane == 0) & ok)

    def bulk_read(self, ops, lane, buf):
        """The lane's 16-byte words of a landed slab, as `slab_loads` returns them."""
        return [w for i in range(self.nloads) for w in ops.lds_v4(buf + SL.LOAD_BYTES * i + lane * 16)]

    def slab_math(self, ops, rt: Runtime, lane, s, flat, acc):
        """The kc chunks of slab s on its loaded words (`slab_loads`), chunk by chunk in K order."""
        for ci in range(self.kc):
            sc = flat[4 * (2 * self.kc + ci // 4) + ci % 4]  # bytes (h, j): scales of rows g, g + 8
            spans = [[(flat[4 * (2 * ci + h) : 4 * (2 * ci + h) + 4], sc if h == 0 else sc >> 16) for h in range(2)]]
            acc = self.chunk_with(ops, rt, lane, None, s * self.kc + ci, (spans, None), acc)
        return acc


# ---- the CuTe kernel ----------------------------------------------------------------------------
class StreamGemm:
    def __init__(self, logic: StreamLogic) -> None:
        self.logic = logic
        self.threads = logic.cfg.warps * 32

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mSFA: cute.Tensor,
        mB: cute.Tensor,
        mSFB: cute.Tensor,
        mC: cute.Tensor,
        mS0: cute.Tensor,
        mS1: cute.Tensor,
        mS2: cute.Tensor,
        alpha: Float32,
        stream: cuda.CUstream,
    ):
        grid_n = (mC.shape[1] + self.logic.bn - 1) // self.logic.bn
        self.kernel(mA, mSFA, mB, mSFB, mC, mS0, mS1, mS2, alpha).launch(
            grid=[grid_n, 1, 1], block=[self.threads, 1, 1], stream=stream, min_blocks_per_mp=self.logic.scfg.min_ctas
        )

    @cute.kernel
    def kernel(
        self,
        mA: cute.Tensor,
        mSFA: cute.Tensor,
        mB: cute.Tensor,
        mSFB: cute.Tensor,
        mC: cute.Tensor,
        mS0: cute.Tensor,
        mS1: cute.Tensor,
        mS2: cute.Tensor,
        alpha: Float32,
    ):
        ops = DEVICE
        L = self.logic
        tid, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp, lane = tid >> 5, tid & 31
        n0 = bidx * L.bn
        k = mA.shape[1]  # 16-bit activations: K values per row
        rt = Runtime.of((mA, mSFA, mB, mSFB, mC, mS0, mS1, mS2), k, alpha)
        smem = cutlass.memory.SmemAllocator()
        red = smem.allocate_tensor(Float32, cute.make_layout(L.red_floats), 16)
        red_base = red.iterator.toint()
        buf, mbar = red_base, red_base
        if cutlass.const_expr(L.scfg.load == "bulk"):
            nbuf = L.cfg.warps * L.scfg.stages
            bufs = smem.allocate_tensor(cutlass.Uint8, cute.make_layout(nbuf * L.slab_bytes), 128)
            bars = smem.allocate_tensor(cutlass.Int64, cute.make_layout(nbuf), 8)
            buf = bufs.iterator.toint() + warp * (L.scfg.stages * L.slab_bytes)  # this warp's buffers
            mbar = bars.iterator.toint() + warp * (L.scfg.stages * 8)

        acc = L.zero_acc(ops)
        slabs = k // (CHUNK * L.kc)
        first, step = warp % L.kstep, L.kstep  # this warp's slabs: first, first + step, ...
        # its row tile, clamped to the last one (a CTA past N / 16 tiles stores nothing)
        tile = ops.imin(bidx * L.cfg.wn + warp // L.kstep, rt.n // 16 - 1)
        if cutlass.const_expr(L.scfg.load == "bulk"):
            stages = L.scfg.stages
            L.bulk_init(ops, lane, mbar)
            for j in cutlass.range_constexpr(stages):  # the first `stages` slabs in flight
                sj = first + j * step
                L.bulk_issue(
                    ops,
                    rt,
                    lane,
                    tile,
                    ops.imin(sj, slabs - 1),
                    slabs,
                    buf + j * L.slab_bytes,
                    mbar + 8 * j,
                    sj < slabs,
                )
            for s in cutlass.range(first, slabs, step, unroll=L.cfg.unroll):
                it = (s - first) // step
                st, parity = it % stages, (it // stages) & 1
                DEVICE.mbar_wait(mbar + 8 * st, parity)
                flat = self.logic.bulk_read(DEVICE, lane, buf + st * self.logic.slab_bytes)
                acc = self.logic.slab_math(DEVICE, rt, lane, s, flat, acc)
                DEVICE.sync_warp()  # every lane's reads of this buffer are done: refill it
                if cutlass.const_expr(self.logic.scfg.lockstep):
                    DEVICE.barrier()  # the CTA's warps move to the next slab together
                nxt = s + stages * step
                self.logic.bulk_issue(
                    DEVICE, rt, lane, tile, DEVICE.imin(nxt, slabs - 1), slabs, buf + st * self.logic.slab_bytes,
                    mbar + 8 * st, nxt < slabs,
                )  # fmt: skip
        elif cutlass.const_expr(L.scfg.prefetch == 0):
            for s in cutlass.range(first, slabs, step, unroll=L.cfg.unroll):
                flat = self.logic.slab_loads(DEVICE, rt, lane, tile, s, slabs)
                acc = self.logic.slab_math(DEVICE, rt, lane, s, flat, acc)
        else:  # the next slab's loads (clamped to the last slab past the end) carried over the math
            stage = L.slab_loads(ops, rt, lane, tile, ops.imin(first, slabs - 1), slabs)
            for s in cutlass.range(first, slabs, step, unroll=L.cfg.unroll):
                ahead = self.logic.slab_loads(DEVICE, rt, lane, tile, DEVICE.imin(s + step, slabs - 1), slabs)
                acc = self.logic.slab_math(DEVICE, rt, lane, s, stage, acc)
                stage = ahead
        L.reduce_stage(ops, red_base, warp, lane, acc)
        ops.barrier()
        L.finish(ops, rt, red_base, tid, n0)


@kernel("gemm.blockscaled.decode_stream", sources=_SOURCES)
def compile_stream(a_fmt: str, b_fmt: str, out_dtype: str, config: StreamConfig, arch: str):
    """tvm-ffi launcher `fn(A, SFA, P, SFB, C, S0, S1, S2, alpha)` on torch's current stream: P is the
    stream-layout weight (`stream_layout.pack_stream`, any shape, read as bytes), SFB unused."""
    logic = StreamLogic(a_fmt, b_fmt, out_dtype, config)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(StreamGemm(logic), *fake_args(a_fmt, b_fmt, out_dtype), Float32(1.0), stream, arch=arch)


__all__ = ["StreamConfig", "StreamLogic", "compile_stream", "default_config", "why_not"]
