"""The skinny kernel (``kernels/skinny.py``): results of at most 16 rows or columns, float32
and float64, bf16 and f16 at their own precision (a 16-bit or float32 result), every layout,
edges of every strip and step, batches, and when "auto" runs it; and what "auto" runs for the
other narrow results, 2 to 16 rows or columns: the tiled kernel's 16-row tiles
(``tiled.narrow_config``), transposed where the columns are few."""

import functools
from dataclasses import replace

import numpy as np
import pytest

import numba_gemm
from checks import assert_product, assert_within_preset
from numba_gemm.api import plan
from numba_gemm.descriptor import describe
from numba_gemm.kernels import skinny
from numba_gemm.precision import BFLOAT16, FLOAT16, resolve
from numba_gemm.reference import (
    LAYOUTS,
    make_operands,
    poisoned,
    reference,
    relative_error,
    to_host,
)

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
BF16, F16 = BFLOAT16, FLOAT16
# (M, N, K): one row and one column; rows of every accumulator size (1, 2-16 rounded up to a
# power of two) against strips cut at N and steps cut at K (a step is 256 rows of k for
# float32 with 2 simulated warps of 4 columns); the transposed case (N <= 16 < M).
SHAPES = [(1, 1, 1), (1, 40, 37), (3, 5, 300), (16, 9, 9), (2, 16, 600), (40, 2, 37)]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_skinny_matches_float64_reference(dtype, shape, layout, rng):
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng)
    out = poisoned((M, N), dtype, layout=layout)  # NaN: an unwritten element fails the check
    assert numba_gemm.matmul(a, b, out, algorithm="skinny") is out
    assert_product(out, a, b, dtype)


# 16-bit operands: 8 columns per strip and 8 k per run (16 bytes), a step of 128 rows of k
SHAPES_16 = [(1, 1, 1), (1, 40, 37), (3, 9, 300), (16, 17, 9), (40, 2, 130)]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", SHAPES_16, ids=str)
@pytest.mark.parametrize("dtype, out_dtype", [(BF16, BF16), (BF16, F32), (F16, F16)], ids=str)
def test_skinny_computes_16_bit_operands_at_their_own_precision(dtype, out_dtype, shape, layout,
                                                                  rng):  # fmt: skip
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng)
    out = poisoned((M, N), out_dtype, layout=layout)
    assert numba_gemm.matmul(a, b, out, algorithm="skinny") is out
    error = assert_within_preset(out, a, b, out_dtype=out_dtype)
    if out_dtype == F32:  # products and sums in float32: far inside bf16's bound
        assert error < 1e-5, error


def test_skinny_runs_a_batch_and_a_broadcast_operand(rng):
    a = rng.standard_normal((3, 2, 70)).astype(np.float32)
    b = rng.standard_normal((3, 70, 33)).astype(np.float32)
    assert_product(numba_gemm.matmul(a, b, algorithm="skinny"), a, b, np.float32)
    shared = rng.standard_normal((70, 33)).astype(np.float32)  # batch stride 0
    assert_product(numba_gemm.matmul(a, shared, algorithm="skinny"), a, shared, np.float32)


