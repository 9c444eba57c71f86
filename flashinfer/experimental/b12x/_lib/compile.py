"""The one compile decorator: memory cache, disk cache, per-key file lock, fingerprint, freeze.

A kernel is compiled by a function whose arguments ARE its cache key (static values only: str, int,
float, bool, None, tuples, frozen dataclasses, enums; dtypes as strings) and which takes `arch`:

    @kernel("norm.rmsnorm")
    def compile_rmsnorm(dtype: str, hidden: int, config: RmsNormConfig, arch: str):
        x = make_fake_compact_tensor(..., (cute.sym_int(), hidden), ...)
        return cute_compile(RmsNorm(dtype, config), x, ..., make_fake_stream(use_tvm_ffi_env_stream=True), arch=arch)

    run = compile_rmsnorm("bfloat16", 4096, RmsNormConfig(), arch=target_arch())
    run(x, w, y)  # torch tensors straight in; launches on torch.cuda.current_stream()

`K(*args)` resolves: the in-memory cache first; on a miss `freeze.check_may_resolve` (frozen or
capturing raises, even when the disk holds the kernel), then the disk cache, else compile + store.

Disk cache (`paths.cache_dir()/kernels/<op>/<fingerprint>.<ext>`, off with B12X_DISK_CACHE=0):
- fingerprint = sha256(compile function's module source [+ `sources=` modules], toolchain versions
  (python, nvidia-cutlass-dsl, apache-tvm-ffi, torch, triton) and host machine, arch, repr(key);
  for cute also `cute_compile`'s source and the codegen-relevant CUTE_DSL_* settings).
- backend "cute": the compile function returns a `cute.compile(..., options="--enable-tvm-ffi")`
  result (use `cute_compile`). It is stored with the DSL's own AOT export,
  `compiled.export_to_c(path, function_name=...)`: a relocatable host object holding the cubin and a
  `__tvm_ffi_<name>` entry; `cutlass.cute.runtime.load_module(path, enable_tvm_ffi=True)` links it
  back in-process (JITLink; no CUDA needed to load) and returns a `tvm_ffi.Function`. A fresh compile
  returns the DSL's compiled object, a disk load the tvm_ffi.Function: call both positionally. A
  fresh compile for an arch this process's GPU cannot run (a cross-compile, e.g. sm_120a on an
  H200 or anything on a CPU machine) gets no JIT engine from the DSL: it can be stored and
  inspected (`.artifacts.PTX` / `.CUBIN`), not called; the disk-loaded form is callable anywhere.
- backend "python": the return value is pickled (pure-Python artifacts, and the spine's tests).
- backend "triton": the compile function returns a launcher; there is no b12x file. Triton keeps its
  own disk cache, pointed at `cache_dir()/triton` unless TRITON_CACHE_DIR is set (Triton compiles at
  the first launch, so a compile function that should warm the disk calls `kernel.warmup(...)`).
- Files are written atomically (same-dir temp + os.replace) behind a header (magic, format version,
  lengths, sha256). A truncated, foreign, stale or unloadable file is deleted and rebuilt, never
  trusted. `<fingerprint>.lock` (fcntl.flock) makes concurrent processes compile a key once; lock
  files are left in place on purpose (unlinking a lock file races with its next taker).

`K.job(*args)` + `run_job(job)` compile into the disk cache from a worker process (module-level
kernels only: the job names the module and qualname). `clear_memory_cache()` empties every kernel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import fcntl
import functools
import hashlib
import importlib
import inspect
import json
import os
import pickle
import platform
import struct
import sys
import tempfile
import threading
import time
import warnings
import weakref
from pathlib import Path

from . import freeze, paths, progress, timing
from .arch import validate_arch

BACKENDS = ("cute", "triton", "python")
_EXT = {"cute": "cuteobj", "python": "pyobj"}  # a header precedes the payload: not a bare .o or .pkl

# Bump FORMAT_VERSION when the file layout changes, EXPORT_ABI when what is stored changes (symbol
# naming, export call); both enter every fingerprint, as does cute_compile's source text.
FORMAT_VERSION = 1
EXPORT_ABI = 1
MAGIC = b"B12XKOBJ"
# magic, format version, meta length, payload length, sha256(meta + payload)
_HEADER = struct.Struct("<8sIIQ32s")

# The CuTe DSL keeps compile options and MLIR contexts on process-wide singletons: one compile or
# export at a time per process (parallel compiles go to worker processes through `run_job`).
_CUTE_LOCK = threading.RLock()

_REGISTRY: weakref.WeakSet = weakref.WeakSet()
_triton_dir_we_set: str | None = None


class CacheFileError(ValueError):
    """A cache file that must not be loaded (truncated, foreign, stale, or for another key)."""


@dataclasses.dataclass(frozen=True)
class CompileJob:
    """A picklable order to compile one key into the disk cache (see `run_job`)."""

    module: str
    qualname: str
    op: str
    args: tuple
    kwargs: tuple  # ((name, value), ...)
    cache_dir: str


@dataclasses.dataclass(frozen=True)
class JobResult:
    op: str
    key: str
    arch: str
    status: str  # "compiled" | "cached"
    seconds: float


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------


def _check_static(op: str, name: str, value) -> None:
    if value is None or isinstance(value, (str, int, float, bool, enum.Enum)):
        return
    if isinstance(value, tuple):
        for i, item in enumerate(value):
            _check_static(op, f"{name}[{i}]", item)
        return
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if not type(value).__dataclass_params__.frozen:
            raise TypeError(
                f"{op}: compile argument {name} must be a frozen dataclass, got mutable {type(value).__name__}"
            )
        for field in dataclasses.fields(value):
            _check_static(op, f"{name}.{field.name}", getattr(value, field.name))
        return
    hint = " (pass dtypes as strings, e.g. 'bfloat16')" if type(value).__module__.startswith("torch") else ""
    raise TypeError(
        f"{op}: compile argument {name} must be a static value (str, int, float, bool, None, tuple, "
        f"frozen dataclass, enum), got {type(value).__qualname__} {value!r}{hint}"
    )


SUMMARY_CHARS = 256  # key summaries (progress lines, errors): a moe expert key with its DecodeConfig is ~215


def _short(value) -> str:
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, tuple):
        return "(" + ",".join(_short(v) for v in value) + ")"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        inner = ",".join(f"{f.name}={_short(getattr(value, f.name))}" for f in dataclasses.fields(value))
        return f"{type(value).__name__}({inner})"
    return value if isinstance(value, str) else repr(value)


@functools.lru_cache(maxsize=1)
def _toolchain() -> str:
    from .support import package_version

    parts = [f"python={platform.python_version()}", f"machine={platform.machine()}"]
    parts += [f"{name}={package_version(name)}" for name in ("cutlass-dsl", "tvm-ffi", "torch", "triton")]
    return ";".join(parts)


# CUTE_DSL_* settings that change generated code (the DSL marks them affects_compile). Left out on
# purpose: CUTE_DSL_ARCH (the runtime GPU; `--gpu-arch` sets the target) and the library paths.
_CUTE_CODEGEN_ENV = (
    "AUTO_M2S", "COMPILER_BACKEND", "COMPILER_OPT", "DEBUG", "ENABLE_ASSERTIONS", "ENABLE_PYIR",
    "LINEINFO", "LOC_TRACEBACKS", "TOLERATE_M2M",
)  # fmt: skip


def _cute_recipe() -> str:
    """How cute objects are built: cute_compile's own source and the codegen env settings."""
    env = ";".join(f"{n}={os.environ[f'CUTE_DSL_{n}']}" for n in _CUTE_CODEGEN_ENV if f"CUTE_DSL_{n}" in os.environ)
    return f"cute:{_cute_compile_source()}:{env}"


