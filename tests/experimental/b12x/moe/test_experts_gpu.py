"""moe.fused_moe expert GEMMs on the GPU: compile_fc1 / compile_fc2 launchers against the torch
computation from `reference.expert_matrix` (test_experts_emulated's oracle and tolerance rule), on
random weights packed by `prepare_weights`, NaN-poisoned outputs, several expert_start distributions
(empty experts, experts past one 16-row group, routing-shaped counts), and CUDA graph replay equal to
eager. Run on the device machine (-m gpu)."""

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch

from .moe_cases import routing
from .test_experts_emulated import PAIRS, check, make_problem

pytestmark = pytest.mark.gpu

COUNTS = {
    "decode": [1, 0, 2, 0, 0, 1, 3, 0],
    "hot": [0, 40, 1, 0, 17, 0, 0, 5],  # 40 rows: three groups of 16; 17: one row past a group
    "one_expert": [0, 0, 0, 0, 0, 0, 0, 33],
    "prefill": [300, 0, 1, 0, 64, 0, 0, 129],  # large-T shape: many groups per expert (slow path)
}


def _launch(p, config=None, grid="list"):
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    cfg = config or X.default_config(64)
    arch = target_arch()
    if p.fc == 1:
        fn = X.compile_fc1(p.a_fmt, p.b_fmt, p.activation, cfg, arch, grid)
    else:
        fn = X.compile_fc2(p.a_fmt, p.b_fmt, cfg, arch, grid)
    fn(*p.args)
    torch.cuda.synchronize()
    return p.out


@pytest.mark.parametrize("dist", sorted(COUNTS))
@pytest.mark.parametrize("activation", ["silu", "relu2", "swiglu_oai"])
@pytest.mark.parametrize("a_fmt, b_fmt", PAIRS)
def test_fc1_matches_the_oracle(a_fmt, b_fmt, activation, dist):
    p = make_problem(1, a_fmt, b_fmt, activation, COUNTS[dist], h=1024, i=256, seed=len(dist), device="cuda")
    check(p, _launch(p))


@pytest.mark.parametrize("dist", sorted(COUNTS))
@pytest.mark.parametrize("a_fmt, b_fmt", PAIRS)
def test_fc2_matches_the_oracle(a_fmt, b_fmt, dist):
    p = make_problem(2, a_fmt, b_fmt, None, COUNTS[dist], h=1024, i=256, seed=len(dist) + 1, device="cuda")
    check(p, _launch(p))


@pytest.mark.parametrize("dist", sorted(COUNTS))
@pytest.mark.parametrize(
    "fc, a_fmt, b_fmt, activation",
    [(1, "bfloat16", "nvfp4", "silu"), (1, "mxfp8", "mxfp4", "swiglu_oai"), (2, "nvfp4", "nvfp4", None)],
)
def test_identity_grid_matches_the_oracle_without_the_list(fc, a_fmt, b_fmt, activation, dist):
    # grid "identity": E rows of CTAs, expert = blockIdx.y. The list is one entry, E (the list grid
    # would launch one row with nothing to do): every expert's rows written = the list never read.
    counts = COUNTS[dist]
    p = make_problem(fc, a_fmt, b_fmt, activation, counts, h=1024, i=256, seed=11, device="cuda", active=[len(counts)])
    check(p, _launch(p, grid="identity"))


@pytest.mark.parametrize("t, k", [(1, 8), (7, 8), (64, 8)])
@pytest.mark.parametrize("fc", [1, 2])
def test_routing_shaped_counts_at_model_sizes(fc, t, k):
    # E = 64 experts, H = 2048, I = 768 (Qwen3-30B-A3B's FC shapes), counts from random top-k routing
    ids, _ = routing(t, k, 64, seed=t)
    counts = torch.bincount(ids.reshape(-1).long(), minlength=64).tolist()
    p = make_problem(fc, "bfloat16", "nvfp4", "silu", counts, h=2048, i=768, seed=t, device="cuda")
    check(p, _launch(p))


@pytest.mark.parametrize("fc, activation", [(1, "swiglu_oai"), (2, None)])
def test_k_tail_sizes(fc, activation):
    # gpt-oss: H = 2880 is not a multiple of the 128-value chunk; I = 1440 (TP 2)
    p = make_problem(fc, "mxfp8", "mxfp4", activation, [3, 0, 20, 1], h=2880, i=1440, seed=3, device="cuda")
    check(p, _launch(p))


def test_other_configs():
    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode import DecodeConfig

    for cfg in (DecodeConfig(4, 2, 1, 1), DecodeConfig(8, 4, 2, 2), DecodeConfig(16, 2, 2, 1)):
        p = make_problem(1, "nvfp4", "nvfp4", "silu", COUNTS["hot"], h=1024, i=256, seed=7, device="cuda")
        check(p, _launch(p, cfg))


def test_graph_replay_equals_eager_and_follows_expert_start():
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    p = make_problem(1, "bfloat16", "nvfp4", "silu", COUNTS["hot"], h=1024, i=256, seed=4, device="cuda")
    fn = X.compile_fc1("bfloat16", "nvfp4", "silu", X.default_config(64), arch=target_arch())
    eager = _launch(p).clone()
    check(p, eager)
    p.out.fill_(float("nan"))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        fn(*p.args)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.isnan(p.out).all(), "capture ran the kernel instead of recording it"
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(p.out.view(torch.int16), eager.view(torch.int16))
    # new routing in the same buffers: the replay reads expert_start on the device
    p2 = make_problem(1, "bfloat16", "nvfp4", "silu", COUNTS["decode"], h=1024, i=256, seed=4, device="cuda")
    p.args[5].copy_(p2.args[5])
    p.out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    p.start[:] = p2.start
    check(p, p.out)
