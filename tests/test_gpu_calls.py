"""The call path on a GPU (marker `gpu`): one plan per signature for PyTorch, CuPy, JAX and Numba
arrays, streams as their frameworks mean them, producers ordered before the launch, CUDA graph
capture and replay, threads sharing a prepared call, and a device check when addresses move."""

import threading

import numpy as np
import pytest

import numba_gemm
from numba_gemm.precision import default_preset, tolerance
from numba_gemm.reference import reference, relative_error

pytestmark = pytest.mark.gpu

SLEEP_CYCLES = 200_000_000  # ~0.1 s at 2 GHz: far longer than any launch the test makes


@pytest.fixture
def plans(monkeypatch):
    """The launches ``matmul`` plans (each prepared call's first)."""
    from numba_gemm import api, prepared

    made = []
    plan = api.plan

    def planned(*args, **kw):
        made.append(plan(*args, **kw))
        return made[-1]

    monkeypatch.setattr(api, "plan", planned)
    prepared.forget_prepared_calls()
    yield made
    prepared.forget_prepared_calls()


def dtype_of(x) -> np.dtype:
    import ml_dtypes  # noqa: F401  (names bfloat16 for NumPy)

    return np.dtype(str(x.dtype).replace("torch.", ""))


def assert_matmul(out, a, b) -> None:
    """``out`` is A @ B within the tolerance of the operands' default preset and out's dtype."""
    dtype = dtype_of(a)
    error = relative_error(out, reference(a, b))
    bound = tolerance(default_preset(dtype), dtype, a.shape[-1], dtype_of(out))
    assert error <= bound, f"relative error {error:.3e} > {bound:.3e}"


def torch_or_skip():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    return torch


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("with_out", [True, False], ids=["out", "no-out"])
@pytest.mark.parametrize("shape", [(300, 200, 120), (1536, 520, 2816)], ids=str)  # (M, K, N)
def test_torch_tensors_of_one_signature_share_a_plan(dtype, with_out, shape, plans):
    """New tensors each call, one plan. bf16 at the larger shape runs (on Hopper) the persistent
    warp-specialised kernel, whose TMA stores go through a tensor map of C: each call must move
    it to that call's output, which a map left at the first would leave NaN."""
    torch = torch_or_skip()
    M, K, N = shape
    for _i in range(3):  # other addresses, one signature
        a = torch.randn(M, K, device="cuda").to(getattr(torch, dtype))
        b = torch.randn(K, N, device="cuda").to(getattr(torch, dtype)).T.contiguous().T
        out = torch.full((M, N), float("nan"), device="cuda") if with_out else None
        result = numba_gemm.matmul(a, b, out)
        assert result is out or not with_out
        assert_matmul(result, a, b)
    assert len(plans) == 1
    if dtype == "bfloat16" and M > 1000 and torch.cuda.get_device_capability() == (9, 0):
        assert plans[0].kernel.py_func.__name__ == "persistent_producer_kernel"


def test_cupy_arrays_of_one_signature_share_a_plan(plans):
    cupy = pytest.importorskip("cupy")
    rng = cupy.random.default_rng(0)
    for _ in range(3):
        a = rng.standard_normal((130, 70), dtype=cupy.float32)
        b = cupy.asfortranarray(rng.standard_normal((70, 90), dtype=cupy.float32))
        out = cupy.full((130, 90), cupy.nan, cupy.float32)
        assert numba_gemm.matmul(a, b, out) is out
        assert_matmul(out, a, b)
    assert len(plans) == 1


def test_jax_arrays_of_one_signature_share_a_plan(plans):
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX has no GPU backend here")
    import jax.numpy as jnp

    for i in range(3):
        a = jax.random.normal(jax.random.key(i), (128, 64), jnp.bfloat16)
        b = jax.random.normal(jax.random.key(i + 10), (64, 96), jnp.bfloat16)
        assert_matmul(numba_gemm.matmul(a, b), a, b)
    assert len(plans) == 1


def test_a_jax_array_still_being_computed_is_waited_for():
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX has no GPU backend here")
    import jax.numpy as jnp

    big = jax.random.normal(jax.random.key(0), (8192, 8192), jnp.float32)
    slow = jax.jit(lambda x: (x @ x @ x @ x)[:256, :256] * 1e-6)
    b = jax.random.normal(jax.random.key(1), (256, 64), jnp.float32)
    slow(big).block_until_ready()  # compiled; the next call is queued, not yet done
    for _ in range(2):  # the second call: the prepared path
        a = slow(big)
        if a.is_ready():
            pytest.skip("the producer finished before the call")
        result = numba_gemm.matmul(a, b)
        assert_matmul(result, a, b)


def test_the_launch_runs_on_torch_current_stream_after_its_producer(plans):
    torch = torch_or_skip()
    side = torch.cuda.Stream()
    source = torch.randn(256, 128, device="cuda")
    b = torch.randn(128, 64, device="cuda")
    torch.cuda.synchronize()
    for _ in range(2):  # the first call and the prepared one
        a = torch.zeros(256, 128, device="cuda")
        out = torch.full((256, 64), float("nan"), device="cuda")
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP_CYCLES)  # the producer is slow ...
            a.copy_(source)  # ... and writes a on the side stream
            numba_gemm.matmul(a, b, out)  # runs on the side stream, after the copy
        side.synchronize()
        assert_matmul(out, source, b)
    assert len(plans) == 1


