"""Which ``dot_general`` contractions are one strided, batched GEMM, and with which strides.

XLA hands a custom call dense row-major buffers. A contraction
``dot_general(lhs, rhs, ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch)))``
runs as one launch of a numba-gemm kernel when its loops fold into four:

- ``k``: the contracting axes, one strided axis of both operands;
- ``m``: lhs's free axes, one strided axis of lhs and of the output;
- ``n``: rhs's free axes, one strided axis of rhs and of the output;
- ``batch``: the batch axes, plus any free axes that did not fold into ``m``
  or ``n`` (the other operand then has batch stride 0), one strided axis of
  all three.

A group of axes folds into one when, in every buffer, each axis's stride is
the next one's stride times its extent (axes of extent 1 drop out). So a
transposed operand, a contraction over several trailing axes, ``flax``'s
``Dense`` on a (batch, seq, features) input and a ``vmap`` over any axis are
all strides, never copies; anything else raises ``NotImplementedError``.
Pure Python: no JAX, no Numba (``numba_gemm.loops`` is pure Python too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from numba_gemm.loops import fold_loops

__all__ = ["StridedGemm", "strided_gemm", "output_shape", "free_axes"]


@dataclass(frozen=True)
class StridedGemm:
    """``batch`` products C (m x n) = A (m x k) @ B (k x n) over three row-major buffers.

    ``lhs`` is (batch stride, stride along m, stride along k) of A in the lhs
    buffer, in elements; ``rhs`` is (batch stride, k, n) of B; ``out`` is
    (batch stride, m, n) of C in the output buffer. A batch stride of 0
    broadcasts that operand.
    """

    batch: int
    m: int
    n: int
    k: int
    lhs: tuple[int, int, int]
    rhs: tuple[int, int, int]
    out: tuple[int, int, int]


def _row_major_strides(shape) -> tuple[int, ...]:
    return tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))


def free_axes(ndim: int, contract, batch) -> list[int]:
    """The axes of an operand that are neither contracted nor batch axes, in order."""
    return [axis for axis in range(ndim) if axis not in contract and axis not in batch]


def output_shape(lhs_shape, rhs_shape, dimension_numbers) -> tuple[int, ...]:
    """``dot_general``'s output shape: batch axes, then lhs's free axes, then rhs's."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    return (
        tuple(lhs_shape[a] for a in lhs_batch)
        + tuple(lhs_shape[a] for a in free_axes(len(lhs_shape), lhs_contract, lhs_batch))
        + tuple(rhs_shape[a] for a in free_axes(len(rhs_shape), rhs_contract, rhs_batch))
    )


# A loop of the contraction: its extent and its stride in (lhs, rhs, out); 0 where absent.
_Loop = tuple[int, tuple[int, int, int]]


def _fold(loops: list[_Loop], order) -> list[_Loop]:
    """Merge neighbouring loops, sorted by ``order`` (outermost first), where every buffer steps
    over the inner loop's whole extent with one step of the outer loop (``fold_loops``)."""
    return fold_loops(sorted(loops, key=order))


def _by_buffer(which: int):
    """Order loops by their stride in buffer ``which``, largest first (then the others)."""
    return lambda loop: tuple(-s for s in (loop[1][which],) + loop[1])


def strided_gemm(lhs_shape, rhs_shape, dimension_numbers) -> StridedGemm:
    """The strided GEMM that computes ``dot_general`` on row-major buffers of these shapes.

    Raises ``NotImplementedError`` naming the axes when no single strided
    batched GEMM computes it (the caller may fall back to ``lax.dot_general``).
    """
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    lhs_strides, rhs_strides = _row_major_strides(lhs_shape), _row_major_strides(rhs_shape)
    out_strides = _row_major_strides(output_shape(lhs_shape, rhs_shape, dimension_numbers))
    lhs_free = free_axes(len(lhs_shape), lhs_contract, lhs_batch)
    rhs_free = free_axes(len(rhs_shape), rhs_contract, rhs_batch)
    n_batch = len(lhs_batch)

    def loops(entries) -> list[_Loop]:
        return [(extent, strides) for extent, strides in entries if extent > 1]

    batch = loops(
        (lhs_shape[la], (lhs_strides[la], rhs_strides[ra], out_strides[i]))
        for i, (la, ra) in enumerate(zip(lhs_batch, rhs_batch))
    )
    m = loops(
        (lhs_shape[la], (lhs_strides[la], 0, out_strides[n_batch + i]))
        for i, la in enumerate(lhs_free)
    )
    n = loops(
        (rhs_shape[ra], (0, rhs_strides[ra], out_strides[n_batch + len(lhs_free) + i]))
        for i, ra in enumerate(rhs_free)
    )
    k = loops(
        (lhs_shape[la], (lhs_strides[la], rhs_strides[ra], 0))
        for la, ra in zip(lhs_contract, rhs_contract)
    )

    k = _fold(k, _by_buffer(0))
    if len(k) > 1:
        raise NotImplementedError(
            f"the contracting axes {tuple(lhs_contract)} of lhs {tuple(lhs_shape)} and "
            f"{tuple(rhs_contract)} of rhs {tuple(rhs_shape)} do not form one strided axis in both "
            "operands (list them in the same memory order, adjacent in each)"
        )
    # The innermost foldable run of free axes is m (n); the outer rest joins the batch.
    m, n = _fold(m, _by_buffer(2)), _fold(n, _by_buffer(2))
    batch = _fold(batch + m[:-1] + n[:-1], _by_buffer(2))
    if len(batch) > 1:
        raise NotImplementedError(
            f"dot_general of lhs {tuple(lhs_shape)} and rhs {tuple(rhs_shape)} with dimension "
            f"numbers {dimension_numbers} needs {len(batch)} batch loops that no single stride "
            "describes; numba-gemm's kernels take one batch axis"
        )

    def single(group: list[_Loop]) -> _Loop:
        return group[-1] if group else (1, (0, 0, 0))

    (nb, sb), (nm, sm), (nn, sn), (nk, sk) = map(single, (batch, m[-1:], n[-1:], k))
    return StridedGemm(
        batch=nb,
        m=nm,
        n=nn,
        k=nk,
        lhs=(sb[0], sm[0], sk[0]),
        rhs=(sb[1], sk[1], sn[1]),
        out=(sb[2], sm[2], sn[2]),
    )
