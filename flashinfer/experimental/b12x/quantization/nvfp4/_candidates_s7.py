"""The NVFP4 "pairs" candidate configs (issue #4; `_kernel_pairs.py` and `_pairs.py` docstrings): session 6's
first tiles, session 7's unrolled / persistent / streaming / lookup ones, session 27's preloading ones.

`_kernel.candidate_configs` offers each group only with B12X_QUANT_UNVALIDATED_CANDIDATES (bench --match,
test_gpu_candidates) until its *_GPU_VALIDATED flag is set after the H200 passes it.
"""

# The bf16-pair encode ("pairs", `_pairs.py`): 16.9 SASS instructions per value at 8x256x4 k_iters 4
# against 21.75 for the same "steps" tile (sm_90a, Triton 3.9). GPU-validated on the H200 (session 6,
# 14:02, tree 8e65b41: test_gpu_nvfp4 -k pairs 131 passed, test_gpu_candidates -k "nvfp4 and pairs" 40
# passed, bit-equal to the oracle), so it is offered by default and LARGE_M_PAIRS, the fastest row of
# the 14:03 sweep (graph timer: 16384x7168 97.6 µs against the steps tile's 113, 16384x4096 56.0,
# 4096x7168 27.0, 4096x4096 15.9), is the dispatch's large tile.
PAIRS_GPU_VALIDATED = True
LARGE_M_PAIRS = (8, 256, 4, "pairs", False, False, "halves", 4, True)  # measured best (14:03)
_UNVALIDATED_PAIRS = (
    (8, 256, 4, "pairs", False, False, "halves", 4),  # the best "steps" tile, re-encoded
    (8, 256, 4, "pairs", False, False, "halves", 1),
    (16, 256, 8, "pairs", False, False, "halves", 4),
    (16, 256, 8, "pairs", False, False, "halves", 8),
    (32, 256, 16, "pairs", False, False, "halves", 4),
    (8, 256, 4, "pairs", True, True, "halves", 4),
    (16, 128, 4, "pairs", False, False, "halves", 4),
    # the next column tile's loads in flight during this tile's math (+8 registers)
    (8, 256, 4, "pairs", False, False, "halves", 4, True),
    (16, 256, 8, "pairs", False, False, "halves", 4, True),
    (8, 256, 4, "pairs", False, False, "halves", 8, True),
)


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

# Session 27 (issue #4 at the 4096-row shapes; docs/predictions/quantization.md): every tile of a group
# loaded before the group's math (`NvFp4Config.preload`). H200 2026-12-03 (session 27): test_gpu_candidates
# -k "nvfp4 and True-True]" (the four at every shape) and the dispatch's mid tile through test_gpu.py.
PRELOAD_GPU_VALIDATED = True
_UNVALIDATED_PRELOAD = (
    (8, 256, 4, "pairs", False, False, "halves", 4, False, True, 0, False, 0, True, True),
    (8, 256, 4, "pairs", False, False, "halves", 2, False, True, 0, False, 0, True, True),
    (16, 256, 8, "pairs", False, False, "halves", 2, False, True, 0, False, 0, True, True),
    (8, 256, 4, "pairs", False, False, "halves", 4, False, True, 16, False, 0, True, True),
)
