"""moe.fused_moe expert GEMMs with warp-owned tiles and warp groups along N (the `own*` and
`w8n2p1` tilings of `_kernel_experts.sweep_pairs`) on the GPU against the torch oracle
(test_experts_emulated's `check`): counts from random top-k routing at decode T = 1, 4, 16, 64
(E = 64, Qwen3-30B-A3B's H = 2048, I = 768), NaN-poisoned outputs, w4a16 (bf16 A) and nvfp4 (NVFP4
A) on NVFP4 weights, gated (silu) and relu2 FC1, FC2; both grid variants. Run on the device (-m gpu)."""

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch

from .moe_cases import routing
from .test_experts_emulated import check, make_problem

pytestmark = pytest.mark.gpu

PAIRS = {"w4a16": ("bfloat16", "nvfp4"), "nvfp4": ("nvfp4", "nvfp4")}


def _cases():
    """[(ntiles, label, FC1 config, FC2 config)] of the sweep's warp-owned / warp-group tilings."""
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    return [(n, label, fc1, fc2) for n in (1, 2) for label, fc1, fc2, _ in X.sweep_pairs(n) if fc1.wn > 1 or fc2.wn > 1]


@pytest.mark.parametrize("mode", sorted(PAIRS))
@pytest.mark.parametrize(
    "ntiles, label, fc1_cfg, fc2_cfg", _cases(), ids=[f"n{c[0]}-{c[1].replace('/', '-')}" for c in _cases()]
)
def test_owned_tilings_vs_oracle(ntiles, label, fc1_cfg, fc2_cfg, mode):
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    assert fc1_cfg.ntiles == fc2_cfg.ntiles == ntiles, label
    a_fmt, b_fmt = PAIRS[mode]
    arch = target_arch()
    kernels = {
        (1, "silu"): X.compile_fc1(a_fmt, b_fmt, "silu", fc1_cfg, arch, "identity"),
        (1, "relu2"): X.compile_fc1(a_fmt, b_fmt, "relu2", fc1_cfg, arch, "list"),
        (2, None): X.compile_fc2(a_fmt, b_fmt, fc2_cfg, arch, "list"),
    }
    for t in (1, 4, 16, 64):
        ids, _ = routing(t, 8, 64, seed=300 + t)
        counts = torch.bincount(ids.reshape(-1).long(), minlength=64).tolist()
        hit = [e for e, c in enumerate(counts) if c]
        for (fc, act), fn in kernels.items():
            # the list grid gets the hit experts then the sentinel E, as the routing writes it
            active = None if fn is kernels[(1, "silu")] else hit + [64] * 3
            p = make_problem(fc, a_fmt, b_fmt, act, counts, h=2048, i=768, seed=t + fc, device="cuda", active=active)
            fn(*p.args)
            torch.cuda.synchronize()
            check(p, p.out)