def test_a_row_times_a_matrix_and_a_matrix_times_a_column(rng):
    # NumPy's 1-D operands: (K,) @ (K, N) is one row of C, (M, K) @ (K,) one column
    x = rng.standard_normal(300).astype(np.float32)
    w = rng.standard_normal((300, 50)).astype(np.float32)
    np.testing.assert_allclose(numba_gemm.matmul(x, w), x @ w, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(numba_gemm.matmul(w.T, x), w.T @ x, rtol=1e-5, atol=1e-4)


def _kernel_of(a, b, algorithm="auto", precision=None):
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    return plan(describe(a, "a"), describe(b, "b"), describe(out, "out"), algorithm, None,
                resolve(precision, a.dtype)).kernel  # fmt: skip


@pytest.mark.parametrize(
    "shape, expected",
    [
        ((1, 4096, 64), "rows_kernel"),  # a decode step's token: B read along n
        ((4096, 1, 64), "skinny_kernel"),  # one column: run transposed, A^T read along k
        ((2, 512, 512), "rows_kernel"),  # a few rows read along n: lanes along n
        ((8, 512, 512), "tiled_kernel"),  # more: 16-row tiles
        ((16, 128, 128), "tiled_kernel"),
        ((128, 16, 128), "tiled_kernel"),
        ((8, 8, 8), "loop_order_kernel"),  # tiny: one thread per element
    ],
    ids=str,
)
def test_auto_runs_matrix_vector_products_on_the_skinny_kernel(shape, expected):
    M, N, K = shape
    a, b = np.ones((M, K), np.float32), np.ones((K, N), np.float32)
    assert _kernel_of(a, b).py_func.__name__ == expected


def _auto_kernel(dtype, M, N, K=64, b_layout="row", precision=None):
    a = np.ones((M, K), dtype)
    b = np.ones((K, N), dtype) if b_layout == "row" else np.ones((N, K), dtype).T
    return _kernel_of(a, b, precision=precision).py_func.__name__


@pytest.mark.parametrize("dtype", [BF16, F16], ids=str)
def test_auto_runs_16_bit_matrix_vector_products_on_the_skinny_kernels(dtype, monkeypatch):
    # one row or column read along k (the matrix k-contiguous as computed) in enough CTAs: the
    # skinny kernel; read along n: its lanes-along-n form; more rows: the tensor cores (mma on
    # the simulator)
    kernel = functools.partial(_auto_kernel, dtype)
    monkeypatch.setattr(numba_gemm.api, "multiprocessors", lambda: 64)  # any GPU's strips do
    assert kernel(4096, 1) == kernel(1, 4096, b_layout="col") == "skinny_kernel"
    assert kernel(1, 4096) == "rows_kernel"  # a JAX Dense kernel times a row: along n
    assert kernel(2, 4096, b_layout="col") not in ("skinny_kernel", "rows_kernel")
    assert kernel(2, 4096) not in ("skinny_kernel", "rows_kernel")
    monkeypatch.setattr(numba_gemm.api, "multiprocessors", lambda: 10**6)  # strips too few
    assert kernel(4096, 1) not in ("skinny_kernel", "rows_kernel")
    assert kernel(1, 4096) == "rows_kernel"  # k split across CTAs fills any GPU


def test_auto_runs_tf32_matrix_vector_products_read_along_n_with_lanes_along_n(rng):
    # float32 at TF32: one row read along n streams on the lanes-along-n kernel, in float32;
    # read along k, or more rows, the tensor cores take it
    kernel = functools.partial(_auto_kernel, F32, precision="TF32_TF32_F32")
    assert kernel(1, 4096) == "rows_kernel"
    for read_along_k in (kernel(1, 4096, b_layout="col"), kernel(4096, 1)):
        assert read_along_k not in ("skinny_kernel", "rows_kernel")
    assert kernel(2, 4096) not in ("skinny_kernel", "rows_kernel")
    a, b = make_operands(1, 300, 77, F32, "row", rng)
    out = poisoned((1, 300), F32)
    numba_gemm.matmul(a, b, out, precision="TF32_TF32_F32")
    assert assert_within_preset(out, a, b) < 1e-5  # float32's error, not TF32's


@pytest.mark.parametrize(
    "dtype, layout", [(F32, layout) for layout in LAYOUTS] + [(F64, "row"), (F64, "col")], ids=str
)
@pytest.mark.parametrize("shape", [(2, 40, 37), (16, 33, 70), (40, 3, 37), (5, 5, 9)], ids=str)
def test_narrow_results_on_the_tiled_kernel_match_float64_reference(dtype, shape, layout, rng):
    # 2 to 16 rows, or columns (run as C^T = B^T A^T): the tiled kernel's narrow path, which
    # "auto" takes from 64^3 multiply-adds (these simulator sizes ask for it by name)
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng)
    out = poisoned((M, N), dtype, layout=layout)
    assert numba_gemm.matmul(a, b, out, algorithm="tiled") is out
    assert_product(out, a, b, dtype)


