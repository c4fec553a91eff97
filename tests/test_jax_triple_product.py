"""jax_bridge.triple on the CPU (kernels on the simulator): jit, orders, algorithms, grad,
vmap and trace-time errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_bridge
from checks import assert_triple
from numba_gemm.reference import relative_error


def _chain(rng, M=5, K1=7, K2=9, N=4, dtype=np.float32):
    return tuple(rng.standard_normal(s).astype(dtype) for s in [(M, K1), (K1, K2), (K2, N)])


@pytest.mark.parametrize("order", ["left", "right", "auto"])
@pytest.mark.parametrize("algorithm", ["auto", "fused", "naive", "unfused"])
def test_jit_matches_float64_reference(algorithm, order, rng):
    a, b, c = _chain(rng, 19, 9, 20, 17)
    d = jax.jit(lambda a, b, c: jax_bridge.triple(a, b, c, algorithm=algorithm, order=order))(
        a, b, c
    )
    assert d.shape == (19, 17) and d.dtype == jnp.float32
    assert_triple(np.asarray(d), a, b, c, np.float32)


def test_float64(rng):
    a, b, c = _chain(rng, dtype=np.float64)
    with jax.enable_x64(True):
        d = jax_bridge.triple(a, b, c, algorithm="fused")
        assert d.dtype == jnp.float64
    assert_triple(np.asarray(d), a, b, c, np.float64)


def test_grad_matches_jnp(rng):
    a, b, c = _chain(rng)
    w = rng.standard_normal((5, 4)).astype(np.float32)

    def loss(f):
        return lambda a, b, c: jnp.sum(w * f(a, b, c))

    hi = jax.lax.Precision.HIGHEST
    ours = jax.jit(jax.grad(loss(jax_bridge.triple), argnums=(0, 1, 2)))(a, b, c)
    theirs = jax.grad(
        loss(lambda a, b, c: jnp.matmul(jnp.matmul(a, b, precision=hi), c, precision=hi)),
        argnums=(0, 1, 2),
    )(a, b, c)
    for x, y in zip(ours, theirs):
        assert relative_error(np.asarray(x), np.asarray(y, np.float64)) <= 1e-5


@pytest.mark.parametrize(
    "in_axes", [(0, None, None), (None, 0, None), (None, None, 0), (0, 0, 0), (1, None, 2)]
)
@pytest.mark.parametrize("order", ["left", "right"])
def test_vmap(in_axes, order, rng):
    a, b, c = _chain(rng, 4, 5, 6, 3)
    stacked = [
        x if axis is None else np.stack([x * (i + 1) for i in range(3)], axis=axis)
        for x, axis in zip((a, b, c), in_axes)
    ]
    d = jax.vmap(lambda a, b, c: jax_bridge.triple(a, b, c, order=order), in_axes=in_axes)(*stacked)
    assert d.shape == (3, 4, 3)
    for i in range(3):
        parts = [
            x if axis is None else np.take(s, i, axis=axis)
            for x, s, axis in zip((a, b, c), stacked, in_axes)
        ]
        assert_triple(np.asarray(d[i]), *parts, np.float32)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda a, b, c: (a, c, b), ValueError, "a is 5x7 and b is 9x4"),
        (lambda a, b, c: (a, b, c[None]), ValueError, "c must be 2-D"),
        (lambda a, b, c: (a, b, c.astype(np.float16)), TypeError, "b is float32 but c is float16"),
        (lambda a, b, c: (a, b.astype(np.int32), c), TypeError, "b has dtype int32"),
    ],
)
def test_errors_at_trace_time(make, error, message, rng):
    with pytest.raises(error, match=message):
        jax.jit(jax_bridge.triple).trace(*make(*_chain(rng)))


def test_argument_errors(rng):
    with pytest.raises(ValueError, match="order must be one of"):
        jax_bridge.triple(*_chain(rng), order="middle")
    with pytest.raises(ValueError, match="algorithm must be one of"):
        jax_bridge.triple(*_chain(rng), algorithm="fast")
