"""Split-k across CTAs: several CTAs share one C tile's k loop, the last to finish adds.

A product whose output has fewer tiles than the GPU has room for CTAs (a decode step's
skinny product, a small output over a long k) leaves most SMs idle, or each SM with too few
bytes in flight. ``k_ctas`` CTAs per tile then run ``k_ctas`` consecutive ranges of the k
loop, each a whole number of the kernel's k steps (grid z is the range), and meet at the end:

1. each CTA writes its float32 (float64) accumulators, in the kernel's own register layout,
   to its slot of ``partials`` (a scratch buffer: one tile of ``ACC_SIZE x THREADS`` values
   per CTA, element ``i`` of thread ``t`` at ``i * THREADS + t``, so that a warp's stores are
   consecutive);
2. a fence and a barrier, then one thread adds 1 to the tile's counter in ``sync`` (a
   uint32 scratch buffer, zero between launches);
3. the CTA that sees ``k_ctas - 1`` there is the last: it sets the counter back to zero (for
   the next launch), reads the slots through L2 and adds them in range order (its own slot
   too), so the result is the same whichever CTA finishes last; then it runs the kernel's
   epilogue on the total. The others exit.

Each range is ``ceil(steps / k_ctas)`` steps, the last what is left, none empty
(:func:`working_k_ctas`). No CTA waits for another, so the scheme needs no co-residency.
Host side: :func:`choose_k_ctas` (how many, from the tiles and the device).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numba import cuda

from ..launch import cdiv
from .common import unrolled
from .ptx import load_from_l2

__all__ = [
    "MAX_K_CTAS",
    "MIN_STEPS_PER_CTA",
    "choose_k_ctas",
    "split_into_wave",
    "working_k_ctas",
    "check_k_ctas",
    "working_config",
    "split_buffers",
    "settler",
]

MAX_K_CTAS = 16  # a tile's partials are read back by one CTA: beyond this the sum dominates
MIN_STEPS_PER_CTA = 4  # k steps per CTA at the least: fewer leave the pipeline empty


def choose_k_ctas(tiles: int, k_steps: int, slots: int) -> int:
    """CTAs per C tile for a launch of ``tiles`` tiles whose k loop is ``k_steps`` steps,
    on a GPU with room for ``slots`` CTAs at once (SMs x CTAs per SM): the most that keep
    the launch within one wave (``tiles * k_ctas <= slots``), each with at least
    :data:`MIN_STEPS_PER_CTA` steps, at most :data:`MAX_K_CTAS`; 1 where the tiles fill half
    the slots already (a second wave of partial sums would cost more than the idle SMs)."""
    if 2 * tiles >= slots:
        return 1
    return working_k_ctas(max(1, min(slots // tiles, k_steps // MIN_STEPS_PER_CTA, MAX_K_CTAS)),
                          k_steps)  # fmt: skip


def split_into_wave(config, M: int, N: int, K: int, batch: int, step_k: int, slots: int):
    """``config`` (its ``block_m x block_n`` tiles over an M x N x K product, ``batch`` of
    them, k in steps of ``step_k``) with the CTAs per tile :func:`choose_k_ctas` gives for a
    GPU with room for ``slots`` CTAs at once."""
    tiles = cdiv(M, config.block_m) * cdiv(N, config.block_n) * batch
    return replace(config, k_ctas=choose_k_ctas(tiles, cdiv(K, step_k), slots))


def working_k_ctas(k_ctas: int, k_steps: int) -> int:
    """The CTAs per tile that get a range of a ``k_steps``-step loop when ``k_ctas`` are
    asked for: ranges of ``ceil(k_steps / k_ctas)`` steps may cover k before the last CTAs
    (8 steps in 5 asked: 4 ranges of 2). The plans launch these only, so no range is empty."""
    return cdiv(max(1, k_steps), cdiv(max(1, k_steps), k_ctas))


def check_k_ctas(config) -> None:
    """``ValueError`` naming the field unless ``config.k_ctas`` (a ``TileConfig``,
    ``MmaConfig`` or ``WgmmaConfig``, whose fields are checked positive already) is at most
    :data:`MAX_K_CTAS`."""
    if config.k_ctas > MAX_K_CTAS:
        raise ValueError(
            f"{type(config).__name__}.k_ctas must be at most {MAX_K_CTAS}; got {config.k_ctas}"
        )


def working_config(config, k_steps: int, scratch):
    """``config`` (a ``TileConfig``, ``MmaConfig`` or ``WgmmaConfig``) with the CTAs per tile that a
    ``k_steps``-step loop gives a range each (:func:`working_k_ctas`): what a plan launches.
    ``ValueError`` where it splits k and the caller has no ``scratch`` for it."""
    config = replace(config, k_ctas=working_k_ctas(config.k_ctas, k_steps))
    if config.k_ctas > 1 and scratch is None:
        raise ValueError(
            f"{config.label()} splits k across CTAs and needs scratch (no caller gave any)"
        )
    return config


def split_buffers(k_ctas: int, tiles: int, slot: int, dtype, scratch) -> tuple:
    """The kernel arguments ``(partials, sync)`` of a launch of ``tiles`` tiles (all the
    batch's) in ``k_ctas`` CTAs each: ``scratch(name, shape, dtype)``'s descriptors of a slot of
    ``slot`` accumulators (``dtype``) per CTA and a uint32 counter per tile; zeros (unused)
    where ``k_ctas`` is 1."""
    if k_ctas == 1:
        return 0, 0
    return (
        scratch("partials", (tiles * k_ctas, slot), dtype),
        scratch("sync", (tiles, 1), np.uint32),
    )


def settler(acc_size: int, threads: int):
    """Device function ``settle(acc, partials, sync, tile, k_cta, k_ctas, tid, cta_tid, holds)
    -> bool``: steps 1-3 of the module docstring for this CTA, range ``k_cta`` of ``k_ctas``
    of tile ``tile`` (the tile's counter and its slots of ``partials``). ``acc``: the
    ``acc_size`` accumulators of thread ``tid`` (of ``threads``) where ``holds`` (a CTA may
    keep its tile in some threads only); ``cta_tid``: the thread's index in the CTA, every one
    of which calls this. Returns True in the last CTA, whose ``acc`` then holds the sum over
    all ranges; False in the others."""
    THREADS, SLOT = threads, acc_size * threads

    @cuda.jit(device=True)
    def store(acc, partials, mine, i):
        partials[mine + i * THREADS] = acc[i]

    @cuda.jit(device=True)
    def load(acc, partials, here, i):
        acc[i] = load_from_l2(partials, here + i * THREADS)

    @cuda.jit(device=True)
    def add(acc, partials, here, i):
        acc[i] += load_from_l2(partials, here + i * THREADS)

    # literal indices, so that ``acc`` stays in registers (``common.unrolled``)
    store_all = unrolled(store, acc_size, "acc, partials, mine")
    load_all = unrolled(load, acc_size, "acc, partials, here")
    add_all = unrolled(add, acc_size, "acc, partials, here")

    @cuda.jit(device=True)
    def settle(acc, partials, sync, tile, k_cta, k_ctas, tid, cta_tid, holds):
        # -- 1. this range's partial tile to its slot ----------------------------------------
        first = tile * k_ctas
        if holds:
            store_all(acc, partials, (first + k_cta) * SLOT + tid)
        cuda.threadfence()  # the slot written, device-wide, before the count
        # -- 2. count this range in --------------------------------------------------------
        last = cuda.shared.array(1, np.int32)
        cuda.syncthreads()
        if cta_tid == 0:
            arrived = cuda.atomic.add(sync, tile, 1)
            last[0] = arrived == k_ctas - 1
            if arrived == k_ctas - 1:
                sync[tile] = 0  # every range counted: zero for the next launch
        cuda.syncthreads()
        if not last[0]:
            return False
        # -- 3. the last: every range, in range order ----------------------------------------
        cuda.threadfence()
        if holds:  # every slot, its own too: the same order whichever CTA is last
            load_all(acc, partials, first * SLOT + tid)
            for r in range(1, k_ctas):
                add_all(acc, partials, (first + r) * SLOT + tid)
        return True

    return settle
