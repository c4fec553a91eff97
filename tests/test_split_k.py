"""Split-k across CTAs (``kernels/split_k.py``): the tiled, mma and wgmma kernels with several
CTAs per C tile, in every layout, dtype and precision they take, with ranges that k cuts and ranges
past its end; the same bits whichever CTA finishes last; counters left zero; the choice of
``k_ctas``; and the refusals."""

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import numba_gemm
from checks import assert_within_preset
from numba_gemm.api import plan
from numba_gemm.descriptor import describe
from numba_gemm.kernels import split_k
from numba_gemm.kernels.hopper import WgmmaConfig
from numba_gemm.kernels.mma import MmaConfig
from numba_gemm.kernels.tiled import TileConfig
from numba_gemm.launch import SIMULATED
from numba_gemm.precision import default_preset
from numba_gemm.reference import LAYOUTS, make_operands, poisoned
from numba_gemm.scratch import SPLIT_K_SCRATCH

F32, F64, BF16 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(ml_dtypes.bfloat16)
# The simulator's small tiles (k steps of 8 = block_k 4 x 2 thread groups, and of 64 or 32 for
# wgmma's 16-bit and float32 slices) with 2, 3 and 5 CTAs per tile.
TILES = TileConfig(16, 16, 4, 4, 4, 2, 1, split_k=2)
WGMMA_TILES = WgmmaConfig(64, 64, 3, 1)
MMA_TILES = MmaConfig(32, 32, 16, 2, 1, 2, 1)
# (M, N, K): edges of every tile with k cut inside a step; whole tiles; a K so short that the
# later CTAs' ranges are empty (they add zeros).
SHAPES = [(17, 23, 45), (32, 16, 64), (5, 7, 9)]


def counters_zero() -> bool:
    from numba_gemm.launch import copy_to_host

    return all(
        not np.any(x if isinstance(x, np.ndarray) else copy_to_host(x))
        for x in SPLIT_K_SCRATCH.buffers("sync")
    )


TILED_CASES = [(F32, shape, layout, k_ctas) for shape in SHAPES for layout in LAYOUTS
               for k_ctas in (2, 5)] + [(F64, SHAPES[0], "row", 3)]  # fmt: skip


@pytest.mark.parametrize("dtype, shape, layout, k_ctas", TILED_CASES, ids=str)
def test_tiled_split_k_matches_float64_reference(dtype, shape, layout, k_ctas, rng):
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng)
    out = poisoned((M, N), dtype, layout=layout)
    numba_gemm.matmul(a, b, out, config=replace(TILES, k_ctas=k_ctas))
    assert_within_preset(out, a, b, default_preset(dtype).name)
    assert counters_zero()


WGMMA_CASES = [(BF16, "BF16_BF16_F32", layout) for layout in ("row", "col", "sliced")] + [
    (F32, "TF32_TF32_F32", layout)
    for layout in ("row", "b_col")  # A^T or B from registers
]


@pytest.mark.parametrize("k_ctas", [3])
@pytest.mark.parametrize("dtype, preset, layout", WGMMA_CASES, ids=str)
def test_wgmma_split_k_matches_float64_reference(dtype, preset, layout, k_ctas, rng):
    M, N, K = 65, 67, 200  # edges of every tile; 4 slices of 64 or 7 of 32, k cut in the last
    a, b = make_operands(M, N, K, dtype, layout, rng)
    out = poisoned((M, N), np.float32, layout=layout)
    config = replace(WGMMA_TILES, k_ctas=k_ctas)
    numba_gemm.matmul(a, b, out, precision=preset, algorithm="wgmma", config=config)
    assert_within_preset(out, a, b, preset, out_dtype=np.float32)
    assert counters_zero()


MMA_CASES = [(BF16, "BF16_BF16_F32", layout) for layout in ("row", "col", "sliced")] + [
    (F32, "TF32_TF32_F32", "row"),
    (F32, "BF16_BF16_F32_X3", "row"),  # float32 totals and corrections, per range
    (F32, "BF16_BF16_F32_X3", "a_col"),
]


@pytest.mark.parametrize("dtype, preset, layout", MMA_CASES, ids=str)
def test_mma_split_k_matches_float64_reference(dtype, preset, layout, rng):
    M, N, K = 33, 35, 100  # edges of every tile; 7 k-tiles of 16 in ranges of 3, 3 and 1
    a, b = make_operands(M, N, K, dtype, layout, rng)
    out = poisoned((M, N), np.float32, layout=layout)
    config = replace(MMA_TILES, k_ctas=3)
    numba_gemm.matmul(a, b, out, precision=preset, algorithm="mma", config=config)
    assert_within_preset(out, a, b, preset, out_dtype=np.float32)
    assert counters_zero()


def test_split_k_runs_a_batch(rng):
    a = rng.standard_normal((3, 20, 70)).astype(np.float32)
    b = rng.standard_normal((70, 19)).astype(np.float32)  # broadcast over the batch
    out = numba_gemm.matmul(a, b, config=replace(TILES, k_ctas=3))
    assert_within_preset(out, a, b, "F32_F32_F32")
    assert counters_zero()


def test_split_k_result_is_the_same_bits_every_run(rng):
    a, b = make_operands(17, 20, 200, F32, "row", rng)
    config = replace(TILES, k_ctas=4)
    first = numba_gemm.matmul(a, b, config=config)
    assert np.array_equal(first, numba_gemm.matmul(a, b, config=config))
    # the ranges add in order: not the unsplit kernel's order, but within its tolerance
    assert_within_preset(first, a, b, "F32_F32_F32")


