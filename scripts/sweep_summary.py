"""Print the sweeps of bench_gemm JSON reports compactly: per case, each config's µs and the fields that tell the
rows apart (a staged job's summary on the device, where the full reprs would fill the call's output).

    python3 scripts/sweep_summary.py [REPORT.json ...] [--fields probe wn ...]   (default: /tmp/b12x-par/gemm_*.json)
"""

import argparse
import glob
import json
import re

DEFAULT_FIELDS = ("probe", "warps", "wn", "ashare", "ksplit", "pdl_wait", "pdl", "epilogue", "wcache", "acache")


def summary(paths, fields) -> list[str]:
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, fields)) + r")=('[^']*'|\w+)")
    lines = []
    for path in paths:
        with open(path) as f:
            sweeps = json.load(f).get("extra", {}).get("sweeps", {})
        for case, rows in sweeps.items():
            lines.append(f"== {path.rsplit('/', 1)[-1]} {case}")
            for cfg, us in rows.items():
                kind = cfg.split("(", 1)[0]
                lines.append(f"  {us:8.2f}  {kind} " + " ".join(f"{k}={v}" for k, v in pattern.findall(cfg)))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="*", help="bench_gemm --json reports (default: /tmp/b12x-par/gemm_*.json)")
    parser.add_argument("--fields", nargs="+", default=list(DEFAULT_FIELDS), help="config fields to print")
    args = parser.parse_args(argv)
    print("\n".join(summary(args.reports or sorted(glob.glob("/tmp/b12x-par/gemm_*.json")), args.fields)))


if __name__ == "__main__":
    main()
