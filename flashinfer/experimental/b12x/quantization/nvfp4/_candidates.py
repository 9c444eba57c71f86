"""The NVFP4 quantizer's candidate configs (issue #4): tuples of `NvFp4Config` fields in order, offered by
`_kernel.candidate_configs` (autotune, bench_quantization sweeps). Session 1's "div" tiles and the division-free
encodes, the "steps" tiles, session 6's first "pairs" tiles, session 7's unrolled / persistent / streaming /
lookup ones and session 27's preloading ones (`_kernel_pairs.py` and `_pairs.py` docstrings).

Each group is offered only with B12X_QUANT_UNVALIDATED_CANDIDATES (bench --match, test_gpu_candidates) until its
*_GPU_VALIDATED flag is set after the H200 passes it.
"""

# (block_m, block_k, num_warps, encode, skip_dead, scale_words[, layout]): predictions in
# docs/predictions/quantization.md. The default ("div", the oracle's own sequence) is the baseline.
#
# GPU-validated: these passed test_gpu_candidates.py bit for bit on the H200 (03:45 UTC run,
# 2026-11-30). Only they (and the default) are what `candidate_configs` offers by default.
_VALIDATED = (
    (4, 512, 4, "div", False, False),
    (8, 512, 4, "div", False, False),
    (16, 512, 8, "div", False, False),
    (32, 256, 8, "div", False, False),
    (32, 128, 4, "div", False, False),
    (64, 128, 8, "div", False, False),
)
# The division-free encodes. The 03:45 and 05:55 H200 runs failed 47 / 52 cases of them (ptxas of
# Triton 3.6 mishandling the E4M3 pack's 16-bit result); with `_e4m3_rn` (no fp8 instruction) all
# 35 passed test_gpu_candidates at 06:38 (2026-11-30, tree 9db40fe), so they are offered (and the
# default is one of them). A new config added here is offered at once: validate it on the GPU first,
# or add it behind B12X_QUANT_UNVALIDATED_CANDIDATES instead.
DIVISION_FREE_GPU_VALIDATED = True
_UNVALIDATED = (
    # division-free encode, tile sweep (large M: more rows per program)
    (16, 256, 4, "mul", False, False),
    (8, 512, 4, "mul", False, False),
    (16, 512, 8, "mul", False, False),
    (32, 256, 8, "mul", False, False),
    (32, 512, 8, "mul", False, False),
    (64, 256, 8, "mul", False, False),
    (16, 1024, 8, "mul", False, False),
    (64, 128, 4, "mul", False, False),
    # tiny M: dead padding programs skip their math; fewer warps per program
    (16, 256, 4, "mul", True, False),
    (16, 128, 2, "mul", True, False),
    (16, 128, 4, "mul", True, False),
    (16, 512, 4, "mul", True, False),
    (8, 256, 2, "mul", True, False),
    # binary-search encode
    (16, 256, 4, "search", False, False),
    (32, 256, 8, "search", False, False),
    (32, 512, 8, "search", False, False),
    (64, 256, 8, "search", False, False),
    (16, 256, 4, "search", True, False),
    (16, 128, 2, "search", True, False),
    (32, 256, 8, "search", True, True),
    # whole blocks per thread (two half loads, 8-byte packed stores)
    (16, 256, 4, "mul", False, False, "halves"),
    (32, 256, 8, "mul", False, False, "halves"),
    (32, 512, 8, "mul", False, False, "halves"),
    (64, 256, 8, "mul", False, False, "halves"),
    (16, 512, 4, "mul", False, False, "halves"),
    (64, 512, 8, "mul", False, False, "halves"),
    (32, 256, 8, "search", False, False, "halves"),
    (64, 256, 8, "search", False, False, "halves"),
    (16, 256, 4, "mul", True, False, "halves"),
    (16, 256, 2, "mul", True, False, "halves"),
    (16, 128, 1, "mul", True, False, "halves"),
    (32, 256, 8, "mul", True, True, "halves"),
    # 4-byte scale stores
    (16, 256, 4, "mul", True, True),
    (32, 256, 8, "mul", True, True),
    (16, 512, 8, "mul", True, True),
)


# The FMA-pipe encode ("steps", `_steps.py`: saturating FMAs instead of compares and selects, so the
# ALU pipe that bounds "mul"/"search" on SM90 stays nearly idle). All passed test_gpu_candidates bit
# for bit on the H200 (10:48 and the full gpu tier of 11:05, 2026-11-30, trees a617941 / 7f9ca94),
# so they are offered; a new one added here is offered at once: validate it on the GPU first.
# Predictions in docs/predictions/quantization.md (2026-11-30 10:00 section).
STEPS_GPU_VALIDATED = True
_UNVALIDATED_STEPS = (
    (16, 256, 4, "steps", True, False),  # rows: the tiny-M candidate (dead programs skip)
    # one 16-element block per thread: 47 registers (sm_90a), high occupancy
    (8, 256, 4, "steps", False, False, "halves"),
    (16, 256, 8, "steps", False, False, "halves"),
    (16, 128, 4, "steps", False, False, "halves"),
    (32, 256, 16, "steps", False, False, "halves"),
    (8, 256, 4, "steps", True, True, "halves"),
    # two blocks per thread: fewer per-thread costs, but ptxas keeps both blocks' steps live (80 regs)
    (16, 256, 4, "steps", False, False, "halves"),
    # a loop over k_iters column tiles per program: setup paid once, 46 regs (22.8 vs 24.1 per value)
    (8, 256, 4, "steps", False, False, "halves", 4),
    (16, 256, 8, "steps", False, False, "halves", 4),
    (16, 256, 8, "steps", False, False, "halves", 8),
)

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

# Session 31 (issue #4 at the 4096-row shapes; docs/predictions/quantization.md): the preload and large tiles
# with their programs in K-major order (`NvFp4Config.k_major`). Fields after lut: preload, pdl, k_major. H200
# 2026-12-04 (session 31): test_gpu_candidates 16 of 16 passed, so they are offered; timed against the plan,
# K-major preload 14.69 -> 14.28 µs at 4096 x 4096 (also as a programmatic dependent: 14.09 -> 13.69), a tie at
# 16384 x 4096, +0.7% at 4096 x 7168; the K-major large tile 5-7% slower than the plan everywhere. (The preload
# tile held to 64 registers, 8 programs an SM, ran 2-13% slower: ptxas's 8-24 bytes of stack; not kept.)
ORDER_GPU_VALIDATED = True
_UNVALIDATED_ORDER = (
    (8, 256, 4, "pairs", False, False, "halves", 4, False, True, 0, False, 0, True, True, False, True),
    (8, 256, 4, "pairs", False, False, "halves", 4, True, True, 0, False, 0, True, False, False, True),
)
