"""Strided loops: folding neighbouring loops into one. Pure Python (no Numba).

A *loop* is ``(extent, strides)``: an axis walked by several arrays at once, ``strides`` its
step in each (0 where an array is broadcast along it). Two neighbouring loops, the outer first,
are one loop of their product extent where every array steps over the inner loop's whole extent
with one step of the outer. ``matmul`` folds a stack's batch axes this way (one launch per
folded loop that remains outside the innermost), and ``jax_bridge.mapping`` a contraction's
axes into a GEMM's m, n, k and batch.
"""

from __future__ import annotations

__all__ = ["Loop", "fold_loops"]

Loop = tuple[int, tuple[int, ...]]  # (extent, stride in each array)


def fold_loops(loops: list[Loop]) -> list[Loop]:
    """``loops`` (outermost first) with each neighbour merged into the loop outside it wherever
    every array's outer stride is its inner stride times the inner extent."""
    folded: list[Loop] = []
    for extent, strides in loops:
        if folded:
            outer_extent, outer_strides = folded[-1]
            if all(so == si * extent for so, si in zip(outer_strides, strides)):
                folded[-1] = (outer_extent * extent, strides)
                continue
        folded.append((extent, strides))
    return folded
