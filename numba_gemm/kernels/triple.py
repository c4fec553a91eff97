"""The triple product D = A @ B @ C of seed 003: the seed's naive kernel and a fused one.

Shapes: A (M x K1), B (K1 x K2), C (K2 x N), D (M x N); each a 1-D buffer plus
element strides, as in ``tiled``. Any sizes >= 1; float32 or float64. These
kernels compute the left order, (A @ B) @ C; the right order A @ (B @ C) is the
left order of the transposed chain, D^T = (C^T @ B^T) @ A^T, which the caller
(``numba_gemm.triple``) builds from transposed views at no cost.

**Where the time goes** (seed 003's counts, N x N operands in float32): 2 N^3
multiply-adds over 3 N^2 elements read and N^2 written, 16 N^2 bytes, an
intensity of about N / 16 multiply-adds per byte. Two separate GEMMs also write
the intermediate T = A @ B and read it back: 24 N^2 bytes. At N = 512 that is
4 MB against 6 MB, about a microsecond either way at ~3-4 TB/s, while the 268 M
multiply-adds take ~9 us at an H100's fp32 peak: from N of a few hundred on the
chain is compute-bound (ridge point near 14 multiply-adds per byte), and the
bytes fusion saves are not where the time goes. What costs at N = 512 is
parallelism and latency: each 512^3 product, cut into tiles large enough to be
efficient, has only 16-128 of them for 132 SMs, and two launches wait on each
other. So the fused kernel is built for those.

**naive** (seed 003's kernel, with strides and rectangular shapes): one block per
row of D, one thread per column. The block computes its row of A @ B (K2 values,
one per thread) into shared memory, synchronises, and each thread then takes the
dot product of that row with its column of C. Limits: max(K2, N) threads per block
(<= 1024) and K2 elements of shared memory.

**fused** (no limit on any size): one launch runs the tiles of both products, the
tiled kernel's main loop (``tiled.mainloop``) in every CTA. T passes through L2 in
a scratch buffer (``t``), column-major (phase 2 copies it with 16-byte ``cp.async``)
or, under the largest register tiles, row-major (``intermediate_row_major``).

1. *Ticket*: each CTA takes the next ticket from a counter (``sync[0]``). Tickets
   ``< rows x chunks`` are T tiles (BLOCK_M x BLOCK_N of T = A @ B), the rest D
   tiles, each product in the tiled kernel's grouped order (seed 004).
2. *T tile*: T[m0:, x0:] = A[m0:, :] @ B[:, x0:], stored; then the CTA counts
   itself into its row block's counter (``sync[2 + pid_m]``) with a release
   (``ptx.release_add``: a barrier, then one thread's ``fence.acq_rel.gpu`` and add).
3. *D tile*: one thread waits (``ptx.load_acquire``) until the row block's counter
   holds all its T tiles and a barrier holds the CTA until then; then
   D[m0:, x0:] = T[m0:, :] @ C[:, x0:], stored: D is written once, no atomics, and
   the result is the same bits on every run.
4. *Split-k* (``TileConfig.split_k``, for small chains): the CTA's threads form
   groups that each run the k loop over a slice of k with their own pipeline; group
   0 sums the partial tiles (``tiled.split_k_parts``). A 512-chain's 32 x 64 tiles
   then run 8 warps per SM instead of 2.
5. *Depart*: the last CTA (``sync[1]``) resets every counter to zero, so the buffer
   is zero again for the next launch on the stream.

The wait in step 3 cannot deadlock, whatever order the GPU schedules CTAs in: a
CTA only waits on tiles with smaller tickets, and a ticket is only taken by a CTA
that is running. Against two launches of the tiled kernel this saves the second
launch, lets D tiles of finished row blocks start while T's last tiles run, and
(with split-k) runs the small chain's few tiles with enough warps.

The launch asks for more than half an SM's shared memory, so one CTA runs per SM: XLA's
compile of this kernel (``jax_bridge``) used fewer registers than Numba's and fitted two,
and at N = 1024 ran 1.6x slower for it.

Measured (H100, ``benchmarks/triple_product.py``, README): at N = 512 2.5x faster
than two tiled GEMMs (29 us of GPU time, as for PyTorch's two cuBLAS calls); from 1024
to 4096 between 0.99x (2048, where the tiled GEMM's tiles already fill the SMs) and 1.23x
(1536) of them. An earlier design kept T in shared
memory (a CTA per row block and chunk of K2, adding its share into D atomically): it lost
at N = 512 too (34 us with split-k), and from 1024 on by 20-35%, to the atomics and the
repeated zeroing of D.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
from numba import cuda

from ..descriptor import MatrixDesc
from ..launch import (STATIC_SHARED_LIMIT, KernelLaunch, alone_on_multiprocessor, cdiv,
                      kernel_launch, shared_memory_limit, shared_memory_per_multiprocessor)
from ..ordering import tile_of
from .ptx import backoff, load_acquire, release_add
from .tiled import VECTOR_BYTES, TileConfig, kernel_jit, operand_modes, tile_computer

__all__ = ["NAIVE_MAX_THREADS", "SYNC_HEAD", "plan_naive", "plan_fused", "counters_desc",
           "sync_slots", "ROW_MAJOR_T_FROM", "intermediate_row_major", "intermediate_shape",
           "intermediate_view"]

NAIVE_MAX_THREADS = 1024  # one thread per column of A @ B and of D
SYNC_HEAD = 2  # the fused kernel's ticket and departure counters, before one per row block
WARP = 32


# --- naive: seed 003 -----------------------------------------------------------------------

@functools.cache
def _naive_kernel(dtype: np.dtype):
    SCALAR = dtype.type

    @cuda.jit
    def naive_kernel(a, stride_am, stride_ak, b, stride_bk, stride_bn, c, stride_ck, stride_cn,
                     d, stride_dm, stride_dn, K1, K2, N):
        row_ab = cuda.shared.array(0, dtype)  # this block's row of A @ B
        row = cuda.blockIdx.x
        col = cuda.threadIdx.x
        # Step 1: the block computes row `row` of A @ B, one element per thread.
        if col < K2:
            acc = SCALAR(0)
            for k in range(K1):
                acc += a[row * stride_am + k * stride_ak] * b[k * stride_bk + col * stride_bn]
            row_ab[col] = acc
        cuda.syncthreads()
        # Step 2: that row times C gives row `row` of D.
        if col < N:
            acc = SCALAR(0)
            for k in range(K2):
                acc += row_ab[k] * c[k * stride_ck + col * stride_cn]
            d[row * stride_dm + col * stride_dn] = acc

    return naive_kernel


def plan_naive(a: MatrixDesc, b: MatrixDesc, c: MatrixDesc, d: MatrixDesc) -> KernelLaunch:
    """Seed 003's launch on validated operands: M blocks of max(K2, N) threads (rounded up
    to whole warps), K2 elements of dynamic shared memory."""
    (M, K1), (K2, N) = a.shape, c.shape
    # One thread per column of A @ B and of D; K2 elements of shared memory for the row.
    max_k2 = min(NAIVE_MAX_THREADS, STATIC_SHARED_LIMIT // a.dtype.itemsize)
    if N > NAIVE_MAX_THREADS or K2 > max_k2:
        raise ValueError(f"algorithm='naive' runs one thread per column of A @ B and of D and "
                         f"keeps a row of A @ B in shared memory: it needs N <= "
                         f"{NAIVE_MAX_THREADS} and K2 <= {max_k2} ({NAIVE_MAX_THREADS} threads "
                         f"per block, {STATIC_SHARED_LIMIT} bytes of shared memory); got K2 = "
                         f"{K2}, N = {N}; use algorithm='fused', which has no size limit")
    threads = cdiv(max(K2, N), WARP) * WARP
    shared = K2 * a.dtype.itemsize
    return kernel_launch(_naive_kernel(a.dtype), M, threads, shared,
                         (a, *a.strides, b, *b.strides, c, *c.strides, d, *d.strides, K1, K2, N))


# --- fused: both products' tiles in one launch, T through L2 ---------------------------------

def counters_desc(count: int, array=None) -> MatrixDesc:
    """The fused kernel's ``sync`` buffer as a descriptor: ``count`` uint32 counters in
    ``array`` (NumPy or CUDA), or, with no array, a placeholder for XLA's buffer."""
    if array is None:
        address, on_device = 0, True
    elif isinstance(array, np.ndarray):
        address, on_device = array.ctypes.data, False
    else:
        address, on_device = array.__cuda_array_interface__["data"][0], True
    return MatrixDesc("sync", (count, 1), (1, 1), np.dtype(np.uint32), array, on_device, address,
                      array)


