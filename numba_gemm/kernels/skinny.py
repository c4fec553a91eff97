"""Skinny products on the FMA units: C (M x N) = A (M x K) @ B (K x N) with M <= SKINNY_M.

float32 or float64, or bf16 and f16 at their own precision (products and sums in float32, as
the tensor cores' presets ``BF16_BF16_F32`` and ``F16_F16_F32`` ask), any strides, a batch
along grid y. A product with few rows (one token of a
decode step: M = 1) reads all of B (K x N) for M x N results: it is bound by reading B once,
and a tile of 64 rows or more (the tiled kernel's) computes mostly zeros and reads B no faster.
Here every element of B is loaded once, by one lane, with several loads in flight per lane,
and A's M rows (16 at most) ride along. A product with few columns (N <= SKINNY_M) runs as
its transpose, C^T = B^T @ A^T (:func:`plan_skinny`: strides swapped, nothing copied).

Algorithm (one CTA of ``WARPS`` warps per ``WARPS x width`` columns of C, all its rows):

1. *Which columns*: warp w of CTA x owns the strip of ``width`` columns from
   ``n0 = (x * WARPS + w) * width`` (``width``: 16 bytes of B's elements); grid y is the
   product of the batch.
2. *k loop*: lane l takes runs of ``width`` consecutive k (16 bytes of A's row), run l of
   every stretch of 32 runs, ``UNROLL`` rows of k per step, all loaded before any is
   multiplied (several loads in flight per lane). B's strip comes in 16-byte vectors along
   whichever of its axes is contiguous and aligned: a vector per row of k (row-major B, a JAX
   ``Dense`` kernel) or a vector per column and run (column-major B, an ``nn.Linear``
   weight's transpose, and the transposed products of row-major operands); else element by
   element. Then each row of k multiplies the same k of every row of A (a 16-byte vector per
   run where A's rows are contiguous and aligned; 16-bit elements widened to float32 first,
   exactly) into ``rows x width`` float accumulators
   (``rows``: M rounded up to a power of two, a compile-time constant). Whole steps of a whole
   strip run without bounds tests; the last step, and a strip that N cuts, test each element.
3. *Sum over lanes*: five butterfly exchanges (``shfl.xor``) leave every lane of the warp with
   the strip's ``rows x width`` sums; lane l writes sums l, l + 32, ... to C (converted to C's
   dtype: bf16 or f16 rounded to nearest even, where C is 16-bit).

Every C element is the sum of its 32 lanes' partial sums, each over its own k in order, so the
result is the same run to run.

Lanes along n (``_rows_kernel``: 16-bit or float32 operands whose B is read along n, up to
``ROWS_MAX_M`` rows of C; the plan takes it for ``ROWS_OPERANDS``). Above, a warp's load takes
16 bytes from each of 32 rows of B; here it takes 512 consecutive bytes of one row:

1. *Which columns, which k*: CTA x owns the 32 x ``width`` columns from ``32 width x``, lane l
   the ``width`` from ``32 width x + l width``; grid y is the product of the batch, grid z the
   CTA's range of k (split-k, ``kernels.split_k``: ``k_ctas`` ranges of whole steps).
2. *k loop*: warp w takes ``UNROLL`` consecutive rows of k from ``w UNROLL`` of every
   stretch of ``WARPS x UNROLL``: ``UNROLL`` 16-byte loads per lane, then A's elements of
   those rows (the same address in every lane: one transaction), widened to float32, into
   ``rows x width`` accumulators per lane.
3. *Sum over warps*: row by row through shared memory, thread t adds column t of the warps'
   sums in warp order.
4. *Sum over ranges* (k_ctas > 1): the last CTA of the strip adds every range's sums in range
   order (``split_k.settler``); then thread t writes column t of C.

Both orders are fixed, so this result too is the same run to run.

Constraints: M <= SKINNY_M after the transposition (the plan refuses others); a strip of
``width`` columns per warp (the last one masked).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from ..descriptor import MatrixDesc
from ..launch import SIMULATED, KernelLaunch, cdiv, kernel_launch, multiprocessors
from ..precision import BFLOAT16, FLOAT16, FLOAT32
from .common import VECTOR_BYTES, WARP, unrolled
from .fragments import input_converter, output_converter
from .mma import (
    UINT16,
    accumulator_zeroer,
    operand_mode,
    storage_dtype,
    storage_view,
)
from .ptx import load_global_vector, move_element
from .split_k import choose_k_ctas, settler, split_buffers

__all__ = [
    "SKINNY_M", "WARPS", "SIMULATOR_WARPS", "UNROLL", "skinny_rows", "as_computed", "strips",
    "lanes_along_n", "rows_fit", "plan_skinny",
]  # fmt: skip

SKINNY_M = 16  # rows of C (after the transposition) the kernel's accumulators hold at most
WARPS = 8  # warps per CTA: one column strip each
SIMULATOR_WARPS = 2  # on the simulator, whose threads are Python threads: fewer per CTA
UNROLL = 8  # rows of B a lane loads before it multiplies: loads in flight per lane
ROWS_CTAS_PER_SM = 2  # lanes along n: split-k fills a wave of this many CTAs per SM
ROWS_MAX_M = 4  # lanes along n up to this many rows of C (16 spill: 198 registers and a stack)
# The operands the plan runs with lanes along n where B is read along n (float32 at one row
# of C on an H200: 78-98% of the copy bandwidth against lanes along k's 67-79%).
ROWS_OPERANDS = frozenset({BFLOAT16, FLOAT16, FLOAT32})


def _warps() -> int:
    """Warps per CTA: :data:`WARPS`, or :data:`SIMULATOR_WARPS` on the simulator."""
    return SIMULATOR_WARPS if SIMULATED else WARPS


def skinny_rows(M: int) -> int:
    """``M`` rounded up to a power of two: the accumulator rows the kernel is compiled for."""
    if not 1 <= M <= SKINNY_M:
        raise ValueError(f"the skinny kernel takes 1 to {SKINNY_M} rows of C; got {M}")
    return 1 << (M - 1).bit_length()


def _lane_summer(dtype: np.dtype, size: int):
    """Device function ``sum_lanes(acc, scratch)``: ``acc[:size]`` of every lane of the warp
    replaced by the warp's sums, a butterfly of five ``shfl.xor`` exchanges per element (every
    lane of the CTA calls it at once). On the simulator, whose threads cannot read each other's
    registers, through ``scratch`` (a shared array of ``size`` elements per thread): the same
    butterfly, the same additions in the same order, in NumPy."""
    if SIMULATED:

        @cuda.jit(device=True)
        def sum_lanes(acc, scratch):
            tid = cuda.threadIdx.x
            scratch[tid * size : (tid + 1) * size] = acc[:size]
            cuda.syncthreads()
            first = tid - tid % WARP
            values = scratch[first * size : (first + WARP) * size].reshape(WARP, size).copy()
            for mask in (16, 8, 4, 2, 1):
                values = values + values[np.arange(WARP) ^ mask]  # in dtype, as the GPU adds
            acc[:size] = values[tid % WARP]
            cuda.syncthreads()

        return sum_lanes

    @cuda.jit(device=True)
    def lane_sum(acc, scratch, e):
        for mask in (16, 8, 4, 2, 1):
            acc[e] += cuda.shfl_xor_sync(0xFFFFFFFF, acc[e], mask)

    return unrolled(lane_sum, size, "acc, scratch")


@functools.cache
def _kernel(operand: np.dtype, out: np.dtype, rows: int, b_loads: str, a_vectors: bool):
    """The kernel for operands of dtype ``operand`` and a result of dtype ``out``, ``rows``
    accumulator rows (a power of two >= M), B's strip loaded by ``b_loads`` (``"rows"``: a
    16-byte vector per row, B's rows contiguous and aligned; ``"runs"``: a 16-byte vector per
    column and run of k, B's columns contiguous and aligned; ``"elements"``), and A's runs of
    k as 16-byte vectors (``a_vectors``) or element by element. 16-bit operands travel as
    their bits (uint16) and accumulate in float32."""
    dtype = storage_dtype(operand)  # the elements as loaded
    acc_dtype = FLOAT32 if dtype == UINT16 else dtype
    widen = input_converter(operand)
    narrow = output_converter(out)
    WIDTH = VECTOR_BYTES // dtype.itemsize  # columns per warp's strip, and k per lane's run
    RUN = WIDTH
    RUNS = UNROLL // RUN  # runs per lane per step
    ACC = rows * WIDTH
    STRIP = UNROLL * WIDTH  # (a local array's size must be a name, not an expression)
    STEP = UNROLL * WARP  # rows of k a warp covers per step
    WARPS_ = _warps()
    THREADS = WARPS_ * WARP
    SCRATCH = THREADS * ACC if SIMULATED else 1  # the simulator's lane sums
    sum_lanes = _lane_summer(acc_dtype, ACC)
    zero, acc_zero = dtype.type(0), acc_dtype.type(0)
    ROW_VECTORS = b_loads == "rows"  # (kernels compare no strings)

    @cuda.jit(device=True)
    def load_run(dst, dst0, src, src0, stride, valid, vector):
        # dst[dst0:][:RUN] = the run of RUN elements from src[src0], ``stride`` apart: one
        # 16-byte load where ``vector`` (a contiguous, aligned run) and the whole run is
        # inside, else an element each; zeros from element ``valid`` on
        if vector and valid >= RUN:
            load_global_vector(dst, dst0, src, src0)
        else:
            for i in range(RUN):
                if i < valid:
                    move_element(dst, dst0 + i, src, src0 + i * stride)
                else:
                    dst[dst0 + i] = zero

    def steps(checked: bool):
        """The step's two device functions, ``load_strip`` and ``multiply_strip``, with bounds
        tests (``checked``: the last step, or a strip past N) or without (a whole step)."""

        @cuda.jit(device=True)
        def inside(run0, K):
            # elements of the run of k from run0 inside K (all RUN of them in a whole step)
            return min(max(K - run0, 0), RUN) if checked else RUN

        @cuda.jit(device=True)
        def load_row(strip, b, b0, stride_bk, stride_bn, n_left, k0, lane, K, r, i):
            # row i of the lane's run r of k into strip slot r * RUN + i: a run along n
            row = k0 + r * (WARP * RUN) + lane * RUN + i
            valid = (min(n_left, WIDTH) if row < K else 0) if checked else WIDTH
            load_run(strip, (r * RUN + i) * WIDTH, b, b0 + row * stride_bk, stride_bn, valid,
                     ROW_VECTORS)  # fmt: skip

        @cuda.jit(device=True)
        def load_column(strip, b, b0, stride_bk, stride_bn, n_left, k0, lane, K, r, j):
            # column j of the lane's run r of k: a run along k, into strip slots (r * RUN + i, j)
            run0 = k0 + r * (WARP * RUN) + lane * RUN
            valid = inside(run0, K) if not checked or j < n_left else 0
            column = cuda.local.array(RUN, dtype)
            load_run(column, 0, b, b0 + run0 * stride_bk + j * stride_bn, stride_bk, valid, True)
            for i in range(RUN):
                strip[(r * RUN + i) * WIDTH + j] = column[i]

        params = "strip, b, b0, stride_bk, stride_bn, n_left, k0, lane, K"
        if b_loads == "runs":
            load_strip = unrolled(
                load_column, [(r, j) for r in range(RUNS) for j in range(WIDTH)], params
            )
        else:
            load_strip = unrolled(
                load_row, [(r, i) for r in range(RUNS) for i in range(RUN)], params
            )

        @cuda.jit(device=True)
        def multiply_run(acc, strip, a, a0, stride_am, stride_ak, M, k0, lane, K, r, m):
            # acc[m] += A[m, run] @ the strip's rows of run r (rows past M: nothing)
            if m < M:
                run0 = k0 + r * (WARP * RUN) + lane * RUN
                x = cuda.local.array(RUN, dtype)
                load_run(x, 0, a, a0 + m * stride_am + run0 * stride_ak, stride_ak,
                         inside(run0, K), a_vectors)  # fmt: skip
                for i in range(RUN):
                    for j in range(WIDTH):
                        acc[m * WIDTH + j] += widen(x[i]) * widen(strip[(r * RUN + i) * WIDTH + j])

        multiply_strip = unrolled(
            multiply_run,
            [(r, m) for r in range(RUNS) for m in range(rows)],
            "acc, strip, a, a0, stride_am, stride_ak, M, k0, lane, K",
        )
        return load_strip, multiply_strip

    load_whole, multiply_whole = steps(checked=False)
    load_edge, multiply_edge = steps(checked=True)

    @cuda.jit(device=True)
    def zero_one(acc, e):
        acc[e] = acc_zero

    zero_all = unrolled(zero_one, ACC, "acc")

    @cuda.jit(device=True)
    def store(c, c0, stride_cm, stride_cn, M, n_left, acc, lane, e):
        m, j = e // WIDTH, e % WIDTH
        if e % WARP == lane and m < M and j < n_left:
            c[c0 + m * stride_cm + j * stride_cn] = narrow(acc[e])

    store_all = unrolled(store, ACC, "c, c0, stride_cm, stride_cn, M, n_left, acc, lane")

    @cuda.jit
    def skinny_kernel(a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn,
                      c, stride_cb, stride_cm, stride_cn, M, N, K):  # fmt: skip
        acc = cuda.local.array(ACC, acc_dtype)  # (rows, WIDTH): this lane's partial sums
        strip = cuda.local.array(STRIP, dtype)  # (RUNS, RUN, WIDTH): rows of B
        scratch = cuda.shared.array(SCRATCH, acc_dtype)
        zero_all(acc)

        # -- which strip: warp w of CTA x, columns n0 .. n0 + WIDTH ------------------------
        tid = cuda.threadIdx.x
        lane, warp = tid % WARP, tid // WARP
        n0 = (cuda.blockIdx.x * WARPS_ + warp) * WIDTH
        batch = cuda.blockIdx.y
        n_left = N - n0  # may be <= 0: a warp past N loads nothing, but exchanges with the rest
        a0 = batch * stride_ab
        b0 = batch * stride_bb + n0 * stride_bn

        # -- k loop: per step, lane l loads rows l * RUN + r * 32 RUN + (0 .. RUN) of the
        # strip, then multiplies them by the same k of A's rows; whole steps of a whole
        # strip without bounds tests, the last step (and a strip past N) with them ---------
        whole = K - K % STEP if n_left >= WIDTH else 0
        for k0 in range(0, whole, STEP):
            load_whole(strip, b, b0, stride_bk, stride_bn, n_left, k0, lane, K)
            multiply_whole(acc, strip, a, a0, stride_am, stride_ak, M, k0, lane, K)
        if n_left > 0:
            for k0 in range(whole, K, STEP):
                load_edge(strip, b, b0, stride_bk, stride_bn, n_left, k0, lane, K)
                multiply_edge(acc, strip, a, a0, stride_am, stride_ak, M, k0, lane, K)

        # -- sum over the warp's lanes, then lane l writes sums l, l + 32, ... --------------
        sum_lanes(acc, scratch)
        if n_left > 0:
            store_all(c, batch * stride_cb + n0 * stride_cn, stride_cm, stride_cn, M, n_left,
                      acc, lane)  # fmt: skip

    return skinny_kernel


def rows_columns(operand: np.dtype) -> int:
    """Columns of C per CTA of the lanes-along-n kernel for ``operand`` elements: its warps'
    lanes side by side, 16 bytes each (every warp takes the same columns)."""
    return WARP * (VECTOR_BYTES // storage_dtype(operand).itemsize)


def rows_per_thread(operand: np.dtype) -> int:
    """Columns of a CTA's sums each thread of the lanes-along-n kernel adds and stores (and,
    where k is split, writes to and reads from split-k's partial tiles)."""
    return cdiv(rows_columns(operand), _warps() * WARP)


