"""The triple product on a real GPU (marker `gpu`): square up to 2048, N = 1025 past the naive
kernel's limit, rectangular chains in both orders, layouts, stream-K, float64 and foreign
arrays."""

import numpy as np
import pytest

import numba_gemm
import numba_gemm.triple_product as triple_product
from checks import assert_triple
from jax_bridge.lowering import KERNEL_CALL_TARGET
from numba_gemm.kernels.tiled import TileConfig
from numba_gemm.launch import multiprocessors
from numba_gemm.reference import make_triple_operands, poisoned, relative_error
from numba_gemm.triple_product import _COUNTERS, SMALL_FUSED_CONFIGS

pytestmark = pytest.mark.gpu

SQUARE = [64, 512, 1024, 1025, 1536, 2048]  # 1536: stream-K (triple_product.fused_workers)
# (M, K1, K2, N): tall, wide, thin middle, thick middle, odd everywhere.
RECTANGULAR = [
    (1000, 300, 517, 1023),
    (64, 2048, 128, 1500),
    (1500, 7, 1300, 33),
    (333, 1111, 2000, 77),
    (1, 1024, 997, 1),
]


@pytest.mark.parametrize(
    "n, algorithm",
    [
        (n, algorithm)
        for n in SQUARE
        for algorithm in ("naive", "fused", "unfused", "auto")
        if algorithm != "naive" or n <= 1024
    ],
)  # its limit
def test_square(n, algorithm, rng):
    a, b, c = make_triple_operands(n, n, n, n, np.float32, "row", rng, to_device=True)
    out = poisoned((n, n), np.float32, to_device=True)
    numba_gemm.triple(a, b, c, out, algorithm=algorithm)
    assert_triple(out, a, b, c, np.float32)


def test_naive_refuses_past_its_limit(rng):
    a, b, c = make_triple_operands(1025, 1025, 1025, 1025, np.float32, "row", rng, to_device=True)
    with pytest.raises(ValueError, match="use algorithm='fused'"):
        numba_gemm.triple(a, b, c, algorithm="naive")


