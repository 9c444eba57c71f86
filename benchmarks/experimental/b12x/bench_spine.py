"""Spine costs: host time per planned `run()`, and cold vs warm PreparationSession start.

    python -m benchmarks.experimental.b12x.bench_spine [--quick] [--json PATH] [--kernels 10]

1. Host time per call (the CPU cost a serving loop pays per op; targets <= 10 us per `run()`):
   `run(binding)` of the self-test planned op (a tvm-ffi CuTe launch on torch's current stream),
   the bare compiled launcher, and torch's `y.mul_(b).add_(x, alpha=a)` (peer: two ATen launches).
   Measured as wall time of a burst of calls with no synchronisation inside the burst (the burst is
   shorter than the launch queue, so the GPU never throttles the host), median over bursts.
2. Session start, each in a fresh process with its own cache dir: `--kernels` distinct self-test
   plans prepared in one session (cold: empty cache, compile_workers 1 and 8; warm: every kernel on
   disk). Reports import time (b12x + torch) and prepare() time separately; target: warm prepare of
   10 kernels < 1 s.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.experimental.b12x.common import environment, require_cuda, standard_parser

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch, b12x
from flashinfer.experimental.b12x._lib.selftest import plan as st
t1 = time.perf_counter()
n, workers = int(sys.argv[1]), int(sys.argv[2])
plans = [st.plan(st.Caps(max_rows=64, n_cols=1024 * (i + 1))) for i in range(n)]
torch.cuda.init()
t2 = time.perf_counter()
with b12x.PreparationSession("cuda", compile_workers=workers) as s:
    res = s.prepare(plans)
torch.cuda.synchronize()
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "cuda_init_s": t2 - t1, "prepare_s": t3 - t2,
                  "compiled": res.compiled, "phases": res.seconds}))
"""


def host_times(args) -> list[dict]:
    import torch

    import b12x
    from flashinfer.experimental.b12x._lib.selftest import plan as st

    dev = require_cuda("bench_spine", args.device)
    p = st.plan(st.Caps(max_rows=8, n_cols=1024))
    b12x.PreparationSession(dev).prepare([p])
    x = torch.randn(8, 1024, device=dev, dtype=torch.bfloat16)
    y = torch.randn(8, 1024, device=dev, dtype=torch.bfloat16)
    binding = st.bind(p, x=x, y=y, a=1.0, b=0.5)
    launch = p.state.extra["launch"]
    burst, bursts = 200, (10 if args.quick else 50)
    cases = {
        "b12x run(binding)": lambda: st.run(binding),
        "compiled launcher": lambda: launch(x, y, 1.0, 0.5),
        "torch mul_+add_ (peer)": lambda: y.mul_(0.5).add_(x, alpha=1.0),
    }
    rows = []
    for name, fn in cases.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(bursts):
            t = time.perf_counter()
            for _ in range(burst):
                fn()
            samples.append((time.perf_counter() - t) / burst * 1e6)
            torch.cuda.synchronize()
        rows.append({"case": name, "host_us_median": statistics.median(samples), "host_us_min": min(samples)})
    return rows


def session_starts(args) -> list[dict]:
    rows = []
    n = args.kernels
    with tempfile.TemporaryDirectory() as root:
        for label, workers, cache in (
            ("cold, compile_workers=1", 1, "a"),
            ("warm (all on disk)", 1, "a"),
            ("cold, compile_workers=8", 8, "b"),
        ):
            env = dict(os.environ, B12X_CACHE_DIR=os.path.join(root, cache))
            t = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, str(n), str(workers)], capture_output=True, text=True, env=env
            )
            wall = time.perf_counter() - t
            if out.returncode != 0:
                raise RuntimeError(f"session start ({label}) failed:\n{out.stderr[-4000:]}")
            rec = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append({"case": label, "kernels": n, "process_wall_s": wall, **rec})
    return rows


def main(argv=None) -> int:
    parser = standard_parser(__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=10, help="distinct kernels in the session-start test")
    args = parser.parse_args(argv)
    host = host_times(args)
    print(f"{'host time per call':<28} {'median us':>10} {'min us':>8}")
    for r in host:
        print(f"{r['case']:<28} {r['host_us_median']:>10.2f} {r['host_us_min']:>8.2f}", flush=True)
    starts = session_starts(args)
    print(f"\n{'session start':<26} {'import s':>9} {'prepare s':>10} {'compiled':>9} {'process s':>10}")
    for r in starts:
        print(
            f"{r['case']:<26} {r['import_s']:>9.2f} {r['prepare_s']:>10.2f} {r['compiled']:>9} {r['process_wall_s']:>10.2f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": environment(args.device), "host": host, "session_start": starts}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
