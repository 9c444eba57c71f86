"""moe.fused_moe grouped (large-T) expert GEMMs on the GPU: compile_grouped_fc1 / compile_grouped_fc2
launchers against the decode expert kernels' oracle and tolerance rule (test_experts_emulated's
`check`: NaN-poisoned C, NaN rows past start[E] of A), at the default 128 x 128 tile on row counts
that put several experts in one 128-row window, experts past one window, empty experts, and no rows
at all; CUDA graph replay equal to eager while expert_start and sorted_expert change between replays
(the windows are read on the device). The whole pipeline with the grouped bucket runs in
test_fused_moe_gpu.py (T >= tiled_from: 4096 at every issue shape). Run on the device machine."""

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch

from .test_experts_emulated import check
from .test_grouped_emulated import grouped_problem

pytestmark = pytest.mark.gpu

COUNTS = {
    "prefill": [300, 0, 1, 0, 64, 0, 0, 129],  # windows holding 1-3 experts, experts over 2 windows
    "many_small": [5, 17, 0, 3, 40, 1, 0, 90, 2, 33, 0, 60],
    "one_expert": [0, 0, 0, 0, 0, 0, 0, 500],
    "empty": [0, 0, 0, 0],
}
CASES = [
    (1, "bfloat16", "nvfp4", "silu"),
    (1, "bfloat16", "mxfp4", "swiglu_oai"),
    (1, "nvfp4", "nvfp4", "relu2"),
    (1, "nvfp4", "nvfp4", "silu"),
    (2, "bfloat16", "nvfp4", None),
    (2, "nvfp4", "nvfp4", None),
    (2, "bfloat16", "mxfp4", None),
]


def _kernel(fc, a_fmt, b_fmt, activation, num_e, per_expert=True):
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_grouped as G

    cfg = G.GroupedConfig(per_expert=per_expert)
    if fc == 1:
        return G.compile_grouped_fc1(a_fmt, b_fmt, activation, cfg, target_arch(), num_e)
    return G.compile_grouped_fc2(a_fmt, b_fmt, cfg, target_arch(), num_e)


@pytest.mark.parametrize("per_expert", [True, False], ids=["expert_tiles", "windows"])
@pytest.mark.parametrize("dist", sorted(COUNTS))
@pytest.mark.parametrize("fc, a_fmt, b_fmt, activation", CASES)
def test_grouped_matches_the_oracle(fc, a_fmt, b_fmt, activation, dist, per_expert):
    counts = COUNTS[dist]
    p = grouped_problem(fc, a_fmt, b_fmt, activation, counts, h=512, i=256, r_cap=sum(counts) + 70, device="cuda")
    _kernel(fc, a_fmt, b_fmt, activation, len(counts), per_expert)(*p.args)
    torch.cuda.synchronize()
    if not sum(counts):  # nothing routed: every row keeps its poison
        assert torch.isnan(p.out.float()).all(), "a row was written with no routed rows"
        return
    check(p, p.out)


def test_model_sized_expert_gemm():
    """H = 2048, I = 768 (the first issue shape), ~256 rows an expert as at T = 4096, E = 16 here."""
    gen = torch.Generator().manual_seed(5)
    counts = (torch.randint(200, 300, (16,), generator=gen)).tolist()
    for fc, act in ((1, "silu"), (2, None)):
        p = grouped_problem(fc, "bfloat16", "nvfp4", act, counts, h=2048, i=768, device="cuda")
        _kernel(fc, "bfloat16", "nvfp4", act, len(counts))(*p.args)
        torch.cuda.synchronize()
        check(p, p.out)


def test_graph_replay_follows_the_sorted_rows():
    p = grouped_problem(2, "bfloat16", "nvfp4", None, [100, 0, 200, 7], h=512, i=256, r_cap=400, device="cuda")
    q = grouped_problem(2, "bfloat16", "nvfp4", None, [3, 250, 0, 60], h=512, i=256, r_cap=400, device="cuda")
    fn = _kernel(2, "bfloat16", "nvfp4", None, 4)
    fn(*p.args)  # warm (module load) outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*p.args)
    saved = [t.clone() for t in p.args]
    for src, data in ((q, q.args), (p, saved)):  # the captured buffers with another routing's rows
        for dst, new in zip(p.args, data):
            dst.copy_(new)
        p.out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        src_out = p.out.clone()
        p.out.fill_(float("nan"))
        fn(*p.args)
        torch.cuda.synchronize()
        assert torch.equal(src_out.nan_to_num(7.0), p.out.nan_to_num(7.0)), "replay differs from eager"
        check(src, src_out)
