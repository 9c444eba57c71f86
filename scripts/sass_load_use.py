"""Global loads whose result a loop reads within a few instructions: the wait session 47 found in attention's decode
loop (the page id loaded an iteration ahead, then clamped by the very next instruction, so every warp stalled on
the page-table load each iteration; fp8 -1.6 to -4.7% once the clamp moved to the address).

    python3 scripts/sass_load_use.py [--window 8] [--arch sm_90a] [--only attention gemm moe quant]

For each kernel it lists, per loop (a backward branch and its target label), the `LDG` instructions whose
destination registers an instruction of the same loop reads within `--window` instructions. A short distance is
not always a stall (other warps may hide it, the load may be meant to be waited on, e.g. a loop's last chunk),
but in a kernel of one or two CTAs an SM it is the first place to look, and it is a defect where the load was
issued for a later iteration (a prefetch, as attention's page id was): the read then undoes the prefetch. Loads
for the iteration that issues them (the decode GEMM's block scales, converted 7 instructions later) wait anyway.
CPU only (compiles, never launches); `load_uses` takes any `nvdisasm -c` text.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NamedTuple

_LABEL = re.compile(r"^(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\b.*`\((\.L_x_\d+)\)")
_LDG = re.compile(r"^(@!?U?P\w+\s+)?LDG(\.[\w]+)*\s+(R\d+)")
_REG = re.compile(r"\bR(\d+)(\.64|\.reuse)?\b")
_NO_DEST = ("ST", "RED", "ATOM", "BRA", "BAR", "EXIT", "RET", "CALL", "LDGSTS", "SYNCS", "DEPBAR", "LDGDEPBAR")


class LoadUse(NamedTuple):
    loop: str  # the loop's label
    load_line: int  # index into the instruction list
    load: str
    use_line: int
    use: str

    @property
    def distance(self) -> int:
        return self.use_line - self.load_line


def parse(sass_text: str) -> tuple[list[str], dict[str, int]]:
    """(instructions without addresses or ';', {label: index of the instruction after it}) of nvdisasm -c text."""
    ins, labels = [], {}
    for line in sass_text.splitlines():
        m = _LABEL.match(line.strip())
        if m:
            labels[m.group(1)] = len(ins)
        elif "*/" in line:
            ins.append(line.split("*/", 1)[-1].split(";")[0].strip())
    return ins, labels


def loops(ins: list[str], labels: dict[str, int]) -> list[tuple[str, int, int]]:
    """(label, first, last) of each backward branch: the instructions first..last form its loop body."""
    out = []
    for i, s in enumerate(ins):
        m = _BRANCH.search(s)
        if m and m.group(1) in labels and labels[m.group(1)] <= i:
            out.append((m.group(1), labels[m.group(1)], i))
    return out


def _width(opcode: str) -> int:
    """Registers a load of this opcode writes."""
    return 4 if ".128" in opcode else 2 if ".64" in opcode else 1


def _reads(s: str) -> set[int]:
    """The registers instruction s reads (its destination, the first operand, left out where it has one)."""
    body = re.sub(r"^@!?U?P\w+\s+", "", s)
    opcode, _, operands = body.partition(" ")
    parts = [p.strip() for p in operands.split(",")]
    sources = parts if opcode.startswith(_NO_DEST) else parts[1:]
    regs = set()
    for p in sources:
        for m in _REG.finditer(p):
            n = int(m.group(1))
            regs.update((n, n + 1) if m.group(2) == ".64" or ".64]" in p else (n,))
    return regs


def load_uses(sass_text: str, window: int = 8) -> list[LoadUse]:
    """Each LDG inside a loop whose destination an instruction of that loop reads within `window` instructions (the
    first such read; the loop's branch ends the search)."""
    ins, labels = parse(sass_text)
    found = []
    for label, first, last in loops(ins, labels):
        for i in range(first, last + 1):
            m = _LDG.match(ins[i])
            if not m:
                continue
            base = int(m.group(3)[1:])
            dest = set(range(base, base + _width(ins[i].split()[1] if m.group(1) else ins[i].split()[0])))
            for j in range(i + 1, min(last, i + window) + 1):
                if _reads(ins[j]) & dest:
                    found.append(LoadUse(label, i, ins[i], j, ins[j]))
                    break
    return found


def _kernels(only):
    """(name, compiled) of the library's main CuTe kernels at their heuristic configs, sm_90a / this arch."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if "attention" in only:
        from attention_ptx_fingerprints import caps

        from flashinfer.experimental.b12x.attention import paged

        for n, ctx, kv in ((1, 32768, "float8_e4m3fn"), (8, 8192, "float8_e4m3fn"), (32, 1024, "float8_e4m3fn"),
                           (1, 32768, "bfloat16"), (8, 8192, "bfloat16"), (32, 1024, "bfloat16")):  # fmt: skip
            plan = paged.plan(caps(n=n, ctx=ctx, kv_dtype=kv))
            for i, (fn, args) in enumerate(plan.kernels(plan.heuristic(ARCH), ARCH)):
                yield f"attention decode {n} x {ctx} {kv} #{i}", fn(*args)
    if "gemm" in only or "moe" in only:
        from gemm_decode_ptx_fingerprints import configs, moe_configs

        from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
        from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode_fused as F

        if "gemm" in only:
            compile_fn = {"plain": KD.compile_decode, "fused": F.compile_decode_fused}
            for name, (kind, cfg) in configs().items():
                if name.startswith("plain/decode") or name.startswith("fused/silu"):
                    yield f"gemm {name}", compile_fn[kind]("bfloat16", "nvfp4", "bfloat16", cfg, ARCH)
        if "moe" in only:
            from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

            for name, (fc, cfg, span) in moe_configs().items():
                if fc == 1:
                    yield name, X.compile_fc1("bfloat16", "nvfp4", "silu", cfg, ARCH, span=span)
                else:
                    yield name, X.compile_fc2("bfloat16", "nvfp4", cfg, ARCH, span=span)


ARCH = "sm_90a"


def main(argv=None) -> int:
    global ARCH
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--window", type=int, default=8, help="instructions after a load that count as 'at once'")
    p.add_argument("--arch", default="sm_90a", choices=("sm_90a", "sm_120a"))
    p.add_argument("--only", nargs="+", default=["attention", "gemm", "moe"], choices=("attention", "gemm", "moe"))
    args = p.parse_args(argv)
    if args.window < 1:
        p.error(f"--window must be >= 1 instruction, got {args.window}")
    ARCH = args.arch
    from flashinfer.experimental.b12x._lib import cuda_binary as CB

    for name, compiled in _kernels(args.only):
        hits = load_uses(CB.sass(compiled.artifacts.CUBIN), args.window)
        print(f"{name}: {len(hits)} load(s) read within {args.window} instructions inside a loop", flush=True)
        for h in hits:
            print(f"    {h.loop} +{h.distance}: {h.load[:60]}  ->  {h.use[:60]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