@functools.lru_cache(maxsize=1)
def _cute_compile_source() -> str:
    return hashlib.sha256(inspect.getsource(cute_compile).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# File format, locks
# ---------------------------------------------------------------------------------------------


def pack(meta: dict, payload: bytes) -> bytes:
    """Header + JSON meta + payload, as stored on disk."""
    meta_bytes = json.dumps(meta, sort_keys=True).encode()
    digest = hashlib.sha256(meta_bytes + payload).digest()
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(meta_bytes), len(payload), digest) + meta_bytes + payload


def unpack(data: bytes) -> tuple[dict, bytes]:
    """(meta, payload) of a stored file; CacheFileError says why a file is unusable."""
    if len(data) < _HEADER.size:
        raise CacheFileError(f"truncated: {len(data)} bytes, header needs {_HEADER.size}")
    magic, version, meta_len, payload_len, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CacheFileError("not a b12x kernel file (bad magic)")
    if version != FORMAT_VERSION:
        raise CacheFileError(f"format version {version}, this b12x reads {FORMAT_VERSION}")
    if len(data) != _HEADER.size + meta_len + payload_len:
        raise CacheFileError(f"truncated: {len(data)} bytes, header says {_HEADER.size + meta_len + payload_len}")
    body = data[_HEADER.size :]
    if hashlib.sha256(body).digest() != digest:
        raise CacheFileError("checksum mismatch")
    try:
        meta = json.loads(body[:meta_len])
    except ValueError as e:
        raise CacheFileError(f"unreadable metadata: {e}") from None
    return meta, body[meta_len:]


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _file_lock(path: Path):
    """Exclusive flock on `<path>.lock`; released when the descriptor closes (also on a crash)."""
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress.note(f"waiting for another process to finish {path.name}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _discard(path: Path, reason: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    warnings.warn(
        f"b12x: deleted unusable cached kernel {path} ({reason}); rebuilding it", RuntimeWarning, stacklevel=4
    )
    progress.note(f"cache: deleted {path} ({reason})")


