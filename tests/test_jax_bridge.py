"""jax_bridge: numba-gemm's kernels as a JAX primitive under jit, grad, jvp, vjp and vmap.

On the CPU (CI) the lowering runs the kernels on the Numba CUDA simulator;
on a GPU machine the same tests run the native (XLA kernel call) and the
callback lowering. References: float64 NumPy for values, jnp/lax at
precision="highest" for derivatives.
"""

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import jax_bridge  # noqa: E402
from checks import assert_special_values, infinite_reference, with_infinities  # noqa: E402
from jax_bridge.mapping import StridedGemm, strided_gemm  # noqa: E402
from numba_gemm.reference import relative_error, tolerance  # noqa: E402

HIGHEST = lax.Precision.HIGHEST
SHAPES = [(1, 1, 1), (5, 3, 7), (17, 13, 11), (2, 19, 1)]  # (M, N, K): 1, primes, tile edges
TRANSPOSES = [(False, False), (True, False), (False, True), (True, True)]


def ids(shape):
    return "x".join(map(str, shape))


def random(rng, *shape, dtype=np.float32):
    return jnp.asarray(rng.standard_normal(shape).astype(dtype))


def operands(rng, M, N, K, transpose_a=False, transpose_b=False, dtype=np.float32):
    a = random(rng, *((K, M) if transpose_a else (M, K)), dtype=dtype)
    b = random(rng, *((N, K) if transpose_b else (K, N)), dtype=dtype)
    return a, b


def assert_close(out, ref, K, dtype=np.float32):
    assert np.shape(out) == np.shape(ref)
    error = relative_error(out, np.asarray(ref, np.float64))
    assert error <= 2 * tolerance(dtype, max(K, 1)), f"relative error {error:.3e}"


def f64(x):
    return np.asarray(x, np.float64)


@pytest.fixture
def poisoned_outputs(monkeypatch):
    """On the simulator: fill every output buffer with NaN before the kernel runs, so an
    element the kernel fails to write shows (XLA's fresh buffers may hold anything)."""
    import numba_gemm.api

    if jax.default_backend() != "cpu":
        return
    execute = numba_gemm.api.execute

    def poisoning_execute(a, b, out, *args, **kwargs):
        out.data[:] = np.nan
        execute(a, b, out, *args, **kwargs)

    monkeypatch.setattr(numba_gemm.api, "execute", poisoning_execute)


# -- the mapping of dot_general onto one strided GEMM (pure Python) -------------------------


def test_mapping_plain_and_transposed():
    assert strided_gemm((5, 7), (7, 3), (((1,), (0,)), ((), ()))) == StridedGemm(
        1, 5, 3, 7, lhs=(0, 7, 1), rhs=(0, 3, 1), out=(0, 3, 1)
    )
    # A stored (K, M), B stored (N, K): the transposes are strides.
    assert strided_gemm((7, 5), (3, 7), (((0,), (1,)), ((), ()))) == StridedGemm(
        1, 5, 3, 7, lhs=(0, 1, 5), rhs=(0, 1, 7), out=(0, 3, 1)
    )


def test_mapping_folds_axes():
    # flax Dense on (batch, seq, features): m = batch * seq.
    assert strided_gemm((2, 3, 7), (7, 4), (((2,), (0,)), ((), ()))).m == 6
    # Its kernel gradient contracts (batch, seq): k = 6, one stride in both operands.
    gemm = strided_gemm((2, 3, 7), (2, 3, 4), (((0, 1), (0, 1)), ((), ())))
    assert (gemm.m, gemm.n, gemm.k, gemm.lhs[2], gemm.rhs[1]) == (7, 4, 6, 7, 4)
    # A batch axis anywhere is a batch stride; an unbatched rhs has stride 0.
    gemm = strided_gemm((5, 4, 7), (4, 7, 3), (((2,), (1,)), ((1,), (0,))))
    assert (gemm.batch, gemm.lhs, gemm.rhs, gemm.out) == (4, (7, 28, 1), (21, 3, 1), (15, 3, 1))
    # rhs free axes that do not fold into n become a batch with lhs broadcast.
    gemm = strided_gemm((5, 7), (4, 7, 3), (((1,), (1,)), ((), ())))
    assert (gemm.batch, gemm.m, gemm.n, gemm.lhs[0], gemm.rhs[0], gemm.out[0]) == (
        4,
        5,
        3,
        0,
        21,
        3,
    )


