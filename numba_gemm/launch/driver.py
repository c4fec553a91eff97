"""The CUDA driver and the simulator: which one runs the kernels, driver set-up, errors,
streams.

:data:`SIMULATED` is the library's one spelling of "kernels run on Numba's CUDA simulator"
(``NUMBA_ENABLE_CUDASIM=1``, read once when Numba is imported): host code branches on it,
and every kernel building block picks its PTX form or its simulator twin by it at import.
"""

from __future__ import annotations

import functools
import threading

from numba import cuda

from ..descriptor import is_int

__all__ = [
    "SIMULATED",
    "SIMULATOR_LOCK",
    "serialised_on_simulator",
    "require_gpu",
    "checked",
    "checked_stream",
    "stream_handle",
]

SIMULATED = bool(cuda.config.ENABLE_CUDASIM)

# The simulator runs a launch's threads in the calling thread and, while it runs, swaps the
# kernel modules' ``cuda`` for its own: two launches from two host threads at once, or a kernel
# built while another runs, break. Every simulated launch holds this, and so does every whole
# call of the library's entry points (``serialised_on_simulator``); reentrant.
SIMULATOR_LOCK = threading.RLock()


def serialised_on_simulator(function):
    """``function`` itself on a GPU; on the simulator, ``function`` run under
    :data:`SIMULATOR_LOCK` (planning builds kernels, which must not meet a running one)."""
    if not SIMULATED:
        return function

    @functools.wraps(function)
    def serialised(*args, **kwargs):
        with SIMULATOR_LOCK:
            return function(*args, **kwargs)

    return serialised


def _initialise_driver() -> None:
    """Initialise the CUDA driver once, at import, in the importing thread: Numba's and
    cuda.bindings' lazy initialisation race when several threads make their first CUDA call at
    once (one sees the driver half set up: ``CUDA_ERROR_NOT_INITIALIZED``). No context is
    created; on a machine without CUDA nothing happens and the error comes at first use."""
    if SIMULATED:
        return
    try:
        from cuda.bindings import driver as cu
        from numba.cuda.cudadrv.driver import driver

        driver.ensure_initialized()
        cu.cuCtxGetCurrent()  # fills cuda.bindings' table of driver entry points
    except Exception:  # no driver or no GPU (each library raises its own): reported at first use
        pass


_initialise_driver()


def require_gpu() -> None:
    """``RuntimeError`` saying how to run without one, unless Numba sees a CUDA GPU (or runs the
    simulator): host operands are copied to a GPU, and there is none to copy them to."""
    if SIMULATED or _gpu_found():
        return
    raise RuntimeError(
        "numba-gemm runs its kernels on a CUDA GPU, and Numba finds none here. To run them on "
        "Numba's CUDA simulator instead (slow: sizes up to ~64), set NUMBA_ENABLE_CUDASIM=1 "
        "in the environment before Python imports numba, e.g. `NUMBA_ENABLE_CUDASIM=1 python "
        "script.py`"
    )


@functools.cache
def _gpu_found() -> bool:
    return cuda.is_available()


def checked(result: tuple, what: str):
    """The value of a cuda.bindings call, or a RuntimeError naming the failed call."""
    from cuda.bindings import driver as cu

    error, *value = result
    if error != cu.CUresult.CUDA_SUCCESS:
        name = cu.cuGetErrorName(error)[1]
        raise RuntimeError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    return value[0] if value else None


@functools.cache
def _numba_stream_class() -> type:
    """Numba's stream class (the simulator's on the simulator), imported on first use."""
    if SIMULATED:
        from numba.cuda.simulator.api import stream as simulated_stream

        return simulated_stream
    from numba.cuda.cudadrv.driver import Stream

    return Stream


def checked_stream(stream):
    """``stream`` as the launches and Numba's copies take it: 0 (the legacy default stream)
    for 0 or None, a Numba stream as it is, and on a GPU a raw ``CUstream`` handle (an int)
    as a Numba external stream on it. ``TypeError`` or ``ValueError`` naming ``stream`` for
    anything else, before any launch."""
    if stream is None or (is_int(stream) and stream == 0):
        return 0
    if isinstance(stream, _numba_stream_class()):
        return stream
    if not is_int(stream):
        raise TypeError(
            "stream must be 0, a Numba stream (numba.cuda.stream()) or a CUstream handle (an "
            f"int); got {type(stream).__name__} {stream!r}"
        )
    if stream < 0:
        raise ValueError(f"stream must be a non-negative CUstream handle; got {stream}")
    if SIMULATED:
        raise TypeError(
            f"stream={stream}: the CUDA simulator has no CUDA streams to name by handle; pass 0 "
            "or one of its numba.cuda.stream() objects"
        )
    return cuda.external_stream(int(stream))


def stream_handle(stream) -> int:
    """The CUstream handle (as an int) of a Numba stream, or 0 for the default stream."""
    handle = getattr(stream, "handle", stream)
    handle = getattr(handle, "value", handle)
    return int(handle or 0)


# cuLaunchKernel's `extra` list: parameters as one packed buffer (CUDA's CU_LAUNCH_PARAM_*).
_BUFFER_POINTER, _BUFFER_SIZE, _END = 1, 2, 0