# ---------------------------------------------------------------------------------------------
# Backends: serialize a compiled object to bytes and back
# ---------------------------------------------------------------------------------------------


def _serialize(backend: str, value, symbol: str) -> bytes:
    if backend == "python":
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    if not hasattr(value, "export_to_c"):
        raise TypeError(
            f"a cute-backend compile function must return cute.compile(..., options='--enable-tvm-ffi') "
            f"(use cute_compile), got {type(value).__qualname__}"
        )
    with _CUTE_LOCK, tempfile.TemporaryDirectory(prefix="b12x-export-") as tmp:
        obj = os.path.join(tmp, "kernel.o")
        value.export_to_c(obj, function_name=symbol)
        with open(obj, "rb") as f:
            return f.read()


def _deserialize(backend: str, payload: bytes, symbol: str):
    if backend == "python":
        return pickle.loads(payload)
    import cutlass.cute as cute

    # load_module reads a path; the bytes are copied into the JIT-linked module, so the temp file
    # can go right after.
    with _CUTE_LOCK, tempfile.TemporaryDirectory(prefix="b12x-load-") as tmp:
        obj = os.path.join(tmp, "kernel.o")
        with open(obj, "wb") as f:
            f.write(payload)
        module = cute.runtime.load_module(obj, enable_tvm_ffi=True)
        return getattr(module, symbol)


def _ensure_triton_cache_dir() -> None:
    """Point Triton's own disk cache under ours, unless the user chose one (TRITON_CACHE_DIR)."""
    global _triton_dir_we_set
    current = os.environ.get("TRITON_CACHE_DIR")
    if current is not None and current != _triton_dir_we_set:
        return
    wanted = str(paths.cache_dir() / "triton")
    os.environ["TRITON_CACHE_DIR"] = _triton_dir_we_set = wanted


def cute_compile(jit_fn, *args, arch: str, options: str = "", **kwargs):
    """`cute.compile` for `arch` with the b12x launch convention; safe to call from any thread.

    Adds `--enable-tvm-ffi` (torch tensors in, ~7 us launches) and `--gpu-arch <arch>`. The arch
    option is the DSL's per-compile target: trace-time queries (`get_arch_enum`) and the emitted
    PTX/cubin follow it, and it is part of the DSL's own memo hash, so sm_90a and sm_120a compiles
    of one function in one process stay distinct. CUTE_DSL_ARCH is deliberately not touched: the
    DSL reads it once at import as the arch of the GPU it runs on (it decides whether a JIT engine
    is built), and other threads read it through `arch.target_arch`. PTX and cubin are kept in
    `compiled.artifacts.PTX` / `.CUBIN` (dumped to a temporary directory and read back).
    Pass `make_fake_stream(use_tvm_ffi_env_stream=True)` as the stream: tvm-ffi then sets the env
    stream to torch's current stream of the first CUDA tensor argument for each call.
    """
    import cutlass.cute as cute

    validate_arch(arch)
    with _CUTE_LOCK, tempfile.TemporaryDirectory(prefix="b12x-cute-") as dump:
        opts = f"--enable-tvm-ffi --gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir={dump} {options}"
        return cute.compile(jit_fn, *args, options=opts.strip(), **kwargs)


