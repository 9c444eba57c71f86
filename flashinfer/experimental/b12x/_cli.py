"""The b12x command line: `python -m b12x {doctor,ops,cache,demo}` (demo lives in `_demo/`)."""

from __future__ import annotations

import argparse
import shutil
import sys


def _table(rows: list[tuple], header: tuple) -> str:
    rows = [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) if rows else len(str(h)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    out = [line(header), line(tuple("-" * w for w in widths))]
    out += [line(r) for r in rows]
    return "\n".join(out)


def _cmd_doctor(args) -> int:
    from ._api import list_ops
    from ._lib.support import toolchain_versions, why_unsupported

    versions = toolchain_versions()
    print("b12x doctor")
    for name in ("python", "torch", "cutlass-dsl", "tvm-ffi", "triton", "safetensors", "rich"):
        print(f"  {name:<12} {versions.get(name) or 'missing'}")
    gpu = "none"
    if versions.get("torch"):
        import torch

        print(f"  {'CUDA':<12} {torch.version.cuda or 'none (CPU build of torch)'}")
        if torch.cuda.is_available():
            from ._lib.arch import arch_for_cc

            i = torch.cuda.current_device()
            cc = torch.cuda.get_device_capability(i)
            gpu = f"{torch.cuda.get_device_name(i)} (cc {cc[0]}.{cc[1]}, target {arch_for_cc(cc) or 'unsupported'})"
    print(f"  {'GPU':<12} {gpu}")
    rows = []
    for meta in list_ops():
        reason = why_unsupported(meta, args.device)
        rows.append((meta.qualname, "yes" if reason is None else "no", reason or ""))
    print()
    print(_table(rows, ("op", "supported", "why not")) if rows else "no ops registered")
    return 0


def _cmd_ops(args) -> int:
    from ._api import list_ops

    rows = [
        (m.qualname, m.api_style, ",".join(m.archs) or "-", ",".join(m.dtypes) or "-", ", ".join(m.entry_points))
        for m in list_ops()
    ]
    print(_table(rows, ("op", "style", "archs", "dtypes", "entry points")) if rows else "no ops registered")
    return 0


def _cmd_cache(args) -> int:
    from ._lib.paths import cache_dir

    root = cache_dir()
    files = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
    if args.action == "show":
        size = sum(p.stat().st_size for p in files)
        print(f"cache dir: {root}\nfiles: {len(files)}\nbytes: {size}")
    elif args.action == "clear":
        if root.exists():
            shutil.rmtree(root)
        print(f"removed {len(files)} files from {root}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m b12x",
        description="b12x (flashinfer.experimental.b12x): kernels for local LLM inference on consumer Blackwell GPUs.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="toolchain, GPU, and which ops run here (and why not)")
    doctor.add_argument("--device", default=None, help="device to check (default: current CUDA device)")
    doctor.set_defaults(func=_cmd_doctor)
    ops = sub.add_parser("ops", help="list the op registry")
    ops.set_defaults(func=_cmd_ops)
    cache = sub.add_parser("cache", help="show or clear the compile cache ($B12X_CACHE_DIR)")
    cache.add_argument("action", nargs="?", default="show", choices=("show", "clear"), help="default: show")
    cache.set_defaults(func=_cmd_cache)
    _add_demo(sub)
    return parser


def _add_demo(sub) -> None:
    try:
        from ._demo import add_parser
    except ImportError as exc:  # only while the demo module does not exist in this tree
        if "_demo" not in str(exc):
            raise
        return
    add_parser(sub)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
