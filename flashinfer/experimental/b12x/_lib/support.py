"""Can an op run here? Toolchain versions and per-op support answers (for is_supported and doctor)."""

from __future__ import annotations

import importlib.metadata
import importlib.util

from .arch import KNOWN_ARCHS, arch_for_cc

# requirement name -> distribution that provides it
_DISTRIBUTIONS = {
    "torch": "torch",
    "cutlass-dsl": "nvidia-cutlass-dsl",
    "tvm-ffi": "apache-tvm-ffi",
    "triton": "triton",
    "safetensors": "safetensors",
    "rich": "rich",
}


def package_version(requirement: str) -> str | None:
    """Installed version of a toolchain piece (by distribution metadata; imports nothing)."""
    dist = _DISTRIBUTIONS.get(requirement, requirement)
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def toolchain_versions() -> dict[str, str | None]:
    import platform

    versions = {"python": platform.python_version()}
    versions.update({name: package_version(name) for name in _DISTRIBUTIONS})
    return versions


def why_unsupported(meta, device=None) -> str | None:
    """None when `meta`'s kernels can run on `device` (default: current CUDA device), else why not."""
    if not meta.archs:  # an op whose kernels do not exist yet runs nowhere but the CPU reference
        return f"{meta.qualname} has no GPU kernel yet; CPU tensors run the reference"
    for requirement in meta.requires:
        if requirement == "cuda":
            continue
        if package_version(requirement) is None:
            return f"{_DISTRIBUTIONS.get(requirement, requirement)} is not installed (pip install 'flashinfer-python[b12x]')"
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    if device is not None and torch.device(device).type != "cuda":
        return f"kernels need a CUDA device, got {torch.device(device)} (CPU tensors run the reference backend)"
    if not torch.cuda.is_available():
        return "no CUDA device (CPU tensors run the reference backend)"
    cc = tuple(torch.cuda.get_device_capability(device))
    arch = arch_for_cc(cc)
    if arch is None:
        return f"compute capability {cc[0]}.{cc[1]} is not a b12x target ({', '.join(KNOWN_ARCHS)})"
    if arch not in meta.archs:
        return f"{meta.qualname} does not run on {arch} (it runs on {', '.join(meta.archs)})"
    return None


def support_functions(meta):
    """(`is_supported`, `why_unsupported`) bound to one op's META, for its `__init__`."""

    def is_supported(device=None) -> bool:
        return why_unsupported(meta, device) is None

    def _why(device=None) -> str | None:
        return why_unsupported(meta, device)

    is_supported.__doc__ = f"True when {meta.qualname}'s kernels can run on `device` (default: current CUDA device)."
    _why.__doc__ = f"None when {meta.qualname} is supported on `device`, else the reason."
    return is_supported, _why
