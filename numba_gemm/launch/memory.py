"""Device memory: operands copied to the GPU, outputs allocated in the caller's memory space,
and the stream-ordered memory pool fresh device arrays come from.

The helpers move NumPy operands to the GPU (the span of each view, so its strides are kept);
kernels and their plans never see user objects, only :class:`MatrixDesc` values.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import replace

import numpy as np
from numba import cuda

from ..descriptor import ArrayDesc, MatrixDesc, context_handle, describe_array
from .driver import SIMULATED, checked, stream_handle

__all__ = [
    "to_device",
    "copy_to_host",
    "device_operand",
    "fresh_device_output",
    "zero_fill",
    "allocate_output",
    "allocate_array",
    "POOL_RELEASE_THRESHOLD",
    "new_device_array",
    "array_template",
]


def to_device(array: np.ndarray, stream=0):
    """``cuda.to_device(array)`` for every supported dtype: Numba copies through Python's
    buffer protocol, which has no code for ml_dtypes' bfloat16, so such arrays travel as their
    uint16 bits and the device array is given their dtype back."""
    if array.dtype.kind != "V":
        return cuda.to_device(array, stream=stream)
    bits = np.dtype(f"u{array.dtype.itemsize}")
    return cuda.to_device(array.view(bits), stream=stream).view(array.dtype)


def copy_to_host(device_array, host: np.ndarray | None = None, stream=0) -> np.ndarray:
    """``device_array.copy_to_host(host)`` for every supported dtype (bfloat16 as its bits:
    see :func:`to_device`); a new host array when ``host`` is None."""
    dtype = np.dtype(device_array.dtype)
    if dtype.kind != "V":
        return device_array.copy_to_host(host, stream=stream)
    bits = np.dtype(f"u{dtype.itemsize}")
    if host is None:
        return device_array.view(bits).copy_to_host(stream=stream).view(dtype)
    device_array.view(bits).copy_to_host(host.view(bits), stream=stream)
    return host


def device_operand(desc: MatrixDesc, stream=0) -> MatrixDesc:
    """``desc`` with a buffer a kernel can read: host spans are copied to the GPU.

    On the simulator host memory is device memory, so nothing moves.
    """
    if desc.on_device or SIMULATED:
        return desc
    data = to_device(desc.buffer(), stream=stream)  # the span: a contiguous 1-D view
    return replace(desc, data=data, on_device=True, address=data.device_ctypes_pointer.value)


def fresh_device_output(out: MatrixDesc, stream=0) -> MatrixDesc:
    """A fresh device matrix for ``out`` (host memory): its shape and batch, row-major and
    packed, for the kernels to write what is then copied into ``out``'s own elements."""
    batch, (rows, cols) = out.batch, out.shape
    array = new_device_array((batch * rows * cols,), out.dtype, stream)
    return replace(out, strides=(cols, 1), batch_stride=rows * cols, data=array, on_device=True,
                   address=array.device_ctypes_pointer.value, source=array)  # fmt: skip


def zero_fill(desc: MatrixDesc, stream=0) -> None:
    """Every element of device matrix ``desc``'s buffer 0, in order on ``stream``: for scratch
    of which kernels read more than they write (the fused triple product's padded T)."""
    buffer = desc.buffer()
    if isinstance(buffer, np.ndarray):  # the simulator's device memory
        buffer[...] = 0
        return
    from numba.cuda.cudadrv.driver import device_memset

    device_memset(buffer, 0, desc.span * desc.dtype.itemsize, stream=stream)


def allocate_output(
    shape: tuple[int, int], dtype: np.dtype, on_device: bool, name: str = "out", stream=0
) -> MatrixDesc:
    """A fresh row-major matrix in the requested memory space (on the GPU:
    :func:`new_device_array`)."""
    array = allocate_array(shape, dtype, on_device, name, stream)
    return array.matrix(array.shape, array.strides)


def allocate_array(
    shape: tuple[int, ...], dtype: np.dtype, on_device: bool, name: str = "out", stream=0
) -> ArrayDesc:
    """A fresh row-major array of any rank in the requested memory space."""
    if on_device:
        return describe_array(new_device_array(shape, dtype, stream), name)
    return describe_array(np.empty(shape, dtype=dtype), name)


# Fresh device outputs come from a stream-ordered memory pool (cuMemAllocFromPoolAsync), not
# from Numba's cuda.device_array: that calls cuMemAlloc, and frees through cuMemFree, which
# waits for the device, every 10 dropped arrays: several times the host time of a pooled
# allocation, more than a small product's kernel (docs/design/launch-and-timing.md).
# Up to this many bytes that outputs no longer use stay in the pool for the next ones; above
# it the driver returns memory to the device at synchronisations.
POOL_RELEASE_THRESHOLD = 1 << 30


