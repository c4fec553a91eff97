"""TMA building blocks (``kernels/tma.py``): what a tensor map can describe, and the simulator's
twins of the copy (box walk, zero fill, 128-byte swizzle) and of the mbarrier phases.

The twin copy is checked against ``warpgroup.tile_slot``, the layout the ``wgmma`` descriptors
read (``test_wgmma``): a box copied for a k-major or m/n-major tile lands where the tile
expects each element. The wgmma tests then run the kernels on TMA copies end to end, and the
``gpu`` ones on the hardware.
"""

import numpy as np
import pytest
from numba import cuda

from numba_gemm.kernels import tma
from numba_gemm.kernels.warpgroup import tile_k, tile_slot
from numba_gemm.launch.tensor_maps import TensorMapSpec, tensor_map

simulator_only = pytest.mark.skipif(
    not cuda.config.ENABLE_CUDASIM, reason="the twins exist on the simulator"
)
F32, U16 = np.dtype(np.float32), np.dtype(np.uint16)


def spec(**changes) -> TensorMapSpec:
    fields = {
        "address": 1 << 20,
        "dtype": F32,
        "extents": (40, 50, 1),
        "strides": (48, 48 * 50),
        "box": (32, 64, 1),
    }
    return TensorMapSpec(**{**fields, **changes})


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"address": (1 << 20) + 8}, "16-byte aligned address"),
        ({"strides": (41, 41 * 50)}, "multiples of 16 bytes"),
        ({"strides": (48, 0)}, "positive multiples"),
        ({"box": (64, 64, 1)}, "16..128 bytes"),
        ({"box": (32, 512, 1)}, "1..256"),
        ({"extents": (40, 0, 1)}, "extents"),
    ],
)
def test_tensor_map_spec_says_what_tma_cannot_copy(changes, fragment):
    assert spec().problem() is None
    assert fragment in spec(**changes).problem()
    with pytest.raises(ValueError, match=fragment):
        tensor_map(spec(**changes))


@simulator_only
@pytest.mark.parametrize("axis, dtype", [("k", F32), ("x", F32), ("k", U16), ("x", U16)])
def test_twin_copy_lays_boxes_out_as_the_tiles(axis, dtype, rng):
    """A tile's boxes copied from (x0, k0) of a matrix land at ``tile_slot`` of each element,
    zeros past the matrix's extents (the tile overruns it along both axes)."""
    per_row, extent_x = tile_k(dtype.itemsize), 128  # the tile: 128 x one row of k
    rows_x, cols_k, x0, k0 = 100, per_row + 5, 64, per_row  # a partial tile at both edges
    matrix = (rng.standard_normal((rows_x, cols_k)) * 100).astype(dtype)  # (x, k)
    if axis == "x":
        memory, extents = np.ascontiguousarray(matrix.T), (rows_x, cols_k, 1)
        box = (per_row, per_row, 1)
        chunks = range(extent_x // per_row)  # a box per chunk of x
        boxes = [((x0 + q * per_row, k0), q * per_row * per_row) for q in chunks]
    else:
        memory, extents = matrix, (cols_k, rows_x, 1)
        box = (per_row, extent_x, 1)
        boxes = [((k0, x0), 0)]
    lines = np.zeros((memory.shape[0], -(-memory.shape[1] // 16) * 16), dtype)  # 16-byte lines
    lines[:, : memory.shape[1]] = memory
    data = lines.ravel()
    strides = (lines.shape[1], lines.size)
    key = tensor_map(TensorMapSpec(data.ctypes.data, dtype, extents, strides, box), data)
    tile_elements = extent_x * per_row
    smem = np.full(tile_elements + 16, 7, dtype)
    barrier = tile_elements  # 8 bytes after the tile
    tma.mbarrier_init(smem, barrier, 1)
    tma.mbarrier_expect_bytes(smem, barrier, tile_elements * dtype.itemsize)
    for (c0, c1), dst in boxes:
        assert not tma.mbarrier_done(smem, barrier, 0)  # bytes still pending
        tma.tma_load(box)(smem, dst, key, c0, c1, 0, barrier)
    assert tma.mbarrier_done(smem, barrier, 0) and not tma.mbarrier_done(smem, barrier, 1)
    slot = tile_slot(axis, dtype.itemsize)
    for x in range(extent_x):
        for k in range(per_row):
            inside = x0 + x < rows_x and k0 + k < cols_k
            expected = matrix[x0 + x, k0 + k] if inside else 0
            assert smem[slot(x, k)] == expected, (x, k)


@simulator_only
def test_twin_barrier_phases():
    """A phase ends once its arrival and every expected byte are in; the next phase expects the
    same arrivals; ``mbarrier_done(parity)`` says whether the phase of that parity is over."""
    smem = np.zeros(8, np.uint16)
    tma.mbarrier_init(smem, 4, 1)
    assert not tma.mbarrier_done(smem, 4, 0)
    for phase in range(3):
        tma.mbarrier_expect_bytes(smem, 4, 256)
        tma._twin_count(smem, 4, 0, -128)
        assert not tma.mbarrier_done(smem, 4, phase % 2)
        tma._twin_count(smem, 4, 0, -128)
        assert tma.mbarrier_done(smem, 4, phase % 2) and not tma.mbarrier_done(
            smem, 4, 1 - phase % 2
        )
    with pytest.raises(AssertionError, match="more arrived"):
        tma._twin_count(smem, 4, 2, 0)


def test_a_launch_passes_a_template_as_its_words():
    """A tuple argument (a tensor-map template) is one argument kind, its length, and as many
    int64 parameters, in order (Numba passes a tuple's elements as parameters)."""
    from numba_gemm.launch import kernel_launch, numba_parameters
    from numba_gemm.launch.tensor_maps import MAP_WORDS, map_workspace

    template = tuple(range(-3, MAP_WORDS - 3))
    workspace = map_workspace(256, np.zeros(256, np.uint8))
    launch = kernel_launch(None, (1, 1), 32, 0, (7, template, workspace))
    assert launch.arg_kinds() == (None, MAP_WORDS, np.dtype(np.uint8))
    parameters = numba_parameters(launch.args)
    assert parameters[: 1 + MAP_WORDS] == [7, *template]
    assert parameters[1 + MAP_WORDS :] == [0, 0, 256, 1, workspace, 256, 1]


@pytest.mark.parametrize(
    "tensor_maps, workspace, fragment",
    [("texture", None, "'host', 'device' or 'none'"), ("device", None, "needs a workspace")],
)
def test_plan_refuses_tensor_maps_it_cannot_pass(tensor_maps, workspace, fragment):
    from numba_gemm.api import plan
    from numba_gemm.descriptor import describe
    from numba_gemm.precision import PRESETS

    a = np.ones((16, 16), np.float32)
    with pytest.raises(ValueError, match=fragment):
        plan(describe(a, "a"), describe(a.copy(), "b"), describe(a.copy(), "out"), "wgmma",
             None, PRESETS["TF32_TF32_F32"], tensor_maps, workspace)  # fmt: skip
