"""Interpret tier: the quantizer Triton kernels under TRITON_INTERPRET=1, bitwise against the oracles.

All cases run in one fresh interpreter (`_interpret_run.py`, which documents its one patch of the
interpreter's fp32 -> fp8 conversion); each case is reported as its own test.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.interpret

RUNNER = Path(__file__).with_name("_interpret_run.py")
_spec = importlib.util.spec_from_file_location("_b12x_quant_interpret_run", RUNNER)
_runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_runner)


# The NVFP4 "steps" / "pairs" cases of the 5-row shapes that run in the default tier: the interpreter
# runs the mirrors of their inline asm at ~0.5 s a program, 25-60 s a case on 2 CPU cores. One case
# per loop feature of "pairs": the k_iters loop with prefetch and unroll, a persistent grid with a
# register cap, the lane table (under unroll), a group's loads first (preload), a K-major grid; and "steps" on a
# skip_dead tile.
QUICK_LOOPS = (
    "nvfp4-bfloat16-5x48-4x16x1xstepsxTruexFalse-near-tensor",
    "nvfp4-bfloat16-5x48-4x16x1xpairsxFalsexFalsexhalvesx4xTruexTrue-near-tensor",
    "nvfp4-bfloat16-5x48-4x16x1xpairsxFalsexFalsexhalvesx1xTruexFalsex16xFalsex56-near-tensor",
    "nvfp4-bfloat16-5x48-4x16x1xpairsxFalsexFalsexhalvesx4xTruexTruex0xFalsex0xTrue-near-tensor",
    "nvfp4-bfloat16-5x48-4x16x1xpairsxFalsexFalsexhalvesx2xFalsexTruex0xFalsex0xTruexTrue-near-tensor",
    "nvfp4-bfloat16-5x48-4x16x1xpairsxFalsexFalsexhalvesx4xFalsexTruex0xFalsex0xTruexTruexFalsexTrue-near-tensor",
)
# The lane table's global-scale cases (7 x 64 on 4 x 16 tiles: ~30 s each) in the default tier: one
# inside its range and one outside (the uniform fallback).
QUICK_LUT_GS = ("float", "denorm_gs")


def _quick(case: str) -> bool:
    """The default tier. NVFP4's "steps" and "pairs": the 7 x 64 shape (every special input and
    global-scale kind; the lane table's at QUICK_LUT_GS) and QUICK_LOOPS. The other configs: every
    shape, and per variant of NVFP4_VARIANTS the "specials" and "near" inputs (its "wide", "ties"
    and "scale_ties" inputs, fp16 at 130 rows and the fp16 global-scale grid are slow; of the
    grid's tiled configs at 9 x 2048 one runs, the default config at every global scale). The slow tier
    (`-m slow`) runs every case; the exhaustive CPU mirror of "pairs" (test_nvfp4_pairs.py) and the
    H200's bitwise tier cover the math in full."""
    op, dtype, m, k, cfg, data, gs = _runner.CASES[case]
    if "xsteps" in case or "xpairs" in case:
        if case in QUICK_LOOPS:
            return True
        lut = cfg is not None and len(cfg) >= 14 and cfg[13]  # NvFp4Config's 14th field, lut
        return m == 7 and k == 64 and (not lut or gs in QUICK_LUT_GS)
    variant = op == "nvfp4" and (cfg, m, k) in _VARIANT_SHAPES
    if variant and data not in ("specials", "near"):
        return False
    if dtype == "float16" and (m == 130 or gs in ("up", "down")):
        return False
    if (m, k) == (9, 2048) and cfg is not None:  # the global-scale grid's tiles: ~15 s a case (512 programs)
        return dtype == "bfloat16" and gs == "up" and cfg == _runner.NVFP4_VARIANTS[0][0]
    return True


_VARIANT_SHAPES = {(cfg, m, k) for cfg, m, k in _runner.NVFP4_VARIANTS}


_S7 = sorted(c for c, v in _runner.CASES.items() if v[4] is not None and len(v[4]) >= 10)


def _group(case: str) -> str:
    """The NVFP4 "steps" and "pairs" cases run in their own interpreters (and 600 s budgets), the
    quick ones apart from the slow ones so the default tier never waits for a slow batch."""
    speed = "" if _quick(case) else "-slow"
    if case in _S7:  # session-7 variants (unroll, persistent, lut): their own batches of 4
        same = [c for c in _S7 if _quick(c) == _quick(case)]
        return f"s7-{same.index(case) // 4}{speed}"
    kind = "pairs" if "xpairs" in case else "steps" if "xsteps" in case else "rest"
    # the slow ones in four batches a kind (~6 pairs, ~8 steps, ~18 rest cases: each well under 600 s)
    return f"{kind}{sum(map(ord, case)) % 4 if speed else ''}{speed}"


@pytest.fixture(scope="module")
def results():
    cache = {}

    def get(group: str) -> dict:
        if group not in cache:
            ids = [c for c in _runner.CASES if _group(c) == group]
            env = dict(os.environ, TRITON_INTERPRET="1", TRITON_DEFAULT_FP_FUSION="0")
            cmd = [sys.executable, str(RUNNER), *ids]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
            assert out.returncode == 0, out.stderr[-4000:]
            cache[group] = json.loads(out.stdout.strip().splitlines()[-1])
        return cache[group]

    return get


@pytest.mark.parametrize(
    "case", [c if _quick(c) else pytest.param(c, marks=pytest.mark.slow) for c in sorted(_runner.CASES)]
)
def test_kernel_matches_oracle(results, case):
    got = results(_group(case))[case]
    assert got == "ok", got


def test_cases_cover_tails_and_configs():
    # Tails: K not a multiple of the tile, rows past a 128-row block, K/16 not a multiple of 4.
    ks = {c[3] for c in _runner.CASES.values()}
    assert {48, 160, 2048} <= ks and any(c[2] == 130 for c in _runner.CASES.values())
    assert {c[5] for c in _runner.CASES.values()} == {"wide", "specials", "ties", "near", "scale_ties", "decades"}
    # The exact configs, shapes and input kind of the 05:55 H200 failures run here.
    failed = {(tuple(cfg), m, k) for cfg, m, k in _runner.NVFP4_GPU_FAILED}
    assert failed <= {(c[4], c[2], c[3]) for c in _runner.CASES.values() if c[5] == "decades"}
    # Every NVFP4 variant (encode, skip_dead, scale_words, layout) and MXFP8 lean setting runs here.
    from flashinfer.experimental.b12x.quantization.mxfp8._kernel import MxFp8Config
    from flashinfer.experimental.b12x.quantization.mxfp8._kernel import candidate_configs as mx_cands
    from flashinfer.experimental.b12x.quantization.nvfp4._kernel import NvFp4Config
    from flashinfer.experimental.b12x.quantization.nvfp4._kernel import candidate_configs as nv_cands

    def variants(cls, cfgs):
        return {tuple(vars(cls(*c) if isinstance(c, tuple) else c).values())[3:] for c in cfgs}

    ran = [c for c in _runner.CASES.values() if c[4] is not None]
    nv_all, mx_all = nv_cands(7168, unvalidated=True), mx_cands(7168, unvalidated=True)  # GPU-validated or not
    assert variants(NvFp4Config, nv_all) <= variants(NvFp4Config, [c[4] for c in ran if c[0] == "nvfp4"])
    assert variants(MxFp8Config, mx_all) <= variants(MxFp8Config, [c[4] for c in ran if c[0] == "mxfp8"])
