"""The ``wgmma`` kernels: one CTA per tile, persistent, and persistent warp-specialised, built
from one factory (:func:`kernel_for`).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from ...launch.tensor_maps import MAP_BYTES
from ...precision import FLOAT32
from ..common import (
    kernel_jit,
)
from ..mma import (
    UINT16,
    accumulator_zeroer,
    storage_dtype,
    tile_origin,
    work_origin,
)
from ..ptx import cp_async_commit, cp_async_wait
from ..split_k import settler
from ..tma import (
    BARRIER_BYTES,
    mbarrier_arrive,
    mbarrier_done,
    mbarrier_expect_bytes,
    mbarrier_init,
    publish_tensor_map,
    tensor_map_in_place,
)
from ..warpgroup import (
    OPERAND_BYTES,
    REGISTER_DTYPE,
    REGISTER_WORDS,
    aligned_start,
    async_proxy_fence,
    set_max_registers,
    tile_bytes,
    tile_k,
    wgmma_k,
    wgmma_wait,
)
from .config import (
    IN_FLIGHT,
    PRODUCER_REGISTERS,
    WgmmaConfig,
)
from .epilogue import c_tma_writer, c_writer, consumers_barrier
from .mainloop import register_slice_multiplier, shared_slice_multiplier, stage_loader, tile_copier


@functools.cache
def kernel_for(config: WgmmaConfig, operand: str, out_dtype, a_mode: tuple, b_mode: tuple,
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
    load_stage = stage_loader(config, STORAGE, a_mode, b_mode)
    copy_a = tile_copier(a_mode[0], BLOCK_M, SIZE)
    copy_b = tile_copier(b_mode[0], BLOCK_N, SIZE)
    if REGISTER_A:
        multiply_slice = register_slice_multiplier(config, a_mode[0])
    else:
        multiply_slice = shared_slice_multiplier(config, operand, a_mode[0], b_mode[0])
    copies_landed = cp_async_wait(LOOKAHEAD - 1)
    wgmma_done = wgmma_wait(0)
    origin = tile_origin(BLOCK_M, BLOCK_N, GROUP_M)
    zero_all = accumulator_zeroer(ACC_SIZE)
    write_c = c_writer(config, out_dtype, c_mode, maps)
    C_STORAGE = storage_dtype(out_dtype)
    if STORES_WITH_TMA:
        store_c, stores_done = c_tma_writer(config, out_dtype, c_mode)
    K_CTAS = config.k_ctas
    settle = settler(ACC_SIZE, THREADS)
    origin_of = work_origin(BLOCK_M, BLOCK_N, GROUP_M)
    consumers_sync = consumers_barrier(config)
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
