"""Time the two-pass GEMM path's passes one by one (H200 only; prints a table, no JSON).

    PYTHONPATH=. python3 scripts/probe_twopass.py [--m 2048] [--shapes 28672x4096 4096x4096]
        [--recipe nvfp4] [--tiles 128x128x2x2x3 ...] [--iters 30]

Per shape: the dequantize pass (plain and staged stores) over all N weight rows (one launch, the
whole weight: what the default's panels do in pieces), over the M activation rows (quantized recipes), and the 16-bit GEMM
alone on already-dequantized operands for each GEMM tiling (BMxBNxWMxWNxSTAGES, "p" suffix: the
pipelined K loop, "e" suffix: `Mma16Config.e4m3`, the GEMM on raw E4M3 operands as tensor-FP8 runs it,
whatever --recipe says), with TB/s for the dequantize pass (bytes read + written) and TFLOP/s for the GEMM.
CUDA events with L2 flushed (benchmarks/.../common.time_cuda_events), as bench_gemm's events rows.
What it answers: how much of a two-pass call is each pass, against the copy ceiling and the 16-bit
GEMM's throughput (issue #6, docs/performance.md session 21).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from benchmarks.experimental.b12x.common import time_cuda_events  # noqa: E402
from flashinfer.experimental.b12x.gemm._shared import launch as L  # noqa: E402
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_dequant as KD  # noqa: E402
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_mma16 as KM  # noqa: E402
from flashinfer.experimental.b12x.gemm.blockscaled import _twopass as TP  # noqa: E402
from flashinfer.experimental.b12x.gemm.blockscaled.api import _arch, _synthetic_rhs, synthetic_lhs  # noqa: E402


def tiling(text: str) -> KM.Mma16Config:
    """BMxBNxWMxWNxSTAGES with optional suffixes: "p" the pipelined K loop, then "e" raw E4M3 operands,
    then "bN" Mma16Config.minctas = N (registers budgeted for N CTAs an SM), e.g. 128x128x2x4x3pb2."""
    head, _, bound = text.partition("b")
    e4m3 = head.endswith("e")
    head = head.removesuffix("e")
    pipe = head.endswith("p")
    try:
        bm, bn, wm, wn, st = (int(v) for v in head.removesuffix("p").split("x"))
        minctas = int(bound) if bound else 0
    except ValueError:
        raise argparse.ArgumentTypeError(f"a tiling is BMxBNxWMxWNxSTAGES[p][e][bN], got {text!r}") from None
    return KM.Mma16Config(bm, bn, wm, wn, st, pipe=pipe, e4m3=e4m3, minctas=minctas)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=2048)
    ap.add_argument("--shapes", nargs="+", default=["28672x4096", "4096x4096"])
    ap.add_argument("--recipe", default="nvfp4", choices=KD.FORMATS)
    ap.add_argument("--tiles", nargs="+", type=tiling, default=[KM.Mma16Config(pipe=False), KM.Mma16Config()])
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    arch = _arch(dev)
    fmt, m = args.recipe, args.m
    deqs = {
        name: KD.compile_dequant(fmt, "bfloat16", KD.DequantConfig(staged=st), arch)
        for name, st in (("plain", False), ("staged", True))
    }
    ones = torch.ones(1, device=dev)
    print(f"two-pass passes, {fmt}, M = {m}, {torch.cuda.get_device_name(dev)}")
    for shape in args.shapes:
        n, k = (int(v) for v in shape.split("x"))
        w = _synthetic_rhs(fmt, n, k, dev)
        a, sa = synthetic_lhs(fmt, m, k, dev)
        b16 = torch.randn(n, k, device=dev).to(torch.bfloat16)
        a16 = torch.randn(m, k, device=dev).to(torch.bfloat16)
        b8, a8 = (t.to(torch.float8_e4m3fn).view(torch.uint8) for t in (b16, a16))
        c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        rows = (("B", w.values, w.scales, b16, n), ("A", a, sa, a16, m))
        for side, x, sf, out, r in rows:
            for name, deq in deqs.items():
                call = functools.partial(deq, x.view(torch.uint8), TP._bytes(sf), out, 0, r)
                t = time_cuda_events(call, iters=args.iters, device=dev)
                moved = x.numel() * x.element_size() + sf.numel() * sf.element_size() + out.numel() * 2
                rate = moved / t.median_us / 1e6
                print(f"{shape} dequant {side} [{r} x {k}] {name}: {t.median_us:8.1f} us  {rate:5.2f} TB/s")
        for cfg in args.tiles:
            gfmt, ga, gb = ("fp8_tensor", a8, b8) if cfg.e4m3 else (fmt, a16, b16)
            reason = KM.why_not(gfmt, gfmt, "bfloat16", cfg, arch)  # sm_90a: up to 227 KB of smem
            if reason is not None:
                print(f"{shape} gemm {cfg}: skipped ({reason})")
                continue
            g = KM.compile_mma16(gfmt, gfmt, "bfloat16", cfg, arch)
            t = time_cuda_events(
                functools.partial(g, ga, gb, c, ones, ones, ones, 1.0, 0, n), iters=args.iters, device=dev
            )
            print(f"{shape} gemm {cfg}: {t.median_us:8.1f} us  {2 * m * n * k / t.median_us / 1e6:6.1f} TFLOP/s")
        b = L.default_config("tiled128", n, k, fmt, a_fmt=fmt, arch=arch)
        print(f"{shape} default config: {b}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
