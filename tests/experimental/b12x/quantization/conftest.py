"""Fixtures the quantization test files share."""

import pytest

import b12x


@pytest.fixture(scope="module")
def session():
    """One PreparationSession on the GPU per test module (the gpu tier's files)."""
    return b12x.PreparationSession("cuda")
