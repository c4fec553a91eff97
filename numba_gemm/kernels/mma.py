"""Tensor-core GEMM on ``mma.sync``: bf16, f16, TF32 and float32 emulated by split operands.

Shapes: C (M x N) = A (M x K) @ B (K x N), each a 1-D buffer plus element strides, as in
``tiled``; any M, N, K >= 1; a batch along grid y. Operands are bf16 or f16 (passed as their
uint16 bits) or float32; C is float32, or bf16/f16 bits rounded from the float32 accumulator.
The precision preset (``numba_gemm.precision``) decides the multiply: the 16-bit operands as
they are, float32 ones rounded to bf16 or TF32, or split into 2 or 3 parts whose partial
products add up to (nearly) float32 accuracy.

Algorithm (one CTA of ``warps_m x warps_n`` warps per BLOCK_M x BLOCK_N tile of C):

1. *Which tile*: program id -> ``(pid_m, pid_n)`` through seed 004's grouped order
   (``ordering.tile_of``); grid y is the product of the batch.
2. *Pipeline*: ``STAGES`` shared-memory buffers of one BLOCK_K slice of A and of B, filled
   by ``cp.async`` (16-, 8- or 4-byte vectors along the operand's contiguous axis, as wide as
   its runs align, zero-filled past the matrix); ``STAGES - 1`` slices are in flight while
   the CTA multiplies the oldest. A tile is stored as the operand lies in memory:
   k-contiguous operands as ``[m or n][k]``, m/n-contiguous ones as ``[k][m or n]``, rows
   padded so that fragment loads hit distinct banks. Operands with neither axis contiguous
   (or 2-byte-aligned runs) are copied element by element.
3. *Warp tiles*: each warp owns a (BLOCK_M / warps_m) x (BLOCK_N / warps_n) piece of C as
   float32 accumulators in registers, in the ``mma`` layout (``fragments.mma``). Per k step
   (16 for bf16/f16, 8 for TF32) it loads its B blocks (16 n x k each; ``ldmatrix`` for
   16-bit operands, shared loads for float32), prepares them (as they are, rounded, or split
   into parts), then per A block (16 m x k) the same, and issues one ``mma.sync`` per partial
   product, A block and 8 columns. Split presets add each k-tile's mma accumulators into
   float32 totals on the FMA units (``PROMOTE``, below).
4. *Epilogue*: each lane writes its accumulators to C, converted to C's dtype, skipping
   elements outside M x N.

Constraints (``MmaConfig.check``): warp tiles of whole 16 x 16 blocks, BLOCK_K a multiple of
16, tiles that split into whole 16-byte copies per thread.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

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
    shared_memory_limit,
)
from ..ordering import tile_of
from ..precision import BFLOAT16, FLOAT16, FLOAT32, Preset
from .common import VECTOR_BYTES, WARP, check_field_range, int_fields, kernel_jit, unrolled
from .fragments import K_STEP, fragment_loader, fragment_words, mma, output_converter, splitter
from .ptx import cp_async, cp_async_commit, cp_async_wait
from .split_k import check_k_ctas, settler, split_buffers, split_into_wave, working_config

__all__ = [
    "MmaConfig",
    "DEFAULT_MMA_CONFIGS",
    "SIMULATOR_MMA_CONFIG",
    "default_mma_config",
    "shape_mma_config",
    "NARROW_MMA_CONFIG",
    "SHORT_K_MMA_CONFIG",
    "operand_mode",
    "plan_mma",
    "accumulators",
    "storage_dtype",
    "storage_view",
    "tile_loader",
    "linear_slot",
    "accumulator_zeroer",
    "correction_adder",
    "tile_origin",
    "work_origin",
]

COPY_BYTES = (VECTOR_BYTES, 8, 4)  # the widths of cp.async copies, widest first
BLOCK = 16  # rows of a fragment block (m of A, n of B)
UINT16 = np.dtype(np.uint16)


@dataclass(frozen=True)
class MmaConfig:
    """One ``mma.sync`` kernel configuration (compile-time constants).

    ``block_m x block_n``: the C tile of a CTA; ``block_k``: the k slice per pipeline stage;
    ``warps_m x warps_n``: the CTA's warps, each owning a (block_m / warps_m) x
    (block_n / warps_n) warp tile; ``stages``: shared-memory buffers (>= 2); ``group_m``:
    the grouped order's group height; ``k_ctas``: CTAs per C tile, each over its own range of
    k, the last adding them (``kernels.split_k``).
    """

    block_m: int = 128
    block_n: int = 128
    block_k: int = 32
    warps_m: int = 2
    warps_n: int = 2
    stages: int = 3
    group_m: int = 8
    k_ctas: int = 1

    def __post_init__(self):
        int_fields(self)  # values, which depend on the operands' storage, in check()

    @property
    def threads(self) -> int:
        return WARP * self.warps_m * self.warps_n

    @property
    def warp_m(self) -> int:
        return self.block_m // self.warps_m

    @property
    def warp_n(self) -> int:
        return self.block_n // self.warps_n

    def check(self, storage) -> None:
        """``ValueError`` saying which constraint this config breaks for operands stored as
        ``storage`` (uint16 or float32)."""
        check_field_range(self)
        check_k_ctas(self)
        for tile, warps in (("block_m", "warps_m"), ("block_n", "warps_n")):
            extent, count = getattr(self, tile), getattr(self, warps)
            if extent % (count * BLOCK):
                raise ValueError(
                    f"MmaConfig.{tile} = {extent} must be a multiple of 16 x {warps} = "
                    f"{16 * count}: each warp's tile is whole 16 x 16 blocks"
                )
        if self.block_k % BLOCK:
            raise ValueError(f"MmaConfig.block_k = {self.block_k} must be a multiple of 16")
        if self.threads > 1024:
            raise ValueError(f"MmaConfig has {self.threads} threads per CTA; CUDA allows 1024")
        vec = VECTOR_BYTES // np.dtype(storage).itemsize
        for tile in (self.block_m, self.block_n):
            if (tile * self.block_k) % (vec * self.threads):
                raise ValueError(
                    f"a {tile} x {self.block_k} tile must split into whole 16-byte copies "
                    f"for each of the {self.threads} threads"
                )
        if self.stages < 2:
            raise ValueError("MmaConfig.stages must be >= 2 so that loads overlap compute")

    def shared_bytes(self, storage, a_axis: str = "k", b_axis: str = "k", operand="bf16") -> int:
        """Dynamic shared memory per CTA: ``stages`` padded tiles of A and B."""
        a = _TileShape.of(self, storage, operand, self.block_m, a_axis)
        b = _TileShape.of(self, storage, operand, self.block_n, b_axis)
        return self.stages * (a.size + b.size) * np.dtype(storage).itemsize

    def label(self) -> str:
        return (
            f"mma {self.block_m}x{self.block_n}x{self.block_k}/w{self.warps_m}x{self.warps_n}"
            f"/s{self.stages}/g{self.group_m}" + (f"/kc{self.k_ctas}" if self.k_ctas > 1 else "")
        )


# Default tiles, by operand storage and whether the preset splits operands: 16-bit operands in
# 128 x 128 C tiles of four 64 x 64 warp tiles (128 accumulators per lane, each fragment used
# 4-8 times); float32 operands, which take twice the fragment registers, in 32 x 64 warp tiles,
# and 32 x 32 where the split parts and the promoted totals need registers too (the largest
# tiles that compile with no spills at 255 registers).
DEFAULT_MMA_CONFIGS = {
    (UINT16, False): MmaConfig(128, 128, 32, 2, 2, 4, 8),
    (FLOAT32, False): MmaConfig(128, 128, 32, 4, 2, 3, 8),
    (FLOAT32, True): MmaConfig(128, 64, 32, 4, 2, 3, 8),
}


# On the simulator, whose threads are Python threads: one warp's worth of small tiles, so that a
# simulated product takes seconds, not minutes (the kernel code is the same).
SIMULATOR_MMA_CONFIG = MmaConfig(32, 32, 16, 2, 1, 2, 1)


# Products whose shape the wgmma tiles (64 columns and a 64-k slice at the least) fit badly run
# on mma where "auto" chooses (``numba_gemm.api.tensor_core_algorithm``), in tiles of their
# shape: a narrow output (N <= NARROW_N, a model's 10-class layer) in 32 x 16 tiles, eight times
# the CTAs of 64 x 64 and no empty columns to load, with 64-k slices four deep so that each CTA's
# short k loop has few, long steps; a short k (K <= SHORT_K) in 64 x 32 tiles and one 32-k slice.
# At 1024 x 10 x 512, 512 x 10 x 1024 and 1024 x 512 x 10 bf16 on an H200: 5.2, 7.8 and 4.6 us
# against wgmma's 55, 107 and 19 (cuBLAS: 5.7, 5.5, 4.0).
NARROW_N, SHORT_K = 16, 32
NARROW_MMA_CONFIG = MmaConfig(32, 16, 64, 2, 1, 4, 8)
SHORT_K_MMA_CONFIG = MmaConfig(64, 32, 32, 2, 2, 2, 8)


def shape_mma_config(n: int, k: int) -> MmaConfig | None:
    """The mma tiles of a product with ``n`` columns and inner size ``k`` that the wgmma tiles
    fit badly (:data:`NARROW_MMA_CONFIG`, :data:`SHORT_K_MMA_CONFIG`), else None."""
    if n <= NARROW_N:
        return NARROW_MMA_CONFIG
    return SHORT_K_MMA_CONFIG if k <= SHORT_K else None


def default_mma_config(storage, preset: Preset, M: int, N: int, K: int, batch: int = 1,
                       split: bool = True) -> MmaConfig:  # fmt: skip
    """The tiles ``plan_mma`` uses for an M x N x K product (``batch`` of them) when the
    caller gives none: :data:`SIMULATOR_MMA_CONFIG` on the simulator, else the tiles of its
    shape (:func:`shape_mma_config`) or the default for its storage and preset; where
    ``split`` (the caller has scratch for it) with as many CTAs per tile as make one wave of
    one CTA per SM (:func:`split_k.choose_k_ctas`), as the wgmma and tiled defaults do."""
    if SIMULATED:
        return SIMULATOR_MMA_CONFIG
    config = shape_mma_config(N, K) or DEFAULT_MMA_CONFIGS[np.dtype(storage), preset.parts > 1]
    if not split:
        return config
    return split_into_wave(config, M, N, K, batch, config.block_k, multiprocessors())


def storage_dtype(dtype) -> np.dtype:
    """How the kernels hold operands of ``dtype``: 16-bit floats as their uint16 bits (Numba
    has no bfloat16), float32 as itself."""
    dtype = np.dtype(dtype)
    return UINT16 if dtype in (BFLOAT16, FLOAT16) else dtype


@dataclass(frozen=True)
class _TileShape:
    """One operand tile in shared memory: ``rows`` of ``row`` elements (``row`` includes the
    padding); element (x, k) sits at ``x * stride_x + k * stride_k``."""

    rows: int
    row: int
    stride_x: int
    stride_k: int

    @property
    def size(self) -> int:
        return self.rows * self.row

    @staticmethod
    def of(config: MmaConfig, storage, operand: str, extent_x: int, axis: str) -> _TileShape:
        """The tile of ``extent_x`` rows (m or n) by ``block_k`` stored ``axis``-contiguous
        (``"k"``: ``[x][k]``; ``"x"``: ``[k][x]``), padded by :func:`_padding`."""
        pad = _padding(np.dtype(storage), operand, axis)
        if axis == "k":
            row = config.block_k + pad
            return _TileShape(extent_x, row, row, 1)
        row = extent_x + pad
        return _TileShape(config.block_k, row, 1, row)


def _padding(storage: np.dtype, operand: str, axis: str) -> int:
    """Elements added to each stored row so that a warp's fragment loads hit distinct banks.

    16-bit tiles: 16 bytes, so the 8 rows an ``ldmatrix`` phase reads (16 bytes each) start
    in 8 distinct 16-byte bank groups. Float32 tiles, loaded a float per lane: the 32 lanes
    read rows g < 8 and k t < 4 (TF32) or 2t, 2t + 1 (bf16 pairs); a row of 4 x odd floats
    spreads k-contiguous rows over distinct banks (and bf16 pairs of m/n-contiguous rows), a
    row of 8 x odd floats the TF32 m/n-contiguous ones. Rows stay multiples of 16 bytes.
    """
    if storage == UINT16:
        return 8
    if operand == "tf32" and axis == "x":
        return 8
    return 4


def _operand_axis(stride_x: int, stride_k: int, extent_x: int, extent_k: int) -> str:
    """``"k"`` where the operand's k axis is contiguous, ``"x"`` where its m (A) or n (B) axis
    is (for one element, whichever has stride 1), ``"k"`` (element copies) where neither is."""
    if stride_k == 1 and extent_k > 1:
        return "k"
    if stride_x == 1 and (extent_x > 1 or (extent_k == 1 and stride_k != 1)):
        return "x"
    return "k"


def operand_mode(desc: MatrixDesc, x_first: bool) -> tuple[str, int]:
    """(contiguous axis, bytes per ``cp.async`` copy: 16, 8 or 4, or 0 for element copies) of
    A (``x_first``: m is axis 0) or B. A copy of n bytes needs the axis contiguous and every
    run of it (the address, the other stride, the batch stride) n-byte aligned: rows of 10
    bf16 (20 bytes) take 4-byte copies, float32 with a contiguous axis at least 4-byte ones."""
    extents, strides = desc.shape, desc.strides
    if x_first:
        (extent_x, extent_k), (stride_x, stride_k) = extents, strides
    else:
        (extent_k, extent_x), (stride_k, stride_x) = extents, strides
    axis = _operand_axis(stride_x, stride_k, extent_x, extent_k)
    contiguous, other = (stride_k, stride_x) if axis == "k" else (stride_x, stride_k)
    itemsize = desc.dtype.itemsize
    for nbytes in COPY_BYTES:
        vec = nbytes // itemsize
        if (
            contiguous == 1
            and vec >= 1
            and desc.address % nbytes == 0
            and other % vec == 0
            and desc.batch_stride % vec == 0
        ):
            return axis, nbytes
    return axis, 0


def linear_slot(tile: _TileShape):
    """``slot(x, k)``: element (x, k)'s offset in a padded ``tile`` (a plain function, for
    :func:`tile_loader`)."""
    stride_x, stride_k = tile.stride_x, tile.stride_k  # ints: kernels cannot read a dataclass

    def slot(x, k):
        return x * stride_x + k * stride_k

    return slot


def tile_loader(threads: int, block_k: int, storage: np.dtype, extent_x: int, mode: tuple, slot):
    """Device function ``load(smem, dst, src, src0, stride_x, stride_k, x_left, k_left, tid)``:
    thread ``tid``'s copies (of ``threads``) of one operand tile,
    ``src[src0 + x * stride_x + k * stride_k]`` for x < ``extent_x``, k < ``block_k``, into
    ``smem[dst + slot(x, k)]`` (``slot``: a plain function of ints). Elements past ``x_left``
    rows or ``k_left`` columns are zeros. ``cp.async`` copies of ``mode``'s width (16, 8 or 4
    bytes) run along the contiguous axis; narrower ones where the tile does not split into
    copies that wide (below), element copies where ``mode`` allows none.

    Copy r of a thread is its first plus r whole stored rows (``threads`` copies fill
    ``row_step`` rows), so its addresses are the first's plus r constant steps: the k loop
    spends a few integer instructions per copy, not a position and a swizzle each.
    ``ValueError`` where 16-byte copies cannot split a tile that way (a row of copies wider
    than the CTA, or a slot that is not linear in rows, such as a swizzle period the step does
    not cover)."""
    axis, copy_bytes = mode
    along_k = axis == "k"
    for nbytes in COPY_BYTES:
        if nbytes > copy_bytes or nbytes < storage.itemsize:
            continue
        width = nbytes // storage.itemsize
        problem = _split_problem(threads, block_k, extent_x, along_k, width, slot)
        if problem is None:
            return _vector_loader(threads, block_k, extent_x, along_k, width, slot)
        if nbytes == VECTOR_BYTES:
            raise ValueError(problem)
    return _element_loader(threads, block_k, storage, extent_x, along_k, slot)


def _vector_split(threads: int, block_k: int, extent_x: int, along_k: bool, width: int):
    """(copies per thread, stored rows a CTA's copies fill, first(tid) -> (x, k)) of a tile cut
    into copies of ``width`` elements, consecutive threads on consecutive runs along the
    stored rows."""
    runs = (block_k if along_k else extent_x) // width  # copies per stored row

    def first(tid):
        """(x, k) of the thread's first copy."""
        row, column = tid // runs, (tid % runs) * width
        return (row, column) if along_k else (column, row)

    return extent_x * block_k // (width * threads), threads // runs, first


def _split_problem(threads: int, block_k: int, extent_x: int, along_k: bool, width: int, slot
                   ) -> str | None:  # fmt: skip
    """Why copies of ``width`` elements cannot fill the tile in constant steps (None: they
    can; see :func:`tile_loader`)."""
    runs = (block_k if along_k else extent_x) // width
    if threads % runs or (extent_x * block_k) % (width * threads):
        return (
            f"a {extent_x} x {block_k} tile stored {'k' if along_k else 'm/n'}-contiguous has "
            f"{runs} copies per row, which the CTA's {threads} threads cannot split evenly"
        )
    copies, row_step, first = _vector_split(threads, block_k, extent_x, along_k, width)
    step_x, step_k = (row_step, 0) if along_k else (0, row_step)
    slot_step = slot(step_x, step_k) - slot(0, 0)
    for tid in range(threads):
        x, k = first(tid)
        for r in range(copies):
            if slot(x + r * step_x, k + r * step_k) != slot(x, k) + r * slot_step:
                return (
                    f"the shared-memory layout of a {extent_x} x {block_k} tile is not linear "
                    f"in steps of {row_step} rows: use more threads per CTA or another tile"
                )
    return None


def _vector_loader(threads: int, block_k: int, extent_x: int, along_k: bool, width: int, slot):
    """:func:`tile_loader` with ``cp.async`` copies of ``width`` elements (a split that
    :func:`_split_problem` passed)."""
    copies, row_step, first = _vector_split(threads, block_k, extent_x, along_k, width)
    step_x, step_k = (row_step, 0) if along_k else (0, row_step)
    slot_step = slot(step_x, step_k) - slot(0, 0)
    copy = cp_async(width)
    if not SIMULATED:
        first, slot = cuda.jit(device=True)(first), cuda.jit(device=True)(slot)

    @cuda.jit(device=True)
    def load_vectors(smem, dst, src, src0, stride_x, stride_k, x_left, k_left, tid):
        x, k = first(tid)
        to, source = dst + slot(x, k), src0 + x * stride_x + k * stride_k
        source_step = step_x * stride_x + step_k * stride_k
        if x_left >= extent_x and k_left >= block_k:  # the whole tile inside: no bounds
            for r in range(copies):
                copy(smem, to + r * slot_step, src, source + r * source_step, width)
            return
        for r in range(copies):
            left = (k_left - k) if along_k else (x_left - x)  # along the run
            inside = (x + r * step_x < x_left) if along_k else (k + r * step_k < k_left)
            valid = min(max(left, 0), width) if inside else 0
            copy(smem, to + r * slot_step,
                 src, source + r * source_step if valid > 0 else 0, valid)  # fmt: skip

    return load_vectors


def _element_loader(threads: int, block_k: int, storage: np.dtype, extent_x: int, along_k: bool,
                    slot):  # fmt: skip
    """:func:`tile_loader` for operands with no usable contiguous axis: one element per copy,
    consecutive threads along the stored rows, each slot computed. A thread loads all its
    elements into registers before it stores any: the loads are then in flight together (a
    store to shared memory after each load would wait out one memory latency per element)."""
    runs = block_k if along_k else extent_x
    copies = extent_x * block_k // threads
    zero = storage.type(0)

    def position(tid, r):
        """(x, k) of copy r of thread ``tid``: consecutive threads along the stored rows."""
        v = tid + r * threads
        row, column = v // runs, v % runs
        return (row, column) if along_k else (column, row)

    if not SIMULATED:
        slot, position = cuda.jit(device=True)(slot), cuda.jit(device=True)(position)

    @cuda.jit(device=True)
    def load_elements(smem, dst, src, src0, stride_x, stride_k, x_left, k_left, tid):
        values = cuda.local.array(copies, storage)
        for r in range(copies):  # 1. every load, none waited for
            x, k = position(tid, r)
            values[r] = (
                src[src0 + x * stride_x + k * stride_k] if x < x_left and k < k_left else zero
            )
        for r in range(copies):  # 2. the stores, as the values arrive
            x, k = position(tid, r)
            smem[dst + slot(x, k)] = values[r]

    return load_elements


def tile_origin(block_m: int, block_n: int, group_m: int):
    """Device function ``origin(M, N, stride_ab, stride_am, stride_bb, stride_bn) -> (m0, n0,
    batch, a0, b0)``: :func:`work_origin`'s for this CTA's tile, grid x in the grouped order,
    its product of the batch grid y."""
    origin_of = work_origin(block_m, block_n, group_m)

    @cuda.jit(device=True)
    def origin(M, N, stride_ab, stride_am, stride_bb, stride_bn):
        return origin_of(cuda.blockIdx.x, cuda.blockIdx.y, M, N, stride_ab, stride_am,
                         stride_bb, stride_bn)  # fmt: skip

    return origin


def work_origin(block_m: int, block_n: int, group_m: int):
    """Device function ``origin_of(tile, batch, M, N, stride_ab, stride_am, stride_bb,
    stride_bn) -> (m0, n0, batch, a0, b0)``: the first row and column of tile ``tile`` (of
    ``block_m x block_n`` tiles of C, in seed 004's grouped order: ``ordering.tile_of``) of
    product ``batch``, and where its rows of A and its columns of B start (element offsets)."""
    tile_of_device = cuda.jit(device=True)(tile_of)

    @cuda.jit(device=True)
    def origin_of(tile, batch, M, N, stride_ab, stride_am, stride_bb, stride_bn):
        grid_m = (M + block_m - 1) // block_m
        grid_n = (N + block_n - 1) // block_n
        pid_m, pid_n = tile_of_device(tile, grid_m, grid_n, group_m)
        m0, n0 = pid_m * block_m, pid_n * block_n
        return m0, n0, batch, batch * stride_ab + m0 * stride_am, batch * stride_bb + n0 * stride_bn

    return origin_of


def accumulator_zeroer(size: int):
    """Device function ``zero(acc)``: ``acc[:size] = 0`` (``size`` a multiple of 4) as
    straight-line code, so that the accumulators keep literal indices and stay in registers."""

    @cuda.jit(device=True)
    def zero(acc, piece):
        for e in range(4):
            acc[piece * 4 + e] = 0.0

    return unrolled(zero, size // 4, "acc")


def correction_adder():
    """Device function ``add(total, corrections, piece)``: elements ``4 piece`` to ``4 piece + 3``
    of a split preset's correction products added into the totals of its hi x hi products,
    each where it is a number. An infinite operand element turns the corrections NaN (its
    remainder is inf - inf, and inf x 0 where it meets an exact part), never the hi x hi
    product itself: as XLA's and Triton's split algorithms, the total keeps the inf (or the
    NaN) that hi x hi gives, as NumPy does; a NaN operand leaves hi x hi NaN too."""

    @cuda.jit(device=True)
    def add(total, corrections, piece):
        for e in range(4):
            correction = corrections[piece * 4 + e]
            if correction == correction:
                total[piece * 4 + e] += correction

    return add


@functools.cache
def accumulators(config: MmaConfig) -> int:
    """Float32 accumulators per thread: a 16 x 8 block of the warp tile takes 4 per lane."""
    return (config.warp_m // BLOCK) * (config.warp_n // BLOCK) * 2 * 4


def _kernel(
    config: MmaConfig,
    preset: Preset,
    storage: np.dtype,
    out_dtype: np.dtype,
    a_mode: tuple,
    b_mode: tuple,
):
    """The kernel specialised for one config, preset, operand storage, output dtype and the
    operands' layouts."""
    BLOCK_M, BLOCK_N, BLOCK_K = config.block_m, config.block_n, config.block_k
    STAGES, GROUP_M, THREADS = config.stages, config.group_m, config.threads
    WARPS_M, WARP_M, WARP_N = config.warps_m, config.warp_m, config.warp_n
    operand, parts = preset.operand, preset.parts
    K_STEP_ = K_STEP[operand]
    BLOCKS_M, BLOCKS_N = WARP_M // BLOCK, WARP_N // BLOCK  # fragment blocks per warp tile
    PRODUCTS = len(preset.products)
    PART_A = tuple(p for p, _ in preset.products)
    PART_B = tuple(q for _, q in preset.products)
    HI = PRODUCTS - 1  # the last product, hi x hi; the ones before it are corrections
    LOAD_WORDS, WORDS, LOAD_DTYPE, WORD_DTYPE = fragment_words(operand, storage)
    ACC_SIZE = accumulators(config)
    # Split presets promise float32 accuracy, which the tensor cores' own accumulation (it
    # truncates: a bias that grows with K) would lose over a long k loop: the hi x hi
    # accumulators restart at 0 every k-tile and are added into float32 totals (round to
    # nearest) on the FMA units, so truncation only ever acts within one k-tile. The
    # corrections, 2^-8 of hi x hi or less, accumulate apart over all of k (their truncation
    # costs under 2^-30 K of the product) and join the totals at the end where they are a
    # number (``correction_adder``).
    PROMOTE = preset.parts > 1
    TOTAL_SIZE = ACC_SIZE if PROMOTE else 1
    K_CTAS = config.k_ctas
    settle = settler(ACC_SIZE, THREADS)  # the tile's float32 sums: totals, or accumulators
    B_LOADED, B_WORDS = BLOCKS_N * LOAD_WORDS, BLOCKS_N * parts * WORDS
    A_WORDS = parts * WORDS

    a_tile = _TileShape.of(config, storage, operand, BLOCK_M, a_mode[0])
    b_tile = _TileShape.of(config, storage, operand, BLOCK_N, b_mode[0])
    A_STAGE, B_STAGE = a_tile.size, b_tile.size
    A_SX, A_SK, B_SX, B_SK = a_tile.stride_x, a_tile.stride_k, b_tile.stride_x, b_tile.stride_k
    B_BASE = STAGES * A_STAGE
    load_a_tile = tile_loader(THREADS, BLOCK_K, storage, BLOCK_M, a_mode, linear_slot(a_tile))
    load_b_tile = tile_loader(THREADS, BLOCK_K, storage, BLOCK_N, b_mode, linear_slot(b_tile))
    load_a = fragment_loader(operand, storage, A_SX, A_SK)
    load_b = fragment_loader(operand, storage, B_SX, B_SK, "b")
    prepare = splitter(operand, parts, storage)
    multiply = mma(operand)
    convert = output_converter(out_dtype)
    wait = cp_async_wait(STAGES - 2)
    origin = tile_origin(BLOCK_M, BLOCK_N, GROUP_M)

    @cuda.jit(device=True)
    def load_stage(smem, stage, k0, a, a0, stride_am, stride_ak, b, b0, stride_bk, stride_bn,
                   m_left, n_left, K, tid):  # fmt: skip
        # The copies of k-tile k0 of A and B (their tiles from a0 and b0) into buffer ``stage``.
        load_a_tile(smem, stage * A_STAGE, a, a0 + k0 * stride_ak, stride_am, stride_ak,
                    m_left, K - k0, tid)  # fmt: skip
        load_b_tile(smem, B_BASE + stage * B_STAGE, b, b0 + k0 * stride_bk, stride_bn, stride_bk,
                    n_left, K - k0, tid)  # fmt: skip

    # One k step (K_STEP of k) of the warp tile, as straight-line code: every fragment index a
    # literal, so fragments and accumulators stay in registers.
    @cuda.jit(device=True)
    def product(acc, corrections, a_ops, b_ops, i, q, j, half):
        # partial product q into its accumulators: hi x hi's, or the corrections'
        index = ((i * BLOCKS_N + j) * 2 + half) * 4
        if q == HI:
            multiply(acc, index, a_ops, PART_A[q] * WORDS,
                     b_ops, (j * parts + PART_B[q]) * WORDS, half)  # fmt: skip
        else:
            multiply(corrections, index, a_ops, PART_A[q] * WORDS,
                     b_ops, (j * parts + PART_B[q]) * WORDS, half)  # fmt: skip

    products = unrolled(
        product,
        [(q, j, half) for q in range(PRODUCTS) for j in range(BLOCKS_N) for half in range(2)],
        "acc, corrections, a_ops, b_ops, i",
    )

    @cuda.jit(device=True)
    def b_block(b_raw, b_ops, smem, b_base, kk, j):
        load_b(b_raw, j * LOAD_WORDS, smem, b_base + j * BLOCK * B_SX + kk * K_STEP_ * B_SK)
        prepare(b_ops, j * parts * WORDS, b_raw, j * LOAD_WORDS)

    b_blocks = unrolled(b_block, BLOCKS_N, "b_raw, b_ops, smem, b_base, kk")

    @cuda.jit(device=True)
    def a_block(acc, corrections, a_raw, a_ops, b_ops, smem, a_base, kk, i):
        load_a(a_raw, 0, smem, a_base + i * BLOCK * A_SX + kk * K_STEP_ * A_SK)
        prepare(a_ops, 0, a_raw, 0)
        products(acc, corrections, a_ops, b_ops, i)

    a_blocks = unrolled(
        a_block, BLOCKS_M, "acc, corrections, a_raw, a_ops, b_ops, smem, a_base, kk"
    )

    @cuda.jit(device=True)
    def k_step(acc, corrections, a_raw, a_ops, b_raw, b_ops, smem, a_base, b_base, kk):
        # B: this warp's BLOCKS_N blocks of 16 n x K_STEP, loaded and prepared once; then A,
        # one block of 16 m x K_STEP at a time, against every B block and partial product.
        b_blocks(b_raw, b_ops, smem, b_base, kk)
        a_blocks(acc, corrections, a_raw, a_ops, b_ops, smem, a_base, kk)

    multiply_tile = unrolled(
        k_step,
        BLOCK_K // K_STEP_,
        "acc, corrections, a_raw, a_ops, b_raw, b_ops, smem, a_base, b_base",
    )

    zero_all = accumulator_zeroer(ACC_SIZE)

    @cuda.jit(device=True)
    def promote(total, acc, piece):
        for e in range(4):
            total[piece * 4 + e] += acc[piece * 4 + e]
            acc[piece * 4 + e] = 0.0

    promote_all = unrolled(promote, ACC_SIZE // 4, "total, acc")
    add_corrections = unrolled(correction_adder(), ACC_SIZE // 4, "total, corrections")

    @cuda.jit(device=True)
    def store(c, c0, stride_cm, stride_cn, M, N, acc, row0, col0, i, j, half):
        for e in range(4):
            m = row0 + i * BLOCK + 8 * (e // 2)
            n = col0 + j * BLOCK + 8 * half + e % 2
            if m < M and n < N:
                c[c0 + m * stride_cm + n * stride_cn] = convert(
                    acc[((i * BLOCKS_N + j) * 2 + half) * 4 + e]
                )

    store_all = unrolled(
        store,
        [(i, j, half) for i in range(BLOCKS_M) for j in range(BLOCKS_N) for half in range(2)],
        "c, c0, stride_cm, stride_cn, M, N, acc, row0, col0",
    )

    @kernel_jit(THREADS)
    def mma_kernel(a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn,
                   c, stride_cb, stride_cm, stride_cn, M, N, K, partials, sync):  # fmt: skip
        smem = cuda.shared.array(0, storage)
        acc = cuda.local.array(ACC_SIZE, np.float32)
        corrections = cuda.local.array(TOTAL_SIZE, np.float32)  # a split's, over all of k
        total = cuda.local.array(TOTAL_SIZE, np.float32)
        a_raw = cuda.local.array(LOAD_WORDS, LOAD_DTYPE)
        a_ops = cuda.local.array(A_WORDS, WORD_DTYPE)
        b_raw = cuda.local.array(B_LOADED, LOAD_DTYPE)
        b_ops = cuda.local.array(B_WORDS, WORD_DTYPE)
        zero_all(acc)
        if PROMOTE:
            zero_all(corrections)
            zero_all(total)

        # -- which C tile (grouped order); this warp's piece of it -------------------------
        m0, n0, batch, a0, b0 = origin(M, N, stride_ab, stride_am, stride_bb, stride_bn)
        tid = cuda.threadIdx.x
        warp = tid // WARP
        warp_m0, warp_n0 = (warp % WARPS_M) * WARP_M, (warp // WARPS_M) * WARP_N

        # -- this CTA's k-tiles: all, or under split-k range blockIdx.z's --------------------
        k_tiles = (K + BLOCK_K - 1) // BLOCK_K
        t_first = 0
        if K_CTAS > 1:
            per_cta = (k_tiles + K_CTAS - 1) // K_CTAS
            t_first = cuda.blockIdx.z * per_cta
            k_tiles = min(per_cta, k_tiles - t_first)  # never empty: working_k_ctas

        # -- pipeline: STAGES - 1 k-tiles in flight ahead of the one multiplied ------------
        for s in range(STAGES - 1):
            if s < k_tiles:
                load_stage(smem, s, (t_first + s) * BLOCK_K, a, a0, stride_am, stride_ak,
                           b, b0, stride_bk, stride_bn, M - m0, N - n0, K, tid)  # fmt: skip
            cp_async_commit()
        for t in range(k_tiles):
            # k-tile t has landed (at most STAGES - 2 younger groups pending); every warp is
            # done with k-tile t - 1, whose buffers the copies below refill.
            wait()
            cuda.syncthreads()
            ahead = t + STAGES - 1
            if ahead < k_tiles:
                load_stage(smem, ahead % STAGES, (t_first + ahead) * BLOCK_K, a, a0, stride_am,
                           stride_ak, b, b0, stride_bk, stride_bn, M - m0, N - n0, K,
                           tid)  # fmt: skip
            cp_async_commit()
            s = t % STAGES
            multiply_tile(acc, corrections, a_raw, a_ops, b_raw, b_ops, smem,
                          s * A_STAGE + warp_m0 * A_SX,
                          B_BASE + s * B_STAGE + warp_n0 * B_SX)  # fmt: skip
            if PROMOTE:
                promote_all(total, acc)
        if PROMOTE:
            add_corrections(total, corrections)
        sums = total if PROMOTE else acc

        # -- split-k: the last CTA of the tile goes on with the sum of every range -----------
        if K_CTAS > 1:
            tile = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
            if not settle(sums, partials, sync, tile, cuda.blockIdx.z, K_CTAS, tid, tid, True):
                return

        # -- epilogue: accumulators -> C, converted to its dtype ---------------------------
        lane = tid % WARP
        store_all(c, batch * stride_cb, stride_cm, stride_cn, M, N, sums,
                  m0 + warp_m0 + lane // 4, n0 + warp_n0 + 2 * (lane % 4))  # fmt: skip

    return mma_kernel


def storage_view(desc: MatrixDesc, dtype: np.dtype) -> MatrixDesc:
    """``desc`` as the kernels take it: 16-bit floats as their uint16 bits."""
    if desc.dtype == dtype:
        return desc
    data = desc.data.view(dtype) if desc.data is not None else None
    return replace(desc, dtype=dtype, data=data)


def plan_mma(config: MmaConfig, preset: Preset, a: MatrixDesc, b: MatrixDesc, c: MatrixDesc,
             scratch=None) -> KernelLaunch:  # fmt: skip
    """The ``mma.sync`` kernel's launch on validated operands: C (M x N) = A (M x K) @
    B (K x N) under ``preset``, for each of ``c.batch`` products. With ``config.k_ctas`` > 1,
    that many CTAs share each tile's k loop (``kernels.split_k``; fewer where fewer get a
    range): ``scratch(name, shape, dtype)`` gives the descriptors of their float32
    ``"partials"`` and of the uint32 counters ``"sync"`` (zero at launch; the kernel leaves
    them zero)."""
    storage = storage_dtype(a.dtype)
    config.check(storage)
    config = working_config(config, cdiv(a.shape[1], config.block_k), scratch)
    a, b = storage_view(a, storage), storage_view(b, storage)
    out_dtype = c.dtype
    c = storage_view(c, storage_dtype(c.dtype))
    a_mode, b_mode = operand_mode(a, True), operand_mode(b, False)
    shared = config.shared_bytes(storage, a_mode[0], b_mode[0], preset.operand)
    if shared > STATIC_SHARED_LIMIT and shared > (limit := shared_memory_limit()):
        raise ValueError(
            f"{config.label()} needs {shared} bytes of shared memory per block; this device "
            f"allows {limit}"
        )
    (M, K), N = a.shape, b.shape[1]
    kernel = _kernel(config, preset, storage, np.dtype(out_dtype), a_mode, b_mode)
    grid = (cdiv(M, config.block_m) * cdiv(N, config.block_n), c.batch, config.k_ctas)
    split = split_buffers(config.k_ctas, grid[0] * grid[1], config.threads * accumulators(config),
                          FLOAT32, scratch)  # fmt: skip
    return kernel_launch(kernel, grid, config.threads, shared,
                         (a, a.batch_stride, *a.strides, b, b.batch_stride, *b.strides,
                          c, c.batch_stride, *c.strides, M, N, K, *split))  # fmt: skip
