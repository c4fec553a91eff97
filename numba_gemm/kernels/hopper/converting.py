"""The converting kernel: float32 operands rewritten in shared memory as their TF32 parts
(rounded, or split for 3xTF32) before the tensor cores multiply them.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from ...launch import (
    SIMULATED,
)
from ...precision import FLOAT32, Preset
from ..common import (
    kernel_jit,
    unrolled,
)
from ..fragments import operand_part
from ..mma import (
    accumulator_zeroer,
    correction_adder,
    tile_origin,
)
from ..ptx import cp_async_commit, cp_async_wait, load_vector, store_vector
from ..warpgroup import (
    TF32_TILE_K,
    WARPGROUP,
    aligned_start,
    async_proxy_fence,
    block_start,
    tile_bytes,
    tile_slot,
    wgmma,
    wgmma_commit,
    wgmma_fence,
    wgmma_k,
    wgmma_wait,
)
from .config import (
    IN_FLIGHT,
    PART_BUFFERS,
    PROMOTE_SLICES,
    ROWS_PER_WARPGROUP,
    WgmmaConfig,
)
from .epilogue import c_writer
from .mainloop import stage_loader


def converter(threads: int, extent_x: int, axis: str, parts: int):
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
def converting_kernel_for(config: WgmmaConfig, preset: Preset, out_dtype, a_mode: tuple,
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
    load_stage = stage_loader(config, FLOAT32, a_mode, b_mode)
    convert_a = converter(THREADS, BLOCK_M, a_axis, PARTS)
    convert_b = converter(THREADS, BLOCK_N, b_axis, PARTS)
    multiply = wgmma("tf32", BLOCK_N, "k", "k")
    loaded = cp_async_wait(STAGES - 2)  # the oldest slice not yet converted has landed
    wgmma_in_flight, wgmma_done = wgmma_wait(IN_FLIGHT), wgmma_wait(0)
    origin = tile_origin(BLOCK_M, BLOCK_N, config.group_m)
    zero_all = accumulator_zeroer(ACC_SIZE)
    write_c = c_writer(config, out_dtype, c_mode)

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
