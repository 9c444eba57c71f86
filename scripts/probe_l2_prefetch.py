"""How much `_lib.l2_prefetch` speeds up a read after an L2 flush: the median time of `torch.amax` over an
fp32 tensor of each --mb size right after a 256 MB flush, cold and after a prefetch of it (each --configs entry)
plus a sync. A measurement, not a check (the gpu tests in spine/test_l2_prefetch_gpu.py check the kernel); it
was a printing test until session 41. Exits 1 on no GPU.

    python3 scripts/probe_l2_prefetch.py --mb 24 64
"""

from __future__ import annotations

import argparse
import statistics
import sys

CONFIGS = ("line", "bulk", "bulk16k")  # PrefetchConfig(), BULK, PrefetchConfig("bulk", 32, 16384)


def _config(name: str):
    from flashinfer.experimental.b12x._lib import l2_prefetch as P

    return {"line": P.PrefetchConfig(), "bulk": P.BULK, "bulk16k": P.PrefetchConfig("bulk", 32, 16384)}[name]


def read_us(x, flush, pf, reps: int) -> float:
    """Median µs of torch.amax over x right after an L2 flush (and, with pf, a prefetch + sync); the first of
    reps + 1 runs is dropped."""
    import torch

    out = torch.empty((), device=x.device)
    times = []
    for _ in range(reps + 1):
        flush.zero_()
        if pf is not None:
            pf.launch()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.amax(x, dim=0, out=out)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times[1:])


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, nargs="+", default=[24, 64], help="tensor sizes in MB (default 24 64)")
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS), help="prefetch configs")
    parser.add_argument("--reps", type=int, default=7, help="timed reads per row, median taken (default 7)")
    args = parser.parse_args(argv)
    if any(mb < 1 or mb > 1024 for mb in args.mb):
        parser.error(f"--mb takes sizes in 1..1024, got {args.mb}")
    if args.reps < 3:
        parser.error(f"--reps >= 3, got {args.reps}")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    import torch

    if not torch.cuda.is_available():
        print("no GPU")
        return 1
    from flashinfer.experimental.b12x._lib import l2_prefetch as P

    gen = torch.Generator(device="cuda").manual_seed(0)
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    for mb in args.mb:
        x = torch.randn(mb * 2**18, device="cuda", generator=gen)  # mb MB of fp32
        cold = read_us(x, flush, None, args.reps)
        print(f"{mb} MB read after L2 flush: {cold:.1f} us", flush=True)
        for name in args.configs:
            warm = read_us(x, flush, P.L2Prefetch.from_tensors([x], config=_config(name)), args.reps)
            print(f"{mb} MB read after flush + {name} prefetch + sync: {warm:.1f} us ({cold / warm:.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
