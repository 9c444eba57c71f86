"""Summarize a same-device A/B (scripts/device_ab_run.sh): per benchmark and row, each side's median over its
rounds, B's change against A, and the noise it must beat.

    python3 scripts/ab_summary.py DIR        (DIR holds NAME.{a,b}.rN.json, as device_ab_run.sh writes them)
    python3 scripts/ab_summary.py A.json B.json   (two reports of one benchmark, e.g. s44_a's q_fixed / q_rotated)
    python3 scripts/ab_summary.py --rule [--only RE] [--except RE] A1.json B1.json [A2.json B2.json ...]

--rule is a switch's pass test: exit 0 only if every row (label and impl, matched by --only and not by --except)
is "B-" in every pair, 1 if any is not (a tie, "B+", or missing on a side) or no row was selected, 2 on bad usage.

A row's noise is the widest of: either side's p10-p90 spread (relative to its median) in any round, and either
side's range over its rounds. The last column marks B faster ("B-") or slower ("B+") where the change is larger
than that noise, else "tie". Rows present on one side only are listed as missing.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

NAME = re.compile(r"^(?P<job>.+)\.(?P<side>[ab])\.r(?P<round>\d+)\.json$")


def load(directory: Path) -> dict:
    """{job: {(label, impl): {side: [(time_us, p10_us, p90_us), ...]}}} from the JSON reports in directory."""
    named = ((NAME.match(p.name), p) for p in sorted(directory.iterdir()))
    return _collect((m["job"], path, m["side"]) for m, path in named if m)


def load_pair(a: Path, b: Path) -> dict:
    """`load`'s shape for two reports, A and B, one round each (the job named after both files)."""
    job = f"{a.stem} (A) / {b.stem} (B)"
    return _collect([(job, a, "a"), (job, b, "b")])


def _collect(reports) -> dict:
    """`load`'s shape from (job, report path, side) triples."""
    out: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for job, path, side in reports:
        for row in json.loads(path.read_text())["rows"]:
            t = row["time_us"]
            out[job][(row["label"], row["impl"])][side].append((t, row.get("p10_us", t), row.get("p90_us", t)))
    return out


def compare(samples: dict) -> tuple[float, float, float, float, str] | None:
    """(A median, B median, change %, noise %, verdict) for one row's samples, or None if a side is missing."""
    if not samples.get("a") or not samples.get("b"):
        return None
    med = {s: statistics.median(t for t, _, _ in samples[s]) for s in "ab"}
    noise = 0.0
    for s in "ab":
        times = [t for t, _, _ in samples[s]]
        noise = max(noise, (max(times) - min(times)) / med[s])
        noise = max(noise, *((p90 - p10) / med[s] for _, p10, p90 in samples[s]))
    change = med["b"] / med["a"] - 1.0
    verdict = "tie" if abs(change) <= noise else ("B-" if change < 0 else "B+")
    return med["a"], med["b"], 100.0 * change, 100.0 * noise, verdict


def report(directory: Path, other: Path | None = None) -> str:
    lines = []
    for job, rows in (load(directory) if other is None else load_pair(directory, other)).items():
        lines.append(f"== {job}")
        lines.append(f"{'case':44s} {'impl':28s} {'A us':>10s} {'B us':>10s} {'B/A-1':>8s} {'noise':>7s}  verdict")
        for (label, impl), samples in rows.items():
            got = compare(samples)
            if got is None:
                have = "".join(s for s in "ab" if samples.get(s)).upper() or "none"
                lines.append(f"{label[:44]:44s} {impl[:28]:28s} missing on one side (have: {have})")
                continue
            a, b, change, noise, verdict = got
            lines.append(
                f"{label[:44]:44s} {impl[:28]:28s} {a:10.3f} {b:10.3f} {change:+7.2f}% {noise:6.2f}%  {verdict}"
            )
    return "\n".join(lines) if lines else f"no NAME.{{a,b}}.rN.json reports in {directory}"


def rule(pairs: list[tuple[Path, Path]], only: str | None = None, exclude: str | None = None) -> tuple[bool, str]:
    """(every selected row "B-" in every pair, one line per selected row and pair saying why not): `--rule`."""
    lines, selected = [], 0
    for a, b in pairs:
        for (label, impl), samples in next(iter(load_pair(a, b).values())).items():
            name = f"{label} {impl}"
            if (only and not re.search(only, name)) or (exclude and re.search(exclude, name)):
                continue
            selected += 1
            got = compare(samples)
            verdict = "missing on one side" if got is None else f"{got[4]} ({got[2]:+.2f}%, noise {got[3]:.2f}%)"
            if got is None or got[4] != "B-":
                lines.append(f"{a.stem} / {b.stem}: {name}: {verdict}")
    if not selected:
        lines.append("no row selected")
    passed = not lines
    lines.append(f"rule {'passed' if passed else 'failed'}: {selected} rows over {len(pairs)} pairs")
    return passed, "\n".join(lines)


def _rule_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ab_summary.py --rule", description="a switch's pass test over A/B pairs")
    ap.add_argument("--only", help="select rows whose 'label impl' matches this regular expression")
    ap.add_argument("--except", dest="exclude", help="drop rows whose 'label impl' matches this regular expression")
    ap.add_argument("reports", nargs="+", type=Path, help="A1.json B1.json [A2.json B2.json ...]")
    args = ap.parse_args(argv)
    if len(args.reports) % 2:
        ap.error(f"reports must come in A / B pairs, got {len(args.reports)} paths")
    missing = [p for p in args.reports if not p.is_file()]
    if missing:
        ap.error(f"reports must be benchmark reports, missing {missing[0]}")
    pairs = list(zip(args.reports[::2], args.reports[1::2]))
    passed, text = rule(pairs, args.only, args.exclude)
    print(text)
    return 0 if passed else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["--rule"]:
        return _rule_main(argv[1:])
    if len(argv) not in (1, 2) or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    paths = [Path(a) for a in argv]
    if len(paths) == 2:
        bad = [p for p in paths if not p.is_file()]
        if bad:
            print(f"ab_summary: A.json and B.json must be benchmark reports, missing {bad[0]}", file=sys.stderr)
            return 2
        print(report(*paths))
        return 0
    if not paths[0].is_dir():
        print(f"ab_summary: DIR must be a directory of A/B reports, got {paths[0]}", file=sys.stderr)
        return 2
    print(report(paths[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
