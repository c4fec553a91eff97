"""The four loop orders (and "auto") against a float64 NumPy reference.

Simulator-sized: every dimension stays small, but the shapes cross the
32 x 8 thread block in both directions, include 1 and primes, and every
layout (row, column, mixed, strided with an offset) runs with no copy.
"""

import numpy as np
import pytest

import numba_gemm
from checks import assert_product, check_layouts
from numba_gemm.api import FFMA_ALGORITHMS
from numba_gemm.kernels.loop_orders import BLOCK_FAST, BLOCK_SLOW
from numba_gemm.reference import LAYOUTS, make_operands, poisoned

SHAPES = [(1, 1, 1), (1, 13, 7), (17, 1, 5), (13, 11, 17), (BLOCK_FAST + 1, BLOCK_SLOW + 1, 4)]
ALGORITHMS = FFMA_ALGORITHMS  # float32 and float64: the tensor cores are tests/test_mma.py's


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_matches_float64_reference(algorithm, shape, layout, dtype, rng):
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng)
    out = poisoned((M, N), dtype, layout=layout)
    if min(shape) > 1:
        check_layouts(layout, a, b, out)
    result = numba_gemm.matmul(a, b, out, algorithm=algorithm)
    assert result is out
    assert_product(out, a, b, dtype)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allocates_row_major_host_output(algorithm, rng):
    a, b = make_operands(6, 5, 7, np.float64, "a_col", rng)
    c = numba_gemm.matmul(a, b, algorithm=algorithm)
    assert isinstance(c, np.ndarray) and c.shape == (6, 5) and c.flags.c_contiguous
    assert_product(c, a, b, np.float64)


@pytest.mark.parametrize("out_layout", ["col", "sliced"])
@pytest.mark.parametrize("algorithm", ["mnk", "knm"])
def test_strided_output(algorithm, out_layout, rng):
    a, b = make_operands(9, 10, 3, np.float32, "row", rng)
    base = poisoned((21, 40), np.float32)
    out = base[:10, :9].T if out_layout == "col" else base[1::2, 3::4][:9, :10]
    numba_gemm.matmul(a, b, out, algorithm=algorithm)
    assert_product(out, a, b, np.float32)
    untouched = base.copy()
    untouched[...] = np.nan
    mask = np.ones(base.shape, bool)
    if out_layout == "col":
        mask[:10, :9] = False
    else:
        mask[1::2, 3::4][:9, :10] = False
    assert np.isnan(base[mask]).all(), "elements outside out were written"


@pytest.mark.parametrize("layout", ["row", "col", "sliced"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_device_arrays_in_device_array_out(algorithm, layout, rng):
    a, b = make_operands(11, 9, 6, np.float32, layout, rng, to_device=True)
    check_layouts(layout, a, b)
    c = numba_gemm.matmul(a, b, algorithm=algorithm)
    assert numba_gemm.describe(c).on_device and c.shape == (11, 9)
    assert_product(c, a, b, np.float32)


def test_k_outer_orders_need_no_zeroed_output(rng):
    """K-outer kernels start each sum from the first product, never from out's contents."""
    a, b = make_operands(5, 6, 4, np.float64, "row", rng)
    for algorithm in ("kmn", "knm"):
        out = np.full((5, 6), 1e30)
        numba_gemm.matmul(a, b, out, algorithm=algorithm)
        assert_product(out, a, b, np.float64)


@pytest.mark.parametrize(
    "layout, expected", [("row", "mnk"), ("a_col", "mnk"), ("col", "nmk"), ("b_col", "mnk")]
)
def test_auto_picks_the_coalescing_order(layout, expected, rng):
    a, b = make_operands(4, 4, 4, np.float32, layout, rng)
    assert numba_gemm.choose_algorithm(numba_gemm.describe(a), numba_gemm.describe(b)) == expected


@pytest.mark.parametrize("to_device", [False, True])
def test_explicit_stream(to_device, rng):
    from numba import cuda

    stream = cuda.stream()
    a, b = make_operands(7, 6, 5, np.float32, "sliced", rng, to_device=to_device)
    c = numba_gemm.matmul(a, b, stream=stream)
    stream.synchronize()
    assert_product(c, a, b, np.float32)
