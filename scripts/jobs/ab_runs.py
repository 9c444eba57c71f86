"""Read bench JSON reports back for the A/B rules of the job scripts (scripts/jobs/norm_ab.sh's runs): `load` gives
one {(case, T, H, impl): µs} dict a run, or prints "none (...)" and exits when a report is missing or unreadable (the
rule then decides nothing); `rels` the relative times of an impl against the default ("b12x") over the keys given;
`mean` their mean (0 for none)."""

import json
import sys


def load(paths):
    runs = []
    for path in paths:
        try:
            rows = json.load(open(path))["rows"]
        except Exception as exc:
            print(f"none ({type(exc).__name__} in {path})")
            sys.exit()
        runs.append({(r["case"], r["shape"]["T"], r["shape"]["H"], r["impl"]): r["time_us"] for r in rows})
    return runs


def rels(runs, impl, cases=("pre", "post_pre"), tokens=(1024, 2048, 4096, 8192), hidden=(7168, 4096)):
    """t(impl) / t(default) - 1 for every run, case, hidden size and T present (in that nesting order)."""
    return [t[(c, T, H, impl)] / t[(c, T, H, "b12x")] - 1 for t in runs for c in cases for H in hidden for T in tokens
            if (c, T, H, impl) in t and (c, T, H, "b12x") in t]  # fmt: skip


def mean(r):
    return sum(r) / max(1, len(r))