# ---------------------------------------------------------------------------------------------
# The decorator
# ---------------------------------------------------------------------------------------------


class Kernel:
    """A compile function with caches; see the module docstring. Counters are per process."""

    def __init__(self, fn, op: str, backend: str, sources: tuple[str, ...]) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if not isinstance(op, str) or not op:
            raise ValueError(f"op must be a non-empty str, got {op!r}")
        functools.update_wrapper(self, fn)
        self.fn, self.op, self.backend, self.sources = fn, op, backend, tuple(sources)
        self._sig = inspect.signature(fn)
        params = self._sig.parameters
        if "arch" not in params:
            raise TypeError(f"{op}: the compile function {fn.__qualname__} must take an `arch` argument")
        for p in params.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
                raise TypeError(f"{op}: compile function parameters must be named (no *args, **kwargs or /), got {p}")
        self._memory: dict = {}
        self._fast: dict = {}
        self._lock = threading.RLock()
        self._source_digest: str | None = None
        self._source_read = False
        self.compile_count = 0
        self.load_count = 0
        _REGISTRY.add(self)

    def __repr__(self) -> str:
        return f"<b12x kernel {self.op} ({self.backend}) {self.__module__}.{self.__qualname__}>"

    # -- keys ------------------------------------------------------------------------------

    def _bind(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        try:
            bound = self._sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.op}: {e}") from None
        bound.apply_defaults()
        values = dict(bound.arguments)
        for name, value in values.items():
            _check_static(self.op, name, value)
        try:
            validate_arch(values["arch"])
        except ValueError as e:
            raise ValueError(f"{self.op}: {e}") from None
        # Types are part of the key: 1, 1.0 and True hash alike but compile differently.
        key = tuple((name, type(value), value) for name, value in values.items())
        return key, values

    @staticmethod
    def _fast_key(args: tuple, kwargs: dict) -> tuple:
        kw = tuple((k, type(v), v) for k, v in kwargs.items()) if kwargs else ()
        return args, tuple(map(type, args)), kw

    def _summary(self, values: dict) -> str:
        text = " ".join(f"{k}={_short(v)}" for k, v in values.items() if k != "arch")
        return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"

    def key_summary(self, *args, **kwargs) -> str:
        """A short readable form of the key (without the arch), as progress lines and errors show it."""
        return self._summary(self._bind(args, kwargs)[1])

    def _sources_digest(self) -> str | None:
        """sha256 of the source text the compiled code depends on; None when it cannot be read."""
        if not self._source_read:
            self._source_read = True
            h = hashlib.sha256()
            try:
                for name in (self.__module__, *self.sources):
                    module = sys.modules.get(name) or importlib.import_module(name)
                    with open(module.__file__, "rb") as f:
                        h.update(name.encode() + b"\0" + f.read() + b"\0")
                self._source_digest = h.hexdigest()
            except (OSError, TypeError, AttributeError, ImportError):
                # No source file (REPL, zipped, frozen): the fingerprint could not see an edit, so
                # this kernel stays in memory only.
                self._source_digest = None
        return self._source_digest

    def _fingerprint(self, values: dict) -> str | None:
        source = self._sources_digest()
        if source is None:
            return None
        h = hashlib.sha256()
        header = f"b12x-kernel format={FORMAT_VERSION} abi={EXPORT_ABI}"
        key = repr(tuple(values.items()))
        backend = _cute_recipe() if self.backend == "cute" else self.backend
        for part in (header, self.op, backend, source, _toolchain(), values["arch"], key):
            h.update(part.encode() + b"\0")
        return h.hexdigest()

    def fingerprint(self, *args, **kwargs) -> str | None:
        return self._fingerprint(self._bind(args, kwargs)[1])

    def _path(self, fingerprint: str, root: str | None = None) -> Path:
        return paths.cache_dir(root) / "kernels" / self.op / f"{fingerprint}.{_EXT[self.backend]}"

    def disk_path(self, *args, **kwargs) -> Path | None:
        """Where the disk cache keeps this key (None for triton or sourceless kernels)."""
        _, values = self._bind(args, kwargs)
        fingerprint = self._fingerprint(values) if self.backend != "triton" else None
        return None if fingerprint is None else self._path(fingerprint)

    def _disk_fingerprint(self, values: dict) -> str | None:
        if self.backend == "triton" or not paths.disk_cache_enabled():
            return None
        return self._fingerprint(values)

    # -- resolution ------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        """The compiled callable for this key (memory, then disk, then compile)."""
        try:
            return self._fast[self._fast_key(args, kwargs)]
        except (KeyError, TypeError):  # TypeError: unhashable arguments, reported by _bind
            pass
        key, values = self._bind(args, kwargs)
        with self._lock:
            value = self._memory.get(key)
            if value is None:
                summary, arch = self._summary(values), values["arch"]
                freeze.check_may_resolve(self.op, f"{summary} ({arch})")
                value = self._obtain(values, summary, arch)
                if self.backend != "python":
                    value = timing.instrument(f"{self.op} {summary} ({arch})", value)
                self._memory[key] = value
            self._fast[self._fast_key(args, kwargs)] = value
        return value

    def resolved(self, *args, **kwargs) -> bool:
        """True when this key is in memory (calling K would neither compile nor load)."""
        return self._bind(args, kwargs)[0] in self._memory

    def needs_compile(self, *args, **kwargs) -> bool:
        """True when calling K would compile: not in memory and no stored file in the disk cache (a
        stat, not a load). Triton keys are True unless in memory: their disk cache is Triton's own."""
        key, values = self._bind(args, kwargs)
        if key in self._memory:
            return False
        fingerprint = self._disk_fingerprint(values)
        return fingerprint is None or not self._path(fingerprint).is_file()

    def cache_clear(self) -> None:
        """Forget the in-memory kernels (the disk cache stays)."""
        with self._lock:
            self._memory.clear()
            self._fast.clear()

    def _compile(self, values: dict, summary: str, arch: str, fingerprint: str | None):
        start = time.perf_counter()
        value = self.fn(**values)
        if value is None:  # None means "not resolved" to the caches
            raise TypeError(f"{self.op}: the compile function {self.__qualname__} returned None")
        payload = None if fingerprint is None else _serialize(self.backend, value, _symbol(fingerprint))
        seconds = time.perf_counter() - start
        self.compile_count += 1
        progress.report("compile", self.op, summary, arch, seconds)
        return value, payload

    def _load(self, path: Path, fingerprint: str, summary: str, arch: str, *, repair: bool):
        """The kernel stored at `path`, or None; with `repair`, an unusable file is deleted."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        start = time.perf_counter()
        try:
            meta, payload = unpack(data)
            if meta.get("fingerprint") != fingerprint:
                raise CacheFileError("stored for another key or toolchain")
            value = _deserialize(self.backend, payload, meta["symbol"])
        except Exception as e:  # whatever fails to load is rebuilt, never half-trusted
            if repair:
                _discard(path, str(e) or type(e).__name__)
            return None
        self.load_count += 1
        progress.report("load", self.op, summary, arch, time.perf_counter() - start)
        return value

    def _store(self, path: Path, meta: dict, payload: bytes) -> None:
        try:
            _write_atomic(path, pack(meta, payload))
        except OSError as e:  # a full or read-only cache costs a recompile later, not this call
            warnings.warn(f"b12x: could not write {path}: {e}", RuntimeWarning, stacklevel=4)

    def _meta(self, values: dict, summary: str, fingerprint: str) -> dict:
        return {
            "op": self.op,
            "backend": self.backend,
            "arch": values["arch"],
            "key": summary,
            "fingerprint": fingerprint,
            "symbol": _symbol(fingerprint),
            "compile_function": f"{self.__module__}.{self.__qualname__}",
            "toolchain": _toolchain(),
            "created": time.time(),
        }

    def _prepare_dir(self, path: Path) -> bool:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return True
        except OSError as e:
            warnings.warn(
                f"b12x: cache directory {path.parent} is unusable ({e}); compiling in memory only",
                RuntimeWarning,
                stacklevel=4,
            )
            return False

    def _obtain(self, values: dict, summary: str, arch: str):
        if self.backend == "triton":
            _ensure_triton_cache_dir()
        fingerprint = self._disk_fingerprint(values)
        path = None if fingerprint is None else self._path(fingerprint)
        if path is None or not self._prepare_dir(path):
            return self._compile(values, summary, arch, None)[0]
        value = self._load(path, fingerprint, summary, arch, repair=False)
        if value is not None:
            return value
        with _file_lock(path):
            # Another process may have written it while we waited for the lock.
            value = self._load(path, fingerprint, summary, arch, repair=True)
            if value is not None:
                return value
            value, payload = self._compile(values, summary, arch, fingerprint)
            self._store(path, self._meta(values, summary, fingerprint), payload)
        return value

    # -- ahead of time ---------------------------------------------------------------------

    def _stored_ok(self, path: Path, fingerprint: str, *, repair: bool) -> bool:
        """Header-level check of a stored file, without loading it (loading costs a runtime init)."""
        try:
            meta, _ = unpack(path.read_bytes())
            if meta.get("fingerprint") != fingerprint:
                raise CacheFileError("stored for another key or toolchain")
            return True
        except FileNotFoundError:
            return False
        except CacheFileError as e:
            if repair:
                _discard(path, str(e))
            return False

    def _precompile(self, values: dict, root: str | None = None) -> str:
        summary, arch = self._summary(values), values["arch"]
        freeze.check_may_resolve(self.op, f"{summary} ({arch})")
        if self.backend == "triton":
            _ensure_triton_cache_dir()
            self._compile(values, summary, arch, None)
            return "compiled"
        fingerprint = self._disk_fingerprint(values)
        if fingerprint is None:
            raise RuntimeError(
                f"{self.op}: precompile needs the disk cache (B12X_DISK_CACHE is off or "
                f"{self.__module__} has no source file)"
            )
        path = self._path(fingerprint, root)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self._stored_ok(path, fingerprint, repair=False):
            return "cached"
        with _file_lock(path):
            if self._stored_ok(path, fingerprint, repair=True):
                return "cached"
            _, payload = self._compile(values, summary, arch, fingerprint)
            self._store(path, self._meta(values, summary, fingerprint), payload)
        return "compiled"

    def precompile(self, *args, **kwargs) -> str:
        """Compile this key into the disk cache (no GPU needed); "compiled" or "cached".

        Nothing enters the memory cache: this is for worker processes and install-time warmup.
        """
        return self._precompile(self._bind(args, kwargs)[1])

    def job(self, *args, **kwargs) -> CompileJob:
        """A picklable record for `run_job` in another process (module-level kernels only)."""
        self._bind(args, kwargs)  # fail here, in the caller, on a bad key
        if "<locals>" in self.__qualname__ or _kernel_by_name(self.__module__, self.__qualname__) is not self:
            raise ValueError(f"{self.op}: {self.__qualname__} must be a module-level kernel to compile in a worker")
        return CompileJob(
            self.__module__, self.__qualname__, self.op, tuple(args), tuple(kwargs.items()), str(paths.cache_dir())
        )


def _symbol(fingerprint: str) -> str:
    # Unique per key: every loaded module is linked into one process, so symbols must not collide.
    return f"b12x_{fingerprint[:32]}"


def _kernel_by_name(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


def run_job(job: CompileJob) -> JobResult:
    """Compile `job` into the disk cache at `job.cache_dir` (the entry point for worker processes)."""
    kernel_obj = _kernel_by_name(job.module, job.qualname)
    if not isinstance(kernel_obj, Kernel) or kernel_obj.op != job.op:
        raise LookupError(f"{job.module}.{job.qualname} is not the b12x kernel {job.op!r}")
    _, values = kernel_obj._bind(job.args, dict(job.kwargs))
    start = time.perf_counter()
    status = kernel_obj._precompile(values, job.cache_dir)
    return JobResult(job.op, kernel_obj._summary(values), values["arch"], status, time.perf_counter() - start)


def kernel(op: str, backend: str = "cute", *, sources: tuple[str, ...] = ()):
    """Decorate a compile function whose arguments are its cache key (see the module docstring).

    op: the kernel's name in progress lines, errors and the cache folder ("gemm.blockscaled").
    backend: "cute" (tvm-ffi object on disk), "triton" (Triton's own disk cache) or "python"
    (pickled value). sources: extra module names whose source text the fingerprint covers (shared
    lowering the kernel imports from `_lib` or `<group>/_shared`).
    """

    def wrap(fn) -> Kernel:
        return Kernel(fn, op, backend, sources)

    return wrap


def clear_memory_cache() -> None:
    """Empty the in-memory cache of every kernel (the root's `clear_all_caches` calls this)."""
    for k in list(_REGISTRY):
        k.cache_clear()


def kernels() -> list[Kernel]:
    """Every kernel decorated so far in this process, sorted by op."""
    return sorted(_REGISTRY, key=lambda k: (k.op, k.__qualname__))
