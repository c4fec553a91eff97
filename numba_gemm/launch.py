"""Launch plumbing shared by every kernel family: ``cdiv``, grids, memory spaces.

A launch helper in ``kernels/`` receives validated :class:`MatrixDesc` values
and never sees user objects. The helpers here move NumPy operands to the GPU
(the span of each view, so its strides are kept) and allocate outputs in the
caller's memory space.
"""

from __future__ import annotations

import ctypes
from dataclasses import replace

import numpy as np
from numba import cuda

from .descriptor import MatrixDesc, describe

__all__ = ["cdiv", "simulated", "device_operand", "allocate_output", "shared_memory_limit",
           "launch_kernel"]

# The simulator has no limit of its own; report Hopper's (227 KB per block, opt-in).
SIMULATED_SHARED_LIMIT = 227 * 1024
STATIC_SHARED_LIMIT = 48 * 1024  # what a kernel gets without opting in


def cdiv(a: int, b: int) -> int:
    """Ceiling division: the number of tiles of size ``b`` that cover ``a``."""
    return -(-a // b)


def simulated() -> bool:
    """True when kernels run on the Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1)."""
    return bool(cuda.config.ENABLE_CUDASIM)


def device_operand(desc: MatrixDesc, stream=0) -> MatrixDesc:
    """``desc`` with a buffer a kernel can read: host spans are copied to the GPU.

    On the simulator host memory is device memory, so nothing moves.
    """
    if desc.on_device or simulated():
        return desc
    data = cuda.to_device(desc.buffer(), stream=stream)  # the span: a contiguous 1-D view
    return replace(desc, data=data, on_device=True, address=data.device_ctypes_pointer.value)


def allocate_output(shape: tuple[int, int], dtype: np.dtype, on_device: bool, name: str = "out",
                    stream=0) -> MatrixDesc:
    """A fresh row-major matrix in the requested memory space."""
    if on_device:
        return describe(cuda.device_array(shape, dtype=dtype, stream=stream), name)
    return describe(np.empty(shape, dtype=dtype), name)


def shared_memory_limit() -> int:
    """Bytes of shared memory one block may use on the current device (after opting in)."""
    if simulated():
        return SIMULATED_SHARED_LIMIT
    return cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN


_compiled: dict = {}


def _compiled_kernel(kernel, args: tuple, shared: int):
    """(cuda.core kernel, parameter packer) of ``kernel`` specialised for ``args``' types.

    Compiles on first use. Above 48 KB of dynamic shared memory a function
    must opt in through ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``,
    for which numba-cuda has no API: it is set here on the driver handle.
    """
    # The types Numba gives a 1-D C-contiguous array of the dtype, and an int64.
    signature = tuple(kernel.typeof_pyval(np.empty(0, a.dtype)) if isinstance(a, MatrixDesc)
                      else kernel.typeof_pyval(np.int64(a)) for a in args)
    key = (kernel, signature)
    entry = _compiled.get(key)
    if entry is None:
        compiled = kernel.compile(signature)
        entry = _compiled[key] = [compiled.library.get_cufunc(), STATIC_SHARED_LIMIT]
    cufunc, allowed = entry
    if shared > allowed:
        from numba.cuda.cudadrv.driver import binding, driver

        attribute = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.cuKernelSetAttribute(attribute, shared, cufunc.handle, cufunc.device.id)
        entry[1] = shared
    return cufunc.kernel


def launch_kernel(kernel, grid, block, stream, shared: int, args: tuple) -> None:
    """Launch the Numba kernel ``kernel`` with ``args``: :class:`MatrixDesc` values, passed as
    1-D buffers from element (0, 0), and ints, passed as int64.

    Numba's own launch types and converts every argument on every call (about
    30 us per array argument measured on an H200, more than a 1024^3 GEMM
    takes). This compiles once per argument signature and hands the driver
    Numba's parameter layout directly: per array, meminfo, parent, item count,
    item size, data pointer, shape and stride in bytes; per int, an int64. On
    the simulator it is Numba's launch.
    """
    if simulated():
        kernel[grid, block, stream, shared](
            *(a.buffer() if isinstance(a, MatrixDesc) else a for a in args))
        return
    from cuda.core import LaunchConfig, launch
    from numba.cuda.cudadrv.driver import _to_core_stream

    core_kernel = _compiled_kernel(kernel, args, shared)
    params = []
    for a in args:
        if isinstance(a, MatrixDesc):
            span, itemsize = a.span, a.dtype.itemsize
            params += (0, 0, span, itemsize, a.address, span, itemsize)
        else:
            params.append(ctypes.c_int64(a))
    launch(_to_core_stream(stream), LaunchConfig(grid=grid, block=block, shmem_size=shared),
           core_kernel, *params)
