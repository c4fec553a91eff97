"""The triple product D = A @ B @ C of seed 003: the seed's naive kernel and a fused one.

Shapes: A (M x K1), B (K1 x K2), C (K2 x N), D (M x N), T = A @ B (M x K2); each a 1-D buffer
plus element strides, as in ``tiled``; any sizes >= 1; float32 or float64. The kernels compute
the left order, (A @ B) @ C; the right order is the left order of D^T = (C^T @ B^T) @ A^T,
which ``numba_gemm.triple`` builds from transposed views. Why they are built so, and how they
perform: ``docs/design/triple-product.md``.

**naive** (seed 003's kernel): one block per row of D, one thread per column. 1. The block
computes its row of A @ B (K2 values, one per thread) into shared memory. 2. After a barrier,
each thread takes the dot product of that row with its column of C. Constraints: max(K2, N)
threads per block (<= 1024) and K2 elements of shared memory.

**fused** (no size limit): one launch runs the tiles of both products, each CTA through the
tiled kernel's main loop (``tiled.mainloop``). T passes through L2 in a scratch buffer ``t``,
column-major (phase 2 copies its tiles with 16-byte ``cp.async``), or row-major where
:func:`intermediate_row_major` says.

1. *Ticket*: thread 0 takes the next ticket from a counter (``sync[0]``, ``atom.inc``, which
   wraps it to zero as the last ticket is taken): tickets ``< rows x chunks`` are T tiles, the
   rest D tiles, each product in grouped order (seed 004), or T column by column
   (``t_column_order``). It is taken before the wait for the launch ahead
   (``tiled.overlap_launches``): only atomics whose reply their CTA awaited write the
   counter, so it holds its final zero once the launch ahead has no CTA left.
2. *T tile*: T[m0:, x0:] = A[m0:, :] @ B[:, x0:], stored; the CTA then counts itself into its
   row block's counter (``sync[2 + pid_m]``) with a release (``ptx.release_add``).
3. *D tile*: one thread waits (``ptx.load_acquire``) until the row block's counter holds all
   its T tiles, a barrier holds the CTA; then D[m0:, x0:] = T[m0:, :] @ C[:, x0:], stored
   once, with plain stores. Last, the CTA counts itself out (``atom.inc`` wrapping at chunks
   + the row block's D tiles, so the last D tile leaves the counter zero), awaiting no reply.
4. *Split-k* (``TileConfig.split_k``, small chains): thread groups each run the k loop over a
   slice of k with their own pipeline; group 0 sums the partial tiles.
5. *Zero again*: steps 1 and 3 leave every counter zero for the next launch on the stream.

**stream-K** (``plan_fused`` with ``workers``: ``triple_product.fused_workers``): one worker
(CTA) per SM per product, each a range of the product's k-iterations (tiles x k-tiles in
grouped order, cut into equal parts) that may start and end inside a tile. 1. *Ticket*: as
above. 2. *Segments*, from the range's last to its first, one tile's k-iterations each (D
segments first wait for their row block of T). 3. A segment that does not reach its tile's
last k-iteration leaves its partial tile in ``partials`` and raises its flag; the one that does
adds the partials of the workers before it (waiting on their flags) and stores the tile. 4.
*Depart*: the last CTA to depart (``sync[1]`` counts them) resets every counter, since where the
ranges fall decides how many CTAs read each.

No schedule can deadlock: a CTA only waits on tiles (or workers) with smaller tickets, and a
ticket is only taken by a CTA that is running.

Constraints (checked by :func:`plan_fused`): ``sync`` holds :func:`sync_slots` zeroed counters;
``t`` is M x K2, its padding zeroed once (phase 2 reads whole 16-byte vectors); under stream-K,
1 to (tiles x k-iterations) workers per product and :func:`partials_shape` partials; at most
:data:`MAX_CTAS_PER_SM` CTAs per SM (the launch asks for enough shared memory that no more fit).
Each product compiles without edge code where its tiles are whole (``tiled.whole_tiles``);
where both compile to the same tile function with edge code, one call site serves both.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
from numba import cuda

from ..descriptor import MatrixDesc, scratch_desc
from ..launch import (
    STATIC_SHARED_LIMIT,
    KernelLaunch,
    at_most_on_multiprocessor,
    cdiv,
    kernel_launch,
    programmatic_launch,
    shared_memory_limit,
    shared_memory_per_multiprocessor,
)
from ..ordering import tile_of
from .common import VECTOR_BYTES, WARP, kernel_jit
from .ptx import backoff, load_acquire, load_from_l2, move_element, release_add
from .tiled import (
    TileConfig,
    operand_modes,
    overlap_launches,
    tile_computer,
    whole_tiles,
)

__all__ = [
    "NAIVE_MAX_THREADS",
    "SYNC_HEAD",
    "MAX_CTAS_PER_SM",
    "plan_naive",
    "plan_fused",
    "counters_desc",
    "sync_slots",
    "check_naive",
    "whole_products",
    "one_call_site",
    "fused_tiles_per_product",
    "partials_shape",
    "ROW_MAJOR_T_FROM",
    "large_register_tiles",
    "intermediate_row_major",
    "intermediate_shape",
    "intermediate_view",
]

NAIVE_MAX_THREADS = 1024  # one thread per column of A @ B and of D
# The fused kernels' ticket counter and stream-K's departure counter, before one counter per
# row block (the one-tile kernel leaves the second unused: its counters wrap back to zero).
SYNC_HEAD = 2
# The fused launch lets at most this many CTAs share an SM (``plan_fused``'s ``ctas_per_sm``):
# the split-k tiles it runs two to an SM fit no more by their registers.
MAX_CTAS_PER_SM = 2

# Slots of the one-tile fused kernel's ``tile`` (shared memory: thread 0 decodes the ticket,
# the CTA reads it).
TILE_IS_T = 0  # 1 for a tile of T = A @ B, 0 for a tile of D = T @ C
TILE_PID_M = 1  # the tile's row block
TILE_PID_X = 2  # the tile's column block (of T or of D)
TILE_WRAP = 3  # a D tile: where its row block's counter wraps to zero (step 3)
TILE_SLOTS = 4

# Slots of the stream-K kernel's ``plan`` (shared memory: thread 0's bookkeeping, read by the
# CTA where needed rather than held in registers across the k loop).
PLAN_TICKET = 0  # the CTA's ticket: its worker, T's workers first
PLAN_RANGE_BEGIN = 1  # the first k-iteration of the worker's range (over tiles x k-iterations)
PLAN_END = 2  # the end of what is left of the range: the next segment ends here
PLAN_K_ITERS = 3  # k-iterations per tile of the worker's product
PLAN_TOTAL = 4  # the product's tiles x k-iterations
PLAN_TILE_BEGIN = 5  # the first k-iteration of the segment's tile
PLAN_PID_M = 6  # the segment's tile: row block ...
PLAN_PID_X = 7  # ... and column block
PLAN_EARLIER = 8  # how many earlier workers hold part of the segment's tile
PLAN_SEGMENT_BEGIN = 9  # the segment's first k-iteration (-1 before the first segment)
PLAN_K0 = 10  # the segment's k range: k0 ...
PLAN_K_LEN = 11  # ... to k0 + k_len
PLAN_SLOTS = 12


# --- naive: seed 003 -----------------------------------------------------------------------


@functools.cache
def _naive_kernel(dtype: np.dtype):
    SCALAR = dtype.type

    @cuda.jit
    def naive_kernel(a, stride_am, stride_ak, b, stride_bk, stride_bn, c, stride_ck, stride_cn,
                     d, stride_dm, stride_dn, K1, K2, N):  # fmt: skip
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


def check_naive(K2: int, N: int, dtype) -> None:
    """``ValueError`` unless seed 003's kernel can run a chain with these K2 and N: one thread
    per column of A @ B and of D, a row of A @ B in shared memory."""
    max_k2 = min(NAIVE_MAX_THREADS, STATIC_SHARED_LIMIT // np.dtype(dtype).itemsize)
    if N > NAIVE_MAX_THREADS or K2 > max_k2:
        raise ValueError(
            f"algorithm='naive' runs one thread per column of A @ B and of D and "
            f"keeps a row of A @ B in shared memory: it needs N <= "
            f"{NAIVE_MAX_THREADS} and K2 <= {max_k2} ({NAIVE_MAX_THREADS} threads "
            f"per block, {STATIC_SHARED_LIMIT} bytes of shared memory); got K2 = "
            f"{K2}, N = {N}; use algorithm='fused', which has no size limit"
        )


def plan_naive(a: MatrixDesc, b: MatrixDesc, c: MatrixDesc, d: MatrixDesc) -> KernelLaunch:
    """Seed 003's launch on validated operands: M blocks of max(K2, N) threads (rounded up
    to whole warps), K2 elements of dynamic shared memory."""
    (M, K1), (K2, N) = a.shape, c.shape
    check_naive(K2, N, a.dtype)
    threads = cdiv(max(K2, N), WARP) * WARP
    shared = K2 * a.dtype.itemsize
    return kernel_launch(
        _naive_kernel(a.dtype),
        M,
        threads,
        shared,
        (a, *a.strides, b, *b.strides, c, *c.strides, d, *d.strides, K1, K2, N),
    )


# --- fused: both products' tiles in one launch, T through L2 ---------------------------------


def counters_desc(count: int, array=None) -> MatrixDesc:
    """The fused kernel's ``sync`` buffer as a descriptor: ``count`` uint32 counters in
    ``array`` (NumPy or CUDA), or, with no array, a placeholder for XLA's buffer."""
    return scratch_desc("sync", (count, 1), np.uint32, array)


