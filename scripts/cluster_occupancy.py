"""How many clusters of the decode attention kernel fit the GPU at once (cuOccupancyMaxActiveClusters).

Session 39 measured the opt-in groups (`:c4sp` / `:c8sp`, clusters of 4 / 8 at one CTA an SM) 42-70% slower
than pairs (`:c2sp`) from 8k keys, with the same schedule; the suspect is cluster residency: 16 clusters of 8 or
32 of 4 may not all be resident at once on the H200's GPCs (docs/predictions/attention.md, session 39). This
script compiles each entry, loads its cubin through the driver and asks the occupancy API, per cluster size, how
many clusters fit, printing one JSON line per entry.

    python scripts/cluster_occupancy.py [--entries 8x32x2fspldk:c2sp 8x32x2fspldk:c8sp ...] [--kv-dtype ...]
    python scripts/cluster_occupancy.py --gemm 4096x14336 [--bucket decode16]

Session 40 measured the attention entries (15 clusters of 8, 30 of 4 fit). `--gemm` asks the same of the decode
GEMM's heuristic config and its K-split variants (`_decode_sweeps.ksplit_variants`), which session 39 measured
slower everywhere (ksplit 4 about twice the time): a grid of more clusters than fit runs in two waves.

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


def max_active_clusters(func, threads: int, smem: int, cluster: int, axis: str = "y") -> int:
    attr = drv.CUfunction_attribute
    _check(drv.cuFuncSetAttribute(func, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))
    if cluster > 8:
        _check(drv.cuFuncSetAttribute(func, attr.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1))
    cfg = drv.CUlaunchConfig()
    grid, dims = {"x": cluster * 64, "y": 1}, {"x": cluster, "y": 1}
    if axis == "y":
        grid, dims = {"x": 1, "y": cluster * 64}, {"x": 1, "y": cluster}
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid["x"], grid["y"], 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
    cfg.sharedMemBytes = smem
    launch_attr = drv.CUlaunchAttribute()
    launch_attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    launch_attr.value.clusterDim.x, launch_attr.value.clusterDim.y, launch_attr.value.clusterDim.z = (
        dims["x"],
        dims["y"],
        1,
    )
    cfg.attrs = [launch_attr]
    cfg.numAttrs = 1
    return int(_check(drv.cuOccupancyMaxActiveClusters(func, cfg)))


def _rows(func, threads: int, smem: int, axis: str, row: dict) -> dict:
    for c in (1, 2, 4, 8):  # a kernel compiled with fixed cluster dims may refuse other sizes
        try:
            row[f"clusters_of_{c}"] = max_active_clusters(func, threads, smem, c, axis)
        except RuntimeError as exc:
            row[f"clusters_of_{c}"] = str(exc)
    return row


def attention_rows(entries, kv_dtype: str, arch: str, sms: int):
    from flashinfer.experimental.b12x.attention.paged import _kernel_decode as kd
    from flashinfer.experimental.b12x.attention.paged._config import parse_decode_entry, smem_bytes, split_schedule

    dims = ("bfloat16", kv_dtype, 32, 8, 128, 128, 16)
    for entry in entries:
        cfg = parse_decode_entry(entry)[0]
        sched = split_schedule(cfg, kv_dtype, 128, 8, sms, arch) if cfg.fused_schedule else None
        fn = kd.compile_decode(*dims, cfg, arch=arch, schedule=sched)
        smem = smem_bytes(kv_dtype, 128, 128, cfg)
        row = {"entry": entry, "kv_dtype": kv_dtype, "threads": cfg.warps * 32, "smem": smem, "sms": sms}
        yield _rows(_kernel_function(fn.artifacts.CUBIN), cfg.warps * 32, smem, "y", row)


def gemm_rows(bucket: str, shape: str, arch: str, sms: int):
    """The W4A16 decode GEMM's heuristic config at `shape` (N x K) and its `ksplit_variants` (clusters along x)."""
    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _decode_sweeps as S
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD

    n, k = (int(v) for v in shape.split("x"))
    base = L.default_config(bucket, n, k, "nvfp4", a_fmt="bfloat16", arch=arch)
    for cfg in (base, *S.ksplit_variants(base, k)):
        fn = KD.compile_decode("bfloat16", "nvfp4", "bfloat16", cfg, arch)
        smem = cfg.red_bytes + cfg.share_bytes + 1024  # the allocator's buffers, with room for its alignment
        ctas = -(-n // (cfg.rows * cfg.wn)) * cfg.ksplit
        row = {"gemm": f"{bucket} {shape}", "config": repr(cfg), "ctas": ctas, "threads": cfg.warps * 32, "smem": smem}
        yield _rows(_kernel_function(fn.artifacts.CUBIN), cfg.warps * 32, smem, "x", row)


def _shape(text: str) -> str:
    n, sep, k = text.partition("x")
    if not (sep and n.isdigit() and k.isdigit() and int(n) % 16 == 0 and int(k) % 128 == 0 and int(n) > 0):
        raise argparse.ArgumentTypeError(f"--gemm takes NxK with N a multiple of 16 and K of 128, got {text!r}")
    return text


def _entry(text: str) -> str:
    from flashinfer.experimental.b12x.attention.paged._config import parse_decode_entry

    try:
        parse_decode_entry(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--entries: {text!r} is not a decode bench entry ({exc})") from None
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--entries", nargs="+", type=_entry, default=list(DEFAULT_ENTRIES), help="decode attention bench entries"
    )
    parser.add_argument("--kv-dtype", default="float8_e4m3fn", choices=("bfloat16", "float8_e4m3fn"))
    parser.add_argument(
        "--gemm", metavar="NxK", type=_shape, help="the decode GEMM's ksplit variants at this shape instead"
    )
    parser.add_argument("--bucket", default="decode16", choices=("decode8", "decode16", "decode32", "decode64"))
    parser.add_argument("--arch", default="sm_90a", choices=("sm_90a", "sm_120a"))
    args = parser.parse_args(argv)

    os.environ["B12X_CACHE_DIR"] = tempfile.mkdtemp(prefix="b12x-occ-")  # a fresh compile keeps `.artifacts`
    import torch

    torch.cuda.init()  # a current context for the driver calls
    torch.zeros(1, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if args.gemm:
        rows = gemm_rows(args.bucket, args.gemm, args.arch, sms)
    else:
        rows = attention_rows(args.entries, args.kv_dtype, args.arch, sms)
    for row in rows:
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
