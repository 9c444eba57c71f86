"""Whole-step L2 weight prefetch (issue #10): does a side-branch prefetch make a cold weight read hit L2?

    python -m benchmarks.experimental.b12x.bench_l2_prefetch [--quick] [--variants line:256:8 bulk:64:1:4096]
        [--heads-us 0 5 10 20] [--json PATH]

One fp32 buffer the size of the llama-small block's NVFP4 weights (25.4 MB: qkv, o, gate_up, down
values + scales, in step order); the prefetch table holds its 8 spans in that order (8 ranges, as
the demo's DecodeStep would pass them). Every sample flushes L2 first (a 256 MB memset, untimed), so
the buffer starts in DRAM, as a real model's next layer does. CUDA events time only the named span:
- read:                         torch.amax over the buffer (a streaming read, the GEMMs' weight
                                 read without their math): the cold floor, bytes / time vs the
                                 copy ceiling (4.28 TB/s on the H200);
- prefetch <v>:                 the prefetch kernel alone: its issue time (it ends before DRAM does);
- prefetch <v> + read:          both on one stream, timed together (the serial alternative);
- read after side <v>, head H:  the prefetch forked onto a side stream, a spin of H µs on the main
                                 stream (torch.cuda._sleep, calibrated), then the read, timed alone:
                                 with enough head start the read is an L2 read;
- chain [<v>], gap G:           four reads (qkv, o, gate_up, down spans) with G µs spins between
                                 (the attention / glue kernels of a step), timed from the first
                                 read's start to the last one's end, without and with the prefetch
                                 forked just before: the step-shaped saving.
- gemm chain M, pdl, gap G:      the block's four real W4A16 NVFP4 decode GEMMs (gemm.blockscaled,
                                 prepared plans, plain epilogues, GemmQuery.pdl) with G µs spins
                                 between, timed from the first to the last, without and with the
                                 side prefetch of their 8 weight tensors: the gain where it counts.
A variant is `mode:threads:items_per_thread[:bulk_bytes]` (`_lib.l2_prefetch.PrefetchConfig` and
the grid choice of `L2Prefetch.from_tensors`). Always timed with events (a flush and a fork per
sample; --timer is ignored). Without --json the report goes to $OUT/b12x_l2_prefetch.json.
"""

from __future__ import annotations

import sys

import torch

from benchmarks.experimental.b12x.common import (
    FLUSH_BYTES,
    Case,
    Table,
    Timing,
    _one_at_a_time,
    ceilings,
    require_cuda,
    standard_parser,
    timing_kwargs,
    write_report,
)

MODULE = "benchmarks.experimental.b12x.bench_l2_prefetch"
# the llama-small block's weights (N, K) in step order; values N*K/2 bytes, scales N*K/16
BLOCK = (("qkv", 3072, 2048), ("o", 2048, 2048), ("gate_up", 11264, 2048), ("down", 2048, 5632))
DEFAULT_VARIANTS = ("line:256:8", "line:256:2", "line:128:32", "bulk:64:1:4096", "bulk:32:1:16384")


def parse_variant(text: str):
    """`mode:threads:items_per_thread[:bulk_bytes]` -> (PrefetchConfig, items_per_thread)."""
    from flashinfer.experimental.b12x._lib import l2_prefetch as P

    parts = text.split(":")
    if len(parts) not in (3, 4) or not all(p.isdigit() for p in parts[1:]):
        raise ValueError(f"--variants entries must be mode:threads:items_per_thread[:bulk_bytes], got {text!r}")
    cfg = P.PrefetchConfig(parts[0], int(parts[1]), int(parts[3]) if len(parts) == 4 else P.BULK.bulk_bytes)
    reason = P.why_not(cfg)
    if reason is not None:
        raise ValueError(f"--variants {text!r}: {reason}")
    return cfg, int(parts[2])


