"""The selftest CuTe kernel (y = a*x + b*y): reference, CPU compiles for both archs, disk, GPU runs."""

import textwrap

import pytest
import torch

from flashinfer.experimental.b12x._lib import compile as C
from flashinfer.experimental.b12x._lib import selftest, timing
from flashinfer.experimental.b12x._lib.freeze import KernelResolutionFrozenError

ARCHS = ("sm_90a", "sm_120a")
DTYPES = ("bfloat16", "float16", "float32")


def _kernel_module():
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    from flashinfer.experimental.b12x._lib.selftest import _kernel_axpby

    return _kernel_axpby


def _rand(shape, dtype, device="cpu", seed=None):
    g = torch.Generator(device=device)
    g.manual_seed(torch.seed() if seed is None else seed)
    return torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(getattr(torch, dtype))


# ---- reference (CPU) -------------------------------------------------------------------------


@pytest.mark.reference
@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_path_is_the_fp32_reference_rounded_once(dtype):
    x, y = _rand((6, 10), dtype), _rand((6, 10), dtype)
    expect64 = 1.75 * x.double() - 0.5 * y.double()
    out = selftest.axpby(x, y, 1.75, -0.5)
    assert out is y
    # One rounding of an fp32 result: within half an ulp of the storage dtype (plus fp32 noise).
    eps = torch.finfo(getattr(torch, dtype)).eps
    assert ((y.double() - expect64).abs() <= expect64.abs() * eps + 1e-6).all()


@pytest.mark.reference
def test_empty_tensors_are_a_no_op():
    x = torch.empty(0, 8, dtype=torch.bfloat16)
    assert selftest.axpby(x, x.clone(), 1.0, 1.0).numel() == 0


@pytest.mark.contract
def test_bad_inputs_name_the_argument():
    x = torch.zeros(4, 8)
    with pytest.raises(
        ValueError,
        match=r"y must be a contiguous bfloat16/float16/float32 tensor \[N\] or \[M, N\], got float32 \[8, 4\] \(non-contiguous\)",
    ):
        selftest.axpby(x, x.t(), 1.0, 1.0)
    with pytest.raises(ValueError, match="x must be .* got int32"):
        selftest.axpby(x.int(), x, 1.0, 1.0)
    with pytest.raises(
        ValueError, match=r"x and y must match .* got x float32 \[4, 8\] on cpu and y bfloat16 \[4, 8\]"
    ):
        selftest.axpby(x, x.bfloat16(), 1.0, 1.0)
    with pytest.raises(ValueError, match=r"got float32 \[2, 2, 2\]"):
        selftest.axpby(torch.zeros(2, 2, 2), torch.zeros(2, 2, 2), 1.0, 1.0)


@pytest.mark.contract
def test_config_heuristic_and_can_implement():
    k = _kernel_module()
    assert k.default_config("bfloat16", None).copy_bits == 128
    assert k.default_config("bfloat16", 4096).copy_bits == 128
    assert k.default_config("bfloat16", 12).copy_bits == 64  # rows start 8-byte aligned only
    assert k.default_config("float32", 7).copy_bits == 32
    for dtype in DTYPES:
        for n_cols in (None, 1, 7, 12, 1000, 4096):
            assert k.can_implement(dtype, n_cols, k.default_config(dtype, n_cols))
    assert not k.can_implement("bfloat16", 12, k.AxpbyConfig(copy_bits=128))
    assert not k.can_implement("int8", None, k.AxpbyConfig())
    assert not k.can_implement("bfloat16", None, k.AxpbyConfig(threads=48))
    with pytest.raises(ValueError, match="cannot implement"):
        k.compile_axpby("bfloat16", 12, k.AxpbyConfig(copy_bits=128), arch="sm_90a")


# ---- compile (CPU) ---------------------------------------------------------------------------


def _targets(ptx: str) -> list[str]:
    return [line.split()[1] for line in ptx.splitlines() if line.startswith(".target")]


