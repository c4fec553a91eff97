"""Shared pytest set-up for tests/ and benchmarks/: the `gpu` marker skips without a GPU."""

import os

import pytest

# JAX must not grab most of the GPU's memory next to Numba's allocations.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# Four CPU devices for the sharding tests (tests/test_sharding.py), set before JAX starts; a
# program on one device is unchanged by them.
HOST_DEVICES = 4
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={HOST_DEVICES}"
    ).strip()


def gpu_available() -> bool:
    from numba import cuda

    return not cuda.config.ENABLE_CUDASIM and cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none found, or NUMBA_ENABLE_CUDASIM=1)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
