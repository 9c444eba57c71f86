"""b12x.loader: fast, strict safetensors loading straight into prepared weights.

    from b12x.loader import DirectWeightSession, capabilities
    capabilities("cuda", "/models/m")       # O_DIRECT? pinned memory? GDS? what "auto" picks
    with DirectWeightSession("cuda") as s:
        for name, meta in s.weights("/models/m"):
            s.session(params[name], meta)

Not an op (no OpMeta). Importing this package loads no torch: names resolve on first use.
See docs/loader.md for the design and measured numbers.
"""

from .._lib.lazy import lazy_attributes

_LAZY = {
    "capabilities": "._capabilities",
    "LoaderCapabilities": "._capabilities",
    "DirectWeightSession": ".session",
    "LoadStats": ".session",
    "checkpoint_files": ".session",
    "SharedReadGroup": ".shared",
    "CheckpointDisplay": ".display",
    "register_conversion": ".conversions",
    "unregister_conversion": ".conversions",
    "registered_conversions": ".conversions",
    "read_safetensors_header": "._format",
    "TensorEntry": "._format",
    "SafetensorsFile": "._format",
    "Checkpoint": "._checkpoint",
    "resolve_checkpoint": "._checkpoint",
    "CheckpointFormatError": ".errors",
    "CheckpointReadError": ".errors",
    "SharedReadError": ".errors",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
