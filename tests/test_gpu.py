"""Real-GPU checks (marker `gpu`): the loop orders up to 1024, every layout, interop, fresh
results from the memory pool and prepared calls."""

import numpy as np
import pytest

import numba_gemm
from checks import assert_product, check_layouts
from numba_gemm.api import FFMA_ALGORITHMS
from numba_gemm.kernels.skinny import SKINNY_M
from numba_gemm.reference import LAYOUTS, make_operands, poisoned, relative_error, tolerance

pytestmark = pytest.mark.gpu

SHAPES = [(1024, 1024, 1024), (1000, 1023, 517), (1, 1024, 997), (997, 1, 1024), (257, 129, 3)]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    ("algorithm", "shape"),
    [
        (algorithm, shape)
        for algorithm in FFMA_ALGORITHMS
        for shape in SHAPES
        if algorithm != "skinny" or min(shape[:2]) <= SKINNY_M  # its products' C is skinny
    ],
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v,
)
def test_loop_orders_on_gpu(algorithm, shape, layout, rng):
    M, N, K = shape
    a, b = make_operands(M, N, K, np.float32, layout, rng, to_device=True)
    out = poisoned((M, N), np.float32, to_device=True, layout=layout)
    if min(shape) > 1:
        check_layouts(layout, a, b, out)
    numba_gemm.matmul(a, b, out, algorithm=algorithm)
    assert_product(out, a, b, np.float32)


@pytest.mark.parametrize("layout", ["row", "b_col"])  # cp.async copies; register-staged B
@pytest.mark.parametrize(
    "config",
    [
        numba_gemm.TileConfig(32, 64, 16, 4, 4, 3, 1, split_k=4),
        numba_gemm.TileConfig(64, 128, 16, 4, 8, 3, 8, split_k=2),
        numba_gemm.TileConfig(16, 32, 16, 4, 4, 2, 1, split_k=4),
    ],
    ids=lambda c: c.label(),
)
def test_split_k_configs_on_gpu(config, layout, rng):
    # 512, 256 and 128 threads per CTA, k sliced over the groups (1: all but one group past
    # K). Groups of 128 and 256 threads meet at a hardware barrier each, groups of one warp
    # at the warp's (tiled._group_barrier).
    for M, N, K in [(1, 1, 1), (257, 1023, 129), (512, 512, 512), (100, 70, 3000)]:
        a, b = make_operands(M, N, K, np.float32, layout, rng, to_device=True)
        out = poisoned((M, N), np.float32, to_device=True, layout=layout)
        numba_gemm.matmul(a, b, out, algorithm="tiled", config=config)
        assert_product(out, a, b, np.float32)


@pytest.mark.parametrize("algorithm", FFMA_ALGORITHMS)
def test_float64_on_gpu(algorithm, rng):
    N = 7 if algorithm == "skinny" else 211
    a, b = make_operands(300, N, 401, np.float64, "sliced", rng, to_device=True)
    assert_product(numba_gemm.matmul(a, b, algorithm=algorithm), a, b, np.float64)


@pytest.mark.parametrize("algorithm", ["mnk", "kmn"])
def test_numpy_in_numpy_out_on_gpu(algorithm, rng):
    a, b = make_operands(129, 65, 33, np.float32, "sliced", rng)
    base = poisoned((70, 300), np.float32)
    out = base[:65, ::2][:, :129].T  # a strided, column-major host output
    assert numba_gemm.matmul(a, b, out, algorithm=algorithm) is out
    assert_product(out, a, b, np.float32)
    c = numba_gemm.matmul(a, b, algorithm=algorithm)
    assert isinstance(c, np.ndarray)
    assert_product(c, a, b, np.float32)


def test_torch_tensors(rng):
    torch = pytest.importorskip("torch")
    a = torch.randn(200, 300, device="cuda").T  # transposed view, no copy
    b = torch.randn(200, 100, device="cuda")
    c = numba_gemm.matmul(a, b, algorithm="nmk")
    ref = a.double().cpu().numpy() @ b.double().cpu().numpy()
    assert relative_error(c, ref) <= tolerance(np.float32, 200)
    out = torch.full((300, 100), float("nan"), device="cuda")
    numba_gemm.matmul(a, b, out, algorithm="mnk")
    assert relative_error(out.cpu().numpy(), ref) <= tolerance(np.float32, 200)


class CAIOnly:
    """Exposes only the CUDA array interface of the wrapped tensor."""

    def __init__(self, x):
        self.__cuda_array_interface__ = x.__cuda_array_interface__
        self._x = x


