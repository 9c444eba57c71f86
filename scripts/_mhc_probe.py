"""What the one-pass pre probes share (`probe_group_barrier.py`, `probe_mhc_ring.py`): their command line, the
block count, the tolerance their y is checked with, and the benchmarks' timer and ceilings."""

import argparse
import sys
from pathlib import Path


def rounds_for(tokens: int, groups: int, bt: int) -> int:
    """Rounds of `groups` blocks of bt tokens that cover `tokens`."""
    return -(-tokens // (groups * bt))


def close(y, want, *, atol: float = 2**-12) -> bool:
    """y within bf16 rounding of the reference (the kernels sum in another order, so a value may round the other
    way)."""
    import torch

    return bool(torch.allclose(y.float(), want.float(), rtol=2**-7, atol=atol))


def bench_common():
    """benchmarks/experimental/b12x/common.py, the repository root first on sys.path (its timer and ceilings)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.experimental.b12x import common

    return common


def parser(doc: str, hidden_help: str) -> argparse.ArgumentParser:
    """--hidden, --tokens, --reps, --json (`check` validates what every probe needs of them)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=7168, help=hidden_help)
    p.add_argument("--tokens", type=int, nargs="+", default=[1024, 8192], help="T values")
    p.add_argument("--reps", type=int, default=15, help="timed launches a row (median)")
    p.add_argument("--json", default=None, help="also write the rows here")
    return p


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if min(args.tokens) < 1 or args.reps < 3:
        p.error(f"--tokens must be >= 1 and --reps >= 3, got {args.tokens} / {args.reps}")


def write_json(path: str | None, rows: list, ceiling: float, device: str) -> None:
    """The rows, the copy ceiling they are a share of and the device, to `path` (nothing without one)."""
    if path:
        import json

        with open(path, "w") as f:
            json.dump({"rows": rows, "ceiling_tb_s": ceiling, "device": device}, f, indent=1)
