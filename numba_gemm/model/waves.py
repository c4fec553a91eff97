"""Seed 004's L2 model: tile loads of the CTAs that run at the same time.

A tiled GEMM's CTA ``pid`` computes output tile ``tile_of(pid, ...)`` and reads
``grid_k`` A tiles (its tile-row of A) and ``grid_k`` B tiles (its tile-column
of B). ``concurrent`` CTAs run at once (one *wave*; SMs x CTAs per SM on a
GPU). Under an ideal shared cache (the seed's L2) a tile that several CTAs of
the wave read is loaded once; without a cache each CTA loads its own.

Seed 004's example, a 9 x 9 tile grid, 9 k-tiles, 9 CTAs at a time:

>>> wave_tile_loads(9, 9, 9, 9, cached=False)                    # 9 CTAs x 9 k x (A + B)
162
>>> wave_tile_loads(9, 9, 9, 9)                                  # row-major: 1 A row, 9 B columns
90
>>> wave_tile_loads(9, 9, 9, 9, group_size_m=3)                  # a 3 x 3 block: 3 + 3
54
"""

from __future__ import annotations

from ..ordering import tile_of

__all__ = ["wave_tile_loads", "problem_tile_loads", "problem_dram_bytes"]


def _check(grid_m: int, grid_n: int, grid_k: int, concurrent: int, group_size_m: int) -> None:
    for name, value in (
        ("grid_m", grid_m),
        ("grid_n", grid_n),
        ("grid_k", grid_k),
        ("concurrent", concurrent),
        ("group_size_m", group_size_m),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer; got {value!r}")


def _loads(
    pids: range, grid_m: int, grid_n: int, grid_k: int, group_size_m: int, cached: bool
) -> tuple[int, int]:
    """(A tile loads, B tile loads) of the CTAs ``pids``."""
    tiles = [tile_of(pid, grid_m, grid_n, group_size_m) for pid in pids]
    if not cached:
        return grid_k * len(tiles), grid_k * len(tiles)
    rows = {pid_m for pid_m, _ in tiles}
    cols = {pid_n for _, pid_n in tiles}
    return grid_k * len(rows), grid_k * len(cols)


def wave_tile_loads(
    grid_m: int,
    grid_n: int,
    grid_k: int,
    concurrent: int,
    group_size_m: int | None = None,
    cached: bool = True,
) -> int:
    """A and B tile loads of the first wave: CTAs ``0 .. concurrent-1`` of a ``grid_m x grid_n``
    grid.

    ``group_size_m``: the grouped ordering's group height (``None`` or 1:
    row-major). ``cached``: an ideal shared cache (each distinct tile once) or
    none (each CTA loads all ``2 * grid_k`` of its tiles).
    """
    group_size_m = 1 if group_size_m is None else group_size_m
    _check(grid_m, grid_n, grid_k, concurrent, group_size_m)
    wave = range(min(concurrent, grid_m * grid_n))
    return sum(_loads(wave, grid_m, grid_n, grid_k, group_size_m, cached))


def problem_tile_loads(
    grid_m: int, grid_n: int, grid_k: int, concurrent: int, group_size_m: int | None = None
) -> tuple[int, int]:
    """(A, B) tile loads of the whole launch, wave after wave, each wave through an ideal
    cache that keeps nothing from the wave before: what a cache holding one wave's tiles
    reads from DRAM (reuse across waves, which a real L2 also gets, is not counted)."""
    group_size_m = 1 if group_size_m is None else group_size_m
    _check(grid_m, grid_n, grid_k, concurrent, group_size_m)
    total, a_loads, b_loads = grid_m * grid_n, 0, 0
    for start in range(0, total, concurrent):
        a, b = _loads(
            range(start, min(start + concurrent, total)), grid_m, grid_n, grid_k, group_size_m, True
        )
        a_loads, b_loads = a_loads + a, b_loads + b
    return a_loads, b_loads


def problem_dram_bytes(
    M: int,
    N: int,
    K: int,
    block_m: int,
    block_n: int,
    block_k: int,
    itemsize: int,
    concurrent: int,
    group_size_m: int | None = None,
) -> int:
    """:func:`problem_tile_loads` in bytes for a GEMM tiled ``block_m x block_n x block_k``,
    plus C written once."""
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    a_loads, b_loads = problem_tile_loads(
        cdiv(M, block_m), cdiv(N, block_n), cdiv(K, block_k), concurrent, group_size_m
    )
    return itemsize * (a_loads * block_m * block_k + b_loads * block_k * block_n + M * N)
