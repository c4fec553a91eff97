"""What the JAX bridge costs: a jitted jax_bridge.matmul against the same kernel launched
directly from Numba, and against a jitted jnp.matmul, same run.

Rows (fp32, row-major, square):

- ``numba direct``: the launch ``numba_gemm.api.plan`` decides, prepared once and
  launched back to back with ``numba_gemm.launch.launch_kernel`` (the kernel,
  with the least Python Numba allows);
- ``jax_bridge native`` / ``jax_bridge callback``: ``jax.jit(jax_bridge.matmul)``
  called back to back (variant ``per call``: JAX's dispatch included), and a
  chain of products inside one jit (variant ``chain``: per product, what XLA
  adds around the kernel; the native path is captured in command buffers);
- ``jnp.matmul`` (cuBLAS, precision highest): the peer, per call and chained.

At 512^3 and 4096^3 the bridge rows name ``numba direct`` as their baseline;
at a tiny 8^3, where only overhead remains, ``jnp.matmul``. Timing as in the
other suites: calibrated rounds of back-to-back calls on the CUDA event clock.
"""

import numpy as np
import pytest
from marks import timed

import jax_bridge
from numba_gemm.api import plan
from numba_gemm.descriptor import describe
from numba_gemm.launch import launch_kernel
from numba_gemm.reference import make_operands, poisoned

pytestmark = timed(min_rounds=9, warmup_iterations=20)

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

TINY = 8
SIZES = [TINY, 512, 4096]
CHAIN = {TINY: 100, 512: 20, 4096: 4}  # products per jitted chain


def inputs(size: int):
    rng = np.random.default_rng(size)
    a = jax.device_put(rng.standard_normal((size, size), dtype=np.float32))
    # Scaled so that a chain of products keeps its magnitude.
    b = jax.device_put(rng.standard_normal((size, size), dtype=np.float32) / np.sqrt(size))
    return a, b


def chained(product, calls: int):
    def chain(x, w):
        for _ in range(calls):
            x = product(x, w)
        return x

    return jax.jit(chain)


PRODUCTS = {
    "jnp.matmul": lambda x, w: jnp.matmul(x, w, precision="highest"),
    "jax_bridge native": lambda x, w: jax_bridge.matmul(x, w, lowering="native"),
    "jax_bridge callback": lambda x, w: jax_bridge.matmul(x, w, lowering="callback"),
}


def baseline_for(size: int, algorithm: str):
    if algorithm == "jnp.matmul":
        return {}
    return {
        "baseline": "jnp.matmul" if size == TINY else "numba direct",
        "baseline_variant": "per call",
    }


@pytest.mark.parametrize("size", SIZES)
def test_numba_direct(benchmark, record, size):
    a, b = make_operands(
        size, size, size, np.float32, "row", np.random.default_rng(size), to_device=True
    )
    out = poisoned((size, size), np.float32, to_device=True)
    launch = plan(describe(a, "a"), describe(b, "b"), describe(out, "out"))
    benchmark(launch_kernel, launch)
    record(
        benchmark,
        kind="numba",
        algorithm="numba direct",
        layout="row",
        size=size,
        dtype="float32",
        variant="per call",
    )


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("algorithm", list(PRODUCTS))
def test_per_call(benchmark, record, algorithm, size):
    a, b = inputs(size)
    fn = jax.jit(PRODUCTS[algorithm])
    benchmark(fn, a, b)
    record(
        benchmark,
        kind="peer" if algorithm == "jnp.matmul" else "numba",
        algorithm=algorithm,
        layout="row",
        size=size,
        dtype="float32",
        variant="per call",
        **baseline_for(size, algorithm),
    )


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("algorithm", ["jnp.matmul", "jax_bridge native"])
def test_chain(benchmark, record, algorithm, size):
    a, b = inputs(size)
    fn = chained(PRODUCTS[algorithm], CHAIN[size])
    benchmark(fn, a, b)
    fields = baseline_for(size, algorithm)
    if size == TINY and fields:
        fields["baseline_variant"] = "chain"
    record(
        benchmark,
        calls=CHAIN[size],
        kind="numba",
        algorithm=algorithm,
        layout="row",
        size=size,
        dtype="float32",
        variant="chain",
        **fields,
    )
