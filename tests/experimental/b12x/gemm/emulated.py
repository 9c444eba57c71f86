"""Run the GEMM kernels' own logic on the CPU emulator: the kernels' control skeleton, their helpers.

Each driver mirrors the `@cute.kernel` body of its kernel (grid, warps, loops, barriers) and calls the
same `*Logic` methods with `EmuOps`, on the exact launch arguments `blockscaled.api` builds.
"""

from __future__ import annotations

import numpy as np
import torch

from flashinfer.experimental.b12x.gemm._shared.formats import FORMAT, compute_dtype
from flashinfer.experimental.b12x.gemm._shared.operands import TORCH_OUT
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_dequant as KDQ
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_mma16 as KM
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_stream as KS
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_tiled as KT
from flashinfer.experimental.b12x.gemm.blockscaled import _twopass as TP

from .emulator import EmuOps, GlobalMemory, emulate_tile, k_loop

LANE = np.arange(32, dtype=np.int32)


class _HostInts:
    """The ops `TiledLogic.tile_origin` needs, on plain Python integers (the host-side raster walks)."""

    imin = staticmethod(min)


RASTER_OPS = _HostInts()


def poisoned_launch_args(ops, out_dtype: str, alpha=None):
    """`launch.launch_args` of an Operands (helpers.make_operands) with a NaN-filled C: ((A, SFA, B, SFB,
    C, S0, S1, S2), alpha), the arguments the drivers below take."""
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    from .helpers import TORCH

    out = torch.full((ops.m, ops.n), float("nan"), dtype=TORCH[out_dtype])
    scale = ops.alpha if alpha is None else alpha
    return L.launch_args(
        ops.a_fmt, ops.a_values, ops.a_scales, None, ops.b_fmt, ops.b_values, ops.b_scales, ops.weight.alpha, scale, out
    )


def _place(gmem: GlobalMemory, args):
    """Launch tensors (A, SFA, B, SFB, C, S0, S1, S2) -> addresses."""
    return [gmem.put(t) for t in args]


def _read_c(gmem: GlobalMemory, base: int, like: torch.Tensor) -> torch.Tensor:
    raw = torch.from_numpy(gmem.get(base)[: like.numel() * like.element_size()].copy())
    return raw.view(like.dtype).reshape(like.shape)