def sync_slots(M: int, config: TileConfig) -> int:
    """How many uint32 counters the fused kernel's ``sync`` buffer needs (all zero at launch)."""
    return SYNC_HEAD + cdiv(M, config.block_m)


# T is column-major (phase 2 then copies its tiles with 16-byte cp.async, as a column-major A)
# except under register tiles of at least this many elements per thread, where row-major T
# (phase 2 then loads it through registers, as the tiled kernel loads a row-major A) measured
# faster. H100, fp32, benchmarks/triple_product.py configs: 128x256 tiles (8x16 per thread)
# 1-5% faster with row-major T at N = 2048, 3072 and 4096; 128x128 (8x8), 128x64 (8x4),
# 64x128 (4x8) and the split-k 32x64 (4x4) 2-8% faster with column-major T, N = 512 to 3072.
ROW_MAJOR_T_FROM = 128


def intermediate_row_major(config: TileConfig) -> bool:
    """Whether the fused kernel keeps T row-major under ``config`` (:data:`ROW_MAJOR_T_FROM`)."""
    return config.thread_m * config.thread_n >= ROW_MAJOR_T_FROM


def intermediate_shape(M: int, K2: int, dtype, row_major: bool) -> tuple[int, int]:
    """The rows and columns of the row-major scratch buffer that holds the fused kernel's T
    (M x K2), row-major or column-major: its rows are padded to whole 16-byte vectors, so that
    every row (or column) of T starts aligned and T moves in 16-byte pieces."""
    vec = VECTOR_BYTES // np.dtype(dtype).itemsize
    return (M, cdiv(K2, vec) * vec) if row_major else (K2, cdiv(M, vec) * vec)