def sync_slots(M: int, config: TileConfig, workers: tuple[int, int] | None = None) -> int:
    """How many uint32 counters the fused kernel's ``sync`` buffer needs (all zero at launch):
    the head and one per row block, and under stream-K one per worker (:func:`plan_fused`)."""
    return SYNC_HEAD + cdiv(M, config.block_m) + (sum(workers) if workers is not None else 0)


# T is column-major (phase 2 then copies its tiles with 16-byte cp.async, as a column-major A)
# except under register tiles of at least this many elements per thread (large_register_tiles)
# and under split-k tiles that cut both products whole: there row-major T (loaded through
# registers, as the tiled kernel loads a row-major A) measured faster (intermediate_row_major;
# docs/design/triple-product.md).
ROW_MAJOR_T_FROM = 128


def large_register_tiles(config: TileConfig) -> bool:
    """Whether ``config``'s register tiles hold :data:`ROW_MAJOR_T_FROM` elements or more: they
    need nearly every register (no stream-K) and may keep T row-major."""
    return config.thread_m * config.thread_n >= ROW_MAJOR_T_FROM


# Under large register tiles T stays row-major, except where both products carry edge code and
# would still compile to two tile functions (A's rows not 16-byte aligned while T's are, say):
# there column-major T.


def intermediate_row_major(
    config: TileConfig, a: MatrixDesc, b: MatrixDesc, c: MatrixDesc, d: MatrixDesc
) -> bool:
    """Whether the fused kernel keeps T row-major for D = (A @ B) @ C under ``config``: under
    split-k tiles in float32 where both products lie in whole tiles (where it was measured),
    and under :func:`large_register_tiles` unless both products carry edge code and row-major
    T would not make them one tile function (see above)."""
    (M, K1), (K2, N) = a.shape, c.shape
    interiors = whole_products(config, M, K1, K2, N)
    if config.split_k > 1 and a.dtype == np.float32 and all(interiors):
        return True
    if not large_register_tiles(config):
        return False
    if any(interiors):
        return True
    # T as plan_fused would see it in an aligned row-major scratch buffer (no data needed).
    rows, cols = intermediate_shape(M, K2, a.dtype, True)
    t = intermediate_view(
        MatrixDesc("t", (rows, cols), (cols, 1), a.dtype, None, True, 0, None), M, K2, True
    )
    return one_call_site(interiors, (*operand_modes(a, b, t), *operand_modes(t, c, d)))


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


