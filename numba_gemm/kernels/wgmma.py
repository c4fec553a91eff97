"""Hopper tensor-core GEMM on ``wgmma``: bf16 and f16 operands, float32 accumulation.

Shapes: C (M x N) = A (M x K) @ B (K x N), each a 1-D buffer plus element strides, as in
``mma``; any M, N, K >= 1, any strides; a batch along grid y. Operands are bf16 or f16 (passed
as their uint16 bits); C is float32, or bf16/f16 rounded from the float32 accumulator.
Compute capability 9.0 (``wgmma`` is sm_90a); the simulator runs it through twins
(``warpgroup``).

Algorithm (one CTA of ``block_m / 64`` warpgroups per BLOCK_M x BLOCK_N tile of C; warpgroup w
owns rows 64 w .. 64 w + 63 of the tile):

1. *Which tile*: program id -> ``(pid_m, pid_n)`` through seed 004's grouped order
   (``ordering.tile_of``); grid y is the product of the batch.
2. *Pipeline*: ``stages`` shared-memory buffers of one 64-k slice of A (BLOCK_M x 64) and of B
   (64 x BLOCK_N), 128-byte swizzled (``warpgroup.tile_slot``), each stored as its operand lies
   (k-major or m/n-major: ``wgmma`` transposes m/n-major blocks as it reads them). Every thread
   fills them with ``cp.async`` (16-byte runs along the contiguous axis, zero-filled past the
   matrix; element copies for operands with no usable contiguous axis). ``LOOKAHEAD`` slices
   load while the tensor cores multiply, and ``IN_FLIGHT`` slices' wgmmas may still read theirs.
3. *Multiply*: per slice, each warpgroup issues four ``wgmma.m64nNk16`` (N = BLOCK_N), its
   64 x BLOCK_N accumulators in registers (BLOCK_N / 2 float32 per thread), then commits them
   as one group and waits until at most ``IN_FLIGHT`` groups are pending, so that the next
   slice's copies and the tensor cores overlap.
4. *Epilogue*: the warpgroups write their accumulators into a float32 C tile in shared memory
   (the pipeline's buffers, free after the k loop); then every thread converts 16 bytes' worth
   of C's elements at a time and stores them along C's rows (consecutive threads, consecutive
   vectors), element by element at the edges or where C's rows are not contiguous and aligned.

Order of a slice's buffer: copies land (``cp.async.wait_group``), each thread makes its writes
visible to the tensor cores (``fence.proxy.async``), a CTA barrier; a buffer is refilled only
after the barrier that follows every warpgroup's wait for the wgmmas that read it.

Constraints (``WgmmaConfig.check``): BLOCK_M a multiple of 64 (at most 4 warpgroups),
BLOCK_N a multiple of 64 up to 256 (one wgmma's N), tiles that split into whole 16-byte copies
per thread, ``stages`` >= IN_FLIGHT + 2.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

import numpy as np
from numba import cuda

from ..descriptor import MatrixDesc
from ..launch import (
    STATIC_SHARED_LIMIT,
    KernelLaunch,
    cdiv,
    kernel_launch,
    multiprocessors,
    shared_memory_limit,
    simulated,
)
from ..precision import FLOAT32, Preset
from .fragments import output_converter
from .mma import (
    UINT16,
    VECTOR_BYTES,
    accumulator_zeroer,
    operand_mode,
    storage_dtype,
    storage_view,
    tile_loader,
    tile_origin,
)
from .ptx import cp_async_commit, cp_async_wait, load_vector, store_vector
from .tiled import int_fields, kernel_jit, unrolled
from .warpgroup import (
    ALIGNMENT,
    TILE_K,
    WARPGROUP,
    WGMMA_K,
    aligned_start,
    async_proxy_fence,
    block_start,
    thread_index,
    tile_bytes,
    tile_slot,
    wgmma,
    wgmma_commit,
    wgmma_fence,
    wgmma_wait,
)

__all__ = [
    "WgmmaConfig",
    "DEFAULT_WGMMA_CONFIG",
    "SIMULATOR_WGMMA_CONFIG",
    "SMALL_WGMMA_CONFIG",
    "WGMMA_CC",
    "default_wgmma_config",
    "plan_wgmma",
]

WGMMA_CC = (9, 0)  # wgmma: Hopper (sm_90a)
ROWS_PER_WARPGROUP = 64  # wgmma's m
IN_FLIGHT = 1  # wgmma groups a warpgroup leaves pending while the next slice's copies go out


@dataclass(frozen=True)
class WgmmaConfig:
    """One ``wgmma`` kernel configuration (compile-time constants).

    ``block_m x block_n``: the C tile of a CTA, 64 rows per warpgroup; ``stages``: shared-memory
    buffers of a 64-k slice of A and B; ``group_m``: the grouped order's group height.
    """

    block_m: int = 128
    block_n: int = 256
    stages: int = 4
    group_m: int = 8

    def __post_init__(self):
        int_fields(self)

    @property
    def warpgroups(self) -> int:
        return self.block_m // ROWS_PER_WARPGROUP

    @property
    def threads(self) -> int:
        return WARPGROUP * self.warpgroups

    def check(self, storage=UINT16) -> None:
        """``ValueError`` saying which constraint this config breaks (for operands stored as
        ``storage``: the kernel takes 16-bit ones)."""
        if np.dtype(storage).itemsize != 2:
            raise ValueError(
                "WgmmaConfig is the wgmma kernel's, which takes bfloat16 or float16 operands; "
                f"got {np.dtype(storage)} ones"
            )
        for field in fields(self):
            if getattr(self, field.name) < 1:
                raise ValueError(f"WgmmaConfig.{field.name} must be a positive integer")
        if self.block_m % ROWS_PER_WARPGROUP or self.warpgroups > 4:
            raise ValueError(
                f"WgmmaConfig.block_m = {self.block_m} must be 64, 128, 192 or 256 (64 rows "
                "per warpgroup)"
            )
        if self.block_n % 64 or self.block_n > 256:
            raise ValueError(
                f"WgmmaConfig.block_n = {self.block_n} must be a multiple of 64 up to 256 "
                "(one wgmma's n)"
            )
        vec = VECTOR_BYTES // UINT16.itemsize
        for tile in (self.block_m, self.block_n):
            if (tile * TILE_K) % (vec * self.threads):
                raise ValueError(
                    f"a {tile} x {TILE_K} tile must split into whole 16-byte copies for each "
                    f"of the {self.threads} threads"
                )
        if self.stages < IN_FLIGHT + 2:
            raise ValueError(
                f"WgmmaConfig.stages must be >= {IN_FLIGHT + 2}: {IN_FLIGHT} slice(s) being "
                "multiplied and at least one loading"
            )

    def shared_bytes(self) -> int:
        """Dynamic shared memory per CTA: ``stages`` tiles of A and B, or after the k loop in the
        same memory the float32 C tile (rows padded by 16 bytes), and room to start them at a
        1024-byte boundary (the swizzle's period)."""
        pipeline = self.stages * (tile_bytes(self.block_m) + tile_bytes(self.block_n))
        c_tile = self.block_m * (self.block_n * 4 + VECTOR_BYTES)
        return max(pipeline, c_tile) + ALIGNMENT

    def label(self) -> str:
        return f"wgmma {self.block_m}x{self.block_n}x{TILE_K}/s{self.stages}/g{self.group_m}"


# Two warpgroups of 64 x 256: 128 accumulators per thread, each 16 x 256 block of B read by
# both warpgroups; four stages of 48 KB fill the shared memory of an SM.
DEFAULT_WGMMA_CONFIG = WgmmaConfig(128, 256, 4, 8)
# Problems too small for half a wave of those tiles: 128 x 128 tiles (twice the CTAs), six
# stages of 32 KB.
SMALL_WGMMA_CONFIG = WgmmaConfig(128, 128, 6, 8)

# On the simulator, one warpgroup and a 64 x 64 tile (the kernel code is the same).
SIMULATOR_WGMMA_CONFIG = WgmmaConfig(64, 64, 3, 1)


def default_wgmma_config(M: int, N: int, batch: int = 1) -> WgmmaConfig:
    """The tiles for an M x N product (``batch`` of them) when the caller gives none:
    :data:`DEFAULT_WGMMA_CONFIG`, or :data:`SMALL_WGMMA_CONFIG` where its tiles would occupy
    fewer than half the SMs."""
    if simulated():
        return SIMULATOR_WGMMA_CONFIG
    big = DEFAULT_WGMMA_CONFIG
    tiles = cdiv(M, big.block_m) * cdiv(N, big.block_n) * batch
    return SMALL_WGMMA_CONFIG if 2 * tiles < multiprocessors() else big


@functools.cache
def _kernel(config: WgmmaConfig, operand: str, out_dtype, a_mode: tuple, b_mode: tuple,
            c_vectors: bool):  # fmt: skip
    """The kernel specialised for one config, operand kind, output dtype, operand layouts and
    whether C's rows take 16-byte stores (``c_vectors``)."""
    BLOCK_M, BLOCK_N, STAGES = config.block_m, config.block_n, config.stages
    GROUP_M = config.group_m
    THREADS = config.threads
    LOOKAHEAD = STAGES - 1 - IN_FLIGHT  # slices loading ahead of the one multiplied
    ACC_SIZE = BLOCK_N // 2
    A_STAGE, B_STAGE = tile_bytes(BLOCK_M) // 2, tile_bytes(BLOCK_N) // 2  # elements
    B_BASE = STAGES * A_STAGE
    a_axis, b_axis = a_mode[0], b_mode[0]
    A_WARPGROUP = block_start(a_axis, ROWS_PER_WARPGROUP, 0)  # a warpgroup's rows of A
    A_K_STEP, B_K_STEP = block_start(a_axis, 0, 1), block_start(b_axis, 0, 1)  # per 16 k
    load_a_tile = tile_loader(THREADS, TILE_K, UINT16, BLOCK_M, a_mode, tile_slot(a_axis))
    load_b_tile = tile_loader(THREADS, TILE_K, UINT16, BLOCK_N, b_mode, tile_slot(b_axis))
    multiply = wgmma(operand, BLOCK_N, a_axis, b_axis)
    convert = output_converter(out_dtype)
    C_STORAGE = storage_dtype(out_dtype)
    C_VEC = VECTOR_BYTES // C_STORAGE.itemsize  # C's elements per 16-byte store
    C_ROW = BLOCK_N + 4  # the staged float32 C tile's row, padded by 16 bytes (bank conflicts)
    C_VECTORS = BLOCK_M * BLOCK_N // C_VEC // THREADS  # 16-byte stores per thread
    C_VECTORS_OK = c_vectors
    copies_landed = cp_async_wait(LOOKAHEAD - 1)
    wgmma_in_flight, wgmma_done = wgmma_wait(IN_FLIGHT), wgmma_wait(0)
    origin = tile_origin(BLOCK_M, BLOCK_N, GROUP_M)

    @cuda.jit(device=True)
    def load_stage(smem, base, stage, k0, a, a0, stride_am, stride_ak, b, b0, stride_bk, stride_bn,
                   m_left, n_left, K, tid):  # fmt: skip
        # The copies of the slice at k0 of A and B (their tiles from a0 and b0) into ``stage``.
        load_a_tile(smem, base + stage * A_STAGE, a, a0 + k0 * stride_ak, stride_am, stride_ak,
                    m_left, K - k0, tid)  # fmt: skip
        load_b_tile(smem, base + B_BASE + stage * B_STAGE, b, b0 + k0 * stride_bk, stride_bn,
                    stride_bk, n_left, K - k0, tid)  # fmt: skip

    @cuda.jit(device=True)
    def k_step(acc, smem, a_start, b_start, kk):
        multiply(acc, smem, a_start + kk * A_K_STEP, b_start + kk * B_K_STEP)

    multiply_slice = unrolled(k_step, TILE_K // WGMMA_K, "acc, smem, a_start, b_start")

    zero_all = accumulator_zeroer(ACC_SIZE)

    @cuda.jit(device=True)
    def stage(c_tile, start, acc, row, col, j):
        # this thread's accumulators of columns 8 j.. into the C tile in shared memory, as they
        # are (converting here, on the accumulator registers, makes ptxas serialise the wgmmas)
        for e in range(4):
            c_tile[start + (row + 8 * (e // 2)) * C_ROW + col + 8 * j + e % 2] = acc[4 * j + e]

    stage_all = unrolled(stage, ACC_SIZE // 4, "c_tile, start, acc, row, col")

    @cuda.jit(device=True)
    def store_tile(c, c0, stride_cm, stride_cn, M, N, m0, n0, c_tile, start, floats, vector, tid):
        # the staged C tile to C, converted: 16-byte stores, consecutive threads along a row
        for i in range(C_VECTORS):
            v = tid + i * THREADS
            row, col = v // (BLOCK_N // C_VEC), (v % (BLOCK_N // C_VEC)) * C_VEC
            m, n = m0 + row, n0 + col
            here = start + row * C_ROW + col
            if C_VECTORS_OK and m < M and n + C_VEC <= N:
                for q in range(C_VEC // 4):
                    load_vector(floats, 4 * q, c_tile, here + 4 * q)
                for e in range(C_VEC):
                    vector[e] = convert(floats[e])
                store_vector(c, c0 + m * stride_cm + n, vector, 0)
            elif m < M:
                for e in range(C_VEC):
                    if n + e < N:
                        c[c0 + m * stride_cm + (n + e) * stride_cn] = convert(c_tile[here + e])

    @kernel_jit(THREADS)
    def wgmma_kernel(a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn,
                     c, stride_cb, stride_cm, stride_cn, M, N, K):  # fmt: skip
        smem = cuda.shared.array(0, UINT16)
        acc = cuda.local.array(ACC_SIZE, np.float32)
        zero_all(acc)
        base = aligned_start(smem)  # the tiles start at a 1024-byte boundary

        # -- which C tile (grouped order); this warpgroup's rows of it -----------------------
        m0, n0, batch = origin(M, N)
        tid = cuda.threadIdx.x
        warpgroup = tid // WARPGROUP
        a0 = batch * stride_ab + m0 * stride_am
        b0 = batch * stride_bb + n0 * stride_bn

        # -- pipeline: LOOKAHEAD slices load ahead of the one multiplied ----------------------
        k_tiles = (K + TILE_K - 1) // TILE_K
        for s in range(LOOKAHEAD):
            if s < k_tiles:
                load_stage(smem, base, s, s * TILE_K, a, a0, stride_am, stride_ak,
                           b, b0, stride_bk, stride_bn, M - m0, N - n0, K, tid)  # fmt: skip
            cp_async_commit()
        for t in range(k_tiles):
            # Slice t has landed and is visible to the tensor cores; every warpgroup is done
            # with slice t - 1 - IN_FLIGHT, whose buffer the copies below refill.
            copies_landed()
            async_proxy_fence()
            cuda.syncthreads()
            ahead = t + LOOKAHEAD
            if ahead < k_tiles:
                load_stage(smem, base, ahead % STAGES, ahead * TILE_K, a, a0, stride_am,
                           stride_ak, b, b0, stride_bk, stride_bn, M - m0, N - n0, K,
                           tid)  # fmt: skip
            cp_async_commit()
            stage = t % STAGES
            wgmma_fence()
            multiply_slice(acc, smem, base + stage * A_STAGE + warpgroup * A_WARPGROUP,
                           base + B_BASE + stage * B_STAGE)  # fmt: skip
            wgmma_commit()
            wgmma_in_flight()
        wgmma_done()

        # -- epilogue: accumulators -> float32 C tile in shared memory -> C, converted --------
        cuda.syncthreads()  # every warpgroup is done with the pipeline's buffers
        c_tile = cuda.shared.array(0, FLOAT32)  # the same memory, as float32
        # tid and the tile's start read afresh: nothing of the epilogue is computed before the
        # k loop and kept live across it (fewer registers and instructions in the SASS)
        c_start = aligned_start(smem) // 2
        tid = thread_index()
        warpgroup, lane, warp = tid // WARPGROUP, tid % 32, (tid % WARPGROUP) // 32
        stage_all(c_tile, c_start, acc, warpgroup * ROWS_PER_WARPGROUP + 16 * warp + lane // 4,
                  2 * (lane % 4))  # fmt: skip
        cuda.syncthreads()
        floats = cuda.local.array(C_VEC, np.float32)
        vector = cuda.local.array(C_VEC, C_STORAGE)
        store_tile(c, batch * stride_cb, stride_cm, stride_cn, M, N, m0, n0, c_tile, c_start,
                   floats, vector, tid)  # fmt: skip

    return wgmma_kernel


def plan_wgmma(config: WgmmaConfig, preset: Preset, a: MatrixDesc, b: MatrixDesc, c: MatrixDesc
               ) -> KernelLaunch:  # fmt: skip
    """The ``wgmma`` kernel's launch on validated 16-bit operands: C (M x N) = A (M x K) @
    B (K x N) under ``preset`` (``BF16_BF16_F32`` or ``F16_F16_F32``), for each of ``c.batch``
    products."""
    config.check(a.dtype)  # 16-bit operands
    if preset.parts != 1:
        raise ValueError(
            f"the wgmma kernel takes bfloat16 or float16 operands at their own precision; got "
            f"{a.dtype} operands at {preset.name}"
        )
    a, b = storage_view(a, UINT16), storage_view(b, UINT16)
    out_dtype = c.dtype
    if c.dtype.itemsize == 2:
        c = storage_view(c, UINT16)
    a_mode, b_mode = operand_mode(a, True), operand_mode(b, False)
    c_vectors = operand_mode(c, True) == ("k", True)  # rows contiguous, 16-byte aligned
    shared = config.shared_bytes()
    if shared > STATIC_SHARED_LIMIT and shared > (limit := shared_memory_limit()):
        raise ValueError(
            f"{config.label()} needs {shared} bytes of shared memory per block; this device "
            f"allows {limit}"
        )
    (M, K), N = a.shape, b.shape[1]
    kernel = _kernel(config, preset.operand, np.dtype(out_dtype), a_mode, b_mode, c_vectors)
    grid = (cdiv(M, config.block_m) * cdiv(N, config.block_n), c.batch)
    return kernel_launch(kernel, grid, config.threads, shared,
                         (a, a.batch_stride, *a.strides, b, b.batch_stride, *b.strides,
                          c, c.batch_stride, *c.strides, M, N, K))  # fmt: skip
