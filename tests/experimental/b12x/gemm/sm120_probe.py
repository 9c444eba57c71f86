"""Trace-time probes of the SM120 kernels' layouts (gemm's `_kernel_sm120` and moe's grouped kernel): what the DSL
itself says, for the address arithmetic tests to compare against. CPU only (a trace for sm_120a)."""

from __future__ import annotations


def scale_layouts(gemm, stages: int, extra=lambda tiled_mma, found: None) -> dict:
    """{"a" | "b": {(row, k, stage): offset}}: the DSL's SM120 scale-tile shared layouts
    (`sm120_make_smem_layout_sfa` / `_sfb` for `gemm`'s tiled MMA) at every row and K value of a 128 x 128 tile
    and every stage. `extra(tiled_mma, found)` adds probes of its own to `found` in the same trace."""
    import cutlass.cute as cute
    import cutlass.utils.blockscaled_layout as blockscaled_utils

    from flashinfer.experimental.b12x._lib.compile import cute_compile

    found = {}

    class Probe:
        @cute.jit
        def __call__(self):
            tiled_mma = gemm._tiled_mma()
            for name, make in (
                ("a", blockscaled_utils.sm120_make_smem_layout_sfa),
                ("b", blockscaled_utils.sm120_make_smem_layout_sfb),
            ):
                layout = make(tiled_mma, gemm.tile, gemm.vec, stages)
                found[name] = {
                    (r, kk, s): cute.crd2idx((r, kk, s), layout)
                    for s in range(stages)
                    for r in range(128)
                    for kk in range(128)
                }
            extra(tiled_mma, found)  # (no `if` here: the DSL rewrites a jit function's ifs)

    cute_compile(Probe(), arch="sm_120a")
    return found
