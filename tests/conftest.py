import importlib.util
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    """A generator seeded from the test's id: fixed per test, different across tests."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True)
def fresh_prepared_calls():
    """Each test starts with no prepared call (``numba_gemm.prepared``): tests that count plans
    must not meet the calls of the same signatures made by the tests before them."""
    from numba_gemm import prepared

    prepared.forget_prepared_calls()


@pytest.fixture
def poisoned_fresh_outputs(monkeypatch):
    """Every fresh device result (``launch.new_device_array``, from ``allocate_output`` and
    from a prepared call) starts as NaN, so that an element a kernel leaves unwritten shows."""
    from numba_gemm import prepared
    from numba_gemm.launch import memory

    new_device_array = memory.new_device_array

    def poisoned_array(shape, dtype, stream=0, like=None):
        array = new_device_array(shape, dtype, stream, like)
        array.copy_to_device(np.full(shape, np.nan, dtype), stream=stream)
        return array

    monkeypatch.setattr(memory, "new_device_array", poisoned_array)
    monkeypatch.setattr(prepared, "new_device_array", poisoned_array)


@pytest.fixture
def benchmark_module():
    """``load(name)``: the module ``benchmarks/<name>.py`` (the benchmarks are scripts, not a
    package), imported from its file."""

    folder = Path(__file__).parents[1] / "benchmarks"
    if str(folder) not in sys.path:  # as when run as a script: siblings import each other
        sys.path.insert(0, str(folder))

    def load(name):
        path = folder / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
