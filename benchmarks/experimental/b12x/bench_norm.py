"""norm.mhc (hyper-connection mixing, multiplicity 4) against torch.compile of its reference.

    python -m benchmarks.experimental.b12x.bench_norm [--quick] [--timer graph] [--json PATH]

Cases: T in {1, 8, 64, 1024, 8192} tokens (--quick: 1 and 1024) at H = 7168 (--hidden), for
run_pre, run_post and run_post_pre, in the caller-buffer form (no allocation in the timed call).
Peer, timed in the same run: `torch.compile` of reference.py's function for the same entry point.

Bytes (the minimum an implementation must move; e = element size of the activations):
    pre      = T * (4H + H) * e + T * 80 + 96H * 4           residual in, y out, post/comb out, fn
    post     = T * (H + 4H + 4H) * e + T * 80                x and residual in, residual out, weights
    post_pre = T * (H + 4H + 4H + H) * e + T * 160 + 96H * 4
Ours moves more than that: pass 2 reads the residual again (4H * e per token). % of the copy ceiling
uses the minimum above; the targets are >= 75% of it at T >= 1024, >= 2x the peer, and run_post_pre
at T = 1 under 8 us. --sweep also times alternative tiles (plan overrides) to pick the heuristic.
Without --json the report goes to $OUT/b12x_bench_norm.json when $OUT is set.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import torch

from benchmarks.experimental.b12x.common import Case, Table, ceilings, measure, require_cuda, standard_parser

MODULE = "benchmarks.experimental.b12x.bench_norm"
TOKENS, QUICK_TOKENS = (1, 8, 64, 1024, 8192), (1, 1024)
OPS = ("pre", "post", "post_pre")
SCAL = dict(rms_eps=1e-6, hc_eps=1e-6, sinkhorn_iters=20)


def case_bytes(op: str, tokens: int, hidden: int, elem: int = 2) -> int:
    """The minimum bytes of one call (see the module docstring)."""
    fn_bytes = 96 * hidden * 4
    if op == "pre":
        return tokens * 5 * hidden * elem + tokens * 80 + fn_bytes
    if op == "post":
        return tokens * 9 * hidden * elem + tokens * 80
    if op == "post_pre":
        return tokens * 10 * hidden * elem + tokens * 160 + fn_bytes
    raise ValueError(f"op must be one of {OPS}, got {op!r}")


def sweep_configs():
    """Named alternatives to the heuristic (MhcConfig overrides) for --sweep."""
    from flashinfer.experimental.b12x.norm.mhc._config import ApplyConfig, MhcConfig, StreamConfig

    base = MhcConfig()
    return {
        "apply_t2": dataclasses.replace(base, apply_large=ApplyConfig(tokens=2, block_h=512, stages=4)),
        "apply_nopipe": dataclasses.replace(base, apply_large=ApplyConfig(tokens=4, block_h=256, stages=1)),
        "apply_small_t4": dataclasses.replace(base, apply_small=ApplyConfig(tokens=4, block_h=256, stages=4)),
        "pre_t32": dataclasses.replace(base, pre_large=StreamConfig(32, 32, 4, 3)),
        "pre_t64_s3": dataclasses.replace(base, pre_large=StreamConfig(64, 16, 2, 3)),
        "pre_t128_w2": dataclasses.replace(base, pre_large=StreamConfig(128, 8, 2, 4)),
        "post_pre_t16": dataclasses.replace(base, post_pre_large=StreamConfig(16, 32, 4, 2)),
        "ctas2": dataclasses.replace(base, ctas_per_sm=2),
        "ctas8": dataclasses.replace(base, ctas_per_sm=8),
        "small_t32": dataclasses.replace(base, pre_small=StreamConfig(32, 32, 4, 2), small_max_tokens=16),
    }


def _calls(mhc, reference, plan, ins, outs):
    """(ours, peer function, peer args) per op; ours writes the preallocated `outs`."""
    res, x, post, comb = ins["residual"], ins["x"], ins["post"], ins["comb"]
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    pre_out = dict(y_out=outs["y"], post_out=outs["post"], comb_out=outs["comb"])
    return {
        "pre": (
            lambda: mhc.run_pre(res, *mix, plan=plan, **pre_out, **SCAL),
            lambda *a: reference.mhc_pre(*a, **SCAL),
            (res, *mix),
        ),
        "post": (
            lambda: mhc.run_post(x, res, post, comb, plan=plan, out=outs["residual"]),
            reference.mhc_post,
            (x, res, post, comb),
        ),
        "post_pre": (
            lambda: mhc.run_post_pre(
                x, res, post, comb, *mix, plan=plan, residual_out=outs["residual"], **pre_out, **SCAL
            ),
            lambda *a: reference.mhc_post_pre(*a, **SCAL),
            (x, res, post, comb, *mix),
        ),
    }


def _as_tuple(v) -> tuple:
    return v if isinstance(v, tuple) else (v,)


def _agree(ours, peer) -> bool:
    """A sanity check before timing (not the accuracy test: tests/.../test_mhc_gpu.py is)."""
    return all(torch.allclose(a.float(), b.float(), rtol=0.05, atol=0.05) for a, b in zip(ours, _as_tuple(peer)))


def main(argv: list[str] | None = None) -> int:
    parser = standard_parser(__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[7168], help="hidden sizes")
    parser.add_argument(
        "--tokens",
        type=int,
        nargs="+",
        default=None,
        help="token counts; %(default)s means 1 8 64 1024 8192 (--quick: 1 1024)",
    )
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS), help="entry points to time")
    parser.add_argument("--sweep", action="store_true", help="also time the alternative tiles of sweep_configs()")
    args = parser.parse_args(argv)
    dev = require_cuda("bench_norm", args.device)
    torch.cuda.set_device(dev)

    import b12x
    from flashinfer.experimental.b12x.norm import mhc
    from flashinfer.experimental.b12x.norm.mhc import api, reference

    tokens = args.tokens or (QUICK_TOKENS if args.quick else TOKENS)
    for knob in ("recompile_limit", "cache_size_limit"):  # room for the peers' recompiles
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
    variants = {"b12x": None} | (sweep_configs() if args.sweep else {})
    ceil = ceilings(dev)
    table = Table(f"norm.mhc on {ceil.device_name} (timer: {args.timer})", ceil)
    checks, peers = [], {}
    for hidden in args.hidden:
        caps = mhc.Caps(device=dev, max_tokens=max(tokens), hidden_size=hidden)
        plans = {name: mhc.plan(caps, override=cfg) for name, cfg in variants.items()}
        with b12x.PreparationSession(dev) as session:
            session.prepare([p.request(name=name) for name, p in plans.items()])
        for t in tokens:
            gen = torch.Generator(device=dev).manual_seed(t)
            ins = api.synthetic_inputs(t, hidden, device=dev, generator=gen)
            outs = dict(
                residual=torch.empty(t, 4, hidden, dtype=torch.bfloat16, device=dev),
                y=torch.empty(t, hidden, dtype=torch.bfloat16, device=dev),
                post=torch.empty(t, 4, device=dev),
                comb=torch.empty(t, 4, 4, device=dev),
            )
            for op in args.ops:
                case = Case(op, {"T": t, "H": hidden}, bytes=case_bytes(op, t, hidden), ceiling="copy")
                result = None
                for name, p in plans.items():  # sweep variants are listed as peers: "vs X" > 1 means X is slower
                    ours, peer_fn, peer_args = _calls(mhc, reference, p, ins, outs)[op]
                    if name == "b12x":
                        result = tuple(r.clone() for r in _as_tuple(ours()))
                    table.add(
                        case, name, measure(ours, args), peer=name != "b12x", note="" if name == "b12x" else "sweep"
                    )
                if args.no_peers:
                    continue
                if op not in peers:  # automatic dynamic shapes: ~2 compiles per op, not one per T
                    peers[op] = torch.compile(peer_fn)
                try:
                    same = _agree(result, peers[op](*peer_args))
                    checks.append((f"{case.label}: agrees with the peer", same, 1.0 if same else 0.0))
                    peer_call = lambda op=op, a=peer_args: peers[op](*a)  # noqa: E731
                    table.add(case, "torch.compile(reference)", measure(peer_call, args), peer=True)
                except Exception as exc:  # the peer failing must not hide our numbers
                    print(f"peer failed on {case.label}: {type(exc).__name__}: {str(exc)[:200]}")
    torch.cuda.synchronize(dev)
    table.print()
    checks += target_checks(table)
    for name, ok, value in checks:
        print(f"check {name}: {'ok' if ok else 'MISS'} ({value:.3g})")
    path = args.json or (str(Path(os.environ["OUT"]) / "b12x_bench_norm.json") if os.environ.get("OUT") else None)
    if path:
        cmd = ["python", "-m", MODULE, *(sys.argv[1:] if argv is None else argv)]
        extra = {"checks": [{"name": n, "ok": ok, "value": v} for n, ok, v in checks], "scalars": SCAL}
        table.write_json(path, argv=cmd, device=dev, extra=extra)
        print(f"wrote {path}")
    return 0


def target_checks(table: Table) -> list[tuple[str, bool, float]]:
    """(name, met, value) for the issue's targets, on our default rows."""
    out = []
    for row in table.rows:
        if row.peer:
            continue
        t, d = row.case.shape["T"], table.row_dict(row)
        if t >= 1024 and d["pct_of_ceiling"] is not None:
            out.append((f"{row.case.label}: >= 75% of copy", d["pct_of_ceiling"] >= 75, d["pct_of_ceiling"]))
        ratio = d["ratios"].get("torch.compile(reference)")
        if t >= 1024 and ratio is not None:
            out.append((f"{row.case.label}: >= 2x torch.compile", ratio >= 2, ratio))
        if t == 1 and row.case.name == "post_pre":
            out.append((f"{row.case.label}: under 8 us", row.time_us < 8, row.time_us))
    return out


if __name__ == "__main__":
    sys.exit(main())
