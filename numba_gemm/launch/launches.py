"""Kernel launches: a launch decided once as plain data (:class:`KernelLaunch`), compiled once
per context and argument kinds, and run as one ``cuLaunchKernel`` on a packed parameter buffer
(:class:`PreparedLaunch`), or on the simulator as Numba's launch.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from dataclasses import dataclass, replace

import numpy as np

from ..descriptor import DeviceNDArray, MatrixDesc, context_handle, host_view
from .devices import STATIC_SHARED_LIMIT, device_shared_limit
from .driver import SIMULATED, SIMULATOR_LOCK, checked, stream_handle
from .tensor_maps import TensorMapArg

__all__ = [
    "cdiv",
    "MAX_GRID_YZ",
    "KernelLaunch",
    "kernel_launch",
    "numba_parameters",
    "kernel_signature",
    "launch_kernel",
    "PreparedLaunch",
]

MAX_GRID_YZ = 65535  # CUDA's limit on gridDim.y and gridDim.z
# cuLaunchKernel's `extra` list: parameters as one packed buffer (CUDA's CU_LAUNCH_PARAM_*).
_BUFFER_POINTER, _BUFFER_SIZE, _END = 1, 2, 0


def cdiv(a: int, b: int) -> int:
    """Ceiling division: the number of tiles of size ``b`` that cover ``a``."""
    return -(-a // b)


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
    must never be. ``tma``: TMA fills the kernel's tiles (through tensor maps among ``args``),
    as its plan decided.
    """

    kernel: object
    grid: tuple[int, int, int]
    block: int
    shared: int
    args: tuple
    programmatic: bool = False
    tma: bool = False

    def arg_kinds(self) -> tuple:
        """The dtype of each array argument, ``None`` for each int, the length of each tuple:
        what the compiled code depends on."""
        return tuple(
            a.dtype if isinstance(a, MatrixDesc) else len(a) if isinstance(a, tuple) else None
            for a in self.args
        )


def kernel_launch(
    kernel,
    grid,
    block: int,
    shared: int,
    args: tuple,
    programmatic: bool = False,
    tma: bool = False,
) -> KernelLaunch:
    """A :class:`KernelLaunch`, with the grid checked against CUDA's limits."""
    grid = _dims3(grid)
    if grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
        raise ValueError(
            f"the launch needs a grid of {grid} blocks; CUDA allows at most "
            f"{MAX_GRID_YZ} along y and z (for a batched product: the batch size)"
        )
    return KernelLaunch(kernel, grid, block, shared, tuple(args), programmatic, tma)


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
        self.function = checked(cu.cuKernelGetFunction(self.kernel), "cuKernelGetFunction")
        self.shared_allowed = STATIC_SHARED_LIMIT

    def allow_shared(self, nbytes: int) -> None:
        """Above 48 KB of dynamic shared memory a function must opt in through
        ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``; numba-cuda has no API for it."""
        from cuda.bindings import driver as cu

        limit = device_shared_limit(self.device_id)
        if nbytes > limit:
            raise ValueError(
                f"the launch needs {nbytes} bytes of shared memory per block; this "
                f"device allows {limit}"
            )
        attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        checked(
            cu.cuKernelSetAttribute(attribute, nbytes, self.kernel, self.device_id),
            "cuKernelSetAttribute",
        )
        self.shared_allowed = nbytes


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
                value = 0 if SIMULATED else value.address()
            values.append(value)
        if SIMULATED:  # Numba's launch, of the arguments without the caller's arrays
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
        if SIMULATED:
            self._moves[name] = delta
            return
        for index, planned in self._slots.get(name, ()):
            if isinstance(planned, TensorMapArg):
                value = planned.moved(delta).address() if delta else planned.address()
            else:
                value = planned + delta
            struct.pack_into("q", self._params, 8 * index, value)

    def __call__(self) -> None:
        if SIMULATED:
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
            checked((cu.CUresult(error),), what)


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
