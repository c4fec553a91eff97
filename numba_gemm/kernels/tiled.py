"""Tiled GEMM: shared-memory tiles, register blocking, a cp.async pipeline, grouped CTA order.

Shapes: C (M x N) = A (M x K) @ B (K x N), each a 1-D buffer plus element
strides as in ``loop_orders``. Any M, N, K >= 1; float32 or float64.

Algorithm (one CTA per BLOCK_M x BLOCK_N tile of C; grid x runs over the
tiles, grid y over the products of a batch, each operand offset by its batch
stride):

1. *Which tile*: program id -> ``(pid_m, pid_n)`` through seed 004's grouped
   ordering (``numba_gemm.ordering.tile_of``), so CTAs that run together share
   A and B tiles in L2.
2. *Pipeline*: shared memory holds ``STAGES`` buffers of one BLOCK_K slice of A
   (stored k-major, ``As[k][m]``) and of B (``Bs[k][n]``). ``cp.async`` copies
   global -> shared without registers; ``STAGES - 1`` k-tiles are in flight
   while the CTA multiplies the oldest (register-staged operands, below: one).
   One barrier per k-tile: the CTA's, or under split-k each thread group's own (a
   hardware barrier per group, or the warp's for one-warp groups), since a group only
   shares its own buffers (groups that do not meet every k-tile run faster).
3. *Register blocking*: each thread owns a THREAD_M x THREAD_N block of C in
   registers. Per k step it reads THREAD_M values of A and THREAD_N of B from
   shared memory as 16-byte vectors and does THREAD_M * THREAD_N FMAs. Its rows
   are THREAD_M / VEC runs of VEC consecutive rows spaced BLOCK_M / (THREAD_M /
   VEC) apart (likewise columns), so a warp's vector reads hit distinct banks.
4. *Epilogue*: each thread writes its block of C, as 16-byte vectors along C's
   contiguous axis where aligned and inside the matrix, element by element at
   the edges.

Edges are handled in the kernel: copies of elements outside A or B zero-fill
shared memory (``cp.async``'s source size; register-staged loads load zeros),
so the k sum stays exact, and out-of-range rows and columns are simply not
stored. No operand is padded or copied. Where every tile and k-slice lies inside
the matrices (:func:`whole_tiles`: M, N and K multiples of the tile) a second
specialisation has no edge code at all: no bounds tests in the copies or the
stores, and a k loop without branches (the copies ahead of the last k-tiles
reload the last one instead of being skipped). It is faster and half the code, which
matters most to the fused triple product, whose binary holds two tiles' code
(``docs/design/tiled-gemm.md``).

Layouts are compile-time specialisations (``_kernel``'s key), never copies:

- an operand whose tile axis (m for A, n for B) is contiguous and 16-byte
  aligned is copied by 16-byte ``cp.async`` straight into its k-major tile;
- one whose k axis is contiguous and aligned (row-major A, column-major B)
  is loaded as 16-byte vectors into registers one k-tile ahead and stored down
  the k-major tile after the current tile's FMAs (``cp.async`` cannot transpose);
- otherwise (misaligned rows, other strides) each thread copies single
  elements by ``cp.async`` with lanes along the contiguous axis, so the warp's
  global reads still coalesce. Shared rows are padded by one vector so that
  transposing writes avoid bank conflicts.

Constraints (checked by ``TileConfig.check`` with the reason): tiles divide
into whole thread blocks and whole 16-byte vectors; a launch needs
``TileConfig.shared_bytes`` of the device's shared memory per block.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from numba import cuda

from ..descriptor import MatrixDesc
from ..launch import (
    SIMULATED,
    STATIC_SHARED_LIMIT,
    KernelLaunch,
    cdiv,
    kernel_launch,
    multiprocessors,
    programmatic_launch,
    shared_memory_limit,
)
from ..ordering import tile_of
from .common import (
    VECTOR_BYTES,
    WARP,
    check_field_range,
    int_fields,
    kernel_jit,
    unrolled,
)
from .ptx import (
    await_prior_grids,
    cp_async,
    cp_async_commit,
    cp_async_wait,
    load_global_vector,
    load_vector,
    move_element,
    named_barrier,
    store_vector,
    warp_barrier,
)
from .split_k import check_k_ctas, settler, split_buffers, split_into_wave, working_config

__all__ = [
    "TileConfig",
    "DEFAULT_CONFIGS",
    "SIMULATOR_CONFIG",
    "NARROW_M",
    "NARROW_CTAS_PER_SM",
    "NARROW_CONFIGS",
    "narrow_config",
    "LARGE_REGISTER_TILE",
    "for_edge_tiles",
    "valid_or",
    "SharedLayout",
    "mainloop",
    "tile_storer",
    "split_k_parts",
    "TileFunctions",
    "tile_computer",
    "whole_tiles",
    "overlap_launches",
    "plan_tiled",
    "operand_modes",
    "kernel_resources",
]

MAX_THREADS = 1024
# Registers of a thread's C block (16 x 8 float32, or 8 x 8 float64): beyond them the staged
# fragments of A and B no longer fit a thread's 255 registers.
MAX_ACCUMULATOR_WORDS = 128


@dataclass(frozen=True)
class TileConfig:
    """One tiled-kernel configuration; every field is a compile-time constant of the kernel.

    ``block_m x block_n``: the C tile of one CTA; ``block_k``: the k slice per
    pipeline stage; ``thread_m x thread_n``: the C block each thread keeps in
    registers; ``stages``: shared-memory buffers (>= 2; ``stages - 1`` k-tiles
    load while one is multiplied); ``group_m``: the grouped ordering's group
    height (1 = row-major); ``split_k``: thread groups per CTA, each running the k loop over
    its own slice of k with its own pipeline, their partial tiles summed through shared
    memory (more warps per SM where a product has few tiles); ``k_ctas``: CTAs per C tile,
    each over its own range of k, the last adding them (``kernels.split_k``: where the tiles
    are fewer than the SMs). Threads follow: ``threads`` per group, ``cta_threads`` per CTA.
    """

    block_m: int = 128
    block_n: int = 128
    block_k: int = 8
    thread_m: int = 8
    thread_n: int = 8
    stages: int = 3
    group_m: int = 8
    split_k: int = 1
    k_ctas: int = 1

    def __post_init__(self):
        # Types here; values, which depend on the dtype, in check().
        int_fields(self)

    @property
    def threads_m(self) -> int:
        return self.block_m // self.thread_m

    @property
    def threads_n(self) -> int:
        return self.block_n // self.thread_n

    @property
    def threads(self) -> int:
        return self.threads_m * self.threads_n

    @property
    def cta_threads(self) -> int:
        return self.threads * self.split_k

    def shared_bytes(self, dtype) -> int:
        """Dynamic shared memory per CTA: per group ``stages`` padded k-major tiles of A and B
        (the split-k sum reuses them: see :class:`SharedLayout`)."""
        return SharedLayout.of(self, dtype).end * np.dtype(dtype).itemsize

    def check(self, dtype) -> None:
        """Raise ``ValueError`` saying which constraint this config breaks for ``dtype``."""
        _check_config(self, np.dtype(dtype))

    def _check(self, dtype: np.dtype) -> None:
        itemsize = np.dtype(dtype).itemsize
        vec = VECTOR_BYTES // itemsize
        check_field_range(self)
        check_k_ctas(self)
        words = self.thread_m * self.thread_n * itemsize // 4
        if words > MAX_ACCUMULATOR_WORDS:
            raise ValueError(
                f"TileConfig's {self.thread_m} x {self.thread_n} register tile takes {words} "
                f"registers per thread; at most {MAX_ACCUMULATOR_WORDS} leave room for the "
                "staged operands (a thread has 255)"
            )
        for tile, part in (("block_m", "thread_m"), ("block_n", "thread_n")):
            if getattr(self, part) % vec:
                raise ValueError(
                    f"TileConfig.{part} = {getattr(self, part)} must be a multiple of "
                    f"{vec}: each thread reads its {np.dtype(dtype)} fragments as "
                    f"16-byte vectors"
                )
            if getattr(self, tile) % getattr(self, part):
                raise ValueError(
                    f"TileConfig.{tile} = {getattr(self, tile)} must be a multiple of "
                    f"{part} = {getattr(self, part)} (whole thread blocks per tile)"
                )
        if self.cta_threads > MAX_THREADS:
            raise ValueError(
                f"TileConfig gives {self.cta_threads} threads per CTA ({self.threads} "
                f"per group x split_k = {self.split_k}); CUDA allows {MAX_THREADS}: "
                f"raise thread_m/thread_n, shrink the block tile or lower split_k"
            )
        warp_n, warp_m = _warp_shape(self)
        if self.threads_n % warp_n or self.threads_m % warp_m:
            raise ValueError(
                f"the {self.threads_m} x {self.threads_n} thread grid must split into "
                f"warps of {warp_m} x {warp_n} threads"
            )
        for tile in (self.block_m, self.block_n):
            if (self.block_k * tile) % (vec * self.threads):
                raise ValueError(
                    f"a {self.block_k} x {tile} operand tile must split into whole "
                    f"16-byte vectors per thread ({self.threads} threads)"
                )
            # Every thread's copies sit a whole number of tile rows (or columns) apart, for
            # element copies along either axis (and so for vector copies too).
            if self.threads % tile or self.threads % self.block_k:
                raise ValueError(
                    f"{self.threads} threads must be a multiple of block_k = "
                    f"{self.block_k} and of the tile width {tile}, so that each "
                    f"thread's copies are whole tile rows apart"
                )
        if self.stages < 2:
            raise ValueError("TileConfig.stages must be >= 2 so that loads overlap compute")

    def label(self) -> str:
        return (
            f"{self.block_m}x{self.block_n}x{self.block_k}/t{self.thread_m}x{self.thread_n}"
            f"/s{self.stages}/g{self.group_m}"
            + (f"/k{self.split_k}" if self.split_k > 1 else "")
            + (f"/kc{self.k_ctas}" if self.k_ctas > 1 else "")
        )


# Fallbacks when the tuning caches have nothing for a device or its architecture: large tiles
# that ran at 0.89-0.91x cuBLAS from 2048^3 up on an H200, in 75 KB of shared memory per CTA
# (float32), which GPUs from sm_80 on allow (docs/design/tiled-gemm.md).
DEFAULT_CONFIGS = {
    np.dtype(np.float32): TileConfig(128, 256, 16, 8, 16, 3, 8),
    np.dtype(np.float64): TileConfig(64, 64, 8, 4, 4, 3, 8),
}


# Small enough for the simulator (16 threads per CTA), and it runs the same kernel code.
SIMULATOR_CONFIG = TileConfig(
    block_m=16, block_n=16, block_k=4, thread_m=4, thread_n=4, stages=2, group_m=2
)

# Products with at most NARROW_M rows of C (2 to 16 tokens of a decode step): one row of
# 16 x 128 tiles reads B once, each k slice of B in shared memory serving all 16 rows, and
# split-k puts two of these small CTAs on each SM (16 x 8192 x 8192 float32 at 4 CTAs per
# tile: 79 us, against cuBLAS's 148 and the skinny kernel's 1000, on an H200; 2 CTAs per SM
# beat 1 and 4 on every projection shape, though 4 of them fit an SM).
NARROW_M = 16
NARROW_CTAS_PER_SM = 2
NARROW_CONFIGS = {
    np.dtype(np.float32): TileConfig(16, 128, 32, 4, 4, 3, 8),
    np.dtype(np.float64): TileConfig(16, 128, 16, 4, 4, 3, 8),
}


def narrow_config(M: int, N: int, K: int, batch: int, dtype, split: bool) -> TileConfig:
    """The tiles for an M x N x K product (``batch`` of them) with M <= :data:`NARROW_M`:
    :data:`NARROW_CONFIGS`'s, and where ``split`` (the caller has scratch) as many CTAs per tile
    as make one wave of :data:`NARROW_CTAS_PER_SM` CTAs per SM
    (:func:`split_k.choose_k_ctas`). On the simulator :data:`SIMULATOR_CONFIG`, one CTA per
    tile."""
    if SIMULATED:
        return SIMULATOR_CONFIG
    config = NARROW_CONFIGS[np.dtype(dtype)]
    if not split:
        return config
    return with_k_ctas(config, M, N, K, batch, NARROW_CTAS_PER_SM)


# Tall tiles with large register tiles (block_m > block_n, at least LARGE_REGISTER_TILE elements
# per thread: 256 x 128 with 16 x 8) run transposed (128 x 256 with 8 x 16) where the product
# has edge tiles (not whole_tiles): a row-major A goes through the staging registers, whose
# count grows with block_m, on top of the edge code; transposed they ran 2-15% faster there
# (docs/design/tiled-gemm.md).
LARGE_REGISTER_TILE = 128


def for_edge_tiles(config: TileConfig, dtype) -> TileConfig:
    """The tiles to run ``config``'s products with edge tiles: transposed where ``config`` is
    tall with large register tiles (see :data:`LARGE_REGISTER_TILE`) and the transpose is valid
    for ``dtype``, else ``config`` itself."""
    large = config.thread_m * config.thread_n >= LARGE_REGISTER_TILE
    if config.block_m <= config.block_n or not large:
        return config
    wide = replace(
        config,
        block_m=config.block_n,
        block_n=config.block_m,
        thread_m=config.thread_n,
        thread_n=config.thread_m,
    )
    return valid_or(wide, config, dtype)


def valid_or(candidate: TileConfig, fallback: TileConfig, dtype) -> TileConfig:
    """``candidate`` where it is a valid config for ``dtype``, else ``fallback``."""
    try:
        candidate.check(dtype)
    except ValueError:
        return fallback
    return candidate


@functools.lru_cache(maxsize=256)
def _check_config(config: TileConfig, dtype: np.dtype) -> None:
    config._check(dtype)  # a config that passed once for a dtype passes again: memoised


def _warp_shape(config: TileConfig) -> tuple[int, int]:
    """(threads along n, threads along m) of one warp: 8 along n where the tile allows."""
    warp_n = min(8, config.threads_n)
    return warp_n, min(WARP // warp_n, config.threads_m)


def operand_modes(a: MatrixDesc, b: MatrixDesc, c: MatrixDesc) -> tuple[tuple, tuple, tuple]:
    """The layout specialisation of each operand: (contiguous axis, 16-byte vectors allowed).

    For A and B the axis is ``"tile"`` when the tile axis (m of A, n of B) is
    contiguous, else ``"k"`` (vectors then need k contiguous); for C it is
    ``"n"``, ``"m"`` or ``None``. Vectors need the other stride, the batch
    stride and the base address to be multiples of 16 bytes.
    """

    def vectorisable(desc: MatrixDesc, other_stride: int) -> bool:
        vec = VECTOR_BYTES // desc.dtype.itemsize
        return (
            desc.address % VECTOR_BYTES == 0
            and other_stride % vec == 0
            and desc.batch_stride % vec == 0
        )

    def mode(desc: MatrixDesc, stride_x: int, stride_k: int, extent_x: int) -> tuple:
        if stride_x == 1 and extent_x > 1:
            return "tile", vectorisable(desc, stride_k)
        return "k", stride_k == 1 and vectorisable(desc, stride_x)

    (stride_am, stride_ak), (stride_bk, stride_bn) = a.strides, b.strides
    a_mode, b_mode = (
        mode(a, stride_am, stride_ak, a.shape[0]),
        mode(b, stride_bn, stride_bk, b.shape[1]),
    )
    stride_cm, stride_cn = c.strides
    if stride_cn == 1:
        c_mode = ("n", vectorisable(c, stride_cm))
    elif stride_cm == 1:
        c_mode = ("m", vectorisable(c, stride_cn))
    else:
        c_mode = (None, False)
    return a_mode, b_mode, c_mode


def whole_tiles(config: TileConfig, M: int, N: int, K: int) -> bool:
    """Whether every tile and every k-slice of an M x N x K product under ``config`` lies
    inside the matrices: M, N multiples of the block tile and K of block_k times split_k
    (each split-k group then runs whole k-tiles of its own). Kernels compiled for such
    products carry no edge code (``interior``)."""
    return (
        M % config.block_m == 0
        and N % config.block_n == 0
        and K % (config.block_k * config.split_k) == 0
    )


def _tile_loader(config: TileConfig, dtype, block_x: int, mode: tuple, interior: bool):
    """The cp.async copies of one k-major operand tile: ``(first, load)`` device functions.

    The tile is ``src[(k0 + k) * stride_k + (x0 + x) * stride_x]`` for k <
    BLOCK_K, x < ``block_x``, stored at ``smem[k * row + x]``. Each thread makes
    ``copies`` copies of ``width`` elements (a 16-byte vector when the tile
    axis is contiguous and aligned, else one element), the same distance apart
    in every tile: copy r is copy 0 moved ``r * step_k`` rows or ``r * step_x``
    columns. So a tile costs one address per thread plus constant offsets.

    - ``first(tid)`` -> ``(k, x)`` of this thread's copy 0;
    - ``load(smem, dst, src, src_index, src_step, x_left, k_left)`` issues the
      copies: ``dst``/``src_index`` locate copy 0, ``src_step`` is the source
      distance between copies, ``x_left``/``k_left`` how many columns/rows the
      matrix has from copy 0 on. Elements outside it are zero-filled (``interior``:
      there are none, and the bounds are not tested).
    """
    axis, vectorised = mode
    vec = VECTOR_BYTES // np.dtype(dtype).itemsize
    width = vec if vectorised else 1
    block_k, threads, row = config.block_k, config.threads, block_x + vec
    copies = block_k * block_x // (width * threads)
    along_x = axis == "tile"
    if along_x:  # consecutive lanes take consecutive `width`-element runs of one row
        runs = block_x // width
        step_k, step_x = threads // runs, 0
    else:  # consecutive lanes run down k, the contiguous axis of src
        runs = block_k
        step_k, step_x = 0, threads // block_k
    dst_step = step_k * row + step_x
    copy = cp_async(width)

    @cuda.jit(device=True)
    def first(tid):
        if along_x:
            return tid // runs, (tid % runs) * width
        return tid % runs, tid // runs

    last_k, last_x = (copies - 1) * step_k, (copies - 1) * step_x  # of the thread's last copy

    @cuda.jit(device=True)
    def load(smem, dst, src, src_index, src_step, x_left, k_left):
        if interior or (k_left > last_k and x_left >= last_x + width):
            # All of this thread's copies lie inside the matrix (every thread, but at the
            # edges): no bounds arithmetic, ~5 instructions per copy fewer.
            for r in range(copies):
                copy(smem, dst + r * dst_step, src, src_index + r * src_step, width)
        else:
            for r in range(copies):
                if along_x:
                    valid = min(max(x_left, 0), width) if k_left > r * step_k else 0
                else:
                    valid = 1 if k_left > 0 and x_left > r * step_x else 0
                copy(
                    smem,
                    dst + r * dst_step,
                    src,
                    src_index + r * src_step if valid > 0 else 0,
                    valid,
                )

    return first, load, step_k, step_x


def _staged_loader(config: TileConfig, dtype, block_x: int, interior: bool):
    """16-byte loads of a k-contiguous operand tile (row-major A, column-major B) through
    registers: ``(first, fetch, put, step_x)`` device functions.

    ``cp.async`` cannot transpose, and the tile is stored k-major, so these
    operands take the classic route: ``fetch(regs, src, src_index, src_step,
    x_left, k_left)`` loads the thread's vectors (along k) of the *next* tile
    into registers before the current tile's FMAs; ``put(smem, dst, regs)``
    stores them, element by element, down the k-major tile afterwards. Copy r
    is copy 0 moved ``r * step_x`` along the tile axis; elements outside the
    matrix are zeros (``interior``: there are none, and the bounds are not tested).
    """
    vec = VECTOR_BYTES // np.dtype(dtype).itemsize
    block_k, threads, row = config.block_k, config.threads, block_x + vec
    runs = block_k // vec  # vectors along k in one tile row
    copies = block_k * block_x // (vec * threads)
    step_x = threads // runs
    last_x = (copies - 1) * step_x
    # The edge loads' zero, of the operand's type: a plain 0 would make the conditional load
    # an int-or-float32 value, which Numba types as float64 (a conversion per element: 60
    # F2F in the sm_90 k loop of the 256 x 128 tiles with edge code).
    zero = np.dtype(dtype).type(0)

    @cuda.jit(device=True)
    def first(tid):
        return (tid % runs) * vec, tid // runs

    @cuda.jit(device=True)
    def fetch(regs, src, src_index, src_step, x_left, k_left):
        if interior or (k_left >= vec and x_left > last_x):  # every copy inside: whole vectors
            for r in range(copies):
                load_global_vector(regs, r * vec, src, src_index + r * src_step)
        else:
            for r in range(copies):
                for e in range(vec):
                    inside = k_left > e and x_left > r * step_x
                    regs[r * vec + e] = src[src_index + r * src_step + e] if inside else zero

    @cuda.jit(device=True)
    def put(smem, dst, regs):
        for r in range(copies):
            for e in range(vec):
                move_element(smem, dst + r * step_x + e * row, regs, r * vec + e)

    return first, fetch, put, step_x, copies * vec


def _operand_loader(config: TileConfig, dtype, block_x: int, mode: tuple, interior: bool):
    """(staged?, first, load or fetch, put, step_k, step_x, registers) for one operand."""
    vec = VECTOR_BYTES // np.dtype(dtype).itemsize
    if mode == ("k", True) and config.block_k % vec == 0:
        first, fetch, put, step_x, registers = _staged_loader(config, dtype, block_x, interior)
        return True, first, fetch, put, 0, step_x, registers
    first, load, step_k, step_x = _tile_loader(config, dtype, block_x, mode, interior)
    return False, first, load, load, step_k, step_x, 1  # put is unused: cp.async lands in place


def tile_storer(config: TileConfig, dtype, mode: tuple, interior: bool = False):
    """Device function: write a thread's THREAD_M x THREAD_N accumulator block into C.

    ``store(c, c0, stride_cm, stride_cn, M, N, acc, row0, col0)``: ``acc[i * THREAD_N + j]``
    holds C(row0 + (i // vec) * span_m + i % vec, col0 + (j // vec) * span_n + j % vec);
    C(m, n) is ``c[c0 + m * stride_cm + n * stride_cn]``; elements outside M x N are skipped.
    Pieces run along C's contiguous axis (``mode``), as 16-byte vectors where allowed.
    ``interior``: the block lies inside C, and no bound is tested.
    Written as straight-line code (one piece per 16-byte vector of C), since a
    rolled loop would index ``acc`` at run time and push it out of registers.
    """
    axis, vectorised = mode
    vec = VECTOR_BYTES // np.dtype(dtype).itemsize
    thread_m, thread_n = config.thread_m, config.thread_n
    span_m, span_n = config.block_m // (thread_m // vec), config.block_n // (thread_n // vec)
    scalar = np.dtype(dtype).type
    along_m = axis == "m"  # column-major C: pieces run down a column

    @cuda.jit(device=True)
    def store_piece(c, c0, stride_cm, stride_cn, M, N, acc, row0, col0, piece):
        if along_m:  # piece = (column j, vector v of vec rows)
            j, v = piece // (thread_m // vec), piece % (thread_m // vec)
            m = row0 + v * span_m
            n = col0 + (j // vec) * span_n + j % vec
            if interior or n < N:
                if vectorised and (interior or m + vec <= M):
                    column = cuda.local.array(vec, scalar)
                    for e in range(vec):
                        column[e] = acc[(v * vec + e) * thread_n + j]
                    store_vector(c, c0 + m + n * stride_cn, column, 0)
                else:
                    for e in range(vec):
                        if interior or m + e < M:
                            c[c0 + (m + e) * stride_cm + n * stride_cn] = acc[
                                (v * vec + e) * thread_n + j
                            ]
        else:  # piece = (row i, vector w of vec columns)
            i, w = piece // (thread_n // vec), piece % (thread_n // vec)
            m = row0 + (i // vec) * span_m + i % vec
            n = col0 + w * span_n
            if interior or m < M:
                if vectorised and (interior or n + vec <= N):
                    store_vector(c, c0 + m * stride_cm + n, acc, i * thread_n + w * vec)
                else:
                    for f in range(vec):
                        if interior or n + f < N:
                            c[c0 + m * stride_cm + (n + f) * stride_cn] = acc[
                                i * thread_n + w * vec + f
                            ]

    return unrolled(
        store_piece,
        thread_m * thread_n // vec,
        "c, c0, stride_cm, stride_cn, M, N, acc, row0, col0",
    )


@dataclass(frozen=True)
class SharedLayout:
    """Where a CTA's tiles sit in its dynamic shared memory (element offsets).

    Per thread group (``split_k`` of them, each ``group`` elements from the last):
    ``stages`` k-major A tiles of ``a_row``-element rows, then ``stages`` B tiles.
    After the k loop the groups but the first leave their partial tiles in the same
    memory for the first to sum (``partials`` elements). ``end``: the elements a CTA
    needs.
    """

    a_row: int
    b_row: int
    a_stage: int
    b_stage: int
    b_base: int
    group: int
    partials: int
    end: int

    @staticmethod
    def of(config: TileConfig, dtype) -> SharedLayout:
        vec = VECTOR_BYTES // np.dtype(dtype).itemsize
        a_row, b_row = config.block_m + vec, config.block_n + vec
        a_stage, b_stage = config.block_k * a_row, config.block_k * b_row
        b_base = config.stages * a_stage
        group = b_base + config.stages * b_stage
        partials = (config.split_k - 1) * config.block_m * config.block_n
        end = max(config.split_k * group, partials)
        return SharedLayout(a_row, b_row, a_stage, b_stage, b_base, group, partials, end)


def _k_tile_multiplier(config: TileConfig, dtype: np.dtype):
    """Device function ``multiply(acc, a_frag, b_frag, smem, a_tile, b_tile)``: the FMAs of
    one k-tile, BLOCK_K outer products written out (see :func:`unrolled`)."""
    vec = VECTOR_BYTES // dtype.itemsize
    THREAD_M, THREAD_N = config.thread_m, config.thread_n
    layout = SharedLayout.of(config, dtype)
    A_ROW, B_ROW = layout.a_row, layout.b_row
    # A thread's fragment: THREAD_M // vec runs of vec rows, SPAN_M apart (likewise n).
    SPAN_M, SPAN_N = config.block_m // (THREAD_M // vec), config.block_n // (THREAD_N // vec)

    @cuda.jit(device=True)
    def k_step(acc, a_frag, b_frag, smem, a_tile, b_tile, kk):
        # Fragments: this thread's THREAD_M values of A(:, kk) and THREAD_N of B(kk, :).
        for v in range(THREAD_M // vec):
            load_vector(a_frag, v * vec, smem, a_tile + kk * A_ROW + v * SPAN_M)
        for w in range(THREAD_N // vec):
            load_vector(b_frag, w * vec, smem, b_tile + kk * B_ROW + w * SPAN_N)
        # Outer product into the register block.
        for i in range(THREAD_M):
            for j in range(THREAD_N):
                acc[i * THREAD_N + j] += a_frag[i] * b_frag[j]

    return unrolled(k_step, config.block_k, "acc, a_frag, b_frag, smem, a_tile, b_tile")


# Hardware barriers a CTA has (0 is syncthreads'); split-k groups take 1 to split_k.
BARRIERS = 16


def _group_barrier(config: TileConfig):
    """Device function: the barrier of the k loop, which guards one thread group's own
    buffers. With split-k, the group's alone where it is whole warps (one warp: the warp's
    barrier; more: a hardware barrier per group), so the CTA's groups do not wait on one
    another every k-tile; otherwise the CTA's."""
    THREADS = config.threads
    if THREADS == WARP and config.split_k > 1:
        return warp_barrier
    if config.split_k == 1 or THREADS % WARP or config.split_k >= BARRIERS:
        return _cta_barrier

    @cuda.jit(device=True)
    def group_barrier():
        named_barrier(1 + cuda.threadIdx.x // THREADS, THREADS)

    return group_barrier


@cuda.jit(device=True)
def _cta_barrier():
    cuda.syncthreads()


@functools.cache
def mainloop(
    config: TileConfig, dtype: np.dtype, a_mode: tuple, b_mode: tuple, interior: bool = False
):
    """``(thread_tile, accumulate, a_registers, b_registers)``: a CTA's k loop, shared by
    every kernel that multiplies tiles (``tiled`` here, the fused triple product in
    ``triple``). ``a_registers``/``b_registers``: the lengths of the per-thread staging
    arrays ``a_regs``/``b_regs`` that the caller declares and passes to ``accumulate``.

    ``thread_tile(tid) -> (thread_row, thread_col)``: where this thread's register
    block sits in the CTA tile, in units of 16-byte vectors.

    ``accumulate(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, a, a0, stride_am,
    stride_ak, b, b0, stride_bk, stride_bn, m_left, n_left, K, k_tiles, thread_row,
    thread_col)`` sets ``acc`` to this thread's block of A-tile @ B-tile, where the A tile
    is ``a[a0 + m * stride_am + k * stride_ak]`` for m < min(BLOCK_M, m_left), k < K
    (likewise B from ``b0``, with n < min(BLOCK_N, n_left)), in ``k_tiles`` k-tiles (at
    least cdiv(K, BLOCK_K); those past K, and a K <= 0, add zeros). ``tid`` is the thread's
    index in its group and ``base`` the group's first element of ``smem`` (0 and
    ``threadIdx.x`` without split-k: :func:`split_k_parts`). Starts with a barrier of the
    whole CTA, so every group must run the same ``k_tiles``; it may run again on the same
    shared memory.

    ``interior``: the tiles lie inside A and B and K = k_tiles * BLOCK_K (``whole_tiles``).
    No bound is tested, and the loop has no branch but its back edge: where the copies ahead
    would pass the last k-tile they copy the last one again into a buffer no one reads
    (cheaper than the tests), and the loop ends by waiting for those copies.
    """
    config.check(dtype)
    vec = VECTOR_BYTES // dtype.itemsize
    BLOCK_M, BLOCK_N, BLOCK_K = config.block_m, config.block_n, config.block_k
    THREAD_M, THREAD_N, STAGES = config.thread_m, config.thread_n, config.stages
    WARP_N, WARP_M = _warp_shape(config)
    WARPS_N = config.threads_n // WARP_N
    layout = SharedLayout.of(config, dtype)
    A_ROW, B_ROW, A_STAGE, B_STAGE = layout.a_row, layout.b_row, layout.a_stage, layout.b_stage
    B_BASE = layout.b_base
    multiply_k_tile = _k_tile_multiplier(config, dtype)
    A_STAGED, first_a, load_a, put_a, A_STEP_K, A_STEP_M, A_REGS = _operand_loader(
        config, dtype, BLOCK_M, a_mode, interior
    )
    B_STAGED, first_b, load_b, put_b, B_STEP_K, B_STEP_N, B_REGS = _operand_loader(
        config, dtype, BLOCK_N, b_mode, interior
    )
    wait_for_oldest = cp_async_wait(STAGES - 2)
    wait_for_all = cp_async_wait(0)
    k_tile_barrier = _group_barrier(config)

    @cuda.jit(device=True)
    def thread_tile(tid):
        warp = tid // (WARP_M * WARP_N)
        lane = tid % (WARP_M * WARP_N)
        return (
            (warp // WARPS_N) * WARP_M + lane // WARP_N,
            (warp % WARPS_N) * WARP_N + lane % WARP_N,
        )

    @cuda.jit(device=True)
    def accumulate(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, a, a0, stride_am,
                   stride_ak, b, b0, stride_bk, stride_bn, m_left, n_left, K, k_tiles, thread_row,
                   thread_col):  # fmt: skip
        for i in range(THREAD_M):  # nested: NVVM unrolls short loops, and a rolled loop
            for j in range(THREAD_N):  # would index acc at run time, forcing it out of registers
                acc[i * THREAD_N + j] = 0
        # Every thread is done with the shared buffers of any previous use.
        cuda.syncthreads()

        # -- this thread's first copy of each operand tile, at k = 0 ------------------------
        a_k, a_m = first_a(tid)
        a_src = a0 + a_k * stride_ak + a_m * stride_am
        a_step = A_STEP_K * stride_ak + A_STEP_M * stride_am
        a_dst = base + a_k * A_ROW + a_m
        a_x_left = m_left - a_m
        b_k, b_n = first_b(tid)
        b_src = b0 + b_k * stride_bk + b_n * stride_bn
        b_step = B_STEP_K * stride_bk + B_STEP_N * stride_bn
        b_dst = base + B_BASE + b_k * B_ROW + b_n
        b_x_left = n_left - b_n

        # -- prologue: start copying the first STAGES - 1 k-tiles -------------------------
        # (register-staged operands: k-tile 0 now, each later one a tile ahead, below)
        if A_STAGED:
            load_a(a_regs, a, a_src, a_step, a_x_left, K - a_k)
            put_a(smem, a_dst, a_regs)
        if B_STAGED:
            load_b(b_regs, b, b_src, b_step, b_x_left, K - b_k)
            put_b(smem, b_dst, b_regs)
        for s in range(STAGES - 1):
            if s < k_tiles:
                k0 = s * BLOCK_K
                if not A_STAGED:
                    load_a(
                        smem,
                        s * A_STAGE + a_dst,
                        a,
                        a_src + k0 * stride_ak,
                        a_step,
                        a_x_left,
                        K - k0 - a_k,
                    )
                if not B_STAGED:
                    load_b(
                        smem,
                        s * B_STAGE + b_dst,
                        b,
                        b_src + k0 * stride_bk,
                        b_step,
                        b_x_left,
                        K - k0 - b_k,
                    )
            cp_async_commit()  # one group per stage, empty or not, keeps the count simple

        # -- main loop: wait for k-tile t, start k-tile t + STAGES - 1, multiply k-tile t -----
        stage = 0  # = t % STAGES, kept as a counter (a modulo by 3 costs ~20 instructions)
        last_tile = k_tiles - 1
        for t in range(k_tiles):
            wait_for_oldest()
            # Makes every thread's copies of tile t visible, and guarantees that all
            # threads finished tile t - 1, whose buffer the next copies overwrite.
            k_tile_barrier()
            ahead = t + STAGES - 1
            if interior or ahead < k_tiles:  # interior: past the end, the last tile again
                ahead_stage = stage - 1 if stage > 0 else STAGES - 1  # = ahead % STAGES
                k0 = min(ahead, last_tile) * BLOCK_K
                if not A_STAGED:
                    load_a(
                        smem,
                        ahead_stage * A_STAGE + a_dst,
                        a,
                        a_src + k0 * stride_ak,
                        a_step,
                        a_x_left,
                        K - k0 - a_k,
                    )
                if not B_STAGED:
                    load_b(
                        smem,
                        ahead_stage * B_STAGE + b_dst,
                        b,
                        b_src + k0 * stride_bk,
                        b_step,
                        b_x_left,
                        K - k0 - b_k,
                    )
            cp_async_commit()
            # Register-staged operands: load k-tile t + 1 now, store it after the FMAs.
            next_k0 = min(t + 1, last_tile) * BLOCK_K
            more = interior or t + 1 < k_tiles
            if A_STAGED and more:
                load_a(a_regs, a, a_src + next_k0, a_step, a_x_left, K - next_k0 - a_k)
            if B_STAGED and more:
                load_b(b_regs, b, b_src + next_k0, b_step, b_x_left, K - next_k0 - b_k)
            a_tile = base + stage * A_STAGE + thread_row * vec
            b_tile = base + B_BASE + stage * B_STAGE + thread_col * vec
            multiply_k_tile(acc, a_frag, b_frag, smem, a_tile, b_tile)
            stage = stage + 1 if stage < STAGES - 1 else 0
            # The next stage's buffers were last read in iteration t + 1 - STAGES, which every
            # thread finished before this iteration's barrier.
            if A_STAGED and more:
                put_a(smem, stage * A_STAGE + a_dst, a_regs)
            if B_STAGED and more:
                put_b(smem, stage * B_STAGE + b_dst, b_regs)
        if interior:
            wait_for_all()  # the reloads of the last tile land before the buffers are reused

    return thread_tile, accumulate, A_REGS, B_REGS


@functools.cache
def split_k_parts(config: TileConfig, dtype: np.dtype):
    """``(group_of, k_slice, sum_partials)``: the device functions of split-k inside a CTA.

    - ``group_of(cta_tid) -> (group, tid, base)``: a thread's group, its index in the
      group and the group's first element of shared memory (its own pipeline buffers);
    - ``k_slice(K, group) -> (k0, k_len, k_tiles)``: the group's slice of the k range,
      ``k_len`` elements from ``k0`` (<= 0 for a group past K), in ``k_tiles`` k-tiles,
      the same number for every group (``mainloop``'s barriers are the whole CTA's);
    - ``sum_partials(acc, smem, tid, group)``: after the k loops, group 0's ``acc``
      becomes the sum of every group's, added in group order (deterministic). Partial
      tiles pass through shared memory as 16-byte vectors, consecutive threads at
      consecutive vectors (the vector helpers also skip the negative-index test that plain
      indexing compiles to: ~5 integer instructions per element, 231 instructions for each
      partial tile's 32 additions at N = 512 in the fused triple product).
    """
    THREADS, SPLIT, BLOCK_K = config.threads, config.split_k, config.block_k
    ACC_SIZE = config.thread_m * config.thread_n
    VEC = VECTOR_BYTES // dtype.itemsize
    SCALAR = dtype.type
    GROUP = SharedLayout.of(config, dtype).group
    SLOT = THREADS * ACC_SIZE  # one group's partial tile

    @cuda.jit(device=True)
    def group_of(cta_tid):
        if SPLIT == 1:  # known when compiling: no division, and base folds into addresses
            return 0, cta_tid, 0
        group = cta_tid // THREADS
        return group, cta_tid - group * THREADS, group * GROUP

    @cuda.jit(device=True)
    def k_slice(K, group):
        k_tiles = ((K + BLOCK_K - 1) // BLOCK_K + SPLIT - 1) // SPLIT
        k0 = group * k_tiles * BLOCK_K
        return k0, min(k_tiles * BLOCK_K, K - k0), k_tiles

    @cuda.jit(device=True)
    def sum_partials(acc, smem, tid, group):
        cuda.syncthreads()  # every group is done with its pipeline buffers, which this reuses
        if group > 0:
            slot = (group - 1) * SLOT + tid * VEC
            for v in range(ACC_SIZE // VEC):
                store_vector(smem, slot + v * THREADS * VEC, acc, v * VEC)
        cuda.syncthreads()
        if group == 0:
            part = cuda.local.array(VEC, SCALAR)
            for g in range(SPLIT - 1):
                slot = g * SLOT + tid * VEC
                for v in range(ACC_SIZE // VEC):
                    load_vector(part, 0, smem, slot + v * THREADS * VEC)
                    for e in range(VEC):
                        acc[v * VEC + e] += part[e]

    return group_of, k_slice, sum_partials


class TileFunctions(NamedTuple):
    """The device functions (and staging-register counts) of one C tile: see
    :func:`tile_computer`."""

    thread_tile: object
    group_of: object
    sum_tile: object
    store_tile: object
    compute_tile: object
    a_registers: int
    b_registers: int


@functools.cache
def tile_computer(
    config: TileConfig,
    dtype: np.dtype,
    a_mode: tuple,
    b_mode: tuple,
    c_mode: tuple,
    interior: bool = False,
) -> TileFunctions:
    """One C tile, from the k loop to the store, as every kernel that multiplies tiles runs it
    (the tiled kernel here, both products of the fused triple product in ``triple``).

    ``sum_tile(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group, a, a0, stride_am,
    stride_ak, b, b0, stride_bk, stride_bn, M, N, K, m0, n0, thread_row, thread_col)`` leaves
    in group 0's ``acc`` the BLOCK_M x BLOCK_N tile at (m0, n0) of A @ B over k < K, where
    A(m, k) is ``a[a0 + m * stride_am + k * stride_ak]`` (likewise B from ``b0``; rows and
    columns past M x N are zeros): each thread group multiplies its slice of k
    (:func:`split_k_parts`) and group 0 sums the slices. ``store_tile(c, c0, stride_cm,
    stride_cn, M, N, acc, m0, n0, thread_row, thread_col)`` writes group 0's ``acc`` into
    C[m0:, n0:] (C(m, n) is ``c[c0 + m * stride_cm + n * stride_cn]``), clipped to M x N.
    ``compute_tile(..., a, a0, stride_am, stride_ak, b, b0, stride_bk, stride_bn, c, c0,
    stride_cm, stride_cn, M, N, K, m0, n0, thread_row, thread_col)`` is both.
    ``thread_tile``, ``group_of`` and the register counts: as in :func:`mainloop` and
    :func:`split_k_parts`. ``interior``: for products whose tiles all lie inside the matrices
    (:func:`whole_tiles`), compiled without edge code.
    """
    vec = VECTOR_BYTES // dtype.itemsize
    SPLIT = config.split_k
    thread_tile, accumulate, A_REGS, B_REGS = mainloop(config, dtype, a_mode, b_mode, interior)
    group_of, k_slice, sum_partials = split_k_parts(config, dtype)
    store_c = tile_storer(config, dtype, c_mode, interior)

    @cuda.jit(device=True)
    def sum_tile(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group, a, a0, stride_am,
                 stride_ak, b, b0, stride_bk, stride_bn, M, N, K, m0, n0, thread_row,
                 thread_col):  # fmt: skip
        # -- k loop: acc = A[m0:, k0:] @ B[k0:, n0:] (this group's slice of k) ----------------
        k0, k_len, k_tiles = k_slice(K, group)
        accumulate(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid,
                   a, a0 + m0 * stride_am + k0 * stride_ak, stride_am, stride_ak,
                   b, b0 + n0 * stride_bn + k0 * stride_bk, stride_bk, stride_bn,
                   M - m0, N - n0, k_len, k_tiles, thread_row, thread_col)  # fmt: skip
        if SPLIT > 1:
            sum_partials(acc, smem, tid, group)

    @cuda.jit(device=True)
    def store_tile(c, c0, stride_cm, stride_cn, M, N, acc, m0, n0, thread_row, thread_col):
        store_c(
            c, c0, stride_cm, stride_cn, M, N, acc, m0 + thread_row * vec, n0 + thread_col * vec
        )

    @cuda.jit(device=True)
    def compute_tile(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group, a, a0,
                     stride_am, stride_ak, b, b0, stride_bk, stride_bn, c, c0, stride_cm,
                     stride_cn, M, N, K, m0, n0, thread_row, thread_col):  # fmt: skip
        sum_tile(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group, a, a0, stride_am,
                 stride_ak, b, b0, stride_bk, stride_bn, M, N, K, m0, n0, thread_row,
                 thread_col)  # fmt: skip
        # -- epilogue: registers -> C (group 0) ---------------------------------------------
        if group == 0:
            store_tile(c, c0, stride_cm, stride_cn, M, N, acc, m0, n0, thread_row, thread_col)

    return TileFunctions(thread_tile, group_of, sum_tile, store_tile, compute_tile, A_REGS, B_REGS)


def overlap_launches(programmatic: bool):
    """Device function that every kernel launched with programmatic stream serialization
    (``launch.programmatic_launch``) runs before it reads or writes memory: wait until the
    launch ahead on the stream has completed and its writes are visible. What needs no memory
    comes before it and runs while the launch ahead finishes: the tiled kernel decodes its tile
    there, and the fused triple product takes its ticket (``triple_product``). With
    ``programmatic`` False it does nothing (and compiles to nothing).

    The kernel never releases its dependents early (``griddepcontrol.launch_dependents``): the
    next launch starts as this one's last CTAs exit, which is where the gain is; released
    earlier, launches queue up on the SMs and crowd the running one
    (``docs/design/launch-and-timing.md``)."""

    @cuda.jit(device=True)
    def overlap():
        if programmatic:
            await_prior_grids()

    return overlap


@functools.cache
def _kernel(
    config: TileConfig,
    dtype: np.dtype,
    a_mode: tuple,
    b_mode: tuple,
    c_mode: tuple,
    interior: bool,
    programmatic: bool,
):
    """Compile-time specialisation of the tiled kernel for one config, dtype, layout,
    ``interior`` (:func:`whole_tiles`) and ``programmatic`` (:func:`overlap_launches`)."""
    BLOCK_M, BLOCK_N, GROUP_M = config.block_m, config.block_n, config.group_m
    THREAD_M, THREAD_N = config.thread_m, config.thread_n
    ACC_SIZE = THREAD_M * THREAD_N  # shapes of local arrays must be literal constants
    SCALAR = dtype.type  # the scalar class, e.g. np.float32
    tile = tile_computer(config, dtype, a_mode, b_mode, c_mode, interior)
    thread_tile, group_of, compute_tile = tile.thread_tile, tile.group_of, tile.compute_tile
    A_REGS, B_REGS = tile.a_registers, tile.b_registers
    sum_tile, store_tile = tile.sum_tile, tile.store_tile
    tile_of_device = cuda.jit(device=True)(tile_of)
    overlap = overlap_launches(programmatic)
    K_CTAS, K_STEP = config.k_ctas, config.block_k * config.split_k
    settle = settler(ACC_SIZE, config.threads)

    @kernel_jit(config.cta_threads)
    def tiled_kernel(a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn,
                     c, stride_cb, stride_cm, stride_cn, M, N, K, partials, sync):  # fmt: skip
        smem = cuda.shared.array(0, dtype)
        acc = cuda.local.array(ACC_SIZE, SCALAR)
        a_frag = cuda.local.array(THREAD_M, SCALAR)
        b_frag = cuda.local.array(THREAD_N, SCALAR)
        a_regs = cuda.local.array(A_REGS, SCALAR)
        b_regs = cuda.local.array(B_REGS, SCALAR)

        # -- which C tile (grouped order), and where this thread sits in it ----------------
        grid_m = (M + BLOCK_M - 1) // BLOCK_M
        grid_n = (N + BLOCK_N - 1) // BLOCK_N
        pid_m, pid_n = tile_of_device(cuda.blockIdx.x, grid_m, grid_n, GROUP_M)
        pid_batch = cuda.blockIdx.y
        group, tid, base = group_of(cuda.threadIdx.x)
        thread_row, thread_col = thread_tile(tid)
        # Only now wait for the launch ahead (before any memory is touched): the arithmetic
        # above runs while it finishes.
        overlap()

        # -- C tile = A[m0:, :] @ B[:, n0:], of this product of the batch ----------------------
        if K_CTAS == 1:
            compute_tile(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group,
                         a, pid_batch * stride_ab, stride_am, stride_ak,
                         b, pid_batch * stride_bb, stride_bk, stride_bn,
                         c, pid_batch * stride_cb, stride_cm, stride_cn, M, N, K,
                         pid_m * BLOCK_M, pid_n * BLOCK_N, thread_row, thread_col)  # fmt: skip
            return

        # -- split-k: this CTA's range of k (whole k steps, never empty: the plan's
        # working_k_ctas), the last CTA of the tile adds the ranges and stores the tile
        per_cta = ((K + K_STEP - 1) // K_STEP + K_CTAS - 1) // K_CTAS * K_STEP
        k_first = cuda.blockIdx.z * per_cta
        sum_tile(acc, a_frag, b_frag, a_regs, b_regs, smem, base, tid, group,
                 a, pid_batch * stride_ab + k_first * stride_ak, stride_am, stride_ak,
                 b, pid_batch * stride_bb + k_first * stride_bk, stride_bk, stride_bn,
                 M, N, min(per_cta, K - k_first), pid_m * BLOCK_M, pid_n * BLOCK_N, thread_row,
                 thread_col)  # fmt: skip
        tile = pid_batch * cuda.gridDim.x + cuda.blockIdx.x
        if settle(acc, partials, sync, tile, cuda.blockIdx.z, K_CTAS, tid, cuda.threadIdx.x,
                  group == 0) and group == 0:  # fmt: skip
            store_tile(c, pid_batch * stride_cb, stride_cm, stride_cn, M, N, acc,
                       pid_m * BLOCK_M, pid_n * BLOCK_N, thread_row, thread_col)  # fmt: skip

    return tiled_kernel


def with_k_ctas(config: TileConfig, M: int, N: int, K: int, batch: int,
                ctas_per_sm: int = 1) -> TileConfig:  # fmt: skip
    """``config`` with as many CTAs per tile as :func:`split_k.choose_k_ctas` gives an
    M x N x K product (``batch`` of them) under it for one wave of ``ctas_per_sm`` CTAs per SM
    on the current device (one for the tuned tiles, which take most of an SM's registers)."""
    if SIMULATED:
        return config
    step_k = config.block_k * config.split_k
    return split_into_wave(config, M, N, K, batch, step_k, ctas_per_sm * multiprocessors())


def plan_tiled(config: TileConfig, a: MatrixDesc, b: MatrixDesc, c: MatrixDesc,
               scratch=None) -> KernelLaunch:  # fmt: skip
    """The tiled kernel's launch on validated operands: C (M x N) = A (M x K) @ B (K x N), for
    each of ``c.batch`` products. With ``config.k_ctas`` > 1, that many CTAs share each tile's
    k loop (``kernels.split_k``; fewer where fewer get a range: ``split_k.working_k_ctas``):
    ``scratch(name, shape, dtype)`` gives the descriptors of their ``"partials"`` (the
    operands' dtype) and of the uint32 counters ``"sync"`` (zero at launch; the kernel leaves
    them zero)."""
    config.check(a.dtype)
    (M, K), N = a.shape, b.shape[1]
    config = working_config(config, cdiv(K, config.block_k * config.split_k), scratch)
    shared = config.shared_bytes(a.dtype)
    if shared > STATIC_SHARED_LIMIT and shared > (limit := shared_memory_limit()):
        raise ValueError(
            f"tile config {config.label()} needs {shared} bytes of shared memory per "
            f"block for {a.dtype}; this device allows {limit}"
        )
    programmatic = programmatic_launch()
    kernel = _kernel(
        config, a.dtype, *operand_modes(a, b, c), whole_tiles(config, M, N, K), programmatic
    )
    grid = (cdiv(M, config.block_m) * cdiv(N, config.block_n), c.batch, config.k_ctas)
    split = split_buffers(config.k_ctas, grid[0] * grid[1],
                          config.threads * config.thread_m * config.thread_n, a.dtype,
                          scratch)  # fmt: skip
    return kernel_launch(kernel, grid, config.cta_threads, shared,
                         (a, a.batch_stride, *a.strides, b, b.batch_stride, *b.strides,
                          c, c.batch_stride, *c.strides, M, N, K, *split),
                         programmatic)  # fmt: skip


def kernel_resources(config: TileConfig, a: MatrixDesc, b: MatrixDesc, c: MatrixDesc) -> dict:
    """Registers per thread, local memory per thread (spills and stack; 0 is the goal) and
    shared memory per block of the compiled specialisation for these operands (on a GPU;
    compiles it if needed)."""
    (M, K), N = a.shape, b.shape[1]
    kernel = _kernel(
        config,
        a.dtype,
        *operand_modes(a, b, c),
        whole_tiles(config, M, N, K),
        programmatic_launch(),
    )
    array, index = kernel.typeof_pyval(np.empty(0, a.dtype)), kernel.typeof_pyval(np.int64(0))
    compiled = kernel.compile((array, index, index, index) * 3 + (index,) * 5)
    return {
        "registers": compiled.regs_per_thread,
        "local_bytes": compiled.local_mem_per_thread,
        "shared_bytes": config.shared_bytes(a.dtype),
    }
