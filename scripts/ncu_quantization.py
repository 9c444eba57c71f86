"""Run one quantization.nvfp4 (or --op mxfp8) case under Nsight Compute, bracketed so ncu profiles only its kernel.

    ncu --profile-from-start off --clock-control none --cache-control all \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section SchedulerStats --section Occupancy --section LaunchStats --csv \
        python3 scripts/ncu_quantization.py --m 16384 --k 7168 [--copy]

The input is bench_quantization's (row magnitudes over four decades); the plan's own selection runs
(at M >= its large_from, the large tile). Its bits are checked against the oracle first, then --runs
runs go between cudaProfilerStart and Stop. --copy adds a device copy of the same byte count inside
the bracket, so the same report holds the ceiling the quantizer is measured against.
"""

from __future__ import annotations

import argparse
import ast

import torch


def main() -> int:
    import b12x
    from benchmarks.experimental.b12x import bench_quantization as BQ
    from flashinfer.experimental.b12x._lib.quant import quantize_nvfp4, swizzle_scales
    from flashinfer.experimental.b12x.quantization import nvfp4
    from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nvfp4_kernel

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", choices=("nvfp4", "mxfp8"), default="nvfp4", help="mxfp8: the plan's selection only")
    p.add_argument("--m", type=int, default=16384)
    p.add_argument("--k", type=int, default=7168)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--copy", action="store_true", help="also profile a same-byte-count device copy")
    p.add_argument(
        "--config",
        type=ast.literal_eval,
        default=None,
        help="an NvFp4Config's fields as a tuple literal, run instead of the plan's selection "
        "(e.g. \"(8, 256, 4, 'pairs', False, False, 'halves', 4, False, True, 0, False, 0, True, True)\")",
    )
    args = p.parse_args()
    if min(args.m, args.k, args.runs) < 1 or args.k % 16:
        p.error(f"--m, --k, --runs >= 1 and --k a multiple of 16, got {args}")
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    (x,) = BQ._inputs(args.m, args.k, torch.bfloat16, 1, dev, gen)
    if args.op == "mxfp8":
        return _mxfp8(args, x, dev)
    gs = BQ.nvfp4_global_scale(x).reshape(1)
    override = None if args.config is None else nvfp4_kernel.NvFp4Config(*args.config)
    plan = nvfp4.plan(args.m, args.k, invocation=torch.bfloat16, override=override)
    b12x.PreparationSession(dev).prepare([plan])
    out = nvfp4.allocate_outputs(plan, device=dev)
    out.packed.fill_(0xFF)
    nvfp4.run(plan=plan, x=x, global_scale=gs, outputs=out)
    ref_packed, ref_scales = quantize_nvfp4(x, gs)
    ok = torch.equal(out.packed, ref_packed) and torch.equal(
        out.scales.view(torch.uint8), swizzle_scales(ref_scales, 0).view(torch.uint8)
    )
    run = lambda: nvfp4.run(plan=plan, x=x, global_scale=gs, outputs=out)
    return _profile(plan, ok, run, BQ.nvfp4_bytes(args.m, args.k), args, dev)


def _profile(plan, ok: bool, run, nbytes: int, args, dev) -> int:
    """Print the selection and its bits' verdict; if equal, --runs calls of `run` (each followed, with --copy,
    by a device copy of the same byte count) between cudaProfilerStart and Stop."""
    print(f"{plan.selection}; bits equal to the oracle: {ok}")
    if not ok:
        print("MISMATCH")
        return 1
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device=dev) if args.copy else None
    dst = torch.empty_like(src) if args.copy else None
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(args.runs):
        run()
        if args.copy:
            dst.copy_(src)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    return 0


def _mxfp8(args, x, dev) -> int:
    """The MXFP8 plan's selection on x, bits checked, then --runs runs (and the --copy) in the bracket."""
    import b12x
    from benchmarks.experimental.b12x import bench_quantization as BQ
    from flashinfer.experimental.b12x.quantization import mxfp8
    from flashinfer.experimental.b12x.quantization.mxfp8 import reference

    plan = mxfp8.plan((args.k, "bfloat16", args.m))
    b12x.PreparationSession(dev).prepare([plan])
    values = torch.empty(args.m, args.k, dtype=torch.float8_e4m3fn, device=dev)
    rows = torch.empty(args.m, args.k // 32, dtype=torch.uint8, device=dev)
    mma = torch.zeros((BQ.swizzled_size(args.m, args.k // 32),), dtype=torch.uint8, device=dev)
    mxfp8.quantize_rows(x, values, rows, mma, plan=plan)
    want_values, want_rows, _ = reference.quantize_rows(x)
    ok = torch.equal(values.view(torch.uint8), want_values.view(torch.uint8)) and torch.equal(rows, want_rows)
    run = lambda: mxfp8.quantize_rows(x, values, rows, mma, plan=plan)
    return _profile(plan, ok, run, BQ.mxfp8_bytes(args.m, args.k), args, dev)


if __name__ == "__main__":
    raise SystemExit(main())
