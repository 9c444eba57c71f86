"""FlashInfer's stable paged prefill (``BatchPrefillWithPagedKVCacheWrapper``) as the extend peer of ``bench_attention``.

The same child process as the decode peer (``_flashinfer_peer.py``: FlashInfer's wheel first on ``sys.path``, never
this tree's ``flashinfer``), the same rules: the parent saves a small record per case, the child redraws the case from
its seed (``make_extend_case``, the very draws ``bench_attention.run_extend_case`` times ours on), checks the redraw
by byte fingerprints, runs FlashInfer's causal paged prefill (query rows right-aligned to the end of each request's
keys, as our extend) on the same NHD paged cache, checks it against SDPA on a contiguous bf16 copy (fp8: the
dequantized copy), and times it with the parent's clock. A peer that disagrees is reported, never timed.

Imports torch, the stdlib and the decode peer's helpers only."""

from __future__ import annotations

import argparse

import torch

from benchmarks.experimental.b12x._flashinfer_peer import (
    HKV,
    HQ,
    PAGE,
    WORKSPACE_BYTES,
    D,
    check_then_time,
    fingerprint,
    paged_fields,
)

EXTEND_FP8_SCALE = 0.125  # fp8 extend cases: K/V hold randn * 8, dequantized with descale 1/8 (one value for all)
ROW, VARIANT = "flashinfer prefill", "prefill"  # its row name and the variant its results carry


def extend_seed(batch: int, q_len: int) -> int:
    return batch * 7919 + q_len


def make_extend_case(batch: int, q_len: int, fp8: bool, dev: torch.device | str) -> dict:
    """`batch` requests of q_len new tokens and no prefix (cache_seqlens = q_len): q [B * q_len, HQ, D] bf16, the
    NHD paged caches [pages, PAGE, HKV, D] (bf16, or e4m3 holding randn * 8), a page table [B, q_len / PAGE] of
    distinct random pages (8 spare pages), lens [B], cu_seqlens_q [B + 1], descale [B, HKV] (fp8) or None."""
    if q_len % PAGE or q_len <= 0 or batch <= 0:
        raise ValueError(f"batch must be > 0 and q_len a positive multiple of {PAGE}, got {batch}, {q_len}")
    dev = torch.device(dev)
    gen = torch.Generator(device=dev).manual_seed(extend_seed(batch, q_len))
    pages_per = q_len // PAGE
    num_pages = batch * pages_per + 8
    kv_t = torch.float8_e4m3fn if fp8 else torch.bfloat16
    mult = 1 / EXTEND_FP8_SCALE if fp8 else 1
    k_cache = (torch.randn(num_pages, PAGE, HKV, D, device=dev, generator=gen) * mult).to(kv_t)
    v_cache = (torch.randn(num_pages, PAGE, HKV, D, device=dev, generator=gen) * mult).to(kv_t)
    page_table = torch.randperm(num_pages, device=dev, generator=gen)[: batch * pages_per].view(batch, pages_per)
    q = torch.randn(batch * q_len, HQ, D, device=dev, generator=gen).to(torch.bfloat16)
    return {
        "q": q,
        "k_cache": k_cache,
        "v_cache": v_cache,
        "page_table": page_table.to(torch.int32).contiguous(),
        "lens": torch.full((batch,), q_len, dtype=torch.int32, device=dev),
        "cu": (torch.arange(batch + 1, device=dev) * q_len).to(torch.int32),
        "descale": torch.full((batch, HKV), EXTEND_FP8_SCALE, device=dev) if fp8 else None,
    }


def contiguous_bf16(cache: torch.Tensor, page_table: torch.Tensor, descale) -> torch.Tensor:
    """[B, HKV, L, D] bf16 copy of the paged cache (dequantized for fp8) for SDPA."""
    b, pages = page_table.shape
    out = torch.empty(b, HKV, pages * PAGE, D, dtype=torch.bfloat16, device=cache.device)
    for i in range(b):  # one request at a time: bounded temporaries at B = 128, L = 32k
        x = cache[page_table[i].long()].view(pages * PAGE, HKV, D).float()
        if descale is not None:
            x = x * descale[i][None, :, None]
        out[i] = x.transpose(0, 1)
    return out


