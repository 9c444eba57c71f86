"""NVFP4 `tail` (session 32): the K-major grid's last column groups run as one-tile programs, started last.

CPU checks: the config rules, the grid size, that the candidates stay unvalidated until the H200 passes them
(test_gpu_candidates), and that the program -> (row block, tile) map covers every tile of the padded grid
exactly once (a mirror of `_kernel_pairs.tail_origin`, checked against the kernel by the interpreter cases of
`_interpret_run.NVFP4_VARIANTS`, whose tails leave the output poisoned if a tile is skipped).
"""

import dataclasses

import pytest

from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv

TAIL = [nv.NvFp4Config(*c) for c in nv._UNVALIDATED_TAIL]


def test_tail_rules_grid_and_offer(monkeypatch):
    assert TAIL and all(c.tail > 0 and c.k_major and c.preload for c in TAIL)
    base = dataclasses.replace(TAIL[0], tail=0)
    ok = lambda **kw: nv.can_implement(4096, dataclasses.replace(base, **kw))
    assert ok(tail=1) and ok(tail=2**20 - 1)
    assert not ok(tail=-1) and not ok(tail=2**20) and not ok(tail=True)
    assert not ok(tail=8, k_major=False)  # the order the tail relies on: a one-axis grid, started in order
    assert not ok(tail=8, unroll=False, preload=False)  # the group path it splits is the unrolled one
    assert not ok(tail=8, skip_dead=True)  # tail programs never skip
    # 4096 x 4096: 512 row blocks x 4 groups; the last `tail` groups become 4 programs each
    assert nv.grid(4096, 4096, base) == (2048, 1, 1)
    assert nv.grid(4096, 4096, dataclasses.replace(base, tail=462)) == (2048 - 462 + 4 * 462, 1, 1)
    assert nv.grid(1, 4096, dataclasses.replace(base, tail=462)) == (16 * 4 * 4, 1, 1)  # tail past the grid: all tiles
    assert nv.constexprs(4096, TAIL[0])[-2] == TAIL[0].tail
    monkeypatch.delenv(nv.UNVALIDATED_ENV, raising=False)
    assert nv.TAIL_GPU_VALIDATED or not set(TAIL) & set(nv.candidate_configs(4096))
    assert set(TAIL) <= set(nv.candidate_configs(4096, unvalidated=True))


def _tail_origin(pid, m, ng, block_m, k_iters, tail):
    """`_kernel_pairs.tail_origin` in Python."""
    groups = (m + 127) // 128 * (128 // block_m) * ng
    big = groups - min(groups, tail)
    q = max(pid - big, 0)
    g = pid if pid < big else big + q // k_iters
    pid_m = g // ng
    return pid_m, (g - pid_m * ng) * k_iters, -1 if pid < big else q % k_iters


@pytest.mark.parametrize("m, k, tail", [(5, 48, 5), (130, 160, 3), (4096, 4096, 462), (4097, 7168, 924), (1, 64, 100)])
def test_tail_programs_cover_every_tile_once(m, k, tail):
    cfg = dataclasses.replace(TAIL[0], tail=tail)
    cfg = nv.capped_config(k, cfg)
    nk = ((k + 63) // 64 * 64 + cfg.block_k - 1) // cfg.block_k
    ng = (nk + cfg.k_iters - 1) // cfg.k_iters
    seen = []
    for pid in range(nv.grid(m, k, cfg)[0]):
        pid_m, k0, tile = _tail_origin(pid, m, ng, cfg.block_m, cfg.k_iters, tail)
        its = range(cfg.k_iters) if tile < 0 else [tile]
        seen += [(pid_m, k0 + it) for it in its if k0 + it < nk]
    rows = (m + 127) // 128 * (128 // cfg.block_m)
    assert sorted(seen) == [(r, t) for r in range(rows) for t in range(nk)]
