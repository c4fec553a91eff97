"""numba_gemm.prepared, the call path, on the simulator: a signature is planned once and its
prepared call runs on any arrays of that signature (other addresses, fresh outputs), what
changed is checked, and what the signature says tells calls apart. The simulator's device
arrays take the same path as a GPU's (their addresses are host addresses); the GPU tests run it
on Numba, PyTorch, CuPy and JAX arrays."""

import gc
import weakref
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
from numba import cuda

import numba_gemm
from checks import assert_triple
from numba_gemm import api, prepared, triple_product
from numba_gemm.precision import default_preset, tolerance
from numba_gemm.reference import make_operands, make_triple_operands, reference, relative_error

pytestmark = pytest.mark.skipif(
    not cuda.config.ENABLE_CUDASIM, reason="the simulator's arrays; the GPU twins are gpu tests"
)


@pytest.fixture
def plans(monkeypatch):
    """Counts the plans ``matmul`` and ``triple`` make (each prepared call's first)."""
    made = []
    for module, name in ((api, "plan"), (triple_product, "plan_triple")):
        original = getattr(module, name)
        monkeypatch.setattr(
            module, name, lambda *args, _f=original, **kw: made.append(1) or _f(*args, **kw)
        )
    prepared.forget_prepared_calls()
    yield made
    prepared.forget_prepared_calls()


def device_operands(M, K, N, dtype, layout, rng):
    """A (M x K) and B (K x N) as the simulator's device arrays."""
    return make_operands(M, N, K, dtype, layout, rng, to_device=True)


def assert_matmul(out, a, b) -> None:
    """``out`` is A @ B within the tolerance of the operands' default preset."""
    a, b = a.copy_to_host(), b.copy_to_host()
    error = relative_error(out.copy_to_host(), reference(a, b))
    bound = tolerance(default_preset(a.dtype), a.dtype, a.shape[-1], out.dtype)
    assert error <= bound, f"relative error {error:.3e} > {bound:.3e}"


def poisoned(shape, dtype):
    return cuda.to_device(np.full(shape, np.nan, dtype))


@pytest.mark.parametrize("layout", ["row", "a_col", "b_col"])
@pytest.mark.parametrize(
    "dtype, algorithm",
    [(np.float32, "tiled"), (np.float64, "mnk"), (ml_dtypes.bfloat16, "mma")],
)
def test_one_plan_serves_every_array_of_its_signature(dtype, algorithm, layout, rng, plans):
    for _ in range(3):  # new operands and out each time: same signature, other addresses
        a, b = device_operands(37, 29, 23, dtype, layout, rng)
        out = poisoned((37, 23), np.float32 if dtype == ml_dtypes.bfloat16 else dtype)
        assert numba_gemm.matmul(a, b, out, algorithm=algorithm) is out
        assert_matmul(out, a, b)
    assert len(plans) == 1, "planned once, launched three times"


def test_the_wgmma_kernel_moves_its_tensor_maps_with_the_arrays(rng, plans):
    """Host-encoded tensor maps name their operand's address: a prepared call on other arrays
    must use maps of those (the simulator's twins read the memory at the map's address)."""
    for _ in range(2):
        a, b = device_operands(64, 64, 64, ml_dtypes.bfloat16, "row", rng)
        out = poisoned((64, 64), np.float32)
        numba_gemm.matmul(a, b, out, algorithm="wgmma")
        assert_matmul(out, a, b)
    (entry,) = api._CALLS.entries()
    from numba_gemm.launch.tensor_maps import TensorMapArg

    assert any(isinstance(x, TensorMapArg) for x in entry.launches[0]._plan.args)
    assert len(plans) == 1


def test_the_persistent_warp_specialised_kernel_moves_cs_map_with_the_output(rng, plans):
    """Its TMA stores go through a map of C: a prepared call into another output must store
    there (a map left at the first output's address would leave the new one NaN)."""
    from numba_gemm.kernels.hopper import WgmmaConfig

    config = WgmmaConfig(64, 64, 3, 1, persistent=1, producers=1)
    for _ in range(2):
        a, b = device_operands(70, 64, 72, ml_dtypes.bfloat16, "row", rng)
        out = poisoned((70, 72), np.float32)
        numba_gemm.matmul(a, b, out, algorithm="wgmma", config=config)
        assert_matmul(out, a, b)
    assert len(plans) == 1


def test_batched_parts_and_vectors_move_with_their_arrays(rng, plans):
    for _ in range(2):
        a = cuda.to_device(rng.standard_normal((3, 2, 9, 5)).astype(np.float32))
        b = cuda.to_device(rng.standard_normal((2, 5, 4)).astype(np.float32))
        out = poisoned((3, 2, 9, 4), np.float32)
        numba_gemm.matmul(a, b, out, algorithm="mnk")
        expected = a.copy_to_host().astype(np.float64) @ b.copy_to_host()
        np.testing.assert_allclose(out.copy_to_host(), expected, rtol=1e-5, atol=1e-5)
        v = cuda.to_device(rng.standard_normal(5).astype(np.float32))
        result = numba_gemm.matmul(a, v)
        np.testing.assert_allclose(
            result.copy_to_host(), a.copy_to_host() @ v.copy_to_host(), rtol=1e-5, atol=1e-5
        )
    assert len(plans) == 4, "3 parts (b broadcasts over the outer axis) and the vector product"


def test_calls_without_out_get_a_fresh_result_each(rng, plans, poisoned_fresh_outputs):
    a, b = device_operands(20, 12, 17, np.float32, "row", rng)
    results = [numba_gemm.matmul(a, b, algorithm="tiled") for _ in range(3)]
    assert len({prepared._address(r) for r in results}) == 3
    for r in results:
        assert_matmul(r, a, b)
    assert len(plans) == 1


