"""jax_bridge on a real GPU (marker `gpu`): both lowerings at sizes the simulator cannot
run, the native path's HLO, and a small MLP trained through the bridge."""

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import jax_bridge  # noqa: E402
from jax_bridge.lowering import KERNEL_CALL_TARGET  # noqa: E402
from numba_gemm.reference import relative_error, tolerance  # noqa: E402

pytestmark = pytest.mark.gpu

SHAPES = [(1024, 1024, 1024), (1000, 1023, 517), (1, 1024, 997), (997, 1, 1024), (257, 129, 3)]


def f64(x):
    return np.asarray(x, np.float64)


@pytest.mark.parametrize("lowering", jax_bridge.LOWERINGS)
@pytest.mark.parametrize(
    "transpose_a,transpose_b", [(False, False), (True, False), (False, True), (True, True)]
)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_on_gpu(shape, transpose_a, transpose_b, lowering, rng):
    M, N, K = shape
    a = jnp.asarray(rng.standard_normal((K, M) if transpose_a else (M, K), dtype=np.float32))
    b = jnp.asarray(rng.standard_normal((N, K) if transpose_b else (K, N), dtype=np.float32))
    out = jax.jit(
        lambda x, y: jax_bridge.matmul(
            x, y, transpose_a=transpose_a, transpose_b=transpose_b, lowering=lowering
        )
    )(a, b)
    ref = (f64(a).T if transpose_a else f64(a)) @ (f64(b).T if transpose_b else f64(b))
    assert relative_error(out, ref) <= tolerance(np.float32, K)


@pytest.mark.parametrize("algorithm", ["tiled", "mnk", "nmk", "kmn", "knm"])
def test_native_every_algorithm_float64(algorithm, rng):
    with jax.enable_x64(True):
        a = jnp.asarray(rng.standard_normal((300, 401)))
        b = jnp.asarray(rng.standard_normal((211, 401)))
        out = jax.jit(lambda x, y: jax_bridge.matmul(x, y, transpose_b=True, algorithm=algorithm))(
            a, b
        )
        assert out.dtype == jnp.float64
        assert relative_error(out, f64(a) @ f64(b).T) <= tolerance(np.float64, 401)


def test_native_hlo_is_a_kernel_call_and_grad_has_no_transpose(rng):
    a = jnp.asarray(rng.standard_normal((512, 256), dtype=np.float32))
    b = jnp.asarray(rng.standard_normal((256, 128), dtype=np.float32))

    def loss(x, y):
        return jnp.sum(jnp.sin(jax_bridge.matmul(x, y)))

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    hlo = grad.lower(a, b).compile().as_text()
    assert hlo.count(f'custom_call_target="{KERNEL_CALL_TARGET}"') == 3
    # No transpose instruction (op names in metadata say "transpose(jvp(...))": AD's transpose).
    assert not re.search(r"=\s*\S+\s+transpose\(", hlo) and "callback" not in hlo
    expected = jax.grad(
        lambda x, y: jnp.sum(jnp.sin(jnp.matmul(x, y, precision="highest"))), argnums=(0, 1)
    )(a, b)
    for got, want in zip(grad(a, b), expected):
        assert relative_error(got, f64(want)) <= 1e-5


def test_native_chain_is_captured_in_a_command_buffer(rng):
    x = jnp.asarray(rng.standard_normal((64, 64), dtype=np.float32))

    def chain(x):
        for _ in range(10):
            x = jax_bridge.matmul(x, x) / 64
        return x

    hlo = jax.jit(chain).lower(x).compile().as_text()
    assert hlo.count(KERNEL_CALL_TARGET) == 10 and "command_buffer" in hlo


def test_vmap_on_gpu_is_one_kernel_call(rng):
    a = jnp.asarray(rng.standard_normal((16, 300, 200), dtype=np.float32))
    b = jnp.asarray(rng.standard_normal((16, 200, 100), dtype=np.float32))
    fn = jax.jit(jax.vmap(jax_bridge.matmul))
    assert fn.lower(a, b).compile().as_text().count(KERNEL_CALL_TARGET) == 1
    assert relative_error(fn(a, b), np.matmul(f64(a), f64(b))) <= tolerance(np.float32, 200)


def test_mlp_training_matches_lax(benchmark_module):
    """A real client: an MLP trained for a few hundred steps with jax_bridge.dot_general
    follows lax.dot_general's loss curve (fp32, precision highest) within 1e-4."""
    training = benchmark_module("mlp_training")
    ours, theirs = training.compare(steps=300)
    assert ours[-1] < 0.5 * ours[0]  # it learns
    worst = max(abs(x - y) / abs(y) for x, y in zip(ours, theirs))
    assert worst <= training.LOSS_TOLERANCE, f"loss curves differ by {worst:.2e} (relative)"


@pytest.mark.parametrize("preset", ["TF32_TF32_F32", "TF32_TF32_F32_X3"])
@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (257, 129, 300)], ids=str)
def test_float32_on_tensor_cores_inside_jit(shape, preset, rng):
    """Float32 at the TF32 presets through XLA's kernel call (on Hopper the wgmma converting
    kernel), within each preset's tolerance; and dot_general at default precision, which
    lax computes as TF32 on these GPUs, tracks lax.dot_general."""
    from numba_gemm.precision import PRESETS
    from numba_gemm.precision import tolerance as preset_tolerance

    M, N, K = shape
    a = jnp.asarray(rng.standard_normal((M, K), dtype=np.float32))
    b = jnp.asarray(rng.standard_normal((K, N), dtype=np.float32))
    out = jax.jit(lambda x, y: jax_bridge.matmul(x, y, precision=preset))(a, b)
    bound = preset_tolerance(PRESETS[preset], np.dtype(np.float32), K)
    assert relative_error(out, f64(a) @ f64(b)) <= bound
    dims = (((1,), (0,)), ((), ()))
    ours = jax.jit(lambda x, y: jax_bridge.dot_general(x, y, dims))(a, b)
    theirs = jax.jit(lambda x, y: jax.lax.dot_general(x, y, dims))(a, b)
    tf32 = preset_tolerance(PRESETS["TF32_TF32_F32"], np.dtype(np.float32), K)
    assert relative_error(ours, f64(theirs)) <= 2 * tf32
