"""Core flashinfer stays light: importing it loads no kernels, no toolchains, nothing experimental."""

import subprocess
import sys


def test_import_flashinfer_is_light():
    code = (
        "import sys, flashinfer; "
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'cutlass', 'triton', 'tvm_ffi', 'b12x') "
        "or m.startswith('flashinfer.experimental')]; "
        "print(heavy); assert not heavy, heavy; print(flashinfer.__version__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr + out.stdout