def block_spans(buf: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The buffer cut into the block's 8 spans (values, scales per GEMM) in step order (fp32 views)."""
    spans, at = [], 0
    for name, n, k in BLOCK:
        for part, nbytes in (("values", n * k // 2), ("scales", n * k // 16)):
            spans.append((f"{name}.{part}", buf[at // 4 : (at + nbytes) // 4]))
            at += nbytes
    return spans


@_one_at_a_time
def time_span(before, timed, after, *, warmup: int, iters: int, flush: torch.Tensor) -> Timing:
    """Per sample: flush L2, `before()`, event, `timed()`, event, `after()` (all on the current stream)."""
    for _ in range(warmup):
        flush.zero_()
        before()
        timed()
        after()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for start, end in zip(starts, ends):
        flush.zero_()
        before()
        start.record()
        timed()
        end.record()
        after()
    torch.cuda.synchronize()
    return Timing.from_samples([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)], "cuda_events+flush")


def gemm_chain(m: int, pdl: str, dev, gen):
    """The block's four GEMMs at M = m: (run(spin, gap_us), their weights' 8 tensors in step order)."""
    import b12x

    bs = b12x.gemm.blockscaled
    steps, tensors = [], []
    for _, n, k in BLOCK:
        w = bs.pack_weight(torch.randn(n, k, device=dev, generator=gen) * 0.02, recipe="nvfp4")
        plan = bs.plan(bs.GemmQuery("bfloat16", "nvfp4", n, k, max_m=m, m_values=(m,), pdl=pdl))
        a = torch.randn(m, k, device=dev, generator=gen).to(torch.bfloat16)
        steps.append((plan, a, w, torch.empty(m, n, dtype=torch.bfloat16, device=dev)))
        tensors += [w.values, w.scales]
    with b12x.PreparationSession(dev) as session:
        session.prepare([plan for plan, *_ in steps])

    def run(spin, gap):
        for i, (plan, a, w, out) in enumerate(steps):
            if i:
                spin(gap)
            bs.mm(a, w, out, plan=plan)

    return run, tensors


def calibrate_sleep(dev) -> float:
    """torch.cuda._sleep cycles per µs on this GPU (its spin counts SM clock cycles)."""
    cycles = 200_000
    torch.cuda._sleep(cycles)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(cycles)
    b.record()
    torch.cuda.synchronize(dev)
    return cycles / (a.elapsed_time(b) * 1e3)


class Rig:
    """The timing setup every row shares: flush buffer, spin, the side stream and its fork / join."""

    def __init__(self, dev, args) -> None:
        self.dev, self.kw = (
            dev,
            dict(flush=torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=dev), **timing_kwargs(args)),
        )
        self.table = Table(
            "whole-step L2 weight prefetch (llama-small block weights, L2 flushed per sample)", ceilings(dev, fp8=False)
        )
        self.per_us = calibrate_sleep(dev)
        self.side, self.main = torch.cuda.Stream(dev), torch.cuda.current_stream(dev)

    def spin(self, us: float) -> None:
        if us > 0:
            torch.cuda._sleep(int(us * self.per_us))

    def fork(self, pf, head: float = 0):
        """Before the timed span: the side stream waits on main, runs the prefetch; main spins `head`."""

        def before():
            self.side.wait_stream(self.main)
            with torch.cuda.stream(self.side):
                pf.launch()
            self.spin(head)

        return before

    def join(self) -> None:
        self.main.wait_stream(self.side)

    def add(self, case, impl, timed, before=None, after=None, *, peer=False, note="") -> None:
        nothing = lambda: None  # noqa: E731
        timing = time_span(before or nothing, timed, after or nothing, **self.kw)
        self.table.add(case, impl, timing, peer=peer, note=note)


def micro_rows(rig: Rig, variants: dict, args) -> None:
    """read / prefetch alone / one stream / head starts / chain of 4 reads (module docstring)."""
    from flashinfer.experimental.b12x._lib import l2_prefetch as P

    total = sum(n * k // 2 + n * k // 16 for _, n, k in BLOCK)
    gen = torch.Generator(device=rig.dev).manual_seed(0)
    buf = torch.randn(total // 4, device=rig.dev, generator=gen)  # random, never zeros
    spans = block_spans(buf)
    gemms, at = [], 0
    for _, n, k in BLOCK:  # one read per GEMM: its values and scales, adjacent in buf
        words = (n * k // 2 + n * k // 16) // 4
        gemms.append(buf[at : at + words])
        at += words
    out = torch.empty((), device=rig.dev)
    read = lambda: torch.amax(buf, dim=0, out=out)  # noqa: E731
    shape = {"MB": round(total / 1e6, 2), "ranges": len(spans)}
    case = Case("read", shape, bytes=total, ceiling="copy")
    rig.add(case, "torch.amax (cold)", read, peer=True)
    pfs = {}
    for name, (cfg, per_thread) in variants.items():
        pf = pfs[name] = P.L2Prefetch.from_tensors([t for _, t in spans], config=cfg, items_per_thread=per_thread)
        note = f"{pf.items} items, {pf.ctas} CTAs x {cfg.threads}"
        alone = Case("prefetch alone", shape, bytes=total, ceiling="copy")
        rig.add(alone, name, pf.launch, note=note + "; issue time (DRAM not waited)")
        rig.add(case, f"prefetch {name} + read (one stream)", lambda pf=pf: (pf.launch(), read()), note=note)
    for head in args.heads_us:
        hcase = Case("read after head start", {**shape, "head_us": head}, bytes=total, ceiling="copy")
        rig.add(hcase, "no prefetch", read, lambda h=head: rig.spin(h), peer=True)
        for name, pf in pfs.items():
            rig.add(hcase, f"side {name}", read, rig.fork(pf, head), rig.join)

    def chain(gap):
        def run():
            for i, g in enumerate(gemms):
                rig.spin(gap if i else 0)
                torch.amax(g, dim=0, out=out)

        return run

    for gap in args.gaps_us:
        ccase = Case("chain of 4 reads", {**shape, "gap_us": gap}, bytes=total, ceiling="copy")
        rig.add(ccase, "no prefetch", chain(gap), peer=True)
        for name, pf in pfs.items():
            rig.add(ccase, f"side {name}", chain(gap), rig.fork(pf), rig.join)


def gemm_rows(rig: Rig, variants: dict, args) -> None:
    """The block's four real decode GEMMs, without and with the side prefetch (module docstring)."""
    from flashinfer.experimental.b12x._lib import l2_prefetch as P

    gen = torch.Generator(device=rig.dev).manual_seed(1)
    for m in args.gemm_m:
        for pdl in args.gemm_pdl:
            run, tensors = gemm_chain(m, pdl, rig.dev, gen)
            wbytes = sum(t.nbytes for t in tensors)
            pfs = {
                name: P.L2Prefetch.from_tensors(tensors, config=cfg, items_per_thread=per_thread)
                for name, (cfg, per_thread) in variants.items()
            }
            for gap in args.gemm_gaps_us:
                gcase = Case("gemm chain", {"M": m, "pdl": pdl, "gap_us": gap}, bytes=wbytes, ceiling="copy")
                chain_fn = lambda run=run, gap=gap: run(rig.spin, gap)  # noqa: E731
                rig.add(gcase, "no prefetch", chain_fn, peer=True)
                for name, pf in pfs.items():
                    rig.add(gcase, f"side {name}", chain_fn, rig.fork(pf), rig.join)


def main(argv: list[str] | None = None) -> int:
    parser = standard_parser(__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), help="prefetch variants to time")
    parser.add_argument("--parts", nargs="+", choices=("micro", "gemm"), default=["micro", "gemm"], help="row groups")
    parser.add_argument("--heads-us", type=float, nargs="+", default=[0, 5, 10, 20], help="side-branch head starts")
    parser.add_argument("--gaps-us", type=float, nargs="+", default=[0, 4], help="spins between the chain's reads")
    parser.add_argument("--gemm-m", type=int, nargs="+", default=[1], help="token counts of the GEMM chain")
    parser.add_argument("--gemm-pdl", nargs="+", default=["prefetch"], help="GemmQuery.pdl of the GEMM chain")
    parser.add_argument("--gemm-gaps-us", type=float, nargs="+", default=[0, 3], help="spins between the GEMMs")
    args = parser.parse_args(argv)
    variants = {v: parse_variant(v) for v in args.variants}
    dev = require_cuda("bench_l2_prefetch", args.device)
    torch.cuda.set_device(dev)
    rig = Rig(dev, args)
    if "micro" in args.parts:
        micro_rows(rig, variants, args)
    if "gemm" in args.parts:
        gemm_rows(rig, variants, args)
    rig.table.print()
    print(f"(spin: {rig.per_us:.0f} cycles/us; chain rows include 3 gaps of gap_us; bytes = one read of the weights)")
    write_report(rig.table, args, "b12x_l2_prefetch.json", MODULE, argv, dev, {"sleep_cycles_per_us": rig.per_us})
    return 0


if __name__ == "__main__":
    sys.exit(main())
