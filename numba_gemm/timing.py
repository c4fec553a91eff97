"""GPU timing on the CUDA event clock, and where the benchmarks record it.

:func:`device_clock` is a clock for back-to-back calls blocked once: it waits
for all queued GPU work (every stream of the context, so XLA's streams too),
then records a CUDA event and returns its time in seconds. Two readings
bracket whatever ran between them on the GPU's own clock. pytest-benchmark
uses it as its timer (``pytest.mark.benchmark(timer=device_clock)``).
:func:`interleaved_medians` times several methods against each other in one run, and
:func:`host_seconds` a method's host time alone. :func:`results_file` says where each
benchmark's results JSON goes (``benchmarks/results/<suite>/<device>.json``) and dates it,
:func:`write_results` writes it, :func:`stack_versions` gives the versions it records.
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import re
import statistics
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

from numba import cuda

__all__ = [
    "device_clock",
    "device_name",
    "device_slug",
    "median_seconds",
    "copy_bandwidth",
    "Interleaved",
    "interleaved_medians",
    "host_seconds",
    "results_file",
    "write_results",
    "stack_versions",
]

_REBASE_AFTER_S = 1.0  # event times are float32 milliseconds: keep the origin recent
_MAX_CALIBRATION_BATCH = 1024  # calls: the largest batch that calibrates a round


class _EventClock:
    """Seconds on the GPU's event clock: one origin event per context (an event belongs to
    its device), read under a lock (tuners in several threads share it)."""

    def __init__(self):
        self._origins: dict = {}  # context handle -> (origin event, its time in seconds)
        self._reading = threading.Lock()

    def __call__(self) -> float:
        if cuda.config.ENABLE_CUDASIM:  # the simulator runs synchronously on the host
            return time.perf_counter()
        with self._reading:
            return self._read()

    def _read(self) -> float:
        cuda.synchronize()
        event = cuda.event()
        event.record()
        event.synchronize()
        context = int(cuda.current_context().handle)
        if context not in self._origins:
            self._origins[context] = (event, 0.0)
            return 0.0
        origin, origin_s = self._origins[context]
        now = origin_s + cuda.event_elapsed_time(origin, event) / 1e3
        if now - origin_s > _REBASE_AFTER_S:
            self._origins[context] = (event, now)
        return now


device_clock = _EventClock()


def median_seconds(fn, *, warmup: int = 2, reps: int = 10, calls_per_rep: int = 1) -> float:
    """Median over ``reps`` of the per-call time of ``calls_per_rep`` back-to-back calls."""
    for _ in range(warmup):
        fn()
    return statistics.median(_back_to_back(fn, calls_per_rep) / calls_per_rep for _ in range(reps))


def copy_bandwidth() -> float:
    """The current GPU's device-to-device copy bandwidth in bytes/s (bytes read plus bytes
    written), a 2 GiB float32 copy on the default stream: the ceiling the benchmarks hold
    memory-bound products against. Twenty copies (about 0.1 s) warm the GPU up first: after
    two, one H200 read 2.71 TB/s where the other GPUs of its host, in the same minute, read
    3.95-4.07."""
    import numpy as np

    n = 512 * 2**20  # 2 GiB of float32
    src, dst = cuda.device_array(n, np.float32), cuda.device_array(n, np.float32)
    stream = cuda.default_stream()
    seconds = median_seconds(
        lambda: dst.copy_to_device(src, stream=stream), warmup=20, reps=10, calls_per_rep=5
    )
    return 2 * n * 4 / seconds


def _back_to_back(fn, calls: int) -> float:
    """Seconds on the GPU's clock for ``calls`` back-to-back calls of ``fn``, blocked once."""
    start = device_clock()
    for _ in range(calls):
        fn()
    return device_clock() - start


def _calls_per_round(fn, round_s: float) -> int:
    """How many back-to-back calls of ``fn`` fill a round of ``round_s``: from the per-call time
    of the fastest of three batches, the batch doubling until it fills an eighth of a round.
    The fastest of three, because one slow call (a callee's lazy work on its first few runs, a
    host stall) would otherwise shrink every round to a call or two, and a round of one or two
    calls times one call's latency from an idle GPU, not back-to-back calls
    (``docs/design/launch-and-timing.md``)."""
    batch = 1
    while True:
        per_call = max(min(_back_to_back(fn, batch) for _ in range(3)), 1e-9) / batch
        if batch * per_call >= round_s / 8 or batch >= _MAX_CALIBRATION_BATCH:
            return max(1, int(round_s / per_call))
        batch *= 2