def test_mapping_refuses_what_no_stride_expresses():
    with pytest.raises(NotImplementedError, match="contracting axes"):
        strided_gemm(
            (3, 4, 5), (5, 6, 4), (((1, 2), (2, 0)), ((), ()))
        )  # k axes in opposite orders
    with pytest.raises(NotImplementedError, match="batch"):
        strided_gemm((2, 5, 3, 7), (3, 7, 2, 4), (((3,), (1,)), ((0, 2), (2, 0))))


# -- values --------------------------------------------------------------------------------


@pytest.mark.parametrize("lowering", jax_bridge.LOWERINGS)
@pytest.mark.parametrize("transpose_a,transpose_b", TRANSPOSES)
@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_matmul_under_jit(shape, transpose_a, transpose_b, lowering, rng, poisoned_outputs):
    M, N, K = shape
    a, b = operands(rng, M, N, K, transpose_a, transpose_b)
    fn = jax.jit(
        lambda x, y: jax_bridge.matmul(
            x, y, transpose_a=transpose_a, transpose_b=transpose_b, lowering=lowering
        )
    )
    ref = (f64(a).T if transpose_a else f64(a)) @ (f64(b).T if transpose_b else f64(b))
    assert_close(fn(a, b), ref, K)


@pytest.mark.parametrize("algorithm", ["tiled", "mnk", "nmk", "kmn", "knm"])
def test_every_algorithm(algorithm, rng, poisoned_outputs):
    a, b = operands(rng, 17, 19, 13, transpose_a=True)
    out = jax.jit(lambda x, y: jax_bridge.matmul(x, y, transpose_a=True, algorithm=algorithm))(a, b)
    assert_close(out, f64(a).T @ f64(b), 13)


def test_the_kernel_call_takes_the_operands_in_the_launch_order():
    """XLA passes the kernel call's buffers by position; plans that swap the operands (the
    skinny kernel's C^T = B^T A^T, the triple product's right order) get them swapped."""
    from jax_bridge.lowering import _descs, operand_order
    from jax_bridge.triple_product import _row_major
    from numba_gemm.api import plan
    from numba_gemm.kernels.triple_product import counters_desc
    from numba_gemm.triple_product import plan_triple

    def gemm_order(M, N, K, algorithm):
        gemm = strided_gemm((M, K), (K, N), (((1,), (0,)), ((), ())))
        descs = _descs(gemm, (np.float32, np.float32), on_device=True)
        return operand_order(plan(*descs, algorithm, None, None, "device"), ("lhs", "rhs"))

    assert gemm_order(70, 3, 40, "skinny") == [1, 0]  # computed as C^T
    assert gemm_order(997, 1, 1024, "auto") == [1, 0]
    assert gemm_order(3, 70, 40, "skinny") == [0, 1]
    assert gemm_order(64, 64, 64, "tiled") == [0, 1]
    shapes = ((128, 96), (96, 64), (64, 80), (128, 80))
    descs = [_row_major(name, s, np.float32) for name, s in zip(("a", "b", "c", "out"), shapes)]
    for order, expected in (("left", [0, 1, 2]), ("right", [2, 1, 0])):

        def intermediate(shape, name):
            return _row_major(name, shape, np.float32)

        [launch] = plan_triple(*descs, "fused", order, counters=counters_desc, scratch=intermediate)
        assert operand_order(launch, ("a", "b", "c")) == expected


