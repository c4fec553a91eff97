"""Seed 004's L2 model: tile loads of concurrently running CTAs under each CTA order."""

import pytest

from numba_gemm.model import problem_dram_bytes, problem_tile_loads, wave_tile_loads
from numba_gemm.ordering import tile_of


def test_the_seeds_example():
    # 9 x 9 tile grid, 9 k-tiles, 9 CTAs at a time (seed 004).
    assert wave_tile_loads(9, 9, 9, 9, cached=False) == 162
    assert wave_tile_loads(9, 9, 9, 9) == 90
    assert wave_tile_loads(9, 9, 9, 9, group_size_m=1) == 90
    assert wave_tile_loads(9, 9, 9, 9, group_size_m=3) == 54


@pytest.mark.parametrize(
    "grid_m, grid_n, grid_k, concurrent, group",
    [(9, 9, 9, 9, 3), (10, 7, 4, 12, 4), (5, 13, 2, 20, 2), (3, 3, 5, 100, 8)],
)
def test_wave_counts_distinct_rows_and_columns(grid_m, grid_n, grid_k, concurrent, group):
    wave = [tile_of(p, grid_m, grid_n, group) for p in range(min(concurrent, grid_m * grid_n))]
    rows, cols = {m for m, _ in wave}, {n for _, n in wave}
    assert wave_tile_loads(grid_m, grid_n, grid_k, concurrent, group) == grid_k * (
        len(rows) + len(cols)
    )
    assert wave_tile_loads(
        grid_m, grid_n, grid_k, concurrent, group, cached=False
    ) == 2 * grid_k * len(wave)


def test_a_cache_never_loads_more_than_no_cache():
    for group in (1, 2, 3, 8):
        assert wave_tile_loads(16, 16, 4, 32, group) <= wave_tile_loads(
            16, 16, 4, 32, group, cached=False
        )


def test_whole_problem_sums_the_waves():
    a, b = problem_tile_loads(9, 9, 9, 9, 3)
    assert a + b == 9 * 54  # nine waves, each a 3 x 3 block
    a, b = problem_tile_loads(9, 9, 9, 9, 1)
    assert (a, b) == (9 * 9, 9 * 81)  # each wave: one tile-row of A, all of B
    assert sum(problem_tile_loads(4, 4, 2, 1000)) == 2 * (4 + 4)  # one wave holds everything


def test_dram_bytes_add_tile_sizes_and_c():
    # 2 x 2 tiles of 4 x 4, K = 4 in one k-tile, every CTA at once: A and B read once, C written.
    assert problem_dram_bytes(8, 8, 4, 4, 4, 4, 4, 100) == 4 * (8 * 4 + 4 * 8 + 8 * 8)


@pytest.mark.parametrize(
    "bad", [dict(grid_m=0), dict(concurrent=-1), dict(group_size_m=0), dict(grid_k=1.5)]
)
def test_bad_arguments_are_refused(bad):
    args = dict(grid_m=2, grid_n=2, grid_k=2, concurrent=2, group_size_m=1) | bad
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        wave_tile_loads(**args)
