"""PTX fingerprints of gemm.blockscaled's decode kernels (the plain and the fused one) on sm_90a and sm_120a: the
W4A16 NVFP4 heuristic configs of issue #6's shapes at M <= 8 / 16, the K-loop forms (the prefetch pipeline,
upfront loads, kgroup, ashare, the K split, pdl_wait) and the fused kernel's epilogues (silu_mul, residual with
warp groups, the norm with the prefetch pipeline, upfront, pdl "prefetch", rope_append), and moe.fused_moe's expert GEMMs, which
share DecodeLogic (FC1 / FC2 of five tilings). With `--others`, also the gemm kernels beside decode: the stream
layout, the tiled GEMM (dequantizing and fp8_mma), the two-pass GEMM's mma16 and dequantize passes, the SM120
block-scaled GEMM (sm_120a only). For a refactor that must not change the kernels (session 40's shared
`DecodeLogic.k_loop`): run it before and after with the disk cache off and compare.

    B12X_DISK_CACHE=0 python3 scripts/gemm_decode_ptx_fingerprints.py before.json   # edit, then
    B12X_DISK_CACHE=0 python3 scripts/gemm_decode_ptx_fingerprints.py after.json && cmp before.json after.json
    B12X_DISK_CACHE=0 python3 scripts/gemm_decode_ptx_fingerprints.py --others only others.json

CPU only (compiles, never launches); a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

SHAPES = ((4096, 14336), (28672, 4096), (4096, 4096), (7168, 2048))  # issue #6's (N, K)


def configs() -> dict:
    """name -> ("plain", DecodeConfig) or ("fused", FusedConfig)."""
    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled._epilogue import RopeLayout

    out = {}
    for n, k in SHAPES:
        for bucket in ("decode8", "decode16"):
            out[f"plain/{bucket}/{n}x{k}"] = ("plain", L.default_config(bucket, n, k, "nvfp4", a_fmt="bfloat16"))
    base = out["plain/decode16/4096x14336"][1]
    forms = dict(
        prefetch2=dict(prefetch=2),
        upfront2=dict(upfront=2, prefetch=0, kgroup=1),
        kgroup2=dict(kgroup=2, prefetch=0),
        ksplit2=dict(ksplit=2),
        pdl_wait=dict(pdl_wait=True),
        ashare_wn2=dict(wn=2, ashare=True, prefetch=0, kgroup=1, upfront=0),
    )
    for name, changes in forms.items():
        out[f"plain/{name}"] = ("plain", dataclasses.replace(base, **changes))
    fused = dict(
        silu_wait=("decode16", 28672, 4096, "silu_mul", "wait", None, False),
        residual_groups=("decode16", 28672, 4096, "residual", "off", "wn=2", False),
        silu_norm_prefetch=("decode8", 11264, 2048, "silu_mul", "prefetch", None, True),
        upfront_wait=("decode8", 4096, 4096, "none", "wait", "upfront=2,prefetch=0", False),
        pipeline_prefetch=("decode8", 4096, 4096, "none", "prefetch", "prefetch=2", False),
    )
    for name, (bucket, n, k, epilogue, pdl, opts, norm) in fused.items():
        cfg = L.fused_config(bucket, n, k, "nvfp4", "bfloat16", epilogue, pdl, opts, norm=norm)
        out[f"fused/{name}"] = ("fused", cfg)
    lay = RopeLayout(16, 4, 128, 16)  # rope_append: its own launcher (six more tensors, n = the pair count)
    for bucket in ("decode8", "decode32"):
        cfg = L.fused_config(
            bucket, lay.rows, 2048, "nvfp4", "bfloat16", "rope_append", "prefetch", norm=True, rope=lay
        )
        out[f"fused/rope_{bucket}"] = ("fused", cfg)
    return out


MOE_TILINGS = ("base", "w4p1", "w4p1-s2", "own8p2e", "w8n2p1")  # moe's expert GEMMs share DecodeLogic


def moe_configs() -> dict:
    """name -> (fc, config, span) of moe.fused_moe's expert GEMMs at one token tile: `bench_moe --expert-sweep`'s
    tilings of MOE_TILINGS (plain chunks, the prefetch pipeline, two column tiles a CTA, the early stages, warp
    groups), FC1 and FC2."""
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    out = {}
    for label, fc1, fc2, span in X._SWEEP[1]:
        if label in MOE_TILINGS:
            out[f"moe/fc1/{label}"] = (1, fc1, span)
            out[f"moe/fc2/{label}"] = (2, fc2, span)
    return out


def other_kernels() -> dict:
    """name -> (archs, build(arch) -> the compiled launcher) of the gemm kernels beside decode."""
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_dequant as KQ
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_mma16 as KM
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_sm120 as K120
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_stream as KS
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_tiled as KT

    both = ("sm_90a", "sm_120a")
    out = {}
    for n, k in ((28672, 4096), (4096, 4096)):
        cfg = KS.default_config(16, n, k)
        out[f"stream/{n}x{k}"] = (both, lambda arch, c=cfg: KS.compile_stream("bfloat16", "nvfp4", "bfloat16", c, arch))
    tiled = dict(
        nvfp4=("nvfp4", KT.TiledConfig()),
        nvfp4_group=("nvfp4", KT.TiledConfig(group_m=8, mix=2)),
        mxfp8_fp8mma=("mxfp8", KT.TiledConfig(fp8_mma=True)),
        block_fp8mma=("fp8_block", KT.TiledConfig(fp8_mma=True)),
    )
    for name, (fmt, cfg) in tiled.items():
        out[f"tiled/{name}"] = (both, lambda arch, f=fmt, c=cfg: KT.compile_tiled(f, f, "bfloat16", c, arch))
    mma16 = dict(
        base=("nvfp4", KM.Mma16Config()),
        group_pdl=("mxfp8", KM.Mma16Config(64, 64, 2, 2, 3, group_m=2, pdl=True)),
        e4m3_pipe=("fp8_tensor", KM.Mma16Config(64, 64, 2, 2, 2, group_m=2, pipe=True, e4m3=True)),
    )
    for name, (fmt, cfg) in mma16.items():
        out[f"mma16/{name}"] = (both, lambda arch, f=fmt, c=cfg: KM.compile_mma16(f, f, "bfloat16", c, arch))
    for fmt in ("nvfp4", "mxfp8"):
        cfg = KQ.DequantConfig()
        out[f"dequant/{fmt}"] = (both, lambda arch, f=fmt, c=cfg: KQ.compile_dequant(f, "bfloat16", c, arch))
    for fmt in ("nvfp4", "mxfp8"):
        cfg = K120.default_config(fmt)
        out[f"sm120/{fmt}"] = (("sm_120a",), lambda arch, f=fmt, c=cfg: K120.compile_sm120(f, f, "bfloat16", c, arch))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the JSON file to write ({arch/name: fingerprint})")
    parser.add_argument(
        "--others",
        choices=("no", "also", "only"),
        default="no",
        help="the gemm kernels beside decode (stream, tiled, mma16, dequant, sm120): not, as well, or alone",
    )
    args = parser.parse_args(argv)

    from flashinfer.experimental.b12x._lib.cuda_binary import ptx_fingerprint
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode_fused as F
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    compile_fn = {"plain": KD.compile_decode, "fused": F.compile_decode_fused}
    out = {}
    for arch in ("sm_90a", "sm_120a") if args.others != "only" else ():
        for name, (kind, cfg) in configs().items():
            key = f"{arch}/{name}"
            out[key] = ptx_fingerprint(compile_fn[kind]("bfloat16", "nvfp4", "bfloat16", cfg, arch).artifacts.PTX)
            print(key, out[key], flush=True)
        for name, (fc, cfg, span) in moe_configs().items():
            key = f"{arch}/{name}"
            if fc == 1:
                fn = X.compile_fc1("bfloat16", "nvfp4", "silu", cfg, arch, span=span)
            else:
                fn = X.compile_fc2("bfloat16", "nvfp4", cfg, arch, span=span)
            out[key] = ptx_fingerprint(fn.artifacts.PTX)
            print(key, out[key], flush=True)
    for name, (archs, build) in other_kernels().items() if args.others != "no" else ():
        for arch in archs:
            key = f"{arch}/{name}"
            out[key] = ptx_fingerprint(build(arch).artifacts.PTX)
            print(key, out[key], flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print(f"{len(out)} kernels -> {args.out}")


if __name__ == "__main__":
    main()
