"""Measure this GPU's ceilings and check the harness's clocks against each other.

    python -m benchmarks.experimental.b12x.bench_ceilings [--quick] [--mma] [--json PATH]

Ceilings: copy bandwidth (a large device-to-device copy, bytes read + written), cuBLAS bf16
``torch.mm`` at 8192^3 and cuBLASLt fp8 ``torch._scaled_mm`` (tensorwise scales), FLOPs 2*M*N*K;
with --mma also warp-level mma.sync (bf16 and e4m3) on registers only (`_mma_peak.py`), the most a
kernel built on warp MMA can reach (its rows' ratio column is against cuBLAS bf16).
Then every case is timed by CUDA events with L2 flushed ("events", ours) and by the peers:
"graph" (CUDA graph replay) and "events, hot L2" (no flush). What a sound harness shows:
- large copy / mm: graph ~ events (ratio ~1): both clocks agree where launches are not the cost;
- 16 MiB copy: the flushed copy is slower than the hot one (ratio < 1): the flush empties L2;
- 4 KiB add: graph is faster than events (ratio < 1): graphs remove launch overhead.
Without --json the report goes to $OUT/b12x_ceilings.json when $OUT is set.
"""

from __future__ import annotations

import sys

import torch

from benchmarks.experimental.b12x.common import (
    Case,
    Table,
    copy_fn,
    kernel_copy_fn,
    measure_ceilings,
    read_fn,
    require_cuda,
    standard_parser,
    time_cuda_events,
    time_graph_replay,
    timing_kwargs,
    write_report,
)

MODULE = "benchmarks.experimental.b12x.bench_ceilings"


