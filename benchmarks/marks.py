"""The marks each pytest-benchmark file of ``benchmarks/`` carries: ``pytestmark = timed(...)``."""

from __future__ import annotations

import pytest

from numba_gemm.timing import device_clock

MIN_ROUND_S = 0.05  # back-to-back calls fill a round of at least this: launch latency amortised


def timed(min_rounds: int, warmup_iterations: int) -> list:
    """``gpu``, and pytest-benchmark timing on the CUDA event clock (``device_clock``): at
    least ``min_rounds`` rounds of :data:`MIN_ROUND_S` or more after ``warmup_iterations``
    untimed calls, the garbage collector off."""
    return [
        pytest.mark.gpu,
        pytest.mark.benchmark(
            timer=device_clock,
            disable_gc=True,
            warmup=True,
            warmup_iterations=warmup_iterations,
            min_time=MIN_ROUND_S,
            min_rounds=min_rounds,
            max_time=1.0,
        ),
    ]
