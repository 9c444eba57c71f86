"""The compile decorator: keys, memory cache, disk cache, corruption, locks, worker jobs."""

import importlib
import os
import pickle
import sys
import textwrap
import threading

import pytest

from flashinfer.experimental.b12x._lib import compile as C
from flashinfer.experimental.b12x._lib import paths

from .fake_kernels import Mode, Tile, compile_launcher, compile_slow, compile_square

pytestmark = pytest.mark.contract


def _counts(k):
    return k.compile_count, k.load_count


# ---- keys and the memory cache ---------------------------------------------------------------


def test_same_args_compile_once_in_every_spelling():
    before = _counts(compile_square)
    a = compile_square(3, "sm_90a")
    b = compile_square(3, arch="sm_90a")
    c = compile_square(n=3, arch="sm_90a", dtype="bfloat16", tile=Tile(), mode=Mode.FAST)
    assert a is b is c
    assert a["square"] == 9
    assert _counts(compile_square) == (before[0] + 1, before[1])
    assert compile_square.resolved(3, "sm_90a")


def test_different_key_values_compile_separately():
    before = compile_square.compile_count
    bf16 = compile_square(3, "sm_90a", dtype="bfloat16")
    fp16 = compile_square(3, "sm_90a", dtype="float16")
    sm120 = compile_square(3, "sm_120a", dtype="float16")
    tile = compile_square(3, "sm_120a", dtype="float16", tile=Tile(m=128))
    assert compile_square.compile_count == before + 4
    assert (bf16["dtype"], fp16["dtype"], sm120["arch"], tile["tile"].m) == ("bfloat16", "float16", "sm_120a", 128)


def test_key_is_typed_so_equal_hashes_stay_apart():
    before = compile_square.compile_count
    compile_square(1, "sm_90a")
    compile_square(True, "sm_90a")
    compile_square(1.0, "sm_90a")
    assert compile_square.compile_count == before + 3


@pytest.mark.parametrize(
    "bad, message",
    [
        ("torch_dtype", "pass dtypes as strings"),
        ([1, 2], "must be a static value"),
        ({"a": 1}, "must be a static value"),
    ],
)
def test_non_static_key_values_are_rejected(bad, message):
    if bad == "torch_dtype":
        import torch

        bad = torch.float16
    with pytest.raises(TypeError, match=message):
        compile_square(3, "sm_90a", dtype=bad)


def test_mutable_dataclass_and_bad_arch_are_rejected():
    from dataclasses import dataclass

    @dataclass
    class Loose:
        m: int = 1

    with pytest.raises(TypeError, match="frozen dataclass"):
        compile_square(3, "sm_90a", tile=Loose())
    with pytest.raises(ValueError, match="spine.square: arch must be one of"):
        compile_square(3, "sm_75")
    with pytest.raises(TypeError, match="spine.square"):
        compile_square(3, "sm_90a", bogus=1)


def test_decorator_requires_named_arch_argument():
    with pytest.raises(TypeError, match="must take an `arch` argument"):
        C.kernel("spine.noarch", backend="python")(lambda n: n)
    with pytest.raises(TypeError, match="no \\*args"):
        C.kernel("spine.varargs", backend="python")(lambda *a, arch: a)
    with pytest.raises(ValueError, match="backend must be one of"):
        C.kernel("spine.x", backend="numba")(lambda arch: arch)


def test_key_summary_is_short_and_readable():
    summary = compile_square.key_summary(3, "sm_90a", tile=Tile(64, 256), mode=Mode.SAFE)
    assert summary == "n=3 dtype=bfloat16 tile=Tile(m=64,n=256) mode=SAFE"


def test_clear_memory_cache_clears_every_kernel_and_root_calls_it():
    compile_square(5, "sm_90a")
    compile_launcher(4, "sm_90a")
    C.clear_memory_cache()
    assert not compile_square.resolved(5, "sm_90a")
    assert not compile_launcher.resolved(4, "sm_90a")
    compile_square(5, "sm_90a")
    import b12x

    b12x.clear_all_caches()
    assert not compile_square.resolved(5, "sm_90a")