@cuda.jit(device=True)
def wait_for_count(sync, counter, count, cta_tid):
    """The CTA waits until ``sync[counter]`` reaches ``count`` (a D tile: its row block's T
    tiles; stream-K: a flag): one thread polls, a barrier holds the others, so no thread
    reads what the count stands for before it was seen (acquire)."""
    if cta_tid == 0:
        while load_acquire(sync, counter) < count:
            backoff()
    cuda.syncthreads()


@cuda.jit(device=True)
def count_out(sync, counter, last, cta_tid):
    """The CTA, done with ``sync[counter]`` (a D tile, whose wait read it), adds 1 to it with
    ``atom.inc``, which wraps from ``last`` to zero: the counter's last reader leaves it zero
    for the next launch. One thread, and nothing waits for the atomic's reply (a ``RED``)."""
    if cta_tid == 0:
        cuda.atomic.inc(sync, counter, last)


@cuda.jit(device=True)
def count_up(sync, counter, cta_tid):
    """The CTA adds 1 to ``sync[counter]`` once every thread's writes are done (release): a T
    tile to its row block's count, a stream-K worker to its flag."""
    cuda.syncthreads()  # every thread's part is written ...
    if cta_tid == 0:
        release_add(sync, counter)  # ... before the count can be seen


@cuda.jit(device=True)
def depart(sync, departures, counters, cta_tid):
    """Depart: the last of the ``departures`` CTAs that count themselves out sets
    ``sync[:counters]`` to zero for the next launch on the stream."""
    if cta_tid == 0:
        if cuda.atomic.add(sync, 1, 1) == departures - 1:
            for i in range(counters):
                sync[i] = 0
            # Visible before the CTA ends: the next fused launch takes its ticket from sync[0]
            # before it waits for this one to complete (``_fused_kernel``, step 1).
            cuda.threadfence()


def _products(config: TileConfig, dtype: np.dtype, interiors: tuple, modes: tuple):
    """What both fused kernels compile from: the tile functions of T = A @ B (``ab``) and
    of D = T @ C (``tc``) under the six operand ``modes`` and the two products' ``interiors``
    (``tiled.whole_tiles``), the staging-register counts they share, and the device
    function that counts a chain's tiles."""
    ab = tile_computer(config, dtype, *modes[:3], interiors[0])
    tc = tile_computer(config, dtype, *modes[3:], interiors[1])
    BLOCK_M, BLOCK_N = config.block_m, config.block_n

    @cuda.jit(device=True)
    def tile_counts(M, K2, N):
        """(row blocks, T tiles per row block, D tiles per row block)."""
        return (
            (M + BLOCK_M - 1) // BLOCK_M,
            (K2 + BLOCK_N - 1) // BLOCK_N,
            (N + BLOCK_N - 1) // BLOCK_N,
        )

    return (
        ab,
        tc,
        max(ab.a_registers, tc.a_registers),
        max(ab.b_registers, tc.b_registers),
        tile_counts,
    )


