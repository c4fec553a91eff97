"""The call path of ``matmul`` and ``triple``: read, look up, check, order, launch.

Every call on device arrays (Numba, PyTorch, CuPy, JAX, or anything with
``__cuda_array_interface__`` or DLPack) takes the same path, :meth:`PreparedCalls.call`:

1. **Read** each array (its class's reader): its address and a *signature* (kind, dtype,
   shape, strides, read-only, the address modulo 16, which decides vector and TMA copies),
   from the framework's own attributes where it has them (``data_ptr()``, ``data.ptr``), else
   through :func:`~numba_gemm.descriptor.describe_array`.
2. **Stream** (:func:`launch_stream`): ``stream=`` where given, else the current stream of the
   operands' framework (PyTorch's on their device, CuPy's), else the legacy default stream.
3. **Look up** the key (signatures, every other argument, the stream, the current CUDA
   context) among the last :data:`PREPARED_CAPACITY` calls. On a miss the caller's
   ``prepare`` validates everything (``describe``, the ``check_*`` functions) and plans
   (``api.plan``), and the result is kept as a :class:`PreparedCall`: the first call of a
   signature is this path with an empty cache, not a second implementation.
4. **Check** what a signature cannot say, where an address differs from the last call's: the
   device that holds the memory (``cuPointerGetAttribute``, where the framework does not say)
   and whether ``out`` overlaps an input. A failed check sends the call through ``prepare``,
   which raises the error a first call would.
5. **Order** the launch after each operand's producer: an event where PyTorch's or CuPy's
   stream differs from the launch's; a JAX array not yet computed through DLPack's stream
   protocol; other DLPack producers in step 1.
6. **Launch**: the prepared launches are pointed at this call's arrays where their addresses
   changed (``launch.PreparedLaunch.rebind``; a call without ``out`` gets a fresh result from
   the library's pool) and launched: one ``cuLaunchKernel`` each.

NumPy arrays (and other host memory) are read as None: such calls copy to the GPU and back
(``api.run_in_memory_space``) and are not kept. On the simulator, its device arrays take the
path too (their memory is host memory; launches are Numba's).
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .descriptor import DeviceNDArray, context_handle, describe_array, device_ordinal
from .launch import (
    SIMULATED,
    KernelLaunch,
    PreparedLaunch,
    array_template,
    checked,
    new_device_array,
)

__all__ = [
    "PreparedCalls",
    "PreparedCall",
    "Done",
    "launch_stream",
    "PREPARED_CAPACITY",
    "forget_prepared_calls",
]

# Calls kept per entry point (each holds a few launches' parameter buffers).
PREPARED_CAPACITY = 64
ALIGNMENT = 16  # bytes: the widest vector and TMA copies; an address's residue is in its key


# -- reading arrays: a reader returns (address, signature, device, producer) or None ---------
#
# address: of element (0, ..., 0); signature: what a prepared call depends on (hashable);
# device: the CUDA device the framework says holds the memory (None: checked by pointer where
# the address changed); producer: the CUstream handle its framework orders work on (None: no
# stream), or a JAX array not yet computed (ordered through DLPack). None: host memory.


def _read_numba(x, name, stream):
    address = x.device_ctypes_pointer.value or 0
    return address, ("numba", x.dtype, x.shape, x.strides, address % ALIGNMENT), None, None


def _read_simulated(x, name, stream):  # the simulator's device arrays: NumPy memory
    address = x._ary.__array_interface__["data"][0]
    return address, ("sim", x.dtype, x.shape, x.strides, address % ALIGNMENT), 0, None


def _read_torch(x, name, stream):
    if not x.is_cuda:
        return None  # host memory
    address, device = x.data_ptr(), x.get_device()
    signature = ("torch", x.dtype, x.shape, x.stride(), x.requires_grad, address % ALIGNMENT)
    return address, signature, device, _torch_stream(device)


def _read_cupy(x, name, stream):
    address = x.data.ptr
    signature = ("cupy", x.dtype, x.shape, x.strides, address % ALIGNMENT)
    return address, signature, x.device.id, _cupy_stream()


def _read_jax(x, name, stream):
    try:
        address = x.unsafe_buffer_pointer()  # one buffer; raises for sharded or deleted arrays
        # The layout stands for strides, which a JAX array does not show (a custom layout,
        # set with jax.device_put(x, Format(...)), orders the same shape otherwise).
        layout = x.format.layout
    except Exception:
        return _read_described(x, name, stream)  # its own refusal, or a host array
    signature = ("jax", x.dtype, x.shape, layout, address % ALIGNMENT)
    return address, signature, None, None if x.is_ready() else x


def _read_described(x, name, stream):
    """Any other array, validated as a first call validates it (DLPack producers order their
    pending work before ``stream`` here)."""
    desc = describe_array(x, name, stream)
    if not desc.on_device or SIMULATED:
        return None
    signature = (type(x), desc.dtype, desc.shape, desc.strides, desc.readonly,
                 desc.address % ALIGNMENT)  # fmt: skip
    return desc.address, signature, desc.device, None


def _reader(kind: type) -> Callable | None:
    """How arrays of class ``kind`` are read (None: host memory, never prepared)."""
    reader = _READERS.get(kind)
    if reader is None:
        module = kind.__module__.split(".")[0]
        if issubclass(kind, np.ndarray):
            reader = _read_host
        elif issubclass(kind, DeviceNDArray):
            reader = _read_simulated if SIMULATED else _read_numba
        elif module == "torch" and hasattr(kind, "data_ptr") and not SIMULATED:
            reader = _read_torch
        elif module == "cupy" and hasattr(kind, "data") and not SIMULATED:
            reader = _read_cupy
        elif module in ("jax", "jaxlib") and hasattr(kind, "unsafe_buffer_pointer"):
            reader = _read_jax if not SIMULATED else _read_described
        else:
            reader = _read_described
        _READERS[kind] = reader
    return reader


def _read_host(x, name, stream):
    return None


_READERS: dict = {}  # array class -> its reader
_NAMES = {2: ("a", "b", "out"), 3: ("a", "b", "c", "out")}  # the arrays' names, by operands


def _torch_stream(device: int) -> int:
    """PyTorch's current stream on ``device``, as a CUstream handle."""
    return sys.modules["torch"]._C._cuda_getCurrentRawStream(device)


