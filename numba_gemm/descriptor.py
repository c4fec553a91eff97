"""Stride-aware array descriptors: the seed's ``Tensor(Shape, Stride)``.

:func:`describe_array` is the one place that validates a user's array: NumPy arrays, Numba
device arrays, anything with ``__cuda_array_interface__`` (CuPy, PyTorch, Numba) and anything
with ``__dlpack__`` (JAX, PyTorch, CuPy; on the GPU or the CPU). It returns an
:class:`ArrayDesc`: shape, strides in elements, dtype, the address of element (0, ..., 0), the
CUDA device that holds it and whether it may be written. :func:`describe` narrows that to a
:class:`MatrixDesc` (2-D): a 1-D buffer whose element 0 is the matrix's element (0, 0), which
kernels address as ``data[i * strides[0] + j * strides[1]]``, exactly as in the seed, so
row-major, column-major, transposed, sliced and broadcast views all run with no copy.

Every refusal is a ``TypeError`` (what kind of object, dtype or field) or a ``ValueError`` (its
values: rank, extents, strides, pointers) that names the argument. Nothing here launches a
kernel or copies matrix data.
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np
from numba import cuda

if cuda.config.ENABLE_CUDASIM:
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray as DeviceNDArray
else:
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

__all__ = [
    "ArrayDesc",
    "MatrixDesc",
    "CudaArrayInterface",
    "describe",
    "describe_array",
    "scratch_desc",
    "host_view",
    "device_ordinal",
    "read_cuda_array_interface",
    "transpose_view",
    "current_device",
    "context_handle",
    "SUPPORTED_DTYPES",
    "CAI_VERSIONS",
    "is_int",
]

# bfloat16 is ml_dtypes' (JAX's NumPy-side type; DLPack code 4, CUDA array interface "<V2" is
# not one: such producers pass it through DLPack).
SUPPORTED_DTYPES = (
    np.dtype(np.float32),
    np.dtype(np.float64),
    np.dtype(ml_dtypes.bfloat16),
    np.dtype(np.float16),
)
CAI_VERSIONS = range(0, 4)  # the __cuda_array_interface__ versions this reads (0 to 3)
HOST = -1  # the ``device`` of host memory

_DLPACK_CPU, _DLPACK_CUDA = 1, 2  # DLDeviceType codes


def is_int(value) -> bool:
    """A true integer (Python or NumPy), not a bool and not a float that happens to be whole."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _span(extents, strides) -> int:
    """Elements from the first element to the last, inclusive (0 for an empty array); every
    stride of an extent > 1 is >= 0."""
    if any(n == 0 for n in extents):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(extents, strides))


class _Memory:
    """What a matrix and an array descriptor share: the memory they span and how it may
    overlap. Needs ``shape``, ``strides``, ``dtype``, ``address``, ``span``, ``on_device`` and
    ``device``."""

    def byte_range(self) -> tuple[int, int]:
        return self.address, self.address + self.span * self.dtype.itemsize

    def overlaps(self, other) -> bool:
        """True if the two memory ranges intersect (same memory space and device).

        Conservative: interleaved views (``x[:, ::2]`` and ``x[:, 1::2]``) count as overlapping.
        """
        if self.on_device != other.on_device or self.device != other.device:
            return False
        lo1, hi1 = self.byte_range()
        lo2, hi2 = other.byte_range()
        return lo1 < hi2 and lo2 < hi1

    def has_internal_overlap(self) -> bool:
        """True if two distinct indices map to one element (unsafe for outputs): sorted by
        stride, each axis must step past everything the axes inside it cover (a sufficient
        test for non-overlap, exact for the views slicing makes). Strides are non-negative."""
        dims = sorted(
            ((n, s) for n, s in zip(self.shape, self.strides) if n > 1), key=lambda d: d[1]
        )
        covered = 1  # elements the inner axes span
        for n, s in dims:
            if s < covered:
                return True
            covered = s * (n - 1) + covered
        return False


def _numba_view(pointer: int, dtype: np.dtype, shape, strides, owner, stream=None):
    """A Numba device array over ``pointer`` (``strides`` in bytes, None: C order), kept
    alive by ``owner``; with ``stream``, Numba's import synchronises the producer's stream."""
    # The interface has no type string for bfloat16 ("<V2" is any 2 bytes): the view is made
    # of uint16 and given the dtype afterwards.
    named = dtype.kind != "V"
    interface = {
        "shape": tuple(shape),
        "strides": strides,
        "typestr": dtype.str if named else f"<u{dtype.itemsize}",
        "data": (pointer, False),
        "version": 3,
    }
    if stream is not None:
        interface["stream"] = stream
    view = cuda.from_cuda_array_interface(interface, owner=owner)
    return view if named else view.view(dtype)


