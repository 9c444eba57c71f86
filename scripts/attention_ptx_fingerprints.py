"""PTX fingerprints of attention.paged's kernels: every kernel of the plans in CASES (decode at B = 1
with the cluster merged by pushes and by pulls, B = 8 / 130, D 64 / 128 / 256, bf16 / fp8 KV, extend),
for sm_90a and sm_120a, plus the standalone merge; line info and debug sections stripped. For a
refactor that must not change the kernels (session 12's softmax_finish / fold_sink): run it before and
after with the disk cache off and compare the two JSON files.

    B12X_DISK_CACHE=0 python3 scripts/attention_ptx_fingerprints.py before.json   # edit, then
    B12X_DISK_CACHE=0 python3 scripts/attention_ptx_fingerprints.py after.json && cmp before.json after.json

CPU only (compiles, never launches); about 3 minutes on 2 cores.
"""

from __future__ import annotations

import json
import sys

from flashinfer.experimental.b12x._lib.cuda_binary import ptx_fingerprint as fingerprint
from flashinfer.experimental.b12x.attention import paged
from flashinfer.experimental.b12x.attention.paged import _config
from flashinfer.experimental.b12x.attention.paged._kernel_split import compile_merge

ARCHS = ("sm_90a", "sm_120a")
FP8 = "float8_e4m3fn"
CASES = {  # name -> caps changes (n requests, d head dim, ctx context capacity, mode)
    "b1_bf16": dict(n=1),
    "b1_fp8": dict(n=1, kv_dtype=FP8),
    "b1_bf16_8k": dict(n=1, ctx=8192),
    "b8_bf16": dict(n=8),
    "b8_fp8": dict(n=8, kv_dtype=FP8),
    "b130_bf16": dict(n=130),
    "b8_d64": dict(n=8, d=64),
    "b8_d256": dict(n=8, d=256),
    "ext_bf16": dict(n=8, mode="extend"),
    "ext_fp8": dict(n=8, mode="extend", kv_dtype=FP8),
}
PULL_TOO = ("b1_bf16", "b1_fp8", "b1_bf16_8k")  # cases also fingerprinted with CLUSTER_PUSH off


def caps(n=8, mode="decode", d=128, ctx=1024, **kw) -> paged.Caps:
    items = paged.default_max_work_items(n, 8)
    fields = dict(
        device="cpu", mode=mode, dtype="bfloat16", kv_dtype="bfloat16", num_q_heads=32, num_kv_heads=8,
        head_dim_qk=d, head_dim_vo=d, page_size=16, max_total_q=n if mode == "decode" else 2048, max_batch=n,
        max_page_table_width=ctx // 16, max_work_items=items,
        max_partial_rows=paged.default_max_partial_rows(items, 32), num_cache_pages=4096,
    )  # fmt: skip
    return paged.Caps(**(fields | kw))


def main(path: str) -> None:
    out = {}
    for arch in ARCHS:
        for name, kw in CASES.items():
            for push in (True, False) if name in PULL_TOO else (True,):
                _config.CLUSTER_PUSH = push
                plan = paged.plan(caps(**kw))
                for i, (fn, args) in enumerate(plan.kernels(plan.heuristic(arch), arch)):
                    key = f"{arch}/{name}/push={push}/{i}:{fn.__name__}"
                    out[key] = fingerprint(fn(*args).artifacts.PTX)
                    print(key, out[key], flush=True)
        _config.CLUSTER_PUSH = True
        out[f"{arch}/merge"] = fingerprint(compile_merge("bfloat16", 32, 8, 128, arch).artifacts.PTX)
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print(f"{len(out)} kernels -> {path}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 scripts/attention_ptx_fingerprints.py OUT.json")
    main(sys.argv[1])