def test_narrow_results_run_a_batch_and_a_broadcast_operand(rng):
    a = rng.standard_normal((3, 40, 70)).astype(np.float32)
    b = rng.standard_normal((3, 70, 5)).astype(np.float32)  # 5 columns: run transposed
    assert_product(numba_gemm.matmul(a, b, algorithm="tiled"), a, b, np.float32)
    shared = rng.standard_normal((5, 40)).astype(np.float32)  # batch stride 0, 5 rows
    c = rng.standard_normal((3, 40, 33)).astype(np.float32)
    assert_product(numba_gemm.matmul(shared, c, algorithm="tiled"), shared, c, np.float32)


def test_narrow_results_split_into_a_wave_of_two_ctas_per_sm(monkeypatch):
    from numba_gemm.kernels import tiled

    monkeypatch.setattr(tiled, "SIMULATED", False)
    monkeypatch.setattr(tiled, "multiprocessors", lambda: 132)
    config = tiled.NARROW_CONFIGS[F32]
    assert tiled.NARROW_CTAS_PER_SM == 2  # 264 CTAs at once on 132 SMs
    # 64 tiles of 256 k steps: 4 CTAs each
    assert tiled.narrow_config(16, 8192, 8192, 1, F32, True) == replace(config, k_ctas=4)
    assert tiled.narrow_config(16, 14336, 4096, 1, F32, True).k_ctas == 2  # 112 tiles
    assert tiled.narrow_config(16, 4096, 4096, 1, F32, True).k_ctas == 8  # 32 tiles
    assert tiled.narrow_config(16, 8192, 8192, 1, F32, False) == config  # no scratch
    assert tiled.narrow_config(16, 65536, 256, 1, F32, True) == config  # 512 tiles: a wave
    assert tiled.narrow_config(4, 8192, 8192, 1, F64, True).k_ctas == 4


# 16-bit operands read along n (B's rows aligned: N a multiple of 8) run with lanes along n:
# columns cut at N and at a CTA's 256, k cut at a step (2 simulated warps x 8 rows), batches
# A k step of the lanes-along-n kernel: a row of B per lane for each warp (fewer warps on the
# simulator); split k needs MIN_STEPS_PER_CTA steps per CTA, so (3, 40, K_SPLIT) splits anywhere.
K_STEP = skinny._warps() * skinny.UNROLL
K_SPLIT = 19 * K_STEP - 4  # 19 steps, the last one partial
ROWS_SHAPES = [(1, 8, 1), (2, 264, 37), (3, 40, K_SPLIT), (4, 16, 17)]
ROWS_CASES = [(BF16, BF16, False), (BF16, F32, True), (F16, F16, True), (F32, F32, True)]
# (a's, C's, split)


@pytest.mark.parametrize("shape", ROWS_SHAPES, ids=str)
@pytest.mark.parametrize("dtype, out_dtype, k_ctas_forced", ROWS_CASES, ids=str)
def test_products_read_along_n_run_with_lanes_along_n(
    dtype, out_dtype, k_ctas_forced, shape, rng, monkeypatch
):
    from numba_gemm.api import split_k_scratch
    from numba_gemm.launch import launch_kernel, to_device

    M, N, K = shape
    # many SMs: the few strips split k into a wave; one SM: the strips fill it
    monkeypatch.setattr(skinny, "multiprocessors", lambda: 64 if k_ctas_forced else 1)
    a, b = make_operands(M, N, K, dtype, "row", rng)
    # device arrays: the launch is the kernel's alone, with no copies (on a GPU, host arrays'
    # addresses would reach the kernel)
    on_device = [to_device(x) for x in (a, b)] + [poisoned((M, N), out_dtype, True)]
    launch = plan(*(describe(x, name) for x, name in zip(on_device, ("a", "b", "out"))),
                  "skinny", None, resolve(None, dtype), scratch=split_k_scratch(0))  # fmt: skip
    assert launch.kernel.py_func.__name__ == "rows_kernel"
    assert (launch.grid[2] > 1) == (k_ctas_forced and K == K_SPLIT)
    launch_kernel(launch)  # this plan: matmul's may be another test's, planned before the patch
    out = to_host(on_device[2])
    error = assert_within_preset(out, a, b, out_dtype=out_dtype)
    if out_dtype == F32:
        assert error < 1e-5, error