@functools.cache
def _rows_kernel(operand: np.dtype, out: np.dtype, rows: int, k_ctas: int):
    """The kernel for 16-bit or float32 operands whose B has contiguous, 16-byte aligned rows
    (read along n): ``rows`` accumulator rows (a power of two >= M), ``k_ctas`` CTAs per strip
    of columns (split-k, ``kernels.split_k``). Lanes along n ("Lanes along n" in the module
    docstring)."""
    dtype = storage_dtype(operand)  # the elements as loaded (uint16 bits, or float32)
    widen, narrow = input_converter(operand), output_converter(out)
    WIDTH = VECTOR_BYTES // dtype.itemsize  # columns per lane: one 16-byte load per row of k
    COLS = rows_columns(operand)
    WARPS_ = _warps()
    THREADS = WARPS_ * WARP
    PER_THREAD = rows_per_thread(operand)
    ACC, STRIP, XS = rows * WIDTH, UNROLL * WIDTH, rows * UNROLL
    TOTAL = rows * PER_THREAD
    BLOCK = WARPS_ * UNROLL  # rows of k a CTA covers per step
    RED = WARPS_ * COLS  # one row of C's sums per warp, in shared memory
    K_CTAS = k_ctas
    zero, acc_zero = dtype.type(0), FLOAT32.type(0)
    settle = settler(TOTAL, THREADS)

    def steps(checked: bool):
        """The step's ``load_strip``, ``load_a`` and ``multiply_strip``, with bounds tests
        (``checked``: the last rows of the CTA's k range, or columns past N) or without."""

        @cuda.jit(device=True)
        def load_row(strip, b, b0, stride_bk, stride_bn, n_left, k0, k_end, u):
            # row k0 + u of the lane's WIDTH columns: one 16-byte load, or element by element
            if not checked:
                load_global_vector(strip, u * WIDTH, b, b0 + (k0 + u) * stride_bk)
            else:
                for j in range(WIDTH):
                    if k0 + u < k_end and j < n_left:
                        move_element(strip, u * WIDTH + j, b, b0 + (k0 + u) * stride_bk + j)
                    else:
                        strip[u * WIDTH + j] = zero

        @cuda.jit(device=True)
        def load_a(x, a, a0, stride_am, stride_ak, M, k0, k_end, m, u):
            # A[m, k0 + u], the same element in every lane (one transaction per warp)
            if m < M and (not checked or k0 + u < k_end):
                move_element(x, m * UNROLL + u, a, a0 + m * stride_am + (k0 + u) * stride_ak)
            else:
                x[m * UNROLL + u] = zero

        @cuda.jit(device=True)
        def multiply(acc, x, strip, M, m, u):
            if m < M:
                for j in range(WIDTH):
                    acc[m * WIDTH + j] += widen(x[m * UNROLL + u]) * widen(strip[u * WIDTH + j])

        load_strip = unrolled(load_row, UNROLL,
                              "strip, b, b0, stride_bk, stride_bn, n_left, k0, k_end")  # fmt: skip
        load_x = unrolled(load_a, [(m, u) for m in range(rows) for u in range(UNROLL)],
                          "x, a, a0, stride_am, stride_ak, M, k0, k_end")  # fmt: skip
        multiply_strip = unrolled(multiply, [(m, u) for u in range(UNROLL) for m in range(rows)],
                                  "acc, x, strip, M")  # fmt: skip
        return load_strip, load_x, multiply_strip

    load_whole, load_x_whole, multiply_whole = steps(checked=False)
    load_edge, load_x_edge, multiply_edge = steps(checked=True)

    zero_all = accumulator_zeroer(ACC)  # ACC: a multiple of 8

    @cuda.jit(device=True)
    def reduce_row(acc, red, total, tid, lane, warp, m):
        # row m of the warps' sums, added over the warps: thread t's columns t, t + THREADS, ..
        for j in range(WIDTH):
            red[warp * COLS + lane * WIDTH + j] = acc[m * WIDTH + j]
        cuda.syncthreads()
        for q in range(PER_THREAD):
            column = tid + q * THREADS
            total[m * PER_THREAD + q] = acc_zero
            if column < COLS:
                for w in range(WARPS_):
                    total[m * PER_THREAD + q] += red[w * COLS + column]
        cuda.syncthreads()

    reduce_all = unrolled(reduce_row, rows, "acc, red, total, tid, lane, warp")

    @cuda.jit(device=True)
    def store(c, c0, stride_cm, stride_cn, M, N, first, total, tid, m, q):
        column = tid + q * THREADS
        if m < M and column < COLS and first + column < N:
            c[c0 + m * stride_cm + (first + column) * stride_cn] = narrow(total[m * PER_THREAD + q])

    store_all = unrolled(store, [(m, q) for m in range(rows) for q in range(PER_THREAD)],
                         "c, c0, stride_cm, stride_cn, M, N, first, total, tid")  # fmt: skip

    @cuda.jit
    def rows_kernel(a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn,
                    c, stride_cb, stride_cm, stride_cn, M, N, K, partials, sync):  # fmt: skip
        acc = cuda.local.array(ACC, FLOAT32)  # (rows, WIDTH): this lane's partial sums
        strip = cuda.local.array(STRIP, dtype)  # (UNROLL, WIDTH): rows of B
        x = cuda.local.array(XS, dtype)  # (rows, UNROLL): A's elements of those rows of k
        total = cuda.local.array(TOTAL, FLOAT32)  # (rows, PER_THREAD): the CTA's sums
        red = cuda.shared.array(RED, FLOAT32)
        zero_all(acc)

        # -- which columns, which rows of k: the CTA's strip, its k range, the warp's rows ----
        tid = cuda.threadIdx.x
        lane, warp = tid % WARP, tid // WARP
        first = cuda.blockIdx.x * COLS  # the CTA's first column
        batch = cuda.blockIdx.y
        n_left = N - first - lane * WIDTH  # the lane's columns inside N (may be <= 0)
        a0 = batch * stride_ab
        b0 = batch * stride_bb + (first + lane * WIDTH) * stride_bn
        per_cta = (((K + BLOCK - 1) // BLOCK + K_CTAS - 1) // K_CTAS) * BLOCK
        k_begin = cuda.blockIdx.z * per_cta
        k_end = min(K, k_begin + per_cta)

        # -- k loop: warp w takes rows k_begin + w UNROLL + i BLOCK .. + UNROLL; whole steps
        # of whole columns without bounds tests -------------------------------------------
        for k0 in range(k_begin + warp * UNROLL, k_end, BLOCK):
            if k0 + UNROLL <= k_end and n_left >= WIDTH:
                load_whole(strip, b, b0, stride_bk, stride_bn, n_left, k0, k_end)
                load_x_whole(x, a, a0, stride_am, stride_ak, M, k0, k_end)
                multiply_whole(acc, x, strip, M)
            else:
                load_edge(strip, b, b0, stride_bk, stride_bn, n_left, k0, k_end)
                load_x_edge(x, a, a0, stride_am, stride_ak, M, k0, k_end)
                multiply_edge(acc, x, strip, M)

        # -- the warps' sums added in shared memory; split-k: the last CTA adds the ranges ----
        reduce_all(acc, red, total, tid, lane, warp)
        if K_CTAS > 1:
            strip_index = batch * cuda.gridDim.x + cuda.blockIdx.x
            if not settle(total, partials, sync, strip_index, cuda.blockIdx.z, K_CTAS, tid,
                          tid, tid < COLS):  # fmt: skip
                return
        store_all(c, batch * stride_cb, stride_cm, stride_cn, M, N, first, total, tid)

    return rows_kernel


def as_computed(a: MatrixDesc, b: MatrixDesc, c: MatrixDesc) -> tuple:
    """``(a, b, c, b_loads)``: the product as the kernel computes it (transposed where M >
    SKINNY_M, so that C has at most SKINNY_M rows) and how it loads B's strips: ``"rows"``
    (B's rows contiguous and 16-byte aligned: a vector per row of k), ``"runs"`` (its columns
    so: a vector per column and run of k, B read along k) or ``"elements"``. ``ValueError``
    where C has more than SKINNY_M rows and columns."""
    M, N = a.shape[0], b.shape[1]
    if M > SKINNY_M:
        if N > SKINNY_M:
            other = "'wgmma' or 'mma'" if np.dtype(a.dtype).itemsize == 2 else "'tiled'"
            raise ValueError(
                f"algorithm='skinny' takes products with at most {SKINNY_M} rows or columns "
                f"of the result; this one is {M} x {N}: use {other}"
            )
        a, b, c = b.transposed(), a.transposed(), c.transposed()
    b_loads = {("x", VECTOR_BYTES): "rows", ("k", VECTOR_BYTES): "runs"}.get(
        operand_mode(b, False), "elements"
    )
    return a, b, c, b_loads


def strips(N: int, dtype: np.dtype) -> int:
    """CTAs of the skinny kernel for a C of ``N`` columns (as computed) of ``dtype``
    operands: one strip of 16 bytes' worth of columns per warp."""
    return cdiv(N, _warps() * (VECTOR_BYTES // storage_dtype(dtype).itemsize))


def rows_fit(a: MatrixDesc, b_loads: str) -> bool:
    """:func:`lanes_along_n` on the operands as computed (``as_computed``'s A and B loads)."""
    rows_ok = skinny_rows(a.shape[0]) <= ROWS_MAX_M
    return b_loads == "rows" and np.dtype(a.dtype) in ROWS_OPERANDS and rows_ok


def lanes_along_n(a: MatrixDesc, b: MatrixDesc) -> bool:
    """Whether the product runs with lanes along n: at most ``ROWS_MAX_M`` rows (or columns: as
    computed) of ``ROWS_OPERANDS`` elements, B read along n as computed."""
    if min(a.shape[0], b.shape[1]) > ROWS_MAX_M:
        return False
    a, _, _, b_loads = as_computed(a, b, b)  # (C's descriptor plays no part here)
    return rows_fit(a, b_loads)


def plan_skinny(a: MatrixDesc, b: MatrixDesc, c: MatrixDesc, scratch=None) -> KernelLaunch:
    """The skinny kernel's launch on validated operands: C (M x N) = A (M x K) @ B (K x N), for
    each of ``c.batch`` products, with M <= SKINNY_M, or N <= SKINNY_M (run as its transpose:
    :func:`as_computed`). ``ValueError`` where neither is. Operands in ``ROWS_OPERANDS``
    whose B is read along n run with lanes along n, k split across CTAs into a wave where
    ``scratch`` (split-k's buffers, ``kernels.split_k``) is given."""
    a, b, c, b_loads = as_computed(a, b, c)
    along_n = rows_fit(a, b_loads)
    (M, K), N = a.shape, b.shape[1]
    operand, out = np.dtype(a.dtype), np.dtype(c.dtype)
    if operand.itemsize == 2:  # bf16 or f16: their bits
        a, b = storage_view(a, UINT16), storage_view(b, UINT16)
    if out.itemsize == 2:
        c = storage_view(c, UINT16)
    args = (a, a.batch_stride, *a.strides, b, b.batch_stride, *b.strides,
            c, c.batch_stride, *c.strides, M, N, K)  # fmt: skip
    if along_n:
        columns = rows_columns(operand)  # a CTA's strip
        threads, strips_, k_steps = _warps() * WARP, cdiv(N, columns), cdiv(K, _warps() * UNROLL)
        k_ctas = 1
        if scratch is not None:
            slots = ROWS_CTAS_PER_SM * multiprocessors()
            k_ctas = choose_k_ctas(strips_ * c.batch, k_steps, slots)  # a working count
        rows = skinny_rows(M)
        partial = rows * rows_per_thread(operand) * threads  # float32 sums per CTA
        split = split_buffers(k_ctas, strips_ * c.batch, partial, FLOAT32, scratch)
        kernel = _rows_kernel(operand, out, rows, k_ctas)
        return kernel_launch(kernel, (strips_, c.batch, k_ctas), threads, 0, (*args, *split))
    a_vectors = operand_mode(a, True) == ("k", VECTOR_BYTES)  # A's rows contiguous, aligned
    kernel = _kernel(operand, out, skinny_rows(M), b_loads, a_vectors)
    return kernel_launch(kernel, (strips(N, operand), c.batch), _warps() * WARP, 0, args)
