"""The four loop orders of seed 001 as CUDA kernels: M-N-K, N-M-K, K-M-N, K-N-M.

Shapes: A is M x K, B is K x N, C = A @ B is M x N; each matrix is a 1-D buffer
plus element strides, indexed as in the seed: ``A(i, k) = a[i*stride_am + k*stride_ak]``.
A batch of products runs in one launch, one grid z slice per product, each
operand offset by its batch stride (0 broadcasts it).

The seed's nest ``for x: for y: for z: C(i,j) += A(i,k) * B(k,j)`` has two
parallel loops (i over M, j over N) and one reduction (k). On a GPU the two
parallel loops become the grid, one thread per C element, and what is left of
the loop order is (1) where the k loop sits, and (2) which parallel loop is
innermost, i.e. runs along consecutive threads of a warp:

=========  ==============  ===================  =============================
order      k loop          consecutive threads  C's partial sum
=========  ==============  ===================  =============================
``mnk``    innermost       along n (j)          a register; C written once
``nmk``    innermost       along m (i)          a register; C written once
``kmn``    outermost       along n (j)          global memory at every k step
``knm``    outermost       along m (i)          global memory at every k step
=========  ==============  ===================  =============================

For ``kmn``/``knm`` each thread's program is the seed's nest restricted to its
own element: ``C(i,j) = A(i,0)*B(0,j)``, then for every later k read C(i,j)
back from L2 (``ld.global.cg``, which the compiler cannot fold into the
previous store), add, and store it, as the seed analyses (and it never reads C before the
first store, so the output need not be zeroed). The element loops of the seed
are the grid; the per-element store/reload is what makes the order "k outer".

Why each order coalesces, or not. A warp's 32 threads issue one load each per
k step; they coalesce into few transactions when consecutive threads touch
consecutive addresses, and cost one transaction when they touch one address
(a broadcast):

- ``mnk`` / ``kmn`` (threads along n): every thread of a warp reads the same
  A(i, k) (broadcast, any layout of A) and B(k, j..j+31), which is contiguous
  only when B is row-major (``stride_bn == 1``). C(i, j..j+31) is contiguous
  when C is row-major. So these want B and C row-major; with column-major B
  each lane's B load is its own 32-byte sector: 8x (fp32) the bytes.
- ``nmk`` / ``knm`` (threads along m): the warp reads A(i..i+31, k), contiguous
  only when A is column-major (``stride_am == 1``), and broadcasts B(k, j). They
  want A and C column-major.
- An uncoalesced operand can still be cheap: each lane's 32-byte sector holds
  8 consecutive k values, which L1 serves on the next 7 steps unless the
  strides are powers of two and the warp's sectors evict each other
  (``docs/design/loop-orders.md``).
- ``kmn`` / ``knm`` move C through memory at every k step: about MNK reads and
  MNK writes on top of the operand loads (the seed's "C_w = MNK"); caches absorb
  part of it, but it is never faster than the matching register order.

``numba_gemm.model.traffic`` gives the element counts of each order under the
seed's three cache scenarios; ``docs/design/loop-orders.md`` compares them with timings.
"""

from __future__ import annotations

import functools

from numba import cuda

from ..descriptor import MatrixDesc
from ..launch import MAX_GRID_YZ, KernelLaunch, cdiv, kernel_launch
from .ptx import load_from_l2

__all__ = ["LOOP_ORDERS", "BLOCK_FAST", "BLOCK_SLOW", "plan_loop_order"]

# Thread block (1-D, as XLA's kernel-call launches): one warp along the innermost
# parallel loop, 8 warps along the other.
BLOCK_FAST = 32
BLOCK_SLOW = 8

# order -> (k loop outermost?, consecutive threads along n?)
LOOP_ORDERS = {
    "mnk": (False, True),
    "nmk": (False, False),
    "kmn": (True, True),
    "knm": (True, False),
}


@functools.cache
def _kernel(k_outer: bool, threads_along_n: bool):
    """Compile-time specialisation of the one loop-order kernel body."""

    @cuda.jit
    def loop_order_kernel(a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn,
                          c, stride_cb, stride_cm, stride_cn, M, N, K):  # fmt: skip
        fast = cuda.blockIdx.x * BLOCK_FAST + cuda.threadIdx.x % BLOCK_FAST
        slow = cuda.blockIdx.y * BLOCK_SLOW + cuda.threadIdx.x // BLOCK_FAST
        if threads_along_n:
            i, j = slow, fast
        else:
            i, j = fast, slow
        if i >= M or j >= N:
            return
        pid_batch = cuda.blockIdx.z
        a_row = pid_batch * stride_ab + i * stride_am
        b_col = pid_batch * stride_bb + j * stride_bn
        c_ij = pid_batch * stride_cb + i * stride_cm + j * stride_cn
        if k_outer:
            # The partial sum lives in C: store after every k step, reload before the
            # next (an L2 load the compiler cannot replace by the value just stored).
            c[c_ij] = a[a_row] * b[b_col]
            for k in range(1, K):
                c[c_ij] = (
                    load_from_l2(c, c_ij) + a[a_row + k * stride_ak] * b[k * stride_bk + b_col]
                )
        else:
            # The partial sum lives in a register; C is written once.
            acc = a[a_row] * b[b_col]
            for k in range(1, K):
                acc += a[a_row + k * stride_ak] * b[k * stride_bk + b_col]
            c[c_ij] = acc

    return loop_order_kernel


def plan_loop_order(order: str, a: MatrixDesc, b: MatrixDesc, c: MatrixDesc) -> KernelLaunch:
    """The launch of ``order`` on validated operands: C (M x N) = A (M x K) @ B (K x N), for
    each of ``c.batch`` products."""
    k_outer, threads_along_n = LOOP_ORDERS[order]
    (M, K), N = a.shape, b.shape[1]
    fast, slow = (N, M) if threads_along_n else (M, N)
    grid = (cdiv(fast, BLOCK_FAST), cdiv(slow, BLOCK_SLOW), c.batch)
    if grid[1] > MAX_GRID_YZ:
        raise ValueError(
            f"{order}: {'M' if threads_along_n else 'N'} = {slow} exceeds this kernel's limit of "
            f"{MAX_GRID_YZ * BLOCK_SLOW} (CUDA's grid y extent of {MAX_GRID_YZ} blocks of "
            f"{BLOCK_SLOW})"
        )
    return kernel_launch(_kernel(k_outer, threads_along_n), grid, BLOCK_FAST * BLOCK_SLOW, 0,
                         (a, a.batch_stride, *a.strides, b, b.batch_stride, *b.strides,
                          c, c.batch_stride, *c.strides, M, N, K))  # fmt: skip