def intermediate_view(buffer: MatrixDesc, M: int, K2: int, row_major: bool) -> MatrixDesc:
    """T (M x K2) in ``buffer``, an :func:`intermediate_shape` row-major array."""
    ld = buffer.strides[0]
    return replace(buffer, name="t", shape=(M, K2), strides=(ld, 1) if row_major else (1, ld))


@functools.cache
def _fused_kernel(config: TileConfig, dtype: np.dtype, a_mode: tuple, b_mode: tuple,
                     t_store_mode: tuple, t_mode: tuple, c_mode: tuple, d_mode: tuple):
    """Compile-time specialisation of the fused kernel for one config, dtype and layout."""
    BLOCK_M, BLOCK_N = config.block_m, config.block_n
    THREAD_M, THREAD_N = config.thread_m, config.thread_n
    ACC_SIZE = THREAD_M * THREAD_N
    SCALAR = dtype.type
    HEAD = SYNC_HEAD
    thread_tile, group_of, t_tile, AB_A_REGS, AB_B_REGS = tile_computer(config, dtype, a_mode,
                                                                        b_mode, t_store_mode)
    _, _, d_tile, TC_A_REGS, TC_B_REGS = tile_computer(config, dtype, t_mode, c_mode, d_mode)
    A_REGS, B_REGS = max(AB_A_REGS, TC_A_REGS), max(AB_B_REGS, TC_B_REGS)
    tile_of_device = cuda.jit(device=True)(tile_of)
    GROUP_M = config.group_m

    @kernel_jit(config.cta_threads)
    def fused_kernel(a, stride_am, stride_ak, b, stride_bk, stride_bn, c, stride_ck, stride_cn,
                     d, stride_dm, stride_dn, t, stride_tm, stride_tk, sync, M, K1, K2, N):
        smem = cuda.shared.array(0, dtype)
        tile = cuda.shared.array(3, np.int64)  # the CTA's ticket as (T tile?, pid_m, pid_x)
        acc = cuda.local.array(ACC_SIZE, SCALAR)
        a_frag = cuda.local.array(THREAD_M, SCALAR)
        b_frag = cuda.local.array(THREAD_N, SCALAR)
        a_regs = cuda.local.array(A_REGS, SCALAR)
        b_regs = cuda.local.array(B_REGS, SCALAR)

        cta_tid = cuda.threadIdx.x
        group, tid, base = group_of(cta_tid)
        thread_row, thread_col = thread_tile(tid)
        rows = (M + BLOCK_M - 1) // BLOCK_M
        chunks = (K2 + BLOCK_N - 1) // BLOCK_N  # T tiles per row block
        n_tiles = (N + BLOCK_N - 1) // BLOCK_N  # D tiles per row block

        # -- 1. a ticket: tiles are handed out in ticket order, not launch order -------------
        # Every T tile's ticket comes before every D tile's, so a D tile only waits on tiles
        # whose CTAs are already running. Within each product, the tiled kernel's grouped
        # order (seed 004), so CTAs that run together share operand tiles in L2.
        # Thread 0 takes and decodes it (divisions by run-time values cost ~100 instructions
        # each), the CTA reads the tile from shared memory.
        if cta_tid == 0:
            ticket = cuda.atomic.add(sync, 0, 1)
            t_tiles = rows * chunks
            if ticket < t_tiles:
                tile[0] = 1
                tile[1], tile[2] = tile_of_device(ticket, rows, chunks, GROUP_M)
            else:
                tile[0] = 0
                tile[1], tile[2] = tile_of_device(ticket - t_tiles, rows, n_tiles, GROUP_M)
        cuda.syncthreads()
        is_t = tile[0] != 0
        pid_m, pid_x = tile[1], tile[2]
        m0 = pid_m * BLOCK_M
        x0 = pid_x * BLOCK_N

        if is_t:
            # -- 2. a T tile: T[m0:, x0:] = A[m0:, :] @ B[:, x0:], then count it in ----------
            t_tile(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group,
                   a, 0, stride_am, stride_ak, b, 0, stride_bk, stride_bn,
                   t, 0, stride_tm, stride_tk, M, K2, K1, m0, x0, thread_row, thread_col)
            cuda.syncthreads()  # every thread's part of the tile is written ...
            if cta_tid == 0:
                release_add(sync, HEAD + pid_m)  # ... before the count can be seen
        else:
            # -- 3. a D tile: wait until the row block's T tiles are all in ------------------
            if cta_tid == 0:
                while load_acquire(sync, HEAD + pid_m) < chunks:
                    backoff()
            cuda.syncthreads()  # no thread reads T before the count was seen
            # ... then D[m0:, x0:] = T[m0:, :] @ C[:, x0:]
            d_tile(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group,
                   t, 0, stride_tm, stride_tk, c, 0, stride_ck, stride_cn,
                   d, 0, stride_dm, stride_dn, M, N, K2, m0, x0, thread_row, thread_col)

        # -- 4. depart: the last CTA leaves every counter at zero for the next launch ---------
        if cta_tid == 0:
            if cuda.atomic.add(sync, 1, 1) == rows * (chunks + n_tiles) - 1:
                for i in range(HEAD + rows):
                    sync[i] = 0

    return fused_kernel


