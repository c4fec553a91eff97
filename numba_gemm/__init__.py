"""numba-gemm: readable, stride-aware GEMM kernels in pure Numba CUDA.

    >>> import numba_gemm
    >>> c = numba_gemm.matmul(a, b, algorithm="mnk")      # NumPy or CUDA arrays

Public names load lazily, so ``python -m numba_gemm`` can choose the CUDA
simulator (``NUMBA_ENABLE_CUDASIM``) before Numba is imported, and
``numba_gemm.model`` (pure Python) never imports Numba at all.
"""

import os
from importlib import import_module

__version__ = "0.1.0"  # the one place the version is set (pyproject.toml reads it)


def _initialise_cuda_driver() -> None:
    """``cuInit`` once, here, in the importing thread, through cuda.bindings as Numba calls it
    (its loader resolves the driver's entry points on this first call; a ``cuInit`` through
    libcuda itself before it makes its probes fail, which compute-sanitizer reports), without
    importing Numba, which would fix the simulator choice too early. Numba marks its driver
    initialised before its own ``cuInit`` returns, so threads that make their first CUDA calls
    at once (``cuda.to_device`` in each worker of a server) race it: all but one get
    ``CUDA_ERROR_NOT_INITIALIZED``. With the driver initialised first there is nothing to race.
    Nothing happens on the simulator or without a driver (errors come at first use)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return
    try:
        from cuda.bindings import driver

        driver.cuInit(0)
    except Exception:  # no driver or no GPU (cuda.bindings raises its own): reported at first use
        pass


_initialise_cuda_driver()

__all__ = [
    "__version__",
    "ALGORITHMS",
    "MatrixDesc",
    "MmaConfig",
    "TileConfig",
    "WgmmaConfig",
    "cdiv",
    "choose_algorithm",
    "describe",
    "matmul",
    "model",
    "ordering",
    "precision",
    "transpose_view",
    "triple",
    "tune",
]

_HOME = {
    "ALGORITHMS": "api",
    "choose_algorithm": "api",
    "matmul": "api",
    "MatrixDesc": "descriptor",
    "describe": "descriptor",
    "transpose_view": "descriptor",
    "cdiv": "launch",
    "TileConfig": "kernels.tiled",
    "MmaConfig": "kernels.mma",
    "WgmmaConfig": "kernels.hopper",
    "tune": "autotune",
    "triple": "triple_product",
}


def __getattr__(name):
    if name in ("model", "ordering", "precision"):
        return import_module(f".{name}", __name__)
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{_HOME[name]}", __name__), name)
    # Kept, so later lookups find it without this function: `numba_gemm.matmul(...)` in a loop
    # had paid an import_module per call (~1-2 us of the ~10 a prepared call takes).
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
