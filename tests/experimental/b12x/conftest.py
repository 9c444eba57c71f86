"""Shared fixtures for the b12x tests.

Tiers are pytest markers (pyproject.toml): contract, reference, interpret, compile, gpu, slow.
`gpu` tests skip cleanly without CUDA; `slow` tests run only with `-m slow` or B12X_RUN_SLOW=1.
The README's command runs the files in parallel (`-n auto --dist loadfile`, pytest-xdist): a file's
tests stay in one process, so module fixtures (the interpreter subprocesses) run once.
"""

import os
import subprocess
import sys

import pytest


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per CPU core (at most 4; each holds torch, Triton and the CuTe DSL, ~2-3
    GB) on a machine without CUDA, one where there is a GPU (the gpu tier shares one device and some
    of its tests time kernels)."""
    import torch

    if torch.cuda.is_available():
        return 1
    return max(1, min(os.cpu_count() or 1, 4))


def pytest_configure(config):
    """Under `--dist loadfile` xdist hands out files by their number of tests unless told to keep
    the collection order; keep it, so LONG_FIRST's files (few tests, minutes each) start first."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    markexpr = config.getoption("-m") or ""
    run_slow = "slow" in markexpr or os.environ.get("B12X_RUN_SLOW") == "1"
    skip_slow = pytest.mark.skip(reason="slow: select with -m slow or B12X_RUN_SLOW=1")
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)

    # The longest files first (stable otherwise): under `--dist loadfile` a worker takes files in this
    # order (pytest_configure), so the 2-7 min interpreter subprocesses start at once instead of
    # running alone at the end.
    def rank(item):
        path = item.nodeid.split("::", 1)[0]
        return next((i for i, name in enumerate(LONG_FIRST) if path.endswith(name)), len(LONG_FIRST))

    items.sort(key=rank)


# the files whose tests run the longest (`.ci/run`'s --durations), longest first
LONG_FIRST = (
    "norm/test_mhc_interpret.py",
    "quantization/test_interpret.py",
    "moe/test_fused_moe_pipeline.py",
    "quantization/test_compile.py",
)


def pytest_runtest_setup(item):
    if "gpu" in item.keywords:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("gpu tier: no CUDA device here (runs on the H200 device machine)")


SHARED_KERNELS_ENV = "B12X_TEST_KERNEL_CACHE"
SHARED_SUBDIRS = ("kernels", "triton")  # compiled kernels only: selection / autotune caches stay per test


def share_kernel_dirs(root, shared) -> None:
    """Make root's kernel stores links into `shared` (created if missing): a gpu tier's processes then compile a
    kernel once between them, and a kernel cache carried from an earlier machine session is used. Entries are keyed
    by sources, toolchain and arch (_lib/compile.py), so sharing can only save compiles."""
    from pathlib import Path

    root, shared = Path(root), Path(shared)
    root.mkdir(parents=True, exist_ok=True)
    for sub in SHARED_SUBDIRS:
        (shared / sub).mkdir(parents=True, exist_ok=True)
        (root / sub).symlink_to(shared / sub, target_is_directory=True)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch, request):
    """Every test compiles into its own cache dir, never ~/.cache, starts unfrozen, and sees the
    once-per-process reference-backend warning as a fresh process would (so test order is moot).
    With $B12X_TEST_KERNEL_CACHE set (scripts/device_parallel_run.sh sets it), a gpu test's compiled kernels
    go to that shared directory instead (`share_kernel_dirs`); its other cache files stay its own."""
    monkeypatch.setenv("B12X_CACHE_DIR", str(tmp_path / "b12x-cache"))
    shared = os.environ.get(SHARED_KERNELS_ENV)
    if shared and request.node.get_closest_marker("gpu") is not None:
        share_kernel_dirs(tmp_path / "b12x-cache", shared)
    from flashinfer.experimental.b12x.preparation import session

    monkeypatch.setattr(session, "_warned_reference", False)
    yield
    from flashinfer.experimental.b12x._lib import freeze

    freeze.unfreeze_kernel_resolution()


@pytest.fixture
def quiet_cpu_reference():
    """Ignore CPU preparation's reference-backend warning (`_isolated_cache` already resets its
    once-per-process flag): for test files that prepare many CPU plans and do not test the warning;
    use as `pytestmark = [..., pytest.mark.usefixtures("quiet_cpu_reference")]`."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="b12x: preparing on cpu")
        yield


def _run_python(code: str, *, env=None, cwd=None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, cwd=cwd)


@pytest.fixture
def run_python():
    """Run code in a fresh interpreter (import-order and sys.modules checks): run_python(code, env=)."""
    return _run_python


def captured(step):
    """A CUDA graph of step(), after one warm-up call on a side stream (kernel loads and lazy state stay out of it).
    The gpu tests of every op capture through it."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def _compile_recording(fn, *args, backend="eager"):
    """fn compiled by torch.compile(fullgraph=True) through a backend that keeps dynamo's graphs ("eager" runs them
    as traced, "aot_eager" after AOTAutograd's functionalization), called on args: (outputs, the graphs'
    call_function targets as strings)."""
    import torch

    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        if backend == "eager":
            return gm.forward
        from torch._dynamo.backends.debugging import aot_eager

        return aot_eager(gm, example_inputs)

    torch._dynamo.reset()
    got = torch.compile(fn, fullgraph=True, backend=recording)(*args)
    return got, [str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]


@pytest.fixture
def compile_recording():
    """compile_recording(fn, *args, backend="eager") -> (outputs, the compiled graphs' call targets)."""
    return _compile_recording


@pytest.fixture
def cuda_binary():
    """The CUDA binary tools on a compiled cubin (`_lib.cuda_binary`: sass(cubin), resources(cubin),
    run(tool, cubin, *flags)); skips the test where nvdisasm or cuobjdump cannot be found."""
    from flashinfer.experimental.b12x._lib import cuda_binary

    missing = [name for name in cuda_binary.TOOLS if cuda_binary.tool(name) is None]
    if missing:
        pytest.skip(f"no {', '.join(missing)} (neither on PATH nor in Triton's wheel)")
    return cuda_binary


def _load_script(name: str):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_b12x_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def load_script():
    """The repository's scripts/NAME.py as a module (the probes the tests build): load_script(name)."""
    return _load_script


@pytest.fixture
def script_exit(capsys):
    """script_exit(name, argv) -> (exit code, stdout, stderr) of scripts/NAME.py's main(argv), which must exit
    (argparse's --help, or a usage error before anything needs a GPU)."""

    def run(name: str, argv: list[str]):
        with pytest.raises(SystemExit) as done:
            _load_script(name).main(argv)
        out = capsys.readouterr()
        return done.value.code, out.out, out.err

    return run
