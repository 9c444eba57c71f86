"""FlashInfer's stable paged decode as a peer of ``bench_attention``, run in a child process (and its paged
prefill, the extend peer: ``_flashinfer_extend.py``, records of kind "extend" in the same case file).

This repository is itself a ``flashinfer`` distribution: its top-level ``flashinfer`` package (which
``b12x`` lives in) has no kernels, and FlashInfer's wheel, also package ``flashinfer``, cannot be
imported next to it. So the benchmark times FlashInfer in a child process whose ``sys.path`` starts
with a folder holding the wheel (``pip install --no-deps --target DIR``):

    python -m benchmarks.experimental.b12x._flashinfer_peer --site DIR --cases CASES.pt \
        [--variants tc,cuda] [--timer events|graph] [--iters N] [--warmup N] [--quick] [--device cuda]

The parent writes CASES.pt (``save_cases``): per case the small tensors (q, the page table, its
FlashInfer form indptr/indices/last_page_len, the b12x output and the SDPA reference) and, instead of
the multi-GB K/V cache, the seed it was drawn from plus a fingerprint of its bytes. The child redraws
the case with ``make_case`` (same seed, same device kind, same torch: same bits), checks q, the page
table and both fingerprints, runs BatchDecodeWithPagedKVCacheWrapper on the same paged cache, checks
its output against the reference (a peer that disagrees is reported, never timed) and times it with
``common.measure`` (the parent's clock and iteration counts). One child per KV dtype times every
shape, so FlashInfer JIT-compiles once per (dtype, variant).

The child prints one line ``B12X_FLASHINFER_PEER_RESULT {json}`` on stdout (anything else it prints
is FlashInfer's own logging) and exits 0, with ``status`` "ok", or "skipped" and the reason when DIR
does not hold the real FlashInfer (its ``flashinfer`` must resolve under DIR and have the wrapper).

This module imports only torch, the stdlib and ``common`` (torch + stdlib) at import time: never
this tree's ``flashinfer`` nor ``b12x``, so the parent can import its case helpers too.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.experimental.b12x.common import Timing, add_calls_per_graph, measure

HQ, HKV, D, PAGE = 32, 8, 128, 16
FP8_SCALE = 0.05  # fp8 cases: K/V hold x / scale, dequantized with descale = scale (one value for all)
CASE_FILE_VERSION = 1
RESULT_MARKER = "B12X_FLASHINFER_PEER_RESULT "
# variant -> (row name, use_tensor_cores). "tc" is FlashInfer's recommended path for GQA groups >= 4.
VARIANTS = {"tc": ("flashinfer decode", True), "cuda": ("flashinfer decode (cuda cores)", False)}
WORKSPACE_BYTES = 128 * 2**20


# The case: drawn from a seed, so the child can redraw the multi-GB cache instead of loading it ------
def case_seed(batch: int, kv_len: int, fp8: bool) -> int:
    """The seed of one case: fixed by its shape and dtype, independent of the order cases run in."""
    return (batch * 1_000_003 + kv_len) * 2 + int(fp8)


def make_case(batch: int, kv_len: int, fp8: bool, dev: torch.device | str, seed: int | None = None) -> dict:
    """q [B, HQ, D] bf16; k/v caches [pages, PAGE, HKV, D] (FlashInfer's NHD paged layout), bf16 or
    fp8 e4m3 holding randn / FP8_SCALE; page_table [B, L/PAGE] int32, a random permutation of the
    pages; lens [B] int32 all kv_len; descale [B, HKV] fp32 (fp8) or None. Never zeros."""
    if kv_len % PAGE or kv_len <= 0 or batch <= 0:
        raise ValueError(f"batch must be > 0 and kv_len a positive multiple of {PAGE}, got {batch}, {kv_len}")
    dev = torch.device(dev)
    seed = case_seed(batch, kv_len, fp8) if seed is None else seed
    gen = torch.Generator(device=dev).manual_seed(seed)
    pages_per = kv_len // PAGE
    num_pages = batch * pages_per
    kvt = torch.float8_e4m3fn if fp8 else torch.bfloat16
    scale = FP8_SCALE if fp8 else 1.0
    caches = []
    for _ in range(2):  # K then V, in chunks (bounded temporaries at B=128, L=32k)
        cache = torch.empty(num_pages, PAGE, HKV, D, dtype=kvt, device=dev)
        for chunk in cache.split(4096):
            chunk.copy_((torch.randn(chunk.shape, device=dev, generator=gen) / scale).to(kvt))
        caches.append(cache)
    perm = torch.randperm(num_pages, device=dev, generator=gen).to(torch.int32)
    q = torch.randn(batch, HQ, D, device=dev, generator=gen).to(torch.bfloat16)
    return {
        "seed": seed,
        "q": q,
        "k_cache": caches[0],
        "v_cache": caches[1],
        "page_table": perm.view(batch, pages_per),
        "lens": torch.full((batch,), kv_len, dtype=torch.int32, device=dev),
        "descale": torch.full((batch, HKV), scale, device=dev) if fp8 else None,
    }


def flashinfer_layout(
    page_table: torch.Tensor, lens: torch.Tensor, page_size: int = PAGE
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Page table [B, W] + lengths [B] -> FlashInfer's (indptr [B+1], indices [sum pages], last_page_len [B]).

    Request i uses its first ceil(lens[i] / page_size) pages; indptr is their prefix sum, indices
    their ids in order, last_page_len the rows used in the last one (1..page_size; 0 for an empty
    request). All int32 on the page table's device.
    """
    if page_table.dim() != 2 or lens.shape != page_table.shape[:1]:
        raise ValueError(f"page_table must be [B, W] and lens [B], got {tuple(page_table.shape)}, {tuple(lens.shape)}")
    lens = lens.to(torch.int64)
    n = (lens + page_size - 1) // page_size
    if bool((lens < 0).any()) or bool((n > page_table.shape[1]).any()):
        raise ValueError(f"lens must be in [0, {page_table.shape[1] * page_size}], got {lens.tolist()[:8]}")
    indptr = torch.zeros(len(n) + 1, dtype=torch.int64, device=page_table.device)
    indptr[1:] = torch.cumsum(n, 0)
    used = torch.arange(page_table.shape[1], device=page_table.device)[None, :] < n[:, None]
    indices = page_table[used]  # row-major: request 0's pages, then request 1's, ...
    last = torch.where(n > 0, lens - (n - 1) * page_size, torch.zeros_like(lens))
    return indptr.to(torch.int32), indices.to(torch.int32), last.to(torch.int32)


def fingerprint(cache: torch.Tensor) -> int:
    """A checksum of a cache's bytes, sensitive to page order: sum over pages of (byte sum * weight)."""
    total = 0
    for start in range(0, cache.shape[0], 4096):
        chunk = cache[start : start + 4096].contiguous()
        per_page = chunk.view(torch.uint8).reshape(chunk.shape[0], -1).sum(dim=1, dtype=torch.int64)
        weight = torch.arange(start, start + chunk.shape[0], device=cache.device, dtype=torch.int64) % 65521 + 1
        total += int((per_page * weight).sum())
    return total


def paged_fields(case: dict) -> dict:
    """The record fields of a case's paged cache, shared by the decode and extend records: the page table and its
    FlashInfer form (CPU tensors), the K/V byte fingerprints, the device kind it was drawn on."""
    indptr, indices, last = flashinfer_layout(case["page_table"], case["lens"])
    return {
        "device_type": torch.device(case["q"].device).type,
        "page_table": _cpu(case["page_table"]),
        "kv_indptr": _cpu(indptr),
        "kv_indices": _cpu(indices),
        "kv_last_page_len": _cpu(last),
        "k_fingerprint": fingerprint(case["k_cache"]),
        "v_fingerprint": fingerprint(case["v_cache"]),
    }


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu").contiguous()


def case_record(batch: int, kv_len: int, fp8: bool, case: dict, out: torch.Tensor, want: torch.Tensor, tol: float):
    """What the child needs of one case (CPU tensors, a few MB at most): see the module docstring."""
    return {
        "batch": batch,
        "kv_len": kv_len,
        "fp8": bool(fp8),
        "seed": int(case["seed"]),
        "kv_scale": FP8_SCALE if fp8 else None,
        "q": _cpu(case["q"]),
        "lens": _cpu(case["lens"]),
        **paged_fields(case),
        "out": _cpu(out),
        "want": _cpu(want),
        "tol": float(tol),
    }


def save_cases(path: str | Path, records: Sequence[dict]) -> None:
    torch.save({"version": CASE_FILE_VERSION, "cases": list(records)}, str(path))


def load_cases(path: str | Path) -> list[dict]:
    data = torch.load(str(path), map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or data.get("version") != CASE_FILE_VERSION:
        got = data.get("version") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path}: case file version must be {CASE_FILE_VERSION}, got {got!r}")
    return data["cases"]


def redraw(record: dict, dev: torch.device) -> tuple[dict | None, str | None]:
    """The case of ``record`` drawn again on ``dev``, or (None, why it differs from the parent's)."""
    if dev.type != record["device_type"]:
        return None, f"the parent drew on {record['device_type']}, this child runs on {dev.type}"
    case = make_case(record["batch"], record["kv_len"], record["fp8"], dev, seed=record["seed"])
    for key in ("q", "page_table", "lens"):
        if not torch.equal(case[key].cpu(), record[key]):
            return None, f"redrawn {key} differs from the parent's (another torch or device?)"
    for key in ("k", "v"):
        if fingerprint(case[f"{key}_cache"]) != record[f"{key}_fingerprint"]:
            return None, f"redrawn {key}_cache fingerprint differs from the parent's (another torch or device?)"
    return case, None


# The real FlashInfer -------------------------------------------------------------------------------
def use_site(site: str | Path) -> tuple[Any, str | None]:
    """Put ``site`` first on sys.path and import its flashinfer: (module, None) or (None, why not)."""
    site = Path(site).resolve()
    if not site.is_dir():
        return None, f"--flashinfer-site {site} is not a directory"
    if "flashinfer" in sys.modules:  # imported before the path was set: cannot be the wheel's
        where = getattr(sys.modules["flashinfer"], "__file__", "?")
        return None, f"a flashinfer was imported before {site} went first on sys.path ({where})"
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    spec = importlib.util.find_spec("flashinfer")
    origin = None if spec is None else spec.origin
    if origin is None or not Path(origin).resolve().is_relative_to(site):
        return None, f"not the real flashinfer: `flashinfer` resolves to {origin}, not under {site}"
    try:
        import flashinfer
    except Exception as e:  # a missing dependency of the wheel (apache-tvm-ffi, ...)
        return None, f"flashinfer under {site} failed to import: {type(e).__name__}: {str(e)[:300]}"
    if not hasattr(flashinfer, "BatchDecodeWithPagedKVCacheWrapper"):
        return None, f"flashinfer at {flashinfer.__file__} has no BatchDecodeWithPagedKVCacheWrapper"
    return flashinfer, None


def _wrapper(fi, record: dict, dev: torch.device, tensor_cores: bool, graph: bool):
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
    indptr, indices, last = (record[k].to(dev) for k in ("kv_indptr", "kv_indices", "kv_last_page_len"))
    kw = {}
    if graph:  # CUDA-graph mode: plan writes into fixed buffers that the captured kernels read
        kw = dict(
            use_cuda_graph=True,
            paged_kv_indptr_buffer=indptr.clone(),
            paged_kv_indices_buffer=indices.clone(),
            paged_kv_last_page_len_buffer=last.clone(),
        )
    wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=tensor_cores, **kw)
    kv_dtype = torch.float8_e4m3fn if record["fp8"] else torch.bfloat16
    wrapper.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=torch.bfloat16, kv_data_type=kv_dtype)
    return wrapper