@pytest.mark.parametrize("shape", [(1, 40, 70), (70, 3, 40)], ids=str)  # the second transposed
def test_skinny_products_and_a_batch_of_them(shape, rng, poisoned_outputs):
    M, N, K = shape
    a, b = operands(rng, M, N, K, transpose_b=True)  # b: an nn.Linear-like weight, N x K
    out = jax.jit(lambda x, y: jax_bridge.matmul(x, y, transpose_b=True, algorithm="skinny"))(a, b)
    assert_close(out, f64(a) @ f64(b).T, K)
    stack = random(rng, 3, M, K)
    product = functools.partial(jax_bridge.matmul, transpose_b=True, algorithm="skinny")
    batched = jax.jit(jax.vmap(lambda x: product(x, b)))(stack)
    assert_close(batched, f64(stack) @ f64(b).T, K)


def test_eager_call_and_float64(rng):
    a, b = operands(rng, 6, 5, 4)
    assert_close(jax_bridge.matmul(a, b), f64(a) @ f64(b), 4)
    with jax.enable_x64(True):
        a, b = operands(rng, 6, 5, 9, dtype=np.float64)
        out = jax_bridge.matmul(a, b)
        assert out.dtype == jnp.float64
        assert_close(out, f64(a) @ f64(b), 9, np.float64)


def test_empty_operands_give_zeros(rng):
    a, b = random(rng, 0, 3), random(rng, 3, 4)
    assert jax.jit(jax_bridge.matmul)(a, b).shape == (0, 4)
    out = jax.jit(jax_bridge.matmul)(random(rng, 2, 0), random(rng, 0, 3))
    np.testing.assert_array_equal(out, np.zeros((2, 3), np.float32))


# -- derivatives -----------------------------------------------------------------------------


def loss(matmul, transpose_a, transpose_b):
    def fn(a, b):
        c = matmul(a, b, transpose_a, transpose_b)
        return jnp.sum(jnp.sin(c))  # a non-constant cotangent

    return fn


def ours(a, b, transpose_a, transpose_b):
    return jax_bridge.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)


def theirs(a, b, transpose_a, transpose_b):
    return jnp.matmul(a.T if transpose_a else a, b.T if transpose_b else b, precision=HIGHEST)


@pytest.mark.parametrize("transpose_a,transpose_b", TRANSPOSES)
def test_grad_matches_jnp_and_has_no_transpose(transpose_a, transpose_b, rng):
    M, N, K = 7, 5, 6
    a, b = operands(rng, M, N, K, transpose_a, transpose_b)
    grad = jax.jit(jax.grad(loss(ours, transpose_a, transpose_b), argnums=(0, 1)))
    expected = jax.grad(loss(theirs, transpose_a, transpose_b), argnums=(0, 1))(a, b)
    for got, want, k in zip(grad(a, b), expected, (N, M)):
        assert_close(got, want, k)
    jaxpr = str(
        jax.make_jaxpr(jax.grad(loss(ours, transpose_a, transpose_b), argnums=(0, 1)))(a, b)
    )
    assert jaxpr.count("numba_gemm_dot") == 3 and "transpose" not in jaxpr
    assert "transpose" not in grad.lower(a, b).as_text()


def test_jvp_and_vjp(rng):
    a, b = operands(rng, 4, 6, 5)
    da, db = operands(rng, 4, 6, 5)
    primal, tangent = jax.jvp(jax_bridge.matmul, (a, b), (da, db))
    assert_close(primal, f64(a) @ f64(b), 5)
    assert_close(tangent, f64(da) @ f64(b) + f64(a) @ f64(db), 10)
    out, vjp = jax.vjp(jax_bridge.matmul, a, b)
    ct = random(rng, 4, 6)
    ga, gb = vjp(ct)
    assert_close(ga, f64(ct) @ f64(b).T, 6)
    assert_close(gb, f64(a).T @ f64(ct), 4)


def test_second_order(rng):
    a, b = operands(rng, 3, 4, 5)
    hvp = jax.grad(lambda x: jnp.sum(jax.grad(lambda y: jnp.sum(jax_bridge.matmul(y, b) ** 2))(x)))
    ref = jax.grad(
        lambda x: jnp.sum(jax.grad(lambda y: jnp.sum(jnp.matmul(y, b, precision=HIGHEST) ** 2))(x))
    )
    assert_close(hvp(a), ref(a), 20)


