"""Launch plumbing shared by every kernel family: ``cdiv``, grids, memory spaces.

A launch helper in ``kernels/`` receives validated :class:`MatrixDesc` values
and never sees user objects. The helpers here move NumPy operands to the GPU
(the span of each view, so its strides are kept) and allocate outputs in the
caller's memory space.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
from dataclasses import dataclass, replace

import numpy as np
from numba import cuda

from .descriptor import (
    ArrayDesc,
    DeviceNDArray,
    MatrixDesc,
    context_handle,
    describe_array,
    host_view,
    is_int,
)
from .kernels.tma import TensorMapArg

__all__ = [
    "cdiv",
    "simulated",
    "SIMULATOR_LOCK",
    "serialised_on_simulator",
    "device_operand",
    "fresh_device_output",
    "to_device",
    "require_gpu",
    "copy_to_host",
    "allocate_output",
    "allocate_array",
    "zero_fill",
    "new_device_array",
    "array_template",
    "POOL_RELEASE_THRESHOLD",
    "shared_memory_limit",
    "compute_capability",
    "shared_memory_per_multiprocessor",
    "at_most_on_multiprocessor",
    "KernelLaunch",
    "PreparedLaunch",
    "kernel_launch",
    "launch_kernel",
    "kernel_signature",
    "numba_parameters",
    "stream_handle",
    "checked_stream",
    "STATIC_SHARED_LIMIT",
    "MAX_GRID_YZ",
    "OVERLAP_LAUNCHES",
    "PROGRAMMATIC_LAUNCH_CC",
    "programmatic_launch",
]

# The simulator has no limit of its own; report Hopper's (227 KB per block, opt-in).
SIMULATED_SHARED_LIMIT = 227 * 1024
STATIC_SHARED_LIMIT = 48 * 1024  # what a kernel gets without opting in
MAX_GRID_YZ = 65535  # CUDA's limit on gridDim.y and gridDim.z


def cdiv(a: int, b: int) -> int:
    """Ceiling division: the number of tiles of size ``b`` that cover ``a``."""
    return -(-a // b)


def simulated() -> bool:
    """True when kernels run on the Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1)."""
    return bool(cuda.config.ENABLE_CUDASIM)


# The simulator runs a launch's threads in the calling thread and, while it runs, swaps the
# kernel modules' ``cuda`` for its own: two launches from two host threads at once, or a kernel
# built while another runs, break. Every simulated launch holds this, and so does every whole
# call of the library's entry points (``serialised_on_simulator``); reentrant.
SIMULATOR_LOCK = threading.RLock()


def serialised_on_simulator(function):
    """``function`` itself on a GPU; on the simulator, ``function`` run under
    :data:`SIMULATOR_LOCK` (planning builds kernels, which must not meet a running one)."""
    if not simulated():
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
    if simulated():
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
    if simulated() or _gpu_found():
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
    if desc.on_device or simulated():
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
    if simulated():
        return cuda.device_array(shape, dtype=dtype, stream=stream)
    driver, array_class, memory_class, _, out_of_memory = _pool_api()
    context, pool, pool_handle = _current_pool(driver)
    handle = stream_handle(stream)
    nbytes = dtype.itemsize
    for extent in shape:
        nbytes *= extent
    address = ctypes.c_uint64()
    error = _allocate_from_pool()(ctypes.byref(address), max(nbytes, 1), pool_handle, handle)
    if error:  # the error's text (and _checked's import) only when there is one
        if error == out_of_memory:
            # Memory held elsewhere: Numba's pending frees, and what this pool keeps unused.
            context.deallocations.clear()
            _checked(driver.cuMemPoolTrimTo(pool, 0), "cuMemPoolTrimTo")
            error = _allocate_from_pool()(ctypes.byref(address), max(nbytes, 1), pool_handle,
                                          handle)  # fmt: skip
        if error:
            _checked((driver.CUresult(error),), f"allocating {nbytes} bytes "
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
    if simulated():
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
    pool = _checked(cu.cuMemPoolCreate(props), "cuMemPoolCreate")
    threshold = cu.cuuint64_t(POOL_RELEASE_THRESHOLD)
    _checked(
        cu.cuMemPoolSetAttribute(
            pool, cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, threshold
        ),
        "cuMemPoolSetAttribute",
    )
    return pool


def shared_memory_limit() -> int:
    """Bytes of shared memory one block may use on the current device (after opting in)."""
    if simulated():
        return SIMULATED_SHARED_LIMIT
    return _device_shared_limit(cuda.get_current_device().id)


@functools.cache
def _device_shared_limit(device_id: int) -> int:
    return cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN


def shared_memory_per_multiprocessor() -> int:
    """Bytes of shared memory one SM of the current device holds for all its blocks."""
    if simulated():
        return SIMULATED_SHARED_LIMIT + 1024
    return _device_shared_per_multiprocessor(cuda.get_current_device().id)


@functools.cache
def _device_shared_per_multiprocessor(device_id: int) -> int:
    return cuda.get_current_device().MAX_SHARED_MEMORY_PER_MULTIPROCESSOR


def at_most_on_multiprocessor(shared: int, per_multiprocessor: int, blocks: int = 1) -> int:
    """Dynamic shared memory for a block of which at most ``blocks`` may run on one SM:
    ``shared``, or more than 1 / (``blocks`` + 1) of the SM's ``per_multiprocessor`` bytes, so
    that no more fit (registers may allow fewer)."""
    if not isinstance(blocks, int) or blocks < 1:
        raise ValueError(f"blocks per SM must be an int >= 1; got {blocks!r}")
    return max(shared, per_multiprocessor // (blocks + 1) + 1)


# Programmatic dependent launch (Hopper): the tiled and fused kernels wait for the launch ahead of
# them on the stream (``ptx.await_prior_grids``) before they touch memory, and ``PreparedLaunch``
# launches them with programmatic stream serialization, so that a launch starts as the last CTAs of
# the one ahead exit instead of after that grid's completion has gone through: about a microsecond
# per launch (docs/design/launch-and-timing.md; ``tiled.overlap_launches``). Set OVERLAP_LAUNCHES to
# False before the first launch to compile and launch without it (kernels are cached with the
# choice).
OVERLAP_LAUNCHES = True
PROGRAMMATIC_LAUNCH_CC = (9, 0)  # griddepcontrol and the launch attribute


def programmatic_launch() -> bool:
    """Whether kernels built now use programmatic dependent launch: :data:`OVERLAP_LAUNCHES`,
    on a GPU of compute capability :data:`PROGRAMMATIC_LAUNCH_CC` or later (never on the
    simulator, which runs one launch at a time)."""
    if not OVERLAP_LAUNCHES or simulated():
        return False
    return tuple(cuda.get_current_device().compute_capability) >= PROGRAMMATIC_LAUNCH_CC


def compute_capability() -> tuple[int, int] | None:
    """The current device's compute capability, or None on the simulator."""
    if simulated():
        return None
    return _device_compute_capability(cuda.get_current_device().id)


