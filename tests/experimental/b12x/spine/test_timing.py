"""B12X_TIMING: off by default, never records without CUDA or inside capture, summarises per name."""

import pytest

from flashinfer.experimental.b12x._lib import timing

from .fake_kernels import compile_launcher

pytestmark = pytest.mark.contract


@pytest.fixture(autouse=True)
def _reset():
    timing.reset()
    yield
    timing.reset()


def test_off_by_default_returns_the_launcher_itself():
    fn = lambda: 3  # noqa: E731
    assert timing.instrument("k", fn) is fn
    assert compile_launcher(3, "sm_90a")(2) == 6
    assert not isinstance(compile_launcher(3, "sm_90a"), timing._Timed)


def test_on_wraps_resolved_kernels_and_forwards_attributes(monkeypatch):
    monkeypatch.setenv("B12X_TIMING", "1")
    launch = compile_launcher(5, "sm_90a")
    assert isinstance(launch, timing._Timed)
    assert launch(2) == 10  # no CUDA here: the call runs untimed
    assert launch.__call__ is not None and "spine.launcher block=5 (sm_90a)" in repr(launch)
    assert timing.summary() == {}


def test_nothing_is_recorded_while_capturing(monkeypatch):
    monkeypatch.setenv("B12X_TIMING", "1")
    monkeypatch.setattr(timing, "_can_record", lambda: False)
    with timing.timed("k"):
        pass
    assert timing.summary() == {}


def test_summary_aggregates_per_name():
    class Event:
        def __init__(self, t):
            self.t = t

        def synchronize(self):
            pass

        def query(self):
            return True

        def elapsed_time(self, end):
            return end.t - self.t

    timing._pending.extend([("a", Event(0.0), Event(2.0)), ("a", Event(1.0), Event(2.0)), ("b", Event(0), Event(5))])
    times = timing.summary()
    assert (times["a"].count, times["a"].total_ms, times["a"].min_ms, times["a"].max_ms) == (2, 3.0, 1.0, 2.0)
    assert times["a"].mean_ms == 1.5
    text = timing.format_summary(times)
    assert text.splitlines()[0] == "[b12x] timing (2 kernels, device ms)"
    assert text.splitlines()[2].split()[0] == "b"  # sorted by total time
    timing.reset()
    assert timing.format_summary() == "[b12x] timing: no kernel launches recorded"