def causal_reference(case: dict) -> torch.Tensor:
    """SDPA (causal, GQA) on the contiguous bf16 copy, as [B * q_len, HQ, D] fp32: every extend peer's check."""
    b = case["page_table"].shape[0]
    q_len = case["q"].shape[0] // b
    kc = contiguous_bf16(case["k_cache"], case["page_table"], case["descale"])
    vc = contiguous_bf16(case["v_cache"], case["page_table"], case["descale"])
    q4 = case["q"].view(b, q_len, HQ, D).transpose(1, 2)
    want = torch.nn.functional.scaled_dot_product_attention(q4, kc, vc, is_causal=True, enable_gqa=True)
    return want.transpose(1, 2).reshape(b * q_len, HQ, D).float()


def extend_record(batch: int, q_len: int, fp8: bool, case: dict, tol: float) -> dict:
    """What the child needs of one extend case: its shape and seed, the small tensors, fingerprints of the rest."""
    return {
        "kind": "extend",
        "batch": batch,
        "kv_len": q_len,  # no prefix: the keys are the new tokens (the parent's case key)
        "fp8": bool(fp8),
        "kv_scale": EXTEND_FP8_SCALE if fp8 else None,
        "qo_indptr": case["cu"].detach().to("cpu").contiguous(),
        "q_fingerprint": fingerprint(case["q"]),
        **paged_fields(case),
        "tol": float(tol),
    }


def redraw_extend(record: dict, dev: torch.device) -> tuple[dict | None, str | None]:
    """The extend case of ``record`` drawn again on ``dev``, or (None, why it differs from the parent's)."""
    if dev.type != record["device_type"]:
        return None, f"the parent drew on {record['device_type']}, this child runs on {dev.type}"
    case = make_extend_case(record["batch"], record["kv_len"], record["fp8"], dev)
    if not torch.equal(case["page_table"].cpu(), record["page_table"]):
        return None, "redrawn page_table differs from the parent's (another torch or device?)"
    for key, name in (("q", "q"), ("k_cache", "k"), ("v_cache", "v")):
        if fingerprint(case[key]) != record[f"{name}_fingerprint"]:
            return None, f"redrawn {key} fingerprint differs from the parent's (another torch or device?)"
    return case, None


def _prefill_wrapper(fi, record: dict, dev: torch.device, graph: bool):
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
    qo, indptr, indices, last = (
        record[k].to(dev) for k in ("qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len")
    )
    kw = {}
    if graph:  # CUDA-graph mode: plan writes into fixed buffers that the captured kernels read
        kw = dict(
            use_cuda_graph=True,
            qo_indptr_buf=qo.clone(),
            paged_kv_indptr_buf=indptr.clone(),
            paged_kv_indices_buf=indices.clone(),
            paged_kv_last_page_len_buf=last.clone(),
        )
    wrapper = fi.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", **kw)
    kv_dtype = torch.float8_e4m3fn if record["fp8"] else torch.bfloat16
    wrapper.plan(qo, indptr, indices, last, HQ, HKV, D, PAGE, causal=True, q_data_type=torch.bfloat16,
                 kv_data_type=kv_dtype)  # fmt: skip
    return wrapper


def run_extend(fi, record: dict, args: argparse.Namespace, dev: torch.device) -> dict:
    """Check then time FlashInfer's paged prefill on one extend case; the result entry (``timing`` None when not
    timed, with the reason in ``note``)."""
    res = {"batch": record["batch"], "kv_len": record["kv_len"], "fp8": record["fp8"], "variant": VARIANT}
    res |= {"impl": ROW, "timing": None, "max_err_vs_ref": None, "note": ""}
    case, why = redraw_extend(record, dev)
    if why:
        return res | {"note": f"not timed: {why}"}
    wrapper = _prefill_wrapper(fi, record, dev, args.timer == "graph")
    return check_then_time(res, wrapper, case, causal_reference(case), record, args, dev)
