"""Session 47's rule for how far NVFP4's preload tile runs (`_dispatch.MID_MAX_ELEMENTS`), applied to benchmark
reports, so that the decision is the rule written before the run and not a reading of it afterwards
(docs/predictions/quantization.md, session 47).

    python3 scripts/preload_range.py q47_mid.json q47_mid2.json

Each report is `bench_quantization --op nvfp4 --dispatch-tiles ...` JSON from its own process. For every (M, K) it
finds the preload tile's row (`_dispatch.mid_config(K)`) and the Triton large tile's (`_dispatch._triton_large(K)`)
and calls the preload tile faster where it is >= 1% faster in every report. The new bound is the largest M x K such
that the preload tile is faster there and at every measured shape between today's bound and it; none: unchanged.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MARGIN = 0.01  # the preload tile must be at least 1% faster in every report


def times(report: dict, impl_of) -> dict:
    """{(M, K): {"mid": µs, "large": µs}} of one report's nvfp4 rows (impl_of(K) -> (mid impl, large impl))."""
    out: dict = {}
    names: dict = {}  # K -> (mid impl, large impl), looked up once a K
    for r in report["rows"]:
        if r["case"] != "nvfp4" or r["peer"]:
            continue
        m, k = r["shape"]["M"], r["shape"]["K"]
        if k not in names:
            names[k] = impl_of(k)
        mid, large = names[k]
        for name, impl in (("mid", mid), ("large", large)):
            if r["impl"] == impl:
                out.setdefault((m, k), {})[name] = r["time_us"]
    return out


def decide(reports: list[dict], impl_of, bound: int) -> tuple[int, list[str]]:
    """(the new MID_MAX_ELEMENTS, one line a shape past `bound`) under the rule above."""
    per = [times(r, impl_of) for r in reports]
    shapes = sorted({s for t in per for s in t if s[0] * s[1] > bound}, key=lambda s: (s[0] * s[1], s))
    lines, new, broken = [], bound, False
    for m, k in shapes:
        pairs = [t.get((m, k), {}) for t in per]
        if any("mid" not in p or "large" not in p for p in pairs):
            lines.append(f"{m} x {k}: a report lacks the preload or the large row: the rule cannot pass here")
            broken = True
            continue
        gains = [1 - p["mid"] / p["large"] for p in pairs]
        ok = all(g >= MARGIN for g in gains)
        shown = ", ".join(f"{p['mid']:.2f} / {p['large']:.2f} ({g:+.1%})" for p, g in zip(pairs, gains))
        lines.append(f"{m} x {k} ({m * k:.3g} elements): preload / large µs {shown}: {'faster' if ok else 'not'}")
        if ok and not broken:
            new = m * k
        else:
            broken = True
    return new, lines


def _impl_of(k: int) -> tuple[str, str]:
    from benchmarks.experimental.b12x.bench_quantization import _impl
    from flashinfer.experimental.b12x.quantization.nvfp4 import _dispatch

    mid = _dispatch.mid_config(k)
    if mid is None:
        raise SystemExit(f"preload_range: no preload tile at K = {k} (MID_PRELOAD unset or unvalidated)")
    return _impl(mid, False), _impl(_dispatch._triton_large(k), False)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("reports", nargs="+", type=Path, help="bench_quantization JSON reports, one a process (>= 2)")
    args = p.parse_args(argv)
    if len(args.reports) < 2:
        p.error(f"the rule needs reports from at least 2 processes, got {len(args.reports)}")
    for path in args.reports:
        if not path.is_file():
            p.error(f"no report at {path}")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `benchmarks`
    from flashinfer.experimental.b12x.quantization.nvfp4 import _dispatch

    reports = [json.loads(path.read_text()) for path in args.reports]
    new, lines = decide(reports, _impl_of, _dispatch.MID_MAX_ELEMENTS)
    print("\n".join(lines) or "no measured shape past today's bound")
    if new == _dispatch.MID_MAX_ELEMENTS:
        print(f"MID_MAX_ELEMENTS stays {new} ({new:.3g})")
    else:
        print(f"MID_MAX_ELEMENTS -> {new} ({new:.3g}); run `scripts/jobs/s43_a.sh quant` on it before it lands")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
