"""`scripts/cluster_occupancy.py` (session 40) on the CPU: the launch configuration it hands the driver's occupancy
query (the cluster along the axis the kernel clusters on, the shared memory, the block), its error path, and the
decode GEMM rows it asks about (the CTAs a config launches, its threads and buffers). The driver's answer itself
needs a GPU: docs/performance.md, session 40. Its arguments: test_probe_arguments.py."""

import types

import pytest

NAME = "cluster_occupancy"


class _FakeDriver:
    """The cuda.bindings.driver calls the script makes, recording what it asks."""

    class CUresult:
        CUDA_SUCCESS = 0

    class CUfunction_attribute:
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = "max_dynamic_smem"
        CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = "non_portable"

    class CUlaunchAttributeID:
        CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = "cluster_dim"

    def __init__(self, answer=7, fail=False):
        self.answer, self.fail, self.attrs, self.configs = answer, fail, [], []

    def CUlaunchConfig(self):
        return types.SimpleNamespace()

    def CUlaunchAttribute(self):
        dims = types.SimpleNamespace(x=0, y=0, z=0)
        return types.SimpleNamespace(id=None, value=types.SimpleNamespace(clusterDim=dims))

    def cuFuncSetAttribute(self, func, attr, value):
        self.attrs.append((attr, value))
        return (self.CUresult.CUDA_SUCCESS,)

    def cuOccupancyMaxActiveClusters(self, func, cfg):
        self.configs.append(cfg)
        return (1 if self.fail else self.CUresult.CUDA_SUCCESS, self.answer)


@pytest.mark.reference
@pytest.mark.parametrize("axis", ["x", "y"])
@pytest.mark.parametrize("cluster", [2, 16])
def test_the_query_carries_the_cluster_smem_and_block(axis, cluster, load_script, monkeypatch):
    script = load_script(NAME)
    fake = _FakeDriver(answer=15)
    monkeypatch.setattr(script, "drv", fake)
    assert script.max_active_clusters("f", 256, 149040, cluster, axis) == 15
    (cfg,) = fake.configs
    assert (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ, cfg.sharedMemBytes) == (256, 1, 1, 149040)
    dims = cfg.attrs[0].value.clusterDim
    along = (dims.x, cfg.gridDimX) if axis == "x" else (dims.y, cfg.gridDimY)
    across = (dims.y, cfg.gridDimY) if axis == "x" else (dims.x, cfg.gridDimX)
    assert along[0] == cluster and along[1] % cluster == 0 and across == (1, 1) and dims.z == 1
    assert cfg.attrs[0].id == "cluster_dim" and cfg.numAttrs == 1
    assert ("max_dynamic_smem", 149040) in fake.attrs
    assert (("non_portable", 1) in fake.attrs) == (cluster > 8)  # past 8 CTAs the size is non-portable


@pytest.mark.reference
def test_a_failed_query_raises(load_script, monkeypatch):
    script = load_script(NAME)
    monkeypatch.setattr(script, "drv", _FakeDriver(fail=True))
    with pytest.raises(RuntimeError, match="CUDA driver call failed"):
        script.max_active_clusters("f", 256, 1024, 4)


@pytest.mark.reference
def test_gemm_rows_name_each_configs_launch(load_script, monkeypatch):
    """At M = 16 4096 x 14336: the 16-warp base (128 CTAs, one an SM on the H200) and every ksplit variant, the CTAs
    each launches (row blocks x C), its threads and reduction / ashare buffers; the cubin goes to the query."""
    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _decode_sweeps as S
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD

    script = load_script(NAME)
    compiled = []
    monkeypatch.setattr(
        KD,
        "compile_decode",
        lambda a, b, o, cfg, arch: (
            compiled.append(cfg) or types.SimpleNamespace(artifacts=types.SimpleNamespace(CUBIN=b"c"))
        ),
    )
    monkeypatch.setattr(script, "_kernel_function", lambda cubin: cubin)
    asked = []
    monkeypatch.setattr(
        script, "max_active_clusters", lambda f, t, smem, c, axis: asked.append((t, smem, c, axis)) or c
    )
    rows = list(script.gemm_rows("decode16", "4096x14336", "sm_90a", 132))
    base = L.default_config("decode16", 4096, 14336, "nvfp4", a_fmt="bfloat16")
    assert compiled == [base, *S.ksplit_variants(base, 14336)] and len(rows) == len(compiled)
    assert rows[0]["ctas"] == 128 and rows[0]["threads"] == 512 and base.warps == 16
    for row, cfg in zip(rows, compiled):
        assert row["ctas"] == 4096 // (cfg.rows * cfg.wn) * cfg.ksplit and row["config"] == repr(cfg)
        assert row["smem"] == cfg.red_bytes + cfg.share_bytes + 1024
        assert [row[f"clusters_of_{c}"] for c in (1, 2, 4, 8)] == [1, 2, 4, 8]
    assert {a[3] for a in asked} == {"x"}  # the GEMM clusters along x, the attention kernel along y
    assert any(cfg.warps == 8 and cfg.ksplit == 4 and cfg.ashare for cfg in compiled)  # session 40's one-wave split