def main(argv: list[str] | None = None) -> int:
    parser = standard_parser(__doc__.splitlines()[0])
    parser.add_argument("--copy-gib", type=float, default=2.0, help="GiB copied by the bandwidth ceiling")
    parser.add_argument("--no-fp8", action="store_true", help="skip the fp8 _scaled_mm ceiling")
    parser.add_argument(
        "--sizes-mb",
        type=float,
        nargs="*",
        default=[],
        help="also time, at each size (MB of bytes moved), a memcpy copy, an SM-kernel copy and a read "
        "(torch.amax), the rates a kernel of that size can be compared with (e.g. 43 66 300)",
    )
    parser.add_argument(
        "--mma",
        action="store_true",
        help="also time warp-level mma.sync (bf16 m16n8k16, e4m3 m16n8k32) in a register-only loop: the "
        "ceiling of every b12x kernel built on warp MMA",
    )
    parser.add_argument("--mma-iters", type=int, default=4096, help="loop rounds per warp of --mma (8 MMAs a round)")
    args = parser.parse_args(argv)
    dev = require_cuda("bench_ceilings", args.device)
    tk = timing_kwargs(args)
    graph_kw = {"iters": tk["iters"], "warmup": tk["warmup"], "device": dev}

    copy_bytes = int(args.copy_gib * 2**30)
    ceil = measure_ceilings(dev, copy_bytes=copy_bytes, fp8=not args.no_fp8, **tk)
    table = Table(f"b12x ceilings and clocks on {ceil.device_name}", ceil)
    gen = torch.Generator(device=dev).manual_seed(0)

    def bench(case: Case, fn, *, hot: bool = False) -> None:
        table.add(case, "events", time_cuda_events(fn, **tk, device=dev))
        if not args.no_peers:
            table.add(case, "graph", time_graph_replay(fn, **graph_kw), peer=True)
            if hot:
                table.add(case, "events, hot L2", time_cuda_events(fn, **tk, flush_l2=False, device=dev), peer=True)

    # copy: bytes = read + write of the tensor
    for nbytes, hot in ((copy_bytes, False), (16 * 2**20, True)):
        case = Case("copy", {"MiB": nbytes // 2**20}, bytes=2 * nbytes, ceiling="copy")
        bench(case, copy_fn(nbytes, dev, gen), hot=hot)

    # size-matched references: what a copy / a read of a kernel's own byte count reaches
    for mb in args.sizes_mb:
        moved = int(mb * 1e6)
        half = moved // 2
        bench(Case("copy_memcpy", {"MB": mb}, bytes=2 * half, ceiling="copy"), copy_fn(half, dev, gen))
        bench(Case("copy_kernel", {"MB": mb}, bytes=half // 16 * 32, ceiling="copy"), kernel_copy_fn(half, dev, gen))
        bench(Case("read_amax", {"MB": mb}, bytes=moved // 16 * 16, ceiling="copy"), read_fn(moved, dev, gen))
        torch.cuda.empty_cache()

    # mm: FLOPs = 2*M*N*K; bytes = A + B + C, each read or written once
    m = n = k = ceil.mm_shape[0]
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16, generator=gen)
    c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    shape = {"M": m, "N": n, "K": k}
    bench(
        Case("mm_bf16", shape, bytes=2 * (m * k + k * n + m * n), flops=2 * m * n * k, ceiling="bf16"),
        lambda: torch.mm(a, b, out=c),
    )
    if ceil.fp8_tflops is not None:
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=dev, dtype=torch.float32)
        bench(
            Case("mm_fp8", shape, bytes=m * k + k * n + 2 * m * n, flops=2 * m * n * k, ceiling="fp8"),
            lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
        )

    # warp-MMA issue ceilings: mma.sync on registers only (`_mma_peak`), FLOPs as the shape's 2 M N K
    if args.mma:
        from benchmarks.experimental.b12x import _mma_peak as MP
        from flashinfer.experimental.b12x._lib.arch import target_arch

        ctas = 4 * torch.cuda.get_device_properties(dev).multi_processor_count
        sink = torch.empty(ctas * MP.THREADS, device=dev, dtype=torch.float32)
        for kind in MP.KINDS:
            fn = MP.compile_peak(kind, target_arch(dev))
            case = Case(
                f"mma_sync_{kind}",
                {"ctas": ctas, "iters": args.mma_iters},
                flops=MP.flops(kind, ctas, args.mma_iters),
                ceiling="bf16",
            )
            table.add(
                case,
                "events",
                time_cuda_events(lambda fn=fn: fn(sink, args.mma_iters), **tk, flush_l2=False, device=dev),
            )

    # launch-bound: 1024 fp32 elements, bytes = 2 reads + 1 write
    x = torch.randn(1024, device=dev, generator=gen)
    y = torch.randn(1024, device=dev, generator=gen)
    z = torch.empty_like(x)
    bench(Case("add_tiny", {"n": 1024}, bytes=3 * 4 * 1024, ceiling="copy"), lambda: torch.add(x, y, out=z))
    torch.cuda.synchronize(dev)

    table.print()
    print(f"fp8: {ceil.fp8_note}")
    checks = [] if args.no_peers else clock_checks(table)
    for name, ok, value in checks:
        print(f"check {name}: {'ok' if ok else 'WARN'} ({value:.3f})")
    extra = {"checks": [{"name": n, "ok": ok, "value": v} for n, ok, v in checks]}
    write_report(table, args, "b12x_ceilings.json", MODULE, argv, dev, extra)
    return 0


def clock_checks(table: Table) -> list[tuple[str, bool, float]]:
    """(name, passed, value) for what a sound harness shows; see the module docstring."""
    out = []
    for row in table.rows:
        r, mib = table.ratios(row), row.case.shape.get("MiB", 0)
        if "graph" in r and (row.case.name.startswith("mm") or mib >= 1024):
            out.append((f"{row.case.label}: graph/events within 10%", abs(r["graph"] - 1) < 0.1, r["graph"]))
        if "events, hot L2" in r:
            out.append((f"{row.case.label}: hot L2 faster than flushed", r["events, hot L2"] < 1, r["events, hot L2"]))
        if "graph" in r and row.case.name == "add_tiny":
            out.append((f"{row.case.label}: graph faster than events", r["graph"] < 1, r["graph"]))
    return out


if __name__ == "__main__":
    sys.exit(main())
