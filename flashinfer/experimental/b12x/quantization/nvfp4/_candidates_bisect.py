"""The NVFP4 "bisect" candidate configs (issue #4; `_bisect.py` docstring): the "pairs" program with the
codes found by bisection and placed by bitwise selects, same tiles as the measured "pairs" ones.

`_kernel.candidate_configs` offers them only with B12X_QUANT_UNVALIDATED_CANDIDATES (bench --match /
--encode bisect, test_gpu_candidates) until BISECT_GPU_VALIDATED is set after the H200 passes them.
Fields after layout: k_iters, prefetch, unroll, persistent, stream, max_regs, lut. SASS of the k-loop
(sm_90a, Triton 3.9, a tile-thread = 16 values) and registers, against the same "pairs" tile:
predictions in docs/predictions/quantization.md (session 10).
"""

BISECT_GPU_VALIDATED = False
_UNVALIDATED_BISECT = (
    (8, 256, 4, "bisect", False, False, "halves", 4, True),  # LARGE_M_PAIRS twin: 262 vs 307, 59 regs (8 / SM)
    (8, 256, 4, "bisect", False, False, "halves", 4),  # no prefetch: 247 vs 293, 51 regs (9 / SM)
    (16, 256, 8, "bisect", False, False, "halves", 4, True),
    (8, 256, 4, "bisect", False, False, "halves", 4, False, True),  # unrolled
    (8, 256, 4, "bisect", False, False, "halves", 4, False, True, 0, False, 0, True),  # unrolled + lane table
    (8, 256, 4, "bisect", False, False, "halves", 1, False, False, 16, False, 0, True),  # persistent tiles
)
# max_regs 56 (9 programs / SM for the 59-60 register tiles) spills one register on sm_90a: not offered.