def new_device_array(shape: tuple[int, ...], dtype, stream=0, like=None):
    """A fresh row-major Numba device array, allocated in stream order on ``stream`` from
    this library's memory pool and given back to it, in order on the same stream, once the
    array (and every view of it) is gone: as with PyTorch's and CuPy's pools, work on *other*
    streams that uses it must be ordered before the array is dropped. On the simulator
    ``cuda.device_array``. ``like``: an array template (:func:`array_template`) of this shape
    and dtype, whose description the new array copies instead of Numba's constructor building
    one (several microseconds: what a prepared call without ``out`` saves per call)."""
    dtype = np.dtype(dtype)
    if SIMULATED:
        return cuda.device_array(shape, dtype=dtype, stream=stream)
    driver, array_class, memory_class, _, out_of_memory = _pool_api()
    context, pool, pool_handle = _current_pool(driver)
    handle = stream_handle(stream)
    nbytes = dtype.itemsize
    for extent in shape:
        nbytes *= extent
    address = ctypes.c_uint64()
    error = _allocate_from_pool()(ctypes.byref(address), max(nbytes, 1), pool_handle, handle)
    if error:  # the error's text (and checked's import) only when there is one
        if error == out_of_memory:
            # Memory held elsewhere: Numba's pending frees, and what this pool keeps unused.
            context.deallocations.clear()
            checked(driver.cuMemPoolTrimTo(pool, 0), "cuMemPoolTrimTo")
            error = _allocate_from_pool()(ctypes.byref(address), max(nbytes, 1), pool_handle,
                                          handle)  # fmt: skip
        if error:
            checked((driver.CUresult(error),), f"allocating {nbytes} bytes "
                     "(cuMemAllocFromPoolAsync)")  # fmt: skip
    memory = memory_class(context, driver.CUdeviceptr(address.value), nbytes, handle, stream)
    if like is not None and nbytes:
        fresh = object.__new__(type(like))
        fresh.__dict__.update(like.__dict__)
        fresh.gpu_data, fresh.stream = memory, stream
        return fresh
    strides = []
    step = dtype.itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return array_class(
        tuple(shape), tuple(reversed(strides)), dtype, stream=stream, gpu_data=memory
    )


def array_template(array):
    """``array`` (a Numba device array) described without its memory: what
    :func:`new_device_array` copies for a new array of the same shape and dtype. None on the
    simulator."""
    if SIMULATED:
        return None
    template = object.__new__(type(array))
    template.__dict__.update(array.__dict__)
    template.gpu_data = None
    return template


@functools.cache
def _pool_api():
    """(cuda.bindings' driver, Numba's DeviceNDArray, the memory class of pooled arrays, and
    the driver's CUDA_SUCCESS and CUDA_ERROR_OUT_OF_MEMORY), imported once, on first use
    (never on the simulator)."""
    from cuda.bindings import driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    from numba.cuda.cudadrv.driver import MemoryPointer
    from numba.cuda.utils import shutting_down

    class PooledMemory(MemoryPointer):
        """Device memory from the pool, given back on ``stream`` when the last reference to
        it goes (views hold it as their owner). ``__del__``, not Numba's weakref finaliser,
        which cost 6 us per array; it holds ``stream``, so a Numba stream outlives the
        arrays freed on it."""

        def __init__(self, context, pointer, size, handle, stream):
            super().__init__(context, pointer, size)
            self._stream_handle, self._stream = handle, stream

        def __del__(
            self,
            free=driver.cuMemFreeAsync,
            current=driver.cuCtxGetCurrent,
            push=driver.cuCtxPushCurrent,
            pop=driver.cuCtxPopCurrent,
            success=driver.CUresult.CUDA_SUCCESS,
            exiting=shutting_down,
        ):
            # At exit Numba's finalizers destroy its streams, whatever still refers to them,
            # and a free on a destroyed stream can crash the driver (a segmentation fault at
            # interpreter exit): past Numba's shutdown hook the process frees
            # nothing and the driver takes the memory back with the process.
            if exiting():
                return
            # Errors are not raised (at exit the context may be gone). The last reference may
            # go in a thread where another context, or none, is current: the free (and the
            # stream handle, 0 for the legacy stream) must be this context's.
            context = self.context.handle
            error, handle = current()
            if error == success and int(handle) == int(context):
                free(self.device_pointer, self._stream_handle)
            else:
                push(context)
                free(self.device_pointer, self._stream_handle)
                pop()

    return (
        driver,
        DeviceNDArray,
        PooledMemory,
        driver.CUresult.CUDA_SUCCESS,
        int(driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY),
    )


@functools.cache
def _allocate_from_pool():
    """The driver's ``cuMemAllocFromPoolAsync`` through ctypes (cuda.bindings' wrapper costs
    a few microseconds a call): (CUdeviceptr*, bytes, pool, stream) -> CUresult."""
    from numba.cuda.cudadrv.driver import driver

    function = ctypes.CDLL(driver.lib._name).cuMemAllocFromPoolAsync
    function.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_void_p,
                         ctypes.c_void_p]  # fmt: skip
    function.restype = ctypes.c_int
    return function


_POOLS: dict = {}  # CUcontext handle -> (Numba context, pool, the pool's handle as an int)


def _current_pool(driver) -> tuple:
    """(Numba's current context, this library's pool on its device, the pool's handle), by
    the current context's handle (``cuda.current_context()`` costs 7 us a call)."""
    entry = _POOLS.get(context_handle())
    if entry is None:
        context = cuda.current_context()  # makes one current where none is
        pool = _memory_pool(context.device.id)
        entry = _POOLS[int(context.handle)] = (context, pool, int(pool))
    return entry


@functools.cache
def _memory_pool(device_id: int):
    """This library's memory pool on a device (created once; it lives as long as the process)."""
    from cuda.bindings import driver as cu

    props = cu.CUmemPoolProps()
    props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.location.id = device_id
    pool = checked(cu.cuMemPoolCreate(props), "cuMemPoolCreate")
    threshold = cu.cuuint64_t(POOL_RELEASE_THRESHOLD)
    checked(
        cu.cuMemPoolSetAttribute(
            pool, cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, threshold
        ),
        "cuMemPoolSetAttribute",
    )
    return pool
