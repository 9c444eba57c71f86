"""Summarize a same-device A/B (scripts/device_ab_run.sh): per benchmark and row, each side's median over its
rounds, B's change against A, and the noise it must beat.

    python3 scripts/ab_summary.py DIR        (DIR holds NAME.{a,b}.rN.json, as device_ab_run.sh writes them)
    python3 scripts/ab_summary.py A.json B.json   (two reports of one benchmark, e.g. s44_a's q_fixed / q_rotated)

A row's noise is the widest of: either side's p10-p90 spread (relative to its median) in any round, and either
side's range over its rounds. The last column marks B faster ("B-") or slower ("B+") where the change is larger
than that noise, else "tie". Rows present on one side only are listed as missing.
"""

from __future__ import annotations

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


def main(argv: list[str]) -> int:
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
