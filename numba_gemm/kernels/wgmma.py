"""Hopper tensor-core GEMM on ``wgmma``: bf16, f16, TF32 and 3xTF32, float32 accumulation.

Shapes: C (M x N) = A (M x K) @ B (K x N), each a 1-D buffer plus element strides, as in
``mma``; any M, N, K >= 1, any strides; a batch along grid y. Operands are bf16 or f16 (passed
as their uint16 bits), or float32 under ``TF32_TF32_F32`` or ``TF32_TF32_F32_X3``; C is
float32, or bf16/f16 rounded from the float32 accumulator. Compute capability 9.0 (``wgmma``
is sm_90a); the simulator runs it through twins (``warpgroup``).

Two kernels share the grouped order, the tile layout and the epilogue (:func:`plan_wgmma`
picks one):

- :func:`_kernel`: 16-bit operands go from global memory straight into the tiles wgmma reads
  (below); so do float32 operands at ``TF32_TF32_F32`` where one of them is k-major, with A's
  block read from registers (TF32 wgmma reads k-major tiles only; the registers can hold A in
  either layout), computing C^T = B^T A^T where only A is k-major;
- :func:`_converting_kernel`: float32 operands through a conversion step, for the split
  preset (each operand's parts) and for TF32 where neither operand is k-major.

Algorithm (one CTA of ``block_m / 64`` warpgroups per BLOCK_M x BLOCK_N tile of C; warpgroup w
owns rows 64 w .. 64 w + 63 of the tile):

1. *Which tile*: program id -> ``(pid_m, pid_n)`` through seed 004's grouped order
   (``ordering.tile_of``); grid y is the product of the batch.
2. *Pipeline*: ``stages`` shared-memory buffers of one slice (one 128-byte row of k: 64 16-bit
   or 32 float32 elements) of A (BLOCK_M rows) and of B (BLOCK_N), 128-byte swizzled
   (``warpgroup.tile_slot``), each stored as its operand lies (k-major or m/n-major: ``wgmma``
   transposes m/n-major 16-bit blocks as it reads them). In ``_kernel``, where TMA can copy
   both operands, thread 0 fills a stage with TMA copies (``kernels/tma``: a box per k-major
   tile or per 128-byte chunk of an m/n-major one, zero-filled past the matrix) whose bytes
   complete the stage's mbarrier, through tensor maps the host encodes or, in XLA's kernel
   call, the CTA builds from templates; otherwise every thread fills them with ``cp.async``
   (16-byte runs along the contiguous axis, zero-filled past the matrix; element copies for
   operands with no usable contiguous axis). ``LOOKAHEAD`` slices load while the tensor cores
   multiply, and ``IN_FLIGHT`` slices' wgmmas may still read theirs.
3. *Multiply*: per slice, each warpgroup issues four ``wgmma.m64nNk16`` (N = BLOCK_N; TF32:
   ``k8`` with A from registers, each warp's 16 rows loaded and rounded first, into one of two
   register sets), its 64 x BLOCK_N accumulators in registers (BLOCK_N / 2 float32 per
   thread), then commits them as one group and waits until at most ``IN_FLIGHT`` groups are
   pending, so that the next slice's copies and the tensor cores overlap.
4. *Epilogue*: the warpgroups write their accumulators into a float32 C tile in shared memory
   (the pipeline's buffers, free after the k loop), its lines along C's contiguous axis; then
   every thread converts 16 bytes' worth of C's elements at a time and stores them along that
   axis (consecutive threads, consecutive vectors), element by element at the edges or where
   C's lines are not contiguous and aligned.

The persistent form (``WgmmaConfig.persistent`` CTAs per SM; ``_kernel`` only): each CTA
loops over tiles x, x + grid x, ... of its product; the slices of all its tiles form one
stream through the same pipeline, so the next tile's first slices load while a tile's last
ones are multiplied and its epilogue runs, from a C tile of its own after the pipeline's
buffers (:meth:`WgmmaConfig.c_tile_offset`).

The warp-specialised form (``WgmmaConfig.producers`` 1; ``_kernel``, TMA only): one more
warpgroup, whose first thread issues each slice's copies once every consumer thread has
arrived on the buffer's "free" mbarrier (so up to ``stages`` slices ahead), while the other
warpgroups wait on "landed", multiply and free the slice before; ``setmaxnreg`` moves the
producer's registers to the consumers; the epilogue runs between the consumers' named barrier.
Persistent and warp-specialised (``persistent`` 1 and ``producers`` 1: what "auto" runs the
default tiles in where TMA goes both ways): the producer's stream is all the CTA's tiles'
slices, and the epilogue stages C in boxes that one thread hands to TMA stores
(:func:`_c_tma_writer`), which drain while the next tile's wgmmas run.

Order of a slice's buffer: with ``cp.async``, copies land (``cp.async.wait_group``), each
thread makes its writes visible to the tensor cores (``fence.proxy.async``), a CTA barrier;
with TMA, every thread waits for the stage mbarrier's phase (TMA and wgmma share the async
proxy). Either way a buffer is refilled only after the barrier that follows every
warpgroup's wait for the wgmmas that read it.

Constraints (``WgmmaConfig.check``): BLOCK_M a multiple of 64 (at most 4 warpgroups),
BLOCK_N a multiple of 64 up to 256 (one wgmma's N), tiles that split into whole 16-byte copies
per thread, ``stages`` >= IN_FLIGHT + 2; in the converting kernel BLOCK_M = 128 (the
conversion runs 8 warps) and ``stages`` >= 2; with a producer at most two consumer
warpgroups and ``persistent`` 0 or 1, and (``plan_wgmma``) operands TMA can copy and, when
persistent, a C that TMA can store.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import ClassVar

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
from ..launch.tensor_maps import MAP_BYTES, TensorMapArg, TensorMapSpec, tensor_map_template
from ..precision import FLOAT32, Preset
from .common import (
    REGISTERS_PER_SM,
    VECTOR_BYTES,
    check_field_range,
    int_fields,
    kernel_jit,
    kernel_registers,
    unrolled,
)
from .fragments import BLOCK_ROWS, operand_part, output_converter
from .mma import (
    UINT16,
    accumulator_zeroer,
    correction_adder,
    operand_mode,
    storage_dtype,
    storage_view,
    tile_loader,
    tile_origin,
    work_origin,
)
from .ptx import cp_async_commit, cp_async_wait, load_vector, store_pair, store_vector
from .split_k import check_k_ctas, settler, split_buffers, split_into_wave, working_config
from .tma import (
    BARRIER_BYTES,
    bulk_commit,
    bulk_wait,
    mbarrier_arrive,
    mbarrier_done,
    mbarrier_expect_bytes,
    mbarrier_init,
    publish_tensor_map,
    tensor_map_in_place,
    tma_load,
    tma_store,
)
from .warpgroup import (
    ALIGNMENT,
    OPERAND_BYTES,
    REGISTER_DTYPE,
    REGISTER_WORDS,
    ROW_BYTES,
    TF32_TILE_K,
    WARPGROUP,
    aligned_start,
    async_proxy_fence,
    block_start,
    named_barrier,
    register_fragment_loader,
    registers_read,
    set_max_registers,
    thread_index,
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

__all__ = [
    "WgmmaConfig",
    "DEFAULT_WGMMA_CONFIG",
    "WARP_SPECIALISED_WGMMA_CONFIG",
    "TALL_WGMMA_CONFIG",
    "SHORT_K",
    "SHORT_K_WGMMA_CONFIG",
    "SIMULATOR_WGMMA_CONFIG",
    "SIMULATOR_CONVERTING_WGMMA_CONFIG",
    "SMALL_WGMMA_CONFIG",
    "TINY_WGMMA_CONFIG",
    "CONVERTING_WGMMA_CONFIGS",
    "WGMMA_CC",
    "default_wgmma_config",
    "narrow_wgmma_config",
    "plan_wgmma",
    "wgmma_takes",
    "WGMMA_PRESETS",
]

WGMMA_CC = (9, 0)  # wgmma: Hopper (sm_90a)
ROWS_PER_WARPGROUP = 64  # wgmma's m
IN_FLIGHT = 1  # slices whose wgmmas a warpgroup leaves pending while the next slice's copies go out
PART_BUFFERS = 2  # float32 operands: TF32 parts of the slice multiplied and of the next one
PROMOTE_SLICES = 2  # 3xTF32: slices accumulated by the tensor cores between promotions
# Warp specialisation (``WgmmaConfig.producers``): the producer warpgroup's registers per thread
# once the warpgroups part (``setmaxnreg``); its one thread issuing TMA copies needs few, and
# the consumers take the rest of the pool the launch allocated.
PRODUCER_REGISTERS = 40
EPILOGUE_BARRIER = 1  # the consumers' named barrier around the epilogue (0 is the CTA's)
# The persistent warp-specialised kernel stages C for its TMA stores this much at a time: with
# 128 x 256 tiles in four stages (192 KB) it fills the 227 KB a CTA may have; the largest box
# (256 lines of 128 bytes) fits.
STAGING_BYTES = 32 * 1024


@dataclass(frozen=True)
class WgmmaConfig:
    """One ``wgmma`` kernel configuration (compile-time constants).

    ``block_m x block_n``: the C tile of a CTA, 64 rows per warpgroup; ``stages``: shared-memory
    buffers of a 64-k slice of A and B; ``group_m``: the grouped order's group height;
    ``k_ctas``: CTAs per C tile, each over its own range of k, the last adding them
    (``kernels.split_k``; the 16-bit and register-A kernel only); ``persistent``: 0, one CTA
    per tile, or that many CTAs per SM, each looping over tiles with its pipeline running on
    from one tile into the next (:func:`_kernel`'s persistent kernel; not the converting
    kernel, one CTA per tile's k); ``producers``: 0, every thread both waits for the copies
    and multiplies, or 1, one more warpgroup whose first thread only issues the TMA copies
    while the others only multiply (warp specialisation: :func:`_kernel`, operands TMA can
    copy; with ``persistent`` 1, the persistent warp-specialised kernel, whose epilogue
    stores C with TMA: :attr:`stores_with_tma`).
    """

    ZERO_MEANS_OFF: ClassVar[tuple] = ("persistent", "producers")

    block_m: int = 128
    block_n: int = 256
    stages: int = 4
    group_m: int = 8
    k_ctas: int = 1
    persistent: int = 0
    producers: int = 0

    def __post_init__(self):
        int_fields(self)

    @property
    def warpgroups(self) -> int:
        """The warpgroups that multiply (64 rows of the tile each)."""
        return self.block_m // ROWS_PER_WARPGROUP

    @property
    def consumer_threads(self) -> int:
        """The threads that multiply and write C."""
        return WARPGROUP * self.warpgroups

    @property
    def producer_threads(self) -> int:
        """The producer warpgroup's threads, or 0: the consumers' indices start after them."""
        return WARPGROUP * self.producers

    @property
    def threads(self) -> int:
        """The CTA's: the producer warpgroup, if any, then the consumers."""
        return self.producer_threads + self.consumer_threads

    @property
    def stores_with_tma(self) -> bool:
        """The persistent warp-specialised kernel (``persistent`` and ``producers``), whose
        epilogue hands C to TMA stores through a staging buffer (:func:`_c_tma_writer`)."""
        return bool(self.persistent and self.producers)

    @property
    def map_count(self) -> int:
        """Tensor maps the kernel reads: A's and B's, and with TMA stores C's."""
        return 3 if self.stores_with_tma else 2

    @property
    def barriers(self) -> int:
        """mbarriers where TMA fills the tiles: per stage "landed", and with a producer
        "free" (every consumer thread has arrived: done with the buffer)."""
        return self.stages * (1 + self.producers)

    def consumer_registers(self) -> int:
        """With a producer: the consumers' registers per thread after ``setmaxnreg``, what the
        launch's pool (the registers ``kernel_jit`` allows each of the CTA's threads) leaves
        once the producer warpgroup has :data:`PRODUCER_REGISTERS`."""
        pool = kernel_registers(self.threads) * self.threads
        return min(256, (pool - WARPGROUP * PRODUCER_REGISTERS) // self.consumer_threads // 8 * 8)

    def check(self, storage=UINT16, converting: bool = False) -> None:
        """``ValueError`` saying which constraint this config breaks for operands stored as
        ``storage`` (uint16: bf16/f16 bits; float32: TF32 presets), in the converting kernel
        (``converting``) or the other."""
        storage = np.dtype(storage)
        if storage.itemsize not in (2, 4):
            raise ValueError(
                "WgmmaConfig is the wgmma kernel's, which takes bfloat16, float16 or float32 "
                f"operands; got {storage} ones"
            )
        check_field_range(self)
        check_k_ctas(self)
        if self.producers > 1:
            raise ValueError(f"WgmmaConfig.producers must be 0 or 1; got {self.producers}")
        if self.producers and (converting or self.k_ctas > 1):
            raise ValueError(
                "WgmmaConfig.producers must be 0 where float32 operands are converted (neither "
                "k-major, or TF32_TF32_F32_X3) and where k_ctas > 1"
            )
        if self.producers and self.persistent > 1:
            raise ValueError(
                f"WgmmaConfig.persistent = {self.persistent} must be 0 or 1 with a producer: "
                "one CTA takes an SM's registers"
            )
        if self.producers and self.warpgroups > 2:
            raise ValueError(
                f"WgmmaConfig.block_m = {self.block_m} must be 64 or 128 with a producer: "
                "more warpgroups would leave each too few registers for its accumulators"
            )
        if self.persistent and (converting or self.k_ctas > 1):
            raise ValueError(
                "WgmmaConfig.persistent must be 0 where float32 operands are converted (neither "
                "k-major, or TF32_TF32_F32_X3) and where k_ctas > 1: the persistent kernel "
                "runs each tile in one CTA"
            )
        if converting and self.k_ctas > 1:
            raise ValueError(
                "WgmmaConfig.k_ctas must be 1 where float32 operands are converted (neither "
                "k-major, or TF32_TF32_F32_X3): that kernel runs each tile in one CTA"
            )
        if self.block_m % ROWS_PER_WARPGROUP or self.warpgroups > 4:
            raise ValueError(
                f"WgmmaConfig.block_m = {self.block_m} must be 64, 128, 192 or 256 (64 rows "
                "per warpgroup)"
            )
        if converting and self.warpgroups != 2:
            raise ValueError(
                f"WgmmaConfig.block_m = {self.block_m} must be 128 where float32 operands are "
                "converted (neither k-major, or TF32_TF32_F32_X3: the conversion runs 8 warps)"
            )
        if self.block_n % 64 or self.block_n > 256:
            raise ValueError(
                f"WgmmaConfig.block_n = {self.block_n} must be a multiple of 64 up to 256 "
                "(one wgmma's n)"
            )
        vec, k = VECTOR_BYTES // storage.itemsize, tile_k(storage.itemsize)
        for tile in (self.block_m, self.block_n):
            if (tile * k) % (vec * self.consumer_threads):
                raise ValueError(
                    f"a {tile} x {k} tile must split into whole 16-byte copies for each "
                    f"of the {self.consumer_threads} threads"
                )
        if converting:
            if self.stages < 2:
                raise ValueError(
                    "WgmmaConfig.stages must be >= 2 where float32 operands are converted: "
                    "one slice converted while the next loads"
                )
        elif self.stages < IN_FLIGHT + 2:
            raise ValueError(
                f"WgmmaConfig.stages must be >= {IN_FLIGHT + 2}: {IN_FLIGHT} slice(s) being "
                "multiplied and at least one loading"
            )

    def tile_region_bytes(self, parts: int = 0) -> int:
        """Shared memory of the tiles from their 1024-byte aligned start: ``stages`` tiles of
        A and B (with ``parts`` > 0, the converting kernel's, plus two buffers of their
        ``parts`` TF32 parts), or after the k loop in the same memory the float32 C tile
        (:meth:`c_tile_bytes`); for a persistent config the pipeline alone (its C tile lies
        apart: :meth:`c_tile_offset`), with TMA stores followed by their staging buffer
        (:data:`STAGING_BYTES`)."""
        slice_bytes = tile_bytes(self.block_m) + tile_bytes(self.block_n)
        pipeline = (self.stages + PART_BUFFERS * parts) * slice_bytes
        if self.stores_with_tma:
            return pipeline + STAGING_BYTES
        return pipeline if self.persistent else max(pipeline, self.c_tile_bytes())

    def staging_offset(self) -> int:
        """With TMA stores: bytes from the tiles' start to the staging buffer of C's boxes,
        after the pipeline's buffers (a 1024-byte boundary: slices are 8 KB multiples)."""
        return self.stages * (tile_bytes(self.block_m) + tile_bytes(self.block_n))

    def c_tile_bytes(self) -> int:
        """The epilogue's float32 C tile, either way round (:func:`c_tile_line`)."""
        return 4 * max(self.block_m * c_tile_line(self.block_n, False),
                       self.block_n * c_tile_line(self.block_m, True))  # fmt: skip

    def c_tile_offset(self, maps: str = "none") -> int:
        """Bytes from the tiles' start to the epilogue's C tile: 0 (it reuses the pipeline's
        buffers after the k loop), or for a persistent config, whose next tile's slices load
        during an epilogue, past everything else (tiles, mbarriers, maps), 128-byte aligned."""
        if not self.persistent:
            return 0
        end = {"none": self.tile_region_bytes(),
               "host": self.tile_region_bytes() + self.barriers * BARRIER_BYTES,
               "device": self.maps_offset() + 2 * MAP_BYTES}[maps]  # fmt: skip
        return cdiv(end, MAP_BYTES) * MAP_BYTES

    def shared_bytes(self, parts: int = 0, maps: str = "none") -> int:
        """Dynamic shared memory per CTA: the tiles' region, room to start it at a 1024-byte
        boundary (the swizzle's period) and, where TMA fills the tiles (``maps`` "host" or
        "device"), its mbarriers after it (:attr:`barriers`); for "device" then the two maps
        the CTA completes (:meth:`maps_offset`)."""
        if self.persistent and not self.producers:
            return self.c_tile_offset(maps) + self.c_tile_bytes() + ALIGNMENT
        if maps == "none":
            return self.tile_region_bytes(parts) + ALIGNMENT
        if maps == "host":
            return self.tile_region_bytes(parts) + ALIGNMENT + self.barriers * BARRIER_BYTES
        return self.maps_offset() + self.map_count * MAP_BYTES + ALIGNMENT

    def ctas_per_sm(self, parts: int = 0, maps: str = "none") -> int:
        """CTAs of this config one SM holds: as many as its shared memory takes
        (:meth:`shared_bytes`, and the driver's 1 KB each), while each thread keeps
        :data:`MIN_REGISTERS` registers. The one-tile kernel that TMA fills is compiled with
        its registers capped for that many (``tiled.kernel_jit``): bf16 128 x 128 tiles in
        three stages run two to an SM, not one (their 167 registers would take 43K of the
        SM's 64K). Its ``cp.async`` form (operands TMA cannot copy) is not: its copies'
        addresses and bounds take every register already. With a producer, one: the launch's
        registers are parted between the warpgroups of one CTA."""
        if self.producers:
            return 1
        by_shared = SM_SHARED_BYTES // (self.shared_bytes(parts, maps) + CTA_RESERVED_BYTES)
        return max(1, min(by_shared, REGISTERS_PER_SM // (self.threads * MIN_REGISTERS)))

    def maps_offset(self) -> int:
        """Bytes from the tiles' start to the device-built tensor maps: after the tiles'
        region and the mbarriers, at a 128-byte boundary (``tensormap.replace``'s)."""
        end = self.tile_region_bytes() + self.barriers * BARRIER_BYTES
        return cdiv(end, MAP_BYTES) * MAP_BYTES

    def label(self) -> str:
        return (
            f"wgmma {self.block_m}x{self.block_n}/s{self.stages}/g{self.group_m}"
            + (f"/kc{self.k_ctas}" if self.k_ctas > 1 else "")
            + (f"/p{self.persistent}" if self.persistent else "")
            + ("/ws" if self.producers else "")
        )


# Hopper's shared memory per SM, of which the driver reserves 1 KB per CTA.
SM_SHARED_BYTES, CTA_RESERVED_BYTES = 228 * 1024, 1024
# The registers per thread the kernels keep where several CTAs share an SM: a warpgroup's
# 64 x 128 tile (64 accumulators per thread) compiles to 127 without spilling, in the same
# instructions as at 167 (tools/sass.py).
MIN_REGISTERS = 128

# Two warpgroups of 64 x 256: 128 accumulators per thread, each 16 x 256 block of B read by
# both warpgroups; four stages of 48 KB (64 k of 16-bit operands, 32 k of float32 ones) fill
# the shared memory of an SM.
DEFAULT_WGMMA_CONFIG = WgmmaConfig(128, 256, 4, 8)
# Where TMA can copy the operands and store C (its rows contiguous), the default's tiles in the
# persistent warp-specialised kernel: a producer thread streams each CTA's slices across its
# tiles and TMA stores C under the next tile's wgmmas, so neither a tile's pipeline fill nor
# its epilogue idles the tensor cores. 16-bit operands only: TF32 from registers runs slower
# in it.
WARP_SPECIALISED_WGMMA_CONFIG = WgmmaConfig(128, 256, 4, 8, persistent=1, producers=1)
# The same tiles transposed, for outputs narrower than 256 but taller (scores @ values of
# attention, 64 x 2048 x 128 x 2048: half of each 128 x 256 tile would be past N).
TALL_WGMMA_CONFIG = WgmmaConfig(256, 128, 4, 8)
# A k loop of at most SHORT_K (two 16-bit slices, four TF32 ones): 128 x 128 tiles in three
# stages, 96 KB, so that two CTAs share an SM (registers capped for two) and one's epilogue
# overlaps the other's loads (attention's scores, 64 x 2048 x 2048 x 128 bf16 on an H200:
# 352 us against 373 for one warpgroup's 64 x 128 tiles, three to an SM, and 404 for
# 128 x 256 tiles; 8192 x 8192 x 64: 79 against 82 and 91).
SHORT_K = 128
SHORT_K_WGMMA_CONFIG = WgmmaConfig(128, 128, 3, 8)
# Problems too small for half a wave of those tiles: 128 x 128 tiles (twice the CTAs), six
# stages of 32 KB.
SMALL_WGMMA_CONFIG = WgmmaConfig(128, 128, 6, 8)
# Problems too small for a quarter wave of 128 x 128 tiles (a model layer's 1024 x 512 x 512):
# one warpgroup's 64 x 64 tiles, four times the CTAs (5.0 us against 7.3 at 1024 x 512 x 512
# bf16 on an H200).
TINY_WGMMA_CONFIG = WgmmaConfig(64, 64, 4, 8)

# The converting kernel: 128 x 128 tiles (two accumulator sets fit the registers where the
# split preset keeps float32 totals); four 32 KB slices as loaded and two 32 KB buffers of
# TF32 operands (192 KB), or for the two-part split three slices and two buffers of two parts
# each (224 KB).
CONVERTING_WGMMA_CONFIGS = {1: WgmmaConfig(128, 128, 4, 8), 2: WgmmaConfig(128, 128, 3, 8)}

# On the simulator, small tiles (the kernel code is the same): one warpgroup, or the two that
# the converting kernel needs.
SIMULATOR_WGMMA_CONFIG = WgmmaConfig(64, 64, 3, 1)
SIMULATOR_CONVERTING_WGMMA_CONFIG = WgmmaConfig(128, 64, 2, 1)


def default_wgmma_config(M: int, N: int, K: int, batch: int = 1, converting_parts: int = 0,
                         size: int = 2, split: bool = True) -> WgmmaConfig:  # fmt: skip
    """The tiles for an M x N x K product (``batch`` of them, operands of ``size`` bytes) when
    the caller gives none, and where ``split`` (the caller has scratch for it) how many CTAs
    share each tile's k loop (:func:`split_k.choose_k_ctas`: one wave of one CTA per SM, as
    these tiles take most of an SM's registers or shared memory):

    - the converting kernel (``converting_parts`` TF32 parts, > 0):
      :data:`CONVERTING_WGMMA_CONFIGS`, one CTA per tile;
    - a narrow output (M or N at most :data:`NARROW`, a decode step's):
      :func:`narrow_wgmma_config`, tiles 64 wide along the narrow side;
    - tiles that fill half the SMs: for a k of at most :data:`SHORT_K`
      :data:`SHORT_K_WGMMA_CONFIG`, else :data:`DEFAULT_WGMMA_CONFIG`; where it makes more
      tiles than its transpose (N under 256 < M: half of each tile past N),
      :data:`TALL_WGMMA_CONFIG` if its tiles fill every SM, else as for few tiles;
    - tiles that fill half the SMs once split (outputs at least 256 each way, so that the big
      tiles are not mostly edge): :data:`DEFAULT_WGMMA_CONFIG`;
    - else :data:`SMALL_WGMMA_CONFIG`, or :data:`TINY_WGMMA_CONFIG` where the small tiles
      would occupy fewer than a quarter of the SMs and, split, make fewer CTAs than the tiny
      ones (a short k: a model layer's 1024 x 512 x 512)."""
    if SIMULATED:
        return SIMULATOR_CONVERTING_WGMMA_CONFIG if converting_parts else SIMULATOR_WGMMA_CONFIG
    if converting_parts:
        return CONVERTING_WGMMA_CONFIGS[converting_parts]
    sms = multiprocessors()

    def tiles(config):
        return cdiv(M, config.block_m) * cdiv(N, config.block_n) * batch

    def in_wave(config):
        return split_into_wave(config, M, N, K, batch, tile_k(size), sms) if split else config

    if min(M, N) <= NARROW:
        return in_wave(narrow_wgmma_config(M, N))
    wide = tiles(DEFAULT_WGMMA_CONFIG) <= tiles(TALL_WGMMA_CONFIG)  # else N under 256 < M
    if 2 * tiles(DEFAULT_WGMMA_CONFIG) >= sms and K <= SHORT_K:
        return SHORT_K_WGMMA_CONFIG
    if 2 * tiles(DEFAULT_WGMMA_CONFIG) >= sms and wide:
        return DEFAULT_WGMMA_CONFIG
    if tiles(TALL_WGMMA_CONFIG) >= sms and not wide:
        return TALL_WGMMA_CONFIG
    big = in_wave(DEFAULT_WGMMA_CONFIG)
    if min(M, N) >= big.block_n and 2 * tiles(big) * big.k_ctas >= sms:
        return big
    small, tiny = in_wave(SMALL_WGMMA_CONFIG), in_wave(TINY_WGMMA_CONFIG)
    if 4 * tiles(small) >= sms or tiles(small) * small.k_ctas >= tiles(tiny) * tiny.k_ctas:
        return small
    return tiny


NARROW = 64  # an output side this narrow takes one 64-wide tile (wgmma's m, its smallest n)


def narrow_wgmma_config(M: int, N: int) -> WgmmaConfig:
    """Tiles for an output with at most :data:`NARROW` rows or columns: 64 along each narrow
    side, 128 along a wide one, six stages (24 KB each for one narrow side, four of 16 KB for
    both)."""
    if M <= NARROW and N <= NARROW:
        return TINY_WGMMA_CONFIG
    return WgmmaConfig(64 if M <= NARROW else 128, 64 if N <= NARROW else 128, 6, 8)


def _stage_loader(config: WgmmaConfig, storage, a_mode: tuple, b_mode: tuple):
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


def _tile_copier(axis: str, extent_x: int, size: int):
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
    """The tensor map :func:`_tile_copier` copies ``desc``'s tiles with (``axis``: its
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


def _shared_slice(config: WgmmaConfig, operand: str, a_axis: str, b_axis: str):
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


def _register_slice(config: WgmmaConfig, a_axis: str):
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


@functools.cache
def _kernel(config: WgmmaConfig, operand: str, out_dtype, a_mode: tuple, b_mode: tuple,
            c_mode: tuple, transposed: bool = False, maps: str = "none"):  # fmt: skip
    """The kernel specialised for one config, operand kind ("bf16", "f16": 16-bit operands,
    both blocks from shared memory; "tf32": float32 operands, A's block from registers
    rounded to TF32, B k-major), output dtype, operand layouts and C's (``c_mode``), as the
    kernel sees them: with ``transposed`` it takes A, B, C and computes C^T = B^T A^T (the
    modes are B^T's, A^T's and C^T's).

    How the tiles are filled (``maps``), and what the arguments ``a_map, b_map, c_map,
    workspace`` are (``c_map``: C's map for the TMA stores of the persistent warp-specialised
    kernel, :attr:`WgmmaConfig.stores_with_tma`; else 0):

    - "none": every thread's ``cp.async`` copies (four unused ints);
    - "host": one thread's TMA copies, through the tensor maps of the buffers ``a`` and ``b``
      (and ``c``) at addresses ``a_map`` and ``b_map`` (and ``c_map``; ``workspace`` unused);
    - "device": the same, through maps warp 0 builds first from the templates ``a_map`` and
      ``b_map`` (and ``c_map``; 16 words each) and the buffers' addresses, into this CTA's
      128-byte slots of ``workspace`` (XLA's kernel call, where the host knows no address)."""
    BLOCK_M, BLOCK_N, STAGES = config.block_m, config.block_n, config.stages
    GROUP_M = config.group_m
    THREADS = config.threads
    PRODUCER = config.producers > 0  # warpgroup 0 copies (its thread 0), the others multiply
    FIRST = config.producer_threads  # the first thread that multiplies
    CONSUMERS = config.consumer_threads  # arrivals that free a buffer: every consumer's
    REGISTER_A, TRANSPOSED = operand == "tf32", transposed
    TMA, DEVICE_MAPS = maps != "none", maps == "device"
    SIZE = OPERAND_BYTES[operand]
    STORAGE = FLOAT32 if REGISTER_A else UINT16
    SLICE_K = tile_k(SIZE)
    LOOKAHEAD = STAGES - 1 - IN_FLIGHT  # slices loading ahead of the one multiplied
    ACC_SIZE = BLOCK_N // 2
    FRAG_SIZE = 2 * SLICE_K // wgmma_k(operand) * REGISTER_WORDS if REGISTER_A else 1  # two sets
    A_STAGE, B_STAGE = tile_bytes(BLOCK_M) // SIZE, tile_bytes(BLOCK_N) // SIZE  # elements
    B_BASE = STAGES * A_STAGE
    STAGE_BYTES = tile_bytes(BLOCK_M) + tile_bytes(BLOCK_N)  # a stage's TMA copies bring
    BARRIERS = config.tile_region_bytes() // SIZE  # TMA: stage s's mbarrier at BARRIERS + s B
    BARRIER = BARRIER_BYTES // SIZE  # (B: its elements)
    FREE = STAGES * BARRIER  # with a producer: the "free" mbarriers follow the "landed" ones
    MAPS, MAP = config.maps_offset() // SIZE, MAP_BYTES // SIZE  # device: A's map, B's, C's
    STORES_WITH_TMA, MAP_COUNT = config.stores_with_tma, config.map_count
    load_stage = _stage_loader(config, STORAGE, a_mode, b_mode)
    copy_a = _tile_copier(a_mode[0], BLOCK_M, SIZE)
    copy_b = _tile_copier(b_mode[0], BLOCK_N, SIZE)
    if REGISTER_A:
        multiply_slice = _register_slice(config, a_mode[0])
    else:
        multiply_slice = _shared_slice(config, operand, a_mode[0], b_mode[0])
    copies_landed = cp_async_wait(LOOKAHEAD - 1)
    wgmma_done = wgmma_wait(0)
    origin = tile_origin(BLOCK_M, BLOCK_N, GROUP_M)
    zero_all = accumulator_zeroer(ACC_SIZE)
    write_c = _c_writer(config, out_dtype, c_mode, maps)
    C_STORAGE = storage_dtype(out_dtype)
    if STORES_WITH_TMA:
        store_c, stores_done = _c_tma_writer(config, out_dtype, c_mode)
    K_CTAS = config.k_ctas
    settle = settler(ACC_SIZE, THREADS)
    origin_of = work_origin(BLOCK_M, BLOCK_N, GROUP_M)
    consumers_sync = _consumers_sync(config)
    if PRODUCER:
        fewer_registers = set_max_registers(PRODUCER_REGISTERS, False)
        more_registers = set_max_registers(config.consumer_registers(), True)

    @cuda.jit(device=True)
    def barrier_of(base, stage):
        # the element where buffer ``stage``'s mbarrier lies
        return base + BARRIERS + stage * BARRIER

    @cuda.jit(device=True)
    def free_barrier_of(base, stage):
        # with a producer: the element where buffer ``stage``'s "free" mbarrier lies
        return base + BARRIERS + FREE + stage * BARRIER

    @cuda.jit(device=True)
    def as_computed(a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn,
                    stride_cm, stride_cn, M, N, a_map, b_map):  # fmt: skip
        # the arguments as the kernel computes with them: with TRANSPOSED, C^T = B^T A^T, so A
        # is B^T, B is A^T and C is C^T
        if TRANSPOSED:
            return (b, stride_bb, stride_bn, stride_bk, a, stride_ab, stride_ak, stride_am,
                    stride_cn, stride_cm, N, M, b_map, a_map)  # fmt: skip
        return (a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn,
                stride_cm, stride_cn, M, N, a_map, b_map)  # fmt: skip

    @cuda.jit(device=True)
    def tensor_maps(smem, base, a, b, c, a_map, b_map, c_map, workspace, tid):
        # (A's map, B's, C's) for the TMA copies (C's: for the stores, where STORES_WITH_TMA;
        # else 0): as given, or where the kernel builds them (DEVICE_MAPS) completed with the
        # buffers' addresses and published to this CTA's MAP_COUNT slots of the workspace, by
        # warp 0 (A's and B's) and by the first consumer warp (C's)
        if not DEVICE_MAPS:
            return a_map, b_map, c_map
        if tid == 0:
            tensor_map_in_place(smem, base + MAPS, a_map, a)
            tensor_map_in_place(smem, base + MAPS + MAP, b_map, b)
            if STORES_WITH_TMA:
                tensor_map_in_place(smem, base + MAPS + 2 * MAP, c_map, c)
        cuda.syncthreads()
        a_tensor_map, b_tensor_map, c_tensor_map = 0, 0, 0
        cta = (cuda.blockIdx.z * cuda.gridDim.y + cuda.blockIdx.y) * cuda.gridDim.x
        slot = MAP_COUNT * (cta + cuda.blockIdx.x)
        if tid < 32:  # a warp's instruction; tid 0, which issues the copies, is in it
            a_tensor_map = publish_tensor_map(workspace, slot, smem, base + MAPS)
            b_tensor_map = publish_tensor_map(workspace, slot + 1, smem, base + MAPS + MAP)
        if STORES_WITH_TMA and FIRST <= tid < FIRST + 32:  # the warp of the thread that stores
            c_tensor_map = publish_tensor_map(workspace, slot + 2, smem, base + MAPS + 2 * MAP)
        return a_tensor_map, b_tensor_map, c_tensor_map

    @cuda.jit(device=True)
    def init_barriers(smem, base, tid):
        # TMA: every stage's mbarrier initialised before any thread waits on one
        # (with a producer, "free" ones too, each phase an arrival of every consumer thread)
        if tid == 0:
            for s in range(STAGES):
                mbarrier_init(smem, barrier_of(base, s), 1)
                if PRODUCER:
                    mbarrier_init(smem, free_barrier_of(base, s), CONSUMERS)
        cuda.syncthreads()

    @cuda.jit(device=True)
    def copy_stage(smem, base, stage, k0, a_map, b_map, m0, n0, batch):
        # one thread: the TMA copies of the slice at k0 into buffer ``stage``, expected on its
        # barrier first
        barrier = barrier_of(base, stage)
        mbarrier_expect_bytes(smem, barrier, STAGE_BYTES)
        copy_a(smem, base + stage * A_STAGE, a_map, m0, k0, batch, barrier)
        copy_b(smem, base + B_BASE + stage * B_STAGE, b_map, n0, k0, batch, barrier)

    @cuda.jit(device=True)
    def slice_step(acc, frag, smem, base, t, parity, t_first, k_tiles, a, a0, stride_am,
                   stride_ak, b, b0, stride_bk, stride_bn, m_left, n_left, K, tid, a_map, b_map,
                   m0, n0, batch):  # fmt: skip
        # Slice t of this CTA's k_tiles, slice t_first + t of the product. Every warpgroup is
        # done with slice t - 1 - IN_FLIGHT (the slice multipliers leave at most IN_FLIGHT
        # slices' wgmmas pending), whose buffer slice t + LOOKAHEAD refills, once slice t has
        # landed and is visible to the tensor cores.
        ahead = t + LOOKAHEAD
        stage = t % STAGES
        k_ahead = (t_first + ahead) * SLICE_K
        if TMA:  # a barrier, one thread's copies, then the wait for slice t's bytes
            cuda.syncthreads()
            if tid == 0 and ahead < k_tiles:
                copy_stage(smem, base, ahead % STAGES, k_ahead, a_map, b_map, m0, n0,
                           batch)  # fmt: skip
            while not mbarrier_done(smem, barrier_of(base, stage), (t // STAGES) % 2):
                pass
        else:  # this thread's copies of t landed, made visible, a barrier, then its next copies
            copies_landed()
            async_proxy_fence()
            cuda.syncthreads()
            if ahead < k_tiles:
                load_stage(smem, base, ahead % STAGES, k_ahead, a, a0, stride_am, stride_ak, b,
                           b0, stride_bk, stride_bn, m_left, n_left, K, tid)  # fmt: skip
            cp_async_commit()
        multiply_slice(acc, frag, smem, base + stage * A_STAGE, base + B_BASE + stage * B_STAGE,
                       tid, parity)  # fmt: skip

    @cuda.jit(device=True)
    def advance(cursor, k_tiles, M, N, stride_ab, stride_am, stride_bb, stride_bn):
        # a cursor over a stream of slices (tile, slice of the tile, the tile's m0, n0, batch)
        # one slice on; the next tile of a persistent CTA's is grid x tiles on
        tile, k_slice, m0, n0, batch = cursor
        k_slice += 1
        if k_slice == k_tiles:
            k_slice, tile = 0, tile + cuda.gridDim.x
            m0, n0, batch, _, _ = origin_of(tile, cuda.blockIdx.y, M, N, stride_ab, stride_am,
                                            stride_bb, stride_bn)  # fmt: skip
        return tile, k_slice, m0, n0, batch

    @cuda.jit(device=True)
    def produce(smem, base, slices, cursor, k_tiles, a_map, b_map, M, N, stride_ab, stride_am,
                stride_bb, stride_bn):  # fmt: skip
        # The producer's one thread: slice g of the stream (at ``cursor``: one tile's k_tiles,
        # or a persistent CTA's tiles one after another) into buffer g % STAGES once every
        # consumer warpgroup has freed it (is done with slice g - STAGES), its bytes expected
        # on the buffer's "landed" barrier. It runs up to STAGES slices ahead of the
        # consumers, into the next tile while they finish one.
        for g in range(slices):
            stage = g % STAGES
            if g >= STAGES:
                while not mbarrier_done(smem, free_barrier_of(base, stage), (g // STAGES - 1) % 2):
                    pass
            _, k_slice, m0, n0, batch = cursor
            copy_stage(smem, base, stage, k_slice * SLICE_K, a_map, b_map, m0, n0, batch)
            if g + 1 < slices:
                cursor = advance(cursor, k_tiles, M, N, stride_ab, stride_am, stride_bb, stride_bn)

    @cuda.jit(device=True)
    def consume(acc, frag, smem, base, g, parity, g_first, tid):
        # A consumer: waits until slice g of the stream has landed and multiplies it; its
        # warpgroup then has at most slice g's wgmmas pending, so it frees slice
        # g - IN_FLIGHT's buffer where that slice is of this tile (from ``g_first``; a tile's
        # last slices are freed after its loop, by free_last). Every consumer thread arrives
        # (a warp's arrivals are one instruction), so the buffer is free only once every
        # thread has passed its wait (as the simulator's twins need).
        stage = g % STAGES
        while not mbarrier_done(smem, barrier_of(base, stage), (g // STAGES) % 2):
            pass
        multiply_slice(acc, frag, smem, base + stage * A_STAGE, base + B_BASE + stage * B_STAGE,
                       tid, parity)  # fmt: skip
        if g >= g_first + IN_FLIGHT:
            mbarrier_arrive(smem, free_barrier_of(base, (g - IN_FLIGHT) % STAGES), 1)

    @cuda.jit(device=True)
    def free_last(smem, base, g_first, k_tiles):
        # after a tile's wgmmas have completed: its last IN_FLIGHT slices' buffers freed
        for q in range(IN_FLIGHT):
            g = g_first + k_tiles - IN_FLIGHT + q
            if g >= g_first:
                mbarrier_arrive(smem, free_barrier_of(base, g % STAGES), 1)

    @cuda.jit(device=True)
    def consume_step(acc, frag, smem, base, t, parity, t_first, k_tiles, a, a0, stride_am,
                     stride_ak, b, b0, stride_bk, stride_bn, m_left, n_left, K, tid, a_map,
                     b_map, m0, n0, batch):  # fmt: skip
        # slice_step's place in the one-tile kernel with a producer (the copying arguments
        # are the producer's; one CTA per tile's k, so t_first is 0)
        consume(acc, frag, smem, base, t, parity, 0, tid)

    step = consume_step if PRODUCER else slice_step

    # registers capped for the CTAs an SM holds (cp.async: one, see ctas_per_sm; with a
    # producer: one, its pool parted by setmaxnreg)
    @kernel_jit(THREADS, config.ctas_per_sm(0, maps) if TMA else 1)
    def wgmma_kernel(a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn,
                     c, stride_cb, stride_cm, stride_cn, M, N, K, a_map, b_map, c_map,
                     workspace, partials, sync):  # fmt: skip
        (a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn, stride_cm,
         stride_cn, M, N, a_map, b_map) = as_computed(
            a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn, stride_cm,
            stride_cn, M, N, a_map, b_map)  # fmt: skip
        smem = cuda.shared.array(0, STORAGE)
        acc = cuda.local.array(ACC_SIZE, np.float32)
        frag = cuda.local.array(FRAG_SIZE, REGISTER_DTYPE)  # TF32: two sets of A's words
        zero_all(acc)
        base = aligned_start(smem)  # the tiles start at a 1024-byte boundary

        # -- which C tile (grouped order) ---------------------------------------------------
        m0, n0, batch, a0, b0 = origin(M, N, stride_ab, stride_am, stride_bb, stride_bn)
        tid = cuda.threadIdx.x

        # -- this CTA's slices: all, or under split-k range blockIdx.z's ----------------------
        k_tiles = (K + SLICE_K - 1) // SLICE_K
        t_first = 0
        if K_CTAS > 1:
            per_cta = (k_tiles + K_CTAS - 1) // K_CTAS
            t_first = cuda.blockIdx.z * per_cta
            k_tiles = min(per_cta, k_tiles - t_first)  # never empty: working_k_ctas

        # -- pipeline: LOOKAHEAD slices load ahead of the one multiplied (with a producer: up to
        # STAGES, as the consumers free them) ------------------------------------------------
        a_tensor_map, b_tensor_map, c_tensor_map = tensor_maps(
            smem, base, a, b, c, a_map, b_map, c_map, workspace, tid)  # fmt: skip
        if TMA:  # (always, with a producer)
            init_barriers(smem, base, tid)
        if PRODUCER:
            if tid < FIRST:
                fewer_registers()
                if tid == 0:
                    produce(smem, base, k_tiles, (cuda.blockIdx.x, 0, m0, n0, batch), k_tiles,
                            a_tensor_map, b_tensor_map, M, N, stride_ab, stride_am, stride_bb,
                            stride_bn)  # fmt: skip
                return
            more_registers()
            tid -= FIRST
        elif TMA:
            if tid == 0:
                for s in range(LOOKAHEAD):
                    if s < k_tiles:
                        copy_stage(smem, base, s, (t_first + s) * SLICE_K, a_tensor_map,
                                   b_tensor_map, m0, n0, batch)  # fmt: skip
        else:
            for s in range(LOOKAHEAD):
                if s < k_tiles:
                    load_stage(smem, base, s, (t_first + s) * SLICE_K, a, a0, stride_am,
                               stride_ak, b, b0, stride_bk, stride_bn, M - m0, N - n0, K,
                               tid)  # fmt: skip
                cp_async_commit()
        if REGISTER_A:  # slices in pairs: A's registers alternate between two sets
            for t in range(0, k_tiles - 1, 2):
                step(acc, frag, smem, base, t, 0, t_first, k_tiles, a, a0, stride_am,
                     stride_ak, b, b0, stride_bk, stride_bn, M - m0, N - n0, K, tid,
                     a_tensor_map, b_tensor_map, m0, n0, batch)  # fmt: skip
                step(acc, frag, smem, base, t + 1, 1, t_first, k_tiles, a, a0, stride_am,
                     stride_ak, b, b0, stride_bk, stride_bn, M - m0, N - n0, K,
                     tid, a_tensor_map, b_tensor_map, m0, n0, batch)  # fmt: skip
            if k_tiles % 2:
                step(acc, frag, smem, base, k_tiles - 1, 0, t_first, k_tiles, a, a0,
                     stride_am, stride_ak, b, b0, stride_bk, stride_bn, M - m0, N - n0,
                     K, tid, a_tensor_map, b_tensor_map, m0, n0, batch)  # fmt: skip
        else:
            for t in range(k_tiles):
                step(acc, frag, smem, base, t, 0, t_first, k_tiles, a, a0, stride_am,
                     stride_ak, b, b0, stride_bk, stride_bn, M - m0, N - n0, K, tid,
                     a_tensor_map, b_tensor_map, m0, n0, batch)  # fmt: skip
        wgmma_done()

        # -- split-k: the last CTA of the tile goes on with the sum of every range -----------
        if K_CTAS > 1:
            tile = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
            if not settle(acc, partials, sync, tile, cuda.blockIdx.z, K_CTAS, tid, tid, True):
                return

        # -- epilogue: accumulators -> float32 C tile in shared memory -> C, converted --------
        consumers_sync()  # every warpgroup is done with the pipeline's buffers
        write_c(c, batch * stride_cb, stride_cm, stride_cn, M, N, m0, n0,
                cuda.shared.array(0, FLOAT32), acc)  # fmt: skip

    # -- the persistent kernel (config.persistent CTAs per SM) ----------------------------------
    # Its CTAs loop over the tiles of their product (grid y): CTA x takes tiles x, x + grid x,
    # ... in the grouped order, each tile's k in slices as above. The slices of all its tiles
    # form one stream, g = (tile ordinal) x k_tiles + (slice of the tile), so the pipeline
    # runs on across tiles: while a tile's last slices are multiplied and its epilogue writes
    # C (from a C tile of its own in shared memory), the next tile's first slices load.
    # - The epilogue follows each tile's loop over its slices, not a branch inside it: ptxas
    #   serialises every wgmma of a loop whose body reads the accumulators on a branch.
    # - The copies follow a cursor (the next slice to load: its tile's origin and k), advanced
    #   after each slice's wgmmas are issued: a tile's origin takes 64-bit divisions (about
    #   0.4 us), once per tile and off the way from a landed slice to its wgmmas.

    @cuda.jit(device=True)
    def stream_of(M, N, K):
        # a persistent CTA's stream: (slices per tile, its tiles x, x + grid x, ...)
        tiles = ((M + BLOCK_M - 1) // BLOCK_M) * ((N + BLOCK_N - 1) // BLOCK_N)
        k_tiles = (K + SLICE_K - 1) // SLICE_K
        return k_tiles, (tiles - cuda.blockIdx.x + cuda.gridDim.x - 1) // cuda.gridDim.x

    @cuda.jit(device=True)
    def fill(smem, base, g, cursor, a, stride_ab, stride_am, stride_ak, b, stride_bb,
             stride_bk, stride_bn, M, N, K, tid, a_map, b_map):  # fmt: skip
        # slice g of this CTA's stream, at ``cursor``, into buffer g % STAGES: TMA (the
        # caller's one thread) or this thread's cp.async copies
        _, k_slice, m0, n0, batch = cursor
        k0 = k_slice * SLICE_K
        if TMA:
            copy_stage(smem, base, g % STAGES, k0, a_map, b_map, m0, n0, batch)
        else:
            load_stage(smem, base, g % STAGES, k0, a, batch * stride_ab + m0 * stride_am,
                       stride_am, stride_ak, b, batch * stride_bb + n0 * stride_bn, stride_bk,
                       stride_bn, M - m0, N - n0, K, tid)  # fmt: skip

    @cuda.jit(device=True)
    def stream_step(acc, frag, smem, base, g, parity, slices, cursor, k_tiles, a, stride_ab,
                    stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn, M, N, K, tid,
                    a_map, b_map):  # fmt: skip
        # Slice g of the stream, as slice_step: every warpgroup is done with slice
        # g - 1 - IN_FLIGHT, whose buffer slice g + LOOKAHEAD (at ``cursor``) refills, once
        # slice g has landed. Returns the cursor advanced.
        ahead, stage = g + LOOKAHEAD, g % STAGES
        if TMA:  # a barrier, one thread's copies, then the wait for slice g's bytes
            cuda.syncthreads()
            if tid == 0 and ahead < slices:
                fill(smem, base, ahead, cursor, a, stride_ab, stride_am, stride_ak, b,
                     stride_bb, stride_bk, stride_bn, M, N, K, tid, a_map, b_map)  # fmt: skip
            while not mbarrier_done(smem, barrier_of(base, stage), (g // STAGES) % 2):
                pass
        else:  # this thread's copies of g landed, made visible, a barrier, its next copies
            copies_landed()
            async_proxy_fence()
            cuda.syncthreads()
            if ahead < slices:
                fill(smem, base, ahead, cursor, a, stride_ab, stride_am, stride_ak, b,
                     stride_bb, stride_bk, stride_bn, M, N, K, tid, a_map, b_map)  # fmt: skip
            cp_async_commit()
        multiply_slice(acc, frag, smem, base + stage * A_STAGE, base + B_BASE + stage * B_STAGE,
                       tid, parity)  # fmt: skip
        return advance(cursor, k_tiles, M, N, stride_ab, stride_am, stride_bb, stride_bn)

    @kernel_jit(THREADS)  # one CTA per SM by registers: its TF32 form takes 146 at 128 x 64
    def persistent_kernel(a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk,
                          stride_bn, c, stride_cb, stride_cm, stride_cn, M, N, K, a_map, b_map,
                          c_map, workspace, partials, sync):  # fmt: skip
        (a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn, stride_cm,
         stride_cn, M, N, a_map, b_map) = as_computed(
            a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn, stride_cm,
            stride_cn, M, N, a_map, b_map)  # fmt: skip
        smem = cuda.shared.array(0, STORAGE)
        acc = cuda.local.array(ACC_SIZE, np.float32)
        frag = cuda.local.array(FRAG_SIZE, REGISTER_DTYPE)
        zero_all(acc)
        base = aligned_start(smem)
        tid = cuda.threadIdx.x

        # -- this CTA's stream: its tiles' slices, k_tiles each --------------------------------
        k_tiles, my_tiles = stream_of(M, N, K)
        slices = my_tiles * k_tiles

        # -- pipeline: the first LOOKAHEAD slices; the cursor then at slice LOOKAHEAD ---------
        a_tensor_map, b_tensor_map, c_tensor_map = tensor_maps(
            smem, base, a, b, c, a_map, b_map, c_map, workspace, tid)  # fmt: skip
        if TMA:
            init_barriers(smem, base, tid)
        m0, n0, batch, _, _ = origin_of(cuda.blockIdx.x, cuda.blockIdx.y, M, N, stride_ab,
                                        stride_am, stride_bb, stride_bn)  # fmt: skip
        cursor = (cuda.blockIdx.x, 0, m0, n0, batch)
        for s in range(LOOKAHEAD):
            if s < slices and (tid == 0 or not TMA):
                fill(smem, base, s, cursor, a, stride_ab, stride_am, stride_ak, b, stride_bb,
                     stride_bk, stride_bn, M, N, K, tid, a_tensor_map, b_tensor_map)  # fmt: skip
            if not TMA:
                cp_async_commit()
            cursor = advance(cursor, k_tiles, M, N, stride_ab, stride_am, stride_bb, stride_bn)

        for i in range(my_tiles):
            # -- tile i's slices: slice g multiplied while slice g + LOOKAHEAD loads (TF32:
            # slices in pairs, A's registers in two sets) -----------------------------------
            g0 = i * k_tiles
            if REGISTER_A:
                for t in range(0, k_tiles - 1, 2):
                    cursor = stream_step(acc, frag, smem, base, g0 + t, 0, slices, cursor,
                                         k_tiles, a, stride_ab, stride_am, stride_ak, b,
                                         stride_bb, stride_bk, stride_bn, M, N, K, tid,
                                         a_tensor_map, b_tensor_map)  # fmt: skip
                    cursor = stream_step(acc, frag, smem, base, g0 + t + 1, 1, slices, cursor,
                                         k_tiles, a, stride_ab, stride_am, stride_ak, b,
                                         stride_bb, stride_bk, stride_bn, M, N, K, tid,
                                         a_tensor_map, b_tensor_map)  # fmt: skip
                if k_tiles % 2:
                    cursor = stream_step(acc, frag, smem, base, g0 + k_tiles - 1, 0, slices,
                                         cursor, k_tiles, a, stride_ab, stride_am, stride_ak, b,
                                         stride_bb, stride_bk, stride_bn, M, N, K, tid,
                                         a_tensor_map, b_tensor_map)  # fmt: skip
            else:
                for t in range(k_tiles):
                    cursor = stream_step(acc, frag, smem, base, g0 + t, 0, slices, cursor,
                                         k_tiles, a, stride_ab, stride_am, stride_ak, b,
                                         stride_bb, stride_bk, stride_bn, M, N, K, tid,
                                         a_tensor_map, b_tensor_map)  # fmt: skip
            wgmma_done()

            # -- its epilogue, from a C tile of its own: the next slices keep loading
            # meanwhile; the next epilogue comes after at least one more slice's barrier ----
            m0, n0, batch, _, _ = origin_of(cuda.blockIdx.x + i * cuda.gridDim.x,
                                            cuda.blockIdx.y, M, N, stride_ab, stride_am,
                                            stride_bb, stride_bn)  # fmt: skip
            write_c(c, batch * stride_cb, stride_cm, stride_cn, M, N, m0, n0,
                    cuda.shared.array(0, FLOAT32), acc)  # fmt: skip
            zero_all(acc)

    # -- the persistent warp-specialised kernel (config.persistent 1 and config.producers 1) ----
    # The persistent kernel's stream of slices, copied by the producer's one thread (up to
    # STAGES slices ahead, across tiles) while the consumer warpgroups take the CTA's tiles in
    # turn: each tile's slices, then its epilogue, which stages C (converted) in boxes that
    # one thread hands to TMA stores; those drain while the next tile's wgmmas run, whose
    # first slices landed during the epilogue.

    @kernel_jit(THREADS, 1)  # one CTA per SM: its register pool parted by setmaxnreg
    def persistent_producer_kernel(a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk,
                                   stride_bn, c, stride_cb, stride_cm, stride_cn, M, N, K, a_map,
                                   b_map, c_map, workspace, partials, sync):  # fmt: skip
        (a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn, stride_cm,
         stride_cn, M, N, a_map, b_map) = as_computed(
            a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk, stride_bn, stride_cm,
            stride_cn, M, N, a_map, b_map)  # fmt: skip
        smem = cuda.shared.array(0, STORAGE)
        acc = cuda.local.array(ACC_SIZE, np.float32)
        frag = cuda.local.array(FRAG_SIZE, REGISTER_DTYPE)
        zero_all(acc)
        base = aligned_start(smem)
        tid = cuda.threadIdx.x

        # -- this CTA's stream: its tiles' slices, k_tiles each --------------------------------
        k_tiles, my_tiles = stream_of(M, N, K)

        # -- roles: the producer's thread walks the stream; the consumers take the tiles -------
        a_tensor_map, b_tensor_map, c_tensor_map = tensor_maps(
            smem, base, a, b, c, a_map, b_map, c_map, workspace, tid)  # fmt: skip
        init_barriers(smem, base, tid)
        if tid < FIRST:
            fewer_registers()
            if tid == 0:
                m0, n0, batch, _, _ = origin_of(cuda.blockIdx.x, cuda.blockIdx.y, M, N, stride_ab,
                                                stride_am, stride_bb, stride_bn)  # fmt: skip
                produce(smem, base, my_tiles * k_tiles, (cuda.blockIdx.x, 0, m0, n0, batch),
                        k_tiles, a_tensor_map, b_tensor_map, M, N, stride_ab, stride_am,
                        stride_bb, stride_bn)  # fmt: skip
            return
        more_registers()
        tid -= FIRST

        for i in range(my_tiles):
            # -- tile i's slices (TF32: A's registers alternate between two sets); its origin
            # computed while the first slice's wgmmas run -------------------------------------
            g0 = i * k_tiles
            consume(acc, frag, smem, base, g0, 0, g0, tid)
            m0, n0, batch, _, _ = origin_of(cuda.blockIdx.x + i * cuda.gridDim.x,
                                            cuda.blockIdx.y, M, N, stride_ab, stride_am,
                                            stride_bb, stride_bn)  # fmt: skip
            if REGISTER_A:
                for t in range(1, k_tiles - 1, 2):
                    consume(acc, frag, smem, base, g0 + t, 1, g0, tid)
                    consume(acc, frag, smem, base, g0 + t + 1, 0, g0, tid)
                if k_tiles % 2 == 0:
                    consume(acc, frag, smem, base, g0 + k_tiles - 1, 1, g0, tid)
            else:
                for t in range(1, k_tiles):
                    consume(acc, frag, smem, base, g0 + t, 0, g0, tid)
            wgmma_done()
            free_last(smem, base, g0, k_tiles)

            # -- its epilogue, staged for TMA stores: the producer meanwhile fills the freed
            # buffers with the next tile's slices ----------------------------------------------
            store_c(cuda.shared.array(0, C_STORAGE), c_tensor_map, m0, n0, batch, acc, tid)
            zero_all(acc)
        stores_done(tid)  # the last stores have read the staging buffer before the CTA ends

    if config.persistent and config.producers:
        return persistent_producer_kernel
    return persistent_kernel if config.persistent else wgmma_kernel


def _consumers_sync(config: WgmmaConfig):
    """Device function ``sync()``: a barrier of the warpgroups that multiply: the CTA's, or
    with a producer warpgroup (which has left) a named one of the consumers."""
    if not config.producers:

        @cuda.jit(device=True)
        def sync_cta():
            cuda.syncthreads()

        return sync_cta
    return named_barrier(EPILOGUE_BARRIER, config.consumer_threads)


def c_tile_line(cols: int, along_m: bool) -> int:
    """float32 elements per line of the epilogue's staged C tile of ``cols`` columns: padded so
    that a warp's stores of its accumulators hit distinct banks. Along n (C's rows contiguous)
    each thread stores pairs of columns, 8 bytes, a half-warp's 16 pairs on 4 lines 8 banks
    apart: 8 floats of padding; along m (``along_m``: the tile transposed) single elements, the
    warp's 32 on 8 lines 4 banks apart: 4."""
    return cols + (4 if along_m else 8)


def _c_writer(config: WgmmaConfig, out_dtype: np.dtype, c_mode: tuple, maps: str = "none"):
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
    consumers_sync = _consumers_sync(config)
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


def _c_tma_writer(config: WgmmaConfig, out_dtype: np.dtype, c_mode: tuple):
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
    consumers_sync = _consumers_sync(config)
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


def persistent_ctas(tiles: int, batch: int, per_sm: int) -> int:
    """A persistent grid's CTAs per product of ``batch`` of ``tiles`` tiles each: ``per_sm``
    CTAs per SM shared by the products, at least one each."""
    return min(tiles, max(1, per_sm * multiprocessors() // batch))


def persistent_rounds(tiles: int, batch: int, per_sm: int) -> int:
    """The tiles the busiest SM runs one after another in a persistent grid (its CTAs' waves
    times each CTA's tiles), against ``cdiv(tiles * batch, SMs)`` for one CTA per tile and SM:
    equal for one product; more where a batch leaves each product one CTA and those CTAs
    fill one wave and a bit of the next."""
    ctas = persistent_ctas(tiles, batch, per_sm)
    return cdiv(ctas * batch, per_sm * multiprocessors()) * cdiv(tiles, ctas)


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


def _converter(threads: int, extent_x: int, axis: str, parts: int):
    """Device function ``convert(smem, raw, part, values, tid)``: thread ``tid``'s share (of
    256) of an ``extent_x`` x ``TF32_TILE_K`` float32 tile as loaded (at element ``raw``,
    stored ``axis``-contiguous) written as its ``parts`` TF32 parts, k-major, part p at
    ``part + p * (the tile's elements)``; ``values``: 8 float32 of local scratch.

    Each thread reads runs of 4 elements along the contiguous axis (16-byte loads):

    - k-major: 8 consecutive threads read the 8 runs of one row x and write each run's parts
      as 16-byte stores at the same place of the part tiles (the layouts agree);
    - x-major: the 32 threads of a warp read 4 x at the 32 k, and write the parts as single
      elements, each of the 4 x a whole row of the part tile.

    Either way the 8 threads of a 16-byte access phase, or the 32 of a 4-byte one, hit
    distinct banks of the swizzled tiles. A thread's runs are its first plus 1024 elements
    (32 rows or one x chunk) apiece, and an x-major run's 4 stores differ by a constant and an
    xor with a per-thread value: checked here against ``tile_slot`` for every thread, so the k
    loop spends no index arithmetic on them."""
    if threads != 256:
        raise ValueError(f"the conversion runs 256 threads per CTA; got {threads}")
    runs = extent_x // 32  # 16-byte runs per thread: 8 per row of 32 k, or 32 per 4 x
    PART = tile_bytes(extent_x) // 4
    along_k = axis == "k"

    def thread_terms(tid):
        """(raw run, part run, xor value) of thread ``tid``'s first run: run i is at raw +
        1024 i; element j of it goes to part + 1024 i + 32 j + 4 (value ^ j) (x-major) or part
        + 1024 i + j (k-major)."""
        if along_k:
            x, piece = tid >> 3, tid & 7
            start = 32 * x + 4 * (piece ^ (x & 7))
            return start, start, 0
        warp, k = tid >> 5, tid & 31
        raw_start = 32 * k + 4 * (warp ^ (k & 7))
        return raw_start, 128 * warp + (k & 3), (k >> 2) ^ (4 * (warp & 1))

    raw_slot, part_slot = tile_slot(axis, 4), tile_slot("k", 4)
    for tid in range(threads):  # the terms give every element's slot
        raw_start, part_start, value = thread_terms(tid)
        for i in range(runs):
            for j in range(4):
                if along_k:
                    x, k = tid // 8 + 32 * i, 4 * (tid % 8) + j
                    part_here = part_start + 1024 * i + j
                else:
                    x, k = 4 * (tid // 32 + 8 * i) + j, tid % 32
                    part_here = part_start + 1024 * i + 32 * j + 4 * (value ^ j)
                assert raw_start + 1024 * i + j == raw_slot(x, k)
                assert part_here == part_slot(x, k)
    part_of = operand_part("tf32")
    if not SIMULATED:
        thread_terms = cuda.jit(device=True)(thread_terms)

    @cuda.jit(device=True)
    def run_along_k(smem, raw, part, value, values, i):
        load_vector(values, 0, smem, raw + 1024 * i)
        for p in range(parts):
            for j in range(4):
                values[4 + j] = part_of(values[j], p, parts)
            store_vector(smem, part + p * PART + 1024 * i, values, 4)

    @cuda.jit(device=True)
    def run_along_x(smem, raw, part, value, values, i):
        load_vector(values, 0, smem, raw + 1024 * i)
        for j in range(4):
            here = part + 1024 * i + 32 * j + 4 * (value ^ j)
            for p in range(parts):
                # the index as unsigned: Numba wraps signed ones around (a compare, a select)
                smem[np.uint64(here + p * PART)] = part_of(values[j], p, parts)

    all_runs = unrolled(run_along_k if along_k else run_along_x, runs,
                        "smem, raw, part, value, values")  # fmt: skip

    @cuda.jit(device=True)
    def convert(smem, raw, part, values, tid):
        raw_start, part_start, value = thread_terms(tid)
        all_runs(smem, raw + raw_start, part + part_start, value, values)

    return convert


@functools.cache
def _converting_kernel(config: WgmmaConfig, preset: Preset, out_dtype, a_mode: tuple,
                       b_mode: tuple, c_mode: tuple):  # fmt: skip
    """The kernel for float32 operands under a TF32 preset (one part: rounded; two: split, the
    three partial products added), specialised for one config, preset, output dtype, operand
    layouts and C's (``c_mode``).

    1. *Which tile*, as the 16-bit kernel.
    2. *Loading*: ``stages`` shared-memory buffers of one 32-k slice of A and B as float32,
       swizzled, each stored as its operand lies, filled by ``cp.async`` as the 16-bit
       kernel's; ``stages - 1`` slices load ahead of the one converted.
    3. *Converting*: each slice is written once more, as its TF32 parts (hi = the float32 with
       its 13 low bits cleared, lo = the remainder rounded; one part: rounded to nearest, ties
       away), k-major (TF32 wgmma has no transpose), into one of two part buffers. The CTA
       converts slice t + 1 while the tensor cores multiply slice t.
    4. *Multiply*: per slice, each warpgroup issues one ``wgmma.m64nNk8`` per partial product
       and 8 k (A's part p by B's part q, the smallest products first), commits them as one
       group and waits for the previous slice's group before its part buffer is rewritten.
       The split preset keeps hi x hi apart from the two corrections: its accumulators
       restart every ``PROMOTE_SLICES`` slices (wgmma's scale-d = 0) and are added into
       float32 totals once the last of those slices' groups completes (the tensor cores'
       truncating accumulation then acts within 64 k only, as within ``mma``'s k-tiles);
       the corrections, 2^-10 of hi x hi or less, accumulate over all of k.
    5. *Epilogue*: the corrections join the totals where they are a number (an infinite
       operand makes them NaN, never hi x hi: ``mma.correction_adder``); then as the 16-bit
       kernel's, from the totals or the accumulators.

    Per slice t: the wgmmas of t go out, the copies of slice t + stages - 1 (into the buffer
    of t - 1, converted already), a wait for slice t + 1's copies and for the wgmmas of t - 1,
    a barrier, the conversion of t + 1 (made visible to the tensor cores by
    ``fence.proxy.async``), and a barrier before t + 1's wgmmas.
    """
    BLOCK_M, BLOCK_N, STAGES = config.block_m, config.block_n, config.stages
    THREADS, PARTS = config.threads, preset.parts
    PROMOTE = PARTS > 1
    ACC_SIZE = BLOCK_N // 2
    TOTAL_SIZE = ACC_SIZE if PROMOTE else 4
    PART_A = tuple(p for p, _ in preset.products)
    PART_B = tuple(q for _, q in preset.products)
    HI = len(PART_A) - 1  # the last product, hi x hi; the ones before it are corrections
    A_TILE, B_TILE = tile_bytes(BLOCK_M) // 4, tile_bytes(BLOCK_N) // 4  # float32 elements
    B_RAW = STAGES * A_TILE  # the loaded slices: A's tiles, then B's
    A_PARTS = STAGES * (A_TILE + B_TILE)  # then the part buffers: A's, then B's
    B_PARTS = A_PARTS + PART_BUFFERS * PARTS * A_TILE
    a_axis, b_axis = a_mode[0], b_mode[0]
    A_WARPGROUP = block_start("k", ROWS_PER_WARPGROUP, 0, 4)
    K_STEP = block_start("k", 0, 1, 4)  # elements per 8 k of a k-major tile
    load_stage = _stage_loader(config, FLOAT32, a_mode, b_mode)
    convert_a = _converter(THREADS, BLOCK_M, a_axis, PARTS)
    convert_b = _converter(THREADS, BLOCK_N, b_axis, PARTS)
    multiply = wgmma("tf32", BLOCK_N, "k", "k")
    loaded = cp_async_wait(STAGES - 2)  # the oldest slice not yet converted has landed
    wgmma_in_flight, wgmma_done = wgmma_wait(IN_FLIGHT), wgmma_wait(0)
    origin = tile_origin(BLOCK_M, BLOCK_N, config.group_m)
    zero_all = accumulator_zeroer(ACC_SIZE)
    write_c = _c_writer(config, out_dtype, c_mode)

    @cuda.jit(device=True)
    def convert_stage(smem, base, stage, buffer, values, tid):
        # the loaded slice in ``stage`` -> its parts in part buffer ``buffer``
        convert_a(smem, base + stage * A_TILE, base + A_PARTS + buffer * PARTS * A_TILE, values,
                  tid)  # fmt: skip
        convert_b(smem, base + B_RAW + stage * B_TILE, base + B_PARTS + buffer * PARTS * B_TILE,
                  values, tid)  # fmt: skip

    @cuda.jit(device=True)
    def k_step(acc, smem, a_parts, b_parts, fresh, q, kk):
        # partial product q, k step kk; the first wgmma of a ``fresh`` slice restarts acc
        multiply(acc, smem, a_parts + PART_A[q] * A_TILE + kk * K_STEP,
                 b_parts + PART_B[q] * B_TILE + kk * K_STEP,
                 not fresh or kk > 0 or (q != 0 and q != HI))  # fmt: skip

    k_steps = TF32_TILE_K // wgmma_k("tf32")
    multiply_corrections = unrolled(
        k_step, [(q, kk) for q in range(HI) for kk in range(k_steps)],
        "acc, smem, a_parts, b_parts, fresh",
    )  # fmt: skip
    multiply_hi = unrolled(k_step, [(HI, kk) for kk in range(k_steps)],
                           "acc, smem, a_parts, b_parts, fresh")  # fmt: skip

    @cuda.jit(device=True)
    def promote(total, acc, piece):
        for e in range(4):
            total[piece * 4 + e] += acc[piece * 4 + e]

    promote_all = unrolled(promote, ACC_SIZE // 4, "total, acc")
    add_corrections = unrolled(correction_adder(), ACC_SIZE // 4, "total, corrections")

    @kernel_jit(THREADS)
    def wgmma_converting_kernel(a, stride_ab, stride_am, stride_ak, b, stride_bb, stride_bk,
                                stride_bn, c, stride_cb, stride_cm, stride_cn, M, N,
                                K):  # fmt: skip
        smem = cuda.shared.array(0, FLOAT32)
        acc = cuda.local.array(ACC_SIZE, np.float32)  # one part: the product; else corrections
        acc_hi = cuda.local.array(TOTAL_SIZE, np.float32)  # a split's hi x hi
        total = cuda.local.array(TOTAL_SIZE, np.float32)
        values = cuda.local.array(8, np.float32)  # the conversion's registers
        zero_all(acc)
        if PROMOTE:
            zero_all(acc_hi)
            zero_all(total)
        base = aligned_start(smem)  # the tiles start at a 1024-byte boundary

        # -- which C tile (grouped order); this warpgroup's rows of it -----------------------
        m0, n0, batch, a0, b0 = origin(M, N, stride_ab, stride_am, stride_bb, stride_bn)
        tid = cuda.threadIdx.x
        warpgroup = tid // WARPGROUP

        # -- prologue: stages - 1 slices loading; slice 0 converted --------------------------
        k_tiles = (K + TF32_TILE_K - 1) // TF32_TILE_K
        for s in range(STAGES - 1):
            if s < k_tiles:
                load_stage(smem, base, s, s * TF32_TILE_K, a, a0, stride_am, stride_ak,
                           b, b0, stride_bk, stride_bn, M - m0, N - n0, K, tid)  # fmt: skip
            cp_async_commit()
        loaded()
        cuda.syncthreads()
        convert_stage(smem, base, 0, 0, values, tid)
        async_proxy_fence()
        cuda.syncthreads()

        for t in range(k_tiles):
            # -- multiply slice t (its parts in buffer t % 2) ---------------------------------
            buffer = t % PART_BUFFERS
            wgmma_fence()
            a_parts = base + A_PARTS + buffer * PARTS * A_TILE + warpgroup * A_WARPGROUP
            b_parts = base + B_PARTS + buffer * PARTS * B_TILE
            fresh = PROMOTE and t % PROMOTE_SLICES == 0
            if PROMOTE:
                multiply_corrections(acc, smem, a_parts, b_parts, False)
                multiply_hi(acc_hi, smem, a_parts, b_parts, fresh)
            else:
                multiply_hi(acc, smem, a_parts, b_parts, fresh)
            wgmma_commit()

            # -- load slice t + stages - 1; convert slice t + 1 meanwhile ---------------------
            ahead = t + STAGES - 1
            if ahead < k_tiles:
                load_stage(smem, base, ahead % STAGES, ahead * TF32_TILE_K, a, a0, stride_am,
                           stride_ak, b, b0, stride_bk, stride_bn, M - m0, N - n0, K,
                           tid)  # fmt: skip
            cp_async_commit()
            loaded()  # slice t + 1 (this thread's copies)
            wgmma_in_flight()  # slice t - 1's wgmmas, which read the other part buffer
            cuda.syncthreads()
            if t + 1 < k_tiles:
                convert_stage(smem, base, (t + 1) % STAGES, (t + 1) % PART_BUFFERS, values, tid)
                async_proxy_fence()
            if PROMOTE and (t % PROMOTE_SLICES == PROMOTE_SLICES - 1 or t + 1 == k_tiles):
                wgmma_done()
                promote_all(total, acc_hi)
            cuda.syncthreads()
        wgmma_done()
        if PROMOTE:
            add_corrections(total, acc)

        # -- epilogue ------------------------------------------------------------------------
        write_c(c, batch * stride_cb, stride_cm, stride_cn, M, N, m0, n0, smem,
                total if PROMOTE else acc)  # fmt: skip

    return wgmma_converting_kernel


WGMMA_PRESETS = ("BF16_BF16_F32", "F16_F16_F32", "TF32_TF32_F32", "TF32_TF32_F32_X3")


def wgmma_takes(preset: Preset, dtype) -> bool:
    """Whether the wgmma kernels compute ``preset`` on operands of ``dtype``: 16-bit ones at
    their own precision, float32 ones as TF32 (one or two parts)."""
    sixteen_bit = np.dtype(dtype).itemsize == 2
    return preset.name in WGMMA_PRESETS and sixteen_bit == (preset.operand != "tf32")


def plan_wgmma(config: WgmmaConfig | None, preset: Preset, a: MatrixDesc, b: MatrixDesc,
               c: MatrixDesc, tensor_maps: str = "host", workspace=None, scratch=None
               ) -> KernelLaunch:  # fmt: skip
    """The launch of a ``wgmma`` kernel on validated operands: C (M x N) = A (M x K) @
    B (K x N) under ``preset`` for each of ``c.batch`` products (``config`` None: the default
    for the kernel chosen).

    1. 16-bit operands at ``BF16_BF16_F32`` / ``F16_F16_F32``: the kernel reads both as they
       lie.
    2. Float32 operands at ``TF32_TF32_F32`` where B is k-major: A from registers, B as it
       lies; where only A is, the same kernel computes C^T = B^T A^T (``transposed``: B^T
       goes through registers, A^T is the k-major one; the arguments stay A, B, C).
    3. Otherwise (``TF32_TF32_F32_X3``, or neither operand k-major) the converting kernel.

    In cases 1 and 2 TMA fills the tiles where it can copy both operands (a contiguous axis,
    16-byte aligned, strides multiples of 16 bytes, no broadcast batch), through tensor maps
    the host encodes (``tensor_maps`` "host": the operands' addresses are real) or the
    kernel builds from templates ("device": XLA's kernel call; ``workspace(nbytes)`` gives the
    uint8 buffer, as a descriptor, where it publishes them); else, or with "none",
    ``cp.async`` copies.

    With ``config.producers`` = 1, warpgroup 0's first thread issues the copies and the other
    warpgroups only multiply (TMA only: ``ValueError`` where it cannot copy the operands).
    With ``config.persistent`` > 0, that many CTAs per SM (at least one per product of the
    batch) loop over the tiles (:func:`_kernel`). With ``config.k_ctas`` > 1 (the default
    config's where the tiles are few and ``scratch`` is given), that many CTAs share each
    tile's k loop (``kernels.split_k``; fewer where
    fewer get a range: ``split_k.working_k_ctas``):
    ``scratch(name, shape, dtype)`` gives the descriptors of their float32 ``"partials"``
    and of the uint32 counters ``"sync"`` (zero at launch; the kernel leaves them zero)."""
    if tensor_maps not in ("host", "device", "none"):
        raise ValueError(f"tensor_maps is 'host', 'device' or 'none'; got {tensor_maps!r}")
    if tensor_maps == "device" and workspace is None:
        raise ValueError("tensor_maps='device' needs a workspace (where the CTAs publish them)")
    if not wgmma_takes(preset, a.dtype):
        raise ValueError(
            "the wgmma kernels take bfloat16 or float16 operands at their own precision and "
            f"float32 ones at TF32_TF32_F32 or TF32_TF32_F32_X3; got {a.dtype} operands at "
            f"{preset.name}"
        )
    storage = storage_dtype(a.dtype)
    a, b = storage_view(a, storage), storage_view(b, storage)
    out_dtype = np.dtype(c.dtype)
    if c.dtype.itemsize == 2:
        c = storage_view(c, UINT16)
    converting = storage == FLOAT32 and preset.parts > 1
    transposed = False  # the kernel computes C^T = B^T A^T
    if storage == FLOAT32 and not converting and operand_mode(b, False)[0] != "k":
        transposed = operand_mode(a, True)[0] == "k"
        converting = not transposed
    # the product as the kernel computes it: X (M x K) @ Y (K x N) -> D
    x, y, d = (b.transposed(), a.transposed(), c.transposed()) if transposed else (a, b, c)
    M, N = x.shape[0], y.shape[1]
    parts = preset.parts if converting else 0
    K = x.shape[1]
    chosen = config is None
    config = config or default_wgmma_config(M, N, K, c.batch, parts, storage.itemsize,
                                            scratch is not None)  # fmt: skip
    config.check(storage, converting)
    config = working_config(config, cdiv(K, tile_k(storage.itemsize)), scratch)
    x_mode, y_mode, d_mode = operand_mode(x, True), operand_mode(y, False), operand_mode(d, True)
    maps = "none" if converting else tensor_maps
    if maps != "none":
        specs = (tensor_map_spec(x, x_mode[0], config.block_m, True, c.batch),
                 tensor_map_spec(y, y_mode[0], config.block_n, False, c.batch))  # fmt: skip
        if any(spec.problem() is not None for spec in specs):
            maps = "none"
    tiles = cdiv(M, config.block_m) * cdiv(N, config.block_n)
    if (chosen and config == DEFAULT_WGMMA_CONFIG and storage == UINT16 and maps != "none"
            and d_mode[0] == "k" and c_store_problem(d, "k", config, c.batch) is None
            and persistent_rounds(tiles, c.batch, 1) <= cdiv(tiles * c.batch, multiprocessors())
            ):  # fmt: skip
        config = WARP_SPECIALISED_WGMMA_CONFIG  # the same tiles, persistent, TMA both ways
    grid = (tiles, c.batch, config.k_ctas)
    if config.persistent:
        grid = (persistent_ctas(tiles, c.batch, config.persistent), c.batch, 1)
    if config.producers and maps == "none":
        raise ValueError(
            f"{config.label()}: WgmmaConfig.producers = 1 needs operands TMA can copy (a "
            "contiguous axis, 16-byte aligned, strides multiples of 16 bytes, no broadcast "
            "batch); use producers = 0 for these"
        )
    if config.stores_with_tma:  # C's map, for the stores
        if (problem := c_store_problem(d, d_mode[0], config, c.batch)) is not None:
            raise ValueError(
                f"{config.label()}: the persistent warp-specialised kernel stores the output "
                f"with TMA, which cannot write this one ({problem}); use persistent = 0 or "
                "producers = 0 for it"
            )
        specs, descs = (*specs, c_tensor_map_spec(d, d_mode[0], config, c.batch)), (x, y, d)
    else:
        descs = (x, y)
    # the kernel's a_map, b_map, c_map (C's only with TMA stores) and workspace
    map_args, workspace_arg = [0, 0, 0], 0
    if maps == "host":
        map_args[: len(specs)] = [TensorMapArg(spec, desc.name, desc.span)
                                  for spec, desc in zip(specs, descs)]  # fmt: skip
    elif maps == "device":
        map_args[: len(specs)] = [tensor_map_template(spec) for spec in specs]
        workspace_arg = workspace(config.map_count * MAP_BYTES * grid[0] * grid[1] * grid[2])
    if transposed:  # A's and B's maps in the caller's order
        map_args[:2] = map_args[1::-1]
    extra = (*map_args, workspace_arg)
    shared = config.shared_bytes(parts, maps)
    if shared > STATIC_SHARED_LIMIT and shared > (limit := shared_memory_limit()):
        raise ValueError(
            f"{config.label()} needs {shared} bytes of shared memory per block; this device "
            f"allows {limit}"
        )
    if converting:
        kernel = _converting_kernel(config, preset, out_dtype, x_mode, y_mode, d_mode)
        extra = ()
    else:
        kernel = _kernel(config, preset.operand, out_dtype, x_mode, y_mode, d_mode, transposed,
                         maps)  # fmt: skip
        split = split_buffers(config.k_ctas, grid[0] * grid[1],
                              config.threads * config.block_n // 2, FLOAT32, scratch)  # fmt: skip
        extra = (*extra, *split)
    # the arguments in the caller's order (A, B, C: XLA's buffers; M, N, K of A @ B), whatever
    # the kernel makes of them
    return kernel_launch(kernel, grid, config.threads, shared,
                         (a, a.batch_stride, *a.strides, b, b.batch_stride, *b.strides,
                          c, c.batch_stride, *c.strides,
                          a.shape[0], b.shape[1], a.shape[1], *extra),
                         tma=maps != "none")  # fmt: skip