@dataclass(frozen=True)
class MatrixDesc(_Memory):
    """A validated 2-D matrix: ``shape`` (rows, cols), ``strides`` in elements.

    ``address`` is the address of element (0, 0); kernels launched through
    ``numba_gemm.launch.launch_kernel`` take the matrix as the 1-D buffer of
    ``span`` elements that starts there. ``data`` is that buffer as an array
    (NumPy on the host; on the device a Numba array, built on first use by
    :meth:`buffer`, since building one costs more than a kernel launch);
    ``source`` is the caller's object, kept alive for as long as the descriptor is.
    ``device``: the CUDA device ordinal of device memory (-1 on the host); ``readonly``:
    the producer forbids writes.

    A batch of matrices (stacks in ``matmul``, ``jax_bridge``'s batched products) adds
    ``batch`` matrices ``batch_stride`` elements apart; ``batch_stride`` 0 broadcasts one
    matrix to the whole batch. ``span`` then covers every matrix of the batch.

    Construction checks the fields' types and values (``__post_init__``), so a hand-built
    descriptor cannot carry a float extent or a negative batch; :func:`describe` checks the
    memory it points at.
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
    device: int = HOST
    readonly: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"MatrixDesc.name must be a str; got {self.name!r}")
        for field, value, low in (("shape", self.shape, 0), ("strides", self.strides, None)):
            if not (
                isinstance(value, tuple)
                and len(value) == 2
                and all(is_int(v) and (low is None or v >= low) for v in value)
            ):
                raise ValueError(
                    f"MatrixDesc {self.name}: {field} must be a tuple of two "
                    f"{'non-negative ' if low == 0 else ''}ints; got {value!r}"
                )
        if not isinstance(self.dtype, np.dtype):
            raise TypeError(f"MatrixDesc {self.name}: dtype must be a numpy.dtype")
        for field, low in (("batch", 1), ("batch_stride", None), ("address", 0), ("device", -1)):
            value = getattr(self, field)
            if not is_int(value) or (low is not None and value < low):
                raise ValueError(
                    f"MatrixDesc {self.name}: {field} must be an int"
                    + (f" >= {low}" if low is not None else "")
                    + f"; got {value!r}"
                )

    def buffer(self):
        """``data``, the 1-D array of ``span`` elements from (0, 0), built on first use."""
        if self.data is None:
            # A cache, not a change of value: the frozen dataclass allows it this way.
            object.__setattr__(
                self,
                "data",
                _numba_view(self.address, self.dtype, (self.span,), None, self.source),
            )
        return self.data

    @functools.cached_property
    def span(self) -> int:
        """Elements from (0, 0) of the first matrix to (rows-1, cols-1) of the last, inclusive."""
        return _span((self.batch, *self.shape), (self.batch_stride, *self.strides))

    @property
    def layout(self) -> str:
        """'row' (unit column stride), 'col' (unit row stride) or 'strided'."""
        rows, cols = self.shape
        if cols == 1 or self.strides[1] == 1:
            return "row"
        if rows == 1 or self.strides[0] == 1:
            return "col"
        return "strided"

    def transposed(self) -> MatrixDesc:
        """The same memory seen as the transposed matrix (shape and strides swapped, no copy)."""
        return replace(self, shape=self.shape[::-1], strides=self.strides[::-1])


@dataclass(frozen=True)
class ArrayDesc(_Memory):
    """A validated array of any rank: ``shape``, ``strides`` in elements (>= 0 on every axis
    of extent > 1), ``dtype``, the ``address`` of element (0, ..., 0), ``on_device``, the CUDA
    ``device`` ordinal (-1 on the host), ``readonly``, the caller's ``source`` and ``data``: on
    the host (and the simulator) the NumPy array itself; on the device a Numba array of the
    whole span where importing it synchronised the producer's stream, else None."""

    name: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype
    on_device: bool
    address: int
    source: Any
    data: Any = None
    device: int = HOST
    readonly: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @functools.cached_property
    def span(self) -> int:
        return _span(self.shape, self.strides)

    def flat(self, offset: int = 0, span: int | None = None):
        """The 1-D array of ``span`` elements from element ``offset`` (default: the rest), or
        None on the device where no array was imported (``MatrixDesc.buffer`` builds one)."""
        span = self.span - offset if span is None else span
        if self.data is None:
            return None
        if self.on_device and not isinstance(self.data, np.ndarray):
            return self.data[offset : offset + span]  # a Numba array of the span
        whole = np.lib.stride_tricks.as_strided(
            self.data, shape=(max(self.span, 1),), strides=(self.dtype.itemsize,),
            writeable=not self.readonly,
        )  # fmt: skip
        return whole[offset : offset + span]

    def matrix(
        self,
        shape: tuple[int, int],
        strides: tuple[int, int],
        batch: int = 1,
        batch_stride: int = 0,
        offset: int = 0,
    ) -> MatrixDesc:
        """The matrices (``batch`` of them) of this array at element ``offset``."""
        desc = MatrixDesc(
            self.name,
            tuple(shape),
            tuple(strides),
            self.dtype,
            None,
            self.on_device,
            self.address + offset * self.dtype.itemsize,
            self.source,
            batch,
            batch_stride,
            self.device,
            self.readonly,
        )
        if desc.span:
            object.__setattr__(desc, "data", self.flat(offset, desc.span))
        return desc


