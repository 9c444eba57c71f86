"""The decode heuristic's grids in waves, from ptxas on the CPU: for each (format, tokens, epilogue, N, K), the
config `default_config` / `fused_config` gives, its registers a lane (the kernel compiled for --arch, cached by
config), CTAs an SM, the grid's CTAs and the waves they take on --sms SMs. A grid a little past a whole number of
waves is where a register bound, an unroll or a warp count can save a wave (sessions 52-54's wave rules came from
such a scan); the table marks those with "*".

    python scripts/decode_waves.py --fmt nvfp4 mxfp4 --m 1 16 --k 4096 --n 4096:16384:1024 [--epilogue silu_mul]

Occupancy is bounded by registers (allocated 256 a warp, rounded from 8 a lane), 64 warps and 32 CTAs an SM, and
shared memory (the compiled kernel's static bytes plus the K-split reduction's, against 227 KB): the H100's and
H200's sm_90a limits. It compiles each distinct config once, seconds each, into a fresh temporary cache (a kernel
loaded from the disk cache carries no cubin to read)."""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

SMEM_BYTES = 227 * 1024


def ctas_per_sm(regs: int, warps: int, smem: int) -> int:
    """CTAs of `warps` warps an SM at `regs` registers a lane and `smem` shared bytes a CTA (sm_90a limits)."""
    per_warp = math.ceil(regs * 32 / 256) * 256
    by_regs = (65536 // per_warp) // warps if per_warp else 32
    by_smem = SMEM_BYTES // smem if smem else 32
    return max(0, min(by_regs, 64 // warps, 32, by_smem))


def waves_of(ctas: float, per_sm: int, sms: int, tail: float) -> tuple[float, str]:
    """(waves, mark) of a grid of `ctas` CTAs at `per_sm` an SM on `sms` SMs: mark "*" when it runs past a whole
    number of waves by at most `tail` of one (a wave a register bound, unroll or tile change might save), else " "."""
    waves = ctas / (per_sm * sms) if per_sm else float("inf")
    part = waves - math.floor(waves) if per_sm else 0.0
    return waves, "*" if waves > 1 and 0 < part <= tail else " "


def span(text: str) -> list[int]:
    """'4096:16384:1024' (start:stop:step, stop included) or one value."""
    parts = [int(p) for p in text.split(":")]
    if len(parts) == 1:
        return parts
    if len(parts) != 3 or parts[2] <= 0:
        raise argparse.ArgumentTypeError(f"--n takes N or START:STOP:STEP with STEP > 0, got {text!r}")
    return list(range(parts[0], parts[1] + 1, parts[2]))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fmt", nargs="+", default=["nvfp4"], help="weight formats (W4A16: bf16 activations)")
    ap.add_argument("--m", nargs="+", type=int, default=[1, 16], help="tokens (picks the decode bucket)")
    ap.add_argument("--k", nargs="+", type=int, default=[4096])
    ap.add_argument("--n", nargs="+", type=span, default=[span("4096:16384:2048")], help="N or START:STOP:STEP")
    ap.add_argument("--epilogue", nargs="+", default=["none"], help="none (the plain kernel), silu_mul, residual")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--tail", type=float, default=0.35, help="mark grids whose last wave is at most this full")
    args = ap.parse_args(argv)
    if any(m < 1 or m > 64 for m in args.m):
        ap.error(f"--m takes decode token counts 1..64, got {args.m}")

    os.environ["B12X_CACHE_DIR"] = tempfile.mkdtemp(prefix="decode_waves-")
    from flashinfer.experimental.b12x._lib import cuda_binary
    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode_fused as F

    built: dict = {}

    def resources(fmt, cfg, fused):
        key = (fmt, cfg)
        if key not in built:
            if fused:
                art = F.compile_decode_fused("bfloat16", fmt, "bfloat16", cfg, args.arch).artifacts
            else:
                art = KD.compile_decode("bfloat16", fmt, "bfloat16", cfg, args.arch).artifacts
            built[key] = cuda_binary.resources(art.CUBIN)
            print(f"  built {len(built)}: {fmt} {cfg}", file=sys.stderr, flush=True)
        return built[key]

    head = f"{'fmt':6s} {'ep':8s} {'M':>3s} {'N':>6s} {'K':>6s}  {'config':44s} {'reg':>4s} {'stk':>4s} {'/SM':>4s}"
    print(head + f" {'CTAs':>6s} {'waves':>6s}")
    for fmt in args.fmt:
        for ep in args.epilogue:
            for m in args.m:
                for k in args.k:
                    for n in sorted({n for ns in args.n for n in ns}):
                        bucket = L.bucket_for(m)
                        if ep == "none":
                            cfg, fused = L.default_config(bucket, n, k, fmt, a_fmt="bfloat16", arch=args.arch), False
                            d = cfg
                        else:
                            cfg = L.fused_config(bucket, n, k, fmt, "bfloat16", ep, "off", arch=args.arch)
                            fused, d = True, cfg.decode
                        res = resources(fmt, cfg, fused)
                        smem = res.get("SHARED", 0) + d.red_bytes
                        per_sm = ctas_per_sm(res["REG"], d.warps, smem)
                        ctas = d.ctas(n)
                        waves, mark = waves_of(ctas, per_sm, args.sms, args.tail)
                        knobs = f"w{d.warps} t{d.tiles} wn{d.wn} u{d.unroll} mc{d.minctas} {d.fp4}"
                        knobs += " ashare" if d.ashare else ""
                        print(
                            f"{fmt:6s} {ep:8s} {m:3d} {n:6d} {k:6d}  {knobs:44s} {res['REG']:4d} {res.get('STACK', 0):4d}"
                            f" {per_sm:4d} {ctas:6d} {waves:6.2f}{mark}"
                        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
