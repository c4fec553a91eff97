"""Helpers to check GEMM results: operand layouts, float64 references, tolerances.

Used by the test suite, the benchmarks and ``python -m numba_gemm demo``.
"""

from __future__ import annotations

import math

import numpy as np

from .descriptor import transpose_view
from .kernels.tiled import TileConfig

__all__ = ["LAYOUTS", "CHAIN_LAYOUTS", "assert_product", "assert_triple", "make_chain",
           "triple_reference", "check_layouts", "make_operands", "poisoned", "reference",
           "relative_error", "tolerance", "H100_TILES", "H100_EDGE_TILES", "H200_TILES"]

# Tuned tiles the tests plan with where they stand in for a GPU (numba_gemm/tuned.json): the
# H100's from 2048^3, the same transposed (as tiled.for_edge_tiles runs them on edge tiles),
# and the H200's from 2048^3.
H100_TILES = TileConfig(256, 128, 16, 16, 8, 4, 8)
H100_EDGE_TILES = TileConfig(128, 256, 16, 8, 16, 4, 8)
H200_TILES = TileConfig(128, 256, 16, 8, 16, 3, 8)

# Layouts: name -> (layout of A, of B, of C). "col" matrices are transposed views of
# row-major arrays (BLAS's "T"); "sliced" ones are strided views with an offset.
LAYOUTS = {
    "row": ("row", "row", "row"),
    "col": ("col", "col", "col"),
    "a_col": ("col", "row", "row"),
    "b_col": ("row", "col", "row"),
    "sliced": ("sliced", "sliced", "sliced"),
}


def _view(rows: int, cols: int, layout: str, base_values, dtype, to_device: bool):
    """A rows x cols view in ``layout`` of a base array filled by ``base_values(shape)``."""
    if layout == "row":
        base_shape, view = (rows, cols), lambda x: x
    elif layout == "col":
        base_shape, view = (cols, rows), transpose_view
    elif layout == "sliced":  # strides (2 * (3*cols + 2), 3) elements, starting at (1, 2)
        base_shape, view = (2 * rows + 1, 3 * cols + 2), lambda x: x[1::2, 2::3][:rows, :cols]
    else:
        raise ValueError(f"unknown layout {layout!r}")
    base = base_values(base_shape).astype(dtype)
    if to_device:
        from numba import cuda

        base = cuda.to_device(base)
    return view(base)


def make_operands(M: int, N: int, K: int, dtype=np.float32, layout: str = "row",
                  rng: np.random.Generator | None = None, to_device: bool = False):
    """Fresh random A (M x K) and B (K x N) in one of :data:`LAYOUTS`."""
    rng = np.random.default_rng() if rng is None else rng
    a_layout, b_layout, _ = LAYOUTS[layout]
    return (_view(M, K, a_layout, rng.standard_normal, dtype, to_device),
            _view(K, N, b_layout, rng.standard_normal, dtype, to_device))


# Layouts of A, B, C of a triple product (and of D: the last entry of LAYOUTS[name] or row).
CHAIN_LAYOUTS = {
    "row": ("row", "row", "row"),
    "col": ("col", "col", "col"),
    "sliced": ("sliced", "sliced", "sliced"),
    "mixed": ("col", "sliced", "row"),
}


def make_chain(M: int, K1: int, K2: int, N: int, dtype=np.float32, layout: str = "row",
               rng: np.random.Generator | None = None, to_device: bool = False):
    """Fresh random A (M x K1), B (K1 x K2), C (K2 x N) in one of :data:`CHAIN_LAYOUTS`."""
    rng = np.random.default_rng() if rng is None else rng
    return tuple(_view(rows, cols, view, rng.standard_normal, dtype, to_device)
                 for (rows, cols), view in zip(((M, K1), (K1, K2), (K2, N)), CHAIN_LAYOUTS[layout]))


def poisoned(shape, dtype, to_device: bool = False, layout: str = "row"):
    """An M x N output in C's layout of :data:`LAYOUTS` ``layout``, filled with NaN so
    that any element a kernel fails to write shows."""
    return _view(*shape, LAYOUTS[layout][2], lambda s: np.full(s, np.nan), dtype, to_device)


_DESCRIBED = {"row": "row", "col": "col", "sliced": "strided"}


def check_layouts(layout: str, *matrices) -> None:
    """Assert A, B (and C) really are in ``layout`` (no copy turned them row-major).

    Meaningful for matrices with both dimensions > 1.
    """
    from .descriptor import describe

    for expected, x in zip(LAYOUTS[layout], matrices):
        found = describe(x).layout
        assert found == _DESCRIBED[expected], f"expected a {expected} matrix, found {found}"


def _host(x) -> np.ndarray:
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def reference(a, b, rows=None) -> np.ndarray:
    """A @ B in float64 on the host; only the given ``rows`` of it, if any."""
    a = _host(a) if rows is None else _host(a)[rows]
    return a.astype(np.float64) @ _host(b).astype(np.float64)


def relative_error(out, ref: np.ndarray) -> float:
    """||out - ref||_F / ||ref||_F; NaN if any element of ``out`` is NaN."""
    diff = _host(out).astype(np.float64) - ref
    return float(np.linalg.norm(diff) / np.linalg.norm(ref))


def assert_product(out, a, b, dtype) -> None:
    """Assert ``out`` is A @ B within :func:`tolerance` (float64 reference; NaN fails)."""
    error = relative_error(out, reference(a, b))
    assert error <= tolerance(dtype, a.shape[1]), f"relative error {error:.3e}"


def triple_reference(a, b, c) -> np.ndarray:
    """A @ B @ C in float64 on the host."""
    return reference(a, b) @ _host(c).astype(np.float64)


def assert_triple(out, a, b, c, dtype) -> None:
    """Assert ``out`` is A @ B @ C within the sum of both products' :func:`tolerance`.

    The error is ||out - ref||_F (float64 reference; NaN fails) relative to the larger of
    ||ref||_F and ||abs(A) abs(B) abs(C)||_F / sqrt(K1 K2), the size that random-sign sums of
    this chain's terms have: with few output elements (a 1 x 1 product), ||ref|| alone can
    be small by cancellation and would turn ordinary rounding into a failure.
    """
    a, b, c = (_host(x).astype(np.float64) for x in (a, b, c))  # one device-to-host copy each
    ref = triple_reference(a, b, c)
    K1, K2 = b.shape
    scale = max(np.linalg.norm(ref), np.linalg.norm((abs(a) @ abs(b)) @ abs(c)) / math.sqrt(K1 * K2))
    error = float(np.linalg.norm(_host(out).astype(np.float64) - ref) / scale)
    bound = tolerance(dtype, K1) + tolerance(dtype, K2)
    assert error <= bound, f"relative error {error:.3e} > {bound:.3e}"


def tolerance(dtype, K: int) -> float:
    """Bound on :func:`relative_error` for a K-term dot product in ``dtype`` arithmetic.

    Rounding errors of random-sign sums grow like sqrt(K) units in the last
    place: 2 * eps * sqrt(K) is ~1e-6 for float32 at K = 17, ~8e-6 at K = 1024.
    """
    return 2 * float(np.finfo(dtype).eps) * math.sqrt(K)