class CudaArrayInterface(NamedTuple):
    """The checked fields of a ``__cuda_array_interface__`` (:func:`read_cuda_array_interface`)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in bytes
    dtype: np.dtype
    pointer: int
    readonly: bool
    stream: int | None


def _int_tuple(name: str, field: str, value) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(is_int(v) for v in value):
        raise TypeError(
            f"{name}'s __cuda_array_interface__ {field} must be a tuple of ints; got {value!r}"
        )
    return tuple(int(v) for v in value)


def read_cuda_array_interface(name: str, cai) -> CudaArrayInterface:
    """Every field of a CUDA array interface dict checked (version 0 to 3): its keys, the
    version, ``typestr`` (a native-order NumPy type), ``shape`` and ``strides`` (tuples of ints,
    as many strides as dimensions, no negative extent), ``data`` (a non-null pointer aligned to
    the item size, and the read-only flag), no ``mask``, ``stream`` (None or a non-zero int).
    A ``TypeError`` or ``ValueError`` naming ``name`` otherwise."""
    what = f"{name}'s __cuda_array_interface__"
    if not isinstance(cai, Mapping):
        raise TypeError(f"{what} must be a dict; got {type(cai).__name__}")
    missing = [key for key in ("shape", "typestr", "data", "version") if key not in cai]
    if missing:
        raise TypeError(f"{what} lacks {', '.join(map(repr, missing))}")
    version = cai["version"]
    if not is_int(version) or version not in CAI_VERSIONS:
        raise ValueError(f"{what} has version {version!r}; numba-gemm reads versions 0 to 3")
    if cai.get("mask") is not None:
        raise TypeError(f"{name} is a masked array; masks are not supported")
    typestr = cai["typestr"]
    try:
        dtype = np.dtype(typestr) if isinstance(typestr, str) else None
    except TypeError:
        dtype = None
    if dtype is None:
        raise TypeError(f"{what} typestr {typestr!r} is not a NumPy type string")
    if not dtype.isnative:
        raise TypeError(f"{name} has non-native byte order ({typestr!r}); pass native order")
    shape = _int_tuple(name, "shape", cai["shape"])
    if any(n < 0 for n in shape):
        raise ValueError(f"{what} shape {shape} has a negative extent")
    strides = cai.get("strides")
    if strides is None:  # C-contiguous by the interface's definition
        strides = tuple(math.prod(shape[i + 1 :]) * dtype.itemsize for i in range(len(shape)))
    strides = _int_tuple(name, "strides", strides)
    if len(strides) != len(shape):
        raise ValueError(f"{what} has {len(strides)} strides for {len(shape)} dimensions ({shape})")
    data = cai["data"]
    if not (
        isinstance(data, (tuple, list))
        and len(data) == 2
        and is_int(data[0])
        and isinstance(data[1], (bool, np.bool_))
    ):
        raise TypeError(f"{what} data must be (pointer: int, read-only: bool); got {data!r}")
    pointer, readonly = int(data[0]), bool(data[1])
    if math.prod(shape):
        if pointer <= 0:
            raise ValueError(f"{name} has a null or negative data pointer ({pointer})")
        if pointer % dtype.itemsize:
            raise ValueError(
                f"{name}'s data pointer {pointer:#x} is not aligned to its item size "
                f"({dtype.itemsize} bytes)"
            )
    stream = cai.get("stream")
    if stream is not None and (not is_int(stream) or (version >= 3 and stream == 0)):
        raise ValueError(f"{what} stream must be None or a non-zero int; got {stream!r}")
    return CudaArrayInterface(shape, strides, dtype, pointer, readonly, stream)


def _element_strides(name: str, byte_strides, itemsize: int) -> tuple[int, ...]:
    if any(s % itemsize for s in byte_strides):
        raise ValueError(
            f"{name} has byte strides {tuple(byte_strides)} that are not multiples of its "
            f"item size ({itemsize} bytes); misaligned views are not supported"
        )
    return tuple(s // itemsize for s in byte_strides)


def _check_dtype(name: str, dtype) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{name} has dtype {dtype}; supported dtypes are "
            + ", ".join(str(d) for d in SUPPORTED_DTYPES)
        )


def _check_strides(name: str, shape, strides) -> None:
    if 0 in shape:  # no element: any strides (NumPy's empty arrays have odd ones)
        return
    for axis, (n, s) in enumerate(zip(shape, strides)):
        if n > 1 and s < 0:
            raise ValueError(
                f"{name} has stride {s} on axis {axis} (extent {n}); negative strides are "
                "not supported on the GPU: pass a positive-strided copy (cupy.ascontiguousarray, "
                "torch's .contiguous(), or the same data un-flipped) (matmul copies NumPy arrays "
                "itself)"
            )


@functools.cache
def _driver():
    """cuda.bindings' driver module, imported on first use (never on the simulator)."""
    from cuda.bindings import driver

    return driver