def run_one(fi, record: dict, variant: str, args: argparse.Namespace, dev: torch.device) -> dict:
    """Check then time one variant on one case; the result entry (``timing`` None when not timed)."""
    impl, tensor_cores = VARIANTS[variant]
    res = {"batch": record["batch"], "kv_len": record["kv_len"], "fp8": record["fp8"], "variant": variant}
    res |= {"impl": impl, "timing": None, "max_err_vs_ref": None, "max_err_vs_b12x": None, "note": ""}
    case, why = redraw(record, dev)
    if why:
        return res | {"note": f"not timed: {why}"}
    wrapper = _wrapper(fi, record, dev, tensor_cores, args.timer == "graph")
    return check_then_time(res, wrapper, case, record["want"], record, args, dev, ours=record["out"])


def check_then_time(res: dict, wrapper, case: dict, want: torch.Tensor, record: dict, args, dev, ours=None) -> dict:
    """Run the planned FlashInfer `wrapper` once on the case's q and paged K/V (fp8: the record's scalar k / v
    scale) into a NaN-poisoned output, compare with the reference `want` (and our output `ours` when given); time
    it with the parent's clock only if it agrees within the record's tolerance."""
    q, kv = case["q"], (case["k_cache"], case["v_cache"])
    out = torch.empty_like(q)
    kw = {"k_scale": record["kv_scale"], "v_scale": record["kv_scale"]} if record["fp8"] else {}
    call = lambda: wrapper.run(q, kv, out=out, **kw)  # noqa: E731
    out.fill_(float("nan"))  # poisoned: a row the kernel skips shows up as NaN
    call()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    got = out.float().cpu()
    err_ref = (got - want.float().cpu()).abs().max().item()
    res["max_err_vs_ref"] = err_ref
    note = f"max |flashinfer - sdpa| = {err_ref:.2e}"
    if ours is not None:
        err_ours = (got - ours.float()).abs().max().item()
        res["max_err_vs_b12x"] = err_ours
        note += f", |flashinfer - b12x| = {err_ours:.2e}"
    if not (math.isfinite(err_ref) and err_ref <= record["tol"]):
        return res | {"note": f"not timed: disagrees with the reference (tol {record['tol']}): {note}"}
    res["timing"] = dataclasses.asdict(measure(call, args))
    res["note"] = note + (" (fp8 KV, scalar k/v scale)" if record["fp8"] else "")
    return res


