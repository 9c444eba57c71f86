"""A moe A/B rule over bench_moe JSON reports (one a run): every row "b12x RECIPE SUFFIX" against "b12x RECIPE" of the
same (E, T), per run; prints the relative times and the verdict of the rule in docs/predictions/moe.md (session 64):
pass when the mean over the cells (of T >= MEAN_FROM, default all) is <= MEAN (default -1.0%) in every run and no cell
is slower than WORST (+1.5%) in every run.

    python3 scripts/jobs/moe_ab.py SUFFIX RUN1.json RUN2.json [--mean -0.01] [--worst 0.015] [--mean-from 16]"""

import argparse
import json


def cells(path, suffix):
    """{(recipe, E, T): (base µs, variant µs)} of one report."""
    rows = json.load(open(path))["rows"]
    t = {(r["impl"], r["shape"]["E"], r["shape"]["T"]): r["time_us"] for r in rows if r["impl"].startswith("b12x ")}
    found = {}
    for (impl, e, tok), us in t.items():
        if impl.endswith(" " + suffix):
            base = impl[: -len(suffix) - 1]
            if (base, e, tok) in t:
                found[(base.removeprefix("b12x "), e, tok)] = (t[(base, e, tok)], us)
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suffix")
    p.add_argument("runs", nargs="+")
    p.add_argument("--mean", type=float, default=-0.010)
    p.add_argument("--worst", type=float, default=0.015)
    p.add_argument("--mean-from", type=int, default=1, help="the mean over the cells of T >= this only")
    a = p.parse_args()
    try:
        runs = [cells(path, a.suffix) for path in a.runs]
    except (OSError, ValueError, KeyError) as exc:
        print(f"verdict: none ({type(exc).__name__}: {exc})")
        return
    keys = sorted(set.intersection(*(set(r) for r in runs)))
    if not keys:
        print("verdict: none (no cell in every run)")
        return
    rel = {k: [r[k][1] / r[k][0] - 1 for r in runs] for k in keys}
    for k in keys:
        print(f"{k[0]:>6} E={k[1]:<4} T={k[2]:<3}", "  ".join(f"{r[k][0]:8.2f} -> {r[k][1]:8.2f}" for r in runs),
              "  ", " ".join(f"{x:+.2%}" for x in rel[k]))  # fmt: skip
    meant = [k for k in keys if k[2] >= a.mean_from] or keys
    means = [sum(rel[k][i] for k in meant) / len(meant) for i in range(len(runs))]
    slow = [k for k in keys if all(x > a.worst for x in rel[k])]
    ok = all(m <= a.mean for m in means) and not slow
    print(
        f"means (T >= {a.mean_from}) {' '.join(f'{m:+.2%}' for m in means)}; slower than {a.worst:+.1%} in every run: {slow or 'none'}"
    )
    print(f"verdict: {'pass' if ok else 'fail'} ({len(keys)} cells, {len(runs)} runs)")


if __name__ == "__main__":
    main()