@pytest.mark.parametrize("layout", ["row", "mixed", "sliced"])
@pytest.mark.parametrize("order", ["left", "right"])
@pytest.mark.parametrize("shape", RECTANGULAR, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("algorithm", ["fused", "unfused"])
def test_rectangular(algorithm, shape, order, layout, rng):
    a, b, c = make_triple_operands(*shape, np.float32, layout, rng, to_device=True)
    out = poisoned(
        (shape[0], shape[3]),
        np.float32,
        to_device=True,
        layout="col" if layout == "mixed" else layout,
    )
    numba_gemm.triple(a, b, c, out, algorithm=algorithm, order=order)
    assert_triple(out, a, b, c, np.float32)


# The small-problem defaults, the tuned tiles of large products, and split-k with 1024 threads.
FUSED_CONFIGS = [
    *SMALL_FUSED_CONFIGS[np.dtype(np.float32)],
    TileConfig(128, 256, 16, 8, 16, 3, 8),
    TileConfig(64, 128, 16, 4, 8, 3, 8),
    TileConfig(32, 64, 16, 4, 4, 2, 1, split_k=8),
]


@pytest.mark.parametrize("order", ["left", "right"])
@pytest.mark.parametrize("shape", RECTANGULAR, ids=lambda s: "x".join(map(str, s)))
def test_stream_k_rectangular(shape, order, rng, monkeypatch):
    # Stream-K on every chain (one worker per SM, ranges across tiles), whatever the waves.
    monkeypatch.setattr(triple_product, "STREAM_K_FROM_IDLE", -1.0)
    config = TileConfig(64, 128, 16, 4, 8, 3, 8)
    M, K1, K2, N = shape if order == "left" else shape[::-1]
    assert triple_product.fused_workers(config, M, K1, K2, N) is not None
    a, b, c = make_triple_operands(*shape, np.float32, "mixed", rng, to_device=True)
    out = poisoned((shape[0], shape[3]), np.float32, to_device=True, layout="col")
    for _ in range(2):  # the counters and flags are zero again for the second launch
        numba_gemm.triple(a, b, c, out, algorithm="fused", order=order, config=config)
        assert_triple(out, a, b, c, np.float32)


def test_stream_k_runs_at_1536(rng):
    config = triple_product.fused_config(1536, 1536, 1536, 1536, np.float32)
    if triple_product.multiprocessors() != 132:
        pytest.skip("the 1536 case is measured on 132-SM GPUs (H100/H200 SXM)")
    assert triple_product.fused_workers(config, 1536, 1536, 1536, 1536) == (132, 132)


@pytest.mark.parametrize("layout", ["row", "mixed"])
@pytest.mark.parametrize("n", [640, 768, 960, 1024])
def test_small_chains_two_ctas_per_sm(n, layout, rng, monkeypatch):
    # The small split-k tiles (1024: the tuned ones) two CTAs per SM, T row-major
    # (triple_product.fused_ctas_per_sm): the same bits on a second call, as the counters are
    # zero again.
    launched = []
    plan_fused = triple_product.plan_fused
    monkeypatch.setattr(
        triple_product, "plan_fused", lambda *args: launched.append(args) or plan_fused(*args)
    )
    a, b, c = make_triple_operands(n, n, n, n, np.float32, layout, rng, to_device=True)
    results = []
    for _ in range(2):
        out = poisoned((n, n), np.float32, to_device=True)
        numba_gemm.triple(a, b, c, out, algorithm="fused", order="left")
        assert_triple(out, a, b, c, np.float32)
        results.append(out.copy_to_host())
    np.testing.assert_array_equal(results[0], results[1])
    config, *_, ctas_per_sm, column_order = launched[0]
    assert ctas_per_sm == triple_product.fused_ctas_per_sm(config, n, n, n, n, np.float32)
    assert column_order == triple_product.fused_t_column_order(config, n, n, n, n, np.float32)
    if n == 1024 and multiprocessors() == 132:  # H100 SXM, H200: 256 T tiles in 264 slots
        assert column_order
    if n == 768:  # 288 tiles of T under the small tiles: 1.5 per SM up to 192 SMs
        assert config.split_k > 1 and ctas_per_sm == 2
    if ctas_per_sm == 2:
        assert launched[0][5].strides == (launched[0][5].strides[0], 1)  # T row-major


@pytest.mark.parametrize("config", FUSED_CONFIGS, ids=lambda c: c.label())
def test_every_fused_config(config, rng):
    # Edges everywhere; then whole tiles, k-tiles and split-k slices (no edge code).
    whole = (
        2 * config.block_m,
        4 * config.block_k * config.split_k,
        2 * config.block_n,
        3 * config.block_n,
    )
    for M, K1, K2, N in [(700, 333, 1000, 517), whole]:
        a, b, c = make_triple_operands(M, K1, K2, N, np.float32, "mixed", rng, to_device=True)
        out = poisoned((M, N), np.float32, to_device=True)
        numba_gemm.triple(a, b, c, out, algorithm="fused", order="left", config=config)
        assert_triple(out, a, b, c, np.float32)


@pytest.mark.parametrize("algorithm", ["naive", "fused", "unfused"])
def test_float64(algorithm, rng):
    a, b, c = make_triple_operands(300, 211, 401, 150, np.float64, "sliced", rng, to_device=True)
    assert_triple(numba_gemm.triple(a, b, c, algorithm=algorithm), a, b, c, np.float64)


def test_repeated_launches_keep_counters_zero(rng):
    """Back-to-back launches of different shapes on one stream reuse the counters."""
    chains = [
        make_triple_operands(*s, np.float32, "row", rng, to_device=True)
        for s in [(1000, 64, 1000, 1000), (130, 500, 70, 900), (2048, 32, 512, 64)]
    ]
    outs = [numba_gemm.triple(*abc, algorithm="fused", order="left") for abc in chains * 3]
    for abc, out in zip(chains * 3, outs):
        assert_triple(out, *abc, np.float32)
    for counters in _COUNTERS.buffers("sync"):
        assert not np.any(counters.copy_to_host())


def test_host_arrays_on_gpu(rng):
    a, b, c = make_triple_operands(129, 65, 200, 33, np.float32, "sliced", rng)
    out = poisoned((129, 33), np.float32, layout="sliced")
    assert numba_gemm.triple(a, b, c, out, algorithm="fused") is out
    assert_triple(out, a, b, c, np.float32)


def test_torch_tensors(rng):
    torch = pytest.importorskip("torch")
    a = torch.randn(300, 200, device="cuda").T  # transposed view, no copy
    b, c = torch.randn(300, 400, device="cuda"), torch.randn(400, 100, device="cuda")
    out = torch.full((200, 100), float("nan"), device="cuda")
    numba_gemm.triple(a, b, c, out)
    assert_triple(out.cpu().numpy(), a.cpu().numpy(), b.cpu().numpy(), c.cpu().numpy(), np.float32)


@pytest.mark.parametrize("algorithm, kernel_calls", [("fused", 1), ("naive", 1), ("unfused", 2)])
def test_jax_bridge_native(algorithm, kernel_calls, rng):
    jax = pytest.importorskip("jax")
    import jax_bridge

    n = 1000 if algorithm == "naive" else 1025
    a, b, c = (
        jax.device_put(x)
        for x in make_triple_operands(n, n - 7, n + 3, n - 1, np.float32, "row", rng)
    )
    f = jax.jit(lambda a, b, c: jax_bridge.triple(a, b, c, algorithm=algorithm, order="left"))
    hlo = f.lower(a, b, c).compile().as_text()
    assert hlo.count(KERNEL_CALL_TARGET) == kernel_calls
    assert "callback" not in hlo
    assert_triple(np.asarray(f(a, b, c)), np.asarray(a), np.asarray(b), np.asarray(c), np.float32)


@pytest.mark.parametrize(
    "n",
    [
        768,  # the small split-k tiles two CTAs per SM, under XLA's launch too
        1536,  # stream-K: its partial tiles are one more scratch output
    ],
)
def test_jax_bridge_fused_variants(n, rng):
    jax = pytest.importorskip("jax")
    import jax_bridge

    a, b, c = (jax.device_put(x) for x in make_triple_operands(n, n, n, n, np.float32, "row", rng))
    f = jax.jit(lambda a, b, c: jax_bridge.triple(a, b, c, algorithm="fused", order="left"))
    assert f.lower(a, b, c).compile().as_text().count(KERNEL_CALL_TARGET) == 1
    for _ in range(2):
        assert_triple(
            np.asarray(f(a, b, c)), np.asarray(a), np.asarray(b), np.asarray(c), np.float32
        )


def test_jax_bridge_grad_and_right_order(rng):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import jax_bridge

    a, b, c = (
        jax.device_put(x) for x in make_triple_operands(300, 20, 400, 10, np.float32, "row", rng)
    )
    d = jax.jit(jax_bridge.triple)(a, b, c)  # auto: the right order is cheaper
    assert_triple(np.asarray(d), np.asarray(a), np.asarray(b), np.asarray(c), np.float32)
    # A weighted sum: its gradients are products of the operands only (a loss like sum(sin(d))
    # would amplify D's last-bit differences by cos at |d| ~ 100).
    w = jax.device_put(rng.standard_normal((300, 10)).astype(np.float32))
    hi = jax.lax.Precision.HIGHEST
    ours = jax.jit(jax.grad(lambda *x: jnp.sum(w * jax_bridge.triple(*x)), argnums=(0, 1, 2)))
    theirs = jax.grad(
        lambda a, b, c: jnp.sum(w * jnp.matmul(jnp.matmul(a, b, precision=hi), c, precision=hi)),
        argnums=(0, 1, 2),
    )
    for x, y in zip(ours(a, b, c), theirs(a, b, c)):
        assert relative_error(np.asarray(x), np.asarray(y, np.float64)) <= 1e-5


@pytest.mark.parametrize("algorithm", ["fused", "unfused"])
def test_repeated_calls_reuse_a_prepared_launch(algorithm, rng, monkeypatch):
    import gc
    import weakref

    from numba_gemm import triple_product

    a, b, c = make_triple_operands(300, 200, 500, 100, np.float32, "row", rng, to_device=True)
    out = poisoned((300, 100), np.float32, to_device=True)
    plans = []
    plan_triple = triple_product.plan_triple
    monkeypatch.setattr(
        triple_product,
        "plan_triple",
        lambda *args, **kw: plans.append(1) or plan_triple(*args, **kw),
    )
    for _ in range(3):
        out.copy_to_device(np.full((300, 100), np.nan, np.float32))
        assert numba_gemm.triple(a, b, c, out, algorithm=algorithm) is out
        assert_triple(out, a, b, c, np.float32)
    assert len(plans) == 1  # planned once, then launched from the cache
    # The prepared call holds no array: once the caller drops them, they are gone.
    refs = [weakref.ref(x) for x in (a, b, c, out)]
    del a, b, c, out
    gc.collect()
    assert all(ref() is None for ref in refs)


@pytest.mark.parametrize("order", ["left", "right"])
@pytest.mark.parametrize("algorithm", ["fused", "unfused", "naive"])
def test_repeated_calls_without_out_launch_into_a_fresh_output(
    algorithm, order, rng, monkeypatch, poisoned_fresh_outputs
):
    from numba_gemm import triple_product

    a, b, c = make_triple_operands(300, 200, 500, 100, np.float32, "row", rng, to_device=True)
    plans = []
    plan_triple = triple_product.plan_triple
    monkeypatch.setattr(
        triple_product,
        "plan_triple",
        lambda *args, **kw: plans.append(1) or plan_triple(*args, **kw),
    )
    results = [numba_gemm.triple(a, b, c, algorithm=algorithm, order=order) for _ in range(3)]
    assert len(plans) == 1  # planned once; later calls point the cached launches at a new D
    assert len({d.device_ctypes_pointer.value for d in results}) == 3, "one D per call"
    for d in results:
        assert d.shape == (300, 100) and d.dtype == np.float32
        assert_triple(d, a, b, c, np.float32)
