"""Summarize an Nsight Compute --csv details report (scripts/jobs/ncu_lib.sh's ncu_run): one line a profiled kernel
with its duration, DRAM bytes and throughput, the SM active-cycle spread (min / avg / max against the elapsed
cycles: a long tail shows as min << max), achieved occupancy and waves.

    python3 scripts/jobs/ncu_summary.py $OUT/ncu_NAME.csv [more.csv]
"""

import csv
import sys

WANT = {
    "gpu__time_duration.sum": "us",
    "Duration": "dur",
    "dram__bytes_read.sum": "rd",
    "dram__bytes_write.sum": "wr",
    "DRAM Throughput": "dram%",
    "L2 Cache Throughput": "l2%",
    "lts__t_bytes.sum": "l2_bytes",
    "sm__cycles_active.min": "act_min",
    "sm__cycles_active.avg": "act_avg",
    "sm__cycles_active.max": "act_max",
    "sm__cycles_elapsed.max": "elapsed",
    "Achieved Occupancy": "occ%",
    "Waves Per SM": "waves",
    "Registers Per Thread": "regs",
}


def rows(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    return list(csv.DictReader(lines))


def main(paths):
    for path in paths:
        kernels = {}
        for r in rows(path):
            key = WANT.get(r.get("Metric Name", ""))
            if key is None:
                continue
            k = kernels.setdefault(r["ID"], {"name": r["Kernel Name"][:40], "grid": r.get("Grid Size", "")})
            k[key] = f"{r['Metric Value']}{'' if key.endswith('%') else ' ' + r.get('Metric Unit', '')}".strip()
        print(f"== {path}: {len(kernels)} kernels")
        for kid, k in kernels.items():
            print(f"{kid:>3} {k.pop('name')} grid {k.pop('grid')}: " + ", ".join(f"{a}={b}" for a, b in k.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