def _cupy_stream() -> int:
    """CuPy's current stream (on the current device), as a CUstream handle."""
    return sys.modules["cupy"].cuda.get_current_stream().ptr


def launch_stream(stream: Any, arrays: tuple) -> int | None:
    """The CUstream handle the kernels run on: ``stream``'s (a Numba, PyTorch or CuPy stream
    object, or an int handle), else (``stream`` None) the current stream of the first PyTorch
    or CuPy array's framework, else 0 (the legacy default stream). None where ``stream`` is
    not one of those (``checked_stream`` says why)."""
    if stream is None:
        for x in arrays:
            reader = _reader(type(x))
            if reader is _read_torch and x.is_cuda:
                return _torch_stream(x.get_device())
            if reader is _read_cupy:
                return _cupy_stream()
        return 0
    if type(stream) is int:
        return stream if stream >= 0 else None
    handle = getattr(stream, "handle", None)  # Numba's
    if handle is not None:
        return int(getattr(handle, "value", handle) or 0)
    for attribute in ("cuda_stream", "ptr"):  # PyTorch's, CuPy's
        handle = getattr(stream, attribute, None)
        if type(handle) is int:
            return handle
    return None


# -- ordering after producers --------------------------------------------------------------


_EVENTS: dict = {}  # CUcontext handle -> the event that orders a launch after another stream


def _order_after(producer: int, consumer: int) -> None:
    """Work queued on stream ``producer`` so far happens before what is queued next on
    ``consumer`` (an event recorded there and waited for here; no host wait)."""
    from cuda.bindings import driver as cu

    context = context_handle()
    event = _EVENTS.get(context)
    if event is None:
        flags = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
        event = _EVENTS[context] = checked(cu.cuEventCreate(flags), "cuEventCreate")
    checked(cu.cuEventRecord(event, producer), "cuEventRecord")
    checked(cu.cuStreamWaitEvent(consumer, event, 0), "cuStreamWaitEvent")