def context_handle() -> int:
    """The current thread's CUDA context (an int), made current where none is: what caches of
    compiled functions, pools, scratch buffers and prepared calls are keyed by (one per device
    in a process that uses Numba's primary contexts). 0 on the simulator. One driver call
    through ctypes where a context is current (Numba's ``current_context`` costs ~7 us,
    cuda.bindings' ``cuCtxGetCurrent`` ~1 us)."""
    if cuda.config.ENABLE_CUDASIM:
        return 0
    get_current, handle = _context_getter()
    if get_current() or not handle.value:
        return int(cuda.current_context().handle)
    return handle.value


@functools.cache
def _context_getter():
    """The driver's ``cuCtxGetCurrent`` through ctypes, bound to the pointer it writes, and
    that pointer: called holding the GIL (``PyDLL``), which its caller holds until it has read
    the pointer, so no other thread's call comes between."""
    from numba.cuda.cudadrv.driver import driver

    function = ctypes.PyDLL(driver.lib._name).cuCtxGetCurrent
    function.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    function.restype = ctypes.c_int
    handle = ctypes.c_void_p()
    return functools.partial(function, ctypes.byref(handle)), handle


def current_device() -> int:
    """The ordinal of the current thread's CUDA device (0 on the simulator), from the driver:
    two calls, where Numba's ``get_current_device`` costs ~7 us."""
    if cuda.config.ENABLE_CUDASIM:
        return 0
    context_handle()  # a context is current in this thread
    return int(_driver().cuCtxGetDevice()[1])


def _pointer_device(name: str, pointer: int) -> int:
    """The ordinal of the device whose memory ``pointer`` points into; a ``ValueError`` where
    CUDA does not know it as device memory (a host pointer, a freed or made-up address). On
    the simulator, device 0."""
    if cuda.config.ENABLE_CUDASIM:
        return 0
    context_handle()  # the driver is initialised and a context current in this thread
    error, ordinal = device_ordinal(pointer)
    if error:
        driver = _driver()
        raise ValueError(
            f"{name}'s data pointer {pointer:#x} is not device memory CUDA knows "
            f"({driver.cuGetErrorName(driver.CUresult(error))[1].decode()})"
        )
    return ordinal


def device_ordinal(pointer: int) -> tuple[int, int]:
    """(the driver's error code, the ordinal of the device whose memory ``pointer`` points
    into): ``cuPointerGetAttribute`` once, in a thread where the driver is initialised and a
    context current. (0, 0) on the simulator."""
    if cuda.config.ENABLE_CUDASIM:
        return 0, 0
    ordinal = ctypes.c_int(-1)
    error = _pointer_attribute()(ctypes.byref(ordinal), _DEVICE_ORDINAL, pointer)
    return error, ordinal.value


