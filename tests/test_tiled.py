"""The tiled kernel on the simulator: small configs, every edge, layout and dtype.

The configs shrink the tile so that simulated problems span several CTAs
and k-tiles, but the kernel code is the one that runs on the GPU: the same
pipeline, the same loaders (vector and element copies, interior fast path
and edge path), the same epilogue.
"""

import numpy as np
import pytest

import numba_gemm
from checks import H100_EDGE_TILES, H100_TILES, assert_product, check_layouts
from numba_gemm import TileConfig
from numba_gemm.descriptor import describe
from numba_gemm.kernels import tiled
from numba_gemm.kernels.tiled import for_edge_tiles, operand_modes, plan_tiled, whole_tiles
from numba_gemm.launch import programmatic_launch
from numba_gemm.reference import LAYOUTS, make_operands, poisoned
from numba_gemm.tuned_configs import SIMULATOR_CONFIG

CONFIGS = {
    "16x16x4-t4x4-s2": SIMULATOR_CONFIG,
    # Two 16-byte runs per thread along m, three stages, a group of 2 tile-rows.
    "32x32x8-t8x4-s3": TileConfig(
        block_m=32, block_n=32, block_k=8, thread_m=8, thread_n=4, stages=3, group_m=2
    ),
    # Three thread groups per CTA, each over its slice of k, summed through shared memory.
    "16x16x4-t4x4-s2-k3": TileConfig(16, 16, 4, 4, 4, 2, 1, split_k=3),
}
# 1 and primes; (48, 40, 24): interior CTAs and whole k-tiles (the copy fast path) beside edges;
# multiples of 4 keep rows 16-byte aligned so the vector copies and stores run. (32, 48, 24)
# and (64, 32, 8): whole tiles (the kernel without edge code, whole_tiles) under some configs:
# 16 x 16 tiles both, split-k in 3 groups the first, 32 x 32 tiles the second, with one k-tile
# for 3 stages (the k loop's copies ahead reload it).
SHAPES = [
    (1, 1, 1),
    (1, 17, 5),
    (19, 1, 7),
    (5, 7, 1),
    (33, 31, 37),
    (48, 40, 24),
    (32, 48, 24),
    (64, 32, 8),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("config", list(CONFIGS), ids=str)
def test_tiled_matches_float64_reference(config, shape, layout, dtype, rng):
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng)
    out = poisoned((M, N), dtype, layout=layout)  # NaN: an unwritten element fails the check
    if min(shape) > 1:
        check_layouts(layout, a, b, out)
    assert numba_gemm.matmul(a, b, out, algorithm="tiled", config=CONFIGS[config]) is out
    assert_product(out, a, b, dtype)


@pytest.mark.parametrize(
    "config, shape, expected",
    [
        ("16x16x4-t4x4-s2", (32, 48, 24), True),
        ("16x16x4-t4x4-s2-k3", (32, 48, 24), True),  # 24 = 2 k-tiles for each of 3 groups
        ("16x16x4-t4x4-s2-k3", (64, 32, 8), False),  # 8: the groups' slices would be uneven
        ("32x32x8-t8x4-s3", (32, 48, 24), False),  # N = 48: a half tile
        ("32x32x8-t8x4-s3", (64, 32, 8), True),
        ("32x32x8-t8x4-s3", (64, 32, 12), False),  # K = 12: half a k-tile
    ],
)
def test_whole_tiles_select_the_kernel_without_edge_code(config, shape, expected, rng):
    M, N, K = shape
    config = CONFIGS[config]
    assert whole_tiles(config, M, N, K) is expected
    a, b = make_operands(M, N, K, np.float32, "row", rng)
    descs = describe(a, "a"), describe(b, "b"), describe(poisoned((M, N), np.float32), "out")
    kernel = tiled._kernel(
        config, np.dtype(np.float32), *operand_modes(*descs), expected, programmatic_launch()
    )
    assert plan_tiled(config, *descs).kernel is kernel


@pytest.mark.parametrize(
    "layout, expected",
    [
        ("row", (("k", True), ("tile", True), ("n", True))),  # A: 16-byte loads through registers
        ("col", (("tile", True), ("k", True), ("m", True))),
        ("b_col", (("k", True), ("k", True), ("n", True))),
        ("sliced", (("k", False), ("k", False), (None, False))),  # element copies
    ],
)
def test_layouts_select_vector_or_element_copies(layout, expected, rng):
    a, b = make_operands(48, 40, 24, np.float32, layout, rng)
    out = poisoned((48, 40), np.float32, layout=layout)
    assert operand_modes(describe(a, "a"), describe(b, "b"), describe(out, "out")) == expected


@pytest.mark.parametrize("layout, operand", [("col", 0), ("row", 0), ("col", 1), ("row", 1)])
def test_misaligned_rows_fall_back_to_element_copies(layout, operand, rng):
    M, N, K = (21, 22, 13) if layout == "col" else (22, 21, 13)  # 21- or 13-element strides
    a, b = make_operands(M, N, K, np.float32, layout, rng)
    modes = operand_modes(
        describe(a, "a"), describe(b, "b"), describe(poisoned((M, N), np.float32), "c")
    )
    assert modes[operand][1] is False
    for config in CONFIGS.values():
        assert_product(numba_gemm.matmul(a, b, algorithm="tiled", config=config), a, b, np.float32)


