import zlib

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    """A generator seeded from the test's id: fixed per test, different across tests."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def poisoned_fresh_outputs(monkeypatch):
    """Every fresh device result (``launch.new_device_array``, from ``allocate_output`` and
    from a prepared call) starts as NaN, so that an element a kernel leaves unwritten shows."""
    from numba_gemm import launch, prepared

    new_device_array = launch.new_device_array

    def poisoned_array(shape, dtype, stream=0):
        array = new_device_array(shape, dtype, stream)
        array.copy_to_device(np.full(shape, np.nan, dtype), stream=stream)
        return array

    monkeypatch.setattr(launch, "new_device_array", poisoned_array)
    monkeypatch.setattr(prepared, "new_device_array", poisoned_array)
