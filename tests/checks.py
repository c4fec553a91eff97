"""Assertions the tests share: results against float64 NumPy, operands in their layouts.

The operands, references and tolerances themselves are the library's
(``numba_gemm.reference``: the tuner and the demo check with them too).
"""

from __future__ import annotations

import math

import numpy as np

from numba_gemm.descriptor import describe
from numba_gemm.kernels.tiled import TileConfig
from numba_gemm.reference import (
    LAYOUTS,
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