def test_threads_resolving_one_key_compile_once():
    before = compile_slow.compile_count
    results = []
    threads = [threading.Thread(target=lambda: results.append(compile_slow("t", 0.2, "sm_90a"))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert compile_slow.compile_count == before + 1
    assert len(set(map(id, results))) == 1


# ---- disk cache ------------------------------------------------------------------------------


def test_disk_layout_and_round_trip_in_a_new_process(run_fresh):
    value = compile_square(7, "sm_120a")
    path = compile_square.disk_path(7, "sm_120a")
    assert path.parent == paths.cache_dir() / "kernels" / "spine.square"
    assert path.name == f"{compile_square.fingerprint(7, 'sm_120a')}.pyobj"
    meta, payload = C.unpack(path.read_bytes())
    assert meta["op"] == "spine.square" and meta["arch"] == "sm_120a" and meta["key"].startswith("n=7")
    assert pickle.loads(payload) == value
    assert not [p for p in path.parent.iterdir() if p.suffix == ".tmp"]

    code = textwrap.dedent(
        """
        from spine.fake_kernels import compile_square
        v = compile_square(7, "sm_120a")
        print(v["square"], compile_square.compile_count, compile_square.load_count)
        """
    )
    rc, out, err = run_fresh(code, env={"B12X_PRINT_COMPILE_PROGRESS": "1"})
    assert rc == 0, err
    assert out.split() == ["49", "0", "1"]
    assert "[b12x] load spine.square n=7" in err and "(sm_120a)" in err


def test_disk_cache_off_writes_nothing(monkeypatch):
    monkeypatch.setenv("B12X_DISK_CACHE", "0")
    compile_square(11, "sm_90a")
    assert not (paths.cache_dir() / "kernels").exists()


def _corrupt(path, how):
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) - 7])
    elif how == "header-only":
        path.write_bytes(data[:10])
    elif how == "foreign":
        path.write_bytes(b"\x7fELF" + os.urandom(200))
    elif how == "flipped":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    elif how == "other-key":
        meta, payload = C.unpack(data)
        meta["fingerprint"] = "0" * 64
        path.write_bytes(C.pack(meta, payload))
    elif how == "bad-payload":
        meta, _ = C.unpack(data)
        path.write_bytes(C.pack(meta, b"not a pickle"))
    elif how == "old-format":
        header = C._HEADER.unpack_from(data)
        path.write_bytes(C._HEADER.pack(header[0], C.FORMAT_VERSION + 1, *header[2:]) + data[C._HEADER.size :])


@pytest.mark.parametrize(
    "how", ["truncated", "header-only", "foreign", "flipped", "other-key", "bad-payload", "old-format"]
)
def test_unusable_file_is_deleted_and_rebuilt(how):
    compile_square(13, "sm_90a")
    path = compile_square.disk_path(13, "sm_90a")
    _corrupt(path, how)
    compile_square.cache_clear()
    before = _counts(compile_square)
    with pytest.warns(RuntimeWarning, match="deleted unusable cached kernel"):
        value = compile_square(13, "sm_90a")
    assert value["square"] == 169
    assert _counts(compile_square) == (before[0] + 1, before[1])
    meta, _ = C.unpack(path.read_bytes())  # rebuilt and valid
    assert meta["fingerprint"] == compile_square.fingerprint(13, "sm_90a")
    compile_square.cache_clear()
    compile_square(13, "sm_90a")
    assert _counts(compile_square) == (before[0] + 1, before[1] + 1)


def test_pack_unpack_round_trip_and_rejections():
    blob = C.pack({"fingerprint": "f"}, b"payload")
    assert C.unpack(blob) == ({"fingerprint": "f"}, b"payload")
    for bad, why in [(blob[:5], "truncated"), (b"X" * len(blob), "bad magic"), (blob + b"!", "truncated")]:
        with pytest.raises(C.CacheFileError, match=why):
            C.unpack(bad)


def test_fingerprint_covers_arch_key_toolchain_and_source(tmp_path, monkeypatch):
    fp = compile_square.fingerprint
    assert len({fp(3, "sm_90a"), fp(3, "sm_120a"), fp(4, "sm_90a"), fp(3, "sm_90a", dtype="float16")}) == 4
    base = fp(3, "sm_90a")
    monkeypatch.setattr(C, "_toolchain", lambda: "python=0;cutlass-dsl=9.9")
    assert fp(3, "sm_90a") != base
    monkeypatch.undo()

    module = tmp_path / "spine_edit_probe.py"
    template = 'from flashinfer.experimental.b12x._lib.compile import kernel\n\n@kernel("spine.edit", backend="python")\ndef k(arch: str):\n    return {!r}\n'
    module.write_text(template.format("v1"))
    monkeypatch.syspath_prepend(str(tmp_path))
    first = importlib.import_module("spine_edit_probe")
    fp1 = first.k.fingerprint("sm_90a")
    module.write_text(template.format("v2"))
    second = importlib.reload(first)
    assert second.k.fingerprint("sm_90a") != fp1
    sys.modules.pop("spine_edit_probe", None)


