"""Record what Triton built for every `triton.compile` a pytest run makes (a pytest plugin), and compare
two such records (a script): the check that found session 15's quantizer barriers.

Why. The H200 runs Triton 3.6 (the torch wheel's); this CPU machine has Triton 3.9. The two lay out
the same kernel differently (3.6 gave the NVFP4 "pairs" tiles' [rows, blocks, 4] load pointers lanes
down the rows, so their words went through shared memory with two barriers a tile; 3.9 did not), so
register and SASS figures read here can be wrong for the device. Compile the same tests under both:

    pip download --no-deps triton==3.6.0 -d /tmp/t36dl && python3 -m zipfile -e /tmp/t36dl/*.whl /tmp/t36
    chmod +x /tmp/t36/triton/backends/nvidia/bin/*
    B12X_TRITON_AUDIT=/tmp/a39.jsonl python3 -m pytest -p scripts.triton_audit -m compile tests/...
    PYTHONPATH=/tmp/t36 B12X_TRITON_AUDIT=/tmp/a36.jsonl python3 -m pytest -p scripts.triton_audit -m compile tests/...
    python3 scripts/triton_audit.py /tmp/a36.jsonl /tmp/a39.jsonl

Each record: kernel name, target, num_warps, its constexprs and a key of them, registers, SASS instructions,
BAR / STS / LDS / SHFL counts and ttgir `convert_layout` ops (B12X_TRITON_AUDIT_IR=DIR also writes each
kernel's ttgir there, named by kernel, arch, warps and key). The comparison lists the kernels whose
barriers, shared-memory traffic or registers differ, worst first.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys

_OPS = ("BAR", "STS", "LDS", "SHFL")


def _arg_name(src, k) -> str:
    """A constexpr's argument name (Triton keys them by `(index,)` tuples)."""
    names = getattr(getattr(src, "fn", None), "arg_names", None) or []
    if isinstance(k, tuple) and len(k) == 1 and isinstance(k[0], int) and k[0] < len(names):
        return names[k[0]]
    return str(k)


def _record(src, target, kwargs, compiled) -> dict:
    from flashinfer.experimental.b12x._lib import cuda_binary

    cubin = compiled.asm.get("cubin")
    sass = cuda_binary.run("cuobjdump", cubin, "-sass") if cubin else ""
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", sass)
    name = getattr(getattr(src, "fn", None), "__name__", "?")
    constexprs = getattr(src, "constexprs", None) or getattr(src, "constants", None) or {}
    key = hashlib.sha1(repr(sorted((str(k), repr(v)) for k, v in dict(constexprs).items())).encode()).hexdigest()[:10]
    options = kwargs.get("options") or {}
    return {
        "kernel": name,
        "arch": getattr(target, "arch", None),
        "num_warps": options.get("num_warps"),
        "key": key,
        "constexprs": {_arg_name(src, k): repr(v) for k, v in dict(constexprs).items()},  # the key's variant
        "regs": cuda_binary.resources(cubin).get("REG") if cubin else None,
        "sass": len(ops),
        **{op: sum(1 for o in ops if o == op) for op in _OPS},
        "convert_layout": compiled.asm.get("ttgir", "").count("convert_layout"),
    }


def pytest_configure(config):  # noqa: ARG001 - the pytest hook's signature
    """Wrap `triton.compile` for this run when B12X_TRITON_AUDIT names the JSON-lines output."""
    path = os.environ.get("B12X_TRITON_AUDIT")
    if not path:
        return
    import triton

    original = triton.compile

    def compile_and_record(src, target=None, options=None, **kwargs):
        compiled = original(src, target=target, options=options, **kwargs)
        try:
            row = _record(src, target, {"options": options}, compiled)
            row["triton"] = triton.__version__
            with open(path, "a") as f:
                f.write(json.dumps(row) + "\n")
            ir_dir = os.environ.get("B12X_TRITON_AUDIT_IR")  # also keep each kernel's ttgir there
            if ir_dir:
                os.makedirs(ir_dir, exist_ok=True)
                name = f"{row['kernel']}-sm{row['arch']}-w{row['num_warps']}-{row['key']}.ttgir"
                with open(os.path.join(ir_dir, name), "w") as f:
                    f.write(compiled.asm.get("ttgir", ""))
        except Exception as e:  # the audit never fails a test
            print(f"triton_audit: could not record {src}: {e}", file=sys.stderr)
        return compiled

    triton.compile = compile_and_record


def compare(a_path: str, b_path: str) -> list[str]:
    """Lines for the kernels (same name, arch, warps, constexpr key) whose BAR / STS / LDS / registers
    differ between the two records, largest barrier difference first."""

    def load(path):
        out = {}
        for line in open(path):
            r = json.loads(line)
            out[(r["kernel"], r["arch"], r["num_warps"], r["key"])] = r
        return out

    a, b = load(a_path), load(b_path)
    rows = []
    for k in sorted(set(a) & set(b), key=str):
        ra, rb = a[k], b[k]
        if any(ra[f] != rb[f] for f in ("BAR", "STS", "LDS", "regs")):
            rows.append((ra["BAR"] - rb["BAR"], k, ra, rb))
    rows.sort(key=lambda t: (-abs(t[0]), str(t[1])))
    fmt = "{kernel} sm_{arch} w{num_warps} [{key}] triton {triton}: regs {regs} sass {sass} BAR {BAR} STS {STS} LDS {LDS} cvt {convert_layout}"
    lines = [f"{len(set(a) & set(b))} kernels in both records, {len(rows)} differ"]
    for _, _, ra, rb in rows:
        lines += [fmt.format(**ra), "    " + fmt.format(**rb)]
    return lines


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: {sys.argv[0]} RECORD_A.jsonl RECORD_B.jsonl")
    print("\n".join(compare(sys.argv[1], sys.argv[2])))
