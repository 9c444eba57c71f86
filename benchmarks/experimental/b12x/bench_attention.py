"""Benchmark b12x.attention.paged decode against SDPA (FA2, cuDNN) and FlashInfer's decode wrapper.

    python -m benchmarks.experimental.b12x.bench_attention [--quick] [--kv bf16|fp8|all]
        [--batch 1 8 32 128] [--kv-len 1024 8192 32768] [--timer events|graph] [--json PATH]

Problem: decode (one query row per request), 32 query / 8 KV heads, head dim 128, page size 16, every
request of the case has kv_len keys; pages are a random permutation of the cache.
Bytes (the TB/s and % of the copy ceiling columns): the KV the op must read,
  B * kv_len * Hkv * (D + Dv) * kv_itemsize  (q, out and the page table are < 0.1% of it).
Ours: a plan prepared at capacity B, `run(binding=...)` (schedule + decode + merge launches).
Peers on the same K/V in contiguous [B, Hkv, kv_len, D] bf16 (fp8 cases: the bf16 copy; SDPA has no
fp8 KV): SDPA with SDPBackend.FLASH_ATTENTION and CUDNN_ATTENTION (enable_gqa), and FlashInfer's
stable BatchDecodeWithPagedKVCacheWrapper on our paged cache when a real FlashInfer wheel is
importable (this tree's `flashinfer` has no kernels: the peer is then skipped with the reason).
Each case first checks ours against the SDPA output (bf16) or the reference (fp8).
Without --json the report goes to $OUT/b12x_attention.json when $OUT is set.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

import b12x
from benchmarks.experimental.b12x.common import Case, Table, ceilings, measure, require_cuda, standard_parser

MODULE = "benchmarks.experimental.b12x.bench_attention"
BATCHES, KV_LENS = (1, 8, 32, 128), (1024, 8192, 32768)
QUICK_BATCHES, QUICK_KV_LENS = (1, 32), (1024, 8192)
HQ, HKV, D, PAGE = 32, 8, 128, 16
paged = b12x.attention.paged


def _flashinfer_peer():
    """(wrapper class, None) or (None, why the peer is skipped)."""
    try:
        import flashinfer
    except ImportError as e:
        return None, f"flashinfer not importable ({e})"
    cls = getattr(flashinfer, "BatchDecodeWithPagedKVCacheWrapper", None)
    if cls is None:
        where = getattr(flashinfer, "__file__", "?")
        return None, f"flashinfer at {where} has no BatchDecodeWithPagedKVCacheWrapper (no FlashInfer wheel here)"
    return cls, None


def _setup(batch, kv_len, fp8, dev, gen):
    pages_per = kv_len // PAGE
    num_pages = batch * pages_per
    kvt = torch.float8_e4m3fn if fp8 else torch.bfloat16
    k_cache = torch.empty(num_pages, PAGE, HKV, D, dtype=kvt, device=dev)
    v_cache = torch.empty_like(k_cache)
    scale = 0.05 if fp8 else 1.0
    for cache in (k_cache, v_cache):  # never zeros: random data in chunks (bounded temporaries)
        for chunk in cache.split(4096):
            chunk.copy_((torch.randn(chunk.shape, device=dev, generator=gen) / scale).to(kvt))
    perm = torch.randperm(num_pages, device=dev, generator=gen).to(torch.int32)
    page_table = perm.view(batch, pages_per)
    lens = torch.full((batch,), kv_len, dtype=torch.int32, device=dev)
    q = torch.randn(batch, HQ, D, device=dev, generator=gen).to(torch.bfloat16)
    descale = torch.full((batch, HKV), scale, device=dev) if fp8 else None
    return q, k_cache, v_cache, page_table, lens, descale


def _contiguous_bf16(cache, page_table, descale):
    """[B, Hkv, L, D] bf16 copy of the paged cache (dequantized for fp8) for the SDPA peers."""
    b, pages = page_table.shape
    out = torch.empty(b, HKV, pages * PAGE, D, dtype=torch.bfloat16, device=cache.device)
    for i in range(b):  # one request at a time: bounded temporaries at B=128, L=32k
        x = cache[page_table[i].long()].view(pages * PAGE, HKV, D).float()
        if descale is not None:
            x = x * descale[i][None, :, None]
        out[i] = x.transpose(0, 1)
    return out


def _sdpa(backend):
    from torch.nn.attention import sdpa_kernel

    def call(q4, k4, v4):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, enable_gqa=True)

    return call


def run_case(table, args, batch, kv_len, fp8, dev, gen, fi_cls, fi_note):
    q, k_cache, v_cache, page_table, lens, descale = _setup(batch, kv_len, fp8, dev, gen)
    itemsize = 1 if fp8 else 2
    kv_bytes = batch * kv_len * HKV * 2 * D * itemsize
    kv_name = "fp8" if fp8 else "bf16"
    case = Case(f"decode_{kv_name}", {"B": batch, "L": kv_len}, bytes=kv_bytes, ceiling="copy")
    work = paged.default_max_work_items(batch, HKV)
    caps = paged.Caps(
        device=str(dev), mode="decode", dtype="bfloat16", kv_dtype="float8_e4m3fn" if fp8 else "bfloat16",
        num_q_heads=HQ, num_kv_heads=HKV, head_dim_qk=D, head_dim_vo=D, page_size=PAGE, max_total_q=batch,
        max_batch=batch, max_page_table_width=kv_len // PAGE, max_work_items=work,
        max_partial_rows=paged.default_max_partial_rows(work, HQ), num_cache_pages=k_cache.shape[0],
    )  # fmt: skip
    plan = paged.plan(caps)
    with b12x.PreparationSession(dev) as session:
        session.prepare([plan])
    kw = dict(k_descale=descale, v_descale=descale) if fp8 else {}
    binding = paged.bind(plan, q=q, k_cache=k_cache, v_cache=v_cache, page_table=page_table, cache_seqlens=lens, **kw)
    out, _ = paged.run(binding=binding)

    kc = _contiguous_bf16(k_cache, page_table, descale)
    vc = _contiguous_bf16(v_cache, page_table, descale)
    q4 = q.unsqueeze(2)  # [B, Hq, 1, D]
    from torch.nn.attention import SDPBackend

    want = torch.nn.functional.scaled_dot_product_attention(q4, kc, vc, enable_gqa=True).squeeze(2)
    err = (out.float() - want.float()).abs().max().item()
    tol = 0.05 if fp8 else 0.02
    note = f"max |ours - sdpa| = {err:.2e}" + (" (fp8 KV vs its bf16 dequant)" if fp8 else "")
    if not err <= tol:
        note += " MISMATCH"
        print(f"WARNING {case.label}: {note}", file=sys.stderr)
    table.add(case, "b12x.paged", measure(lambda: paged.run(binding=binding), args), note=note)
    if not args.no_peers:
        for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
            fn = _sdpa(backend)
            label = name + (" (bf16 kv)" if fp8 else "")
            try:
                fn(q4, kc, vc)
                table.add(case, label, measure(lambda fn=fn: fn(q4, kc, vc), args), peer=True)
            except RuntimeError as e:
                print(f"peer {label} skipped on {case.label}: {str(e).splitlines()[0][:160]}", file=sys.stderr)
        if fi_cls is not None and not fp8:
            try:
                fi = _flashinfer_wrapper(fi_cls, page_table, lens, dev)
                table.add(case, "flashinfer", measure(lambda: fi.run(q, (k_cache, v_cache)), args), peer=True)
            except Exception as e:  # an API drift between FlashInfer releases must not kill the run
                print(f"peer flashinfer skipped on {case.label}: {type(e).__name__}: {e}", file=sys.stderr)
    session.release(plan)  # the caches go with this frame; run() empties the allocator cache


def _flashinfer_wrapper(cls, page_table, lens, dev):
    batch, pages = page_table.shape
    workspace = torch.empty(128 * 2**20, dtype=torch.uint8, device=dev)
    wrapper = cls(workspace, "NHD", use_tensor_cores=True)  # its faster path for GQA groups >= 4
    indptr = torch.arange(0, batch + 1, dtype=torch.int32, device=dev) * pages
    last = torch.full((batch,), PAGE, dtype=torch.int32, device=dev)
    wrapper.plan(indptr, page_table.flatten(), last, HQ, HKV, D, PAGE,
                 q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)  # fmt: skip
    return wrapper


def main(argv: list[str] | None = None) -> int:
    parser = standard_parser(__doc__.splitlines()[0])
    parser.add_argument("--kv", choices=("bf16", "fp8", "all"), default="all", help="KV cache dtype")
    parser.add_argument("--batch", type=int, nargs="+", default=None, help=f"batch sizes (default {BATCHES})")
    parser.add_argument("--kv-len", type=int, nargs="+", default=None, help=f"KV lengths (default {KV_LENS})")
    args = parser.parse_args(argv)
    dev = require_cuda("bench_attention", args.device)
    batches = args.batch or (QUICK_BATCHES if args.quick else BATCHES)
    kv_lens = args.kv_len or (QUICK_KV_LENS if args.quick else KV_LENS)
    if any(n % PAGE for n in kv_lens):
        parser.error(f"--kv-len values must be multiples of the page size {PAGE}")
    ceil = ceilings(dev)
    table = Table(f"b12x attention.paged decode on {ceil.device_name} (Hq {HQ}, Hkv {HKV}, D {D}, page {PAGE})", ceil)
    fi_cls, fi_note = _flashinfer_peer()
    if fi_note and not args.no_peers:
        print(f"peer flashinfer skipped: {fi_note}")
    gen = torch.Generator(device=dev).manual_seed(0)
    kinds = {"bf16": (False,), "fp8": (True,), "all": (False, True)}[args.kv]
    for fp8 in kinds:
        for batch in batches:
            for kv_len in kv_lens:
                run_case(table, args, batch, kv_len, fp8, dev, gen, fi_cls, fi_note)
                torch.cuda.empty_cache()
    table.print()
    path = args.json or (str(Path(os.environ["OUT"]) / "b12x_attention.json") if os.environ.get("OUT") else None)
    if path:
        cmd = ["python", "-m", MODULE, *(sys.argv[1:] if argv is None else argv)]
        extra = {"flashinfer_peer": fi_note or "measured", "bytes": "B*L*Hkv*(D+Dv)*kv_itemsize"}
        table.write_json(path, argv=cmd, device=dev, extra=extra)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