def plan_fused(config: TileConfig, a: MatrixDesc, b: MatrixDesc, c: MatrixDesc, d: MatrixDesc,
               t: MatrixDesc, sync: MatrixDesc) -> KernelLaunch:
    """The fused kernel's launch on validated operands: D = (A @ B) @ C through ``t`` (M x
    K2, any strides: see :func:`intermediate_shape` for the fast layout). ``sync``: a uint32
    buffer of at least :func:`sync_slots` counters, all zero (and zero again after). Both
    come after D, as scratch outputs, for XLA's kernel call."""
    config.check(a.dtype)
    (M, K1), (K2, N) = a.shape, c.shape
    rows = cdiv(M, config.block_m)
    if sync.span < sync_slots(M, config):
        raise ValueError(f"sync holds {sync.span} counters; the launch needs {sync_slots(M, config)}")
    if t.shape != (M, K2):
        raise ValueError(f"t must be {M} x {K2} (A @ B); got {t.shape[0]} x {t.shape[1]}")
    shared = config.shared_bytes(a.dtype)
    if shared > STATIC_SHARED_LIMIT and shared > (limit := shared_memory_limit()):
        raise ValueError(f"fused config {config.label()} needs {shared} bytes of shared memory per "
                         f"block for {a.dtype}; this device allows {limit}")
    # One CTA per SM: where two fit, the block scheduler may put two T tiles on
    # one SM while others hold only D tiles that wait for them.
    shared = alone_on_multiprocessor(shared, shared_memory_per_multiprocessor())
    a_mode, b_mode, t_store_mode = operand_modes(a, b, t)  # T as phase 1's output
    t_mode, c_mode, d_mode = operand_modes(t, c, d)  # and as phase 2's A operand
    kernel = _fused_kernel(config, a.dtype, a_mode, b_mode, t_store_mode, t_mode, c_mode, d_mode)
    grid = rows * (cdiv(K2, config.block_n) + cdiv(N, config.block_n))
    return kernel_launch(kernel, grid, config.cta_threads, shared,
                         (a, *a.strides, b, *b.strides, c, *c.strides, d, *d.strides, t, *t.strides,
                          sync, M, K1, K2, N))