# -- batching --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "in_axes", [(0, None), (None, 0), (0, 0), (1, 2), (2, None)], ids=lambda axes: f"in_axes={axes}"
)
def test_vmap_is_one_launch(in_axes, rng, poisoned_outputs):
    batch, M, N, K = 3, 5, 4, 6
    a, b = operands(rng, M, N, K)
    a_batched = random(rng, batch, M, K) if in_axes[0] is not None else a
    b_batched = random(rng, batch, K, N) if in_axes[1] is not None else b
    a_in = a_batched if in_axes[0] in (None, 0) else jnp.moveaxis(a_batched, 0, in_axes[0])
    b_in = b_batched if in_axes[1] in (None, 0) else jnp.moveaxis(b_batched, 0, in_axes[1])
    fn = jax.vmap(jax_bridge.matmul, in_axes=in_axes)
    out = jax.jit(fn)(a_in, b_in)
    assert_close(out, np.matmul(f64(a_batched), f64(b_batched)), K)
    assert str(jax.make_jaxpr(fn)(a_in, b_in)).count("numba_gemm_dot") == 1


def test_vmap_of_grad(rng):
    a_batched, b = random(rng, 4, 3, 5), random(rng, 5, 2)
    fn = jax.vmap(jax.grad(loss(ours, False, False), argnums=(0, 1)), in_axes=(0, None))
    ref = jax.vmap(jax.grad(loss(theirs, False, False), argnums=(0, 1)), in_axes=(0, None))
    for got, want in zip(jax.jit(fn)(a_batched, b), ref(a_batched, b)):
        assert_close(got, want, 5)


# -- dot_general ---------------------------------------------------------------------------------

DOT_CASES = {  # name: (lhs shape, rhs shape, dimension numbers)
    "dense_3d": ((2, 3, 7), (7, 4), (((2,), (0,)), ((), ()))),
    "batched": ((3, 5, 7), (3, 7, 4), (((2,), (1,)), ((0,), (0,)))),
    "batch_in_middle": ((5, 3, 7), (7, 3, 4), (((2,), (0,)), ((1,), (1,)))),
    "two_contracting": ((4, 2, 3), (2, 3, 5), (((1, 2), (0, 1)), ((), ()))),
}


@pytest.mark.parametrize("case", list(DOT_CASES))
def test_dot_general_matches_lax(case, rng, poisoned_outputs):
    lhs_shape, rhs_shape, dims = DOT_CASES[case]
    lhs, rhs = random(rng, *lhs_shape), random(rng, *rhs_shape)
    out = jax.jit(lambda x, y: jax_bridge.dot_general(x, y, dims, precision=HIGHEST))(lhs, rhs)
    ref = lax.dot_general(f64(lhs), f64(rhs), dims, precision=HIGHEST)
    assert_close(out, ref, 7)
    grads = jax.grad(
        lambda x, y: jnp.sum(jnp.sin(jax_bridge.dot_general(x, y, dims, precision=HIGHEST))),
        (0, 1),
    )
    expected = jax.grad(
        lambda x, y: jnp.sum(jnp.sin(lax.dot_general(x, y, dims, precision=HIGHEST))), (0, 1)
    )
    for got, want in zip(grads(lhs, rhs), expected(lhs, rhs)):
        assert_close(got, want, 7)


# (lhs shape, rhs shape, dimension numbers) whose loops fold into no single strided GEMM as the
# operands lie: the bridge lays them out anew (jax_bridge.primitive.bind). The first is from
# JAX's own lax tests; the last needs two batch loops.
UNFOLDED = [
    ((5, 3, 2), (5, 2, 4), (((0, 2), (0, 1)), ((), ()))),
    ((3, 4, 5), (5, 6, 4), (((1, 2), (2, 0)), ((), ()))),
    ((2, 3, 4, 5), (2, 5, 3, 6), (((3,), (1,)), ((1, 0), (2, 0)))),
]


