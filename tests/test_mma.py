"""The tensor-core kernel (``kernels/mma.py``) under every precision preset, layout and edge.

On the simulator the fragment building blocks are their twins (``kernels/fragments.py``),
which round operands as the tensor cores do: so these tests check both the kernel's logic and
that each preset loses the precision it should, no more and no less. On a GPU (``gpu``
tests) the same checks run on the real instructions.
"""

import math

import ml_dtypes
import numpy as np
import pytest

import numba_gemm
from checks import assert_split_keeps_infinities, assert_within_preset, check_layouts
from numba_gemm.kernels.mma import SIMULATOR_MMA_CONFIG, MmaConfig, operand_mode
from numba_gemm.precision import PRESETS, resolve, tolerance
from numba_gemm.reference import (
    LAYOUTS,
    make_operands,
    poisoned,
    reference,
    relative_error,
    to_host,
)

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
# (operand dtype, preset) of every tensor-core algorithm
TENSOR_CORE_CASES = [
    (BF16, "BF16_BF16_F32"),
    (F16, "F16_F16_F32"),
    (F32, "BF16_BF16_F32"),
    (F32, "BF16_BF16_F32_X3"),
    (F32, "BF16_BF16_F32_X6"),
    (F32, "BF16_BF16_F32_X9"),
    (F32, "TF32_TF32_F32"),
    (F32, "TF32_TF32_F32_X3"),
]
# Small tiles, so that simulated problems span several CTAs, warps and k-tiles: two warps
# along m, two stages, k-tiles of 16 (one bf16 k step, two TF32 ones).
SMALL = SIMULATOR_MMA_CONFIG  # the default on the simulator, given explicitly for the GPU too
# 1 and primes (edges in every tile, element copies where rows are misaligned), and whole
# tiles: two CTAs, two k-tiles each (16-byte copies, a stage refilled).
SHAPES = [(1, 1, 1), (17, 19, 23), (32, 64, 32)]


def case_id(case):
    dtype, preset = case
    return f"{dtype}-{preset}"


# Every case, shape and layout, but the three-part splits (9 or 6 products: the slowest on the
# simulator) run the two-CTA shape in one layout only; their edges run in every layout.
SIMULATED_CASES = [
    (case, shape, layout)
    for case in TENSOR_CORE_CASES
    for shape in SHAPES
    for layout in LAYOUTS
    if not (PRESETS[case[1]].parts == 3 and shape == SHAPES[-1] and layout != "row")
]


@pytest.mark.parametrize(
    "case, shape, layout",
    SIMULATED_CASES,
    ids=[f"{case_id(c)}-{'x'.join(map(str, s))}-{layout}" for c, s, layout in SIMULATED_CASES],
)
def test_mma_matches_float64_reference(case, shape, layout, rng):
    dtype, preset = case
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng)
    out = poisoned((M, N), dtype, layout=layout)  # NaN: an unwritten element fails the check
    if min(shape) > 1:
        check_layouts(layout, a, b, out)
    assert numba_gemm.matmul(a, b, out, precision=preset, config=SMALL) is out
    assert_within_preset(out, a, b, preset, dtype)


SPLIT_PRESETS = [p for p in PRESETS.values() if p.parts > 1]


@pytest.mark.parametrize("preset", SPLIT_PRESETS, ids=str)
def test_split_presets_keep_infinities(preset, rng):
    assert_split_keeps_infinities(preset, rng)


@pytest.mark.parametrize("preset", SPLIT_PRESETS, ids=str)
def test_split_presets_hold_their_tolerance_down_to_2_to_the_minus_100(preset, rng):
    """Elements of A near 2^-100 (B near 2^30): every part of the split is still a normal
    float32, so the preset keeps its tolerance (below it the lower parts lose bits to the
    subnormal range: docs/design/tensor-cores.md)."""
    a, b = make_operands(6, 5, 24, F32, "row", rng)
    a = (np.sign(a) * (1 + abs(a)) * 2.0**-100).astype(F32)
    b = (b * 2.0**30).astype(F32)
    out = numba_gemm.matmul(a, b, precision=preset.name, algorithm="mma")
    assert_within_preset(out, a, b, preset.name, F32)


@pytest.mark.gpu
@pytest.mark.parametrize("preset", SPLIT_PRESETS, ids=str)
def test_gpu_split_presets_keep_infinities(preset, rng):
    assert_split_keeps_infinities(preset, rng, on_device=True)


