"""Property tests (hypothesis): random shapes (zero included), layouts, strides, batches and
dtypes for every algorithm of ``matmul`` and ``triple``, and for the JAX bridge, each result
against float64 NumPy within the dtype's tolerance for its K, outputs poisoned with NaN.

Small on the simulator (CI); on a GPU larger sizes and more examples. Seeds are derived from the
test (``derandomize``), so a run is repeatable; a failure prints the falsifying example.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import numba_gemm  # noqa: E402
from numba_gemm.api import FFMA_ALGORITHMS as ALGORITHMS  # noqa: E402
from numba_gemm.kernels.skinny import SKINNY_M  # noqa: E402
from numba_gemm.launch import SIMULATED  # noqa: E402
from numba_gemm.reference import tolerance  # noqa: E402
from numba_gemm.triple_product import ORDERS, TRIPLE_ALGORITHMS  # noqa: E402

ON_GPU = not SIMULATED
MAX_EXTENT = 140 if ON_GPU else 20
EXAMPLES = 30 if ON_GPU else 40

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DTYPES = (np.float32, np.float64)
# How an operand is laid out: a plain array, its transpose, a strided slice, flipped (negative
# strides: NumPy operands only, copied by matmul), or a broadcast row (stride 0).
VIEWS = ("row", "col", "sliced", "flipped", "broadcast")


def _extent(upper=MAX_EXTENT):
    # Mostly small and odd, sometimes 0 or 1, sometimes near a tile edge.
    return st.one_of(st.integers(0, 2), st.integers(1, upper), st.sampled_from([16, 17, 31, 33]))


def _view(draw, rng, batch: tuple, rows: int, cols: int, dtype, device: bool):
    """A (batch..., rows, cols) operand in a drawn view, and its values as a NumPy array."""
    views = [v for v in VIEWS if not (device and v in ("flipped", "broadcast"))]
    if "broadcast" in views and (rows != 1 or batch):
        views.remove("broadcast")
    view = draw(st.sampled_from(views))
    shape = (*batch, rows, cols)
    if view == "col":
        base = rng.standard_normal((*batch, cols, rows)).astype(dtype)
        host = np.swapaxes(base, -1, -2)
    elif view == "sliced":
        base = rng.standard_normal((*batch, 2 * rows + 1, 3 * cols + 2)).astype(dtype)
        host = base[..., 1::2, 2::3][..., :rows, :cols]
    elif view == "flipped":
        base = rng.standard_normal(shape).astype(dtype)
        host = base[..., ::-1, ::-1]
    elif view == "broadcast":
        base = rng.standard_normal((1, cols)).astype(dtype)
        host = np.broadcast_to(base, shape)
    else:
        base = host = rng.standard_normal(shape).astype(dtype)
    if not device:
        return host, host
    on_device = cuda.to_device(base)
    if view == "col":
        return _swap_last(on_device), host
    if view == "sliced":  # the view of base[..., 1::2, 2::3][..., :rows, :cols]
        return _strided(on_device, (1, 2), (rows, cols), (2, 3)), host
    return on_device, host


def _swap_last(x):
    """A view of device array ``x`` with its last two axes swapped (no copy)."""
    return _strided(x, (0, 0), x.shape[-1:-3:-1], (1, 1), swap=True)


def _strided(x, start: tuple, shape: tuple, steps: tuple, swap: bool = False):
    """A view of device array ``x`` (no copy): its last two axes from ``start`` in ``steps``,
    ``shape`` elements, swapped first where ``swap``. Built from the array interface, since
    Numba's slicing refuses empty views of non-empty arrays, and takes no Ellipsis."""
    cai = x.__cuda_array_interface__
    strides = list(cai["strides"] or x.strides)
    if swap:
        strides[-1], strides[-2] = strides[-2], strides[-1]
    offset = start[0] * strides[-2] + start[1] * strides[-1]
    strides[-2], strides[-1] = strides[-2] * steps[0], strides[-1] * steps[1]
    pointer = cai["data"][0] + offset if x.size else cai["data"][0]
    return cuda.from_cuda_array_interface(
        {
            **cai,
            "data": (pointer, False),
            "shape": (*cai["shape"][:-2], *shape),
            "strides": tuple(strides),
        },
        owner=x,
    )


