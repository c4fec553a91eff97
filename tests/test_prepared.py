"""numba_gemm.prepared.PreparedCalls on the CPU: keys, hits, fresh outputs, weak references,
eviction. Numba's device array class and the prepared launch are stood in for, so the cache's
logic runs without a GPU (the GPU tests run it with real launches)."""

import gc
from types import SimpleNamespace

import numpy as np
import pytest

from numba_gemm import prepared


class FakeArray:
    """Stands in for Numba's DeviceNDArray (the only class whose calls are cached)."""


class FakeLaunch:
    """Stands in for launch.PreparedLaunch: records each launch with the addresses bound."""

    def __init__(self, log, stream):
        self.log, self.bound, self.offset = log, {}, 0

    def rebind(self, name, address, prepared_address):
        self.bound[name] = address + self.offset - prepared_address

    def __call__(self):
        self.log.append(dict(self.bound))


@pytest.fixture
def fresh(monkeypatch):
    """Cache under stand-ins; returns the list of fresh outputs allocated."""
    made = []

    def new_device_array(shape, dtype, stream=0):
        made.append(
            SimpleNamespace(
                shape=shape,
                dtype=np.dtype(dtype),
                stream=stream,
                device_ctypes_pointer=SimpleNamespace(value=1000 + len(made)),
            )
        )
        return made[-1]

    monkeypatch.setattr(prepared, "_DEVICE_ARRAY", FakeArray)
    monkeypatch.setattr(prepared, "PreparedLaunch", FakeLaunch)
    monkeypatch.setattr(prepared, "new_device_array", new_device_array)
    return made


def test_only_calls_on_device_arrays_are_cached(fresh):
    a, b, out = FakeArray(), FakeArray(), FakeArray()
    key = prepared.PreparedCalls.key
    assert key((a, b), out, ("tiled",), 0) is not None
    assert key((a, b), None, ("tiled",), 0) is not None
    assert key((a, np.ones((2, 2))), out, ("tiled",), 0) is None  # a host operand
    assert key((a, b), np.ones((2, 2)), ("tiled",), 0) is None  # a host out
    keys = {
        key((a, b), out, ("tiled",), 0),
        key((b, a), out, ("tiled",), 0),
        key((a, b), None, ("tiled",), 0),
        key((a, b), out, ("mnk",), 0),
        key((a, b), out, ("tiled",), 7),
    }
    assert len(keys) == 5, "operands, out, options and stream each tell calls apart"


def test_a_prepared_call_runs_again_from_the_cache(fresh):
    calls = prepared.PreparedCalls()
    a, b, out = FakeArray(), FakeArray(), FakeArray()
    key = calls.key((a, b), out, ("tiled",), 0)
    assert calls.run(key, (a, b), out, 0) is None  # nothing cached yet
    log = []
    calls.prepare(key, (a, b), out, [log], (), (4, 5), np.float32, 0)
    assert len(log) == 1  # prepare launches
    assert calls.run(key, (a, b), out, 0) is out
    assert len(log) == 2 and not fresh


def test_a_call_without_out_launches_into_a_fresh_array_each_time(fresh):
    calls = prepared.PreparedCalls()
    a, b = FakeArray(), FakeArray()
    key = calls.key((a, b), None, ("tiled",), 0)
    first, second = [], []  # two launches, both writing "out"
    calls.prepare(key, (a, b), None, [first, second], (), (4, 5), np.float64, 3)
    results = [calls.run(key, (a, b), None, 3) for _ in range(2)]
    assert results == fresh and len(fresh) == 2
    assert all(r.shape == (4, 5) and r.dtype == np.float64 and r.stream == 3 for r in fresh)
    assert [entry["out"] for entry in first[1:]] == [1000, 1001]
    assert [entry["out"] for entry in second[1:]] == [1000, 1001]


def test_an_operand_gone_never_matches_again(fresh):
    calls = prepared.PreparedCalls()
    a, b, out = FakeArray(), FakeArray(), FakeArray()
    key = calls.key((a, b), out, ("tiled",), 0)
    calls.prepare(key, (a, b), out, [[]], (), (4, 5), np.float32, 0)
    (entry,) = calls.entries()
    del a
    gc.collect()
    assert entry.refs[0]() is None
    # whatever object now has a's id, the dead reference does not match it
    assert calls.run(key, (FakeArray(), b), out, 0) is None


def test_the_oldest_entry_is_evicted_and_everything_can_be_forgotten(fresh):
    calls = prepared.PreparedCalls(capacity=2)
    arrays = [FakeArray() for _ in range(4)]
    keys = []
    for x in arrays[:3]:
        keys.append(calls.key((x, arrays[3]), None, (), 0))
        calls.prepare(keys[-1], (x, arrays[3]), None, [[]], (), (1, 1), np.float32, 0)
    assert len(calls.entries()) == 2
    assert calls.run(keys[0], (arrays[0], arrays[3]), None, 0) is None  # evicted
    assert calls.run(keys[2], (arrays[2], arrays[3]), None, 0) is not None
    prepared.forget_prepared_calls()
    assert calls.entries() == []