@functools.cache
def _device_compute_capability(device_id: int) -> tuple[int, int]:
    return tuple(cuda.get_current_device().compute_capability)


SIMULATED_MULTIPROCESSORS = 1  # the simulator's: persistent CTAs loop over several tiles


def multiprocessors() -> int:
    """The current device's SM count (:data:`SIMULATED_MULTIPROCESSORS` on the simulator)."""
    if simulated():
        return SIMULATED_MULTIPROCESSORS
    return _device_multiprocessors(cuda.get_current_device().id)


@functools.cache
def _device_multiprocessors(device_id: int) -> int:
    return cuda.get_current_device().MULTIPROCESSOR_COUNT


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel launch, fully decided: what every launch path executes.

    ``grid`` is (x, y, z); ``block`` the threads of a 1-D block; ``shared`` the
    bytes of dynamic shared memory; ``args`` the kernel's arguments in order:
    :class:`MatrixDesc` values (passed as 1-D buffers from element (0, 0) of
    the first matrix), ints (int64) and tuples of ints (as many int64s). Inputs come
    before the output, as XLA's kernel-call custom call (``jax_bridge``) requires.
    ``programmatic``: the kernel waits for the launches ahead of it
    (``ptx.await_prior_grids``) before it touches memory, so it may be launched with
    programmatic stream serialization (:func:`programmatic_launch`); a kernel that does not
    must never be.
    """

    kernel: object
    grid: tuple[int, int, int]
    block: int
    shared: int
    args: tuple
    programmatic: bool = False

    def arg_kinds(self) -> tuple:
        """The dtype of each array argument, ``None`` for each int, the length of each tuple:
        what the compiled code depends on."""
        return tuple(
            a.dtype if isinstance(a, MatrixDesc) else len(a) if isinstance(a, tuple) else None
            for a in self.args
        )


def kernel_launch(
    kernel, grid, block: int, shared: int, args: tuple, programmatic: bool = False
) -> KernelLaunch:
    """A :class:`KernelLaunch`, with the grid checked against CUDA's limits."""
    grid = _dims3(grid)
    if grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
        raise ValueError(
            f"the launch needs a grid of {grid} blocks; CUDA allows at most "
            f"{MAX_GRID_YZ} along y and z (for a batched product: the batch size)"
        )
    return KernelLaunch(kernel, grid, block, shared, tuple(args), programmatic)