@pytest.mark.parametrize(
    "change",
    ["strides", "dtype", "shape", "alignment", "algorithm", "precision", "out given"],
)
def test_what_a_signature_holds_tells_calls_apart(change, rng, plans):
    a, b = device_operands(16, 8, 12, np.float32, "row", rng)
    out = poisoned((16, 12), np.float32)
    numba_gemm.matmul(a, b, out)
    kwargs = {}
    if change == "strides":
        a = cuda.to_device(np.asfortranarray(a.copy_to_host()))
    elif change == "dtype":
        a, b = device_operands(16, 8, 12, np.float64, "row", rng)
        out = poisoned((16, 12), np.float64)
    elif change == "shape":
        a, b = device_operands(16, 9, 12, np.float32, "row", rng)
    elif change == "alignment":  # one element further: 4 bytes off a 16-byte boundary
        a = cuda.to_device(np.concatenate([[0], a.copy_to_host().ravel()]).astype(np.float32))
        a = a[1:].reshape(16, 8)
    elif change == "algorithm":
        kwargs["algorithm"] = "nmk"
    elif change == "precision":
        kwargs["precision"] = "highest"
    elif change == "out given":
        out = None
    result = numba_gemm.matmul(a, b, out, **kwargs)
    assert_matmul(result, a, b)
    assert len(plans) == 2, f"a new {change} plans anew"


def test_an_out_that_overlaps_an_input_at_new_addresses_is_refused(rng, plans):
    """The prepared call was validated on separate arrays; a later call whose out overlaps an
    input has the same signature, and must meet the first call's check."""
    base = cuda.to_device(rng.standard_normal((2, 8, 8)).astype(np.float32))
    b = cuda.to_device(rng.standard_normal((8, 8)).astype(np.float32))
    other = poisoned((8, 8), np.float32)
    numba_gemm.matmul(base[0], b, other)
    with pytest.raises(ValueError, match="out overlaps a"):
        numba_gemm.matmul(base[0], b, base[0])
    with pytest.raises(ValueError, match="out overlaps b"):
        numba_gemm.matmul(base[1], b, b)
    assert len(plans) == 1


def test_host_arrays_are_never_kept(rng, plans):
    a, b = make_operands(8, 8, 8, np.float32, "row", rng)  # NumPy arrays
    for _ in range(2):
        numba_gemm.matmul(a, b)
    assert api._CALLS.entries() == [] and len(plans) == 2


def test_the_least_recently_used_call_is_evicted_and_all_can_be_forgotten(rng, plans):
    calls = api._CALLS
    calls.capacity, capacity = 2, calls.capacity
    try:
        shapes = [(4, 4, 4), (4, 5, 4), (4, 6, 4)]
        operands = [device_operands(*shape, np.float32, "row", rng) for shape in shapes]
        for a, b in operands:
            numba_gemm.matmul(a, b, algorithm="mnk")
        assert len(calls.entries()) == 2
        numba_gemm.matmul(*operands[0], algorithm="mnk")  # evicted: planned again
        numba_gemm.matmul(*operands[2], algorithm="mnk")  # kept
        assert len(plans) == 4
        prepared.forget_prepared_calls()
        assert calls.entries() == []
    finally:
        calls.capacity = capacity


def test_prepared_calls_hold_no_array(rng, plans):
    a, b = device_operands(8, 8, 8, np.float32, "row", rng)
    out = poisoned((8, 8), np.float32)
    numba_gemm.matmul(a, b, out)
    refs = [weakref.ref(x) for x in (a, b, out)]
    del a, b, out
    gc.collect()
    assert all(ref() is None for ref in refs)


@pytest.mark.parametrize("algorithm", ["fused", "unfused", "naive"])
def test_triple_plans_once_per_signature(algorithm, rng, plans):
    for _ in range(2):
        a, b, c = make_triple_operands(9, 7, 11, 5, np.float32, "row", rng, to_device=True)
        out = poisoned((9, 5), np.float32)
        assert numba_gemm.triple(a, b, c, out, algorithm=algorithm) is out
        assert_triple(out, a, b, c, np.float32)
        assert_triple(numba_gemm.triple(a, b, c, algorithm=algorithm), a, b, c, np.float32)
    assert len(plans) == 2, "one plan with out, one without"


def test_triple_with_an_empty_inner_dimension_writes_zeros_each_call(rng, plans):
    for _ in range(2):
        a = cuda.to_device(np.ones((4, 0), np.float32))
        b = cuda.to_device(np.ones((0, 3), np.float32))
        c = cuda.to_device(rng.standard_normal((3, 5)).astype(np.float32))
        out = poisoned((4, 5), np.float32)
        numba_gemm.triple(a, b, c, out)
        assert (out.copy_to_host() == 0).all()


@pytest.mark.parametrize(
    "stream, handle",
    [
        (None, 0),
        (0, 0),
        (7, 7),
        (-1, None),
        (SimpleNamespace(cuda_stream=11), 11),  # PyTorch's stream objects
        (SimpleNamespace(ptr=12), 12),  # CuPy's
        (SimpleNamespace(handle=SimpleNamespace(value=13)), 13),  # Numba's
        ("garbage", None),
    ],
)
def test_the_launch_stream(stream, handle):
    assert prepared.launch_stream(stream, (np.ones(2),)) == handle


def test_a_bad_stream_is_refused_by_name():
    a = cuda.to_device(np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="stream"):
        numba_gemm.matmul(a, a, stream="garbage")