@pytest.mark.compile
@pytest.mark.parametrize("dtype, n_cols", [("bfloat16", None), ("float16", 1000)])
def test_compiles_for_sm90a_and_sm120a_with_distinct_binaries(dtype, n_cols):
    k = _kernel_module()
    built = {arch: k.compile_axpby(dtype, n_cols, k.default_config(dtype, n_cols), arch=arch) for arch in ARCHS}
    for arch, fn in built.items():
        assert _targets(fn.artifacts.PTX) == [arch]
        assert fn.artifacts.CUBIN[:4] == b"\x7fELF"
    assert built["sm_90a"].artifacts.PTX != built["sm_120a"].artifacts.PTX
    assert built["sm_90a"].artifacts.CUBIN != built["sm_120a"].artifacts.CUBIN


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_cols", [None, 1, 7, 12, 1000, 4096])
def test_every_variant_compiles_for_both_archs(dtype, n_cols):
    k = _kernel_module()
    for arch in ARCHS:
        fn = k.compile_axpby(dtype, n_cols, k.default_config(dtype, n_cols), arch=arch)
        assert _targets(fn.artifacts.PTX) == [arch]


@pytest.mark.compile
def test_leading_extent_is_symbolic_so_new_lengths_never_compile():
    k = _kernel_module()
    before = k.compile_axpby.compile_count + k.compile_axpby.load_count
    keys = {
        selftest.launch_key(torch.empty(m, 96, dtype=torch.bfloat16, device="meta"), "sm_90a")
        for m in (1, 2, 3, 5, 8, 13, 100, 1000, 4097, 65536)
    }
    assert len(keys) == 1
    for m in (1, 2, 3, 5, 8, 13, 100, 1000, 4097, 65536):
        k.compile_axpby(*selftest.launch_key(torch.empty(m, 96, dtype=torch.bfloat16, device="meta"), "sm_90a"))
    assert k.compile_axpby.compile_count + k.compile_axpby.load_count == before + 1
    # The launcher's own signature: one symbol for M shared by x and y, 96 static. tvm-ffi checks
    # the device first, so a CPU call shows the signature without launching. A fresh compile for an
    # arch this machine cannot run has no JIT engine (cross-compile), so call the disk-loaded one.
    k.compile_axpby.cache_clear()
    fn = k.compile_axpby(*keys.pop())
    with pytest.raises(ValueError) as info:
        fn(torch.zeros(3, 96, dtype=torch.bfloat16), torch.zeros(3, 96, dtype=torch.bfloat16), 1.0, 1.0)
    assert "mX: Tensor([n0, 96], bfloat16), mY: Tensor([n0, 96], bfloat16)" in str(info.value)
    assert "expected device_type=cuda" in str(info.value)


@pytest.mark.compile
def test_stored_object_is_the_tvm_ffi_export():
    k = _kernel_module()
    key = ("float32", None, k.default_config("float32", None), "sm_120a")
    assert k.compile_axpby.precompile(*key) == "compiled"
    meta, payload = C.unpack(k.compile_axpby.disk_path(*key).read_bytes())
    assert payload[:4] == b"\x7fELF"  # a relocatable host object with the cubin inside
    assert f"__tvm_ffi_{meta['symbol']}".encode() in payload
    assert meta["arch"] == "sm_120a" and meta["op"] == "selftest.axpby"