@pytest.mark.parametrize("lhs_shape, rhs_shape, dims", UNFOLDED, ids=str)
def test_dot_general_computes_what_does_not_fold(lhs_shape, rhs_shape, dims, rng):
    """Every contraction lax.dot_general takes, with its gradients: where the loops do not
    fold into one strided GEMM, the operands are laid out anew (a transpose copy each)."""
    lhs, rhs = random(rng, *lhs_shape), random(rng, *rhs_shape)
    K = int(np.prod([lhs_shape[a] for a in dims[0][0]]))
    out = jax.jit(lambda x, y: jax_bridge.dot_general(x, y, dims, precision=HIGHEST))(lhs, rhs)
    assert_close(out, lax.dot_general(f64(lhs), f64(rhs), dims, precision=HIGHEST), K)
    grads = jax.grad(
        lambda x, y: jnp.sum(jax_bridge.dot_general(x, y, dims, precision=HIGHEST) ** 2), (0, 1)
    )
    expected = jax.grad(
        lambda x, y: jnp.sum(lax.dot_general(x, y, dims, precision=HIGHEST) ** 2), (0, 1)
    )
    for got, want in zip(grads(lhs, rhs), expected(lhs, rhs)):
        assert_close(got, want, 4 * K)


def test_vmap_over_the_last_axes_of_a_batched_dot_general(rng):
    """A vmap over the last axes of a dot_general that has batch axes already: two batch
    loops no single stride describes, laid out anew."""
    lhs, rhs = random(rng, 3, 4, 5, 2), random(rng, 3, 5, 6, 2)
    dims = (((2,), (1,)), ((0,), (0,)))
    ours = jax.vmap(
        lambda x, y: jax_bridge.dot_general(x, y, dims, precision=HIGHEST), in_axes=(3, 3)
    )(lhs, rhs)
    theirs = jax.vmap(lambda x, y: lax.dot_general(x, y, dims), in_axes=(3, 3))(f64(lhs), f64(rhs))
    assert_close(ours, theirs, 5)


def test_dot_general_falls_back_for_dtypes(rng):
    fallback = jax_bridge.make_dot_general(fallback=True)
    a, b = random(rng, 3, 4), random(rng, 4, 2)
    dims = (((1,), (0,)), ((), ()))
    with pytest.raises(NotImplementedError, match="preferred_element_type"):
        jax_bridge.dot_general(a, b, dims, preferred_element_type=jnp.float16)
    assert fallback(a, b, dims, preferred_element_type=jnp.float16).dtype == jnp.float16
    assert fallback(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), dims).dtype == jnp.bfloat16


def test_dot_general_in_a_dense_layer(rng):
    """flax.linen.Dense calls dot_general(inputs, kernel, (((ndim-1,), (0,)), ((), ())),
    precision=...): the bridge takes that call unchanged (with flax itself where installed)."""
    x, w = random(rng, 2, 3, 6), random(rng, 6, 4)
    out = jax_bridge.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())), precision=HIGHEST)
    assert_close(out, f64(x) @ f64(w), 6)
    out = jax_bridge.dot_general(x, w, (((-1,), (-2,)), ((), ())), precision=HIGHEST)
    assert_close(out, f64(x) @ f64(w), 6)
    nn = pytest.importorskip("flax.linen")
    layer = nn.Dense(4, precision=HIGHEST, dot_general=jax_bridge.dot_general)
    params = layer.init(jax.random.key(0), x)
    reference = nn.Dense(4, precision=HIGHEST).apply(params, x)
    assert_close(layer.apply(params, x), reference, 6)


# -- errors at trace time, naming the argument ---------------------------------------------------


