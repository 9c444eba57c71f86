"""The session-15 NVFP4 "lanes" candidate configs (issue #4; `_kernel_pairs._load_lanes`).

Why. Nsight Compute on the H200 (2026-12-01, `scripts/ncu_quantization.py`, tree 0d592b0) put the
large tile (LARGE_M_PAIRS, 16384 x 7168) at 77% of the memory and 77% of the SM throughput with DRAM
at 63%, and flagged its loads: "only 16.0 of the 32 bytes transmitted per sector are utilized by each
thread" (the "halves" layout reads each block as two 16-byte halves 32 bytes apart, so every warp load
touches twice the sectors it uses; the second load hits L1, 46% hit rate). "lanes" reads the same
words with whole lines per warp load and swaps halves between lane pairs (one shuffle a word).

Offered only with B12X_QUANT_UNVALIDATED_CANDIDATES until the H200 passes them bit for bit
(test_gpu_candidates -k lanes). Fields: block_m, block_k, num_warps, encode, skip_dead,
scale_words, layout, k_iters, prefetch, unroll. Predictions: docs/predictions/quantization.md.
"""

LANES_GPU_VALIDATED = False
_UNVALIDATED_LANES = (
    (8, 256, 4, "pairs", False, False, "lanes", 4, True),  # LARGE_M_PAIRS, re-laid: 2 rows x 256 B a warp load
    (4, 512, 4, "pairs", False, False, "lanes", 4, True),  # one row x 512 B a warp load
    (8, 256, 4, "pairs", False, False, "lanes", 4, True, True),  # unrolled
    (8, 256, 4, "pairs", False, False, "lanes", 4, False),  # no prefetch: fewer registers
    (16, 256, 8, "pairs", False, False, "lanes", 4, True),
)


def lanes_ok(config) -> bool:
    """Layout "lanes" (an `NvFp4Config`'s other rules aside): the "pairs" encode on a plain grid (no
    persistent, lut or stream variant), byte scale stores, and at least 4 blocks a tile (an even
    number, so that a lane pair holds both halves of its blocks)."""
    return (
        config.encode == "pairs"
        and config.block_k >= 64
        and not (config.persistent or config.lut or config.stream or config.scale_words)
    )