def test_lanes_along_n_run_a_batch_and_leave_more_rows_to_the_lanes_along_k(rng, monkeypatch):
    from numba_gemm.api import describe_matmul, split_k_scratch

    K = 9 * K_STEP - 7  # 9 steps: 2 CTAs of at least MIN_STEPS_PER_CTA each
    a = rng.standard_normal((2, 1, K)).astype(BF16)
    b = rng.standard_normal((2, K, 16)).astype(BF16)
    assert_within_preset(numba_gemm.matmul(a, b, algorithm="skinny"), a, b)
    monkeypatch.setattr(skinny, "multiprocessors", lambda: 64)  # each product's k split too
    out = np.empty((2, 1, 16), BF16)
    (part,) = describe_matmul(a, b, out).parts
    assert skinny.plan_skinny(*part, scratch=split_k_scratch(0)).grid == (1, 2, 2)
    assert_within_preset(numba_gemm.matmul(a, b, out, algorithm="skinny"), a, b)
    monkeypatch.undo()
    a, b = make_operands(5, 64, 40, BF16, "row", rng)  # 8 accumulator rows: along k
    out = np.empty((5, 64), BF16)
    launch = plan(describe(a, "a"), describe(b, "b"), describe(out, "out"), "skinny", None,
                  resolve(None, BF16))  # fmt: skip
    assert launch.kernel.py_func.__name__ == "skinny_kernel"


def test_aligned_rows_and_columns_take_vector_loads_and_others_element_loads(rng):
    rows = skinny.skinny_rows
    a, b = make_operands(5, 64, 64, F32, "row", rng)  # rows of 64 floats: 16-byte aligned
    assert _kernel_of(a, b, "skinny") is skinny._kernel(F32, F32, rows(5), "rows", True)
    assert rows(5) > skinny.ROWS_MAX_M  # (fewer rows read along n: lanes along n)
    a, b = make_operands(3, 63, 63, F32, "row", rng)  # rows of 63: misaligned
    assert _kernel_of(a, b, "skinny") is skinny._kernel(F32, F32, rows(3), "elements", False)
    a, b = make_operands(3, 64, 64, F32, "b_col", rng)  # B k-contiguous: runs along k
    assert _kernel_of(a, b, "skinny") is skinny._kernel(F32, F32, rows(3), "runs", True)
    a, b = make_operands(64, 3, 64, F32, "row", rng)  # run transposed: B^T's columns are A's rows
    assert _kernel_of(a, b, "skinny") is skinny._kernel(F32, F32, rows(3), "runs", False)


@pytest.mark.parametrize("shapes", [((2, 0), (0, 5)), ((40, 0), (0, 2)), ((0, 3), (3, 5))])
def test_skinny_gives_numpy_results_for_k_zero_and_empty_results(shapes):
    a, b = (np.ones(shape, np.float32) for shape in shapes)
    out = numba_gemm.matmul(a, b, algorithm="skinny")
    np.testing.assert_array_equal(out, a @ b)  # zeros where K = 0, and empty where M = 0


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the simulator's threads
def test_skinny_keeps_numpy_semantics_for_infinities():
    a = np.array([[np.inf, 1.0, 0.0]], np.float32)
    b = np.array([[0.0, 1.0], [1.0, 1.0], [np.inf, 2.0]], np.float32)
    with np.errstate(invalid="ignore"):  # inf x 0: NaN, as NumPy gives
        out, expected = numba_gemm.matmul(a, b, algorithm="skinny"), a @ b
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    np.testing.assert_array_equal(out[~np.isnan(out)], expected[~np.isnan(expected)])