def test_auto_runs_the_tiled_kernel_above_tiny_sizes():
    small = describe(np.ones((8, 8), np.float32), "a")
    big_a, big_b = (
        describe(np.ones((64, 64), np.float32), "a"),
        describe(np.ones((64, 64), np.float32), "b"),
    )
    assert numba_gemm.choose_algorithm(big_a, big_b) == "tiled"
    assert numba_gemm.choose_algorithm(small, small) == "mnk"


def test_config_with_auto_runs_tiled(rng):
    a, b = make_operands(9, 11, 5, np.float32, "row", rng)
    assert_product(numba_gemm.matmul(a, b, config=SIMULATOR_CONFIG), a, b, np.float32)


@pytest.mark.parametrize(
    "config, message",
    [
        (TileConfig(16, 16, 4, 2, 4, 2, 1), "thread_m = 2 must be a multiple of 4"),
        (TileConfig(16, 20, 4, 4, 8, 2, 1), "block_n = 20 must be a multiple of thread_n = 8"),
        (TileConfig(256, 256, 8, 4, 4, 2, 1), "4096 threads per CTA"),
        (TileConfig(16, 16, 4, 4, 4, 1, 1), "stages must be >= 2"),
        (TileConfig(16, 16, 4, 4, 4, 2, 0), "group_m must be a positive integer"),
        (TileConfig(16, 16, 3, 4, 4, 2, 1), "split into whole 16-byte vectors"),
        (TileConfig(32, 16, 8, 8, 4, 2, 1), "multiple of block_k = 8 and of the tile width 32"),
    ],
)
def test_bad_configs_are_refused_with_the_reason(config, message, rng):
    a, b = make_operands(8, 8, 8, np.float32, "row", rng)
    with pytest.raises(ValueError, match=message):
        numba_gemm.matmul(a, b, algorithm="tiled", config=config)


def test_config_must_fit_shared_memory(rng):
    a, b = make_operands(8, 8, 8, np.float64, "row", rng)
    huge = TileConfig(128, 128, 64, 8, 8, 8, 1)  # 8 stages x 64 x 264 x 8 bytes = 1.1 MB
    with pytest.raises(ValueError, match="bytes of shared memory"):
        numba_gemm.matmul(a, b, algorithm="tiled", config=huge)


def test_config_argument_is_checked(rng):
    a, b = make_operands(8, 8, 8, np.float32, "row", rng)
    with pytest.raises(TypeError, match="config must be a numba_gemm.TileConfig"):
        numba_gemm.matmul(a, b, algorithm="tiled", config=(16, 16, 4))
    with pytest.raises(ValueError, match="config applies to the tiled, mma and wgmma kernels"):
        numba_gemm.matmul(a, b, algorithm="mnk", config=SIMULATOR_CONFIG)


def test_config_shared_bytes_and_threads():
    config = TileConfig(256, 128, 16, 16, 8, 3, 8)
    assert config.threads == 256
    assert config.shared_bytes(np.float32) == 3 * 16 * ((256 + 4) + (128 + 4)) * 4
    assert config.label() == "256x128x16/t16x8/s3/g8"
    # Split-k: a pipeline per group; the partial tiles reuse it (here they need more room).
    split = TileConfig(32, 64, 4, 4, 4, 2, 1, split_k=4)
    assert (split.threads, split.cta_threads) == (128, 512)
    assert split.shared_bytes(np.float32) == 3 * 32 * 64 * 4 > 4 * 2 * 4 * ((32 + 4) + (64 + 4)) * 4
    assert split.label() == "32x64x4/t4x4/s2/g1/k4"


TALL, WIDE = H100_TILES, H100_EDGE_TILES  # the H100's tuned tiles from 2048^3, transposed


@pytest.mark.parametrize(
    "config, expected",
    [
        (TALL, WIDE),  # tall, 128 elements per thread: transposed
        (WIDE, WIDE),  # already wide
        (TileConfig(128, 64, 16, 8, 4, 3, 8), TileConfig(128, 64, 16, 8, 4, 3, 8)),  # small blocks
        (TileConfig(256, 128, 16, 8, 8, 3, 8), TileConfig(256, 128, 16, 8, 8, 3, 8)),
    ],
)
def test_edge_tiles_run_tall_large_tiles_transposed(config, expected):
    # Why: tiled.LARGE_REGISTER_TILE (docs/design/tiled-gemm.md).
    assert for_edge_tiles(config, np.float32) == expected


def test_edge_tiles_keep_a_config_whose_transpose_is_invalid(monkeypatch):
    def check(config, dtype):
        if config.block_m < config.block_n:
            raise ValueError("not for this dtype")

    monkeypatch.setattr(tiled, "_check_config", check)
    assert for_edge_tiles(TALL, np.float32) == TALL


def test_default_config_runs_edge_tiles_transposed(monkeypatch):
    # config_for_shape on a GPU whose tuned winner is tall: transposed only where the product
    # has edge tiles (the shape buckets do not tell).
    from numba_gemm import tuned_configs

    monkeypatch.setattr(tuned_configs, "SIMULATED", False)
    monkeypatch.setattr(tuned_configs, "_configs_for", lambda *key: (TALL, None))
    assert tuned_configs.config_for_shape(2048, 2048, 2048) == TALL
    assert tuned_configs.config_for_shape(2048, 4096, 1024) == TALL
    for shape in ((2047, 2047, 2047), (1800, 4096, 4096), (4096, 1800, 4096), (2048, 2048, 2047)):
        assert tuned_configs.config_for_shape(*shape) == WIDE