@pytest.mark.parametrize("dtype", [BF16, F16])
def test_16_bit_operands_default_to_tensor_cores_and_may_write_float32(dtype, rng):
    a, b = make_operands(24, 40, 37, dtype, "row", rng)
    out = poisoned((24, 40), np.float32)
    numba_gemm.matmul(a, b, out, config=SMALL)
    assert_within_preset(out, a, b, None, dtype, np.float32)
    result = numba_gemm.matmul(a, b, config=SMALL)
    assert result.dtype == dtype
    assert_within_preset(result, a, b, None, dtype)


def test_batched_stacks_run_on_tensor_cores(rng):
    a = rng.standard_normal((3, 17, 20)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((20, 18)).astype(ml_dtypes.bfloat16)  # broadcast over the batch
    out = numba_gemm.matmul(a, b, config=SMALL)
    assert out.shape == (3, 17, 18) and out.dtype == BF16
    ref = a.astype(np.float64) @ b.astype(np.float64)
    error = np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert error <= tolerance(PRESETS["BF16_BF16_F32"], BF16, 20)


def test_presets_lose_the_precision_they_should(rng):
    """TF32 and bf16 lose their formats' precision; the split presets come within a small
    factor of float32's own error (BF16_X3 near 2^-16); the FFMA kernel is the yardstick."""
    M, N, K = 32, 32, 64
    a, b = make_operands(M, N, K, F32, "row", rng)
    ref = reference(a, b)

    def error(precision):
        config = None if precision == "F32_F32_F32" else SMALL
        return relative_error(numba_gemm.matmul(a, b, precision=precision, config=config), ref)

    exact = error("F32_F32_F32")
    assert 2.0**-11 / 4 < error("TF32_TF32_F32") < 2.0**-11 * 4
    assert 2.0**-9 / 4 < error("BF16_BF16_F32") < 2.0**-9 * 4
    assert 2.0**-20 < error("BF16_BF16_F32_X3") < 2.0**-13
    for precision in ("TF32_TF32_F32_X3", "BF16_BF16_F32_X6", "BF16_BF16_F32_X9"):
        assert error(precision) < 4 * exact, precision
    assert math.isfinite(exact) and exact < 2.0**-20


def test_precision_names_follow_jax(rng):
    jax = pytest.importorskip("jax")
    f32 = np.dtype(np.float32)
    assert resolve(None, f32).name == "F32_F32_F32"
    assert resolve("highest", f32).name == "F32_F32_F32"
    assert resolve("HIGH", f32).name == "TF32_TF32_F32"
    assert resolve(jax.lax.Precision.DEFAULT, f32).name == "TF32_TF32_F32"
    assert resolve(jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X6, f32).name == "BF16_BF16_F32_X6"
    assert resolve("highest", BF16).name == "BF16_BF16_F32"
    assert resolve(None, np.dtype(np.float64)).name == "F64_F64_F64"


@pytest.mark.parametrize(
    "call, error, fragment",
    [
        (lambda a, b: numba_gemm.matmul(a, b.astype(np.float32)), TypeError, "cast one"),
        (
            lambda a, b: numba_gemm.matmul(a, b, precision="F16_F16_F32"),
            ValueError,
            "takes float16",
        ),
        (lambda a, b: numba_gemm.matmul(a, b, precision="TF33"), ValueError, "unknown precision"),
        (lambda a, b: numba_gemm.matmul(a, b, precision=3), TypeError, "precision must be"),
        (lambda a, b: numba_gemm.matmul(a, b, algorithm="tiled"), ValueError, "cannot compute"),
        (
            lambda a, b: numba_gemm.matmul(a, b, algorithm="mma", config=numba_gemm.TileConfig()),
            TypeError,
            "MmaConfig",
        ),
        (
            lambda a, b: numba_gemm.matmul(a, b, out=np.empty((4, 4), np.float64)),
            TypeError,
            "bfloat16 or float32",
        ),
        (
            lambda a, b: numba_gemm.matmul(a, b, config=MmaConfig(24, 32, 16, 1, 1, 2, 1)),
            ValueError,
            "multiple of 16",
        ),
    ],
)
def test_tensor_core_refusals(call, error, fragment):
    a = np.ones((4, 4), ml_dtypes.bfloat16)
    with pytest.raises(error, match=fragment):
        call(a, a.copy())


def test_float32_tensor_core_presets_refuse_tiled_config(rng):
    a, b = make_operands(8, 8, 8, F32, "row", rng)
    with pytest.raises(TypeError, match="MmaConfig"):
        numba_gemm.matmul(a, b, precision="TF32_TF32_F32", config=numba_gemm.TileConfig())
    with pytest.raises(ValueError, match="cannot compute"):
        numba_gemm.matmul(a, b, algorithm="mma")


def test_operand_modes_pick_the_contiguous_axis(rng):
    from numba_gemm.descriptor import describe

    a, b = make_operands(32, 48, 16, BF16, "a_col", rng)
    assert operand_mode(describe(a), True) == ("x", 16)  # column-major A: m contiguous
    assert operand_mode(describe(b), False) == ("x", 16)  # row-major B: n contiguous
    a, b = make_operands(32, 48, 16, BF16, "b_col", rng)
    assert operand_mode(describe(a), True) == ("k", 16)
    assert operand_mode(describe(b), False) == ("k", 16)
    a, b = make_operands(17, 19, 23, BF16, "row", rng)  # rows of 23 elements: misaligned
    assert operand_mode(describe(a), True) == ("k", 0)


# (operand dtype, row stride in elements, the cp.async copy that rows so aligned take)
COPY_CASES = [
    (BF16, 24, 16),
    (BF16, 12, 8),
    (BF16, 10, 4),  # a model's 10-class layer
    (BF16, 11, 0),  # element copies
    (F32, 12, 16),
    (F32, 10, 8),
    (F32, 11, 4),
]


def strided_operands(dtype, stride, rng, to_device=False):
    """A (19 x K) and B (K x N) whose rows are ``stride`` elements apart and one element
    shorter (K = N = stride - 1): every row ends in a partial copy."""
    from numba_gemm.launch import to_device as copy_to_device

    K = N = stride - 1
    bases = [rng.standard_normal(shape).astype(dtype) for shape in ((19, stride), (K, stride))]
    if to_device:
        bases = [copy_to_device(base) for base in bases]
    return bases[0][:, :K], bases[1][:, :N]


@pytest.mark.parametrize("dtype, stride, copy_bytes", COPY_CASES, ids=str)
def test_copies_as_wide_as_the_rows_align(dtype, stride, copy_bytes, rng):
    from numba_gemm.descriptor import describe

    a, b = strided_operands(dtype, stride, rng, to_device=True)
    assert operand_mode(describe(a), True) == ("k", copy_bytes)
    assert operand_mode(describe(b), False) == ("x", copy_bytes)
    preset = "TF32_TF32_F32" if dtype == F32 else "BF16_BF16_F32"
    out = poisoned((a.shape[0], b.shape[1]), F32, to_device=True)
    numba_gemm.matmul(a, b, out, precision=preset, config=SMALL)
    assert_within_preset(to_host(out), to_host(a), to_host(b), preset, dtype, F32)


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", ["auto", "mma", "wgmma"])
@pytest.mark.parametrize("dtype, stride, copy_bytes", COPY_CASES, ids=str)
def test_gpu_copies_as_wide_as_the_rows_align(dtype, stride, copy_bytes, algorithm, rng):
    from numba import cuda

    a, b = strided_operands(dtype, stride, rng, to_device=True)
    preset = "TF32_TF32_F32" if dtype == F32 else "BF16_BF16_F32"
    out = poisoned((a.shape[0], b.shape[1]), F32, to_device=True)
    numba_gemm.matmul(a, b, out, precision=preset, algorithm=algorithm)
    cuda.synchronize()
    assert_within_preset(to_host(out), to_host(a), to_host(b), preset, dtype, F32)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", [(1, 1, 1), (127, 129, 131), (256, 384, 512)], ids=str)
@pytest.mark.parametrize("case", TENSOR_CORE_CASES, ids=case_id)
def test_gpu_mma_default_configs(case, shape, layout, rng):
    from numba import cuda

    dtype, preset = case
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng, to_device=True)
    out = poisoned((M, N), dtype, to_device=True, layout=layout)
    numba_gemm.matmul(a, b, out, precision=preset, algorithm="mma")  # Hopper's auto: wgmma
    cuda.synchronize()
    assert_within_preset(out, a, b, preset, dtype)
