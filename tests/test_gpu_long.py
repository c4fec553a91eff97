"""Large and long (marker `gpu`): a GEMM whose operand holds more than 2^31 elements (64-bit
offsets everywhere), 10,000 calls of the Numba API and of a jitted bridge product with no growth
of device or host memory, and repeated runs bitwise identical."""

import gc
import resource
import sys

import numpy as np
import pytest
from numba import cuda

import numba_gemm
from numba_gemm.reference import relative_error, tolerance

pytestmark = pytest.mark.gpu


@cuda.jit
def _fill(x, seed):
    """x[i, j] = a pseudo-random value in [-1, 1) from (i, j, seed): no host copy of 8 GB."""
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        h = (i * 2654435761 + j * 40503 + seed * 97) & 0xFFFFFFFF
        h = (h ^ (h >> 15)) * 2246822519 & 0xFFFFFFFF
        h = h ^ (h >> 13)
        x[i, j] = (h & 0xFFFFFF) / 8388608.0 - 1.0


def _random_device(shape, seed):
    x = cuda.device_array(shape, np.float32)
    _fill[(-(-shape[0] // 16), -(-shape[1] // 16)), (16, 16)](x, seed)
    return x


def test_an_operand_of_more_than_2_31_elements():
    M, K, N = 65539, 32771, 129  # A: 2,147,778,... elements (8.6 GB); M * K > 2^31
    assert M * K > 2**31
    a, b = _random_device((M, K), 1), _random_device((K, N), 2)
    out = cuda.device_array((M, N), np.float32)
    numba_gemm.matmul(a, b, out, algorithm="tiled")
    b_host = b.copy_to_host().astype(np.float64)
    rows = [0, 1, 4097, 32768, 65535, 65536, M - 2, M - 1]  # around 2^15 and 2^16 rows
    for row in rows:  # rows of C against float64 NumPy
        expected = a[row].copy_to_host().astype(np.float64) @ b_host
        error = relative_error(out[row].copy_to_host(), expected)
        assert error <= tolerance(np.float32, K), (row, error)
    for col in (0, 64, N - 1):  # whole columns against the other kernel family
        column = numba_gemm.matmul(a, b[:, col : col + 1], algorithm="mnk").copy_to_host()
        error = relative_error(out[:, col : col + 1].copy_to_host(), column.astype(np.float64))
        assert error <= tolerance(np.float32, K), (col, error)


def _device_used() -> int:
    """Device memory this process holds (not the device's free memory, which the other test
    processes on the GPU move): Numba's live allocations, what this library's pool has handed
    out, and what JAX's allocator has in use."""
    from cuda.bindings import driver as cu

    from numba_gemm.launch import _memory_pool

    context = cuda.current_context()
    allocations = list(context.memory_manager.allocations.values())
    numba_bytes = sum(memory.size for memory in allocations)
    error, pooled = cu.cuMemPoolGetAttribute(
        _memory_pool(context.device.id), cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_USED_MEM_CURRENT
    )
    jax_bytes = 0
    if "jax" in sys.modules:
        jax = sys.modules["jax"]
        for device in jax.devices():
            stats = device.memory_stats() if device.platform == "gpu" else None
            jax_bytes += (stats or {}).get("bytes_in_use", 0)
    return numba_bytes + int(pooled) + jax_bytes


def _host_resident() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def _memory_after(run, calls: int) -> tuple[int, int]:
    for _ in range(calls):
        run()
    cuda.synchronize()
    gc.collect()
    return _device_used(), _host_resident()


CALLS = 10_000
DEVICE_GROWTH = 16 << 20  # bytes allowed: the driver's own bookkeeping, not one result per call
HOST_GROWTH = 64 << 20


@pytest.mark.parametrize("api", ["matmul", "matmul fresh arrays", "triple", "jax_bridge"])
def test_ten_thousand_calls_hold_memory_steady(api, rng):
    a = cuda.to_device(rng.standard_normal((256, 192)).astype(np.float32))
    b = cuda.to_device(rng.standard_normal((192, 128)).astype(np.float32))
    c = cuda.to_device(rng.standard_normal((128, 64)).astype(np.float32))
    if api == "matmul":

        def run():
            numba_gemm.matmul(a, b)  # a prepared call, a fresh result from the pool

    elif api == "matmul fresh arrays":
        a_host = a.copy_to_host()

        def run():
            numba_gemm.matmul(cuda.to_device(a_host[:64]), b)  # new operands: described

    elif api == "triple":

        def run():
            numba_gemm.triple(a, b, c, algorithm="fused")

    else:
        jax = pytest.importorskip("jax")
        import jax_bridge

        product = jax.jit(jax_bridge.matmul)
        a_jax, b_jax = jax.numpy.asarray(a.copy_to_host()), jax.numpy.asarray(b.copy_to_host())

        def run():
            product(a_jax, b_jax).block_until_ready()

    before = _memory_after(run, 500)  # warm: compiled, pools at their working size
    after = _memory_after(run, CALLS)
    assert after[0] - before[0] <= DEVICE_GROWTH, f"device memory grew {after[0] - before[0]}"
    assert after[1] - before[1] <= HOST_GROWTH, f"host memory grew {after[1] - before[1]}"


@pytest.mark.parametrize(
    "call",
    [
        ("matmul", (2047, 2049, 1031)),
        ("matmul", (512, 512, 512)),
        ("triple", (1536, 1536, 1536, 1536)),  # stream-K: partial tiles through scratch
        ("triple", (512, 512, 512, 512)),  # split-k tiles, two CTAs per SM
    ],
    ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}",
)
def test_repeated_runs_are_bitwise_identical(call, rng):
    name, shape = call
    dims = list(zip(shape, shape[1:]))
    operands = [cuda.to_device(rng.standard_normal(s).astype(np.float32)) for s in dims]
    function = getattr(numba_gemm, name)
    first = function(*operands).copy_to_host()
    for _ in range(5):
        np.testing.assert_array_equal(function(*operands).copy_to_host(), first)
