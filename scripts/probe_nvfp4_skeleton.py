"""How much of the NVFP4 quantizer's time is its encode: the plan beside "skeletons" of it on the H200.

    python3 scripts/probe_nvfp4_skeleton.py [--shapes 4096x4096 4096x7168 16384x4096] [--json out.json]

A skeleton is the plan's memory program without the encode: the same grid (K-major or two-axis programs of
block_m rows x a group of column tiles), the same loads (`_kernel_pairs._load_pair_words`: a block's two
halves as 4 int32 words each, the whole group in flight at once as the preload tile has it) and the same
stores (one 8-byte word of codes a block, one scale byte at its swizzled offset: `_encodes._store_scales`),
with the codes and scales replaced by integer sums of the loaded words (2-3 instructions a block half instead
of the ~90 of the lane-table encode). Its output is not NVFP4: the probe times it, it checks nothing. Every row
is timed by CUDA graph replays rotating input sets past L2 (bench_quantization's graph timer), beside the
same-size copy, so the gap between the plan and its skeleton is the encode's cost (issue-bound or not) and the
gap between the skeleton and the copy is the memory program's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import triton
import triton.language as tl

from flashinfer.experimental.b12x._lib.triton_quant import grid_axes, grid_origin
from flashinfer.experimental.b12x.quantization.nvfp4._encodes import _store_scales
from flashinfer.experimental.b12x.quantization.nvfp4._kernel_pairs import _load_pair_words


@triton.jit
def _skeleton(
    x_ptr,
    packed_ptr,
    scales_ptr,
    m,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    GROUP_K: tl.constexpr,  # block_k x k_iters: the columns of one program, loaded at once
    K_MAJOR: tl.constexpr,
):
    NB: tl.constexpr = K // 16
    NG: tl.constexpr = ((K + 63) // 64 * 64 + GROUP_K - 1) // GROUP_K
    pid_m, pid_g = grid_origin(NG, K_MAJOR)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows64 = rows.to(tl.int64)
    ua, ub, bmask, blk = _load_pair_words(x_ptr, rows64, rows < m, pid_g, K, GROUP_K)
    wa = tl.sum(ua, axis=2)  # [rows, blocks]: a stand-in for the block's codes
    wb = tl.sum(ub, axis=2)
    words = wa.to(tl.uint64) | (wb.to(tl.uint64) << 32)
    offs = rows64[:, None] * NB + blk[None, :]
    tl.store(packed_ptr.to(tl.pointer_type(tl.uint64)) + offs, words, mask=bmask)
    _store_scales(scales_ptr, rows64, pid_g, (wa ^ wb) & 0xFF, NB, GROUP_K // 16, False)


def _compiled(k, block_m, group_k, k_major, num_warps, per_sm, arch=None):
    """The skeleton compiled for this device's arch (`_lib.triton_build`), its dynamic shared memory raised so
    that at most `per_sm` programs fit an SM (0: as compiled): the plan's occupancy without its registers.
    `arch`: the target (default: this device's)."""
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    from flashinfer.experimental.b12x._lib.arch import target_arch
    from flashinfer.experimental.b12x._lib.triton_build import aot_compile, aot_options

    aligned = [["tt.divisibility", 16]]
    signature = {"x_ptr": "*bf16", "packed_ptr": "*u8", "scales_ptr": "*u8", "m": "i32"}
    consts = {"K": k, "BLOCK_M": block_m, "GROUP_K": group_k, "K_MAJOR": k_major}
    signature.update({n: "constexpr" for n in consts})
    src = ASTSource(_skeleton, signature, consts, {(0,): aligned, (1,): aligned, (2,): aligned})
    ck = aot_compile(src, arch or target_arch(), aot_options(num_warps))
    if per_sm:
        shared = max(ck.metadata.shared, 233472 // per_sm - 1024 - 128)  # sm_90: 228 KB an SM, 1 KB a block
        ck.metadata = ck.metadata._replace(shared=shared)
        ck.packed_metadata = make_backend(ck.metadata.target).pack_metadata(ck.metadata)
    return ck, tuple(consts.values())


def skeleton_fn(x_sets, m, k, block_m, group_k, k_major, num_warps, per_sm=0):
    """A call of the skeleton on the next input set (rotating), writing one set of outputs."""
    import torch

    from benchmarks.experimental.b12x.common import rotate

    dev = x_sets[0].device
    packed = torch.empty(m, k // 2, dtype=torch.uint8, device=dev)
    scales = torch.zeros((m + 127) // 128 * 128 * ((k // 16 + 3) // 4 * 4), dtype=torch.uint8, device=dev)
    groups = triton.cdiv((k + 63) // 64 * 64, group_k)
    grid = grid_axes((m + 127) // 128 * 128 // block_m, groups, k_major, "skeleton")
    nxt = rotate(x_sets)
    ck, consts = _compiled(k, block_m, group_k, k_major, num_warps, per_sm)
    return lambda: ck[grid](nxt(), packed, scales, m, *consts, stream=torch.cuda.current_stream().cuda_stream)


SKELETONS = (  # (block_m, block_k x k_iters, K-major, warps, programs an SM (0: as many as fit))
    (8, 1024, True, 4, 0),  # the plan's mid tile's memory program
    (8, 1024, True, 4, 7),  # ... at the plan's occupancy (72 registers: 7 programs an SM)
    (8, 1024, True, 4, 5),
    (8, 1024, False, 4, 0),
    (8, 512, True, 4, 0),
    (8, 512, True, 4, 8),
    (8, 2048, True, 4, 0),
    (16, 1024, True, 8, 0),
    (8, 256, True, 4, 0),
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--shapes", nargs="+", default=["4096x4096", "4096x7168", "16384x4096"], help="MxK, K a multiple of 16"
    )
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `benchmarks`
    from benchmarks.experimental.b12x.common import COPY_IMPL, int_dims, rotate, same_size_copy, sets_to_exceed_l2

    shapes = [int_dims(s, 2) for s in args.shapes]
    for s, dims in zip(args.shapes, shapes):
        if dims is None or dims[1] % 16:
            p.error(f"--shapes takes MxK with K a multiple of 16, got {s!r}")
    import torch

    import b12x
    from benchmarks.experimental.b12x import bench_quantization as BQ
    from flashinfer.experimental.b12x._lib.quant import nvfp4_global_scale
    from flashinfer.experimental.b12x.quantization import nvfp4

    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for m, k in shapes:
        nbytes = BQ.nvfp4_bytes(m, k)
        n_sets = min(BQ.MAX_SETS, sets_to_exceed_l2(nbytes))
        xs = BQ._inputs(m, k, torch.bfloat16, n_sets, dev, gen)
        gs = nvfp4_global_scale(xs[0]).reshape(1)
        timed = [(COPY_IMPL, same_size_copy(nbytes, n_sets, dev, gen))]
        session = b12x.PreparationSession(dev)
        plan = nvfp4.plan(m, k)
        session.prepare([plan])
        out = nvfp4.allocate_outputs(plan, device=dev)
        nxt = rotate(xs)
        timed.append(("plan", lambda: nvfp4.run(plan=plan, x=nxt(), global_scale=gs, outputs=out)))  # noqa: B023
        for bm, gk, km, nw, per_sm in SKELETONS:
            name = f"skeleton {bm}x{min(gk, k)} {'K-major' if km else 'two-axis'} {nw} warps"
            name += f", {per_sm} an SM" if per_sm else ""
            timed.append((name, skeleton_fn(xs, m, k, bm, min(gk, triton.next_power_of_2(k)), km, nw, per_sm)))
        rows += time_rows(timed, n_sets, M=m, K=k)
        session.release(plan)
    write_rows(args.json, rows, torch.cuda.get_device_name(dev))
    return 0


def time_rows(timed, n_sets: int, **case) -> list:
    """Graph-time each (name, call) of `timed` (the first: the same-size copy), printing and returning rows with
    copy / this; a row that fails is said and skipped (a probe goes on). `case`: the keys every row carries and its
    printed label starts with (e.g. M=4096, K=4096)."""
    from benchmarks.experimental.b12x.common import time_graph_replay

    label = " ".join(f"{key}={value}" for key, value in case.items())
    rows, copy_us = [], None
    for name, fn in timed:
        try:
            us = time_graph_replay(fn, calls_per_graph=n_sets).median_us
        except Exception as e:
            print(f"{label} {name:40s} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        copy_us = us if copy_us is None else copy_us
        rows.append({**case, "impl": name, "us": us, "copy_over_us": copy_us / us})
        print(f"{label} {name:40s} {us:8.2f} us  copy / this {copy_us / us:.3f}", flush=True)
    return rows


def write_rows(path, rows, device: str) -> None:
    """The rows as JSON at `path` (nothing when None)."""
    if path:
        with open(path, "w") as f:
            json.dump({"rows": rows, "device": device}, f, indent=1)


if __name__ == "__main__":
    raise SystemExit(main())