def _order(operands: list, handle: int) -> None:
    """Order the launch on stream ``handle`` after every operand's producer."""
    for operand in operands:
        producer = operand[3]
        if producer is None or producer is handle:
            continue
        if type(producer) is int:
            if producer != handle:
                _order_after(producer, handle)
        else:  # a JAX array still being computed: it orders itself before our stream
            producer.__dlpack__(stream=handle or 1)


# -- device checks ---------------------------------------------------------------------------


def _device_of(address: int) -> int:
    """The ordinal of the device holding ``address``; -1 where CUDA knows no such memory."""
    error, ordinal = device_ordinal(address)
    return -1 if error else ordinal


def _address(array) -> int:
    """Where a fresh result (a Numba device array, the simulator's too) starts."""
    if SIMULATED:
        return array._ary.__array_interface__["data"][0]
    return array.device_ctypes_pointer.value


# -- prepared calls --------------------------------------------------------------------------


class PreparedCall:
    """A validated, planned call, ready to launch on any arrays of its signature.

    ``launches``: the planned :class:`~numba_gemm.launch.KernelLaunch` list; ``names``: the
    name each array of the call (operands, then ``out`` where given) has in them, None for one
    they never read (a product with K = 0 reads zeros instead); scratch never moves.
    ``addresses``/``nbytes``: each array's planned address and the bytes it spans (for the
    overlap check); ``device``: the device they are on; ``keep``: buffers the launches use
    (scratch, zeros); ``out_shape``/``out_dtype``/``out_address``: the result's, for calls
    without ``out`` (``out_given`` False), which get a fresh one each; ``stream``: the stream
    the launches run on (as ``launch.checked_stream`` gives it)."""

    def __init__(
        self,
        launches: list[KernelLaunch],
        names: tuple,
        addresses: tuple[int, ...],
        nbytes: tuple[int, ...],
        device: int,
        keep: tuple,
        out_given: bool,
        out_shape: tuple,
        out_dtype,
        out_address: int,
        stream,
    ):
        self.launches = [PreparedLaunch(launch, stream) for launch in launches]
        taken = set().union(*(launch.names() for launch in self.launches))
        missing = [name for name in names if name is not None and name not in taken]
        # Every array must be movable, or a reuse would compute on the first call's arrays.
        if self.launches and missing:
            raise RuntimeError(f"the planned launches name no matrix {missing}")
        self.names, self.planned, self.nbytes = names, addresses, nbytes
        self.device, self.keep, self.out_given = device, keep, out_given
        self.out_shape, self.out_dtype = tuple(out_shape), np.dtype(out_dtype)
        self.out_address, self.stream = out_address, stream
        self.bound = addresses  # the addresses the launches point at now
        self.template = None  # a fresh result's description, copied for the next
        self.lock = threading.Lock()  # one thread's rebinding never reaches another's launch

    def checked(self, operands: list) -> bool:
        """Whether this call's arrays may take the prepared launches (module docstring, step
        4): checked only where an address differs from the last call's."""
        for (address, _, device, _), bound in zip(operands, self.bound):
            if address != bound:
                if (device if device is not None else _device_of(address)) != self.device:
                    return False
        if self.out_given:
            lo = operands[-1][0]
            hi = lo + self.nbytes[-1]
            for (address, *_), nbytes in zip(operands[:-1], self.nbytes):
                if address < hi and lo < address + nbytes:
                    return False
        return True

    def run(self, addresses: tuple, out: Any) -> Any:
        """Launch on the arrays at ``addresses`` (in ``names``' order); the result: ``out``,
        or for a call without one a fresh array."""
        if not self.out_given:
            out = new_device_array(self.out_shape, self.out_dtype, self.stream, self.template)
            if self.template is None:
                self.template = array_template(out)
        with self.lock:
            if not self.out_given and self.launches:
                delta = _address(out) - self.out_address
                for launch in self.launches:
                    launch.rebind("out", delta)
            if addresses != self.bound:
                for name, address, planned in zip(self.names, addresses, self.planned):
                    if name is not None:
                        for launch in self.launches:
                            launch.rebind(name, address - planned)
                self.bound = addresses
            for launch in self.launches:
                launch()
        return out


