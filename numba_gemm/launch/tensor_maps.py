"""Tensor maps, the host's side of TMA: what a map describes (:class:`TensorMapSpec`), its
encoding by the driver (``cuTensorMapEncodeTiled``) into device memory, the templates XLA's
kernel call completes on the device, and the launch argument that names a host-encoded map
(:class:`TensorMapArg`), which a prepared call moves with its matrix.

On the simulator a map is a registry entry (:func:`register_twin`, :func:`twin_map`): the
operand's buffer and geometry, which the twins of ``kernels.tma`` walk.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np
from numba import cuda

from ..descriptor import MatrixDesc, scratch_desc
from .driver import SIMULATED

__all__ = [
    "MAP_BYTES",
    "MAP_WORDS",
    "TensorMapSpec",
    "TensorMapArg",
    "tensor_map",
    "tensor_map_template",
    "map_workspace",
    "register_twin",
    "twin_map",
]

MAP_BYTES = 128  # a CUtensorMap
MAP_WORDS = MAP_BYTES // 8  # its 64-bit words, as a template passes them
MAP_ALIGNMENT = 64  # its address's in global memory (128 in shared memory)
TEMPLATE_ADDRESS = 1 << 20  # a template's stand-in address (replaced on the device)
SWIZZLE_BYTES = 128  # the box's inner extent in bytes, at most (128-byte swizzle)
TWIN_CAPACITY = 1024  # simulator: twin maps kept (each holds its operand's buffer)


@dataclass(frozen=True)
class TensorMapSpec:
    """One operand as a TMA copy sees it (what :func:`tensor_map` encodes).

    ``address``: of element (0, 0, 0); ``dtype``: the stored elements' (uint16 bits or
    float32); ``extents``: elements along (the contiguous axis, the other axis, the batch);
    ``strides``: elements between consecutive lines of the other axis and between matrices of
    the batch; ``box``: elements a copy moves along each of the three (the inner one at most
    128 bytes: the swizzle's row).
    """

    address: int
    dtype: np.dtype
    extents: tuple[int, int, int]
    strides: tuple[int, int]
    box: tuple[int, int, int]

    def problem(self) -> str | None:
        """What TMA cannot copy here (its alignment rules), or None."""
        size = np.dtype(self.dtype).itemsize
        if self.address % 16:
            return f"TMA needs a 16-byte aligned address; got {self.address:#x}"
        for stride in self.strides:
            if (stride * size) % 16 or not 0 < stride * size < 2**40:
                return (
                    f"TMA needs strides that are positive multiples of 16 bytes; got {stride} "
                    f"elements of {size} bytes"
                )
        if not all(1 <= e < 2**32 for e in self.extents):
            return f"TMA needs extents in [1, 2^32); got {self.extents}"
        if self.box[0] * size > SWIZZLE_BYTES or (self.box[0] * size) % 16:
            return f"a swizzled TMA box's rows are 16..128 bytes; got {self.box}"
        if not all(1 <= b <= 256 for b in self.box):
            return f"TMA boxes are 1..256 elements along each axis; got {self.box}"
        return None

    def check(self) -> None:
        """``ValueError`` saying what TMA cannot copy here, if anything."""
        if (problem := self.problem()) is not None:
            raise ValueError(problem)


@dataclass(frozen=True)
class TensorMapArg:
    """A kernel parameter: the address of ``spec`` encoded by the host (:func:`tensor_map`),
    for the matrix named ``name``. A prepared call that points that matrix elsewhere
    (``launch.PreparedLaunch.rebind``) moves the map with it (:meth:`moved`); ``span``: the
    elements from ``spec.address`` that the simulator's twin map reads."""

    spec: TensorMapSpec
    name: str
    span: int

    def moved(self, delta: int) -> TensorMapArg:
        """The same map for the matrix ``delta`` bytes further on."""
        return replace(self, spec=replace(self.spec, address=self.spec.address + delta))

    def address(self) -> int:
        """The encoded map's address (encoded on first use of its spec); on the simulator a
        fresh twin's key over the memory at ``spec.address``."""
        if SIMULATED:
            from ..descriptor import host_view

            dtype = np.dtype(self.spec.dtype)
            return tensor_map(self.spec, host_view(self.spec.address, dtype, self.span))
        return tensor_map(self.spec)


def tensor_map(spec: TensorMapSpec, buffer=None) -> int:
    """The address of ``spec`` encoded as a tensor map in device memory (128-byte swizzle,
    zeros outside the matrix). Encoded once per spec (an address and a geometry always encode
    to the same map) and kept for the life of the process: a launch, a prepared call or a
    captured CUDA graph may hold the address. That is 128 bytes per distinct operand address
    and geometry; memory pools (PyTorch's, JAX's, this library's) reuse addresses. The first
    call with a spec allocates and copies synchronously, which a stream capture forbids: as a
    kernel's compilation, it belongs in the warm-up before a capture. On the simulator, the
    key of a twin map of ``buffer`` (the 1-D array whose element 0 is at ``spec.address``),
    made afresh each call."""
    spec.check()
    if SIMULATED:
        return register_twin(spec, buffer)
    with _MAPS_LOCK:
        if spec not in _MAPS:
            _MAPS[spec] = _encoded_map(spec)
        return _MAPS[spec].device_ctypes_pointer.value


_MAPS: dict = {}  # spec -> its encoded map's device array
_TWINS: OrderedDict = OrderedDict()  # simulator: key -> (spec, buffer), the last TWIN_CAPACITY
_MAPS_LOCK = threading.Lock()
_TWIN_KEYS = itertools.count(1)


def register_twin(spec: TensorMapSpec, buffer) -> int:
    """Simulator: a fresh twin map of ``spec`` over ``buffer`` (None for a template's), by
    its key; the last :data:`TWIN_CAPACITY` are kept."""
    with _MAPS_LOCK:
        key = next(_TWIN_KEYS)
        _TWINS[key] = (spec, buffer)
        if len(_TWINS) > TWIN_CAPACITY:
            _TWINS.popitem(last=False)
        return key


def twin_map(key: int) -> tuple:
    """Simulator: the twin map ``key`` names, as (spec, buffer)."""
    return _TWINS[key]


def map_workspace(nbytes: int, array=None) -> MatrixDesc:
    """The global memory where CTAs publish the tensor maps they build, as a descriptor named
    ``tensor_maps``: ``nbytes`` uint8 in ``array`` (NumPy or CUDA), or with no array a
    placeholder for XLA's buffer."""
    return scratch_desc("tensor_maps", (1, nbytes), np.uint8, array)


def tensor_map_template(spec: TensorMapSpec) -> tuple:
    """``spec`` encoded with a stand-in address, as 16 signed 64-bit words (kernel parameters):
    what :func:`tensor_map_in_place` completes on the device with the operand's address. On the
    simulator word 0 is the key of a twin map without a buffer."""
    spec.check()
    if SIMULATED:
        return (register_twin(spec, None),) + (0,) * (MAP_WORDS - 1)
    words = _encoded_words(replace(spec, address=TEMPLATE_ADDRESS))
    return tuple(int(w) for w in words.view(np.int64))


def _encoded_map(spec: TensorMapSpec):
    """``spec`` encoded by the driver, copied into a fresh 128-byte device array."""
    device = cuda.to_device(_encoded_words(spec))  # cuMemAlloc: 256-byte aligned (64 needed)
    assert device.device_ctypes_pointer.value % MAP_ALIGNMENT == 0
    return device


def _encoded_words(spec: TensorMapSpec) -> np.ndarray:
    """``spec`` encoded by the driver: 16 uint64."""
    from cuda.bindings import driver as cu

    size = np.dtype(spec.dtype).itemsize
    data_type = (
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32
        if size == 4
        else cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16
    )
    result, encoded = cu.cuTensorMapEncodeTiled(
        data_type,
        3,
        spec.address,
        [cu.cuuint64_t(e) for e in spec.extents],
        [cu.cuuint64_t(s * size) for s in spec.strides],
        [cu.cuuint32_t(b) for b in spec.box],
        [cu.cuuint32_t(1)] * 3,
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if result != cu.CUresult.CUDA_SUCCESS:
        raise ValueError(f"cuTensorMapEncodeTiled refused {spec}: {result}")
    words = np.array(encoded.opaque, np.uint64)
    assert words.nbytes == MAP_BYTES
    return words