class Interleaved(NamedTuple):
    """What :func:`interleaved_medians` measured, each a dict keyed by the methods' names."""

    medians: dict  # median seconds per call
    per_round: dict  # each round's seconds per call, in order
    calls: dict  # calls per round: a benchmark records them, so that a round too short shows


def interleaved_medians(
    fns: dict, *, rounds: int = 15, round_s: float = 0.02, warmup: int = 3, lead_in: float = 0.0
) -> Interleaved:
    """Time each of ``fns`` (name -> function) per call, back-to-back calls blocked once per
    round (:class:`Interleaved`: median and per-round seconds per call, and calls per round).
    Each method is called ``warmup`` times first; then its calls per round are calibrated
    (:func:`_calls_per_round`) so that a round runs about ``round_s``. The rounds interleave:
    round r of every method runs before round r + 1 of any, so drift during the run (clocks,
    temperature, the host's load) falls on all methods alike instead of on whichever was timed
    last. ``lead_in`` > 0: before each timed round, that fraction of the round's calls of the
    same method runs untimed, so that the round starts from the method's own steady state,
    not from what the method before it left (its clocks, its lines in L2)."""
    if not (isinstance(lead_in, (int, float)) and 0 <= lead_in <= 4):
        raise ValueError(f"lead_in must be a fraction of a round from 0 to 4; got {lead_in!r}")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    calls = {name: _calls_per_round(fn, round_s) for name, fn in fns.items()}
    per_round = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(math.ceil(lead_in * calls[name])):
                fn()
            per_round[name].append(_back_to_back(fn, calls[name]) / calls[name])
    return Interleaved(
        {name: statistics.median(t) for name, t in per_round.items()}, per_round, calls
    )


def host_seconds(fn, *, calls: int = 50, runs: int = 5) -> float:
    """Median host time per call of ``fn`` over ``runs`` runs of ``calls`` calls queued without
    waiting for the GPU (it is waited for between runs): few enough calls that the launch
    queue never fills. Where it comes near the time per call, ``fn`` is bound by its host."""
    times = []
    for _ in range(runs):
        device_clock()  # the GPU is idle, the queue empty
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    device_clock()
    return statistics.median(times)


def device_name() -> str:
    """The current GPU's name (Numba returns bytes or str depending on its version)."""
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else name


def device_slug(device: str) -> str:
    """A device name as a file name: lower-case, runs of other characters as ``-``
    (``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia-h100-80gb-hbm3"``)."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


def results_file(directory, device: str, suite: str) -> tuple[Path, str]:
    """Where a benchmark writes its results, and when: ``(path, date)`` with path
    ``<directory>/<suite>/<device slug>.json`` (the folder is created; the latest run of a
    suite on a device replaces the one before, whose file git keeps) and date the UTC time in
    ISO 8601, to the second."""
    now = datetime.datetime.now(datetime.UTC)
    folder = Path(directory) / suite
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{device_slug(device)}.json", now.isoformat(timespec="seconds")


def write_results(directory, device: str, suite: str, record: dict) -> Path:
    """Write a benchmark's results to :func:`results_file`'s path and return it: a JSON object
    of the date, ``device``, ``suite`` and then ``record``'s fields (a ``"device"`` there
    replaces the name, keeping its place)."""
    path, date = results_file(directory, device, suite)
    path.write_text(
        json.dumps({"date": date, "device": device, "suite": suite, **record}, indent=1)
    )
    return path


STACK = ("numba", "numba-cuda", "numpy", "jax", "jaxlib")


def stack_versions(*extra: str) -> dict:
    """Python's version and each installed version of :data:`STACK` and ``extra``
    (distribution names; None where one is not installed), for a results file."""
    found = {"python": platform.python_version()}
    for name in (*STACK, *extra):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found
