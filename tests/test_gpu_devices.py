"""Several GPUs in one process (marker `gpu`, and at least two devices): calls alternate between
devices with everything that is cached per device (compiled functions and their shared-memory
opt-in, the memory pool, prepared launches, tuned configs and device names, the triple product's
scratch, the bridge's PTX); operands on two devices, or on another device than the current one,
are refused before any launch."""

import numpy as np
import pytest
from numba import cuda

import numba_gemm
from numba_gemm.launch import SIMULATED
from numba_gemm.reference import relative_error, tolerance

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        SIMULATED or not cuda.is_available() or len(cuda.gpus) < 2, reason="needs two GPUs"
    ),
]


def _operands(rng, *shapes):
    hosts = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    return hosts, [cuda.to_device(x) for x in hosts]


def test_calls_alternate_between_devices(rng):
    from numba_gemm.tuned_configs import device_key

    for _ in range(3):
        for device in (0, 1):
            with cuda.gpus[device]:
                (a, b, c), (a_d, b_d, c_d) = _operands(rng, (700, 300), (300, 513), (513, 64))
                for algorithm in ("tiled", "mnk"):
                    for _ in range(2):  # the second call: a prepared launch on this device
                        out = numba_gemm.matmul(a_d, b_d, algorithm=algorithm)
                        assert out.__cuda_array_interface__["data"][0]
                        error = relative_error(out.copy_to_host(), a.astype(np.float64) @ b)
                        assert error <= tolerance(np.float32, 300), (device, algorithm)
                for algorithm in ("fused", "unfused", "naive"):
                    d = numba_gemm.triple(a_d, b_d, c_d, algorithm=algorithm)
                    error = relative_error(d.copy_to_host(), a.astype(np.float64) @ b @ c)
                    assert error <= tolerance(np.float32, 813), (device, algorithm)
                assert device_key()[1].startswith("sm_")


def test_operands_on_two_devices_are_refused(rng):
    (a, b), (a_0, b_0) = _operands(rng, (64, 32), (32, 48))
    with cuda.gpus[1]:
        b_1 = cuda.to_device(b)
    with pytest.raises(ValueError, match="a is on GPU 0 but b is on GPU 1"):
        numba_gemm.matmul(a_0, b_1)
    with cuda.gpus[1]:
        c_1 = cuda.to_device(np.ones((48, 8), np.float32))
    with pytest.raises(ValueError, match="b is on GPU 0 but c is on GPU 1"):
        numba_gemm.triple(a_0, b_0, c_1)
    with cuda.gpus[1]:
        out_1 = cuda.device_array((64, 48), np.float32)
    with pytest.raises(ValueError, match="out is on GPU 1 but a is on GPU 0"):
        numba_gemm.matmul(a_0, b_0, out_1)


def test_operands_on_another_device_than_the_current_one_are_refused(rng):
    (a, b), _ = _operands(rng, (64, 32), (32, 48))
    with cuda.gpus[1]:
        a_1, b_1 = cuda.to_device(a), cuda.to_device(b)
    with pytest.raises(ValueError, match=r"current device is GPU 0; call under `with numba"):
        numba_gemm.matmul(a_1, b_1)
    with cuda.gpus[1]:
        out = numba_gemm.matmul(a_1, b_1).copy_to_host()
    assert relative_error(out, a.astype(np.float64) @ b) <= tolerance(np.float32, 32)


def test_jax_bridge_on_each_device(rng):
    jax = pytest.importorskip("jax")
    import jax_bridge

    devices = jax.devices("gpu")
    if len(devices) < 2:
        pytest.skip("JAX sees fewer than two GPUs")
    a = rng.standard_normal((300, 200)).astype(np.float32)
    b = rng.standard_normal((200, 100)).astype(np.float32)
    product = jax.jit(jax_bridge.matmul)
    for device in devices[:2] * 2:
        result = product(jax.device_put(a, device), jax.device_put(b, device))
        assert result.devices() == {device}
        assert relative_error(np.asarray(result), a.astype(np.float64) @ b) <= tolerance(
            np.float32, 200
        )
