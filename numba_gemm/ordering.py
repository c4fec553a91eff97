"""Which output tile a CTA computes: seed 004's grouped ordering (Triton's matmul tutorial).

A tiled GEMM launches a 1-D grid of ``grid_m * grid_n`` CTAs, one per BLOCK_M x
BLOCK_N tile of C. The GPU starts CTAs roughly in program-id order, so the
order decides which tiles run *at the same time*, and with it how many A and B
tiles the concurrently running CTAs share in L2:

- row-major (``group_size_m == 1``): a wave covers a few rows of tiles end to
  end, sharing its A tiles but reading nearly every B tile of the matrix;
- grouped: ``group_size_m`` tile-rows are walked column by column, so a wave
  covers a compact block of tiles and reuses both its A and its B tiles.

``numba_gemm.model.wave_tile_loads`` counts the loads of either order.
This module is pure Python: ``tile_of`` runs on the host as it is and inside
kernels compiled with ``cuda.jit(device=True)(tile_of)``, the same source.
"""

from __future__ import annotations

__all__ = ["tile_of"]


def tile_of(pid, grid_m, grid_n, group_size_m, one_group_shortcut=True):
    """Map program id ``pid`` (0 <= pid < grid_m * grid_n) to its output tile ``(pid_m, pid_n)``.

    Tiles are taken ``group_size_m`` tile-rows at a time; within a group the
    order is column-major; the last group holds the rows left over when
    ``grid_m`` is not a multiple of ``group_size_m``. ``group_size_m == 1`` is
    the plain row-major order ``(pid // grid_n, pid % grid_n)`` and ``group_size_m >= grid_m``
    the column-major order ``(pid % grid_m, pid // grid_m)``: one division each, where the
    general case takes four (in a kernel they sit on the way to every CTA's first load). A
    kernel whose registers are tight passes ``one_group_shortcut=False`` (a constant, so the
    branch compiles away): the fused triple product's stream-K loop, where the shortcut costs
    registers.
    """
    if group_size_m == 1:  # a constant in kernels: one division instead of four (~0.4 us on a GPU)
        pid_m = pid // grid_n
        return pid_m, pid - pid_m * grid_n
    if one_group_shortcut and group_size_m >= grid_m:  # one group: the grid column by column
        pid_n = pid // grid_m
        return pid - pid_n * grid_m, pid_n
    pids_in_group = group_size_m * grid_n
    group_id = pid // pids_in_group
    first_pid_m = group_id * group_size_m
    rows_in_group = min(grid_m - first_pid_m, group_size_m)
    pid_m = first_pid_m + pid % rows_in_group  # as in the seed (and Triton's tutorial)
    pid_n = (pid % pids_in_group) // rows_in_group
    return pid_m, pid_n
