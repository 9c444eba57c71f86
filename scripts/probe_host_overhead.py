"""Host cost of one eager call: `nvfp4.run` / `mxfp8.quantize_rows` at small M, where a call's GPU time is a few
microseconds and an eager caller waits on the host instead, and attention.paged's per-step `bind` (with and
without its host read of the live values, `check_values`) and `bind` + `run` at one and eight requests.

    python scripts/probe_host_overhead.py [--calls 500] [--profile]

Written in session 45, when one `bench_quantization --timer events --ms 1 16` run (H100) read 5 µs at NVFP4
K = 4096 and 23-85 µs for every case after it (the graph timer: 1.5-3 µs), to ask whether those cases spent longer
on the host. They did not: every case cost 18-21 µs of host time a call (27-30 µs synchronised), which the events
timer's 256 MB memset hides; rerun alone the bench read 4.8-6.4 µs (docs/performance.md, session 45). The
probe times the host side alone, per case in the bench's order, each case on a fresh plan as the bench makes it:
wall time a call over `--calls` back-to-back calls (no synchronisation inside the loop), and the same loop
with a synchronisation after each call (host plus GPU, the eager caller's latency). --open-session prepares as
the bench does (sessions left open); --profile prints cProfile's top entries for each case.

Session 46 added the attention rows. On this project's CPU machine (2 cores; a plan for 16 requests, 8 bound) bind
cost 61.6 µs a call (48.4 without the value read) before that session's changes: the passing path of its argument
checks built error strings, rebuilt the plan's scratch specs and sliced the scratch views afresh. After them it
costs 26.1 µs (14.1 with `check_values=False`).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

import torch


def _cases():
    for op in ("nvfp4", "mxfp8"):
        for k in (4096, 7168):
            for m in (1, 16):
                yield op, m, k
    for op in ("paged.bind", "paged.bind unchecked", "paged.bind+run"):  # M: requests, K: keys each
        for m in (1, 8):
            yield op, m, 1024


def _paged_call(op: str, batch: int, keys: int, dev, shared):
    """attention.paged decode at #8's heads (32 q / 8 KV, D 128, page 16) in a plan for 16 requests: bind (with or
    without its host read of the live values, `check_values`), or bind then run, as an eager serving step does."""
    from b12x.attention import paged

    pages_each = keys // 16
    items = paged.default_max_work_items(16, 8)
    plan = paged.plan(
        paged.Caps(
            device=str(dev), mode="decode", dtype="bfloat16", kv_dtype="bfloat16", num_q_heads=32, num_kv_heads=8,
            head_dim_qk=128, head_dim_vo=128, page_size=16, max_total_q=16, max_batch=16,
            max_page_table_width=pages_each, max_work_items=items,
            max_partial_rows=paged.default_max_partial_rows(items, 32), num_cache_pages=16 * pages_each,
            use_cuda_graph=dev.type == "cuda",
        )
    )  # fmt: skip
    _prepare(plan, dev, shared)
    cache = torch.randn(16 * pages_each, 16, 8, 128, device=dev, dtype=torch.bfloat16)
    kw = dict(
        q=torch.randn(batch, 32, 128, device=dev, dtype=torch.bfloat16), k_cache=cache, v_cache=cache,
        page_table=torch.arange(batch * pages_each, device=dev, dtype=torch.int32).reshape(batch, pages_each),
        cache_seqlens=torch.full((batch,), keys, device=dev, dtype=torch.int32),
        check_values=op != "paged.bind unchecked",
    )  # fmt: skip
    if op == "paged.bind+run":
        return lambda: paged.run(binding=paged.bind(plan, **kw))
    return lambda: paged.bind(plan, **kw)


def _prepare(plan, dev, shared):
    """Prepare in the shared open session (as bench_quantization does: one session a case, never closed) or in a
    session of its own, closed after."""
    import b12x

    if shared is not None:
        shared.prepare([plan])
        return
    with b12x.PreparationSession(dev) as session:
        session.prepare([plan])


def _call(op: str, m: int, k: int, dev, shared):
    """A prepared plan's eager call for (op, m, k), as bench_quantization builds it."""
    from b12x.quantization import mxfp8, nvfp4
    from flashinfer.experimental.b12x._lib.quant.swizzle import swizzled_size

    if op.startswith("paged"):
        return _paged_call(op, m, k, dev, shared)
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    if op == "nvfp4":
        plan = nvfp4.plan(m, k)
        _prepare(plan, dev, shared)
        out = nvfp4.allocate_outputs(plan, device=dev)
        gs = torch.ones(1, device=dev, dtype=torch.float32)
        return lambda: nvfp4.run(plan=plan, x=x, global_scale=gs, outputs=out)
    plan = mxfp8.plan(mxfp8.MxFp8Query(k, "bfloat16", m))
    _prepare(plan, dev, shared)
    values = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=dev)
    rows = torch.empty(m, k // 32, dtype=torch.uint8, device=dev)
    mma = torch.zeros(swizzled_size(m, k // 32), dtype=torch.uint8, device=dev)
    return lambda: mxfp8.quantize_rows(x, values, rows, mma, plan=plan)


def _loop(fn, calls: int) -> None:
    for _ in range(calls):
        fn()


def _sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=500, help="calls a timed loop (default: 500)")
    ap.add_argument(
        "--open-session",
        action="store_true",
        help="prepare in sessions left open, a new one a case, as bench_quantization does (default: a `with` "
        "block a case)",
    )
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (the reference backend: a smoke run)")
    ap.add_argument("--profile", action="store_true", help="print cProfile's top entries for each case")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print(
            "probe_host_overhead: --device cuda needs a CUDA device (--device cpu times the reference path)",
            file=sys.stderr,
        )
        return 2
    print(f"{'case':<30} {'host us/call':>13} {'synced us/call':>15}")
    for op, m, k in _cases():
        shared = None
        if args.open_session:
            import b12x

            shared = b12x.PreparationSession(dev)
        fn = _call(op, m, k, dev, shared)
        for _ in range(20):
            fn()
        _sync(dev)
        t = time.perf_counter()
        for _ in range(args.calls):
            fn()
        host = (time.perf_counter() - t) / args.calls * 1e6
        _sync(dev)
        t = time.perf_counter()
        for _ in range(args.calls):
            fn()
            _sync(dev)
        synced = (time.perf_counter() - t) / args.calls * 1e6
        print(f"{f'{op} M={m} K={k}':<30} {host:13.1f} {synced:15.1f}", flush=True)
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(_loop, fn, args.calls)
            _sync(dev)
            pstats.Stats(prof).sort_stats("tottime").print_stats(8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
