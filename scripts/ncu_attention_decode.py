"""Run one attention.paged decode case under Nsight Compute, bracketed so ncu profiles only its kernels.

    ncu --profile-from-start off --clock-control none --cache-control all \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section SchedulerStats --section Occupancy --csv \
        python3 scripts/ncu_attention_decode.py --kv fp8 --batch 1 --kv-len 32768 [--config 8x32x2fspldk]

The case is bench_attention's (same drawing, Hq 32 / Hkv 8, D 128, page 16); --config is a bench
--decode-configs entry ('heuristic' by default). The output is checked against SDPA first, then
--runs runs go between cudaProfilerStart and Stop.
"""

from __future__ import annotations

import argparse

import torch


def main() -> int:
    import b12x
    from benchmarks.experimental.b12x import _flashinfer_peer as fipeer
    from benchmarks.experimental.b12x import bench_attention as BA
    from flashinfer.experimental.b12x._lib.arch import target_arch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kv", choices=("bf16", "fp8"), default="fp8")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--kv-len", type=int, default=32768)
    p.add_argument("--config", default="heuristic")
    p.add_argument("--runs", type=int, default=2)
    args = p.parse_args()
    if min(args.batch, args.kv_len, args.runs) < 1 or args.kv_len % BA.PAGE:
        p.error(f"--batch, --runs >= 1 and --kv-len a multiple of {BA.PAGE}, got {args}")
    dev, fp8 = torch.device("cuda"), args.kv == "fp8"
    drawn = fipeer.make_case(args.batch, args.kv_len, fp8, dev)
    kv_dtype = "float8_e4m3fn" if fp8 else "bfloat16"
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    selection = BA.decode_selection(args.config, kv_dtype, target_arch(dev), sms)
    paged = b12x.attention.paged
    work = paged.default_max_work_items(args.batch, BA.HKV)
    if selection is not None:
        work = max(work, args.batch + selection.schedule.target_items)
    caps = paged.Caps(
        device=str(dev), mode="decode", dtype="bfloat16", kv_dtype=kv_dtype, num_q_heads=BA.HQ,
        num_kv_heads=BA.HKV, head_dim_qk=BA.D, head_dim_vo=BA.D, page_size=BA.PAGE, max_total_q=args.batch,
        max_batch=args.batch, max_page_table_width=args.kv_len // BA.PAGE, max_work_items=work,
        max_partial_rows=paged.default_max_partial_rows(work, BA.HQ), num_cache_pages=drawn["k_cache"].shape[0],
    )  # fmt: skip
    plan = paged.plan(caps, override=selection)
    b12x.PreparationSession(dev).prepare([plan])
    kw = dict(k_descale=drawn["descale"], v_descale=drawn["descale"]) if fp8 else {}
    binding = paged.bind(plan, q=drawn["q"], k_cache=drawn["k_cache"], v_cache=drawn["v_cache"],
                         page_table=drawn["page_table"], cache_seqlens=drawn["lens"], **kw)  # fmt: skip
    out, _ = paged.run(binding=binding)
    kc = BA.fiext.contiguous_bf16(drawn["k_cache"], drawn["page_table"], drawn["descale"])
    vc = BA.fiext.contiguous_bf16(drawn["v_cache"], drawn["page_table"], drawn["descale"])
    want = torch.nn.functional.scaled_dot_product_attention(drawn["q"].unsqueeze(2), kc, vc, enable_gqa=True)
    err = (out.float() - want.squeeze(2).float()).abs().max().item()
    print(f"{plan.state.selection}; max |ours - sdpa| = {err:.2e}")
    if not err <= (0.05 if fp8 else 0.02):
        print("MISMATCH")
        return 1
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(args.runs):
        paged.run(binding=binding)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