_DEVICE_ORDINAL = 9  # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL


@functools.cache
def _pointer_attribute():
    """The driver's ``cuPointerGetAttribute``, called through ctypes on the library Numba
    loaded: cuda.bindings 13.x returns 0 for ``CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`` whatever
    the device (seen on two H100s), while the driver answers right."""
    from numba.cuda.cudadrv.driver import driver

    function = ctypes.CDLL(driver.lib._name).cuPointerGetAttribute
    function.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_ulonglong]
    function.restype = ctypes.c_int
    return function


def _validated(
    name: str,
    shape,
    byte_strides,
    dtype: np.dtype,
    on_device: bool,
    address: int,
    source: Any,
    data: Any = None,
    device: int = HOST,
    readonly: bool = False,
) -> ArrayDesc:
    """Every check of one array that does not depend on where it came from."""
    _check_dtype(name, dtype)
    strides = _element_strides(name, byte_strides, dtype.itemsize)
    _check_strides(name, shape, strides)
    return ArrayDesc(
        name, tuple(shape), strides, dtype, on_device, address, source, data, device, readonly
    )


def _host_desc(name: str, x: np.ndarray, source: Any, on_device: bool = False) -> ArrayDesc:
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(
            f"{name} is a masked array (numpy.ma); masks are not supported: pass "
            f"{name}.filled(value) or {name}.data"
        )
    return _validated(
        name,
        x.shape,
        x.strides,
        x.dtype,
        on_device,
        x.__array_interface__["data"][0],
        source,
        x,
        0 if on_device else HOST,
        not x.flags.writeable,
    )


def _device_desc(
    name: str, cai, source: Any, readonly: bool = False, dtype: np.dtype | None = None
) -> ArrayDesc:
    fields = read_cuda_array_interface(name, cai)
    if cuda.config.ENABLE_CUDASIM:
        _refuse_on_the_simulator(name, source)
    if fields.dtype.kind == "V":
        # A type the interface cannot name (bfloat16 is "<V2"): the one DLPack named
        # (``dtype``), or the producer's own where it is a NumPy dtype of the same size.
        named = dtype if dtype is not None else getattr(source, "dtype", None)
        if named in SUPPORTED_DTYPES and np.dtype(named).itemsize == fields.dtype.itemsize:
            fields = fields._replace(dtype=np.dtype(named))
    _check_dtype(name, fields.dtype)
    device = _pointer_device(name, fields.pointer) if math.prod(fields.shape) else current_device()
    desc = _validated(
        name,
        fields.shape,
        fields.strides,
        fields.dtype,
        True,
        fields.pointer,
        source,
        device=device,
        readonly=readonly or fields.readonly,
    )
    if fields.stream is None or not desc.span:
        return desc  # the buffer array is built only if a launch path needs it
    # The producer names a stream with pending work on the array: Numba's import of the
    # interface synchronises it, so build the buffer now, before any launch.
    flat = _numba_view(fields.pointer, fields.dtype, (desc.span,), None, source, fields.stream)
    return replace(desc, data=flat)


def _refuse_on_the_simulator(name: str, source: Any) -> None:
    """``TypeError``: the simulator's device memory is its own arrays' host memory, so a
    pointer from anywhere else (another library's CUDA array, a hand-written interface) is
    nothing it can read."""
    raise TypeError(
        f"{name} is a CUDA array of {type(source).__module__}.{type(source).__qualname__}, "
        "but Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) runs the kernels on host memory: "
        "pass a NumPy array or one of the simulator's own device arrays (numba.cuda.to_device)"
    )


def _dlpack_stream(stream) -> int:
    """The DLPack ``stream`` value for a Numba stream (1: the legacy default stream)."""
    handle = getattr(stream, "handle", stream)
    handle = getattr(handle, "value", handle)
    return int(handle) if handle else 1


def _immutable(x) -> bool:
    """JAX arrays are immutable: a kernel must never write into one."""
    return type(x).__module__.split(".")[0] in ("jax", "jaxlib")