def one_call_site(interiors: tuple, modes: tuple) -> bool:
    """Whether the fused kernel calls its products' tile function from one site: where both
    products compile to the same function (the same operand ``modes`` and ``interiors``) and
    it carries edge code (module docstring)."""
    return modes[:3] == modes[3:] and interiors[0] == interiors[1] and not interiors[0]


@functools.cache
def _fused_kernel(
    config: TileConfig,
    dtype: np.dtype,
    interiors: tuple,
    programmatic: bool,
    t_column_order: bool,
    *modes: tuple,
):
    """Compile-time specialisation of the fused kernel (one tile per CTA) for one config,
    dtype, layout (``modes``: A, B, T stored; T, C, D), ``interiors`` (T's, D's:
    ``tiled.whole_tiles``), ``programmatic`` (``tiled.overlap_launches``) and
    ``t_column_order`` (:func:`plan_fused`)."""
    BLOCK_M, BLOCK_N = config.block_m, config.block_n
    THREAD_M, THREAD_N = config.thread_m, config.thread_n
    ACC_SIZE = THREAD_M * THREAD_N
    SCALAR = dtype.type
    HEAD = SYNC_HEAD
    ab, tc, A_REGS, B_REGS, tile_counts = _products(config, dtype, interiors, modes)
    thread_tile, group_of, t_tile, d_tile = (
        ab.thread_tile,
        ab.group_of,
        ab.compute_tile,
        tc.compute_tile,
    )
    ONE_SITE = one_call_site(interiors, modes)  # the branch not taken is pruned
    tile_of_device = cuda.jit(device=True)(tile_of)
    GROUP_M = config.group_m
    T_COLUMNS = t_column_order  # T's tickets column by column: one group of every row block
    overlap = overlap_launches(programmatic)

    @kernel_jit(config.cta_threads)
    def fused_kernel(a, stride_am, stride_ak, b, stride_bk, stride_bn, c, stride_ck, stride_cn,
                     d, stride_dm, stride_dn, t, stride_tm, stride_tk, sync,
                     M, K1, K2, N):  # fmt: skip
        smem = cuda.shared.array(0, dtype)
        # The CTA's ticket as (T tile?, pid_m, pid_x), and for a D tile where its row block's
        # counter wraps (step 3).
        tile = cuda.shared.array(TILE_SLOTS, np.int64)
        acc = cuda.local.array(ACC_SIZE, SCALAR)
        a_frag = cuda.local.array(THREAD_M, SCALAR)
        b_frag = cuda.local.array(THREAD_N, SCALAR)
        a_regs = cuda.local.array(A_REGS, SCALAR)
        b_regs = cuda.local.array(B_REGS, SCALAR)

        cta_tid = cuda.threadIdx.x
        group, tid, base = group_of(cta_tid)
        thread_row, thread_col = thread_tile(tid)
        rows, chunks, n_tiles = tile_counts(M, K2, N)  # chunks: T tiles per row block

        # -- 1. a ticket: tiles are handed out in ticket order, not launch order -------------
        # Every T tile's ticket comes before every D tile's, so a D tile only waits on tiles
        # whose CTAs are already running. Within each product, the tiled kernel's grouped
        # order (seed 004), so CTAs that run together share operand tiles in L2.
        # Thread 0 takes and decodes it (divisions by run-time values cost ~100 instructions
        # each), the CTA reads the tile from shared memory.
        # The counter wraps to zero as the last ticket is taken (``atom.inc``), ready for the
        # next launch.
        # The ticket and its decoding come before the wait for the launch ahead (below), so that
        # they run while it finishes: the counter is only ever written by atomics whose reply
        # their CTA waited for (here, and stream-K's reset is fenced: ``depart``), so once the
        # launch ahead has no CTA left, which is when this one starts, it holds its final zero.
        if cta_tid == 0:
            t_tiles = rows * chunks
            ticket = cuda.atomic.inc(sync, 0, np.uint32(t_tiles + rows * n_tiles - 1))
            if ticket < t_tiles:
                tile[TILE_IS_T] = 1
                tile[TILE_PID_M], tile[TILE_PID_X] = tile_of_device(
                    ticket, rows, chunks, rows if T_COLUMNS else GROUP_M
                )
            else:
                tile[TILE_IS_T] = 0
                tile[TILE_PID_M], tile[TILE_PID_X] = tile_of_device(
                    ticket - t_tiles, rows, n_tiles, GROUP_M
                )
                tile[TILE_WRAP] = chunks + n_tiles - 1
        # Before any other memory is touched (the row blocks' counters too): the launch ahead
        # may still be running.
        overlap()
        cuda.syncthreads()
        is_t = tile[TILE_IS_T] != 0
        pid_m, pid_x = tile[TILE_PID_M], tile[TILE_PID_X]
        m0 = pid_m * BLOCK_M
        x0 = pid_x * BLOCK_N

        if ONE_SITE:
            # Steps 2-4 below through one call of the products' common tile function, its
            # operands chosen here: one copy of its edge code in the binary, not two.
            if is_t:
                lhs, stride_lm, stride_lk, rhs, stride_rk, stride_rn = (
                    a,
                    stride_am,
                    stride_ak,
                    b,
                    stride_bk,
                    stride_bn,
                )
                out, stride_om, stride_on, cols, inner = t, stride_tm, stride_tk, K2, K1
            else:
                wait_for_count(sync, HEAD + pid_m, chunks, cta_tid)
                lhs, stride_lm, stride_lk, rhs, stride_rk, stride_rn = (
                    t,
                    stride_tm,
                    stride_tk,
                    c,
                    stride_ck,
                    stride_cn,
                )
                out, stride_om, stride_on, cols, inner = d, stride_dm, stride_dn, N, K2
            t_tile(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group,
                   lhs, 0, stride_lm, stride_lk, rhs, 0, stride_rk, stride_rn,
                   out, 0, stride_om, stride_on, M, cols, inner,
                   m0, x0, thread_row, thread_col)  # fmt: skip
            if tile[TILE_IS_T] != 0:  # the ticket comes back from shared memory, as in step 3
                count_up(sync, HEAD + tile[TILE_PID_M], cta_tid)
            else:
                count_out(sync, HEAD + tile[TILE_PID_M], np.uint32(tile[TILE_WRAP]), cta_tid)
        # Otherwise each product keeps its own call, its operands fixed when compiling: one
        # call site with the operands chosen at run time costs registers where the tiles are
        # whole.
        elif is_t:
            # -- 2. a T tile: T[m0:, x0:] = A[m0:, :] @ B[:, x0:], then count it in ----------
            t_tile(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group,
                   a, 0, stride_am, stride_ak, b, 0, stride_bk, stride_bn,
                   t, 0, stride_tm, stride_tk, M, K2, K1,
                   m0, x0, thread_row, thread_col)  # fmt: skip
            count_up(sync, HEAD + pid_m, cta_tid)
        else:
            # -- 3. a D tile: wait until the row block's T tiles are all in, then
            # D[m0:, x0:] = T[m0:, :] @ C[:, x0:], then count out of the row block's counter
            # (the last of its D tiles leaves it zero).
            wait_for_count(sync, HEAD + pid_m, chunks, cta_tid)
            d_tile(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group,
                   t, 0, stride_tm, stride_tk, c, 0, stride_ck, stride_cn,
                   d, 0, stride_dm, stride_dn, M, N, K2,
                   m0, x0, thread_row, thread_col)  # fmt: skip
            # The count-out's operands come back from shared memory, not registers held
            # across the k loop, which needs every register (held, they moved shared loads
            # next to their FMAs and slowed the loop).
            count_out(sync, HEAD + tile[TILE_PID_M], np.uint32(tile[TILE_WRAP]), cta_tid)

    return fused_kernel


