"""Seed 001's loop orders against cuBLAS (jnp.matmul, precision="highest"), same run.

Each case: fresh random device operands in one layout and an output in C's
layout, allocated once; pytest-benchmark warms up, calibrates how many
back-to-back calls fill a round of at least ``marks.MIN_ROUND_S`` (so launch latency
is amortised), and times at least 7 rounds on the CUDA event clock. The model
columns are seed 001's traffic for that order (numba_gemm.model.traffic) over the
measured copy bandwidth.
"""

import numpy as np
import pytest
from marks import timed

import numba_gemm
from numba_gemm.model import CACHES, ORDERS, traffic
from numba_gemm.reference import make_operands, poisoned

pytestmark = timed(min_rounds=7, warmup_iterations=10)

SIZES = [1024, 2047, 2048]  # 2047: leading dimensions that are not powers of two
LAYOUTS = ["row", "col", "a_col", "b_col"]


@pytest.mark.parametrize("size", SIZES)
def test_peer_jnp_matmul(benchmark, record, size):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    rng = np.random.default_rng(size)
    a = jax.device_put(rng.standard_normal((size, size), dtype=np.float32))
    b = jax.device_put(rng.standard_normal((size, size), dtype=np.float32))
    matmul = jax.jit(lambda a, b: jnp.matmul(a, b, precision="highest"))
    benchmark(matmul, a, b)
    record(benchmark, kind="peer", algorithm="jnp.matmul", layout="row", size=size, dtype="float32")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", ORDERS)
def test_loop_order(benchmark, record, copy_bandwidth, algorithm, layout, size):
    a, b = make_operands(
        size, size, size, np.float32, layout, np.random.default_rng(size), to_device=True
    )
    out = poisoned((size, size), np.float32, to_device=True, layout=layout)
    benchmark(numba_gemm.matmul, a, b, out, algorithm=algorithm)
    model_s = {
        cache: traffic(algorithm, size, size, size, cache).total * 4 / copy_bandwidth
        for cache in CACHES
    }
    record(
        benchmark,
        kind="numba",
        algorithm=algorithm,
        layout=layout,
        size=size,
        dtype="float32",
        model_s=model_s,
    )