@pytest.mark.parametrize(
    "tiles, steps, slots, expected",
    [
        (128, 256, 132, 1),  # a wave already
        (66, 256, 132, 1),  # half the SMs busy: a second round of sums would cost more
        (32, 256, 132, 4),  # 128 CTAs
        (16, 256, 132, 8),
        (1, 4096, 132, split_k.MAX_K_CTAS),
        (32, 6, 132, 1),  # too few steps for two CTAs of MIN_STEPS_PER_CTA
        (16, 36, 132, 8),  # 8 ranges of 5 steps (the last 1)
        (16, 30, 132, 6),  # 7 asked (30 // 4): ranges of 5 steps, so 6 take them all
    ],
)
def test_choose_k_ctas(tiles, steps, slots, expected):
    k_ctas = split_k.choose_k_ctas(tiles, steps, slots)
    assert k_ctas == expected
    per_cta = -(-steps // k_ctas)
    assert (k_ctas - 1) * per_cta < steps  # no range past the end


def test_split_k_refusals(rng):
    a, b = make_operands(8, 8, 64, F32, "row", rng)
    with pytest.raises(ValueError, match="k_ctas must be at most 16"):
        numba_gemm.matmul(a, b, config=TileConfig(16, 16, 4, 4, 4, 2, 1, k_ctas=17))
    with pytest.raises(ValueError, match="needs scratch"):
        plan(describe(a, "a"), describe(b, "b"), describe(np.empty((8, 8), F32), "out"),
             config=TileConfig(16, 16, 4, 4, 4, 2, 1, k_ctas=2))  # fmt: skip
    with pytest.raises(ValueError, match="k_ctas must be 1 where float32 operands are converted"):
        numba_gemm.matmul(a, b, precision="TF32_TF32_F32_X3", algorithm="wgmma",
                          config=WgmmaConfig(128, 64, 3, 1, k_ctas=2))  # fmt: skip


def test_bridge_runs_split_k(rng):
    jax = pytest.importorskip("jax")
    import jax_bridge

    a, b = make_operands(17, 23, 200, F32, "row", rng)
    config = replace(TILES, k_ctas=3)
    out = jax.jit(lambda x, y: jax_bridge.matmul(x, y, config=config))(a, b)
    assert_within_preset(np.asarray(out), a, b, "F32_F32_F32")


# -- on a GPU: what "auto" chooses for few tiles, every kernel, XLA's kernel call ------------

GPU_SHAPES = [(1, 4096, 4096), (16, 1000, 4097), (128, 2048, 4096), (256, 256, 20000)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=str)
@pytest.mark.parametrize(
    "dtype, preset",
    [(F32, None), (F32, "TF32_TF32_F32"), (BF16, "BF16_BF16_F32"), (F32, "BF16_BF16_F32_X3")],
    ids=str,
)  # (the bf16 split of float32 runs on the mma kernel)
def test_gpu_auto_splits_few_tiles(dtype, preset, shape, rng):
    from numba import cuda

    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, "row", rng, to_device=True)
    out = poisoned((M, N), np.float32, to_device=True)
    numba_gemm.matmul(a, b, out, precision=preset)
    cuda.synchronize()
    assert_within_preset(out, a, b, preset or "F32_F32_F32", out_dtype=np.float32)
    assert counters_zero()


# (TF32 with A column-major and B row-major converts its operands: one CTA per tile)
GPU_WGMMA_CASES = [(BF16, "BF16_BF16_F32", layout) for layout in ("row", "col", "sliced")] + [
    (F32, "TF32_TF32_F32", layout) for layout in LAYOUTS if layout != "a_col"
]


@pytest.mark.gpu
@pytest.mark.parametrize("k_ctas", [2, 5])
@pytest.mark.parametrize("dtype, preset, layout", GPU_WGMMA_CASES, ids=str)
def test_gpu_wgmma_split_k_every_layout(dtype, preset, layout, k_ctas, rng):
    from numba import cuda

    a, b = make_operands(200, 130, 1000, dtype, layout, rng, to_device=True)
    out = poisoned((200, 130), np.float32, to_device=True, layout=layout)
    config = WgmmaConfig(128, 128, 4, 8, k_ctas=k_ctas)
    numba_gemm.matmul(a, b, out, precision=preset, config=config)
    cuda.synchronize()
    assert_within_preset(out, a, b, preset, out_dtype=np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype, preset, shape",
    [
        (BF16, "BF16_BF16_F32", (16, 2048, 4096)),
        (F32, None, (300, 256, 8192)),
        (F32, None, (16, 2048, 4096)),  # float32's narrow 16-row tiles
    ],
    ids=str,
)
def test_gpu_bridge_kernel_call_splits_k(dtype, preset, shape, rng):
    """XLA's kernel call: split-k's partials and counters are outputs of the call (the
    counters, uint32, zeroed by it)."""
    jax = pytest.importorskip("jax")
    import jax_bridge

    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, "row", rng)
    step = jax.jit(lambda x, y: jax_bridge.matmul(x, y, precision=preset))
    assert "xui32>" in step.lower(a, b).as_text()  # the counters: an output of the call
    for _ in range(2):  # the second call finds the counters zeroed again
        assert_within_preset(np.asarray(step(a, b)), a, b, preset or "F32_F32_F32")


@pytest.mark.skipif(not SIMULATED, reason="the simulator keeps every tile in one CTA")
def test_simulator_defaults_do_not_split(rng):
    a, b = make_operands(1, 64, 4096, F32, "row", rng)
    out = np.empty((1, 64), F32)
    launch = plan(describe(a, "a"), describe(b, "b"), describe(out, "out"), "tiled",
                  scratch=lambda *args: pytest.fail("asked for scratch"))  # fmt: skip
    assert launch.grid[2] == 1