def test_cuda_array_interface_objects(rng):
    torch = pytest.importorskip("torch")
    a = torch.randn(64, 48, device="cuda")[:, 1::2]  # strided
    b = torch.randn(40, 24, device="cuda").T  # column-major
    torch.cuda.synchronize()
    out = torch.full((64, 40), float("nan"), device="cuda")
    numba_gemm.matmul(CAIOnly(a), CAIOnly(b), CAIOnly(out))
    ref = a.double().cpu().numpy() @ b.double().cpu().numpy()
    assert relative_error(out.cpu().numpy(), ref) <= tolerance(np.float32, 24)


class DLPackOnly:
    """Exposes only the DLPack protocol of the wrapped tensor."""

    def __init__(self, x):
        self._x = x

    def __dlpack__(self, **kwargs):
        return self._x.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._x.__dlpack_device__()


def test_dlpack_objects(rng):
    torch = pytest.importorskip("torch")
    a = torch.randn(64, 48, device="cuda")[::2]  # strided
    b = torch.randn(48, 17, device="cuda")
    c = numba_gemm.matmul(DLPackOnly(a), DLPackOnly(b))
    ref = a.double().cpu().numpy() @ b.double().cpu().numpy()
    assert relative_error(c, ref) <= tolerance(np.float32, 48)


def test_jax_gpu_arrays(rng):
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX has no GPU backend here")
    a = jax.device_put(rng.standard_normal((40, 30)).astype(np.float32))
    b = jax.device_put(rng.standard_normal((30, 20)).astype(np.float32))
    c = numba_gemm.matmul(a, b)
    assert_product(c, np.asarray(a), np.asarray(b), np.float32)


def test_transpose_view_of_a_numba_device_array_shares_memory():
    from numba import cuda

    base = cuda.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    view = numba_gemm.transpose_view(base)
    d = numba_gemm.describe(view)
    assert d.shape == (4, 3) and d.strides == (1, 4)
    assert d.address == numba_gemm.describe(base).address
    np.testing.assert_array_equal(view.copy_to_host(), np.arange(12).reshape(3, 4).T)


def test_device_out_overlapping_input_is_refused(rng):
    a, b = make_operands(32, 32, 32, np.float32, "row", rng, to_device=True)
    with pytest.raises(ValueError, match="out overlaps a"):
        numba_gemm.matmul(a, b, a)


