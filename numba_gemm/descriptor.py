"""Stride-aware matrix descriptors: the seed's ``Tensor(Shape, Stride)``.

``describe(x, name)`` is the one place that validates a user's matrix. It
accepts NumPy arrays, Numba device arrays, anything with
``__cuda_array_interface__`` (CuPy, PyTorch, Numba) and anything with
``__dlpack__`` (JAX, PyTorch, CuPy; on the GPU or the CPU), and returns a
:class:`MatrixDesc`: logical shape, strides in elements, dtype, and a 1-D
buffer whose element 0 is the matrix's element (0, 0). Kernels address element
(i, j) as ``data[i * strides[0] + j * strides[1]]``, exactly as in the seed, so
row-major, column-major, transposed and sliced views all run with no copy.

Nothing here launches a kernel or copies matrix data.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numba import cuda

if cuda.config.ENABLE_CUDASIM:
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray as DeviceNDArray
else:
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

__all__ = ["MatrixDesc", "describe", "transpose_view", "SUPPORTED_DTYPES"]

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

_DLPACK_CPU, _DLPACK_CUDA = 1, 2  # DLDeviceType codes


@dataclass(frozen=True)
class MatrixDesc:
    """A validated 2-D matrix: ``shape`` (rows, cols), ``strides`` in elements.

    ``address`` is the address of element (0, 0); kernels launched through
    ``numba_gemm.launch.launch_kernel`` take the matrix as the 1-D buffer of
    ``span`` elements that starts there. ``data`` is that buffer as an array
    (NumPy on the host; on the device a Numba array, built on first use by
    :meth:`buffer`, since building one costs more than a kernel launch);
    ``source`` is the caller's object, kept alive for as long as the descriptor is.

    A batch of matrices (``jax_bridge``'s batched products) adds ``batch``
    matrices ``batch_stride`` elements apart; ``batch_stride`` 0 broadcasts one
    matrix to the whole batch. ``span`` then covers every matrix of the batch.
    """

    name: str
    shape: tuple[int, int]
    strides: tuple[int, int]
    dtype: np.dtype
    data: Any
    on_device: bool
    address: int
    source: Any
    batch: int = 1
    batch_stride: int = 0

    def buffer(self):
        """``data``, the 1-D array of ``span`` elements from (0, 0), built on first use."""
        if self.data is None:
            flat = {
                "shape": (self.span,),
                "strides": None,
                "typestr": self.dtype.str,
                "data": (self.address, False),
                "version": 3,
            }
            # A cache, not a change of value: the frozen dataclass allows it this way.
            object.__setattr__(
                self, "data", cuda.from_cuda_array_interface(flat, owner=self.source)
            )
        return self.data

    @functools.cached_property
    def span(self) -> int:
        """Elements from (0, 0) of the first matrix to (rows-1, cols-1) of the last, inclusive."""
        return 1 + sum(
            (n - 1) * s
            for n, s in zip((self.batch, *self.shape), (self.batch_stride, *self.strides))
        )

    @property
    def layout(self) -> str:
        """'row' (unit column stride), 'col' (unit row stride) or 'strided'."""
        rows, cols = self.shape
        if cols == 1 or self.strides[1] == 1:
            return "row"
        if rows == 1 or self.strides[0] == 1:
            return "col"
        return "strided"

    def byte_range(self) -> tuple[int, int]:
        return self.address, self.address + self.span * self.dtype.itemsize

    def overlaps(self, other: MatrixDesc) -> bool:
        """True if the two matrices' memory ranges intersect (same memory space).

        Conservative: interleaved views (``x[:, ::2]`` and ``x[:, 1::2]``) count as overlapping.
        """
        if self.on_device != other.on_device:
            return False
        lo1, hi1 = self.byte_range()
        lo2, hi2 = other.byte_range()
        return lo1 < hi2 and lo2 < hi1

    def has_internal_overlap(self) -> bool:
        """True if two distinct (i, j) map to one element (unsafe for outputs)."""
        (n0, s0), (n1, s1) = _dims(self)
        return n0 > 1 and n1 > 1 and s1 < n0 * s0


def _dims(desc: MatrixDesc):
    """The (extent, stride) pairs of extent > 1, smallest stride first, padded to 2."""
    dims = sorted(((n, s) for n, s in zip(desc.shape, desc.strides) if n > 1), key=lambda d: d[1])
    return (dims + [(1, 0), (1, 0)])[:2]


def _element_strides(name: str, byte_strides, itemsize: int) -> tuple[int, int]:
    if any(s % itemsize for s in byte_strides):
        raise ValueError(
            f"{name} has byte strides {tuple(byte_strides)} that are not multiples of its "
            f"item size ({itemsize} bytes); misaligned views are not supported"
        )
    return tuple(s // itemsize for s in byte_strides)


def _check_matrix(name: str, shape, dtype) -> None:
    if len(shape) != 2:
        raise ValueError(
            f"{name} must be 2-D (a matrix), got a {len(shape)}-D array of shape {tuple(shape)}"
        )
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{name} has dtype {dtype}; supported dtypes are "
            + ", ".join(str(d) for d in SUPPORTED_DTYPES)
        )
    if any(n == 0 for n in shape):
        raise ValueError(
            f"{name} is empty (shape {tuple(shape)}); every dimension must be at least 1"
        )


def _check_strides(name: str, shape, strides) -> None:
    for axis, (n, s) in enumerate(zip(shape, strides)):
        if n > 1 and s <= 0:
            raise ValueError(
                f"{name} has stride {s} on axis {axis} (extent {n}); zero and negative strides "
                "are not supported: make the view positive-strided or copy it"
            )


def _validated(
    name: str, shape, byte_strides, dtype: np.dtype, on_device: bool, address: int, source: Any
) -> MatrixDesc:
    """Every check of one matrix; the descriptor's ``data`` is filled in by the caller."""
    _check_matrix(name, shape, dtype)
    strides = _element_strides(name, byte_strides, dtype.itemsize)
    _check_strides(name, shape, strides)
    return MatrixDesc(name, tuple(shape), strides, dtype, None, on_device, address, source)


def _host_desc(name: str, x: np.ndarray, source: Any) -> MatrixDesc:
    desc = _validated(
        name, x.shape, x.strides, x.dtype, False, x.__array_interface__["data"][0], source
    )
    flat = np.lib.stride_tricks.as_strided(
        x, shape=(desc.span,), strides=(x.itemsize,), writeable=x.flags.writeable
    )
    return replace(desc, data=flat)


def cai_metadata(name: str, cai: dict) -> tuple[tuple[int, ...], tuple[int, ...], np.dtype, int]:
    """(shape, byte strides, dtype, data pointer) of a CUDA array interface dict."""
    if cai.get("mask") is not None:
        raise TypeError(f"{name} is a masked array; masks are not supported")
    shape = tuple(cai["shape"])
    dtype = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    if strides is None:  # C-contiguous by the interface's definition
        strides = tuple(math.prod(shape[i + 1 :]) * dtype.itemsize for i in range(len(shape)))
    return shape, tuple(strides), dtype, int(cai["data"][0])


def _device_desc(name: str, cai: dict, source: Any) -> MatrixDesc:
    shape, byte_strides, dtype, ptr = cai_metadata(name, cai)
    desc = _validated(name, shape, byte_strides, dtype, True, ptr, source)
    if cai.get("stream") is None:
        return desc  # the buffer array is built only if a launch path needs it
    # The producer names a stream with pending work on the array: Numba's import of the
    # interface synchronises it, so build the buffer now, before any launch.
    flat_cai = {
        "shape": (desc.span,),
        "strides": None,
        "typestr": dtype.str,
        "data": (ptr, False),
        "version": 3,
        "stream": cai["stream"],
    }
    return replace(desc, data=cuda.from_cuda_array_interface(flat_cai, owner=source))


def _dlpack_stream(stream) -> int:
    """The DLPack ``stream`` value for a Numba stream (1: the legacy default stream)."""
    handle = getattr(stream, "handle", stream)
    handle = getattr(handle, "value", handle)
    return int(handle) if handle else 1


def _dlpack_desc(name: str, x: Any, stream) -> MatrixDesc:
    device_type, _ = x.__dlpack_device__()
    if device_type == _DLPACK_CPU:
        return _host_desc(name, np.from_dlpack(x), x)
    if device_type != _DLPACK_CUDA:
        raise TypeError(
            f"{name} lives on DLPack device type {device_type}; only CUDA and CPU are supported"
        )
    from cuda.core.utils import StridedMemoryView

    # The producer orders its pending writes before our stream (DLPack's stream protocol).
    view = StridedMemoryView.from_dlpack(x, stream_ptr=_dlpack_stream(stream))
    itemsize = np.dtype(view.dtype).itemsize
    cai = {
        "shape": tuple(view.shape),
        "typestr": np.dtype(view.dtype).str,
        "data": (view.ptr, False),
        "strides": None if view.strides is None else tuple(s * itemsize for s in view.strides),
        "version": 3,
    }
    return _device_desc(name, cai, x)


def describe(x: Any, name: str = "x", stream: Any = 0) -> MatrixDesc:
    """Validate ``x`` as a matrix and describe it; ``name`` is used in errors.

    Foreign CUDA arrays are taken through DLPack where they offer it, asking
    the producer to order its pending work before ``stream`` (the stream the
    kernels will run on); otherwise through ``__cuda_array_interface__``,
    whose own ``stream`` entry, if any, is synchronised.

    Raises ``TypeError`` for unsupported objects or dtypes and ``ValueError``
    for a rank other than 2, empty matrices, and zero, negative or misaligned
    strides on a dimension of extent > 1.
    """
    if isinstance(x, MatrixDesc):
        return x
    if isinstance(x, np.ndarray):
        return _host_desc(name, x, x)
    if cuda.config.ENABLE_CUDASIM and isinstance(x, DeviceNDArray):
        # The simulator's device arrays wrap a NumPy array.
        return replace(_host_desc(name, x._ary, x), on_device=True)
    if isinstance(x, DeviceNDArray):  # Numba's own: same stream semantics as the kernels
        return _device_desc(name, x.__cuda_array_interface__, x)
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return _dlpack_desc(name, x, stream)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        return _device_desc(name, cai, x)
    raise TypeError(
        f"{name} must be a NumPy array or a CUDA array (Numba, CuPy, PyTorch, JAX: anything with "
        f"__cuda_array_interface__ or __dlpack__), got {type(x).__module__}.{type(x).__qualname__}"
    )


def transpose_view(x: Any) -> Any:
    """A transposed view of the 2-D matrix ``x``, sharing its memory.

    Numba's ``DeviceNDArray.T`` launches a transpose kernel and returns a
    copy (the simulator's returns a view); this builds the view a BLAS "T"
    flag means: shape and strides swapped. Other arrays use their own ``.T``.
    """
    if isinstance(x, DeviceNDArray) and not cuda.config.ENABLE_CUDASIM:
        shape, strides, dtype, ptr = cai_metadata("x", x.__cuda_array_interface__)
        if len(shape) != 2:
            raise ValueError(
                f"x must be 2-D (a matrix), got a {len(shape)}-D array of shape {shape}"
            )
        return cuda.from_cuda_array_interface(
            {
                "shape": shape[::-1],
                "strides": strides[::-1],
                "typestr": dtype.str,
                "data": (ptr, False),
                "version": 3,
            },
            owner=x,
        )
    if getattr(x, "ndim", 2) != 2:
        raise ValueError(f"x must be 2-D (a matrix), got shape {tuple(x.shape)}")
    return x.T
