"""moe.fused_moe's grouped nvfp4 expert GEMMs on SM120's block-scaled MMA (`_kernel_grouped_sm120.py`) on an SM120 /
SM121 GPU: FC1 (silu, swiglu_oai, relu2) and FC2 against the expert kernels' oracle and tolerance rule
(test_experts_emulated's `check`: NaN-poisoned C, rows past start[E] never written), on the row counts
test_grouped_gpu.py uses (several experts a tile, experts over several tiles, empty experts), and graph replay equal
to eager. This is the run that lets the kernel into dispatch (its module docstring). On any other GPU (the
H100 / H200 device machines are sm_90a, with no block-scaled mma.sync) every case skips, saying why."""

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch

from .test_experts_emulated import check
from .test_grouped_emulated import grouped_problem

pytestmark = pytest.mark.gpu

FMT = "nvfp4"
COUNTS = {
    "prefill": [300, 0, 1, 0, 64, 0, 0, 129],
    "many_small": [5, 17, 0, 3, 40, 1, 0, 90, 2, 33, 0, 60],
    "one_expert": [0, 0, 0, 0, 0, 0, 0, 500],
}
CASES = [(1, "silu"), (1, "swiglu_oai"), (1, "relu2"), (2, None)]


def _kernel(fc, activation, num_e):
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_grouped_sm120 as K

    arch = target_arch()
    if arch not in K.ARCHS:
        pytest.skip(f"the SM120 block-scaled MMA needs one of {K.ARCHS}; this GPU is {arch}")
    cfg = K.default_config()
    if fc == 1:
        return K.compile_grouped_sm120_fc1(activation, cfg, arch, num_e)
    return K.compile_grouped_sm120_fc2(cfg, arch, num_e)


@pytest.mark.parametrize("dist", sorted(COUNTS))
@pytest.mark.parametrize("fc, activation", CASES)
def test_sm120_grouped_matches_the_oracle(fc, activation, dist):
    counts = COUNTS[dist]
    launch = _kernel(fc, activation, len(counts))
    p = grouped_problem(fc, FMT, FMT, activation, counts, h=512, i=256, r_cap=sum(counts) + 70, device="cuda")
    launch(*p.args)
    torch.cuda.synchronize()
    check(p, p.out)


@pytest.mark.parametrize("fc, activation", [(1, "silu"), (2, None)])
def test_sm120_grouped_graph_replay_equals_eager(fc, activation):
    counts = COUNTS["prefill"]
    launch = _kernel(fc, activation, len(counts))
    p = grouped_problem(fc, FMT, FMT, activation, counts, h=512, i=256, r_cap=sum(counts) + 70, device="cuda")
    launch(*p.args)
    torch.cuda.synchronize()
    eager = p.out.clone()
    p.out.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(*p.args)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(p.out.view(torch.uint8), eager.view(torch.uint8)), "replay differs from eager"
    check(p, p.out)
