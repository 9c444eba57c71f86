"""Every probe under scripts/ answers --help and stops on bad arguments with argparse's usage error (exit 2) naming
the problem, before anything needs a GPU: one table for all of them (the probes' own files test what they compute)."""

import pytest

CASES = [
    ("probe_e4m3_convert", ["--help"], 0, "usage"),
    ("probe_e4m3_convert", ["--iters", "8"], 2, "--iters must be >= 64"),
    ("probe_nvfp4_skeleton", ["--help"], 0, "usage"),
    ("probe_nvfp4_skeleton", ["--shapes", "4096x100"], 2, "--shapes takes MxK"),
    ("probe_nvfp4_ws", ["--help"], 0, "usage"),
    ("probe_nvfp4_ws", ["--shapes", "4096x100"], 2, "--shapes takes MxK"),
    ("probe_group_barrier", ["--help"], 0, "usage"),
    ("probe_group_barrier", ["--hidden", "7000"], 2, "--hidden must be a multiple of 64"),
    ("probe_group_barrier", ["--reps", "1"], 2, "--reps >= 3"),
    ("probe_mhc_ring", ["--help"], 0, "usage"),
    ("probe_mhc_ring", ["--hidden", "7000"], 2, "--hidden 7000"),
    ("probe_mhc_ring", ["--reps", "2"], 2, "--reps >= 3"),
    ("cluster_occupancy", ["--help"], 0, "usage"),
    ("probe_l2_prefetch", ["--help"], 0, "usage"),
    ("probe_l2_prefetch", ["--mb", "0"], 2, "--mb takes sizes in 1..1024"),
    ("probe_l2_prefetch", ["--reps", "2"], 2, "--reps >= 3"),
    ("sweep_summary", ["--help"], 0, "usage"),
    ("gemm_decode_ptx_fingerprints", ["--help"], 0, "usage"),
    ("sass_load_use", ["--help"], 0, "usage"),
    ("preload_range", ["--help"], 0, "usage"),
    ("preload_range", ["a.json"], 2, "at least 2 processes"),
    ("preload_range", ["a.json", "b.json"], 2, "no report at a.json"),
    ("sass_load_use", ["--window", "0"], 2, "--window must be >= 1"),
    ("cluster_occupancy", ["--gemm", "4096x100"], 2, "--gemm takes NxK"),
    ("cluster_occupancy", ["--entries", "8x32x2fspldk:c2ps"], 2, "is not a decode bench entry"),
    ("probe_moe_micro", ["--help"], 0, "usage"),
    ("probe_moe_micro", ["--shape", "128x8x2048"], 2, "--shape takes ExkxHxI"),
    ("probe_moe_micro", ["--shape", "128x8x1024x768"], 2, "H a multiple of 2048"),
    ("probe_moe_micro", ["--tokens", "17"], 2, "1 <= T <= E / k = 16"),
]


@pytest.mark.contract
@pytest.mark.parametrize("name, argv, code, text", CASES, ids=[f"{n}:{' '.join(a)}" for n, a, *_ in CASES])
def test_probe_arguments(name, argv, code, text, script_exit):
    got, out, err = script_exit(name, argv)
    assert got == code and text in (out if code == 0 else err), (got, out[-500:], err[-500:])