def numba_parameters(args: tuple) -> list:
    """The kernel parameters of ``args`` in Numba's layout, every one 8 bytes: per array
    meminfo (0), parent (0), item count, item size, data pointer, shape, stride in bytes
    (1-D buffers of ``span`` elements); per int the int. The data pointer is left as the
    :class:`MatrixDesc` itself, for the launcher to fill in (an address, or XLA's buffer), and
    so is a host-encoded tensor map (a ``TensorMapArg``: its address); a tuple's ints one after
    another (Numba passes a tuple's elements as parameters)."""
    values = []
    for a in args:
        if isinstance(a, MatrixDesc):
            span, itemsize = a.span, a.dtype.itemsize
            values += (0, 0, span, itemsize, a, span, itemsize)
        elif isinstance(a, tuple):
            values += a
        else:
            values.append(a)
    return values


@functools.cache
def kernel_signature(kernel, arg_kinds: tuple) -> tuple:
    """Numba's types for a launch: a 1-D C-contiguous array per dtype, int64 per None, a tuple
    of n int64 per int n."""
    return tuple(
        kernel.typeof_pyval(
            np.empty(0, kind)
            if isinstance(kind, np.dtype)
            else (np.int64(0),) * kind
            if isinstance(kind, int)
            else np.int64(0)
        )
        for kind in arg_kinds
    )


_compiled: dict = {}  # (context, kernel, argument kinds) -> _Compiled


class _Compiled:
    """A compiled specialisation: its driver function and the dynamic shared memory it may use."""

    def __init__(self, kernel, signature):
        from cuda.bindings import driver as cu

        cufunc = kernel.compile(signature).library.get_cufunc()
        self.kernel = cufunc.handle  # a CUkernel (numba-cuda loads libraries)
        self.device_id = cufunc.device.id
        self.function = _checked(cu.cuKernelGetFunction(self.kernel), "cuKernelGetFunction")
        self.shared_allowed = STATIC_SHARED_LIMIT

    def allow_shared(self, nbytes: int) -> None:
        """Above 48 KB of dynamic shared memory a function must opt in through
        ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``; numba-cuda has no API for it."""
        from cuda.bindings import driver as cu

        limit = _device_shared_limit(self.device_id)
        if nbytes > limit:
            raise ValueError(
                f"the launch needs {nbytes} bytes of shared memory per block; this "
                f"device allows {limit}"
            )
        attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _checked(
            cu.cuKernelSetAttribute(attribute, nbytes, self.kernel, self.device_id),
            "cuKernelSetAttribute",
        )
        self.shared_allowed = nbytes


