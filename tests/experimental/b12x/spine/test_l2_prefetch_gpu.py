"""_lib.l2_prefetch on the GPU (-m gpu; select with -k l2_prefetch): the kernel runs eagerly and inside a
captured CUDA graph on a side branch (fork / join edges) without error, leaves the prefetched tensors
bit-unchanged, takes odd spans (unaligned one-byte slices, the block's 8 weight tensors) and obeys freeze.
The read time after an L2 flush with and without a prefetch is a measurement: scripts/probe_l2_prefetch.py."""

import pytest
import torch

from flashinfer.experimental.b12x._lib import freeze
from flashinfer.experimental.b12x._lib import l2_prefetch as P

pytestmark = pytest.mark.gpu

CONFIGS = {"line": P.PrefetchConfig(), "bulk": P.BULK, "bulk16k": P.PrefetchConfig("bulk", 32, 16384)}
# the llama-small block's weights (values uint8 [N, K/2], swizzled e4m3 scales [N, K/16]) in step order
BLOCK = ((3072, 2048), (2048, 2048), (11264, 2048), (2048, 5632))


def _block_weights(gen):
    out = []
    for n, k in BLOCK:
        out.append(torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda", generator=gen))
        out.append(torch.randint(0, 256, (n, k // 16), dtype=torch.uint8, device="cuda", generator=gen))
    return out


def _gen():
    return torch.Generator(device="cuda").manual_seed(torch.seed())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_l2_prefetch_eager_leaves_tensors_unchanged(name):
    ws = _block_weights(_gen())
    big = torch.randint(0, 256, (4097,), dtype=torch.uint8, device="cuda", generator=_gen())
    odd = [big[5:6], big[127:129], big[4000:], torch.randn(7, 3, device="cuda").to(torch.bfloat16)]
    before = [t.clone() for t in ws + odd]
    pf = P.L2Prefetch.from_tensors(ws + odd, config=CONFIGS[name])
    assert pf.table.device.type == "cuda" and pf.table.tolist() == [[t.data_ptr(), t.nbytes] for t in ws + odd]
    assert 1 <= pf.ctas <= 2 * torch.cuda.get_device_properties(0).multi_processor_count
    for _ in range(3):
        pf.launch()
    torch.cuda.synchronize()
    for a, b in zip(ws + odd, before):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_l2_prefetch_side_branch_in_a_captured_graph(name):
    ws = _block_weights(_gen())
    before = [t.clone() for t in ws]
    pf = P.L2Prefetch.from_tensors(ws, config=CONFIGS[name])
    x = torch.randn(4096, device="cuda", generator=_gen())
    out = torch.empty_like(x)
    side = torch.cuda.Stream()
    warm = torch.cuda.Stream()  # eager warm-up off the default stream, as capture needs
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        with pf.side_branch(side):
            torch.mul(x, 3.0, out=out)
    torch.cuda.current_stream().wait_stream(warm)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # an unjoined side stream would fail the capture's end
        with pf.side_branch(side):
            torch.mul(x, 2.0, out=out)
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, x * 2.0)
    for a, b in zip(ws, before):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="stream must be a torch.cuda.Stream on cuda:0 other than the current one"):
        with pf.side_branch(torch.cuda.current_stream()):
            pass
    with pytest.raises(ValueError, match="got None"):
        with pf.side_branch(None):
            pass


def test_l2_prefetch_obeys_freeze():
    ws = _block_weights(_gen())
    pf = P.L2Prefetch.from_tensors(ws)
    freeze.freeze_kernel_resolution("test")
    P.L2Prefetch.from_tensors(ws[:2])  # same key: resolved in memory
    pf.launch()
    torch.cuda.synchronize()
    with pytest.raises(freeze.KernelResolutionFrozenError):
        P.L2Prefetch.from_tensors(ws, config=P.PrefetchConfig(threads=96))