def test_errors_name_the_argument(rng):
    a, b = random(rng, 3, 4), random(rng, 4, 2)
    with pytest.raises(ValueError, match="a must be 2-D"):
        jax_bridge.matmul(random(rng, 2, 3, 4), b)
    with pytest.raises(ValueError, match="extent 4 .* has 5"):
        jax.jit(jax_bridge.matmul)(a, random(rng, 5, 2))
    with pytest.raises(TypeError, match="rhs is float64|lhs is float32 but rhs"):
        with jax.enable_x64(True):
            jax.jit(jax_bridge.matmul)(a, jnp.asarray(np.ones((4, 2))))
    with pytest.raises(TypeError, match="lhs has dtype int32"):
        jax_bridge.matmul(jnp.ones((3, 4), jnp.int32), jnp.ones((4, 2), jnp.int32))
    with pytest.raises(ValueError, match="algorithm must be one of"):
        jax_bridge.matmul(a, b, algorithm="fast")
    with pytest.raises(ValueError, match="lowering must be one of"):
        jax_bridge.matmul(a, b, lowering="python")
    with pytest.raises(ValueError, match="out of range"):
        jax_bridge.dot_general(a, b, (((2,), (0,)), ((), ())))
    with pytest.raises(TypeError, match="dimension_numbers must be"):
        jax_bridge.dot_general(a, b, ((1,), (0,)))


@pytest.mark.parametrize(
    "dtype, kwargs",
    [
        (jnp.bfloat16, {"algorithm": "mnk"}),  # bf16 runs on the tensor cores on every platform
        (jnp.float16, {"algorithm": "tiled"}),
        (jnp.float32, {"algorithm": "wgmma", "precision": "highest"}),
        (jnp.float32, {"algorithm": "mma", "precision": "F32_F32_F32"}),
    ],
)
def test_algorithm_and_precision_are_checked_at_trace_time(dtype, kwargs, rng):
    """Without a config too: an algorithm that cannot compute the preset is refused while
    tracing, not when XLA runs the program (an INTERNAL error wrapping it)."""
    a, b = (x.astype(dtype) for x in (random(rng, 3, 4), random(rng, 4, 2)))
    with pytest.raises(ValueError, match="cannot compute precision"):
        jax.jit(lambda x, y: jax_bridge.matmul(x, y, **kwargs)).trace(a, b)


def test_float32_at_default_precision_is_checked_when_lowered(rng):
    """float32 at DEFAULT precision is TF32 on a GPU and exact on the CPU: the algorithm is
    checked for the platform when the program is lowered, before it runs."""
    a, b = random(rng, 3, 4), random(rng, 4, 2)
    on_the_gpu = jax.default_backend() != "cpu"

    def product(algorithm):
        return lambda x, y: jax_bridge.matmul(x, y, precision="default", algorithm=algorithm)

    ffma, tensor_cores = product("mnk"), product("mma")
    refused, accepted = (ffma, tensor_cores) if on_the_gpu else (tensor_cores, ffma)
    with pytest.raises(ValueError, match="cannot compute precision"):
        jax.jit(refused).lower(a, b)
    from numba_gemm.precision import PRESETS
    from numba_gemm.precision import tolerance as preset_tolerance

    preset = PRESETS["TF32_TF32_F32" if on_the_gpu else "F32_F32_F32"]
    error = relative_error(jax.jit(accepted)(a, b), f64(a) @ f64(b))
    assert error <= preset_tolerance(preset, np.float32, 4)


def test_cpu_without_the_simulator_says_how_to_enable_it():
    import os
    import subprocess
    import sys

    from numba import cuda

    if cuda.is_available() and not cuda.config.ENABLE_CUDASIM:
        pytest.skip("a GPU is present: host buffers run on it")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    code = (
        "import jax.numpy as jnp, jax_bridge; jax_bridge.matmul(jnp.ones((2, 2)), jnp.ones((2, 2)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "JAX_PLATFORMS": "cpu"},
    )
    assert result.returncode != 0 and "NUMBA_ENABLE_CUDASIM=1" in result.stderr


_PTX = """//
// Generated by NVIDIA NVVM Compiler
.version {version}
.target sm_90
.address_size 64

.visible .entry _Z6kernelPf(
\t.param .u64 _Z6kernelPf_param_0
){maxnreg}
{{
\tret;
}}
"""