def run_decode(a_fmt, b_fmt, out_dtype, config, args, alpha: float) -> torch.Tensor:
    """Emulate compile_decode(a_fmt, b_fmt, out_dtype, config)(*args, alpha); returns C."""
    a, sfa, b, sfb, c, s0, s1, s2 = args
    logic = KD.DecodeLogic(a_fmt, b_fmt, out_dtype, config)
    gmem = GlobalMemory()
    bases = _place(gmem, args)
    m, n = c.shape
    k = b.shape[1] * 8 // FORMAT[b_fmt].value_bits
    rt = KD.Runtime(*bases, np.int32(m), np.int32(n), np.int32(k), np.float32(alpha))
    ks = config.ksplit  # a cluster of ks CTAs a row block: each its own shared memory, the K loops of all,
    for blk in range((n + logic.bn - 1) // logic.bn):  # then the cluster barrier, then every rank's finish
        n0 = np.int32(blk * logic.bn)
        smems = [np.zeros(logic.red_floats * 4 + logic.share_bytes, dtype=np.uint8) for _ in range(ks)]
        for rank, smem in enumerate(smems):
            if config.ashare:  # warp sets in lock step: every warp's store phase, then every warp's math
                ashare_k_loops(logic, gmem, smem, rt, n0, k, rank)
            for w in range(0 if config.ashare else config.warps):  # phase 1: the K loop and the partial sums
                ops = EmuOps(gmem, smem)
                acc = logic.zero_acc(ops)
                chunks = np.int32(k // KD.CHUNK)
                first, step = rank * logic.kstep + w % logic.kstep, logic.kstride
                nw = np.int32(n0 + (w // logic.kstep) * logic.rows_w)
                acc = k_loop(logic, ops, rt, nw, first, step, chunks, acc)
                logic.reduce_stage(ops, 0, w, LANE, acc)
        for rank, smem in enumerate(smems):
            for w in range(config.warps if ks == 1 else logic.finish_warps):  # phase 2, after the (cluster) barrier
                ops = EmuOps(gmem, smem, peers=smems)
                if ks == 1:
                    logic.finish(ops, rt, 0, w * 32 + LANE, n0)
                else:
                    logic.finish(ops, rt, 0, w * 32 + LANE, n0, np.int32(rank))
    return _read_c(gmem, bases[4], c)


def run_stream(a_fmt, b_fmt, out_dtype, config, args, alpha: float) -> torch.Tensor:
    """Emulate compile_stream(a_fmt, b_fmt, out_dtype, config)(*args, alpha) (args[2] is the
    stream-layout weight); returns C. The prefetch pipeline loads the same slabs in the same order."""
    a, sfa, b, sfb, c, s0, s1, s2 = args
    logic = KS.StreamLogic(a_fmt, b_fmt, out_dtype, config)
    gmem = GlobalMemory()
    bases = _place(gmem, args)
    m, n = c.shape
    k = a.shape[1]
    rt = KD.Runtime(*bases, np.int32(m), np.int32(n), np.int32(k), np.float32(alpha))
    slabs = k // (KD.CHUNK * logic.kc)
    nst, sb = config.stages, logic.slab_bytes
    bufs = -(-logic.red_floats * 4 // 128) * 128  # bulk buffers after the reduction, then mbarriers
    bars = bufs + config.warps * nst * sb
    for bidx in range((n + logic.bn - 1) // logic.bn):
        smem = np.zeros(bars + 8 * config.warps * nst if config.load == "bulk" else bufs, dtype=np.uint8)
        for w in range(config.warps):
            ops = EmuOps(gmem, smem)
            acc = logic.zero_acc(ops)
            first, step = w % logic.kstep, logic.kstep
            tile = np.int32(min(bidx * config.wn + w // logic.kstep, n // 16 - 1))
            if config.load == "bulk":  # the kernel's bulk pipeline, in the same order
                buf, mbar = bufs + w * nst * sb, bars + w * nst * 8
                logic.bulk_init(ops, LANE, mbar)
                for j in range(nst):
                    sj = first + j * step
                    logic.bulk_issue(
                        ops, rt, LANE, tile, min(sj, slabs - 1), slabs, buf + j * sb, mbar + 8 * j, sj < slabs
                    )
                for s in range(first, slabs, step):
                    it = (s - first) // step
                    st, parity = it % nst, (it // nst) & 1
                    ops.mbar_wait(mbar + 8 * st, parity)
                    acc = logic.slab_math(ops, rt, LANE, np.int32(s), logic.bulk_read(ops, LANE, buf + st * sb), acc)
                    ops.sync_warp()  # (lockstep's CTA barrier orders nothing the emulator can see)
                    nxt = s + nst * step
                    logic.bulk_issue(
                        ops, rt, LANE, tile, min(nxt, slabs - 1), slabs, buf + st * sb, mbar + 8 * st, nxt < slabs
                    )
                assert all(not b["pending"] for b in ops.mbars.values()), "a bulk copy left in flight at exit"
                logic.reduce_stage(ops, 0, w, LANE, acc)
                continue
            stage = logic.slab_loads(ops, rt, LANE, tile, np.int32(min(first, slabs - 1)), slabs)
            for s in range(first, slabs, step):
                flat = stage if config.prefetch else logic.slab_loads(ops, rt, LANE, tile, np.int32(s), slabs)
                if config.prefetch:
                    stage = logic.slab_loads(ops, rt, LANE, tile, np.int32(min(s + step, slabs - 1)), slabs)
                acc = logic.slab_math(ops, rt, LANE, np.int32(s), flat, acc)
            logic.reduce_stage(ops, 0, w, LANE, acc)
        for w in range(config.warps):
            logic.finish(EmuOps(gmem, smem), rt, 0, w * 32 + LANE, np.int32(bidx * logic.bn))
    return _read_c(gmem, bases[4], c)


def ashare_k_loops(logic, gmem, smem, rt, n0, k, rank: int = 0, rows=None, make_ops=EmuOps) -> None:
    """The ashare K loop of one CTA (cluster rank `rank`): per warp set (the wn warps with the same chunks)
    and chunk, the share_store of every warp, the set's barrier, then every warp's chunk; then the partial
    sums. rows: a warp group's rows (None: the plain kernel's rows_w; the fused kernel's gcols columns);
    make_ops(gmem, smem): the ops a warp runs on."""
    share_base = logic.red_floats * 4
    chunks = k // KD.CHUNK
    rows = logic.rows_w if rows is None else rows
    for kset in range(logic.kstep):
        warps = [gi * logic.kstep + kset for gi in range(logic.cfg.wn)]
        ops = {w: make_ops(gmem, smem) for w in warps}
        acc = {w: logic.zero_acc(ops[w]) for w in warps}
        first = rank * logic.kstep + kset
        for ch in range(first, chunks, logic.kstride):
            c, parity = np.int32(ch), ((ch - first) // logic.kstride) & 1
            nws = {w: np.int32(n0 + (w // logic.kstep) * rows) for w in warps}
            wl = {w: logic.weight_loads(ops[w], rt, LANE, nws[w], c) for w in warps}
            for w in warps:
                logic.share_store(ops[w], rt, LANE, c, w // logic.kstep, kset, parity, share_base)
            for w in warps:
                shared = logic.shared_groups(ops[w], LANE, kset, parity, share_base)
                acc[w] = logic.chunk_with(ops[w], rt, LANE, nws[w], c, wl[w], acc[w], shared)
        for w in warps:
            logic.reduce_stage(ops[w], 0, w, LANE, acc[w])


def run_tiled(a_fmt, b_fmt, out_dtype, config, args, alpha: float) -> torch.Tensor:
    """Emulate compile_tiled(a_fmt, b_fmt, out_dtype, config)(*args, alpha); returns C."""
    a, sfa, b, sfb, c, s0, s1, s2 = args
    logic = KT.TiledLogic(a_fmt, b_fmt, out_dtype, config)
    gmem = GlobalMemory()
    bases = _place(gmem, args)
    m, n = c.shape
    k = b.shape[1] * 8 // FORMAT[b_fmt].value_bits
    rt = KT.Runtime(*bases, np.int32(m), np.int32(n), np.int32(k), np.float32(alpha))
    for by in range((m + config.bm - 1) // config.bm):
        for bx in range((n + config.bn - 1) // config.bn):
            emulate_tile(logic, gmem, rt, np.int32(by * config.bm), np.int32(bx * config.bn))
    return _read_c(gmem, bases[4], c)


def run_dequant(fmt, compute, config, x, sf, out, r0: int, rows: int) -> torch.Tensor:
    """Emulate compile_dequant(fmt, compute, config)(x, sf, out, r0, rows); returns out."""
    logic = KDQ.DequantLogic(fmt, compute, config)
    gmem = GlobalMemory()
    xb, sfb, ob = (gmem.put(t) for t in (x, sf, out))
    k = out.shape[1]
    rt = KDQ.DequantRuntime(xb, sfb, ob, np.int32(r0), np.int32(rows), np.int32(k))
    ops = EmuOps(gmem, np.zeros(KDQ.STAGE_BYTES, dtype=np.uint8))  # one warp's stage, reused
    for bx in range(logic.grid(rows, k)[0]):
        for w in range(config.threads // 32):
            logic.span(ops, rt, np.int32(bx * config.threads + w * 32) + LANE, LANE, 0)
    return _read_c(gmem, ob, out)


def run_mma16(a_fmt, b_fmt, out_dtype, config, a16, b16, c, scalars, alpha: float, c0: int, p: int) -> None:
    """Emulate compile_mma16(...)(a16, b16, c, S0, S1, S2, alpha, c0, p) into c: the cp.async ring
    (copies land at once here; a K-tile's copies go to the buffer the previous K-tile read, after every
    warp's MMAs of it, as the kernel's barrier orders them), the MMAs, the epilogue."""
    logic = KM.Mma16Logic(a_fmt, b_fmt, out_dtype, config)
    gmem = GlobalMemory()
    ab, bb, cb, *sb = (gmem.put(t) for t in (a16, b16, c, *scalars))
    m, n, k = c.shape[0], p, a16.shape[1]
    elem = c.element_size()
    rt = KT.Runtime(ab, ab, bb, bb, cb + c0 * elem, *sb, np.int32(m), np.int32(n), np.int32(k), np.float32(alpha))
    cfg, chunks = config, k // logic.kvals
    grid_m = -(-m // cfg.bm)
    grid = logic.tiled.grid(grid_m, -(-n // cfg.bn))
    for by in range(grid[1]):
        for bx in range(grid[0]):
            m0, n0 = (np.int32(v) for v in logic.tiled.tile_origin(RASTER_OPS, (bx, by), grid_m))
            if n0 >= n:  # an idle CTA of the grouped raster's short last group
                continue
            smem = np.zeros(logic.smem_bytes, dtype=np.uint8)
            ops = [EmuOps(gmem, smem) for _ in range(cfg.threads // 32)]
            tid = [w * 32 + LANE for w in range(len(ops))]
            for s in range(min(cfg.stages - 1, chunks)):
                for w, o in enumerate(ops):
                    logic.load(o, rt, tid[w], m0, n0, np.int32(s), s)
            acc = [logic.tiled.zero_acc(o) for o in ops]
            k_loop = _mma16_pipelined if cfg.pipe else _mma16_plain
            acc = k_loop(logic, ops, rt, tid, m0, n0, chunks, acc)
            for w, o in enumerate(ops):
                logic.epilogue(o, rt, tid[w], m0, n0, acc[w], np.int64(c.shape[1]))
    c.copy_(_read_c(gmem, cb, c))


def _mma16_plain(logic, ops, rt, tid, m0, n0, chunks, acc):
    """`Mma16Gemm.tile_plain`'s K loop: per K-tile (after its wait and barrier) the copies of K-tile
    kc + stages - 1 into the buffer K-tile kc - 1 used, then the MMAs of kc."""
    stages = logic.cfg.stages
    for kc in range(chunks):
        nxt = kc + stages - 1
        if nxt < chunks:
            for w, o in enumerate(ops):
                logic.load(o, rt, tid[w], m0, n0, np.int32(nxt), nxt % stages)
        for w, o in enumerate(ops):
            acc[w] = logic.tiled.mma_tile(o, rt, tid[w], m0, n0, np.int32(kc), kc % stages, acc[w])
    return acc


def _mma16_pipelined(logic, ops, rt, tid, m0, n0, chunks, acc):
    """`Mma16Gemm.tile_pipelined`'s K loop, all warps phase by phase between its barriers: the next
    K-tile's copies at k-step 0, fragments one k-step ahead, the barrier before the last k-step."""
    stages, ksteps, t = logic.cfg.stages, logic.tiled.ksteps, logic.tiled
    frags = [t.frags(o, tid[w], 0, 0) for w, o in enumerate(ops)]
    for kc in range(chunks):
        nxt = kc + stages - 1
        for w, o in enumerate(ops):
            if nxt < chunks:
                logic.load(o, rt, tid[w], m0, n0, np.int32(nxt), nxt % stages)
            for ks in range(ksteps - 1):
                nf = t.frags(o, tid[w], kc % stages, ks + 1)
                acc[w] = t.mma_step(o, *frags[w], acc[w])
                frags[w] = nf
        for w, o in enumerate(ops):  # after the barrier
            nf = t.frags(o, tid[w], (kc + 1) % stages, 0)
            acc[w] = t.mma_step(o, *frags[w], acc[w])
            frags[w] = nf
    return acc


def run_twopass(a_fmt, b_fmt, out_dtype, config, args, alpha: float) -> torch.Tensor:
    """Emulate `_twopass.TwoPassLauncher` on the launch arguments: the dequantize passes and the GEMM
    of each B panel, with the same panel split; returns C."""
    a, sfa, b, sfb, c, s0, s1, s2 = args
    m, n = c.shape
    if TP.runs_tiled(config, m):
        return run_tiled(a_fmt, b_fmt, out_dtype, config.tiled, args, alpha)
    if config.gemm.e4m3:  # the raw E4M3 operands, one launch over all of N
        c = c.clone()
        run_mma16(
            a_fmt, b_fmt, out_dtype, config.gemm, a.view(torch.uint8), b.view(torch.uint8), c, (s0, s1, s2), alpha, 0, n
        )
        return c
    k = b.shape[1] * 8 // FORMAT[b_fmt].value_bits
    compute = compute_dtype(a_fmt)
    dt = TORCH_OUT[compute]
    if FORMAT[a_fmt].family == "raw16":
        a16 = a
    else:
        a16 = run_dequant(b_fmt, compute, config.dequant, a, TP._bytes(sfa), torch.zeros(m, k, dtype=dt), 0, m)
    rows = TP.panel_rows(n, k, config.panel_elems)
    c = c.clone()
    for r0 in range(0, n, rows):
        p = min(rows, n - r0)
        b16 = run_dequant(
            b_fmt, compute, config.dequant, b, TP._bytes(sfb), torch.full((rows, k), float("nan"), dtype=dt), r0, p
        )
        run_mma16(a_fmt, b_fmt, out_dtype, config.gemm, a16, b16, c, (s0, s1, s2), alpha, r0, p)
    return c