def _checked(result: tuple, what: str):
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
    if simulated():
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
    if simulated():
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


def launch_kernel(launch: KernelLaunch, stream=0) -> None:
    """Run ``launch`` on ``stream`` (a Numba stream, a CUstream handle as an int, or 0).

    Numba's own launch types and converts every argument on every call (tens of microseconds per
    array, more than a 1024^3 GEMM takes). This compiles once per argument signature, packs Numba's
    parameter layout (:func:`numba_parameters`) into one buffer and calls ``cuLaunchKernel``
    directly (:class:`PreparedLaunch`). On the simulator it is Numba's launch.
    """
    PreparedLaunch(launch, stream)()


def _simulated_argument(x):
    """A launch argument for the simulator: a matrix's buffer as a simulated device array over
    the same memory (a NumPy array would be copied in and its whole span copied back after the
    kernel, over memory between a view's rows that the kernel never writes and another thread
    may be writing); a host-encoded tensor map as its twin's key."""
    if isinstance(x, TensorMapArg):
        return x.address()
    if not isinstance(x, MatrixDesc):
        return x
    buffer = x.buffer()
    return DeviceNDArray(buffer) if isinstance(buffer, np.ndarray) else buffer


def _moved(arg, delta: int):
    """Simulator: a launch argument (matrix or tensor map) ``delta`` bytes further on, a matrix
    over the memory there."""
    if isinstance(arg, TensorMapArg):
        return arg.moved(delta)
    address = arg.address + delta
    return replace(arg, address=address, data=host_view(address, arg.dtype, arg.span))