def test_device_clock_waits_for_jax_streams():
    """The benchmark clock must bracket XLA's work, which runs on XLA's own streams."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from numba_gemm.timing import device_clock

    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX has no GPU backend here")
    x = jnp.ones((4096, 4096), jnp.float32)
    f = jax.jit(lambda x: jnp.matmul(x, x, precision="highest"))
    f(x).block_until_ready()

    def clocked(block: bool) -> float:
        start = device_clock()
        y = f(x)
        if block:
            y.block_until_ready()
        return device_clock() - start  # not blocked: the clock itself must wait for it

    # A clock that did not wait would read the dispatch alone (~50 us, against ~3 ms for the
    # product). Other processes on the GPU (the parallel test shards) only lengthen either
    # reading, so the least contended blocked run is compared with the longest unblocked one.
    blocked = min(clocked(True) for _ in range(5))
    unblocked = max(clocked(False) for _ in range(3))
    assert unblocked >= 0.5 * blocked, (unblocked, blocked)


def test_explicit_stream_with_foreign_arrays(rng):
    """DLPack producers are ordered before the launch stream; NumPy results wait for it."""
    torch = pytest.importorskip("torch")
    from numba import cuda

    stream = cuda.stream()
    a = torch.randn(300, 200, device="cuda")
    b = torch.randn(200, 100, device="cuda")
    c = numba_gemm.matmul(DLPackOnly(a), DLPackOnly(b), stream=stream)
    stream.synchronize()
    ref = a.double().cpu().numpy() @ b.double().cpu().numpy()
    assert relative_error(c, ref) <= tolerance(np.float32, 200)
    a_host, b_host = a.cpu().numpy(), b.cpu().numpy()
    assert relative_error(numba_gemm.matmul(a_host, b_host, stream=stream), ref) <= tolerance(
        np.float32, 200
    )


def _shipped_configs():
    from numba_gemm.kernels.tiled import DEFAULT_CONFIGS
    from numba_gemm.tuned_configs import SEARCH_SPACE

    configs = {(dtype, config) for dtype, space in SEARCH_SPACE.items() for config in space}
    return sorted(configs | {(d, c) for d, c in DEFAULT_CONFIGS.items()}, key=str)


@pytest.mark.parametrize(
    "dtype, config", _shipped_configs(), ids=lambda x: getattr(x, "label", lambda: str(x))()
)
def test_every_shipped_config_is_correct_and_spill_free(dtype, config, rng):
    from numba_gemm.descriptor import describe
    from numba_gemm.kernels.tiled import kernel_resources

    # Every edge of every tile shape; then whole tiles (the specialisation without edge code,
    # whose k loop reloads the last k-tile rather than test for the end).
    whole = (2 * config.block_m, 3 * config.block_n, 3 * config.block_k * config.split_k)
    for M, N, K in [(1000, 1023, 517), whole]:
        a, b = make_operands(M, N, K, dtype, "row", rng, to_device=True)
        out = poisoned((M, N), dtype, to_device=True)
        numba_gemm.matmul(a, b, out, algorithm="tiled", config=config)
        assert_product(out, a, b, dtype)
        descs = describe(a, "a"), describe(b, "b"), describe(out, "out")
        resources = kernel_resources(config, *descs)
        assert resources["local_bytes"] == 0, f"{config.label()} spills at {M}x{N}x{K}: {resources}"


@pytest.mark.parametrize("layout", ["row", "a_col"])
def test_tune_checks_times_and_stores_the_fastest(layout, tmp_path):
    from numba_gemm.autotune import tune
    from numba_gemm.kernels.tiled import TileConfig
    from numba_gemm.tuned_configs import _load

    # Ragged (edge code) and small, so the prepared launches it times are the kernel's alone.
    configs = (TileConfig(64, 64, 16, 4, 4, 3, 8), TileConfig(64, 128, 16, 4, 8, 3, 8))
    path = tmp_path / "tuning.json"
    lines = []
    results = tune(192, 160, 96, layout=layout, configs=configs, save=path, progress=lines.append)
    assert {r["config"] for r in results} == set(configs)
    assert [r["seconds"] for r in results] == sorted(r["seconds"] for r in results)
    assert all(r["error"] <= tolerance(np.float32, 96) and r["local_bytes"] == 0 for r in results)
    (entry,) = _load(path).values()
    assert TileConfig(**entry["config"]) == results[0]["config"]
    assert entry["shape"] == [192, 160, 96] and entry["layout"] == (
        "row-row" if layout == "row" else "col-row"
    )
    assert lines[-1].startswith("best: ")


# -- fresh outputs: launch.new_device_array (a stream-ordered pool) --------------------------


def _pool_bytes_in_use() -> int:
    """Bytes of the memory pool in use, once every dropped array has gone back (collected, and
    its stream-ordered free done)."""
    import gc

    from cuda.bindings import driver as cu
    from numba import cuda

    from numba_gemm.launch import _memory_pool

    gc.collect()
    cuda.synchronize()
    attribute = cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_USED_MEM_CURRENT
    error, used = cu.cuMemPoolGetAttribute(
        _memory_pool(cuda.current_context().device.id), attribute
    )
    assert error == cu.CUresult.CUDA_SUCCESS
    return int(used)


@pytest.mark.parametrize(
    "shape, dtype", [((1, 1), np.float32), ((513, 77), np.float64), ((3, 5, 7), np.float32)]
)
def test_new_device_arrays_are_row_major_distinct_and_writable(shape, dtype, rng):
    from numba_gemm.launch import new_device_array

    first, second = new_device_array(shape, dtype), new_device_array(shape, dtype)
    assert first.shape == shape and first.dtype == dtype and first.is_c_contiguous()
    start = first.device_ctypes_pointer.value
    other = second.device_ctypes_pointer.value
    assert other >= start + first.nbytes or start >= other + second.nbytes, "overlapping arrays"
    values = rng.standard_normal(shape).astype(dtype)
    first.copy_to_device(values)
    second.copy_to_device(-values)
    np.testing.assert_array_equal(first.copy_to_host(), values)
    np.testing.assert_array_equal(second.copy_to_host(), -values)


def test_dropped_outputs_go_back_to_the_pool(rng):
    a, b = make_operands(256, 256, 256, np.float32, "row", rng, to_device=True)
    before = _pool_bytes_in_use()  # earlier tests' dropped outputs are back first
    results = [numba_gemm.matmul(a, b) for _ in range(4)]
    assert _pool_bytes_in_use() >= before + 4 * 256 * 256 * 4
    assert_product(results[-1], a, b, np.float32)
    del results
    assert _pool_bytes_in_use() == before


def test_an_output_dropped_in_another_thread_goes_back_to_the_pool(rng):
    import gc
    import threading

    a, b = make_operands(256, 256, 256, np.float32, "row", rng, to_device=True)
    before = _pool_bytes_in_use()
    results = [numba_gemm.matmul(a, b)]
    assert_product(results[0], a, b, np.float32)

    def drop():  # a new thread: no CUDA context is current in it
        results.clear()
        gc.collect()

    thread = threading.Thread(target=drop)
    thread.start()
    thread.join()
    assert _pool_bytes_in_use() == before


def test_fresh_output_on_a_stream_keeps_its_stream_alive(rng):
    import gc

    from numba import cuda

    a, b = make_operands(300, 200, 100, np.float32, "sliced", rng, to_device=True)
    stream = cuda.stream()
    out = numba_gemm.matmul(a, b, stream=stream)
    del stream  # the output's memory is given back on it later, so it must stay alive
    gc.collect()
    assert_product(out, a, b, np.float32)
    del out
    gc.collect()
    cuda.synchronize()


def test_outputs_dropped_while_the_interpreter_exits_are_left_to_the_driver():
    # At exit Numba's finalizers destroy its streams first; a free on one had crashed the
    # interpreter after the last test. Past Numba's shutdown hook nothing is freed.
    from numba_gemm.launch import new_device_array

    memory = new_device_array((4, 4), np.float32).gpu_data
    freed = []
    memory.__del__(free=lambda *args: freed.append(args), exiting=lambda: True)
    assert freed == []
    memory.__del__(free=lambda *args: freed.append(args), exiting=lambda: False)  # no free yet
    assert freed == [(memory.device_pointer, memory._stream_handle)]


def test_an_allocation_too_large_says_so():
    from numba_gemm.launch import new_device_array

    with pytest.raises(
        RuntimeError, match=r"allocating \d+ bytes \(cuMemAllocFromPoolAsync\) failed"
    ):
        new_device_array((1 << 22, 1 << 22), np.float32)  # 64 TiB


# -- repeated calls: numba_gemm.prepared ----------------------------------------------------


@pytest.mark.parametrize("with_out", [True, False], ids=["out", "no-out"])
@pytest.mark.parametrize("algorithm", ["auto", "tiled", "mnk"])
def test_repeated_matmul_calls_launch_a_prepared_plan(
    algorithm, with_out, rng, monkeypatch, poisoned_fresh_outputs
):
    from numba_gemm import api

    a, b = make_operands(300, 100, 200, np.float32, "sliced", rng, to_device=True)
    plans = []
    plan = api.plan
    monkeypatch.setattr(api, "plan", lambda *args, **kw: plans.append(1) or plan(*args, **kw))
    out = poisoned((300, 100), np.float32, to_device=True) if with_out else None
    results = []
    for _ in range(3):
        if with_out:
            out.copy_to_device(np.full((300, 100), np.nan, np.float32))
        results.append(numba_gemm.matmul(a, b, out, algorithm=algorithm))
        assert_product(results[-1], a, b, np.float32)  # each call's result, before the next
    assert len(plans) == 1  # planned once, then launched from the cache
    addresses = {c.device_ctypes_pointer.value for c in results}
    assert len(addresses) == (1 if with_out else 3)
    # Other arrays of the same signature (a view of the same memory, new operands elsewhere)
    # take the same plan; another argument plans again.
    other, _ = make_operands(300, 100, 200, np.float32, "sliced", rng, to_device=True)
    for x in (a[:, :], other):
        assert_product(numba_gemm.matmul(x, b, out, algorithm=algorithm), x, b, np.float32)
    assert len(plans) == 1
    numba_gemm.matmul(a, b, out, algorithm="nmk")
    assert len(plans) == 2


def test_new_tuning_results_replace_prepared_plans(rng, tmp_path, monkeypatch):
    from numba_gemm import api, tuned_configs

    a, b = make_operands(64, 64, 64, np.float32, "row", rng, to_device=True)
    out = poisoned((64, 64), np.float32, to_device=True)
    plans = []
    plan = api.plan
    monkeypatch.setattr(api, "plan", lambda *args, **kw: plans.append(1) or plan(*args, **kw))
    numba_gemm.matmul(a, b, out, algorithm="tiled")
    numba_gemm.matmul(a, b, out, algorithm="tiled")
    assert len(plans) == 1
    best = {"config": numba_gemm.TileConfig(32, 32, 16, 4, 4, 2, 1), "seconds": 1.0, "tflops": 1.0}
    tuned_configs.store(
        tmp_path / "tuning.json", "dev", "sm_90", np.float32, "row-row", (64, 64, 64), best
    )
    numba_gemm.matmul(a, b, out, algorithm="tiled")
    assert len(plans) == 2
    assert_product(out, a, b, np.float32)
