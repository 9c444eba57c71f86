"""What an e4m3 -> fp16 conversion costs on this GPU: the hardware cvt against an integer-pipe rewrite.

    python3 scripts/probe_e4m3_convert.py [--iters 4096] [--ghz 1.98] [--json out.json]

The fp8 decode kernel converts every K / V byte with `cvt.rn.f16x2.e4m3x2` (SASS `F2FP.F16.E4M3.UNPACK_B`, 128 a
32-key sub-tile a thread: session 34), and that chain, not registers or MMAs, sets its pace at small batch. An
e4m3 byte's fp16 image is its sign at bit 15 and its 7 other bits shifted left by 7 (exact for normals and
subnormals alike), worth 2^-8 of the byte's value: the 2^8 could fold into the descales. `INT_ASM` builds two such
f16x2 registers from four bytes with shifts and masks (bytes 0, 2 in the first, 1, 3 in the second: the kernel's
k-slot order would change with it). `int_convert_reference` is the same arithmetic in Python; the CPU tests check
it against torch's e4m3 values on all 256 codes.

Each row runs `--iters` dependent conversions a thread (the output of one feeds the next) over `chains`
independent words a thread, `warps` warps a program, one wave of programs: chains 8 at 16 warps an SM measures
the issue rate (results an SM a cycle), chains 1 at one warp an SM the dependent latency (cycles a step).
"none" is the same loop without a conversion (an xor and an add), so its time is the loop's own. The chain adds
each step's xor of both results to its input: without that add the compiler folds the integer rewrite's
shifts and masks across steps into one map (session 34's first build: 80 SASS instructions for 64 steps). Nothing is
checked on the GPU: this is a timing probe.
"""

from __future__ import annotations

import argparse
import json
import sys

import triton
import triton.language as tl

F2FP_ASM = "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi; }"
INT_ASM = (  # $1: bytes 1, 3 (already at bits 8-15 / 24-31); $0: bytes 0, 2 (moved there by << 8)
    "{ .reg .b32 t, a;"
    " and.b32 a, $2, 0x7F007F00; shr.b32 a, a, 1; and.b32 t, $2, 0x80008000; or.b32 $1, t, a;"
    " shl.b32 t, $2, 8; and.b32 a, t, 0x7F007F00; shr.b32 a, a, 1; and.b32 t, t, 0x80008000; or.b32 $0, t, a; }"
)
NONE_ASM = "{ xor.b32 $0, $2, 0x5A5A5A5A; add.u32 $1, $2, 1; }"
MODES = {"f2fp": F2FP_ASM, "int": INT_ASM, "none": NONE_ASM}
ROWS = (  # (chains a thread, warps a program, programs an SM)
    (8, 16, 1),  # issue rate: 16 warps an SM, 8 independent words each
    (4, 8, 1),
    (1, 1, 1),  # dependent latency: one warp an SM, one chain
)


def int_convert_reference(word: int) -> tuple[int, int]:
    """`INT_ASM` on one 32-bit word, in Python: (f16x2 of bytes 0 and 2, f16x2 of bytes 1 and 3) as integers."""
    hi = (word & 0x80008000) | ((word & 0x7F007F00) >> 1)
    t = (word << 8) & 0xFFFFFFFF
    lo = (t & 0x80008000) | ((t & 0x7F007F00) >> 1)
    return lo, hi


@triton.jit
def _convert_loop(x_ptr, out_ptr, ITERS: tl.constexpr, CHAINS: tl.constexpr, ASM: tl.constexpr, WARPS: tl.constexpr):
    n: tl.constexpr = 32 * WARPS * CHAINS
    offs = tl.program_id(0) * n + tl.arange(0, n)
    x = tl.load(x_ptr + offs)
    acc = tl.zeros([n], dtype=tl.uint32)
    for _ in range(ITERS):
        lo, hi = tl.inline_asm_elementwise(ASM, "=r,=r,r", [x], dtype=(tl.uint32, tl.uint32), is_pure=True, pack=1)
        x = (lo ^ hi) + x  # the next step depends on both results; the add keeps the compiler from folding the
        # bitwise steps of a chain into one (shifts, masks and xors compose into a single linear map)
        acc += lo
    tl.store(out_ptr + offs, acc ^ x)


def _compiled(mode: str, iters: int, chains: int, warps: int, arch=None):
    """The loop compiled for `arch` (default: this device's) through `_lib.triton_build`."""
    from triton.compiler import ASTSource

    from flashinfer.experimental.b12x._lib.arch import target_arch
    from flashinfer.experimental.b12x._lib.triton_build import aot_compile, aot_options

    consts = {"ITERS": iters, "CHAINS": chains, "ASM": MODES[mode], "WARPS": warps}
    signature = {"x_ptr": "*u32", "out_ptr": "*u32", **{n: "constexpr" for n in consts}}
    src = ASTSource(_convert_loop, signature, consts, {})
    return aot_compile(src, arch or target_arch(), aot_options(warps)), tuple(consts.values())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=4096, help="dependent conversions a chain (>= 64)")
    p.add_argument("--ghz", type=float, default=1.98, help="the SM clock the cycle columns assume (H200: 1.98)")
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args(argv)
    if args.iters < 64:
        p.error(f"--iters must be >= 64 (the loop must outlast its launch), got {args.iters}")
    import torch

    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    dev = torch.device("cuda")
    sms, ghz = torch.cuda.get_device_properties(dev).multi_processor_count, args.ghz
    rows = []
    for chains, warps, per_sm in ROWS:
        programs = sms * per_sm
        words = torch.randint(0, 2**31, (programs * 32 * warps * chains,), dtype=torch.int64, device=dev)
        x = words.to(torch.uint32)
        out = torch.empty_like(x)
        for mode in MODES:
            ck, consts = _compiled(mode, args.iters, chains, warps)
            stream = torch.cuda.current_stream().cuda_stream
            for _ in range(3):
                ck[(programs, 1, 1)](x, out, *consts, stream=stream)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                ck[(programs, 1, 1)](x, out, *consts, stream=stream)
            end.record()
            torch.cuda.synchronize()
            us = start.elapsed_time(end) * 100.0  # a launch, µs
            cycles = us * 1e3 * ghz
            steps = args.iters
            row = {
                "mode": mode, "chains": chains, "warps": warps, "per_sm": per_sm, "us": us,
                "cycles_a_step": cycles / steps,  # a chain's step (latency rows: one warp an SM)
                "values_an_sm_a_cycle": 4 * steps * chains * 32 * warps * per_sm / cycles,
            }  # fmt: skip
            rows.append(row)
            print(f"{mode:5s} chains {chains} x {warps} warps x {per_sm} an SM: {us:9.1f} us, "
                  f"{row['cycles_a_step']:7.2f} cycles a step, {row['values_an_sm_a_cycle']:7.1f} values an SM a cycle",
                  flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "device": torch.cuda.get_device_name(dev), "sm_ghz": ghz}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
