"""The tiled kernel against cuBLAS (jnp.matmul, precision="highest"), same run.

- square sizes 1024 to 8192, row-major, with the config ``matmul`` picks
  (the tuning cache, else the shipped winners);
- transposed operands (A, B or both column-major: BLAS's T flags) at 4096 and 8192;
- seed 004's question: row-major CTA order (group_m = 1) against grouped
  (group_m = 8) at 8192^3 and at a large K, beside the model's DRAM traffic
  (numba_gemm.model.problem_tile_loads).

Timing as in test_loop_orders.py: calibrated rounds of back-to-back calls on
the CUDA event clock. Each row keeps its config, registers and local memory
per thread (0 = no spills).
"""

from dataclasses import replace

import numpy as np
import pytest
from marks import timed

import numba_gemm
from numba_gemm.descriptor import describe
from numba_gemm.kernels.tiled import kernel_resources
from numba_gemm.model import problem_dram_bytes
from numba_gemm.reference import make_operands, poisoned
from numba_gemm.tuned_configs import config_for, config_for_shape

pytestmark = timed(min_rounds=7, warmup_iterations=10)

SQUARE = [1024, 2048, 4096, 8192]
TRANSPOSED = [4096, 8192]
LARGE_K = (4096, 4096, 32768)
ORDER_SHAPES = [(8192, 8192, 8192), LARGE_K]
PEER_SHAPES = [(n, n, n) for n in SQUARE] + [LARGE_K]


def shape_id(shape):
    return "x".join(map(str, shape))


@pytest.mark.parametrize("shape", PEER_SHAPES, ids=shape_id)
def test_peer_jnp_matmul(benchmark, record, shape):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    M, N, K = shape
    rng = np.random.default_rng(M + K)
    a = jax.device_put(rng.standard_normal((M, K), dtype=np.float32))
    b = jax.device_put(rng.standard_normal((K, N), dtype=np.float32))
    matmul = jax.jit(lambda a, b: jnp.matmul(a, b, precision="highest"))
    benchmark(matmul, a, b)
    record(
        benchmark,
        kind="peer",
        algorithm="jnp.matmul",
        layout="row",
        M=M,
        N=N,
        K=K,
        size=M if M == N == K else None,
        dtype="float32",
    )


def run_tiled(benchmark, record, shape, layout, config=None, **fields):
    M, N, K = shape
    a, b = make_operands(M, N, K, np.float32, layout, np.random.default_rng(M + K), to_device=True)
    out = poisoned((M, N), np.float32, to_device=True, layout=layout)
    descs = describe(a, "a"), describe(b, "b"), describe(out, "out")
    config = config or config_for(*descs)
    benchmark(numba_gemm.matmul, a, b, out, algorithm="tiled", config=config)
    record(
        benchmark,
        kind="numba",
        algorithm="tiled",
        layout=layout,
        M=M,
        N=N,
        K=K,
        size=M if M == N == K else None,
        dtype="float32",
        config=config.label(),
        **kernel_resources(config, *descs),
        **fields,
    )
    return config


@pytest.mark.parametrize("size", SQUARE)
def test_tiled_square(benchmark, record, size):
    run_tiled(benchmark, record, (size, size, size), "row")


@pytest.mark.parametrize("size", TRANSPOSED)
@pytest.mark.parametrize("layout", ["a_col", "b_col", "col"])
def test_tiled_transposed(benchmark, record, layout, size):
    run_tiled(benchmark, record, (size, size, size), layout)


@pytest.mark.parametrize("group_m", [1, 8])
@pytest.mark.parametrize("shape", ORDER_SHAPES, ids=shape_id)
def test_cta_order(benchmark, record, shape, group_m, device_info):
    M, N, K = shape
    config = replace(config_for_shape(M, N, K), group_m=group_m)
    concurrent = device_info["multiprocessors"] * ctas_per_sm(config)
    model = problem_dram_bytes(
        M, N, K, config.block_m, config.block_n, config.block_k, 4, concurrent, group_m
    )
    run_tiled(
        benchmark,
        record,
        shape,
        "row",
        config,
        variant=f"group_m={group_m}",
        model_dram_bytes=model,
        concurrent_ctas=concurrent,
    )


def ctas_per_sm(config) -> int:
    """CTAs of this config that fit on one SM at once (registers, shared memory, threads)."""
    from numba import cuda

    device = cuda.get_current_device()
    registers = max(64, kernel_registers(config)) * config.threads
    return max(
        1,
        min(
            device.MAX_REGISTERS_PER_MULTIPROCESSOR // registers,
            device.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR // config.shared_bytes(np.float32),
            device.MAX_THREADS_PER_MULTIPROCESSOR // config.threads,
        ),
    )


def kernel_registers(config) -> int:
    a, b = make_operands(8, 8, 8, np.float32, "row", np.random.default_rng(0), to_device=True)
    out = poisoned((8, 8), np.float32, to_device=True)
    return kernel_resources(config, describe(a, "a"), describe(b, "b"), describe(out, "out"))[
        "registers"
    ]