@pytest.mark.parametrize(
    "version, newest, expected",
    [
        ("9.5", (9, 0), ".version 9.0"),  # newer than the driver takes: lowered
        ("8.8", (9, 0), ".version 8.8"),  # older: kept
        ("9.5", None, ".version 9.5"),  # driver unknown: kept
    ],
)
@pytest.mark.parametrize("nul_bytes", [0, 1, 3])
def test_xla_ptx_lowers_the_version_strips_nuls_and_caps_registers(
    version, newest, expected, nul_bytes
):
    from jax_bridge.lowering import xla_ptx

    ptx = _PTX.format(version=version, maxnreg="") + "\x00" * nul_bytes
    fixed, name = xla_ptx(ptx, newest, 232)
    assert name == "_Z6kernelPf"
    assert "\x00" not in fixed and fixed.endswith("}\n")
    assert expected in fixed and fixed.count(".version") == 1
    # the cap sits in the entry's header, between its parameters and its body
    header = fixed[fixed.index(".entry") : fixed.index("{")]
    assert header.count(".maxnreg 232") == 1
    assert xla_ptx(ptx, newest, None)[0].count(".maxnreg") == 0


def test_xla_ptx_keeps_a_cap_already_there_and_needs_an_entry():
    from jax_bridge.lowering import xla_ptx

    capped = _PTX.format(version="9.0", maxnreg="\n.maxnreg 128")
    fixed, _ = xla_ptx(capped, (9, 0), 255)
    assert fixed.count(".maxnreg") == 1 and ".maxnreg 128" in fixed
    with pytest.raises(RuntimeError, match="no .entry"):
        xla_ptx(".version 9.0\n.target sm_90\n", (9, 0), None)


# -- precision: bf16/f16 operands, presets, lax's defaults -------------------------------------


def test_precision_follows_lax_per_platform():
    from jax_bridge.primitive import lax_precision, platform_preset

    f32 = np.dtype(np.float32)
    assert lax_precision(None) == "DEFAULT"  # jax_default_matmul_precision unset
    assert lax_precision((lax.Precision.DEFAULT, HIGHEST)) == "HIGHEST"
    assert lax_precision(lax.DotAlgorithmPreset.TF32_TF32_F32_X3) == "TF32_TF32_F32_X3"
    with jax.default_matmul_precision("tensorfloat32"):
        assert lax_precision(None) == "HIGH"
    with jax.default_matmul_precision("float32"):
        assert lax_precision(None) == "HIGHEST"
    assert platform_preset("DEFAULT", f32, "cuda").name == "TF32_TF32_F32"
    assert platform_preset("DEFAULT", f32, "cpu").name == "F32_F32_F32"  # as XLA:CPU
    assert platform_preset(None, f32, "cuda").name == "F32_F32_F32"  # jax_bridge.matmul's


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_16_bit_products_grads_and_vmap(dtype, rng):
    from numba_gemm.precision import default_preset
    from numba_gemm.precision import tolerance as preset_tolerance

    a, b = operands(rng, 9, 12, 20)
    x, w = a.astype(dtype), b.astype(dtype)
    ref = f64(x) @ f64(w)
    bound = preset_tolerance(default_preset(dtype), dtype, 20)
    out = jax.jit(jax_bridge.matmul)(x, w)
    assert out.dtype == dtype and relative_error(out, ref) <= bound
    wide = jax_bridge.dot_general(
        x, w, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32
    )
    assert wide.dtype == jnp.float32
    assert relative_error(wide, ref) <= preset_tolerance(
        default_preset(dtype), dtype, 20, np.float32
    )
    grads = jax.grad(lambda x, w: jnp.sum(jax_bridge.matmul(x, w).astype(jnp.float32) ** 2), (0, 1))
    expected = jax.grad(
        lambda x, w: jnp.sum((x.astype(jnp.float32) @ w.astype(jnp.float32)) ** 2), (0, 1)
    )
    for got, want in zip(grads(x, w), expected(x, w)):
        assert got.dtype == dtype
        assert relative_error(got, f64(want)) <= 4 * bound
    stacked = jax.vmap(jax_bridge.matmul, in_axes=(0, None))(jnp.stack([x, 2 * x]), w)
    assert stacked.dtype == dtype and relative_error(stacked[1], 2 * ref) <= bound