@functools.cache
def _stream_k_kernel(
    config: TileConfig, dtype: np.dtype, interiors: tuple, programmatic: bool, *modes: tuple
):
    """Compile-time specialisation of the stream-K fused kernel (workers over ranges of
    k-iterations) for one config, dtype, layout, interiors and ``programmatic`` (as for
    ``_fused_kernel``)."""
    BLOCK_M, BLOCK_N, BLOCK_K = config.block_m, config.block_n, config.block_k
    THREAD_M, THREAD_N = config.thread_m, config.thread_n
    THREADS = config.threads
    ACC_SIZE = THREAD_M * THREAD_N
    SLOT = THREADS * ACC_SIZE  # one partial tile in ``partials``
    SCALAR = dtype.type
    HEAD = SYNC_HEAD
    ab, tc, A_REGS, B_REGS, tile_counts = _products(config, dtype, interiors, modes)
    thread_tile, group_of = ab.thread_tile, ab.group_of
    sum_t, store_t, sum_d, store_d = ab.sum_tile, ab.store_tile, tc.sum_tile, tc.store_tile
    tile_of_device = cuda.jit(device=True)(tile_of)
    GROUP_M = config.group_m
    overlap = overlap_launches(programmatic)

    @cuda.jit(device=True)
    def product_of(ticket, t_workers, d_workers, chunks, n_tiles, K1, K2):
        """(worker, workers, tiles per row block, k extent) of the product a ticket works on."""
        if ticket < t_workers:
            return ticket, t_workers, chunks, K1
        return ticket - t_workers, d_workers, n_tiles, K2

    @kernel_jit(config.cta_threads)
    def stream_k_kernel(a, stride_am, stride_ak, b, stride_bk, stride_bn, c, stride_ck,
                        stride_cn, d, stride_dm, stride_dn, t, stride_tm, stride_tk, partials,
                        sync, M, K1, K2, N, t_workers, d_workers):  # fmt: skip
        overlap()  # first of all, the ticket too (unlike the one-tile kernel)
        smem = cuda.shared.array(0, dtype)
        plan = cuda.shared.array(PLAN_SLOTS, np.int64)  # thread 0's bookkeeping, for the CTA
        acc = cuda.local.array(ACC_SIZE, SCALAR)
        a_frag = cuda.local.array(THREAD_M, SCALAR)
        b_frag = cuda.local.array(THREAD_N, SCALAR)
        a_regs = cuda.local.array(A_REGS, SCALAR)
        b_regs = cuda.local.array(B_REGS, SCALAR)
        rows, chunks, n_tiles = tile_counts(M, K2, N)  # chunks: T tiles per row block
        flags = HEAD + rows  # one per worker: its partial tile is in ``partials``

        cta_tid = cuda.threadIdx.x
        group, tid, base = group_of(cta_tid)
        thread_row, thread_col = thread_tile(tid)

        # -- 1. a ticket: workers are handed out in ticket order, not launch order -----------
        # T's workers come before D's, so a CTA only ever waits on lower tickets, whose CTAs
        # are already running (and on the simulator, which runs one block at a time, done).
        # Thread 0 does the bookkeeping (divisions by run-time values cost ~100 instructions
        # each) and hands it to the CTA through shared memory.
        if cta_tid == 0:
            plan[PLAN_TICKET] = cuda.atomic.add(sync, 0, 1)
            worker, workers, cols, inner = product_of(
                plan[PLAN_TICKET], t_workers, d_workers, chunks, n_tiles, K1, K2
            )
            # -- 2. the worker's share of its product's k-iterations ----------------------
            # The product's tiles (grouped order, seed 004) times their k-iterations, cut
            # into `workers` equal ranges. With one worker per tile a range is one whole
            # tile; with fewer (stream-K) a range may start or end inside a tile.
            k_iters = (inner + BLOCK_K - 1) // BLOCK_K
            total = rows * cols * k_iters
            plan[PLAN_RANGE_BEGIN] = worker * total // workers  # the range's first k-iteration
            plan[PLAN_END] = (worker + 1) * total // workers  # and its end
            plan[PLAN_K_ITERS] = k_iters
            plan[PLAN_TOTAL] = total
            plan[PLAN_SEGMENT_BEGIN] = -1  # no segment yet
        cuda.syncthreads()
        # Segments run from the range's end to its start: a tile's first k-iterations, which
        # a range ends with, are done first, so that the worker that finishes the tile (the
        # one holding its last k-iteration: the next in ticket order) rarely waits for them.
        # The plan stays in shared memory and is read where needed, not held in registers
        # across the k loop, whose register tiles need nearly all 255.
        while True:
            cuda.syncthreads()  # every thread has read the last segment's plan
            if cta_tid == 0:
                if plan[PLAN_SEGMENT_BEGIN] >= 0:
                    plan[PLAN_END] = plan[
                        PLAN_SEGMENT_BEGIN
                    ]  # the next segment ends where the last one began
                ticket, begin, it, k_iters = (
                    plan[PLAN_TICKET],
                    plan[PLAN_RANGE_BEGIN],
                    plan[PLAN_END],
                    plan[PLAN_K_ITERS],
                )
                if it > begin:
                    worker, workers, cols, inner = product_of(
                        ticket, t_workers, d_workers, chunks, n_tiles, K1, K2
                    )
                    total = plan[PLAN_TOTAL]
                    tile_index = (it - 1) // k_iters
                    tile_begin = tile_index * k_iters
                    first = max(begin, tile_begin)
                    plan[PLAN_TILE_BEGIN] = tile_begin
                    # one_group_shortcut=False, the seed's formula alone: the shortcut costs
                    # registers here (tile_of); positional, as the simulator takes no keywords
                    plan[PLAN_PID_M], plan[PLAN_PID_X] = tile_of_device(
                        tile_index, rows, cols, GROUP_M, False
                    )
                    # earlier workers that hold part of the tile (their partials come first)
                    other = worker - 1
                    while other >= 0 and (other + 1) * total // workers > tile_begin:
                        other -= 1
                    plan[PLAN_EARLIER] = worker - 1 - other
                    plan[PLAN_SEGMENT_BEGIN] = first
                    plan[PLAN_K0] = (first - tile_begin) * BLOCK_K  # the segment's k range: k0 ...
                    plan[PLAN_K_LEN] = min(
                        inner - plan[PLAN_K0], (it - first) * BLOCK_K
                    )  # ... to k0 + k_len
            cuda.syncthreads()
            if plan[PLAN_END] <= plan[PLAN_RANGE_BEGIN]:
                break
            m0, x0, k0, k_len = (
                plan[PLAN_PID_M] * BLOCK_M,
                plan[PLAN_PID_X] * BLOCK_N,
                plan[PLAN_K0],
                plan[PLAN_K_LEN],
            )
            if plan[PLAN_TICKET] < t_workers:
                # -- 3. T[m0:, x0:] += A[m0:, k0:] @ B[k0:, x0:] over this segment ---------
                sum_t(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group,
                      a, k0 * stride_ak, stride_am, stride_ak, b, k0 * stride_bk, stride_bk,
                      stride_bn, M, K2, k_len, m0, x0, thread_row, thread_col)  # fmt: skip
            else:
                # -- 4. a D segment waits until its row block's T tiles are all in ----------
                wait_for_count(sync, HEAD + plan[PLAN_PID_M], chunks, cta_tid)
                sum_d(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group,
                      t, k0 * stride_tk, stride_tm, stride_tk, c, k0 * stride_ck, stride_ck,
                      stride_cn, M, N, k_len, m0, x0, thread_row, thread_col)  # fmt: skip
            slot = plan[PLAN_TICKET]
            is_t = slot < t_workers
            if plan[PLAN_END] < plan[PLAN_TILE_BEGIN] + plan[PLAN_K_ITERS]:
                # -- 5a. not the tile's end: leave the partial tile for the worker that is --
                if group == 0:
                    for e in range(ACC_SIZE):
                        move_element(partials, slot * SLOT + e * THREADS + tid, acc, e)
                count_up(sync, flags + slot, cta_tid)  # raise the flag
            else:
                # -- 5b. the tile's end: add the earlier workers' partials, store the tile --
                # (workers worker - 1, ..., worker - earlier hold its earlier k-iterations)
                for back in range(1, plan[PLAN_EARLIER] + 1):
                    other_slot = slot - back
                    wait_for_count(sync, flags + other_slot, 1, cta_tid)
                    if group == 0:
                        for e in range(ACC_SIZE):
                            acc[e] += load_from_l2(partials, other_slot * SLOT + e * THREADS + tid)
                m0, x0 = (
                    plan[PLAN_PID_M] * BLOCK_M,
                    plan[PLAN_PID_X] * BLOCK_N,
                )  # re-read, not kept in registers
                if is_t:
                    if group == 0:
                        store_t(
                            t, 0, stride_tm, stride_tk, M, K2, acc, m0, x0, thread_row, thread_col
                        )
                    count_up(sync, HEAD + plan[PLAN_PID_M], cta_tid)
                elif group == 0:
                    store_d(d, 0, stride_dm, stride_dn, M, N, acc, m0, x0, thread_row, thread_col)

        # -- 6. depart: the last CTA leaves every counter at zero for the next launch ---------
        depart(sync, t_workers + d_workers, flags + t_workers + d_workers, cta_tid)

    return stream_k_kernel


