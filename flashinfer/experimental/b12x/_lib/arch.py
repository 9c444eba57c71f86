"""GPU architecture: compute capability -> CuTe DSL target, and compile-only targeting.

b12x targets SM120/SM121 (consumer Blackwell) and is validated on SM90 (H200). A CPU machine can
compile for any target: pass `arch=` explicitly or set `CUTE_DSL_ARCH` (the DSL reads it too).
"""

from __future__ import annotations

import os

# (major, minor) -> the `a` (architecture-specific) target the CuTe DSL compiles for.
ARCH_BY_CC = {(9, 0): "sm_90a", (12, 0): "sm_120a", (12, 1): "sm_121a"}
KNOWN_ARCHS = tuple(ARCH_BY_CC.values())


def arch_for_cc(cc: tuple[int, int]) -> str | None:
    return ARCH_BY_CC.get(tuple(cc))


def device_capability(device=None) -> tuple[int, int] | None:
    """(major, minor) of `device` (default: the current CUDA device), or None without CUDA."""
    import torch

    if device is not None and torch.device(device).type != "cuda":
        return None
    if not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability(device))


def resolve_device(device):
    """`device` as a torch.device with its index filled in ("cuda" -> "cuda:<current>"), so that
    "cuda" and "cuda:0" name one device in caches and sessions. Left as given without CUDA."""
    import torch

    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def validate_arch(arch: str) -> str:
    if arch not in KNOWN_ARCHS:
        raise ValueError(f"arch must be one of {KNOWN_ARCHS}, got {arch!r}")
    return arch


def target_arch(device=None, arch: str | None = None) -> str:
    """The target to compile for: `arch` if given, else `CUTE_DSL_ARCH`, else the device's.

    Raises RuntimeError when none is given and no supported CUDA device is present.
    """
    if arch is not None:
        return validate_arch(arch)
    env = os.environ.get("CUTE_DSL_ARCH")
    if env:
        return validate_arch(env)
    cc = device_capability(device)
    if cc is None:
        raise RuntimeError("no CUDA device to compile for: pass arch='sm_90a'|'sm_120a'|'sm_121a' or set CUTE_DSL_ARCH")
    found = arch_for_cc(cc)
    if found is None:
        raise RuntimeError(f"compute capability {cc[0]}.{cc[1]} is not a b12x target {KNOWN_ARCHS}")
    return found


def sm_count(device=None) -> int:
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count
