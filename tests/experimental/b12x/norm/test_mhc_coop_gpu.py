"""The coop one-launch kernel (_kernel_coop.py) on the GPU beyond test_mhc_gpu.py's small-T variants
(which check its numbers at T 1..5, H 4096 / 7168, every form, in place): CUDA-graph replays back to
back, the epoch counter advancing by one per program and call, and the default selection untouched."""

import pytest
import torch

from b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import _config
from flashinfer.experimental.b12x.norm.mhc import reference as R

from .mhc_cases import SCALARS
from .test_mhc_gpu import check_outputs, counting_kind, gpu_inputs, pre_buffers, prepared

pytestmark = pytest.mark.gpu

COOP = {"ld": _config.CoopConfig(), "atom": _config.CoopConfig(poll="atom")}


@pytest.mark.parametrize("poll", list(COOP))
@pytest.mark.parametrize("tokens", [1, 4])
def test_coop_graph_replays_back_to_back(poll, tokens):
    """post_pre captured once, replayed 50 times back to back on changing inputs: a replay that read
    a stale epoch would wait forever (the test would time out) or read the previous replay's partials."""
    hidden = 7168
    p = prepared(hidden, max_tokens=64, override=_config.MhcConfig(coop=COOP[poll]))
    launched = counting_kind(p, "compile_coop")
    epoch = p.state.scratch["epoch"]
    n = hidden // 128
    static = gpu_inputs(tokens, hidden, seed=41)
    outs = pre_buffers(tokens, hidden, residual=True)
    a = (static["x"], static["residual"], static["post"], static["comb"], static["fn"], static["hc_scale"])

    def step():
        mhc.run_post_pre(*a, static["hc_base"], plan=p, **outs, **SCALARS)

    start = int(epoch.item())
    assert start % n == 0
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    assert launched == [tokens, tokens]
    for i in range(50):
        fresh = gpu_inputs(tokens, hidden, seed=950 + i)
        for k in ("x", "residual", "post", "comb"):
            static[k].copy_(fresh[k])
        for v in outs.values():
            v.fill_(float("nan"))
        graph.replay()
        if i % 10 == 9:
            torch.cuda.synchronize()
            args = (static["x"], static["residual"], static["post"], static["comb"], static["fn"], static["hc_scale"])
            args += (static["hc_base"],)
            ref32 = R.mhc_post_pre(*args, **SCALARS)
            ref_lo = R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **SCALARS)
            check_outputs((outs["residual_out"], outs["post_out"], outs["comb_out"], outs["y_out"]), ref32, ref_lo)
    torch.cuda.synchronize()
    assert int(epoch.item()) == start + 51 * n  # the eager warm-up call and 50 replays (capture runs nothing)
