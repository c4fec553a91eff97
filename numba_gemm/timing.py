"""GPU timing on the CUDA event clock, and where the benchmarks record it.

:func:`device_clock` is a clock for back-to-back calls blocked once: it waits
for all queued GPU work (every stream of the context, so XLA's streams too),
then records a CUDA event and returns its time in seconds. Two readings
bracket whatever ran between them on the GPU's own clock. pytest-benchmark
uses it as its timer (``pytest.mark.benchmark(timer=device_clock)``).
:func:`results_file` names and dates each benchmark's results JSON.
"""

from __future__ import annotations

import datetime
import re
import statistics
import time
from pathlib import Path

from numba import cuda

__all__ = ["device_clock", "device_name", "median_seconds", "results_file"]

_REBASE_AFTER_S = 1.0  # event times are float32 milliseconds: keep the origin recent


class _EventClock:
    def __init__(self):
        self._origin = None
        self._origin_s = 0.0

    def __call__(self) -> float:
        if cuda.config.ENABLE_CUDASIM:  # the simulator runs synchronously on the host
            return time.perf_counter()
        cuda.synchronize()
        event = cuda.event()
        event.record()
        event.synchronize()
        if self._origin is None:
            self._origin = event
            return 0.0
        now = self._origin_s + cuda.event_elapsed_time(self._origin, event) / 1e3
        if now - self._origin_s > _REBASE_AFTER_S:
            self._origin, self._origin_s = event, now
        return now


device_clock = _EventClock()


def median_seconds(fn, *, warmup: int = 2, reps: int = 10, calls_per_rep: int = 1) -> float:
    """Median over ``reps`` of the per-call time of ``calls_per_rep`` back-to-back calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = device_clock()
        for _ in range(calls_per_rep):
            fn()
        times.append((device_clock() - start) / calls_per_rep)
    return statistics.median(times)


def device_name() -> str:
    """The current GPU's name (Numba returns bytes or str depending on its version)."""
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else name


def results_file(directory, device: str, suite: str) -> tuple[Path, str]:
    """Where a benchmark writes its results, and when: ``(path, date)`` with path
    ``<directory>/<UTC date>-<device, lower-case, runs of other characters as ->-<suite>.json``
    (the folder is created) and date the UTC time in ISO 8601, to the second."""
    now = datetime.datetime.now(datetime.timezone.utc)
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{now:%Y-%m-%d}-{slug}-{suite}.json", now.isoformat(timespec="seconds")
