"""The Hopper kernels' epilogues: C from the accumulators through a float32 tile in shared
memory and 16-byte stores, or (the persistent warp-specialised kernel) through boxes staged
for TMA stores.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numba import cuda

from ...descriptor import MatrixDesc
from ...launch.tensor_maps import TensorMapSpec
from ..common import (
    VECTOR_BYTES,
    unrolled,
)
from ..fragments import output_converter
from ..mma import (
    storage_dtype,
)
from ..ptx import load_vector, store_pair, store_vector
from ..tma import (
    bulk_commit,
    bulk_wait,
    tma_store,
)
from ..warpgroup import (
    ROW_BYTES,
    WARPGROUP,
    aligned_start,
    async_proxy_fence,
    named_barrier,
    thread_index,
    tile_k,
    tile_slot,
)
from .config import (
    EPILOGUE_BARRIER,
    ROWS_PER_WARPGROUP,
    STAGING_BYTES,
    WgmmaConfig,
    c_tile_line,
)
from .mainloop import tensor_map_spec


def consumers_barrier(config: WgmmaConfig):
    """Device function ``sync()``: a barrier of the warpgroups that multiply: the CTA's, or
    with a producer warpgroup (which has left) a named one of the consumers."""
    if not config.producers:

        @cuda.jit(device=True)
        def sync_cta():
            cuda.syncthreads()

        return sync_cta
    return named_barrier(EPILOGUE_BARRIER, config.consumer_threads)


def c_writer(config: WgmmaConfig, out_dtype: np.dtype, c_mode: tuple, maps: str = "none"):
    """Device function ``write_c(c, c0, stride_cm, stride_cn, M, N, m0, n0, c_tile, acc)``:
    the epilogue. The warpgroups write their accumulators ``acc`` (wgmma's layout) into a
    float32 C tile in shared memory (``c_tile``: the CTA's dynamic shared memory as float32,
    the tile at :meth:`WgmmaConfig.c_tile_offset` for tiles filled as ``maps`` says: the
    pipeline's buffers, free once every warpgroup is done with the k loop, or for a persistent
    config its own), its rows along C's contiguous axis
    (``c_mode``: ``operand_mode`` of C; transposed where C's columns are contiguous); then
    every thread converts 16 bytes' worth of C's elements at a time and stores them along that
    axis (consecutive threads, consecutive vectors), element by element at the edges or where
    C's lines are not contiguous and aligned."""
    BLOCK_M, BLOCK_N, THREADS = config.block_m, config.block_n, config.consumer_threads
    FIRST = config.producer_threads  # the first thread that multiplies
    ACC_SIZE = BLOCK_N // 2
    consumers_sync = consumers_barrier(config)
    convert = output_converter(out_dtype)
    C_STORAGE = storage_dtype(out_dtype)
    C_VEC = VECTOR_BYTES // C_STORAGE.itemsize  # C's elements per 16-byte store
    ALONG_M = c_mode[0] == "x"  # C's columns contiguous: the staged tile is n x m
    ROWS, COLS = (BLOCK_N, BLOCK_M) if ALONG_M else (BLOCK_M, BLOCK_N)  # of the staged tile
    C_ROW = c_tile_line(COLS, ALONG_M)  # a staged row, padded
    C_VECTORS = ROWS * COLS // C_VEC // THREADS  # 16-byte stores per thread
    C_VECTORS_OK = c_mode[1] == VECTOR_BYTES  # C's lines take 16-byte stores
    OFFSET = config.c_tile_offset(maps) // 4  # float32 elements

    @cuda.jit(device=True)
    def stage(c_tile, start, acc, row, col, j):
        # this thread's accumulators of columns 8 j.. (two rows, two columns each) into the C
        # tile in shared memory, as they are (converting here, on the accumulator registers,
        # makes ptxas serialise the wgmmas); a row's two columns as one 8-byte store along n
        for h in range(2):
            m, n = row + 8 * h, col + 8 * j
            if ALONG_M:
                c_tile[start + n * C_ROW + m] = acc[4 * j + 2 * h]
                c_tile[start + (n + 1) * C_ROW + m] = acc[4 * j + 2 * h + 1]
            else:
                store_pair(c_tile, start + m * C_ROW + n, acc, 4 * j + 2 * h)

    stage_all = unrolled(stage, ACC_SIZE // 4, "c_tile, start, acc, row, col")

    @cuda.jit(device=True)
    def store_tile(c, c0, stride_cm, stride_cn, M, N, m0, n0, c_tile, start, floats, vector, tid):
        # the staged C tile to C, converted: 16-byte stores, consecutive threads along a line
        corner = c0 + m0 * stride_cm + n0 * stride_cn
        if ALONG_M:
            stride_row, stride_col, rows_left, cols_left = stride_cn, stride_cm, N - n0, M - m0
        else:
            stride_row, stride_col, rows_left, cols_left = stride_cm, stride_cn, M - m0, N - n0
        for i in range(C_VECTORS):
            v = tid + i * THREADS
            row, col = v // (COLS // C_VEC), (v % (COLS // C_VEC)) * C_VEC
            here = start + row * C_ROW + col
            if C_VECTORS_OK and row < rows_left and col + C_VEC <= cols_left:
                for q in range(C_VEC // 4):
                    load_vector(floats, 4 * q, c_tile, here + 4 * q)
                for e in range(C_VEC):
                    vector[e] = convert(floats[e])
                store_vector(c, corner + row * stride_row + col, vector, 0)
            elif row < rows_left:
                for e in range(C_VEC):
                    if col + e < cols_left:
                        c[corner + row * stride_row + (col + e) * stride_col] = convert(
                            c_tile[here + e]
                        )

    @cuda.jit(device=True)
    def write_c(c, c0, stride_cm, stride_cn, M, N, m0, n0, c_tile, acc):
        # tid and the tile's start read afresh: nothing of the epilogue is computed before the
        # k loop and kept live across it (fewer registers and instructions in the SASS)
        start = aligned_start(c_tile) + OFFSET
        tid = thread_index() - FIRST
        warpgroup, lane, warp = tid // WARPGROUP, tid % 32, (tid % WARPGROUP) // 32
        stage_all(c_tile, start, acc, warpgroup * ROWS_PER_WARPGROUP + 16 * warp + lane // 4,
                  2 * (lane % 4))  # fmt: skip
        consumers_sync()
        floats = cuda.local.array(C_VEC, np.float32)
        vector = cuda.local.array(C_VEC, C_STORAGE)
        store_tile(c, c0, stride_cm, stride_cn, M, N, m0, n0, c_tile, start, floats, vector, tid)

    return write_c


def c_tma_writer(config: WgmmaConfig, out_dtype: np.dtype, c_mode: tuple):
    """Device functions ``(store_c(c_smem, c_map, m0, n0, batch, acc, tid), done(tid))``: the
    persistent warp-specialised kernel's epilogue, through TMA stores. C's tile is cut into
    boxes (:func:`c_box`) of one 128-byte line along C's contiguous axis (64 16-bit or 32
    float32 elements) by the tile's extent along the other; :data:`STAGING_BYTES` of them at
    a time:

    1. consumer thread 0 waits until the stores before have read the staging buffer (at
       :meth:`WgmmaConfig.staging_offset`), then the consumers' barrier;
    2. each consumer writes its accumulators of those boxes (wgmma's layout), converted to C's
       dtype, into the buffer as ``warpgroup.tile_slot`` lays out a k-major tile (128-byte
       swizzled lines; a pair of columns as one store where C's rows are contiguous), fences
       them to the async proxy, the consumers' barrier;
    3. thread 0 issues one TMA store per box (elements past C are not written) and commits
       them as one bulk group, which drains while the consumers go on.

    ``c_smem``: the CTA's dynamic shared memory viewed as C's storage; ``c_map``: C's tensor
    map (:func:`c_tensor_map_spec`); ``tid``: the consumer's index. ``done``: thread 0 waits
    until every store has read its box (before the CTA leaves its shared memory)."""
    BLOCK_M, BLOCK_N = config.block_m, config.block_n
    ACC_SIZE = BLOCK_N // 2
    convert = output_converter(out_dtype)
    C_STORAGE = storage_dtype(out_dtype)
    SIZE = C_STORAGE.itemsize
    WIDTH = tile_k(SIZE)  # a box's elements along C's contiguous axis: a 128-byte line
    ALONG_M = c_mode[0] == "x"  # C's columns contiguous: boxes of m by every n of the tile
    LINES = BLOCK_N if ALONG_M else BLOCK_M  # a box's lines
    BOXES = (BLOCK_M if ALONG_M else BLOCK_N) // WIDTH
    BOX = LINES * ROW_BYTES // SIZE  # a box's elements
    AT_ONCE = max(1, min(BOXES, STAGING_BYTES // (LINES * ROW_BYTES)))
    ROUNDS = BOXES // AT_ONCE
    STAGING = config.staging_offset() // SIZE
    store_box = tma_store(c_box(c_mode[0], config, SIZE))
    slot = cuda.jit(device=True)(tile_slot("k", SIZE))  # (line, element of the line)
    consumers_sync = consumers_barrier(config)
    staged_read = bulk_wait(0, True)

    @cuda.jit(device=True)
    def stage(c_smem, staging, acc, pair, row, col, rnd, j):
        # this thread's values at rows row, row + 8 and columns 8 j + col, + 1 that lie in
        # round rnd's boxes, converted into the staging buffer
        for h in range(2):
            m, n = row + 8 * h, col + 8 * j
            if ALONG_M:
                box = m // WIDTH - rnd * AT_ONCE
                if 0 <= box < AT_ONCE:
                    for e in range(2):
                        c_smem[staging + box * BOX + slot(n + e, m % WIDTH)] = convert(
                            acc[4 * j + 2 * h + e]
                        )
            else:
                box = (8 * j) // WIDTH - rnd * AT_ONCE
                if 0 <= box < AT_ONCE:
                    pair[0] = convert(acc[4 * j + 2 * h])
                    pair[1] = convert(acc[4 * j + 2 * h + 1])
                    store_pair(c_smem, staging + box * BOX + slot(m, n % WIDTH), pair, 0)

    stage_all = unrolled(stage, ACC_SIZE // 4, "c_smem, staging, acc, pair, row, col, rnd")

    @cuda.jit(device=True)
    def store_round(c_smem, staging, c_map, m0, n0, batch, acc, pair, row, col, tid, rnd):
        if tid == 0:
            staged_read()
        consumers_sync()
        stage_all(c_smem, staging, acc, pair, row, col, rnd)
        async_proxy_fence()
        consumers_sync()
        if tid == 0:
            for q in range(AT_ONCE):
                x = (rnd * AT_ONCE + q) * WIDTH  # the box's first element along C's lines
                if ALONG_M:
                    store_box(c_smem, staging + q * BOX, c_map, m0 + x, n0, batch)
                else:
                    store_box(c_smem, staging + q * BOX, c_map, n0 + x, m0, batch)
            bulk_commit()

    rounds = unrolled(
        store_round, ROUNDS, "c_smem, staging, c_map, m0, n0, batch, acc, pair, row, col, tid"
    )

    @cuda.jit(device=True)
    def store_c(c_smem, c_map, m0, n0, batch, acc, tid):
        warpgroup, lane, warp = tid // WARPGROUP, tid % 32, (tid % WARPGROUP) // 32
        pair = cuda.local.array(2, C_STORAGE)
        rounds(c_smem, aligned_start(c_smem) + STAGING, c_map, m0, n0, batch, acc, pair,
               warpgroup * ROWS_PER_WARPGROUP + 16 * warp + lane // 4, 2 * (lane % 4),
               tid)  # fmt: skip

    @cuda.jit(device=True)
    def done(tid):
        if tid == 0:
            staged_read()

    return store_c, done


def c_store_problem(desc: MatrixDesc, axis: str, config: WgmmaConfig, batch: int) -> str | None:
    """What keeps TMA from storing C (``desc``, M x N as the kernel sees it) along ``axis``
    ("k": n, "x": m) in ``config``'s boxes, or None: no stride 1 along it (nor a single
    element), or what :meth:`TensorMapSpec.problem` finds in :func:`c_tensor_map_spec`."""
    i = 1 if axis == "k" else 0
    if desc.strides[i] != 1 and desc.shape[i] != 1:
        return "no contiguous axis"
    return c_tensor_map_spec(desc, axis, config, batch).problem()


def c_box(axis: str, config: WgmmaConfig, size: int) -> tuple[int, int, int]:
    """The TMA box of the persistent warp-specialised kernel's stores of C (elements along C's
    contiguous axis ``axis`` as the kernel sees it, the other, the batch): one 128-byte line of
    the contiguous axis by the tile's extent along the other."""
    return (tile_k(size), config.block_n if axis == "x" else config.block_m, 1)


def c_tensor_map_spec(desc: MatrixDesc, axis: str, config: WgmmaConfig, batch: int
                      ) -> TensorMapSpec:  # fmt: skip
    """The tensor map through which the persistent warp-specialised kernel stores C
    (``desc``, M x N as the kernel sees it, contiguous along ``axis``: "k" for n, "x" for m),
    in :func:`c_box` boxes."""
    spec = tensor_map_spec(desc, axis, config.block_m, True, batch)
    return replace(spec, box=c_box(axis, config, desc.dtype.itemsize))