# Command line --------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--site", required=True, help="folder holding FlashInfer's wheel (pip install --target)")
    p.add_argument("--cases", required=True, help="case file written by save_cases")
    p.add_argument("--variants", default="tc", help=f"comma-separated, of {sorted(VARIANTS)}")
    p.add_argument("--timer", choices=("events", "graph"), default="events")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--device", default="cuda")
    add_calls_per_graph(p)  # the parent's, so both sides time alike
    return p


def emit(result: dict) -> None:
    print(RESULT_MARKER + json.dumps(result), flush=True)


def parse_result(stdout: str) -> dict | None:
    """The child's result dict from its stdout (last marker line), or None if it printed none."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith(RESULT_MARKER)]
    return json.loads(lines[-1][len(RESULT_MARKER) :]) if lines else None


def timing_from(d: dict) -> Timing:
    return Timing(**d)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        emit({"status": "error", "reason": f"--variants must name some of {sorted(VARIANTS)}, got {args.variants!r}"})
        return 2
    fi, why = use_site(args.site)
    if why:
        emit({"status": "skipped", "reason": why})
        return 0
    if not torch.cuda.is_available():
        emit({"status": "skipped", "reason": f"no CUDA device (torch {torch.__version__})"})
        return 0
    head = {"flashinfer_version": getattr(fi, "__version__", "?"), "flashinfer_file": fi.__file__}
    try:
        records = load_cases(args.cases)
        dev = torch.device(args.device)
        dev = dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())
        from benchmarks.experimental.b12x import _flashinfer_extend as fiext  # imports this module: not at the top

        results = []
        for variant in variants:
            for record in records:
                extend = record.get("kind") == "extend"  # the prefill peer: one path, timed once
                if extend and variant != variants[0]:
                    continue
                try:
                    if extend:
                        results.append(fiext.run_extend(fi, record, args, dev))
                    else:
                        results.append(run_one(fi, record, variant, args, dev))
                    torch.cuda.empty_cache()  # the case's caches went with the run's frame
                except Exception as e:  # one shape or variant FlashInfer rejects must not lose the rest
                    msg = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                    print(f"flashinfer peer {variant} B={record['batch']} L={record['kv_len']}: {msg}", file=sys.stderr)
                    entry = {"batch": record["batch"], "kv_len": record["kv_len"], "fp8": record["fp8"]}
                    impl = fiext.ROW if extend else VARIANTS[variant][0]
                    entry |= {"variant": fiext.VARIANT if extend else variant, "impl": impl, "timing": None}
                    results.append(entry | {"note": f"not timed: {msg}"})
                    torch.cuda.empty_cache()
    except Exception as e:
        traceback.print_exc()
        emit(head | {"status": "error", "reason": f"{type(e).__name__}: {str(e)[:300]}"})
        return 1
    emit(head | {"status": "ok", "results": results})
    return 0


if __name__ == "__main__":  # run with -m from the repository root (that is how `benchmarks` imports)
    sys.exit(main())