@pytest.mark.parametrize("kind", ["torch", "int", "numba"])
def test_an_explicit_stream_is_ordered_after_the_producers_stream(kind):
    torch = torch_or_skip()
    from numba import cuda

    consumer = torch.cuda.Stream()
    stream = {
        "torch": consumer,
        "int": consumer.cuda_stream,
        "numba": cuda.external_stream(consumer.cuda_stream),
    }[kind]
    source = torch.randn(256, 128, device="cuda")
    b = torch.randn(128, 64, device="cuda")
    for _ in range(2):
        a = torch.zeros(256, 128, device="cuda")
        out = torch.full((256, 64), float("nan"), device="cuda")
        torch.cuda.synchronize()
        torch.cuda._sleep(SLEEP_CYCLES)  # on the current (default) stream: the producer's
        a.copy_(source)
        numba_gemm.matmul(a, b, out, stream=stream)  # on the consumer stream
        consumer.synchronize()
        assert_matmul(out, source, b)


def test_cupy_current_stream_is_the_launch_stream():
    torch = torch_or_skip()
    cupy = pytest.importorskip("cupy")
    source = cupy.random.default_rng(1).standard_normal((256, 128), dtype=cupy.float32)
    b = cupy.random.default_rng(2).standard_normal((128, 64), dtype=cupy.float32)
    producer = cupy.cuda.Stream(non_blocking=True)
    for _ in range(2):
        a = cupy.zeros((256, 128), cupy.float32)
        out = cupy.full((256, 64), cupy.nan, cupy.float32)
        cupy.cuda.Device().synchronize()
        with producer:
            with torch.cuda.stream(torch.cuda.ExternalStream(producer.ptr)):
                torch.cuda._sleep(SLEEP_CYCLES)
            a[...] = source
            numba_gemm.matmul(a, b, out)
        producer.synchronize()
        assert_matmul(out, source, b)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_captured_torch_graph_replays_the_call(dtype):
    torch = torch_or_skip()
    dtype = getattr(torch, dtype)
    a = torch.randn(512, 256, device="cuda").to(dtype)
    b = torch.randn(256, 384, device="cuda").to(dtype)
    out = torch.empty(512, 384, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on the stream the graph is captured on
        for _ in range(2):
            numba_gemm.matmul(a, b, out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        numba_gemm.matmul(a, b, out)
    for _i in range(3):
        a.copy_(torch.randn(512, 256, device="cuda").to(dtype))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_matmul(out, a, b)


def test_a_plain_stream_capture_replays_the_call():
    from cuda.bindings import driver as cu
    from numba import cuda

    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.standard_normal((200, 100)).astype(np.float32))
    b = cuda.to_device(rng.standard_normal((100, 300)).astype(np.float32))
    out = cuda.device_array((200, 300), np.float32)
    from numba_gemm.launch import stream_handle

    stream = cuda.stream()
    handle = stream_handle(stream)
    numba_gemm.matmul(a, b, out, stream=handle)  # warm-up: compiled, planned
    stream.synchronize()
    mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL
    assert cu.cuStreamBeginCapture(handle, mode)[0] == cu.CUresult.CUDA_SUCCESS
    numba_gemm.matmul(a, b, out, stream=handle)
    error, graph = cu.cuStreamEndCapture(handle)
    assert error == cu.CUresult.CUDA_SUCCESS
    error, executable = cu.cuGraphInstantiate(graph, 0)
    assert error == cu.CUresult.CUDA_SUCCESS
    for _i in range(2):
        a.copy_to_device(rng.standard_normal((200, 100)).astype(np.float32))
        out.copy_to_device(np.full((200, 300), np.nan, np.float32))
        assert cu.cuGraphLaunch(executable, handle)[0] == cu.CUresult.CUDA_SUCCESS
        stream.synchronize()
        assert_matmul(out, a, b)
    cu.cuGraphExecDestroy(executable)
    cu.cuGraphDestroy(graph)


def test_threads_share_a_prepared_call_on_their_own_tensors(plans):
    torch = torch_or_skip()
    errors = []

    def work(seed):
        try:
            torch.cuda.set_device(0)
            generator = torch.Generator(device="cuda").manual_seed(seed)
            for _ in range(20):
                a = torch.randn(96, 64, device="cuda", generator=generator)
                b = torch.randn(64, 80, device="cuda", generator=generator)
                out = torch.full((96, 80), float("nan"), device="cuda")
                numba_gemm.matmul(a, b, out)
                torch.cuda.current_stream().synchronize()
                assert_matmul(out, a, b)
        except Exception as error:  # reported below, with the thread's seed
            errors.append((seed, error))

    torch.randn(1, device="cuda")
    numba_gemm.matmul(torch.ones(96, 64, device="cuda"), torch.ones(64, 80, device="cuda"))
    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    # The main thread's call without out, then one per thread at most (a prepared call holds
    # its thread's scratch, so the key holds the thread); never one per tensor or call.
    assert len(plans) <= 1 + len(threads)


def test_a_tensor_on_another_device_meets_the_first_calls_check(plans):
    torch = torch_or_skip()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    a, b = torch.randn(64, 32, device="cuda:0"), torch.randn(32, 48, device="cuda:0")
    numba_gemm.matmul(a, b)
    with pytest.raises(ValueError, match="GPU 1"):
        numba_gemm.matmul(a.to("cuda:1"), b.to("cuda:1"))


def test_tensors_that_require_grad_are_read_but_never_written(plans):
    """Parameters (``requires_grad``) are operands as they are (PyTorch exports them only
    detached: the same memory); as ``out`` they are refused, as PyTorch refuses in-place writes
    to them."""
    torch = torch_or_skip()
    weight = torch.nn.Parameter(torch.randn(64, 32, device="cuda"))
    for _ in range(2):  # the first call and the prepared one
        x = torch.randn(16, 64, device="cuda")
        assert_matmul(numba_gemm.matmul(x, weight), x, weight)
    with pytest.raises(ValueError, match="requires grad"):
        numba_gemm.matmul(
            torch.randn(64, 16, device="cuda"), x, torch.nn.Parameter(weight @ weight.T)
        )
