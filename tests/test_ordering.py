"""Seed 004's grouped CTA ordering: ``numba_gemm.ordering.tile_of`` on the host and in a kernel."""

import numpy as np
import pytest
from numba import cuda

from numba_gemm.ordering import tile_of

GRIDS = [(1, 1), (1, 7), (7, 1), (3, 5), (9, 9), (10, 7), (7, 10), (13, 4)]
GROUPS = [1, 2, 3, 4, 8, 20]


def seed_004(pid, num_pid_m, num_pid_n, GROUP_SIZE_M):
    """The seed's pseudocode (Triton's tutorial), line for line."""
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: f"{g[0]}x{g[1]}")
def test_bijection_on_ragged_grids(grid, group):
    grid_m, grid_n = grid
    tiles = [tile_of(pid, grid_m, grid_n, group) for pid in range(grid_m * grid_n)]
    assert sorted(tiles) == [(m, n) for m in range(grid_m) for n in range(grid_n)]


@pytest.mark.parametrize("shortcut", [True, False], ids=["one-group shortcut", "formula only"])
@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: f"{g[0]}x{g[1]}")
def test_equals_the_seed_formula(grid, group, shortcut):
    # Groups of 8 and 20 cover some of these grids whole: the one-division shortcut.
    grid_m, grid_n = grid
    for pid in range(grid_m * grid_n):
        assert tile_of(pid, grid_m, grid_n, group, shortcut) == seed_004(pid, grid_m, grid_n, group)


def test_group_of_one_is_row_major():
    assert [tile_of(p, 4, 6, 1) for p in range(24)] == [(p // 6, p % 6) for p in range(24)]


def test_seed_picture_grouped_by_three():
    # The seed's 9 x 9 grid grouped by 3: the first 9 programs cover the top-left 3 x 3 block,
    # walked column by column.
    assert [tile_of(p, 9, 9, 3) for p in range(9)] == [(m, n) for n in range(3) for m in range(3)]


def test_same_function_inside_a_kernel():
    device_tile_of = cuda.jit(device=True)(tile_of)

    @cuda.jit
    def tiles_kernel(out, grid_m, grid_n, group):
        pid = cuda.grid(1)
        if pid < grid_m * grid_n:
            out[pid, 0], out[pid, 1] = device_tile_of(pid, grid_m, grid_n, group)

    grid_m, grid_n, group = 7, 5, 3
    out = np.full((grid_m * grid_n, 2), -1, np.int64)
    tiles_kernel[1, 64](out, grid_m, grid_n, group)
    assert [tuple(row) for row in out] == [tile_of(p, grid_m, grid_n, group) for p in range(35)]