def whole_products(config: TileConfig, M: int, K1: int, K2: int, N: int) -> tuple[bool, bool]:
    """Whether T = A @ B and D = T @ C each lie in whole tiles under ``config``
    (``tiled.whole_tiles``): where one does, the fused kernel compiles it without edge code."""
    return whole_tiles(config, M, K2, K1), whole_tiles(config, M, N, K2)


def fused_tiles_per_product(config: TileConfig, M: int, K2: int, N: int) -> tuple[int, int]:
    """(T's tiles, D's tiles) of the fused kernel under ``config``: its CTAs per product when
    it runs one per tile."""
    rows = cdiv(M, config.block_m)
    return rows * cdiv(K2, config.block_n), rows * cdiv(N, config.block_n)


def partials_shape(config: TileConfig, workers: tuple[int, int]) -> tuple[int, int]:
    """The row-major scratch buffer of the fused kernel's partial tiles: one row per worker."""
    return sum(workers), config.block_m * config.block_n


def plan_fused(config: TileConfig, a: MatrixDesc, b: MatrixDesc, c: MatrixDesc, d: MatrixDesc,
               t: MatrixDesc, sync: MatrixDesc, workers: tuple[int, int] | None = None,
               partials: MatrixDesc | None = None, ctas_per_sm: int = 1,
               t_column_order: bool = False) -> KernelLaunch:  # fmt: skip
    """The fused kernel's launch on validated operands: D = (A @ B) @ C through ``t`` (M x
    K2, any strides: see :func:`intermediate_shape` for the fast layout). ``sync``: a uint32
    buffer of at least :func:`sync_slots` counters, all zero (and zero again after).

    ``workers=None``: one CTA per tile. ``workers=(t_workers, d_workers)``: the stream-K
    kernel, that many CTAs per product (each from 1 to the product's tiles times their
    k-iterations), each a range of k-iterations that may start and end inside a tile;
    ``partials`` (:func:`partials_shape`) then holds the partial tiles. ``t``, ``partials``
    and ``sync`` come after D, as scratch outputs, for XLA's kernel call.

    ``ctas_per_sm``: at most that many CTAs run on one SM (the launch asks for enough shared
    memory that no more fit); 1 under stream-K, whose workers are one per SM.

    ``t_column_order``: T's tiles are handed out column by column (each row block's tiles
    spread over the SMs) instead of in ``config``'s grouped order; D's keep that order
    (``numba_gemm.triple_product.fused_t_column_order`` says where it runs faster). One CTA
    per tile only: stream-K's workers take ranges of k-iterations in grouped order."""
    config.check(a.dtype)
    if not isinstance(ctas_per_sm, int) or not 1 <= ctas_per_sm <= MAX_CTAS_PER_SM:
        raise ValueError(
            f"ctas_per_sm must be an int from 1 to {MAX_CTAS_PER_SM}; got {ctas_per_sm!r}"
        )
    if workers is not None and ctas_per_sm != 1:
        raise ValueError(
            f"stream-K runs one worker per SM: ctas_per_sm must be 1 with workers; "
            f"got {ctas_per_sm}"
        )
    if not isinstance(t_column_order, bool):
        raise TypeError(f"t_column_order must be a bool; got {t_column_order!r}")
    if workers is not None and t_column_order:
        raise ValueError(
            "t_column_order orders one CTA per tile; stream-K's workers (workers="
            f"{tuple(workers)}) take ranges of k-iterations in grouped order"
        )
    (M, K1), (K2, N) = a.shape, c.shape
    if workers is not None:
        workers = tuple(workers)
        tiles = fused_tiles_per_product(config, M, K2, N)
        for name, count, tile_count, inner in zip(("T", "D"), workers, tiles, (K1, K2)):
            most = tile_count * cdiv(inner, config.block_k)  # one k-iteration each
            if not isinstance(count, int) or not 1 <= count <= most:
                raise ValueError(
                    f"workers for {name} must be an int from 1 to {most} (its "
                    f"tiles' k-iterations), so that none is idle; got {count!r}"
                )
        needed = int(np.prod(partials_shape(config, workers)))
        if partials is None or partials.span < needed or partials.dtype != a.dtype:
            got = "none" if partials is None else f"{partials.span} {partials.dtype}"
            raise ValueError(
                f"partials must hold {needed} {a.dtype} elements for {workers} "
                f"workers (partials_shape); got {got}"
            )
    slots = sync_slots(M, config, workers)
    if sync.span < slots:
        raise ValueError(f"sync holds {sync.span} counters; the launch needs {slots}")
    if t.shape != (M, K2):
        raise ValueError(f"t must be {M} x {K2} (A @ B); got {t.shape[0]} x {t.shape[1]}")
    shared = config.shared_bytes(a.dtype)
    if shared > STATIC_SHARED_LIMIT and shared > (limit := shared_memory_limit()):
        raise ValueError(
            f"fused config {config.label()} needs {shared} bytes of shared memory per "
            f"block for {a.dtype}; this device allows {limit}"
        )
    # No more CTAs per SM than asked for: where more fit, the block scheduler may put two T
    # tiles on one SM while others hold only D tiles that wait for them.
    shared = at_most_on_multiprocessor(shared, shared_memory_per_multiprocessor(), ctas_per_sm)
    modes = (
        *operand_modes(a, b, t),  # T as phase 1's output ...
        *operand_modes(t, c, d),
    )  # ... and as phase 2's A operand
    operands = (a, *a.strides, b, *b.strides, c, *c.strides, d, *d.strides, t, *t.strides)
    # Without edge code where the tiles fit (half the binary, and faster: tiled.whole_tiles).
    # Stream-K's segments are whole k-tiles, which split-k groups would cut unevenly.
    interiors = tuple(
        whole and (workers is None or config.split_k == 1)
        for whole in whole_products(config, M, K1, K2, N)
    )
    programmatic = programmatic_launch()
    if workers is None:
        kernel = _fused_kernel(config, a.dtype, interiors, programmatic, t_column_order, *modes)
        return kernel_launch(
            kernel,
            sum(fused_tiles_per_product(config, M, K2, N)),
            config.cta_threads,
            shared,
            (*operands, sync, M, K1, K2, N),
            programmatic,
        )
    kernel = _stream_k_kernel(config, a.dtype, interiors, programmatic, *modes)
    return kernel_launch(
        kernel,
        sum(workers),
        config.cta_threads,
        shared,
        (*operands, partials, sync, M, K1, K2, N, *workers),
        programmatic,
    )
