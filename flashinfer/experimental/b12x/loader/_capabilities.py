"""What this machine can do for checkpoint loading: O_DIRECT, pinned memory, CUDA, GPUDirect Storage."""

from __future__ import annotations

import errno
import importlib.util
import mmap
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache

_PINNED_PROBE_BYTES = 4096


@dataclass(frozen=True)
class LoaderCapabilities:
    """Answers for one device and one filesystem; `notes` says why a feature is off."""

    device: str
    path: str
    o_direct: bool  # the filesystem of `path` accepts O_DIRECT page-aligned reads
    cuda: bool  # `device` is a CUDA device and CUDA works
    pinned_memory: bool  # page-locked host buffers can be allocated (needs CUDA)
    gds: bool  # kvikio is installed and cuFile runs in GPUDirect (not compatibility) mode
    kvikio: str | None  # kvikio version when installed
    best_read_mode: str  # what read_mode="auto" picks for this device and path
    notes: tuple[str, ...] = ()


def _probe_o_direct(path: str) -> tuple[bool, str | None]:
    """Open and read one page of `path` (or of a temp file beside it) with O_DIRECT."""
    if not hasattr(os, "O_DIRECT"):
        return False, "this OS has no O_DIRECT"
    created = None
    target = path
    try:
        if os.path.isdir(path):
            fd, created = tempfile.mkstemp(dir=path, prefix=".b12x-odirect-")
            os.write(fd, b"\0" * mmap.PAGESIZE)
            os.close(fd)
            target = created
        fd = os.open(target, os.O_RDONLY | os.O_DIRECT)
    except OSError as exc:
        if created:
            os.unlink(created)
        reason = "the filesystem refuses O_DIRECT" if exc.errno == errno.EINVAL else str(exc)
        return False, f"{path}: {reason}"
    try:
        buf = mmap.mmap(-1, mmap.PAGESIZE)  # anonymous mappings are page aligned
        os.preadv(fd, [buf], 0)
        return True, None
    except OSError as exc:
        return False, f"{path}: O_DIRECT read failed ({exc})"
    finally:
        os.close(fd)
        if created:
            os.unlink(created)


@lru_cache(maxsize=64)
def _o_direct_on_device(st_dev: int, path: str) -> tuple[bool, str | None]:
    return _probe_o_direct(path)


def o_direct_supported(path: str) -> bool:
    """Cached per filesystem (st_dev) of `path`."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return False
    return _o_direct_on_device(dev, path)[0]


@lru_cache(maxsize=1)
def _gds() -> tuple[bool, str | None, str | None]:
    if importlib.util.find_spec("kvikio") is None:
        return False, None, "kvikio is not installed (pip install kvikio-cu12 for GPUDirect Storage)"
    try:
        import kvikio
        import kvikio.defaults

        version = getattr(kvikio, "__version__", "unknown")
        if kvikio.defaults.compat_mode():
            return False, version, "kvikio runs in compatibility mode (no cuFile/GDS driver): POSIX reads"
        return True, version, None
    except Exception as exc:  # noqa: BLE001 - any import/driver failure means "no GDS"
        return False, None, f"kvikio failed to initialise: {exc}"


def gds_available() -> bool:
    return _gds()[0]


def capabilities(device=None, path: str | os.PathLike | None = None) -> LoaderCapabilities:
    """What loading can use on `device` (default: cuda if available, else cpu) reading from `path`.

    `path` is a checkpoint file or directory (default: the current directory); O_DIRECT is a property
    of its filesystem (tmpfs refused it before Linux 6.6; ext4/xfs accept it).
    """
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    path = os.path.abspath(os.fspath(path) if path is not None else os.getcwd())
    notes = []
    try:
        o_direct, why = _o_direct_on_device(os.stat(path).st_dev, path)
    except OSError as exc:
        o_direct, why = False, f"{path}: {exc}"
    if why:
        notes.append(why)
    cuda_ok = torch.cuda.is_available()
    cuda = device.type == "cuda" and cuda_ok
    if device.type == "cuda" and not cuda_ok:
        notes.append("CUDA is not available to torch")
    pinned = False
    if cuda_ok:
        try:
            pinned = torch.empty(_PINNED_PROBE_BYTES, dtype=torch.uint8, pin_memory=True).is_pinned()
        except RuntimeError as exc:
            notes.append(f"pinned host memory unavailable: {exc}")
    else:
        notes.append("no pinned host memory without CUDA (CPU destinations need none)")
    gds, kvikio_version, gds_note = _gds() if cuda else (False, None, None)
    if gds_note:
        notes.append(gds_note)
    best = "gds" if gds else ("direct" if o_direct else "buffered")
    return LoaderCapabilities(str(device), path, o_direct, cuda, pinned, gds, kvikio_version, best, tuple(notes))
