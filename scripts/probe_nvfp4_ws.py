"""Can producer / consumer warps hide an encode-sized ALU load behind the quantizer's loads? (sm_90a probe)

    python3 scripts/probe_nvfp4_ws.py [--shapes 4096x4096 4096x7168] [--alu 0 4 8 12] [--json out.json]

`scripts/probe_nvfp4_skeleton.py` showed the NVFP4 plan's memory program at 92-94% of the copy at 4096 x 4096
and its encode costing 8-13% on top: in the pointer tile a program's loads wait for its encode. This probe times
the same question without the encode's bits, on two memory programs that each fold every 4 input int32 words
into one output word (a quarter of the input bytes written back, as the packed codes are) after ALU rounds of
a dependent xor-shift-multiply on every word (3 SASS a round: an encode-sized instruction load at ALU ~ 8, the
lane-table encode being ~23 SASS a word):

- "pointer": a Triton kernel, each program loading its rows x columns tile into registers, then the ALU rounds,
  the fold and the stores (the plan's structure);
- "ws": a Gluon kernel, persistent (program p takes tiles p, p + P, ...), whose one producer warp streams the
  tiles into a ring of shared-memory stages by TMA while the four consumer warps read each stage in a stated
  register layout (one thread owning 4 consecutive words), run the ALU rounds and the fold, and store by TMA.

Nothing is checked: the probe times both beside the same-size copy (graph timer, input sets rotated past L2).
The Gluon kernel is written to the device's Triton 3.6 (`gl.warp_specialize([(fn, args), ...], warps, regs)`);
later Triton releases changed that signature, so it does not build with the CPU machines' Triton 3.9.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

MUL = tl.constexpr(1664525)  # a round is w = (w ^ (w >> 7)) * MUL: 3 SASS a word that no compiler folds


@triton.jit
def _pointer(x_ptr, out_ptr, m, K: tl.constexpr, BM: tl.constexpr, GW: tl.constexpr, ALU: tl.constexpr):
    """Rows pid_m BM + [0, BM), words pid_g GW + [0, GW) of x's int32 words (K / 2 a row), K-major programs."""
    NG: tl.constexpr = K // 2 // GW
    pid = tl.program_id(0)
    pid_m = pid // NG
    pid_g = pid - pid_m * NG
    rows = (pid_m * BM + tl.arange(0, BM)).to(tl.int64)
    cols = pid_g * GW + tl.arange(0, GW)
    w = tl.load(x_ptr.to(tl.pointer_type(tl.int32)) + rows[:, None] * (K // 2) + cols[None, :])
    for _ in tl.static_range(ALU):
        w = (w ^ (w >> 7)) * MUL
    folded = tl.sum(tl.reshape(w, (BM, GW // 4, 4)), axis=2)
    ocols = pid_g * (GW // 4) + tl.arange(0, GW // 4)
    tl.store(out_ptr + rows[:, None] * (K // 8) + ocols[None, :], folded)


@gluon.jit
def _ws_load(in_desc, ring, ready, empty, n_tiles, NG: gl.constexpr, BM: gl.constexpr, GW: gl.constexpr,
             STAGES: gl.constexpr):  # fmt: skip
    i = 0
    for t in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        s = i % STAGES
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)  # the stage's last reader is done
        mbarrier.expect(ready.index(s), in_desc.block_type.nbytes)
        pid_m = t // NG
        tma.async_copy_global_to_shared(in_desc, [pid_m * BM, (t - pid_m * NG) * GW], ready.index(s), ring.index(s))
        i += 1


@gluon.jit
def _ws_compute(out_desc, ring, ready, empty, outs, n_tiles, NG: gl.constexpr, BM: gl.constexpr, GW: gl.constexpr,
                STAGES: gl.constexpr, ALU: gl.constexpr):  # fmt: skip
    layout: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 32, 1], [4, 1, 1], [2, 1, 0])  # 4 consumer warps
    i = 0
    for t in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        s = i % STAGES
        mbarrier.wait(ready.index(s), (i // STAGES) & 1)
        w = ring.index(s).reshape([BM, GW // 4, 4]).load(layout)
        gl.thread_barrier()  # every consumer warp has read the stage before it is handed back
        mbarrier.arrive(empty.index(s))
        for _ in gl.static_range(ALU):
            w = (w ^ (w >> 7)) * MUL
        folded = gl.sum(w, axis=2)
        o = i % 2
        tma.store_wait(pendings=1)  # the out buffer's store of two tiles ago is done
        outs.index(o).store(folded)
        fence_async_shared()
        pid_m = t // NG
        tma.async_copy_shared_to_global(out_desc, [pid_m * BM, (t - pid_m * NG) * (GW // 4)], outs.index(o))
        i += 1
    tma.store_wait(pendings=0)


@gluon.jit
def _ws(in_desc, out_desc, n_tiles, NG: gl.constexpr, BM: gl.constexpr, GW: gl.constexpr, STAGES: gl.constexpr,
        ALU: gl.constexpr):  # fmt: skip
    ring = gl.allocate_shared_memory(gl.int32, [STAGES, BM, GW], in_desc.layout)
    outs = gl.allocate_shared_memory(gl.int32, [2, BM, GW // 4], out_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize(
        [
            (_ws_compute, (out_desc, ring, ready, empty, outs, n_tiles, NG, BM, GW, STAGES, ALU)),
            (_ws_load, (in_desc, ring, ready, empty, n_tiles, NG, BM, GW, STAGES)),
        ],
        [1],
        [24],
    )


def _layout(shape):
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=len(shape))


def ws_fn(x_sets, m, k, bm, gw, stages, alu, programs):
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from benchmarks.experimental.b12x.common import rotate

    dev = x_sets[0].device
    out = torch.empty(m, k // 8, dtype=torch.int32, device=dev)
    out_desc = TensorDescriptor(out, [m, k // 8], [k // 8, 1], [bm, gw // 4], _layout([bm, gw // 4]))
    descs = [
        TensorDescriptor(x.view(torch.int32), [m, k // 2], [k // 2, 1], [bm, gw], _layout([bm, gw])) for x in x_sets
    ]
    nxt = rotate(descs)
    ng = k // 2 // gw
    n_tiles = m // bm * ng
    grid = (min(n_tiles, programs),)
    return lambda: _ws[grid](nxt(), out_desc, n_tiles, ng, bm, gw, stages, alu, num_warps=4, maxnreg=128)


def pointer_fn(x_sets, m, k, bm, gw, alu, num_warps):
    import torch

    from benchmarks.experimental.b12x.common import rotate

    out = torch.empty(m, k // 8, dtype=torch.int32, device=x_sets[0].device)
    nxt = rotate(x_sets)
    grid = (m // bm * (k // 2 // gw),)
    return lambda: _pointer[grid](nxt(), out, m, k, bm, gw, alu, num_warps=num_warps)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", default=["4096x4096", "4096x7168"], help="MxK, M a multiple of 16, K of 1024")
    p.add_argument("--alu", nargs="+", type=int, default=[0, 4, 8, 12], help="xor-shift-multiply rounds a word")
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `benchmarks`
    from benchmarks.experimental.b12x.common import COPY_IMPL, int_dims, same_size_copy, sets_to_exceed_l2

    shapes = [int_dims(s, 2) for s in args.shapes]
    for s, dims in zip(args.shapes, shapes):
        if dims is None or dims[0] % 16 or dims[1] % 1024:
            p.error(f"--shapes takes MxK with M a multiple of 16 and K of 1024, got {s!r}")
    if any(a < 0 or a > 256 for a in args.alu):
        p.error(f"--alu takes rounds in [0, 256], got {args.alu}")
    import torch

    from benchmarks.experimental.b12x import bench_quantization as BQ

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling probe's timing rows
    from probe_nvfp4_skeleton import time_rows, write_rows

    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    gen = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for m, k in shapes:
        nbytes = 2 * m * k + m * k // 2  # the input, and a quarter of it written back
        n_sets = min(BQ.MAX_SETS, sets_to_exceed_l2(nbytes))
        xs = BQ._inputs(m, k, torch.bfloat16, n_sets, dev, gen)
        timed = [(COPY_IMPL, same_size_copy(nbytes, n_sets, dev, gen))]
        for alu in args.alu:
            timed.append((f"pointer 8x1024 4 warps alu {alu}", pointer_fn(xs, m, k, 8, 512, alu, 4)))
            for stages, per_sm in ((4, 3), (6, 2), (3, 3)):  # as many as fit: 128 registers, 16 KB a stage
                name = f"ws 16x512 {stages} stages {per_sm} an SM alu {alu}"
                timed.append((name, ws_fn(xs, m, k, 16, 256, stages, alu, per_sm * sms)))
        rows += time_rows(timed, n_sets, M=m, K=k)
    write_rows(args.json, rows, torch.cuda.get_device_name(dev))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
