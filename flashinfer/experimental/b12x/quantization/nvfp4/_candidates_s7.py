"""The session-7 NVFP4 "pairs" candidate configs (issue #4; `_kernel_pairs.py` and `_pairs.py` docstrings).

`_kernel.candidate_configs` offers them only with B12X_QUANT_UNVALIDATED_CANDIDATES (bench --match,
test_gpu_candidates) until S7_PAIRS_GPU_VALIDATED is set after the H200 passes them.
"""

# Session 7 (issue #4, `_kernel_pairs.py` docstring), offered only with B12X_QUANT_UNVALIDATED_CANDIDATES
# until test_gpu_candidates passes them on the H200. Fields after layout: k_iters, prefetch, unroll,
# persistent, stream, max_regs, lut. Predictions: docs/predictions/quantization.md (session 7).
S7_PAIRS_GPU_VALIDATED = (
    True  # H200 2026-11-30 19:15: test_gpu_candidates -k "nvfp4 and pairs" 112 passed, test_gpu_nvfp4_s7 18 passed
)
_UNVALIDATED_PAIRS_S7 = (
    (8, 256, 4, "pairs", False, False, "halves", 4, True, True),  # LARGE_M_PAIRS unrolled (56 regs)
    (8, 256, 4, "pairs", False, False, "halves", 8, True, True),
    (8, 256, 4, "pairs", False, False, "halves", 4, False, True),  # no prefetch: 48 regs, 10 programs / SM
    (8, 256, 4, "pairs", False, False, "halves", 4, True, True, 0, True),  # + streaming hints
    (8, 256, 4, "pairs", False, False, "halves", 1, True, False, 16, False, 56),  # persistent, tile units, 9 / SM
    (8, 256, 4, "pairs", False, False, "halves", 1, False, False, 16),  # no prefetch: 54 regs, 9 / SM
    (8, 256, 4, "pairs", False, False, "halves", 4, True, True, 16, False, 56),  # 4-tile groups, 9 / SM
    (8, 256, 4, "pairs", False, False, "halves", 4, True, True, 16),  # 64 regs: 8 / SM
    (8, 256, 4, "pairs", False, False, "halves", 2, True, True, 16, False, 56),
    (8, 256, 4, "pairs", False, False, "halves", 4, False, True, 16),
    (8, 256, 4, "pairs", False, False, "halves", 4, True, True, 16, True, 56),  # + streaming hints
    (16, 256, 8, "pairs", False, False, "halves", 4, True, True, 16),
    # thresholds from the per-lane table (lut: ~237 SASS a tile-thread on the executed path vs 285)
    (8, 256, 4, "pairs", False, False, "halves", 4, True, True, 0, False, 0, True),  # 64 regs: 8 / SM
    (8, 256, 4, "pairs", False, False, "halves", 4, False, True, 0, False, 0, True),  # 56 regs: 9 / SM
    (8, 256, 4, "pairs", False, False, "halves", 4, True, True, 16, False, 0, True),
    (8, 256, 4, "pairs", False, False, "halves", 4, False, True, 16, False, 0, True),
    (8, 256, 4, "pairs", False, False, "halves", 1, False, False, 16, False, 0, True),
    (8, 256, 4, "pairs", False, False, "halves", 1, True, False, 16, False, 64, True),
)
