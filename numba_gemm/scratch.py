"""Scratch buffers that kernels keep between calls, per (context, stream, host thread).

Kernels on one stream run in order, so a buffer that every launch on a stream uses in turn
is never read by two launches at once. Two host threads may interleave their launches on one
stream (the legacy default stream), and each thread's per-thread default stream has the same
handle, so the thread is part of the key too; a prepared call that holds scratch is then
kept per thread (its entry point puts the thread in the call's options).
"""

from __future__ import annotations

import threading

import numpy as np
from numba import cuda

from .descriptor import MatrixDesc, context_handle, scratch_desc
from .launch import SIMULATED, stream_handle

__all__ = ["stream_key", "StreamScratch", "SPLIT_K_SCRATCH"]


def stream_key(stream) -> tuple:
    """(context, stream, host thread): what scratch buffers are kept under."""
    return context_handle(), stream_handle(stream), threading.get_ident()


class StreamScratch:
    """Named device buffers per (context, stream, thread) (:func:`stream_key`), zero when
    allocated: counters that the kernels leave zero stay so. A buffer grows (at least
    doubling) when a launch needs more; the one it replaces is kept, not freed, so that a
    launch in flight, or a prepared call holding it, never loses its memory."""

    def __init__(self):
        self._buffers: dict = {}
        self._retired: list = []
        self._lock = threading.Lock()

    def get(self, name: str, shape: tuple, dtype, stream) -> MatrixDesc:
        """A row-major ``shape`` descriptor named ``name`` of this (context, stream, thread)'s
        ``name`` buffer of ``dtype``."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape))
        key = (*stream_key(stream), name, dtype)
        with self._lock:
            held = self._buffers.get(key)
            if held is None or held.size < count:
                if held is not None:
                    self._retired.append(held)
                size = max(count, 2 * (held.size if held is not None else 0))
                held = np.zeros(size, dtype)
                if not SIMULATED:  # a synchronous copy: zero before any stream's launch
                    held = cuda.to_device(held)
                self._buffers[key] = held
        return scratch_desc(name, shape, dtype, held)

    def buffers(self, name: str) -> list:
        """Every ``name`` buffer held now (for tests and inspection)."""
        return [array for key, array in self._buffers.items() if key[3] == name]


# Split-k's partial tiles and counters (``kernels.split_k``) for ``matmul`` and the JAX bridge's
# callbacks.
SPLIT_K_SCRATCH = StreamScratch()
