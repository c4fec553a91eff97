"""Seed 001's loop orders against cuBLAS (jnp.matmul, precision="highest"), same run.

Each case: fresh random device operands in one layout, an output allocated
once, one warm-up round, then ROUNDS rounds of ITERATIONS back-to-back calls
timed on the CUDA event clock. The model columns are seed 001's traffic for
that order (numba_gemm.model.traffic) over the measured copy bandwidth.
"""

import numpy as np
import pytest

import numba_gemm
from numba_gemm.model import CACHES, traffic
from numba_gemm.testing import make_operands, poisoned
from numba_gemm.timing import device_clock

pytestmark = [pytest.mark.gpu, pytest.mark.benchmark(timer=device_clock, disable_gc=True)]

SIZES = [1024, 2048]
LAYOUTS = ["row", "col", "a_col", "b_col"]
ORDERS = ["mnk", "nmk", "kmn", "knm"]
ROUNDS, ITERATIONS = 7, 2


@pytest.mark.parametrize("size", SIZES)
def test_peer_jnp_matmul(benchmark, record, size):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    rng = np.random.default_rng(size)
    a = jax.device_put(rng.standard_normal((size, size), dtype=np.float32))
    b = jax.device_put(rng.standard_normal((size, size), dtype=np.float32))
    matmul = jax.jit(lambda a, b: jnp.matmul(a, b, precision="highest"))
    benchmark.pedantic(matmul, args=(a, b), rounds=ROUNDS, iterations=ITERATIONS, warmup_rounds=1)
    record(benchmark, kind="peer", algorithm="jnp.matmul", layout="row", size=size, dtype="float32")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", ORDERS)
def test_loop_order(benchmark, record, copy_bandwidth, algorithm, layout, size):
    a, b = make_operands(size, size, size, np.float32, layout, np.random.default_rng(size), to_device=True)
    out = poisoned((size, size), np.float32, to_device=True, layout=layout)
    benchmark.pedantic(numba_gemm.matmul, args=(a, b, out), kwargs={"algorithm": algorithm},
                       rounds=ROUNDS, iterations=ITERATIONS, warmup_rounds=1)
    model_s = {cache: traffic(algorithm, size, size, size, cache).total * 4 / copy_bandwidth
               for cache in CACHES}
    record(benchmark, kind="numba", algorithm=algorithm, layout=layout, size=size, dtype="float32",
           model_s=model_s)