def _host(x):
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def _check(result, operands, dtype, K: int):
    """``result`` against the float64 product of the host ``operands``: elementwise, each error
    within the dtype's tolerance for K times that element's product of absolute values (the
    scale rounding errors are relative to: a single dot product may cancel to near 0)."""
    result = _host(result)
    operands = [x.astype(np.float64) for x in operands]
    expected, scale = operands[0], np.abs(operands[0])
    for x in operands[1:]:
        expected, scale = np.matmul(expected, x), np.matmul(scale, np.abs(x))
    assert result.shape == expected.shape and result.dtype == dtype
    if expected.size == 0 or K == 0:
        np.testing.assert_array_equal(result, np.zeros(expected.shape, dtype))
        return
    error = np.abs(result - expected)
    assert not np.isnan(result).any(), "NaN in the result (an element left unwritten)"
    worst = float(np.max(error / np.maximum(scale, np.finfo(np.float64).tiny)))
    assert worst <= tolerance(dtype, K), f"error {worst:.3g} of the scale"


@SETTINGS
@given(data=st.data())
def test_matmul_matches_numpy(data):
    draw = data.draw
    dtype = draw(st.sampled_from(DTYPES))
    algorithm = draw(st.sampled_from(ALGORITHMS))
    M, N, K = draw(_extent()), draw(_extent()), draw(_extent())
    if algorithm == "skinny" and min(M, N) > SKINNY_M:  # its results have few rows or columns
        N = draw(st.integers(0, SKINNY_M))
    batch_a = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    batch_b = tuple(1 if draw(st.booleans()) else n for n in batch_a)  # broadcast some axes
    if draw(st.booleans()):
        batch_a, batch_b = batch_b, batch_a
    device = ON_GPU and draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a, a_host = _view(draw, rng, batch_a, M, K, dtype, device)
    b, b_host = _view(draw, rng, batch_b, K, N, dtype, device)
    out = None
    if draw(st.booleans()):  # a poisoned out
        out = np.full(np.matmul(a_host[..., :0, :], b_host).shape[:-2] + (M, N), np.nan, dtype)
        out = cuda.to_device(out) if device else out
    result = numba_gemm.matmul(a, b, out, algorithm=algorithm)
    assert out is None or result is out
    _check(result, (a_host, b_host), dtype, K)


@SETTINGS
@given(data=st.data())
def test_vectors_match_numpy(data):
    draw = data.draw
    K, N = draw(_extent()), draw(_extent())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = rng.standard_normal(K).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    if draw(st.booleans()):
        a, b = b.T.copy(), a  # matrix @ vector
    _check(numba_gemm.matmul(a, b), (a, b), np.float32, K)


@SETTINGS
@given(data=st.data())
def test_triple_matches_numpy(data):
    draw = data.draw
    dtype = draw(st.sampled_from(DTYPES))
    algorithm = draw(st.sampled_from(TRIPLE_ALGORITHMS))
    order = draw(st.sampled_from(ORDERS))
    M, K1, K2, N = (draw(_extent()) for _ in range(4))
    if algorithm == "naive":
        K2, N = min(K2, 1024), min(N, 1024)
    device = ON_GPU and draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    (a, a_host), (b, b_host), (c, c_host) = (
        _view(draw, rng, (), rows, cols, dtype, device)
        for rows, cols in ((M, K1), (K1, K2), (K2, N))
    )
    result = numba_gemm.triple(a, b, c, algorithm=algorithm, order=order)
    _check(result, (a_host, b_host, c_host), dtype, K1 + K2)


@settings(max_examples=12 if not ON_GPU else 40, deadline=None, derandomize=True)
@given(data=st.data())
def test_jax_bridge_matches_numpy(data):
    jax = pytest.importorskip("jax")
    import jax_bridge

    draw = data.draw
    M, N, K = draw(_extent()), draw(_extent()), draw(_extent())
    transpose_a, transpose_b = draw(st.booleans()), draw(st.booleans())
    batch = draw(st.integers(0, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = rng.standard_normal((K, M) if transpose_a else (M, K)).astype(np.float32)
    b = rng.standard_normal((N, K) if transpose_b else (K, N)).astype(np.float32)
    a_op = a.T if transpose_a else a
    b_op = b.T if transpose_b else b

    def product(a, b):
        return jax_bridge.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)

    if batch:
        a_batch = np.stack([a_op * (i + 1) for i in range(batch)])
        a_in = np.stack([a * (i + 1) for i in range(batch)])
        result = jax.jit(jax.vmap(product, in_axes=(0, None)))(a_in, b)
        _check(np.asarray(result), (a_batch, b_op), np.float32, K)
    else:
        _check(np.asarray(jax.jit(product)(a, b)), (a_op, b_op), np.float32, K)
