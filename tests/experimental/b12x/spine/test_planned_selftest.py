"""A planned kernel through the whole lifecycle: prepare -> bind -> run, eager and in a CUDA graph."""

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib.selftest import axpby_reference
from flashinfer.experimental.b12x._lib.selftest import plan as st


@pytest.mark.contract
def test_planned_selftest_reference_backend():
    p = st.plan(st.Caps(max_rows=16, n_cols=64))
    with pytest.warns(UserWarning):
        b12x.PreparationSession("cpu").prepare([p])
    x, y = torch.randn(5, 64, dtype=torch.bfloat16), torch.randn(5, 64, dtype=torch.bfloat16)
    want = axpby_reference(x, y, 2.0, -1.0)
    assert torch.equal(st.run(st.bind(p, x=x, y=y, a=2.0, b=-1.0)), want)
    with pytest.raises(ValueError, match=r"x must be \[rows <= max_rows=16, 64\], got \[17, 64\]"):
        st.bind(p, x=torch.zeros(17, 64, dtype=torch.bfloat16), y=torch.zeros(17, 64, dtype=torch.bfloat16), a=1, b=1)
    with pytest.raises(ValueError, match="y must be dtype torch.bfloat16"):
        st.bind(p, x=x, y=y.float(), a=1, b=1)


@pytest.mark.gpu
def test_planned_selftest_graph_replay_and_freeze():
    p = st.plan(st.Caps(max_rows=512, n_cols=4096))
    with b12x.PreparationSession("cuda") as session:
        result = session.prepare([p])
    assert result.sources["selftest.axpby"] == "heuristic"
    x = torch.randn(300, 4096, device="cuda", dtype=torch.bfloat16)
    y0 = torch.randn(300, 4096, device="cuda", dtype=torch.bfloat16)
    y = y0.clone()
    binding = st.bind(p, x=x, y=y, a=0.5, b=2.0)
    eager = axpby_reference(x, y0, 0.5, 2.0)
    st.run(binding)
    torch.cuda.synchronize()
    assert torch.equal(y, eager)
    graph = torch.cuda.CUDAGraph()
    y.copy_(y0)
    with session.capture(), torch.cuda.graph(graph):
        st.run(binding)
    for _ in range(3):  # capture does not run; each replay applies one update from the restored y0
        y.copy_(y0)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, eager)
    session.freeze()
    try:
        with pytest.raises(b12x.KernelResolutionFrozenError, match="frozen"):
            session.prepare([st.plan(st.Caps(max_rows=8, n_cols=2048))])
        # a new live row count is not a new kernel
        small = st.bind(p, x=x[:7], y=y[:7], a=1.0, b=0.0)
        st.run(small)
        torch.cuda.synchronize()
        assert torch.equal(y[:7], x[:7])
    finally:
        b12x.unfreeze_kernel_resolution()
