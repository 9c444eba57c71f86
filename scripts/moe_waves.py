"""moe.fused_moe's decode expert GEMMs in waves, from ptxas on the CPU: for each (shape, recipe, live T), the bucket the
heuristic serves T with, FC1's and FC2's registers a lane (each kernel compiled for --arch), CTAs an SM, the CTAs
that work (the hit experts' column tiles: k experts at T = 1, the expected distinct ones of uniform routing above)
and the waves they take on --sms SMs. A grid a little past a whole number of waves ("*") is where a register bound,
a span or a tile change can save a wave; session 64's `T1_DEQUANT` rule came from this count, by hand.

    python scripts/moe_waves.py --shapes 128x8x2048x768 512x10x4096x1024 --recipes w4a16 nvfp4 --tokens 1 4 16

Occupancy: `decode_waves.ctas_per_sm` (sm_90a's limits). CTAs of experts without rows only read their start and
exit, so they are not counted. Compiles each distinct kernel once (seconds each) into a fresh temporary cache."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # decode_waves beside it, however this file is loaded
from decode_waves import ctas_per_sm, waves_of  # noqa: E402

SOURCE = {"nvfp4": "modelopt_nvfp4", "mxfp4": "fp4_e8m0_k32"}


def shape(text: str) -> tuple[int, int, int, int]:
    parts = text.split("x")
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"--shapes takes ExKxHxI (e.g. 128x8x2048x768), got {text!r}")
    return tuple(int(p) for p in parts)


def hit_experts(e: int, k: int, t: int) -> float:
    """Expected distinct experts of T tokens' k routes each under uniform routing (exactly k at T = 1)."""
    return k if t == 1 else e * (1 - (1 - k / e) ** t)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", type=shape, default=[(128, 8, 2048, 768), (256, 8, 4096, 2048)])
    ap.add_argument("--recipes", nargs="+", default=["w4a16", "nvfp4"], help="quant modes (fused_moe Caps)")
    ap.add_argument("--weights", default="nvfp4", choices=sorted(SOURCE), help="expert weight format")
    ap.add_argument("--tokens", nargs="+", type=int, default=[1, 4, 16, 64])
    ap.add_argument(
        "--max-tokens", type=int, default=None, help="the plan's capacity (default: the largest --tokens, as bench_moe)"
    )
    ap.add_argument("--activation", default="silu")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--tail", type=float, default=0.35, help="mark grids whose last wave is at most this full")
    args = ap.parse_args(argv)
    if any(t < 1 for t in args.tokens):
        ap.error(f"--tokens takes live token counts >= 1, got {args.tokens}")
    max_tokens = args.max_tokens or max(args.tokens)
    if max_tokens < max(args.tokens):
        ap.error(f"--max-tokens must hold every --tokens value ({max(args.tokens)}), got {max_tokens}")

    os.environ["B12X_CACHE_DIR"] = tempfile.mkdtemp(prefix="moe_waves-")
    import torch

    from flashinfer.experimental.b12x._lib import cuda_binary
    from flashinfer.experimental.b12x.moe.fused_moe import _buckets, _routing, api
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X
    from flashinfer.experimental.b12x.moe.fused_moe.weights import plan_weights

    built: dict = {}

    def registers(fc, a_fmt, b_fmt, cfg, grid, span):
        key = (fc, a_fmt, b_fmt, cfg, grid, span)
        if key not in built:
            if fc == 1:
                fn = X.compile_fc1(a_fmt, b_fmt, args.activation, cfg, args.arch, grid, span)
            else:
                fn = X.compile_fc2(a_fmt, b_fmt, cfg, args.arch, grid, span)
            built[key] = cuda_binary.resources(fn.artifacts.CUBIN)
            print(f"  built {len(built)}: FC{fc} {a_fmt} x {b_fmt} {grid} span {span}", file=sys.stderr, flush=True)
        return built[key]

    print(
        f"{'E':>4s} {'k':>3s} {'H':>5s} {'I':>5s} {'recipe':7s} {'T':>4s}  {'bucket':16s} {'gemm':4s} {'A':9s}", end=""
    )
    print(f" {'reg':>4s} {'/SM':>4s} {'CTAs':>7s} {'waves':>6s}")
    for e, k, h, i in args.shapes:
        for mode in args.recipes:
            wp = plan_weights(
                quant_modes=(mode,),
                source_format=SOURCE[args.weights],
                activation=args.activation,
                params_dtype=torch.bfloat16,
                num_experts=e,
                hidden_size=h,
                intermediate_size=i,
            )
            caps = api.Caps(max_tokens=max_tokens, num_topk=k, device="cpu", weight_plan=wp, quant_mode=mode)
            buckets = api.heuristic_buckets(caps, arch=args.arch)
            compact = _routing.default_config(h).compact_grid
            for t in args.tokens:
                b = next(b for b in buckets if b.max_tokens >= t)
                label = f"<= {b.max_tokens}" + (" deq" if b.dequant else "") + (f" {b.fc1.fp4}" if not b.tiled else "")
                if b.tiled:
                    print(f"{e:4d} {k:3d} {h:5d} {i:5d} {mode:7s} {t:4d}  {label:16s} tiled (the grouped kernel)")
                    continue
                grid = _buckets.expert_grid(compact, e, k, t)
                fmts = api.gemm_formats(mode, b)
                hit = hit_experts(e, k, t)
                for fc, a_fmt, cfg, span, n in ((1, fmts[0], b.fc1, b.fc1_span, i), (2, fmts[1], b.fc2, b.fc2_span, h)):
                    logic = X.ExpertLogic(
                        fc, a_fmt, wp.weight_format, args.activation if fc == 1 else None, cfg, grid, span
                    )
                    res = registers(fc, a_fmt, wp.weight_format, cfg, grid, span)
                    per_sm = ctas_per_sm(res["REG"], cfg.warps, res.get("SHARED", 0) + cfg.red_bytes)
                    ctas = logic.grid_n(n) * hit
                    waves, mark = waves_of(ctas, per_sm, args.sms, args.tail)
                    print(
                        f"{e:4d} {k:3d} {h:5d} {i:5d} {mode:7s} {t:4d}  {label:16s} FC{fc}  {a_fmt:9s}"
                        f" {res['REG']:4d} {per_sm:4d} {ctas:7.0f} {waves:6.2f}{mark}"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