def _view_dtype(view, x) -> np.dtype:
    """The dtype of a DLPack ``view`` of ``x``: bfloat16, which NumPy has no code for, comes as
    2 bytes of void where the producer (PyTorch, JAX) names it."""
    dtype = np.dtype(view.dtype)
    if (
        dtype.kind == "V"
        and dtype.itemsize == 2
        and str(getattr(x, "dtype", "")).endswith("bfloat16")
    ):
        dtype = np.dtype(ml_dtypes.bfloat16)
    return dtype


def _host_array(x) -> np.ndarray:
    """The NumPy array over a CPU DLPack producer's memory: ``np.from_dlpack``, or where NumPy
    cannot read the dtype (bfloat16 from JAX or PyTorch) an array built on the exported
    pointer, shape and strides (``x`` stays alive with the descriptor)."""
    try:
        return np.from_dlpack(x)
    except (RuntimeError, BufferError, TypeError):
        from cuda.core.utils import StridedMemoryView

        view = StridedMemoryView.from_dlpack(x, stream_ptr=-1)  # -1: host memory, no stream
        dtype = _view_dtype(view, x)
        if dtype not in SUPPORTED_DTYPES:
            raise  # NumPy's own refusal: not a dtype this library computes either
        shape = tuple(view.shape)
        strides = view.strides  # in elements; None: C-contiguous
        if strides is None:
            strides = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
        nbytes = _span(shape, strides) * dtype.itemsize
        memory = (ctypes.c_char * max(nbytes, 1)).from_address(view.ptr)
        byte_strides = tuple(s * dtype.itemsize for s in strides)
        array = np.ndarray(shape, dtype, buffer=memory, strides=byte_strides)
        array.flags.writeable = not getattr(view, "readonly", False)
        return array


def _tracked(x) -> bool:
    """A PyTorch tensor that autograd tracks (``requires_grad``): PyTorch exports it only
    detached (the same memory), and a kernel must not write into it behind autograd's back."""
    return type(x).__module__.split(".")[0] == "torch" and bool(getattr(x, "requires_grad", 0))


def _dlpack_desc(name: str, x: Any, stream) -> ArrayDesc:
    tracked = _tracked(x)
    exported = x.detach() if tracked else x  # a view of the same memory
    readonly = tracked or _immutable(x)
    device_type, _ = exported.__dlpack_device__()
    if device_type == _DLPACK_CPU:
        desc = _host_desc(name, _host_array(exported), x)
        return replace(desc, readonly=desc.readonly or readonly)
    if device_type != _DLPACK_CUDA:
        raise TypeError(
            f"{name} lives on DLPack device type {device_type}; only CUDA and CPU are supported"
        )
    if cuda.config.ENABLE_CUDASIM:
        _refuse_on_the_simulator(name, x)
    from cuda.core.utils import StridedMemoryView

    # The producer orders its pending writes before our stream (DLPack's stream protocol).
    view = StridedMemoryView.from_dlpack(exported, stream_ptr=_dlpack_stream(stream))
    dtype = _view_dtype(view, x)
    itemsize = dtype.itemsize
    cai = {
        "shape": tuple(view.shape),
        "typestr": dtype.str,
        "data": (view.ptr, bool(getattr(view, "readonly", False))),
        "strides": None if view.strides is None else tuple(s * itemsize for s in view.strides),
        "version": 3,
    }
    return _device_desc(name, cai, x, readonly=readonly, dtype=dtype)


def describe_array(x: Any, name: str = "x", stream: Any = 0) -> ArrayDesc:
    """Validate ``x`` as an array of any rank and describe it; ``name`` is used in errors.

    Foreign CUDA arrays are taken through DLPack where they offer it, asking the producer to
    order its pending work before ``stream`` (the stream the kernels will run on); otherwise
    through ``__cuda_array_interface__`` (every field checked:
    :func:`read_cuda_array_interface`), whose own ``stream`` entry, if any, is synchronised.
    Device memory is checked to be memory CUDA knows, and its device recorded.

    Raises ``TypeError`` for unsupported objects, dtypes, masked arrays and malformed
    interfaces, ``ValueError`` for negative or misaligned strides on a dimension of extent > 1
    and null, misaligned or unknown pointers. Zero extents and zero strides (broadcast views)
    are accepted; outputs are checked further by their users (read-only, overlapping).
    """
    if isinstance(x, np.ndarray):
        return _host_desc(name, x, x)
    if cuda.config.ENABLE_CUDASIM and isinstance(x, DeviceNDArray):
        # The simulator's device arrays wrap a NumPy array.
        return _host_desc(name, x._ary, x, on_device=True)
    if isinstance(x, DeviceNDArray):  # Numba's own: same stream semantics as the kernels
        return _device_desc(name, x.__cuda_array_interface__, x)
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return _dlpack_desc(name, x, stream)
    if hasattr(x, "__cuda_array_interface__"):
        return _device_desc(name, x.__cuda_array_interface__, x)
    raise TypeError(
        f"{name} must be a NumPy array or a CUDA array (Numba, CuPy, PyTorch, JAX: anything with "
        f"__cuda_array_interface__ or __dlpack__), got {type(x).__module__}.{type(x).__qualname__}"
    )