def test_two_processes_compile_one_key_exactly_once(tmp_path, spawn):
    log = tmp_path / "compiles.log"
    code = textwrap.dedent(
        """
        import os, sys, time
        from pathlib import Path
        from spine.fake_kernels import compile_slow
        # A start barrier, so both really ask for the key at once.
        Path(os.environ["READY_DIR"], str(os.getpid())).touch()
        while len(os.listdir(os.environ["READY_DIR"])) < 2:
            time.sleep(0.01)
        v = compile_slow("shared", 1.5, "sm_90a")
        print(v, compile_slow.compile_count, compile_slow.load_count)
        """
    )
    ready = tmp_path / "ready"
    ready.mkdir()
    env = {"B12X_TEST_COMPILE_LOG": str(log), "READY_DIR": str(ready), "B12X_PRINT_COMPILE_PROGRESS": "1"}
    procs = [spawn(code, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert len(log.read_text().splitlines()) == 1
    counts = sorted(tuple(out.split()[1:]) for out, _ in outs)
    assert counts == [("0", "1"), ("1", "0")]
    assert {out.split()[0] for out, _ in outs} == {"slow-shared-sm_90a"}
    waited = [err for _, err in outs if "waiting for another process" in err]
    assert len(waited) == 1 and "[b12x] load spine.slow" in waited[0]


# ---- ahead of time: precompile, jobs ---------------------------------------------------------


def test_precompile_fills_disk_only_then_reports_cached():
    assert compile_square.precompile(21, "sm_120a") == "compiled"
    assert not compile_square.resolved(21, "sm_120a")
    assert compile_square.precompile(21, "sm_120a") == "cached"
    before = _counts(compile_square)
    assert compile_square(21, "sm_120a")["square"] == 441
    assert _counts(compile_square) == (before[0], before[1] + 1)


def test_needs_compile_is_false_in_memory_or_on_disk_and_true_otherwise(monkeypatch):
    assert compile_square.needs_compile(23, "sm_90a")  # never built
    compile_square(23, "sm_90a")
    assert not compile_square.needs_compile(23, "sm_90a")  # in memory
    compile_square.cache_clear()
    assert not compile_square.needs_compile(23, "sm_90a")  # on disk only: a load, not a compile
    compile_square.disk_path(23, "sm_90a").unlink()
    assert compile_square.needs_compile(23, "sm_90a")
    monkeypatch.setenv("B12X_DISK_CACHE", "0")
    assert compile_square.needs_compile(24, "sm_90a")
    assert compile_launcher.needs_compile(3, "sm_90a")  # Triton: unknown until in memory
    compile_launcher(3, "sm_90a")
    assert not compile_launcher.needs_compile(3, "sm_90a")


def test_precompile_needs_the_disk_cache(monkeypatch):
    monkeypatch.setenv("B12X_DISK_CACHE", "0")
    with pytest.raises(RuntimeError, match="precompile needs the disk cache"):
        compile_square.precompile(1, "sm_90a")


def test_job_is_picklable_and_runs_in_a_worker_process(run_fresh):
    job = compile_square.job(17, "sm_90a", mode=Mode.SAFE)
    assert pickle.loads(pickle.dumps(job)) == job
    assert (job.module, job.qualname, job.cache_dir) == ("spine.fake_kernels", "compile_square", str(paths.cache_dir()))
    code = textwrap.dedent(
        f"""
        import pickle
        from flashinfer.experimental.b12x._lib.compile import run_job
        job = pickle.loads({pickle.dumps(job)!r})
        print(run_job(job).status, run_job(job).status)
        """
    )
    # The worker must honour the job's cache dir even when its own environment says otherwise.
    rc, out, err = run_fresh(code, env={"B12X_CACHE_DIR": "/nonexistent/elsewhere"})
    assert rc == 0, err
    assert out.split() == ["compiled", "cached"]
    before = _counts(compile_square)
    assert compile_square(17, "sm_90a", mode=Mode.SAFE)["mode"] is Mode.SAFE
    assert _counts(compile_square) == (before[0], before[1] + 1)


def test_local_kernels_cannot_make_jobs():
    local = C.kernel("spine.local", backend="python")(lambda arch: arch)
    with pytest.raises(ValueError, match="module-level"):
        local.job("sm_90a")


def test_run_job_rejects_a_name_that_is_not_the_kernel():
    job = C.CompileJob("spine.fake_kernels", "Tile", "spine.square", (), (), str(paths.cache_dir()))
    with pytest.raises(LookupError, match="is not the b12x kernel"):
        C.run_job(job)


# ---- triton backend --------------------------------------------------------------------------


def test_triton_backend_caches_in_memory_and_points_triton_cache(monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setattr(C, "_triton_dir_we_set", None)
    before = compile_launcher.compile_count
    launch = compile_launcher(8, "sm_90a")
    assert launch(2) == 16 and compile_launcher(8, "sm_90a") is launch
    assert compile_launcher.compile_count == before + 1
    assert os.environ["TRITON_CACHE_DIR"] == str(paths.cache_dir() / "triton")
    assert compile_launcher.disk_path(8, "sm_90a") is None
    assert not (paths.cache_dir() / "kernels").exists()


def test_triton_backend_keeps_a_user_triton_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setattr(C, "_triton_dir_we_set", None)
    compile_launcher(2, "sm_90a")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "mine")


def test_compile_functions_must_return_something():
    none = C.kernel("spine.none", backend="python")(lambda arch: None)
    with pytest.raises(TypeError, match="returned None"):
        none("sm_90a")
