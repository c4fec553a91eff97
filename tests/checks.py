"""Assertions the tests share: results against float64 NumPy, operands in their layouts.

The operands, references and tolerances themselves are the library's
(``numba_gemm.reference``: the tuner and the demo check with them too).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from numba_gemm.descriptor import describe
from numba_gemm.kernels.tiled import TileConfig
from numba_gemm.precision import resolve
from numba_gemm.precision import tolerance as preset_tolerance
from numba_gemm.reference import (
    LAYOUTS,
    make_operands,
    reference,
    relative_error,
    to_host,
    tolerance,
    triple_reference,
)

# Tuned tiles the tests plan with where they stand in for a GPU (numba_gemm/tuned.json): the
# H100's from 2048^3, the same transposed (as tiled.for_edge_tiles runs them on edge tiles),
# and the H200's from 2048^3.
H100_TILES = TileConfig(256, 128, 16, 16, 8, 4, 8)
H100_EDGE_TILES = TileConfig(128, 256, 16, 8, 16, 4, 8)
H200_TILES = TileConfig(128, 256, 16, 8, 16, 3, 8)

_DESCRIBED = {"row": "row", "col": "col", "sliced": "strided"}


def check_layouts(layout: str, *matrices) -> None:
    """Assert A, B (and C) really are in ``layout`` (no copy turned them row-major).

    Meaningful for matrices with both dimensions > 1.
    """
    for expected, x in zip(LAYOUTS[layout], matrices):
        found = describe(x).layout
        assert found == _DESCRIBED[expected], f"expected a {expected} matrix, found {found}"


def assert_product(out, a, b, dtype) -> None:
    """Assert ``out`` is A @ B within :func:`tolerance` (float64 reference; NaN fails)."""
    error = relative_error(out, reference(a, b))
    assert error <= tolerance(dtype, a.shape[1]), f"relative error {error:.3e}"


def assert_within_preset(out, a, b, preset=None, dtype=None, out_dtype=None) -> float:
    """Assert ``out`` is A @ B within ``preset``'s tolerance (a name, a ``Preset``, or None for
    the operands' default: ``numba_gemm.precision.resolve``) for operands of ``dtype`` (default
    A's) and a result of ``out_dtype`` (default the operands' dtype) over A's last axis;
    float64 reference, NaN fails. Returns the error."""
    dtype = np.dtype(a.dtype if dtype is None else dtype)
    return assert_near_reference(out, reference(a, b), preset, dtype, a.shape[-1], out_dtype)


def assert_near_reference(out, ref, preset, dtype, K: int, out_dtype=None) -> float:
    """:func:`assert_within_preset` against a float64 ``ref`` computed by the caller (a chain,
    a contraction of other axes), the tolerance of ``K`` terms. Returns the error."""
    error = relative_error(out, ref)
    bound = preset_tolerance(resolve(preset, np.dtype(dtype)), np.dtype(dtype), K, out_dtype)
    assert error <= bound, f"relative error {error:.3e} > {bound:.3e}"
    return error


def assert_triple(out, a, b, c, dtype) -> None:
    """Assert ``out`` is A @ B @ C within the sum of both products' :func:`tolerance`.

    The error is ||out - ref||_F (float64 reference; NaN fails) relative to the larger of
    ||ref||_F and ||abs(A) abs(B) abs(C)||_F / sqrt(K1 K2), the size that random-sign sums of
    this chain's terms have: with few output elements (a 1 x 1 product), ||ref|| alone can
    be small by cancellation and would turn ordinary rounding into a failure.
    """
    a, b, c = (to_host(x).astype(np.float64) for x in (a, b, c))  # one device-to-host copy each
    ref = triple_reference(a, b, c)
    K1, K2 = b.shape
    scale = max(
        np.linalg.norm(ref), np.linalg.norm((abs(a) @ abs(b)) @ abs(c)) / math.sqrt(K1 * K2)
    )
    error = float(np.linalg.norm(to_host(out).astype(np.float64) - ref) / scale)
    bound = tolerance(dtype, K1) + tolerance(dtype, K2)
    assert error <= bound, f"relative error {error:.3e} > {bound:.3e}"


def with_infinities(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Copies of A (M x K) and B (K x N), M, N >= 3 and K >= 6, with infinite elements: +inf
    in A's row 1 and -inf in its row 2 (rows of +-inf in A @ B), +inf in B's column 1 (a
    column of +-inf, and NaN where it meets row 1 or 2 with the opposite sign)."""
    a, b = a.copy(), b.copy()
    a[1, 3], a[2, 5], b[4, 1] = np.inf, -np.inf, np.inf
    return a, b


def assert_special_values(out, expected: np.ndarray, bound: float) -> None:
    """``out`` is NaN, +inf and -inf exactly where ``expected`` (float64 NumPy) is, and within
    ``bound`` (relative, Frobenius) of it on the finite elements."""
    out, expected = to_host(out).astype(np.float64), np.asarray(expected, np.float64)
    assert (np.isnan(out) == np.isnan(expected)).all(), "NaN where NumPy has none, or none"
    infinite = np.isinf(expected)
    assert infinite.any() and (out[infinite] == expected[infinite]).all(), "infinities differ"
    finite = np.isfinite(expected)
    assert np.isfinite(out[finite]).all(), "non-finite where NumPy's product is finite"
    error = relative_error(out[finite], expected[finite])
    assert error <= bound, f"relative error {error:.3e} > {bound:.3e} on the finite elements"


def infinite_reference(a, b) -> np.ndarray:
    """A @ B in float64 where inf x 0 and inf - inf give NaN, without NumPy's warning."""
    with np.errstate(invalid="ignore"):
        return reference(a, b)


def assert_split_keeps_infinities(preset, rng, algorithm: str = "mma", on_device: bool = False):
    """An infinite operand element leaves a split preset's correction products NaN (its
    remainder is inf - inf): they are summed apart and dropped where NaN, so ``matmul`` under
    ``preset`` (through ``algorithm``, on host or device operands) is +-inf or NaN exactly where
    NumPy's product is, as XLA's and Triton's split algorithms give."""
    import numba_gemm

    a, b = with_infinities(*make_operands(5, 7, 19, np.float32, "row", rng))
    operands = (cuda.to_device(a), cuda.to_device(b)) if on_device else (a, b)
    out = numba_gemm.matmul(*operands, precision=preset.name, algorithm=algorithm)
    bound = preset_tolerance(preset, np.float32, 19)
    assert_special_values(out, infinite_reference(a, b), bound)
