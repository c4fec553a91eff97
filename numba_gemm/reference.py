"""What results are checked against: operands in every layout, float64 references, tolerances.

Used by the tuner (each candidate's result is checked before it is timed), ``python -m
numba_gemm demo``, the benchmarks and the tests.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from .descriptor import transpose_view

__all__ = [
    "LAYOUTS",
    "TRIPLE_LAYOUTS",
    "make_operands",
    "make_triple_operands",
    "poisoned",
    "reference",
    "triple_reference",
    "relative_error",
    "tolerance",
    "to_host",
]

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
        from .launch import to_device as copy_to_device

        base = copy_to_device(base)
    return view(base)


def make_operands(
    M: int,
    N: int,
    K: int,
    dtype=np.float32,
    layout: str = "row",
    rng: np.random.Generator | None = None,
    to_device: bool = False,
):
    """Fresh random A (M x K) and B (K x N) in one of :data:`LAYOUTS`."""
    rng = np.random.default_rng() if rng is None else rng
    a_layout, b_layout, _ = LAYOUTS[layout]
    return (
        _view(M, K, a_layout, rng.standard_normal, dtype, to_device),
        _view(K, N, b_layout, rng.standard_normal, dtype, to_device),
    )


# Layouts of A, B, C of a triple product (and of D: the last entry of LAYOUTS[name] or row).
TRIPLE_LAYOUTS = {
    "row": ("row", "row", "row"),
    "col": ("col", "col", "col"),
    "sliced": ("sliced", "sliced", "sliced"),
    "mixed": ("col", "sliced", "row"),
}


def make_triple_operands(
    M: int,
    K1: int,
    K2: int,
    N: int,
    dtype=np.float32,
    layout: str = "row",
    rng: np.random.Generator | None = None,
    to_device: bool = False,
):
    """Fresh random A (M x K1), B (K1 x K2), C (K2 x N) in one of :data:`TRIPLE_LAYOUTS`."""
    rng = np.random.default_rng() if rng is None else rng
    return tuple(
        _view(rows, cols, view, rng.standard_normal, dtype, to_device)
        for (rows, cols), view in zip(((M, K1), (K1, K2), (K2, N)), TRIPLE_LAYOUTS[layout])
    )


def poisoned(shape, dtype, to_device: bool = False, layout: str = "row"):
    """An M x N output in C's layout of :data:`LAYOUTS` ``layout``, filled with NaN so
    that any element a kernel fails to write shows."""
    return _view(*shape, LAYOUTS[layout][2], lambda s: np.full(s, np.nan), dtype, to_device)


def to_host(x) -> np.ndarray:
    """``x`` as a NumPy array: Numba's, CuPy's and PyTorch's device arrays copied to the host
    (bfloat16 as ``ml_dtypes.bfloat16``), anything else through ``np.asarray``."""
    if hasattr(x, "copy_to_host"):
        from .launch import copy_to_host

        return copy_to_host(x)
    if type(x).__module__.split(".")[0] == "cupy":
        return x.get()
    if hasattr(x, "detach"):  # PyTorch
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":  # NumPy has no bfloat16: its bits, viewed
            import torch

            return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    return np.asarray(x)


def reference(a, b, rows=None) -> np.ndarray:
    """A @ B in float64 on the host; only the given ``rows`` of it, if any."""
    a = to_host(a) if rows is None else to_host(a)[rows]
    return a.astype(np.float64) @ to_host(b).astype(np.float64)


def relative_error(out, ref: np.ndarray) -> float:
    """||out - ref||_F / ||ref||_F; NaN if any element of ``out`` is NaN."""
    diff = to_host(out).astype(np.float64) - ref
    return float(np.linalg.norm(diff) / np.linalg.norm(ref))


def triple_reference(a, b, c) -> np.ndarray:
    """A @ B @ C in float64 on the host."""
    return reference(a, b) @ to_host(c).astype(np.float64)


def tolerance(dtype, K: int) -> float:
    """Bound on :func:`relative_error` for a K-term dot product in ``dtype`` arithmetic.

    Rounding errors of random-sign sums grow like sqrt(K) units in the last
    place: 2 * eps * sqrt(K) is ~1e-6 for float32 at K = 17, ~8e-6 at K = 1024.
    """
    return 2 * float(np.finfo(dtype).eps) * math.sqrt(K)
