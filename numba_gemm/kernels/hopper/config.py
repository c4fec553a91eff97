"""The Hopper kernels' tile configuration (:class:`WgmmaConfig`), its constants and the
configs the library ships, with the rule that picks one for a product
(:func:`default_wgmma_config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...launch import (
    SIMULATED,
    cdiv,
    multiprocessors,
)
from ...launch.tensor_maps import MAP_BYTES
from ..common import (
    REGISTERS_PER_SM,
    VECTOR_BYTES,
    check_field_range,
    int_fields,
    kernel_registers,
)
from ..mma import (
    UINT16,
)
from ..split_k import check_k_ctas, split_into_wave
from ..tma import (
    BARRIER_BYTES,
)
from ..warpgroup import (
    ALIGNMENT,
    WARPGROUP,
    tile_bytes,
    tile_k,
)

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
    from one tile into the next (:func:`kernel_for`'s persistent kernel; not the converting
    kernel, one CTA per tile's k); ``producers``: 0, every thread both waits for the copies
    and multiplies, or 1, one more warpgroup whose first thread only issues the TMA copies
    while the others only multiply (warp specialisation: :func:`kernel_for`, operands TMA can
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
        epilogue hands C to TMA stores through a staging buffer (:func:`c_tma_writer`)."""
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


def c_tile_line(cols: int, along_m: bool) -> int:
    """float32 elements per line of the epilogue's staged C tile of ``cols`` columns: padded so
    that a warp's stores of its accumulators hit distinct banks. Along n (C's rows contiguous)
    each thread stores pairs of columns, 8 bytes, a half-warp's 16 pairs on 4 lines 8 banks
    apart: 8 floats of padding; along m (``along_m``: the tile transposed) single elements, the
    warp's 32 on 8 lines 4 banks apart: 4."""
    return cols + (4 if along_m else 8)
