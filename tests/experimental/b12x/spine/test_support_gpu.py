"""is_supported on a CUDA device (the CPU tier only sees False: no device): every registered op whose META lists
this GPU's arch says True with no reason, and one that does not says False naming the archs it runs on."""

import importlib

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib.arch import arch_for_cc

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("qualname", sorted(b12x._OPS))
def test_is_supported_on_this_gpu(qualname):
    module = importlib.import_module("b12x." + qualname)
    arch = arch_for_cc(tuple(torch.cuda.get_device_capability()))
    assert arch is not None, "the gpu tier runs on a b12x target"
    why = module.why_unsupported("cuda")
    if arch in module.META.archs:
        assert why is None and module.is_supported("cuda") is True and module.is_supported() is True
    else:
        assert module.is_supported("cuda") is False and f"does not run on {arch}" in why
    assert module.is_supported("cpu") is False