def test_presets_through_the_bridge(rng):
    a, b = operands(rng, 16, 16, 32)
    ref = f64(a) @ f64(b)
    tf32 = jax_bridge.matmul(a, b, precision="TF32_TF32_F32")
    assert 2.0**-11 / 4 < relative_error(tf32, ref) < 2.0**-11 * 4
    x3 = jax_bridge.dot_general(
        a, b, (((1,), (0,)), ((), ())), precision=lax.DotAlgorithmPreset.TF32_TF32_F32_X3
    )
    assert relative_error(x3, ref) <= 4 * tolerance(np.float32, 32)
    with pytest.raises(ValueError, match="takes float16"):
        jax.jit(lambda x, y: jax_bridge.matmul(x, y, precision="F16_F16_F32")).trace(a, b)
    with pytest.raises(NotImplementedError, match="preferred_element_type"):
        jax_bridge.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.bfloat16)


@pytest.mark.parametrize("precision", ["TF32_TF32_F32_X3", "BF16_BF16_F32_X3"])
def test_split_presets_keep_infinities_through_the_bridge(precision, rng):
    from numba_gemm.precision import PRESETS, tolerance

    a, b = with_infinities(*map(np.asarray, operands(rng, 5, 7, 19)))
    out = jax.jit(lambda x, y: jax_bridge.matmul(x, y, precision=precision))(a, b)
    bound = tolerance(PRESETS[precision], np.float32, 19)
    assert_special_values(out, infinite_reference(a, b), bound)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_flax_model_trains_through_the_bridge_as_through_lax(dtype):
    """A Dense model in ``dtype`` at lax's default precision (bf16: the tensor cores; float32:
    TF32 on a GPU, exact on the CPU), trained a few SGD steps through the bridge and through
    lax from the same weights: the losses agree to the precision's tolerance."""
    nn = pytest.importorskip("flax.linen")

    class Model(nn.Module):
        dot_general: object

        @nn.compact
        def __call__(self, x):
            x = nn.tanh(nn.Dense(16, dtype=dtype, dot_general=self.dot_general)(x))
            return nn.Dense(1, dtype=dtype, dot_general=self.dot_general)(x)

    key = jax.random.key(0)
    x = jax.random.normal(key, (8, 12))
    y = jnp.sin(x.sum(axis=1, keepdims=True))
    params = Model(lax.dot_general).init(key, x)

    def losses(dot_general):
        model, p, out = Model(dot_general), params, []

        @jax.jit
        def step(p):
            loss, grads = jax.value_and_grad(
                lambda p: jnp.mean((model.apply(p, x).astype(jnp.float32) - y) ** 2)
            )(p)
            return jax.tree.map(lambda a, g: a - 0.1 * g, p, grads), loss

        for _ in range(4):
            p, loss = step(p)
            out.append(float(loss))
        return out

    ours, theirs = losses(jax_bridge.dot_general), losses(lax.dot_general)
    bound = 3e-2 if dtype == jnp.bfloat16 else (5e-3 if jax.default_backend() != "cpu" else 1e-5)
    for a, b in zip(ours, theirs):
        assert abs(a - b) <= bound * abs(b), (ours, theirs)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_the_models_benchmark_trains_alike_through_both(dtype, benchmark_module):
    """benchmarks/models.py's step (Dense layers as flax calls them, Adam) at a size the
    simulator finishes: the bridge's losses follow lax's."""
    models = benchmark_module("models")
    layers, batch = (12, 16, 5), 8
    ours, _ = models.train(jax_bridge.dot_general, dtype, 3, layers, batch, timed=False)
    theirs, _ = models.train(lax.dot_general, dtype, 3, layers, batch, timed=False)
    bound = 3e-2 if dtype == jnp.bfloat16 else 1e-5
    for a, b in zip(ours, theirs):
        assert abs(a - b) <= bound * abs(b), (ours, theirs)
