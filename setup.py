"""Package list for flashinfer-python (the rest of the configuration is in pyproject.toml).

The wheel holds two top-level packages: `flashinfer`, and `b12x`, the compatibility shim whose
source lives in flashinfer/experimental/b12x/_compat/b12x (so `import b12x` keeps working).
"""

from setuptools import find_packages, setup

SHIM = "flashinfer/experimental/b12x/_compat/b12x"

setup(
    packages=find_packages(include=["flashinfer", "flashinfer.*"], exclude=["flashinfer.experimental.b12x._compat*"])
    + ["b12x"],
    package_dir={"b12x": SHIM},
    package_data={"flashinfer.experimental": ["README.md"], "flashinfer.experimental.b12x": ["README.md"]},
)
