"""Launch plumbing shared by every kernel family: ``cdiv``, grids, memory spaces.

A launch helper in ``kernels/`` receives validated :class:`MatrixDesc` values
and never sees user objects. The helpers here move NumPy operands to the GPU
(the span of each view, so its strides are kept) and allocate outputs in the
caller's memory space.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numba import cuda

from .descriptor import MatrixDesc, describe

__all__ = ["cdiv", "simulated", "device_operand", "allocate_output"]


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
    data = cuda.to_device(desc.data, stream=stream)  # the span: a contiguous 1-D view
    return replace(desc, data=data, on_device=True, address=data.device_ctypes_pointer.value)


def allocate_output(shape: tuple[int, int], dtype: np.dtype, on_device: bool, name: str = "out",
                    stream=0) -> MatrixDesc:
    """A fresh row-major matrix in the requested memory space."""
    if on_device:
        return describe(cuda.device_array(shape, dtype=dtype, stream=stream), name)
    return describe(np.empty(shape, dtype=dtype), name)