@pytest.mark.compile
def test_disk_round_trip_in_a_fresh_process_loads_without_compiling(run_fresh):
    k = _kernel_module()
    k.compile_axpby("bfloat16", 64, k.default_config("bfloat16", 64), arch="sm_90a")
    code = textwrap.dedent(
        """
        import torch, tvm_ffi
        from flashinfer.experimental.b12x._lib.selftest._kernel_axpby import compile_axpby, default_config
        fn = compile_axpby("bfloat16", 64, default_config("bfloat16", 64), arch="sm_90a")
        assert isinstance(fn, tvm_ffi.Function), type(fn)
        try:
            fn(torch.zeros(2, 64, dtype=torch.bfloat16), torch.zeros(2, 64, dtype=torch.bfloat16), 1.0, 1.0)
        except ValueError as e:
            assert "Tensor([n0, 64], bfloat16)" in str(e), e
        print(compile_axpby.compile_count, compile_axpby.load_count)
        """
    )
    rc, out, err = run_fresh(code, env={"B12X_PRINT_COMPILE_PROGRESS": "1"})
    assert rc == 0, err
    assert out.split() == ["0", "1"]
    assert "[b12x] load selftest.axpby dtype=bfloat16 n_cols=64" in err


@pytest.mark.compile
def test_truncated_cute_object_is_deleted_and_rebuilt():
    k = _kernel_module()
    key = ("float16", 8, k.default_config("float16", 8), "sm_90a")
    k.compile_axpby(*key)
    path = k.compile_axpby.disk_path(*key)
    path.write_bytes(path.read_bytes()[:-100])
    k.compile_axpby.cache_clear()
    before = k.compile_axpby.compile_count
    with pytest.warns(RuntimeWarning, match="truncated"):
        fn = k.compile_axpby(*key)
    assert k.compile_axpby.compile_count == before + 1
    assert _targets(fn.artifacts.PTX) == ["sm_90a"]
    C.unpack(path.read_bytes())


# ---- gpu (H200) ------------------------------------------------------------------------------

GPU_SHAPES = [(1,), (7,), (1023,), (1024,), (1025,), (100003,), (3, 8), (5, 1000), (17, 4096), (9, 7), (33, 12)]
_TOL = {"bfloat16": 1e-2, "float16": 1e-3, "float32": 1e-6}


def _check_against_reference(x, y_before, y_after, a, b, dtype):
    ref64 = a * x.double() + b * y_before.double()
    native = (a * x + b * y_before).double()  # torch in the storage precision
    err = (y_after.double() - ref64).abs().max().item()
    torch_err = (native - ref64).abs().max().item()
    assert not torch.isnan(y_after).any()
    # The design's rule: at most 2x torch's own error in the storage precision, plus one ulp for
    # inputs so small that torch happens to be exact.
    ulp = torch.finfo(getattr(torch, dtype)).eps * ref64.abs().max().item()
    assert err <= 2 * torch_err + ulp, (err, torch_err)
    torch.testing.assert_close(y_after, selftest.axpby_reference(x, y_before, a, b), rtol=_TOL[dtype], atol=_TOL[dtype])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=str)
def test_gpu_matches_reference_and_writes_nothing_past_the_end(dtype, shape):
    _kernel_module()
    numel = torch.Size(shape).numel()
    x = _rand(shape, dtype, "cuda")
    # y lives at the start of a NaN-poisoned buffer: any write past its end shows up as a non-NaN.
    buf = torch.full((numel + 4096,), float("nan"), dtype=getattr(torch, dtype), device="cuda")
    y = buf[:numel].view(shape)
    y.copy_(_rand(shape, dtype, "cuda"))
    y_before = y.clone()
    selftest.axpby(x, y, 1.5, -0.75)
    torch.cuda.synchronize()
    assert torch.isnan(buf[numel:]).all()
    _check_against_reference(x, y_before, y, 1.5, -0.75, dtype)


@pytest.mark.gpu
def test_gpu_ten_lengths_one_compile():
    k = _kernel_module()
    before = k.compile_axpby.compile_count + k.compile_axpby.load_count
    for m in (1, 2, 3, 17, 64, 100, 129, 1000, 4097, 10000):
        x, y = _rand((m, 512), "bfloat16", "cuda"), _rand((m, 512), "bfloat16", "cuda")
        y_before = y.clone()
        selftest.axpby(x, y, 0.5, 2.0)
        _check_against_reference(x, y_before, y, 0.5, 2.0, "bfloat16")
    assert k.compile_axpby.compile_count + k.compile_axpby.load_count == before + 1