def _checked_matrix_desc(desc: MatrixDesc) -> MatrixDesc:
    """A caller's own :class:`MatrixDesc`: its fields were checked when it was built; here the
    memory it points at (a non-null, aligned address; device memory CUDA knows)."""
    _check_dtype(desc.name, desc.dtype)
    _check_strides(desc.name, (desc.batch, *desc.shape), (desc.batch_stride, *desc.strides))
    if desc.span:
        if desc.address <= 0 or desc.address % desc.dtype.itemsize:
            raise ValueError(
                f"{desc.name} (a MatrixDesc) has a null or misaligned address {desc.address:#x}"
            )
        if desc.on_device:
            device = _pointer_device(desc.name, desc.address)
            if device != desc.device:
                desc = replace(desc, device=device)
        if desc.data is None and not desc.on_device:
            raise ValueError(f"{desc.name} (a MatrixDesc) of host memory has no data array")
    return desc


def describe(x: Any, name: str = "x", stream: Any = 0) -> MatrixDesc:
    """Validate ``x`` as a matrix (2-D) and describe it; ``name`` is used in errors.

    As :func:`describe_array` (which see), plus a ``ValueError`` for a rank other than 2. A
    :class:`MatrixDesc` passed in is checked for the memory it points at and returned.
    """
    if isinstance(x, MatrixDesc):
        return _checked_matrix_desc(x)
    desc = describe_array(x, name, stream)
    if desc.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (a matrix), got a {desc.ndim}-D array of shape {desc.shape}"
        )
    return desc.matrix(desc.shape, desc.strides)


def scratch_desc(name: str, shape: tuple, dtype, array: Any = None) -> MatrixDesc:
    """A kernel's own buffer (counters, a workspace; any dtype, unchecked) as a row-major
    ``shape`` descriptor named ``name``: in ``array`` (NumPy or CUDA), or with no array a
    placeholder for XLA's buffer (an output of the kernel call)."""
    if array is None:
        address, on_device = 0, True
    elif isinstance(array, np.ndarray):
        address, on_device = array.ctypes.data, False
    else:
        address, on_device = array.__cuda_array_interface__["data"][0], True
    return MatrixDesc(name, tuple(shape), (shape[1], 1), np.dtype(dtype), array, on_device,
                      address, array)  # fmt: skip


def host_view(address: int, dtype: np.dtype, count: int) -> np.ndarray:
    """The writable 1-D NumPy array of ``count`` elements of ``dtype`` at host ``address``: on
    the simulator, whose device memory is host memory, a prepared launch pointed at another
    array's address (``launch.PreparedLaunch.rebind``) reads and writes it through this."""
    memory = (ctypes.c_char * max(count * dtype.itemsize, 1)).from_address(address)
    return np.frombuffer(memory, dtype, count)


def transpose_view(x: Any) -> Any:
    """A transposed view of the 2-D matrix ``x``, sharing its memory.

    Numba's ``DeviceNDArray.T`` launches a transpose kernel and returns a
    copy (the simulator's returns a view); this builds the view a BLAS "T"
    flag means: shape and strides swapped. Other arrays use their own ``.T``.
    """
    if isinstance(x, DeviceNDArray) and not cuda.config.ENABLE_CUDASIM:
        fields = read_cuda_array_interface("x", x.__cuda_array_interface__)
        if len(fields.shape) != 2:
            raise ValueError(
                f"x must be 2-D (a matrix), got a {len(fields.shape)}-D array of shape "
                f"{fields.shape}"
            )
        return _numba_view(
            fields.pointer, np.dtype(x.dtype), fields.shape[::-1], fields.strides[::-1], x
        )
    if getattr(x, "ndim", 2) != 2:
        raise ValueError(f"x must be 2-D (a matrix), got shape {tuple(x.shape)}")
    return x.T
