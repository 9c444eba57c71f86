"""docs/serving.md's example runs as written (CPU: the reference backends; a GPU machine: the kernels), and the
names the page tells integrators to call exist with the parameters it gives them."""

import inspect
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[4] / "docs" / "serving.md"


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1, "docs/serving.md holds one python example"
    return blocks[0]


@pytest.mark.contract
@pytest.mark.usefixtures("quiet_cpu_reference")
def test_the_serving_example_runs():
    """(the example freezes kernel resolution: conftest's `_isolated_cache` unfreezes after each test)"""
    scope: dict = {}
    exec(compile(_example(), str(DOC), "exec"), scope)  # noqa: S102 - the page's own example
    out, lse, y = scope["out"], scope["lse"], scope["y"]
    assert tuple(out.shape) == (8, 16, 128) and tuple(lse.shape) == (8, 16) and tuple(y.shape) == (8, 1024)
    assert bool(out.isfinite().all()) and bool(y.isfinite().all())


@pytest.mark.contract
def test_the_names_the_page_gives_exist():
    import b12x

    G, paged, fm, mhc = b12x.gemm.blockscaled, b12x.attention.paged, b12x.moe.fused_moe, b12x.norm.mhc
    assert "token_counts" in inspect.signature(G.prewarm).parameters
    assert "compile_workers" in inspect.signature(b12x.PreparationSession).parameters
    for fn in (paged.default_max_work_items, paged.default_max_partial_rows, fm.plan_weights, fm.prepare_weights):
        assert callable(fn)
    for name in ("max_tokens", "num_topk", "weight_plan", "quant_mode"):
        assert name in {f for f in fm.Caps.__dataclass_fields__}
    for name in ("device", "max_tokens", "hidden_size"):
        assert name in {f for f in mhc.Caps.__dataclass_fields__}
    for name in ("residual_out", "y_out", "post_out", "comb_out"):
        assert name in inspect.signature(mhc.run_pre).parameters
    assert b12x.KernelResolutionFrozenError.__name__ in DOC.read_text()