@pytest.mark.gpu
def test_gpu_graph_replay_equals_eager():
    _kernel_module()
    x, y = _rand((64, 1000), "float16", "cuda"), _rand((64, 1000), "float16", "cuda")
    selftest.axpby(x, y, 2.0, 0.5)  # resolve before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        selftest.axpby(x, y, 2.0, 0.5)
    for _ in range(2):  # fresh inputs each replay: an empty graph would leave y unchanged
        x.copy_(_rand((64, 1000), "float16", "cuda"))
        y.copy_(_rand((64, 1000), "float16", "cuda"))
        y_before = y.clone()
        eager = y_before.clone()
        selftest.axpby(x, eager, 2.0, 0.5)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, eager, rtol=0, atol=0)
        _check_against_reference(x, y_before, y, 2.0, 0.5, "float16")


@pytest.mark.gpu
def test_gpu_capture_of_an_unresolved_kernel_raises():
    _kernel_module()
    x, y = _rand((4, 24), "float32", "cuda"), _rand((4, 24), "float32", "cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(KernelResolutionFrozenError, match="captured"):
        with torch.cuda.graph(graph):
            selftest.axpby(x, y, 1.0, 1.0)


@pytest.mark.gpu
def test_gpu_fresh_process_loads_from_disk_and_runs(run_fresh):
    _kernel_module()
    x, y = _rand((8, 256), "bfloat16", "cuda"), _rand((8, 256), "bfloat16", "cuda")
    selftest.axpby(x, y, 1.0, 1.0)  # compiles and stores
    code = textwrap.dedent(
        """
        import torch
        from flashinfer.experimental.b12x._lib import selftest
        from flashinfer.experimental.b12x._lib.selftest._kernel_axpby import compile_axpby
        x = torch.randn(37, 256, device="cuda").bfloat16()
        y = torch.randn(37, 256, device="cuda").bfloat16()
        expect = selftest.axpby_reference(x, y, 3.0, -1.0)
        selftest.axpby(x, y, 3.0, -1.0)
        torch.cuda.synchronize()
        torch.testing.assert_close(y, expect, rtol=1e-2, atol=1e-2)
        print(compile_axpby.compile_count, compile_axpby.load_count)
        """
    )
    rc, out, err = run_fresh(code)
    assert rc == 0, err
    assert out.split() == ["0", "1"]


@pytest.mark.gpu
def test_gpu_timing_records_launches_but_not_captures(monkeypatch):
    _kernel_module()
    monkeypatch.setenv("B12X_TIMING", "1")
    timing.reset()
    x, y = _rand((128, 4096), "bfloat16", "cuda"), _rand((128, 4096), "bfloat16", "cuda")
    for _ in range(5):
        selftest.axpby(x, y, 1.0, 0.5)
    (name, t), *rest = timing.summary().items()
    assert not rest and name.startswith("selftest.axpby dtype=bfloat16 n_cols=4096")
    assert t.count == 5 and t.total_ms > 0
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        selftest.axpby(x, y, 1.0, 0.5)
    graph.replay()
    assert timing.summary()[name].count == 5
    timing.reset()


@pytest.mark.compile
def test_cute_fingerprint_follows_codegen_settings_not_the_runtime_arch(monkeypatch):
    k = _kernel_module()
    key = ("bfloat16", None, k.default_config("bfloat16", None), "sm_90a")
    base = k.compile_axpby.fingerprint(*key)
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_120a")  # the GPU the DSL runs on, not the target
    assert k.compile_axpby.fingerprint(*key) == base
    monkeypatch.setenv("CUTE_DSL_LINEINFO", "1")
    assert k.compile_axpby.fingerprint(*key) != base