class Done(NamedTuple):
    """What ``prepare`` returns when it ran the call itself (host memory): its ``result``."""

    result: Any


class PreparedCalls:
    """The prepared calls of one entry point (``matmul``, ``triple``): the last
    :data:`PREPARED_CAPACITY` signatures, least recently used evicted."""

    def __init__(self, capacity: int = PREPARED_CAPACITY):
        self.capacity = capacity
        self._entries: OrderedDict = OrderedDict()
        _CACHES.append(self)

    def call(
        self,
        prepare: Callable,
        operands: tuple,
        out: Any,
        options: tuple,
        stream: Any,
    ) -> Any:
        """Run one call (module docstring). ``prepare(operands, out, options, stream)``
        validates and plans on a miss: it returns a :class:`PreparedCall`, or :class:`Done`
        where it ran the call itself (host memory); it raises what is wrong with the call.
        ``options``: every other argument that decides the launches (hashable, or ``prepare``
        refuses it)."""
        arrays = operands if out is None else (*operands, out)
        handle = launch_stream(stream, arrays)
        if handle is None:  # not a stream this path knows: prepare's checks say why, or run it
            return self._prepared(prepare, operands, out, options, stream, None, None)
        if stream is None or type(stream) is int or not hasattr(stream, "handle"):
            stream = handle  # a PyTorch or CuPy stream, or the framework's current one
        reads = []
        readers = _READERS
        for x, name in zip(arrays, _NAMES[len(operands)]):
            reader = readers.get(type(x)) or _reader(type(x))
            operand = reader(x, name, handle)
            if operand is None:  # host memory: copied to the GPU and back, never kept
                return self._prepared(prepare, operands, out, options, stream, None, None)
            reads.append(operand)
        try:
            key = (*[r[1] for r in reads], options, handle, context_handle())
            entry = self._entries.get(key)
        except TypeError:  # an unhashable argument: prepare says what is wrong with it
            key = entry = None
        _order(reads, handle)
        addresses = tuple([r[0] for r in reads])
        if entry is not None and (addresses == entry.bound or entry.checked(reads)):
            try:
                self._entries.move_to_end(key)
            except KeyError:  # another thread evicted it since: the entry in hand still runs
                pass
            return entry.run(addresses, out)
        return self._prepared(prepare, operands, out, options, stream, key, addresses)

    def _prepared(self, prepare, operands, out, options, stream, key, addresses):
        """A miss: validate and plan (``prepare``), keep the prepared call, run it."""
        entry = prepare(operands, out, options, stream)
        if isinstance(entry, Done):
            return entry.result
        if addresses is None:
            addresses = entry.planned
        elif any(  # the reader and describe() disagree on an array read: never guess
            name is not None and nbytes and address != planned
            for name, nbytes, address, planned in zip(
                entry.names, entry.nbytes, addresses, entry.planned
            )
        ):
            raise RuntimeError(
                f"numba-gemm read addresses {addresses} but validated {entry.planned}; please "
                "report this with the arrays' types"
            )
        if key is not None:
            self._entries[key] = entry
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return entry.run(addresses, out)

    def entries(self) -> list:
        """The kept calls, least recently used first (for tests and inspection)."""
        return list(self._entries.values())

    def clear(self) -> None:
        """Forget every kept call."""
        self._entries.clear()


_CACHES: list = []  # every PreparedCalls (module-level ones, alive with their modules)


def forget_prepared_calls() -> None:
    """Clear every :class:`PreparedCalls` (``tuned_configs.store`` does, as new tuning results
    change the plans)."""
    for calls in _CACHES:
        calls.clear()
