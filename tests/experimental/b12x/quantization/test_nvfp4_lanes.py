"""NVFP4 layout "lanes" (session 15, issue #4; `_kernel_pairs._load_lanes`, `_candidates_lanes.py`).

CPU checks of what the interpreter tier cannot show: the lane exchange's block order is a bijection
that leaves each lane pair holding both halves of its blocks, the config rules, that the candidates
are offered only as unvalidated until the H200 passes them, and that each compiles for sm_90a and
sm_120a with one shuffle a loaded word and no local-memory spills. Bits: test_interpret (the plain
loads at the same block order, `_interpret_run.NVFP4_VARIANTS`) and, on the H200,
test_gpu_candidates -k lanes and test_gpu_nvfp4_lanes (the shuffle itself).
"""

import re

import pytest

from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv

LANES = [nv.NvFp4Config(*c) for c in nv._UNVALIDATED_LANES]


@pytest.mark.parametrize("tile_nb", [4, 8, 16, 32, 64])
def test_lane_blocks_pairs_each_block_with_its_halves(tile_nb):
    # Python mirror of `_kernel_pairs.lane_blocks` and of what `_exchange_halves` leaves a lane: chunk c
    # of span s is half c % 2 of block s * tile_nb / 2 + c // 2.
    owned = [c // 2 + (c % 2) * (tile_nb // 2) for c in range(tile_nb)]
    assert sorted(owned) == list(range(tile_nb))  # every block of the tile exactly once
    for c in range(0, tile_nb, 2):  # lanes c (even) and c + 1 swap one word
        even, odd = owned[c], owned[c + 1]
        # even keeps its span-0 chunk (block c/2, first half) and receives the odd lane's (second half)
        assert (even, 0) == (c // 2, c % 2) and (even, 1) == ((c + 1) // 2, (c + 1) % 2)
        # odd keeps its span-1 chunk (second half) and receives the even lane's span-1 chunk (first half)
        assert odd == tile_nb // 2 + c // 2


def test_lanes_config_rules():
    ok = lambda **kw: nv.can_implement(7168, nv.NvFp4Config(**{"encode": "pairs", "layout": "lanes", **kw}))
    assert ok() and ok(k_iters=4, prefetch=True) and ok(k_iters=4, prefetch=True, unroll=True)
    assert ok(block_k=64) and not ok(block_k=32) and not ok(block_k=16)  # at least 4 blocks a tile
    assert not ok(encode="steps") and not ok(encode="search")  # "pairs" only
    assert not ok(scale_words=True)  # byte scale stores at the exchanged order
    assert not ok(persistent=16) and not ok(k_iters=4, unroll=True, stream=True)
    assert not ok(k_iters=4, unroll=True, lut=True)
    assert nv.can_implement(48, nv.NvFp4Config(4, nv._block_k_cap(48, 256), 1, "pairs", layout="lanes"))


def test_lanes_offered_only_unvalidated(monkeypatch):
    monkeypatch.delenv(nv.UNVALIDATED_ENV, raising=False)
    if not nv.LANES_GPU_VALIDATED:
        assert not set(LANES) & set(nv.candidate_configs(7168))
    assert set(LANES) <= set(nv.candidate_configs(7168, unvalidated=True))


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("idx", range(len(LANES)))
def test_lanes_compile_with_one_shuffle_a_word(arch, idx, cuda_binary):
    cfg = LANES[idx]
    compiled = nv.compile_for_target("bfloat16", 7168, cfg, arch)
    ptx = compiled.asm["ptx"]
    loads = cfg.k_iters if cfg.unroll else (1 + cfg.prefetch)  # tile loads in the program's code
    words = cfg.block_m * cfg.block_k // (32 * cfg.num_warps) // 4  # int32 words a thread per span
    assert ptx.count("shfl.sync.bfly.b32") == loads * words, cfg
    assert len(re.findall(r"ld\.global(\.\w+)*\.v4\.b32", ptx)) == 2 * loads * words // 4, cfg
    sass = cuda_binary.run("cuobjdump", compiled.asm["cubin"], "-sass")
    assert not re.search(r"\b(STL|LDL)\b", sass), f"{cfg} spills on {arch}"
    # The exchange assumes lane parity is chunk parity: the shuffle runs in a layout whose lanes walk
    # the chunks (4 words a thread, chunks before rows), which Triton 3.6 only picks for flat pointers.
    ttgir = compiled.asm["ttgir"]
    layouts = dict(re.findall(r"^(#\w+) = #ttg\.blocked<\{(.*)\}>", ttgir, re.M))
    asm_layouts = set(re.findall(r"elementwise_inline_asm \"\{[^\n]*shfl\.sync\.bfly[^\n]*-> tensor<[^,]*, (#\w+)>", ttgir))
    assert asm_layouts, cfg
    for name in asm_layouts:
        assert "sizePerThread = [1, 1, 4]" in layouts[name] and "order = [2, 1, 0]" in layouts[name], layouts[name]