class PreparedLaunch:
    """A :class:`KernelLaunch` with everything resolved once: the compiled function (opted in to
    its dynamic shared memory), the packed parameter buffer and the stream. Calling it is one
    ``cuLaunchKernel`` (for a ``programmatic`` launch one ``cuLaunchKernelEx`` with
    programmatic stream serialization): what a repeated call of the same product needs.

    :meth:`rebind` points the arguments of one matrix (its pointers and the tensor maps made
    for it) elsewhere: a prepared call reused on other arrays of the same signature
    (``numba_gemm.prepared``). On the simulator the launch is Numba's, on the arguments as
    rebound."""

    def __init__(self, launch: KernelLaunch, stream=0):
        self.programmatic = launch.programmatic
        self._stream = stream
        # matrix name -> (index in the buffer, the planned address or tensor map) of each of
        # its pointers and maps. Only addresses are kept, never the arrays: whoever launches
        # this keeps the operands alive.
        self._slots: dict = {}
        parameters = numba_parameters(launch.args)
        values = []
        for index, value in enumerate(parameters):
            if isinstance(value, MatrixDesc):
                self._slots.setdefault(value.name, []).append((index, value.address))
                value = value.address
            elif isinstance(value, TensorMapArg):
                self._slots.setdefault(value.name, []).append((index, value))
                value = 0 if simulated() else value.address()
            values.append(value)
        if simulated():  # Numba's launch, of the arguments without the caller's arrays
            self._plan = replace(launch, args=tuple(
                replace(a, source=None, data=None) if isinstance(a, MatrixDesc) else a
                for a in launch.args))  # fmt: skip
            self._moves: dict = {}  # matrix name -> bytes its arguments moved
            return
        # A function belongs to the context it was loaded in: one per device.
        key = (context_handle(), launch.kernel, launch.arg_kinds())
        compiled = _compiled.get(key)
        if compiled is None:
            compiled = _compiled[key] = _Compiled(launch.kernel, kernel_signature(*key[1:]))
        if launch.shared > compiled.shared_allowed:
            compiled.allow_shared(launch.shared)
        self._params = ctypes.create_string_buffer(
            struct.pack(f"{len(values)}q", *values), 8 * len(values)
        )
        self._size = ctypes.c_size_t(8 * len(values))
        self._extra = (ctypes.c_void_p * 5)(
            _BUFFER_POINTER,
            ctypes.addressof(self._params),
            _BUFFER_SIZE,
            ctypes.addressof(self._size),
            _END,
        )
        # The driver's entry points are called through ctypes on arguments converted once:
        # cuda.bindings' wrappers convert every argument (its CUlaunchConfig above all) on
        # every call, several microseconds a launch.
        driver = _driver_functions()
        function = ctypes.c_void_p(int(compiled.function))
        extra = ctypes.c_void_p(ctypes.addressof(self._extra))
        if launch.programmatic:
            self._config = _launch_config(launch, stream_handle(stream))  # kept: C memory
            self._launch = driver.cuLaunchKernelEx
            self._arguments = (ctypes.c_void_p(self._config.getPtr()), function, None, extra)
        else:
            self._launch = driver.cuLaunchKernel
            self._arguments = (
                function,
                *map(ctypes.c_uint, (*launch.grid, launch.block, 1, 1, launch.shared)),
                ctypes.c_void_p(stream_handle(stream)),
                None,
                extra,
            )

    def names(self) -> set:
        """The names of the matrices this launch takes (what :meth:`rebind` can move)."""
        return set(self._slots)

    def rebind(self, name: str, delta: int) -> None:
        """Point the arguments of the matrix named ``name`` (if any) ``delta`` bytes from where
        they were planned: its pointers (each part of a batch keeps its offset) and the tensor
        maps made for it (encoded on first use of an address). The matrix there must have the
        planned one's shape, strides and dtype. CUDA copies the parameters when the kernel is
        launched, not when it runs."""
        if simulated():
            self._moves[name] = delta
            return
        for index, planned in self._slots.get(name, ()):
            if isinstance(planned, TensorMapArg):
                value = planned.moved(delta).address() if delta else planned.address()
            else:
                value = planned + delta
            struct.pack_into("q", self._params, 8 * index, value)

    def __call__(self) -> None:
        if simulated():
            launch, moves = self._plan, self._moves
            args = tuple(
                _moved(a, moves.get(a.name, 0)) if isinstance(a, (MatrixDesc, TensorMapArg)) else a
                for a in launch.args
            )
            with SIMULATOR_LOCK:
                launch.kernel[launch.grid, launch.block, self._stream, launch.shared](
                    *(_simulated_argument(a) for a in args)
                )
            return
        error = self._launch(*self._arguments)
        if error:
            from cuda.bindings import driver as cu

            what = "cuLaunchKernelEx" if self.programmatic else "cuLaunchKernel"
            _checked((cu.CUresult(error),), what)


@functools.cache
def _driver_functions():
    """The driver library Numba loaded (libcuda), with the argument types of the entry points
    :class:`PreparedLaunch` calls."""
    from numba.cuda.cudadrv.driver import driver

    library = ctypes.CDLL(driver.lib._name)
    pointer, uint = ctypes.c_void_p, ctypes.c_uint
    library.cuLaunchKernel.argtypes = [pointer, *[uint] * 7, pointer, pointer, pointer]
    library.cuLaunchKernelEx.argtypes = [pointer, pointer, pointer, pointer]
    for function in (library.cuLaunchKernel, library.cuLaunchKernelEx):
        function.restype = ctypes.c_int
    return library


def _launch_config(launch: KernelLaunch, stream: int):
    """``cuLaunchKernelEx``'s configuration of ``launch`` on ``stream``, with programmatic
    stream serialization: its CTAs may start before the launch ahead of it has finished."""
    from cuda.bindings import driver as cu

    attribute = cu.CUlaunchAttribute()
    attribute.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attribute.value.programmaticStreamSerializationAllowed = 1
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = launch.grid
    config.blockDimX, config.blockDimY, config.blockDimZ = launch.block, 1, 1
    config.sharedMemBytes = launch.shared
    config.hStream = cu.CUstream(stream)
    config.attrs = [attribute]
    config.numAttrs = 1
    return config


def _dims3(dims) -> tuple[int, int, int]:
    """A grid or block extent (int or tuple of up to 3) as (x, y, z)."""
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return dims + (1,) * (3 - len(dims))
