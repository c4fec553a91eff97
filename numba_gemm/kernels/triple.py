"""The triple product D = A @ B @ C of seed 003: the seed's naive kernel and a fused one.

Shapes: A (M x K1), B (K1 x K2), C (K2 x N), D (M x N); each a 1-D buffer plus
element strides, as in ``tiled``. Any sizes >= 1; float32 or float64. These
kernels compute the left order, (A @ B) @ C; the right order A @ (B @ C) is the
left order of the transposed chain, D^T = (C^T @ B^T) @ A^T, which the caller
(``numba_gemm.triple``) builds from transposed views at no cost.

**Why fuse** (seed 003's counts, N x N operands in float32): 2 N^3 multiply-adds
over 3 N^2 elements read and N^2 written, 16 N^2 bytes, an intensity of about
N / 16 multiply-adds per byte. Two separate GEMMs also write the intermediate
T = A @ B and read it back: 24 N^2 bytes, a third more. At N = 512 that is 4 MB
against 6 MB, about a microsecond either way at an H200's ~4 TB/s, while the
arithmetic (268 M multiply-adds) takes ~10 us: the product is compute-bound from
N of a few hundred on (ridge point near 14 multiply-adds per byte). So the bytes
saved are not where the time goes at 512. What the fused kernel gains there is
one launch instead of two, no intermediate buffer, and parallelism: a 512^3
GEMM cut into the tiles that make it efficient has only 16-32 of them for 132
SMs, while the fused kernel's split of the middle dimension gives 8x more CTAs.

**naive** (seed 003's kernel, with strides and rectangular shapes): one block per
row of D, one thread per column. The block computes its row of A @ B (K2 values,
one per thread) into shared memory, synchronises, and each thread then takes the
dot product of that row with its column of C. Limits: max(K2, N) threads per block
(<= 1024) and K2 elements of shared memory.

**fused** (no limit on any size): one launch; CTA ``(pid_m, pid_j)`` owns the
BLOCK_M rows ``m0:`` of A and the BLOCK_N-wide chunk ``j0:`` of the middle
dimension K2 (grid x = row blocks x chunks, chunk fastest).

1. *Zero D's rows*: the first CTA of each row block to arrive (an atomic counter)
   zeroes D[m0:m0+BLOCK_M, :] and raises the row block's ``ready`` flag.
2. *Phase 1*: T = A[m0:, :] @ B[:, j0:j0+BLOCK_N] with the tiled kernel's k loop
   (``tiled.mainloop``: cp.async pipeline, register blocking). T goes from registers
   into shared memory, k-major: it is the A operand of phase 2 and never leaves the
   SM.
3. *Phase 2*: for every n-tile of D, acc = T @ C[j0:j0+BLOCK_N, n0:n0+BLOCK_N],
   T resident and C streamed (``tiled.resident_mainloop``): one cp.async pipeline
   runs through all n-tiles, so the next tile's copies are in flight while this
   tile finishes, and each tile's acc is added into D with atomic adds (after
   waiting for ``ready``). The chunks of a row block start at different n-tiles so
   their atomics spread over D.
4. *Depart*: the last CTA of a row block resets its three counters to zero, so the
   counter buffer (``sync``, 3 per row block, zero before the launch) is zero
   again afterwards and the next launch on the stream can reuse it.

The wait in step 3 cannot deadlock, whatever order the GPU schedules CTAs in: the
CTA waited for is the one that arrived first, so it is already running, and it
raises the flag right after zeroing, before its own phase 1, without waiting on
anything. The sum over chunks runs in atomic order: D is not bitwise reproducible
from run to run (its error bound is that of any order).

Every multiply-add of the unfused pair is done once; the extra work is D's
zeroing (M * N stores) and cdiv(K2, BLOCK_N) atomic adds per element of D.

Measured (H100, README): 1.6x faster than two tiled GEMMs at N = 256 and 512, but
0.66x-0.82x from 1024 to 4096. Phase 2 is a string of short-k products (k = BLOCK_N)
that refill the copy pipeline and issue scalar atomic adds for every n-tile, and at 512
each SM runs one CTA of 4 warps. A pipeline that runs across n-tiles and vector atomics
(``red.global.add.v4.f32``) are the next steps.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
from numba import cuda

from ..descriptor import MatrixDesc
from ..launch import STATIC_SHARED_LIMIT, KernelLaunch, cdiv, kernel_launch, shared_memory_limit
from .ptx import backoff
from .tiled import (VECTOR_BYTES, SharedLayout, TileConfig, kernel_jit, mainloop, operand_modes,
                    resident_mainloop, split_k_parts, tile_storer)

__all__ = ["NAIVE_MAX_THREADS", "SYNC_PER_ROW_BLOCK", "plan_naive", "plan_fused",
           "fused_shared_bytes", "check_fused_config", "counters_desc", "sync_slots"]

NAIVE_MAX_THREADS = 1024  # one thread per column of A @ B and of D
SYNC_PER_ROW_BLOCK = 3  # arrived, ready, departed
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


# --- fused: split middle dimension, intermediate in shared memory ----------------------------

def fused_shared_bytes(config: TileConfig, dtype) -> int:
    """Dynamic shared memory of the fused kernel: the pipeline's stages plus the resident T
    (BLOCK_N rows of k, each BLOCK_M + one vector long)."""
    layout = SharedLayout.of(config, dtype)
    return (layout.resident_base + config.block_n * layout.a_row) * np.dtype(dtype).itemsize


def check_fused_config(config: TileConfig, dtype) -> None:
    """``ValueError`` if ``config`` cannot run the fused kernel (beyond the tiled kernel's rules)."""
    config.check(dtype)
    if config.block_n % config.block_k:
        raise ValueError(f"the fused kernel needs block_n ({config.block_n}) to be a multiple of "
                         f"block_k ({config.block_k}): phase 2 walks the resident T (block_n rows "
                         f"of its k) in whole k-tiles")


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
    return SYNC_PER_ROW_BLOCK * cdiv(M, config.block_m)


@functools.cache
def _fused_kernel(config: TileConfig, dtype: np.dtype, a_mode: tuple, b_mode: tuple,
                  c_mode: tuple, d_mode: tuple):
    """Compile-time specialisation of the fused kernel for one config, dtype and layout."""
    check_fused_config(config, dtype)
    vec = VECTOR_BYTES // dtype.itemsize
    BLOCK_M, BLOCK_N = config.block_m, config.block_n
    THREAD_M, THREAD_N, THREADS = config.thread_m, config.thread_n, config.cta_threads
    ACC_SIZE = THREAD_M * THREAD_N
    SCALAR = dtype.type
    SPLIT = config.split_k
    layout = SharedLayout.of(config, dtype)
    T_BASE, T_ROW = layout.resident_base, layout.a_row
    thread_tile, multiply_ab, A_REGS, B_REGS = mainloop(config, dtype, a_mode, b_mode)
    group_of, k_slice, sum_partials = split_k_parts(config, dtype)
    keep_t = tile_storer(config, dtype, ("m", True))  # T(m, j) -> smem[T_BASE + j * T_ROW + m]
    add_to_d = tile_storer(config, dtype, d_mode, accumulate=True)

    @cuda.jit(device=True)
    def add_tile_to_d(acc, n0, d_args):
        d, stride_dm, stride_dn, M, N, row0, col0 = d_args
        add_to_d(d, 0, stride_dm, stride_dn, M, N, acc, row0, n0 + col0)

    multiply_tc, C_REGS = resident_mainloop(config, dtype, c_mode, add_tile_to_d)
    ZERO_ALONG_M = d_mode[0] == "m"  # walk D's rows of the row block along its contiguous axis

    @kernel_jit(config.cta_threads)
    def fused_kernel(a, stride_am, stride_ak, b, stride_bk, stride_bn, c, stride_ck, stride_cn,
                     d, stride_dm, stride_dn, sync, M, K1, K2, N):
        smem = cuda.shared.array(0, dtype)
        token = cuda.shared.array(1, np.uint32)  # thread 0's atomic result, for the whole CTA
        acc = cuda.local.array(ACC_SIZE, SCALAR)
        a_frag = cuda.local.array(THREAD_M, SCALAR)
        b_frag = cuda.local.array(THREAD_N, SCALAR)
        a_regs = cuda.local.array(A_REGS, SCALAR)
        b_regs = cuda.local.array(B_REGS, SCALAR)
        c_regs = cuda.local.array(C_REGS, SCALAR)

        chunks = (K2 + BLOCK_N - 1) // BLOCK_N
        pid_m = cuda.blockIdx.x // chunks
        pid_j = cuda.blockIdx.x - pid_m * chunks
        m0 = pid_m * BLOCK_M
        j0 = pid_j * BLOCK_N
        cta_tid = cuda.threadIdx.x
        group, tid, base = group_of(cta_tid)
        thread_row, thread_col = thread_tile(tid)
        arrived = pid_m * 3
        ready = arrived + 1
        departed = arrived + 2

        # -- 1. the row block's first CTA to arrive zeroes its rows of D --------------------
        if cta_tid == 0:
            token[0] = cuda.atomic.add(sync, arrived, 1)
        cuda.syncthreads()
        if token[0] == 0:
            rows = min(BLOCK_M, M - m0)
            # Threads run along D's contiguous axis, with no division by a run-time value per
            # element (64-bit integer division is a ~100-instruction routine on the GPU).
            if ZERO_ALONG_M:  # THREADS // BLOCK_M columns at a time (threads % block_m == 0)
                m = cta_tid % BLOCK_M
                if m < rows:
                    for n in range(cta_tid // BLOCK_M, N, THREADS // BLOCK_M):
                        d[(m0 + m) * stride_dm + n * stride_dn] = 0
            else:
                for m in range(rows):
                    for n in range(cta_tid, N, THREADS):
                        d[(m0 + m) * stride_dm + n * stride_dn] = 0
            cuda.threadfence()  # the zeros reach L2 before the flag can be seen
            cuda.syncthreads()
            if cta_tid == 0:
                cuda.atomic.exch(sync, ready, 1)

        # -- 2. phase 1: T = A[m0:, :] @ B[:, j0:], kept k-major in shared memory ------------
        # (split-k: each thread group multiplies its slice of K1; group 0 sums the slices)
        k0, k_len, k_tiles = k_slice(K1, group)
        multiply_ab(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid,
                    a, m0 * stride_am + k0 * stride_ak, stride_am, stride_ak,
                    b, j0 * stride_bn + k0 * stride_bk, stride_bk, stride_bn,
                    M - m0, K2 - j0, k_len, k_tiles, thread_row, thread_col)
        if SPLIT > 1:
            sum_partials(acc, smem, tid, group)
        if group == 0:
            keep_t(smem, T_BASE, 1, T_ROW, BLOCK_M, BLOCK_N, acc, thread_row * vec,
                   thread_col * vec)

        # -- 3. wait until this row block of D is zero ---------------------------------------
        if cta_tid == 0:
            while cuda.atomic.add(sync, ready, 0) == 0:
                backoff()
            cuda.threadfence()
        # (the barrier at the start of multiply_tc publishes T and the flag to every thread)

        # -- 4. phase 2: D[m0:, :] += T @ C[j0:, :], one n-tile at a time --------------------
        # The thread groups take the n-tiles in turn; each runs one copy pipeline through its
        # tiles and adds each tile's block to D as soon as its last k-tile is multiplied.
        n_tiles = (N + BLOCK_N - 1) // BLOCK_N
        first_tile = (pid_j * n_tiles) // chunks  # chunks start apart: their atomics spread
        multiply_tc(acc, a_frag, b_frag, c_regs, smem, base, tid, group,
                    c, j0 * stride_ck, stride_ck, stride_cn,
                    first_tile, n_tiles, N, min(BLOCK_N, K2 - j0), thread_row, thread_col,
                    (d, stride_dm, stride_dn, M, N, m0 + thread_row * vec, thread_col * vec))

        # -- 5. depart: the row block's last CTA leaves its counters at zero -----------------
        if cta_tid == 0:
            if cuda.atomic.add(sync, departed, 1) == chunks - 1:
                sync[arrived] = 0
                sync[ready] = 0
                sync[departed] = 0

    return fused_kernel


def plan_fused(config: TileConfig, a: MatrixDesc, b: MatrixDesc, c: MatrixDesc, d: MatrixDesc,
               sync: MatrixDesc) -> KernelLaunch:
    """The fused kernel's launch on validated operands: D = (A @ B) @ C. ``sync`` is a uint32
    buffer of at least :func:`sync_slots` counters, all zero (they are zero again after); it
    comes after D, as an output scratch buffer, for XLA's kernel call."""
    check_fused_config(config, a.dtype)
    (M, K1), (K2, N) = a.shape, c.shape
    if sync.span < sync_slots(M, config):
        raise ValueError(f"sync holds {sync.span} counters; the launch needs {sync_slots(M, config)}")
    shared = fused_shared_bytes(config, a.dtype)
    if shared > STATIC_SHARED_LIMIT and shared > (limit := shared_memory_limit()):
        raise ValueError(f"fused config {config.label()} needs {shared} bytes of shared memory per "
                         f"block for {a.dtype}; this device allows {limit}")
    a_mode, b_mode, _ = operand_modes(a, b, d)
    _, c_mode, d_mode = operand_modes(b, c, d)
    kernel = _fused_kernel(config, a.dtype, a_mode, b_mode, c_mode, d_mode)
    grid = cdiv(M, config.block_m) * cdiv(K2, config.block_n)
    return kernel_launch(kernel, grid, config.cta_threads, shared,
                         (a, *a.strides, b, *b.strides, c, *c.strides, d, *d.strides, sync,
                          M, K1, K2, N))


# --- streamed: tiles of both products in one launch, T through L2 -----------------------------

STREAM_SYNC_HEAD = 2  # ticket, departed; then one counter per row block


def stream_slots(M: int, config: TileConfig) -> int:
    """How many uint32 counters the streamed kernel's ``sync`` buffer needs (all zero at launch)."""
    return STREAM_SYNC_HEAD + cdiv(M, config.block_m)


def intermediate_shape(M: int, K2: int, dtype) -> tuple[int, int]:
    """The rows and columns of the streamed kernel's T buffer, a row-major (K2, ld) array that
    holds T (M x K2) column-major: ``ld`` is M rounded up to whole 16-byte vectors, so that
    every column starts aligned and phase 2 copies T in 16-byte pieces."""
    vec = VECTOR_BYTES // np.dtype(dtype).itemsize
    return K2, cdiv(M, vec) * vec


def intermediate_view(buffer: MatrixDesc, M: int, K2: int) -> MatrixDesc:
    """T (M x K2) column-major in ``buffer``, an :func:`intermediate_shape` row-major array."""
    return replace(buffer, name="t", shape=(M, K2), strides=(1, buffer.strides[0]))


@functools.cache
def _streamed_kernel(config: TileConfig, dtype: np.dtype, a_mode: tuple, b_mode: tuple,
                     t_store_mode: tuple, t_mode: tuple, c_mode: tuple, d_mode: tuple):
    """Compile-time specialisation of the streamed kernel for one config, dtype and layout."""
    vec = VECTOR_BYTES // dtype.itemsize
    BLOCK_M, BLOCK_N = config.block_m, config.block_n
    THREAD_M, THREAD_N, SPLIT = config.thread_m, config.thread_n, config.split_k
    ACC_SIZE = THREAD_M * THREAD_N
    SCALAR = dtype.type
    HEAD = STREAM_SYNC_HEAD
    thread_tile, multiply_ab, AB_A_REGS, AB_B_REGS = mainloop(config, dtype, a_mode, b_mode)
    _, multiply_tc, TC_A_REGS, TC_B_REGS = mainloop(config, dtype, t_mode, c_mode)
    A_REGS, B_REGS = max(AB_A_REGS, TC_A_REGS), max(AB_B_REGS, TC_B_REGS)
    group_of, k_slice, sum_partials = split_k_parts(config, dtype)
    store_t = tile_storer(config, dtype, t_store_mode)
    store_d = tile_storer(config, dtype, d_mode)

    @kernel_jit(config.cta_threads)
    def streamed_kernel(a, stride_am, stride_ak, b, stride_bk, stride_bn, c, stride_ck, stride_cn,
                        d, stride_dm, stride_dn, t, stride_tm, stride_tk, sync, M, K1, K2, N, lag):
        smem = cuda.shared.array(0, dtype)
        token = cuda.shared.array(1, np.int64)  # thread 0's ticket, for the whole CTA
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
        if cta_tid == 0:
            token[0] = cuda.atomic.add(sync, 0, 1)
        cuda.syncthreads()
        ticket = token[0]
        # Step s (s < rows + lag) holds row block s's T tiles (s < rows), then row block
        # s - lag's D tiles (s >= lag): a D tile's T tiles always hold smaller tickets.
        head = lag * chunks
        per_step = chunks + n_tiles
        if ticket < head:
            is_t, pid_m, pid_x = True, ticket // chunks, ticket % chunks
        elif ticket < head + (rows - lag) * per_step:
            step, w = (ticket - head) // per_step, (ticket - head) % per_step
            if w < chunks:
                is_t, pid_m, pid_x = True, lag + step, w
            else:
                is_t, pid_m, pid_x = False, step, w - chunks
        else:
            v = ticket - head - (rows - lag) * per_step
            is_t, pid_m, pid_x = False, rows - lag + v // n_tiles, v % n_tiles
        m0 = pid_m * BLOCK_M
        x0 = pid_x * BLOCK_N

        if is_t:
            # -- 2. phase 1: T[m0:, x0:] = A[m0:, :] @ B[:, x0:] -----------------------------
            k0, k_len, k_tiles = k_slice(K1, group)
            multiply_ab(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid,
                        a, m0 * stride_am + k0 * stride_ak, stride_am, stride_ak,
                        b, x0 * stride_bn + k0 * stride_bk, stride_bk, stride_bn,
                        M - m0, K2 - x0, k_len, k_tiles, thread_row, thread_col)
            if SPLIT > 1:
                sum_partials(acc, smem, tid, group)
            if group == 0:
                store_t(t, 0, stride_tm, stride_tk, M, K2, acc, m0 + thread_row * vec,
                        x0 + thread_col * vec)
            cuda.threadfence()  # the tile reaches L2 before the count can be seen
            cuda.syncthreads()
            if cta_tid == 0:
                cuda.atomic.add(sync, HEAD + pid_m, 1)
        else:
            # -- 3. wait until the row block's T tiles are all in ------------------------------
            if cta_tid == 0:
                while cuda.atomic.add(sync, HEAD + pid_m, 0) < chunks:
                    backoff()
                cuda.threadfence()
            cuda.syncthreads()
            # -- 4. phase 2: D[m0:, x0:] = T[m0:, :] @ C[:, x0:] ------------------------------
            k0, k_len, k_tiles = k_slice(K2, group)
            multiply_tc(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid,
                        t, m0 * stride_tm + k0 * stride_tk, stride_tm, stride_tk,
                        c, x0 * stride_cn + k0 * stride_ck, stride_ck, stride_cn,
                        M - m0, N - x0, k_len, k_tiles, thread_row, thread_col)
            if SPLIT > 1:
                sum_partials(acc, smem, tid, group)
            if group == 0:
                store_d(d, 0, stride_dm, stride_dn, M, N, acc, m0 + thread_row * vec,
                        x0 + thread_col * vec)

        # -- 5. depart: the last CTA leaves every counter at zero for the next launch ---------
        if cta_tid == 0:
            if cuda.atomic.add(sync, 1, 1) == rows * (chunks + n_tiles) - 1:
                for i in range(HEAD + rows):
                    sync[i] = 0

    return streamed_kernel


def plan_streamed(config: TileConfig, a: MatrixDesc, b: MatrixDesc, c: MatrixDesc, d: MatrixDesc,
                  t: MatrixDesc, sync: MatrixDesc, lag: int) -> KernelLaunch:
    """The streamed kernel's launch on validated operands: D = (A @ B) @ C through ``t`` (M x
    K2, any strides: see :func:`intermediate_shape` for the fast layout). ``sync``: a uint32
    buffer of at least :func:`stream_slots` counters, all zero (and zero again after);
    ``lag``: how many row blocks of T tiles are handed out before the first D tiles."""
    config.check(a.dtype)
    (M, K1), (K2, N) = a.shape, c.shape
    rows = cdiv(M, config.block_m)
    if sync.span < stream_slots(M, config):
        raise ValueError(f"sync holds {sync.span} counters; the launch needs {stream_slots(M, config)}")
    if t.shape != (M, K2):
        raise ValueError(f"t must be {M} x {K2} (A @ B); got {t.shape[0]} x {t.shape[1]}")
    shared = config.shared_bytes(a.dtype)
    if shared > STATIC_SHARED_LIMIT and shared > (limit := shared_memory_limit()):
        raise ValueError(f"fused config {config.label()} needs {shared} bytes of shared memory per "
                         f"block for {a.dtype}; this device allows {limit}")
    a_mode, b_mode, t_store_mode = operand_modes(a, b, t)  # T as phase 1's output
    t_mode, c_mode, d_mode = operand_modes(t, c, d)  # and as phase 2's A operand
    kernel = _streamed_kernel(config, a.dtype, a_mode, b_mode, t_store_mode, t_mode, c_mode,
                              d_mode)
    grid = rows * (cdiv(K2, config.block_n) + cdiv(N, config.block_n))
    return kernel_launch(kernel, grid, config.cta_threads, shared,
                         (a, *a.strides, b, *b.strides, c, *c.strides, d, *d.strides, t, *t.strides,
                          sync, M, K1, K2, N, max(1, min(lag, rows))))
