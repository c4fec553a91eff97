"""The Hopper kernels' main-loop pieces: filling a stage (``cp.async`` or TMA boxes) and
multiplying one k slice on the tensor cores (16-bit operands from shared memory, or TF32 with
A from registers).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ...descriptor import MatrixDesc
from ...launch import (
    cdiv,
)
from ...launch.tensor_maps import TensorMapSpec
from ..common import (
    VECTOR_BYTES,
    unrolled,
)
from ..fragments import BLOCK_ROWS
from ..mma import (
    tile_loader,
)
from ..tma import (
    tma_load,
)
from ..warpgroup import (
    OPERAND_BYTES,
    REGISTER_WORDS,
    ROW_BYTES,
    TF32_TILE_K,
    WARPGROUP,
    block_start,
    register_fragment_loader,
    registers_read,
    tile_bytes,
    tile_k,
    tile_slot,
    wgmma,
    wgmma_commit,
    wgmma_fence,
    wgmma_k,
    wgmma_registers,
    wgmma_wait,
)
from .config import (
    IN_FLIGHT,
    ROWS_PER_WARPGROUP,
    WgmmaConfig,
)


def stage_loader(config: WgmmaConfig, storage, a_mode: tuple, b_mode: tuple):
    """Device function ``load_stage(smem, base, stage, k0, a, a0, stride_am, stride_ak, b, b0,
    stride_bk, stride_bn, m_left, n_left, K, tid)``: thread ``tid``'s copies of the slice at
    ``k0`` of A and B (their tiles from ``a0`` and ``b0``) into buffer ``stage``, swizzled, each
    stored as its operand lies: from element ``base``, ``config.stages`` tiles of A, then as
    many of B (operands stored as ``storage``: uint16 or float32)."""
    size = np.dtype(storage).itemsize
    A_STAGE, B_STAGE = tile_bytes(config.block_m) // size, tile_bytes(config.block_n) // size
    B_BASE = config.stages * A_STAGE
    threads, dtype = config.consumer_threads, np.dtype(storage)  # cp.async: every consumer
    load_a_tile = tile_loader(threads, tile_k(size), dtype, config.block_m, a_mode,
                              tile_slot(a_mode[0], size))  # fmt: skip
    load_b_tile = tile_loader(threads, tile_k(size), dtype, config.block_n, b_mode,
                              tile_slot(b_mode[0], size))  # fmt: skip

    @cuda.jit(device=True)
    def load_stage(smem, base, stage, k0, a, a0, stride_am, stride_ak, b, b0, stride_bk, stride_bn,
                   m_left, n_left, K, tid):  # fmt: skip
        load_a_tile(smem, base + stage * A_STAGE, a, a0 + k0 * stride_ak, stride_am, stride_ak,
                    m_left, K - k0, tid)  # fmt: skip
        load_b_tile(smem, base + B_BASE + stage * B_STAGE, b, b0 + k0 * stride_bk, stride_bn,
                    stride_bk, n_left, K - k0, tid)  # fmt: skip

    return load_stage


def tile_box(axis: str, extent_x: int, size: int) -> tuple[int, int, int]:
    """The TMA box (elements along the contiguous axis, the other, the batch) that copies an
    ``extent_x`` x one-row-of-k tile stored ``axis``-contiguous: for a k-major tile the whole
    tile (a row of k by ``extent_x``), for an x-major one a chunk (128 bytes of x by a row of
    k)."""
    per_row = tile_k(size)  # elements of a 128-byte row
    return (per_row, extent_x if axis == "k" else per_row, 1)


def tile_copier(axis: str, extent_x: int, size: int):
    """Device function ``copy(smem, dst, tensor_map, x0, k0, batch, barrier)``: TMA copies of
    the ``extent_x`` x one-row-of-k tile at (``x0``, ``k0``) of matrix ``batch`` into
    ``smem`` from element ``dst``, as :func:`warpgroup.tile_slot` lays it out, their bytes
    completing on ``barrier``: one :func:`tile_box` for a k-major tile, one per chunk for an
    x-major one."""
    per_row = tile_k(size)  # elements of a 128-byte row
    box = tile_box(axis, extent_x, size)
    if axis == "k":
        load_box = tma_load(box)

        @cuda.jit(device=True)
        def copy(smem, dst, tensor_map, x0, k0, batch, barrier):
            load_box(smem, dst, tensor_map, k0, x0, batch, barrier)

        return copy
    load_chunk = tma_load(box)
    CHUNK = per_row * ROW_BYTES // size  # elements of a chunk

    @cuda.jit(device=True)
    def chunk(smem, dst, tensor_map, x0, k0, batch, barrier, q):
        load_chunk(smem, dst + q * CHUNK, tensor_map, x0 + q * per_row, k0, batch, barrier)

    return unrolled(chunk, extent_x // per_row, "smem, dst, tensor_map, x0, k0, batch, barrier")


def tensor_map_spec(desc: MatrixDesc, axis: str, extent_x: int, x_first: bool, batch: int
                    ) -> TensorMapSpec:  # fmt: skip
    """The tensor map :func:`tile_copier` copies ``desc``'s tiles with (``axis``: its
    contiguous axis as the kernel sees it; ``extent_x``: the tile's rows; ``x_first``: desc is
    the kernel's A, m first; ``batch``: the products, of which the kernel's grid y picks one):
    extents along (the contiguous axis, the other, the batch). A broadcast operand (batch
    stride 0) has none: TMA strides are positive."""
    (extent_x0, extent_k), (stride_x, stride_k) = (
        (desc.shape, desc.strides) if x_first else (desc.shape[::-1], desc.strides[::-1])
    )
    if axis == "k":
        extents, other = (extent_k, extent_x0), stride_x
    else:
        extents, other = (extent_x0, extent_k), stride_k
    if extents[1] == 1:  # one line: its stride never steps; any that encodes
        vec = VECTOR_BYTES // desc.dtype.itemsize
        other = cdiv(extents[0], vec) * vec
    # one matrix: likewise (the batch coordinate is always 0)
    batch_stride = desc.batch_stride if batch > 1 else other * extents[1]
    return TensorMapSpec(desc.address, desc.dtype, (*extents, batch), (other, batch_stride),
                         tile_box(axis, extent_x, desc.dtype.itemsize))  # fmt: skip


def shared_slice_multiplier(config: WgmmaConfig, operand: str, a_axis: str, b_axis: str):
    """Device function ``multiply_slice(acc, frag, smem, a_tile, b_start, tid, parity)`` for
    16-bit operands: the warpgroup's wgmmas of one slice, A's block of its 64 rows and B's
    read from the tiles at ``a_tile`` and ``b_start`` (``frag``, ``parity`` unused), committed
    as one group; then a wait until at most ``IN_FLIGHT`` slices' groups are pending, so that
    the next slice's copies and the tensor cores overlap."""
    A_WARPGROUP = block_start(a_axis, ROWS_PER_WARPGROUP, 0)  # a warpgroup's rows of A
    A_K_STEP, B_K_STEP = block_start(a_axis, 0, 1), block_start(b_axis, 0, 1)  # per wgmma
    multiply = wgmma(operand, config.block_n, a_axis, b_axis)
    in_flight = wgmma_wait(IN_FLIGHT)

    @cuda.jit(device=True)
    def k_step(acc, smem, a_start, b_start, kk):
        multiply(acc, smem, a_start + kk * A_K_STEP, b_start + kk * B_K_STEP, 1)

    steps = unrolled(k_step, tile_k(2) // wgmma_k(operand), "acc, smem, a_start, b_start")

    @cuda.jit(device=True)
    def multiply_slice(acc, frag, smem, a_tile, b_start, tid, parity):
        wgmma_fence()
        steps(acc, smem, a_tile + (tid // WARPGROUP) * A_WARPGROUP, b_start)
        wgmma_commit()
        in_flight()

    return multiply_slice


def register_slice_multiplier(config: WgmmaConfig, a_axis: str):
    """Device function ``multiply_slice(acc, frag, smem, a_tile, b_start, tid, parity)`` for
    float32 operands at TF32:

    1. each warp loads its 16 rows of the slice of A from the tile at ``a_tile`` (stored
       ``a_axis``-contiguous, swizzled) as ``mma``'s fragments, 8 k at a time, rounded to
       TF32, into set ``parity`` of ``frag`` (two sets of ``SET`` words: the slice before this one
       may still be read from the other);
    2. its warpgroup issues one register-A wgmma per 8 k with B's k-major blocks, committed
       as one group;
    3. it waits until at most ``IN_FLIGHT`` groups are pending: the previous slice's, which
       read the other set, has completed, and only then are those registers free
       (``registers_read``: ptxas would otherwise reuse them as soon as the wgmma issues)."""
    STEPS = TF32_TILE_K // wgmma_k("tf32")
    SET = STEPS * REGISTER_WORDS
    B_K_STEP = block_start("k", 0, 1, OPERAND_BYTES["tf32"])
    load = register_fragment_loader(a_axis, config.block_m)
    multiply = wgmma_registers("tf32", config.block_n, "k")
    in_flight = wgmma_wait(IN_FLIGHT)
    other_set_read = registers_read(SET)

    @cuda.jit(device=True)
    def load_step(frag, smem, a_tile, x0, first, kk):
        load(frag, first + kk * REGISTER_WORDS, smem, a_tile, x0, kk)

    @cuda.jit(device=True)
    def multiply_step(acc, frag, smem, b_start, first, kk):
        multiply(acc, frag, first + kk * REGISTER_WORDS, smem, b_start + kk * B_K_STEP, 1)

    load_all = unrolled(load_step, STEPS, "frag, smem, a_tile, x0, first")
    multiply_all = unrolled(multiply_step, STEPS, "acc, frag, smem, b_start, first")

    @cuda.jit(device=True)
    def multiply_slice(acc, frag, smem, a_tile, b_start, tid, parity):
        first = parity * SET
        load_all(frag, smem, a_tile, (tid // 32) * BLOCK_ROWS, first)  # warp w: rows 16 w..
        wgmma_fence()  # the words written, before the wgmmas read them
        multiply_all(acc, frag, smem, b_start, first)
        wgmma_commit()
        in_flight()
        other_set_read(frag, SET - first)

    return multiply_slice