def test_skinny_refuses_what_it_cannot_run(rng):
    a, b = make_operands(17, 17, 8, F32, "row", rng)
    with pytest.raises(ValueError, match="at most 16 rows or columns"):
        numba_gemm.matmul(a, b, algorithm="skinny")
    a, b = make_operands(2, 17, 8, F32, "row", rng)
    with pytest.raises(ValueError, match="cannot compute precision TF32_TF32_F32"):
        numba_gemm.matmul(a, b, algorithm="skinny", precision="TF32_TF32_F32")
    with pytest.raises(ValueError, match="takes none"):
        numba_gemm.matmul(a, b, algorithm="skinny", config=numba_gemm.TileConfig())
    with pytest.raises(ValueError, match="1 to 16 rows"):
        skinny.skinny_rows(17)
    a, b = make_operands(17, 17, 8, BF16, "row", rng)
    with pytest.raises(ValueError, match="at most 16 rows or columns.*use 'wgmma' or 'mma'"):
        numba_gemm.matmul(a, b, algorithm="skinny")
    a, b = make_operands(1, 17, 8, BF16, "row", rng)
    with pytest.raises(ValueError, match="takes none"):
        numba_gemm.matmul(a, b, algorithm="skinny", config=numba_gemm.MmaConfig())
    with pytest.raises(ValueError, match="cannot compute precision TF32_TF32_F32"):
        numba_gemm.matmul(a.astype(np.float32), b.astype(np.float32), algorithm="skinny",
                          precision="TF32_TF32_F32")  # fmt: skip
    with pytest.raises(ValueError, match="computes bf16 and f16 operands at their own"):
        numba_gemm.matmul(a.astype(np.float32), b.astype(np.float32), algorithm="skinny",
                          precision="BF16_BF16_F32")  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    "algorithm, shape",
    [("skinny", shape) for shape in ((1, 4096, 4096), (16, 1000, 777), (4096, 1, 4096))]
    + [
        ("auto", shape)
        for shape in (
            (16, 1000, 777),
            (5, 3000, 2049),
            (2, 9, 2),
            (3, 8192, 8192),
            (4000, 13, 1500),
        )
    ],
    ids=str,
)  # fmt: skip  (auto: from 2 rows or columns the tiled kernel's 16-row tiles, split)
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_gpu_skinny_matches_float64_reference(algorithm, dtype, shape, layout, rng):
    from numba import cuda

    from numba_gemm.precision import default_preset, tolerance

    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng, to_device=True)
    out = poisoned((M, N), dtype, to_device=True, layout=layout)
    numba_gemm.matmul(a, b, out, algorithm=algorithm)
    cuda.synchronize()
    error = relative_error(out, reference(a, b))
    assert error <= tolerance(default_preset(dtype), dtype, K), error


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    "shape", [(1, 4096, 4096), (1, 1000, 777), (4096, 1, 4099), (16, 999, 4096)], ids=str
)
@pytest.mark.parametrize("dtype, out_dtype", [(BF16, BF16), (BF16, F32), (F16, F16)], ids=str)
def test_gpu_skinny_computes_16_bit_operands(dtype, out_dtype, shape, layout, rng):
    from numba import cuda

    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng, to_device=True)
    out = poisoned((M, N), out_dtype, to_device=True, layout=layout)
    numba_gemm.matmul(a, b, out, algorithm="skinny")
    cuda.synchronize()
    assert_within_preset(out, a, b, out_dtype=out_dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 4096, 4096), (1, 1000, 777), (4, 8192, 1000)], ids=str)
def test_gpu_lanes_along_n_compute_float32(shape, rng):
    """float32 through the lanes-along-n kernel on a GPU, split k across the GPU's SMs."""
    from numba import cuda

    from numba_gemm.api import split_k_scratch
    from numba_gemm.launch import launch_kernel

    M, N, K = shape
    a, b = make_operands(M, N, K, F32, "row", rng, to_device=True)
    out = poisoned((M, N), F32, to_device=True)
    launch = plan(describe(a, "a"), describe(b, "b"), describe(out, "out"), "skinny", None,
                  resolve(None, F32), scratch=split_k_scratch(0))  # fmt: skip
    assert launch.kernel.py_func.__name__ == "rows_kernel"
    launch_kernel(launch)
    cuda.synchronize()
    assert_within_preset(out, a, b)
