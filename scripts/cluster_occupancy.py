"""How many clusters of the decode attention kernel fit the GPU at once (cuOccupancyMaxActiveClusters).

Session 39 measured the opt-in groups (`:c4sp` / `:c8sp`, clusters of 4 / 8 at one CTA an SM) 42-70% slower
than pairs (`:c2sp`) from 8k keys, with the same schedule; the suspect is cluster residency: 16 clusters of 8 or
32 of 4 may not all be resident at once on the H200's GPCs (docs/predictions/attention.md, session 39). This
script compiles each entry, loads its cubin through the driver and asks the occupancy API, per cluster size, how
many clusters fit, printing one JSON line per entry.

    python scripts/cluster_occupancy.py [--entries 8x32x2fspldk:c2sp 8x32x2fspldk:c8sp ...] [--kv-dtype ...]

Needs a GPU (the driver query) and the CuTe DSL toolchain.
"""

import argparse
import json
import os
import tempfile

import cuda.bindings.driver as drv

DEFAULT_ENTRIES = ("8x32x2fspldk:c2sp", "8x32x2fspldk:c4sp", "8x32x2fspldk:c8sp")


def _check(result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver call failed: {err}")
    return rest[0] if len(rest) == 1 else rest


def _kernel_function(cubin: bytes):
    module = _check(drv.cuModuleLoadData(cubin))
    count = _check(drv.cuModuleGetFunctionCount(module))
    functions = _check(drv.cuModuleEnumerateFunctions(count, module))
    if len(functions) != 1:
        raise RuntimeError(f"expected one kernel in the cubin, got {len(functions)}")
    return functions[0]


def max_active_clusters(func, threads: int, smem: int, cluster: int) -> int:
    attr = drv.CUfunction_attribute
    _check(drv.cuFuncSetAttribute(func, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))
    if cluster > 8:
        _check(drv.cuFuncSetAttribute(func, attr.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1))
    cfg = drv.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = 1, cluster * 64, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
    cfg.sharedMemBytes = smem
    launch_attr = drv.CUlaunchAttribute()
    launch_attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    launch_attr.value.clusterDim.x, launch_attr.value.clusterDim.y, launch_attr.value.clusterDim.z = 1, cluster, 1
    cfg.attrs = [launch_attr]
    cfg.numAttrs = 1
    return int(_check(drv.cuOccupancyMaxActiveClusters(func, cfg)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", nargs="+", default=list(DEFAULT_ENTRIES), help="decode bench entries")
    parser.add_argument("--kv-dtype", default="float8_e4m3fn", choices=("bfloat16", "float8_e4m3fn"))
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args(argv)

    os.environ["B12X_CACHE_DIR"] = tempfile.mkdtemp(prefix="b12x-occ-")  # a fresh compile keeps `.artifacts`
    import torch

    from flashinfer.experimental.b12x.attention.paged import _kernel_decode as kd
    from flashinfer.experimental.b12x.attention.paged._config import parse_decode_entry, smem_bytes, split_schedule

    torch.cuda.init()  # a current context for the driver calls
    torch.zeros(1, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    dims = ("bfloat16", args.kv_dtype, 32, 8, 128, 128, 16)
    for entry in args.entries:
        cfg = parse_decode_entry(entry)[0]
        sched = split_schedule(cfg, args.kv_dtype, 128, 8, sms, args.arch) if cfg.fused_schedule else None
        fn = kd.compile_decode(*dims, cfg, arch=args.arch, schedule=sched)
        func = _kernel_function(fn.artifacts.CUBIN)
        smem = smem_bytes(args.kv_dtype, 128, 128, cfg)
        row = {"entry": entry, "kv_dtype": args.kv_dtype, "threads": cfg.warps * 32, "smem": smem, "sms": sms}
        for c in (1, 2, 4, 8):  # a kernel compiled with fixed cluster dims may refuse other sizes
            try:
                row[f"clusters_of_{c}"] = max_active_clusters(func, cfg.warps * 32, smem, c)
            except RuntimeError as exc:
                row[f"clusters_of_{c}"] = str(exc)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
