"""CheckpointDisplay (live on a TTY, lines otherwise, silent when off), capabilities, cheap import."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from flashinfer.experimental.b12x.loader import CheckpointDisplay, LoaderCapabilities, capabilities


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.contract
def test_plain_lines_when_not_a_tty():
    stream = io.StringIO()
    d = CheckpointDisplay(enabled=True, stream=stream, interval=3600)
    d.source("ckpt", total_bytes=2_000_000_000, files=2)
    d.phase("reading")
    d.advance(500_000_000, file="/m/a.safetensors")  # throttled: no line
    d.advance(500_000_000, file="/m/b.safetensors")
    d.complete()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0] == "b12x.loader [headers] ckpt: 0.00 GB/2.00 GB (0%) at 0.00 GB/s, files 0/2"
    assert lines[1].startswith("b12x.loader [reading] ckpt: 0.00 GB/2.00 GB")
    assert lines[2].startswith("b12x.loader [done] ckpt: 1.00 GB/2.00 GB (50%)") and "files 2/2" in lines[2]


@pytest.mark.contract
def test_disabled_is_silent(monkeypatch):
    stream = io.StringIO()
    d = CheckpointDisplay(enabled=False, stream=stream)
    d.source("x", 10, 1)
    d.file("/a", 10)
    d.advance(10)
    d.phase("reading")
    d.complete()
    d.stop()
    assert stream.getvalue() == ""
    monkeypatch.setenv("B12X_LOADER_PROGRESS", "0")
    assert CheckpointDisplay(stream=stream).enabled is False


@pytest.mark.contract
def test_live_view_on_a_tty():
    stream = _Tty()
    d = CheckpointDisplay(stream=stream)
    assert d.live
    d.source("ckpt", total_bytes=1000, files=1)
    d.file("/m/a.safetensors", 1000)
    d.advance(1000, file="/m/a.safetensors")
    d.complete()
    d.stop()
    text = stream.getvalue()
    assert "b12x.loader [done]" in text and "a.safetensors" in text and "files 1/1" in text


@pytest.mark.contract
def test_capabilities_record(tmp_path):
    caps = capabilities("cpu", tmp_path)
    assert isinstance(caps, LoaderCapabilities)
    assert caps.device == "cpu" and caps.cuda is False and caps.gds is False
    assert caps.best_read_mode == ("direct" if caps.o_direct else "buffered")
    with pytest.raises(AttributeError):
        caps.o_direct = False  # frozen
    assert capabilities().device in ("cpu", "cuda")


@pytest.mark.contract
def test_package_import_is_cheap():
    code = (
        "import sys; import flashinfer.experimental.b12x.loader as L; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert 'DirectWeightSession' in dir(L); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
