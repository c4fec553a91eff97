"""describe() and matmul()'s input checks: every bad input is refused before any launch."""

import numpy as np
import pytest

import numba_gemm
from numba_gemm.descriptor import read_cuda_array_interface


def test_row_major():
    d = numba_gemm.describe(np.zeros((3, 5), np.float32), "a")
    assert (d.shape, d.strides, d.dtype, d.layout, d.span) == (
        (3, 5),
        (5, 1),
        np.float32,
        "row",
        15,
    )
    assert not d.on_device


def test_transposed_view_is_column_major_without_copy():
    base = np.arange(15, dtype=np.float64).reshape(3, 5)
    d = numba_gemm.describe(base.T, "b")
    assert (d.shape, d.strides, d.layout) == ((5, 3), (1, 5), "col")
    assert np.shares_memory(d.data, base)


def test_sliced_view_indexes_through_strides():
    base = np.arange(7 * 11, dtype=np.float32).reshape(7, 11)
    view = base[1::3, 2::4]
    d = numba_gemm.describe(view, "a")
    assert d.strides == (33, 4) and d.layout == "strided"
    rows, cols = np.meshgrid(range(view.shape[0]), range(view.shape[1]), indexing="ij")
    np.testing.assert_array_equal(d.data[rows * d.strides[0] + cols * d.strides[1]], view)


def test_unit_dimensions_accept_any_stride():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6)).astype(np.float32)[:, ::-1][:, :1]  # column stride -1
    d = numba_gemm.describe(x, "a")
    assert d.shape == (4, 1) and d.strides == (6, -1) and d.span == 19
    y = rng.standard_normal((1, 3)).astype(np.float32)
    np.testing.assert_allclose(numba_gemm.matmul(x, y), x @ y, rtol=1e-6)


def test_dlpack_cpu_object_is_a_host_matrix():
    jax = pytest.importorskip("jax")
    x = jax.device_put(np.arange(6, dtype=np.float32).reshape(2, 3), jax.devices("cpu")[0])
    d = numba_gemm.describe(x, "a")
    assert (d.shape, d.strides, d.on_device) == ((2, 3), (3, 1), False)


def test_cuda_array_interface_fields():
    cai = {"shape": (4, 3), "strides": None, "typestr": "<f4", "data": (1024, False), "version": 3}
    fields = read_cuda_array_interface("a", cai)
    assert fields == ((4, 3), (12, 4), np.dtype(np.float32), 1024, False, None)
    cai["strides"] = (4, 16)
    assert read_cuda_array_interface("a", cai).strides == (4, 16)
    with pytest.raises(TypeError, match="a is a masked array"):
        read_cuda_array_interface("a", dict(cai, mask=object()))


@pytest.mark.parametrize(
    "bad, exc, message",
    [
        (np.zeros(4, np.float32), ValueError, "a must be 2-D"),
        (np.zeros((2, 2, 2), np.float32), ValueError, "a must be 2-D"),
        (np.zeros((2, 2), np.int32), TypeError, "a has dtype int32"),
        (np.zeros((2, 2), np.int16), TypeError, "a has dtype int16"),
        (np.zeros((3, 3), np.float32)[::-1], ValueError, "a has stride -3 on axis 0"),
        (
            np.zeros((3, 9), np.uint8)[:, 1:5].view(np.float32),
            ValueError,
            "not multiples of its item size",
        ),
        ([[1.0, 2.0]], TypeError, "a must be a NumPy array or a CUDA array"),
    ],
)
def test_describe_rejects(bad, exc, message):
    with pytest.raises(exc, match=message):
        numba_gemm.describe(bad, "a")


def _ab(M=3, N=4, K=5, dtype=np.float32):
    rng = np.random.default_rng(0)
    return rng.standard_normal((M, K)).astype(dtype), rng.standard_normal((K, N)).astype(dtype)


def test_matmul_names_the_bad_argument():
    a, b = _ab()
    with pytest.raises(ValueError, match="b is 0-D"):
        numba_gemm.matmul(a, np.ones((), np.float32))
    with pytest.raises(ValueError, match="inner dimensions differ: a is 3x5 and b is 4x4"):
        numba_gemm.matmul(a, b[:4])
    with pytest.raises(TypeError, match="a is float32 but b is float64"):
        numba_gemm.matmul(a, b.astype(np.float64))
    with pytest.raises(ValueError, match="algorithm must be one of"):
        numba_gemm.matmul(a, b, algorithm="ijk")


@pytest.mark.parametrize(
    "make_out, exc, message",
    [
        (
            lambda a, b: np.empty((4, 3), np.float32),
            ValueError,
            r"out has shape \(4, 3\); the product needs \(3, 4\)",
        ),
        (
            lambda a, b: np.empty((3, 4), np.float64),
            TypeError,
            "out is float64; the product is float32",
        ),
        (
            lambda a, b: np.broadcast_to(np.empty((1, 4), np.float32), (3, 4)),
            ValueError,
            "out has stride 0",
        ),
        (
            lambda a, b: np.lib.stride_tricks.as_strided(np.empty(8, np.float32), (3, 4), (4, 4)),
            ValueError,
            "distinct elements share memory",
        ),
        (lambda a, b: a[:, :4], ValueError, "out overlaps a"),
        (lambda a, b: b[:3], ValueError, "out overlaps b"),
    ],
)
def test_matmul_rejects_bad_out(make_out, exc, message):
    a, b = _ab()
    out = make_out(a, b)
    before = (a.copy(), b.copy())
    with pytest.raises(exc, match=message):
        numba_gemm.matmul(a, b, out)
    np.testing.assert_array_equal(a, before[0])  # nothing ran
    np.testing.assert_array_equal(b, before[1])


def test_matmul_rejects_read_only_out():
    a, b = _ab()
    out = np.empty((3, 4), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is a read-only array"):
        numba_gemm.matmul(a, b, out)


def test_matmul_rejects_host_device_mix():
    from numba import cuda

    a, b = _ab()
    with pytest.raises(TypeError, match="a is a host .* but b is on the GPU"):
        numba_gemm.matmul(a, cuda.to_device(b))
    with pytest.raises(TypeError, match="out must live where the inputs do"):
        numba_gemm.matmul(a, b, cuda.to_device(np.empty((3, 4), np.float32)))
