"""Fixtures of the moe tests: a prepared CPU plan for given caps (the reference backend)."""

import warnings

import pytest


@pytest.fixture
def prepared():
    """prepared(caps) -> a moe.fused_moe plan prepared on the CPU (reference backend)."""
    import b12x
    from b12x.moe import fused_moe

    def make(caps, **kwargs):
        p = fused_moe.plan(caps, **kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with b12x.PreparationSession("cpu") as session:
                session.prepare([p])
        return p

    return make
