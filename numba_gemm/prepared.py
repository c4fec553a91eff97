"""Prepared calls: a repeated call with the same Numba device arrays is one launch per kernel.

``matmul`` and ``triple`` describe, check and plan every call, which takes more host time than a
``matmul``'s kernel up to about 1024^3 (``docs/design/launch-and-timing.md``). But a Numba device
array cannot change its shape, strides, dtype or memory, so the same array objects and arguments
always give the same launches. :class:`PreparedCalls` keeps the prepared launches
(``launch.PreparedLaunch``: one ``cuLaunchKernel`` each) of the last calls, keyed by the operands'
identities (held weakly: an operand that is gone never matches again, and an id Python reuses for a
new object does not match the dead one's reference) and every other argument. A call without ``out``
allocates its result (``launch.new_device_array``) and points the cached launches at it
(``PreparedLaunch.rebind``).

Only calls whose operands (and ``out``) are all Numba device arrays are cached; on the
simulator none are.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from .descriptor import DeviceNDArray, context_handle  # Numba's device array class there
from .launch import (
    KernelLaunch,
    PreparedLaunch,
    new_device_array,
    simulated,
    stream_handle,
)

__all__ = ["PreparedCalls", "PREPARED_CAPACITY", "forget_prepared_calls"]

# Entries kept per cache (each holds a few launches' parameter buffers and weak references).
PREPARED_CAPACITY = 32

# The class cached calls take (none on the simulator), looked up at import, not on every call
# of the path this cache exists to make short.
_DEVICE_ARRAY = None if simulated() else DeviceNDArray


class _Entry(NamedTuple):
    """A cached call: weak ``refs`` to its operands and ``out`` (for no ``out``, a function
    that returns None), its prepared ``launches``, what they use that must stay allocated
    (``keep``), and the result's shape, dtype and the address it was prepared with, for calls
    without ``out`` (launches of parts of the result point at offsets from it)."""

    refs: tuple
    launches: list
    keep: tuple
    out_shape: tuple
    out_dtype: np.dtype
    out_address: int


def _weak(x):
    """A weak reference to ``x``, or for None a function that returns None."""
    return (lambda: None) if x is None else weakref.ref(x)


class PreparedCalls:
    """The prepared launches of one function's last :data:`PREPARED_CAPACITY` distinct calls.

    Use: ``key = calls.key(operands, out, options, stream)``; where it is not None,
    ``calls.run(key, operands, out, stream)`` launches a cached call and returns its result
    (None on a miss); after a miss, ``calls.prepare(key, operands, out, launches, keep, shape,
    dtype, stream)`` launches the planned ``launches`` and caches them.
    """

    def __init__(self, capacity: int = PREPARED_CAPACITY):
        self.capacity = capacity
        self._entries: OrderedDict = OrderedDict()
        self._rebinding = threading.Lock()  # a thread's rebind must not reach another's launch
        _CACHES.add(self)

    @staticmethod
    def key(operands: tuple, out: Any, options: tuple, stream: Any) -> tuple | None:
        """The cache key of a call, or None where it is not cacheable (the simulator, any
        operand or ``out`` that is not a Numba device array). ``options``: every other
        argument that decides the launches (hashable). The current context is part of the key:
        a launch prepared on one device never runs on another."""
        # Plain loops and tests, no generators: this runs on every call (a generator under
        # all() doubles its cost).
        if _DEVICE_ARRAY is None or (out is not None and type(out) is not _DEVICE_ARRAY):
            return None
        for x in operands:
            if type(x) is not _DEVICE_ARRAY:
                return None
        return (
            *map(id, operands),
            id(out),
            *options,
            stream_handle(stream) if stream else 0,
            context_handle(),
        )

    def run(self, key: tuple, operands: tuple, out: Any, stream: Any) -> Any:
        """Launch the cached call of ``key`` if it is for these very objects; its result
        (``out``, or a fresh array for no ``out``), or None where nothing matches."""
        entry = self._entries.get(key)
        if entry is None or entry.refs[-1]() is not out:
            return None
        for ref, x in zip(entry.refs, operands):
            if ref() is not x:
                return None
        try:
            self._entries.move_to_end(key)
        except KeyError:  # another thread evicted it since: the entry in hand still runs
            pass
        if out is not None:
            for launch in entry.launches:
                launch()
            return out
        fresh = new_device_array(entry.out_shape, entry.out_dtype, stream)
        address = fresh.device_ctypes_pointer.value
        with self._rebinding:
            for launch in entry.launches:
                launch.rebind("out", address, entry.out_address)
                launch()
        return fresh

    def prepare(
        self,
        key: tuple,
        operands: tuple,
        out: Any,
        launches: Iterable[KernelLaunch],
        keep: tuple,
        out_shape: tuple,
        out_dtype,
        stream: Any,
        out_address: int = 0,
    ) -> None:
        """Prepare ``launches`` (whose output matrix is named ``"out"``), run them, and cache
        them under ``key`` with weak references to ``operands`` and ``out``; ``keep``: buffers
        they use that the entry holds (scratch space); ``out_address``: where the result they
        were planned for starts."""
        prepared = [PreparedLaunch(launch, stream) for launch in launches]
        for launch in prepared:
            launch()
        self._entries[key] = _Entry(
            tuple(_weak(x) for x in (*operands, out)),
            prepared,
            tuple(keep),
            tuple(out_shape),
            np.dtype(out_dtype),
            out_address,
        )
        if len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def entries(self) -> list:
        """The cached entries, oldest first (for tests and inspection)."""
        return list(self._entries.values())

    def clear(self) -> None:
        """Forget every cached call."""
        self._entries.clear()


_CACHES: weakref.WeakSet = weakref.WeakSet()  # every PreparedCalls, held weakly


def forget_prepared_calls() -> None:
    """Clear every :class:`PreparedCalls` (``tuned_configs.store`` does, as new tuning results
    change the plans)."""
    for calls in _CACHES:
        calls.clear()
