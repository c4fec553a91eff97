"""The triple product D = A @ B @ C on the simulator: every algorithm, both orders, layouts,
dtypes, edges, the fused kernel's counters, and every argument error.

Simulated fused launches use 16 x 16 tiles, so these shapes span several row blocks,
chunks of the middle dimension and n-tiles, with edges in each.
"""

import numpy as np
import pytest

import numba_gemm
import numba_gemm.kernels.triple_product as triple_kernels
import numba_gemm.triple_product as triple_product
from checks import (
    H100_EDGE_TILES,
    H100_TILES,
    H200_TILES,
    assert_special_values,
    assert_triple,
    infinite_reference,
)
from numba_gemm import TileConfig
from numba_gemm.descriptor import MatrixDesc, describe
from numba_gemm.kernels.tiled import for_edge_tiles, whole_tiles
from numba_gemm.kernels.triple_product import (
    intermediate_row_major,
    intermediate_shape,
    intermediate_view,
    large_register_tiles,
)
from numba_gemm.launch import SIMULATED, at_most_on_multiprocessor, shared_memory_per_multiprocessor
from numba_gemm.reference import TRIPLE_LAYOUTS, make_triple_operands, poisoned
from numba_gemm.triple_product import (
    _COUNTERS,
    _INTERMEDIATES,
    INTERMEDIATES_KEPT,
    SIMULATOR_FUSED_CONFIG,
    SMALL_FUSED_CONFIGS,
    choose_order,
    choose_triple_algorithm,
    fused_ctas_per_sm,
    fused_tiles,
    fusion_changes_tiles,
)

ALGORITHMS = ["naive", "fused", "unfused"]
# (M, K1, K2, N): ones, primes, a middle dimension smaller than every tile, and shapes with
# two row blocks, two chunks and two n-tiles of the simulator's 16 x 16 fused tiles.
SHAPES = [(1, 1, 1, 1), (5, 7, 9, 3), (20, 35, 3, 16), (19, 9, 20, 17)]
OUT_LAYOUT = {"row": "row", "col": "col", "sliced": "sliced", "mixed": "col"}
WIDE, TALL, TALL_TRANSPOSED = H200_TILES, H100_TILES, H100_EDGE_TILES
F32 = np.dtype(np.float32)


def _ids(shape):
    return "x".join(map(str, shape))


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_16_bit_operands_may_write_float32(out_dtype, rng):
    """As ``matmul``: bfloat16 operands on the tensor cores, D in their dtype or float32 (the
    intermediate in theirs)."""
    import ml_dtypes

    from numba_gemm.precision import PRESETS, tolerance

    bf16 = np.dtype(ml_dtypes.bfloat16)
    a, b, c = make_triple_operands(7, 20, 9, 6, bf16, "row", rng)
    out = poisoned((7, 6), np.dtype(out_dtype))
    assert numba_gemm.triple(a, b, c, out) is out
    preset = PRESETS["BF16_BF16_F32"]
    bound = tolerance(preset, bf16, 20, bf16) + tolerance(preset, bf16, 9, out.dtype)
    expected = (a.astype(np.float64) @ b.astype(np.float64)) @ c.astype(np.float64)
    error = np.linalg.norm(out.astype(np.float64) - expected) / np.linalg.norm(expected)
    assert error <= bound, f"relative error {error:.3e} > {bound:.3e}"


@pytest.mark.parametrize("order", ["left", "right"])
@pytest.mark.parametrize("precision", ["TF32_TF32_F32_X3", "BF16_BF16_F32_X6"])
def test_split_presets_keep_infinities(precision, order, rng):
    """A's row 1 holds +inf, every operand is positive: that row of D is +inf, the rest
    finite, under the float32-accurate splits too (whose corrections are NaN there)."""
    from numba_gemm.precision import PRESETS, tolerance

    a, b, c = (abs(x) for x in make_triple_operands(5, 19, 7, 6, np.float32, "row", rng))
    a[1, 3] = np.inf
    out = numba_gemm.triple(a, b, c, precision=precision, order=order)
    bound = 2 * tolerance(PRESETS[precision], np.float32, 19)
    assert_special_values(out, infinite_reference(a, b) @ c.astype(np.float64), bound)


@pytest.mark.parametrize("order", ["left", "right"])
@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_triple_matches_float64_reference(algorithm, shape, order, rng):
    a, b, c = make_triple_operands(*shape, np.float32, "mixed", rng)
    out = poisoned((shape[0], shape[3]), np.float32, layout="col")  # NaN shows unwritten elements
    assert numba_gemm.triple(a, b, c, out, algorithm=algorithm, order=order) is out
    assert_triple(out, a, b, c, np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", list(TRIPLE_LAYOUTS))
@pytest.mark.parametrize("order", ["left", "right"])
def test_fused_layouts_and_dtypes(order, layout, dtype, rng):
    shape = (19, 9, 20, 17)
    a, b, c = make_triple_operands(*shape, dtype, layout, rng)
    out = poisoned((shape[0], shape[3]), dtype, layout=OUT_LAYOUT[layout])
    numba_gemm.triple(a, b, c, out, algorithm="fused", order=order)
    assert_triple(out, a, b, c, dtype)


@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("split_k", [2, 3])
def test_fused_with_split_k_groups(split_k, layout, rng):
    # K1 = 13 and K2 = 50 in 4-deep k-tiles, dealt to 2 or 3 thread groups (the last group of
    # three gets zeros past K1) whose partial tiles group 0 sums; 2 row blocks, 4 T tiles and 5
    # D tiles per row block.
    config = TileConfig(16, 16, 4, 4, 4, 2, 1, split_k=split_k)
    a, b, c = make_triple_operands(17, 13, 50, 70, np.float32, layout, rng)
    out = poisoned((17, 70), np.float32, layout=layout)
    numba_gemm.triple(a, b, c, out, algorithm="fused", order="left", config=config)
    assert_triple(out, a, b, c, np.float32)


def _record_fused_kernels(monkeypatch) -> list:
    """A list that records (config, dtype, interiors, modes, t_column_order) of every fused
    kernel the test then compiles (or takes from the cache)."""
    compiled = []
    original = triple_kernels._fused_kernel

    def spy(config, dtype, interiors, programmatic, t_column_order, *modes):
        compiled.append((config, dtype, interiors, modes, t_column_order))
        return original(config, dtype, interiors, programmatic, t_column_order, *modes)

    monkeypatch.setattr(triple_kernels, "_fused_kernel", spy)
    return compiled


@pytest.mark.parametrize(
    "shape, split_k, left, right",
    [
        # whole 16 x 16 tiles and 4-deep k-tiles everywhere, also for each of 2 split-k groups
        ((32, 16, 48, 32), 1, (True, True), (True, True)),
        ((32, 16, 48, 32), 2, (True, True), (True, True)),
        # N = 20 cuts D's last n-tile (and, in the right order, both products' last row block)
        ((32, 16, 48, 20), 1, (True, False), (False, False)),
        # K1 = 8 is 2 k-tiles, which 3 split-k groups cannot share evenly
        ((32, 8, 48, 32), 3, (False, True), (False, False)),
    ],
)
@pytest.mark.parametrize("order", ["left", "right"])
def test_fused_without_edge_code_where_tiles_are_whole(
    shape, split_k, left, right, order, rng, monkeypatch
):
    # Each product compiles without edge code where its tiles and k-slices are whole
    # (tiled.whole_tiles); the right order is the left order of the transposed chain.
    compiled = _record_fused_kernels(monkeypatch)
    # One CTA per tile on a GPU too, where grids this small would otherwise run stream-K.
    monkeypatch.setattr(triple_product, "fused_workers", lambda *args: None)
    config = TileConfig(16, 16, 4, 4, 4, 2, 1, split_k=split_k)
    a, b, c = make_triple_operands(*shape, np.float32, "row", rng)
    out = poisoned((shape[0], shape[3]), np.float32, layout="row")
    numba_gemm.triple(a, b, c, out, algorithm="fused", order=order, config=config)
    assert_triple(out, a, b, c, np.float32)
    assert [interiors for _, _, interiors, _, _ in compiled] == [left if order == "left" else right]


@pytest.mark.parametrize("shape", [(32, 16, 48, 32), (19, 9, 20, 17), (48, 8, 40, 5)], ids=_ids)
@pytest.mark.parametrize("split_k", [1, 2])
@pytest.mark.parametrize("order", ["left", "right"])
def test_fused_with_t_in_column_order(shape, split_k, order, rng, monkeypatch):
    # T's tiles handed out column by column (triple_product.fused_t_column_order, forced here: the
    # simulator runs one CTA per SM), D's in the config's grouped order (2 row blocks a
    # group): every tile still computed once, each D tile after its row block of T.
    monkeypatch.setattr(triple_product, "fused_t_column_order", lambda *args: True)
    monkeypatch.setattr(triple_product, "fused_workers", lambda *args: None)  # one CTA per tile
    compiled = _record_fused_kernels(monkeypatch)
    config = TileConfig(16, 16, 4, 4, 4, 2, 2, split_k=split_k)
    a, b, c = make_triple_operands(*shape, np.float32, "row", rng)
    out = poisoned((shape[0], shape[3]), np.float32, layout="row")
    numba_gemm.triple(a, b, c, out, algorithm="fused", order=order, config=config)
    assert_triple(out, a, b, c, np.float32)
    assert [column_order for *_, column_order in compiled] == [True]


@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("order", ["left", "right"])
def test_fused_with_row_major_intermediate(order, layout, rng, monkeypatch):
    # The simulator's 4 x 4 register tiles keep T column-major; large ones may keep it
    # row-major (intermediate_row_major): forced here, the kernel runs with a row-major T
    # whatever its operands' layout.
    monkeypatch.setattr(triple_product, "intermediate_row_major", lambda *operands: True)
    a, b, c = make_triple_operands(19, 9, 21, 17, np.float32, layout, rng)
    out = poisoned((19, 17), np.float32, layout=layout)
    numba_gemm.triple(a, b, c, out, algorithm="fused", order=order)
    assert_triple(out, a, b, c, np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape, shared, one_site",
    [
        ((32, 16, 48, 32), True, False),  # whole tiles, every operand row-major and aligned
        ((32, 16, 48, 20), False, False),  # N = 20 cuts D's tiles: D's tile function has edge code
        ((20, 16, 48, 20), True, True),  # M = 20 cuts both products' tiles: both have edge code
    ],
)
def test_fused_kernel_where_both_products_compile_to_one_tile_function(
    shape, shared, one_site, dtype, rng, monkeypatch
):
    # With T row-major (forced: the simulator's 4 x 4 register tiles keep it column-major), T
    # is stored as D is and read as A is: where the tiles are also alike (whole, or both with
    # edges), both products compile to one tile function. With whole tiles the kernel calls it
    # from both products' sites; with edge code from one site, its operands chosen at run time.
    monkeypatch.setattr(triple_product, "intermediate_row_major", lambda *operands: True)
    monkeypatch.setattr(triple_product, "fused_workers", lambda *args: None)  # one CTA per tile
    compiled = _record_fused_kernels(monkeypatch)
    config = TileConfig(16, 16, 4, 4, 4, 2, 1)
    a, b, c = make_triple_operands(*shape, dtype, "row", rng)
    out = poisoned((shape[0], shape[3]), dtype, layout="row")
    numba_gemm.triple(a, b, c, out, algorithm="fused", order="left", config=config)
    assert_triple(out, a, b, c, dtype)
    ((config, dtype, interiors, modes, _),) = compiled
    ab, tc = triple_kernels._products(config, dtype, interiors, modes)[:2]
    assert (ab.compute_tile is tc.compute_tile) == shared  # the case this shape stands for
    assert triple_kernels.one_call_site(interiors, modes) == one_site


@pytest.mark.parametrize(
    "config, shape, layout, row_major",
    [
        (TileConfig(128, 128, 16, 8, 8, 3, 8), (2048,) * 4, "row", False),  # 8 x 8 per thread
        (TALL, (2048,) * 4, "row", True),  # whole tiles
        (TALL, (2048,) * 4, "col", True),  # whole, two functions
        (TALL_TRANSPOSED, (1800,) * 4, "row", True),  # edges, one function
        (TALL_TRANSPOSED, (2047,) * 4, "row", False),  # A's rows unaligned: two functions
        (TALL_TRANSPOSED, (1800,) * 4, "col", False),  # A column-major: two functions
        (TALL_TRANSPOSED, (2048, 2048, 2048, 1800), "row", True),  # T's tiles whole
        (TALL_TRANSPOSED, (2048, 2047, 2048, 2048), "row", True),  # D's tiles whole
        (TALL_TRANSPOSED, (2047, 2048, 2048, 2048), "row", True),  # both edged, one function
        (TileConfig(32, 64, 16, 8, 4, 2, 1, split_k=4), (768,) * 4, "row", True),  # split-k, whole
        (TileConfig(32, 64, 16, 8, 4, 2, 1, split_k=4), (768,) * 4, "col", True),
        (TileConfig(32, 64, 16, 8, 4, 2, 1, split_k=4), (700,) * 4, "row", False),  # edges
        (TileConfig(64, 64, 16, 8, 4, 2, 1, split_k=2), (1024, 1024, 1024, 1000), "row", False),
    ],
)
def test_intermediate_layout_choice(config, shape, layout, row_major):
    # Row-major T under split-k tiles with whole tiles in both products, and under large
    # register tiles unless both products have edge code and it would not make them one tile
    # function.
    def operand(name, rows, cols):  # a device matrix at an aligned address: only layout counts
        strides = (cols, 1) if layout == "row" else (1, rows)
        return MatrixDesc(name, (rows, cols), strides, np.dtype(np.float32), None, True, 0, None)

    M, K1, K2, N = shape
    a, b, c, d = (
        operand(name, rows, cols)
        for name, rows, cols in (("a", M, K1), ("b", K1, K2), ("c", K2, N), ("d", M, N))
    )
    assert intermediate_row_major(config, a, b, c, d) == row_major


def test_split_k_tiles_keep_t_column_major_in_float64():
    # Row-major T under split-k tiles was measured in float32 only.
    config = SMALL_FUSED_CONFIGS[np.dtype(np.float64)][0]
    a, b, c, d = (
        MatrixDesc(name, (768, 768), (768, 1), np.dtype(np.float64), None, True, 0, None)
        for name in "abcd"
    )
    assert not intermediate_row_major(config, a, b, c, d)


def test_intermediate_layouts():
    assert not large_register_tiles(TileConfig(128, 128, 16, 8, 8, 3, 8))
    assert large_register_tiles(WIDE)
    buffer = describe(np.empty(intermediate_shape(5, 7, np.float32, True), np.float32), "scratch")
    assert buffer.shape == (5, 8)  # rows padded to whole 16-byte vectors
    t = intermediate_view(buffer, 5, 7, True)
    assert (t.name, t.shape, t.strides) == ("t", (5, 7), (8, 1))
    buffer = describe(np.empty(intermediate_shape(5, 7, np.float32, False), np.float32), "scratch")
    assert buffer.shape == (7, 8)  # T column-major: a padded row per column of T
    t = intermediate_view(buffer, 5, 7, False)
    assert (t.shape, t.strides) == ((5, 7), (1, 8))


def _fused_operands(n=64):
    """Host descriptors of an n x n chain for ``plan_fused``: A, B, C, D, T (column-major) and
    zeroed counters."""
    a, b, c, d = (describe(np.ones((n, n), np.float32), name) for name in "abcd")
    t = intermediate_view(
        describe(np.empty(intermediate_shape(n, n, np.float32, False), np.float32), "scratch"),
        n,
        n,
        False,
    )
    return a, b, c, d, t, triple_kernels.counters_desc(64, np.zeros(64, np.uint32))


@pytest.mark.parametrize("config", [SMALL_FUSED_CONFIGS[np.dtype(np.float32)][0], WIDE], ids=str)
@pytest.mark.parametrize("ctas_per_sm", [1, 2])
def test_fused_launch_runs_at_most_ctas_per_sm(config, ctas_per_sm):
    # The fused kernel asks for more than 1 / (ctas_per_sm + 1) of an SM's shared memory, so
    # that no compile of it (XLA's once used fewer registers than Numba's) fits more CTAs, more
    # T tiles, on one SM.
    a, b, c, d, t, sync = _fused_operands()
    launch = triple_kernels.plan_fused(config, a, b, c, d, t, sync, ctas_per_sm=ctas_per_sm)
    per_sm = shared_memory_per_multiprocessor()
    assert launch.shared > per_sm // (ctas_per_sm + 1)
    assert launch.shared >= config.shared_bytes(np.float32)
    if config.shared_bytes(np.float32) <= per_sm // (ctas_per_sm + 1):
        assert launch.shared <= per_sm // ctas_per_sm  # ... and no more than it needs for them


def test_at_most_on_multiprocessor():
    assert at_most_on_multiprocessor(150_000, 233_472) == 150_000  # already alone: unchanged
    assert at_most_on_multiprocessor(20_000, 233_472) == 116_737
    assert at_most_on_multiprocessor(20_000, 233_472, 2) == 77_825
    with pytest.raises(ValueError, match="blocks per SM"):
        at_most_on_multiprocessor(20_000, 233_472, 0)


def test_fused_launch_checks_ctas_per_sm():
    a, b, c, d, t, sync = _fused_operands()
    config = SIMULATOR_FUSED_CONFIG
    for bad in (0, 3, 1.5):
        with pytest.raises(ValueError, match="ctas_per_sm must be an int from 1 to 2"):
            triple_kernels.plan_fused(config, a, b, c, d, t, sync, ctas_per_sm=bad)
    partials = describe(np.empty((4, 256), np.float32), "partials")
    with pytest.raises(ValueError, match="stream-K runs one worker per SM"):
        triple_kernels.plan_fused(config, a, b, c, d, t, sync, (2, 2), partials, ctas_per_sm=2)


@pytest.mark.parametrize(
    "tuned, half",
    [(WIDE, TileConfig(128, 128, 16, 8, 8, 3, 8)), (TALL, TileConfig(128, 128, 16, 8, 8, 4, 8))],
)
@pytest.mark.parametrize(
    "n, expected",
    [
        (4096, "tuned"),  # 1024 tiles on 132 SMs: the last wave is 76% full
        (2048, "tuned"),  # 256 tiles: 94% full
        (3072, "half"),  # 576 tiles: 36% full, so half as large along the longer side
        (1536, "half"),  # 144 tiles: 9% full
        (512, SMALL_FUSED_CONFIGS[np.dtype(np.float32)][0]),  # 16 tiles of T even halved
        (256, SMALL_FUSED_CONFIGS[np.dtype(np.float32)][1]),  # 32 x 64 tiles: only 32 of T
    ],
)
def test_fused_tiles_fit_the_fused_grid_to_the_sms(tuned, half, n, expected):
    expected = {"tuned": tuned, "half": half}.get(expected, expected)
    assert fused_tiles(tuned, n, n, n, n, 132, np.float32) == expected


@pytest.mark.parametrize("tuned", [WIDE, TALL])
@pytest.mark.parametrize(
    "n, saves", [(4096, False), (2048, False), (3072, True), (1536, True), (512, True)]
)
def test_fusion_changes_tiles_where_fused_tiles_change(tuned, n, saves):
    # "auto" fuses large chains only where the fused grid changes the tuned tiles, saving a
    # ragged wave (docs/design/triple-product.md).
    assert fusion_changes_tiles(tuned, n, n, n, n, 132, np.float32) is saves


def test_fusion_changes_tiles_leaves_out_the_transposition_of_edge_tiles():
    # The tiled GEMM runs a product with edge tiles on transposed tiles (tiled.for_edge_tiles);
    # where only T @ C has them, the fused kernel, which runs both products on one config,
    # transposes A @ B's too. That saves nothing, so it does not count.
    assert fused_tiles(TALL, 2048, 2048, 2048, 2047, 132, np.float32) == TALL_TRANSPOSED
    assert not fusion_changes_tiles(TALL, 2048, 2048, 2048, 2047, 132, np.float32)
    assert not fusion_changes_tiles(WIDE, 2047, 2047, 2047, 2047, 132, np.float32)
    assert not fusion_changes_tiles(TALL, 2047, 2047, 2047, 2047, 132, np.float32)
    assert fusion_changes_tiles(TALL, 1535, 1535, 1535, 1535, 132, np.float32)  # then halved


@pytest.mark.parametrize(
    "shape, expected",
    [
        ((1024,) * 4, "fused"),  # up to FUSED_UP_TO_MACS
        ((2047,) * 4, "fused"),  # both products with edge tiles
        ((2047, 2048, 2048, 2048), "fused"),  # M cuts both
        ((1536,) * 4, "fused"),  # the fused grid's tiles save a ragged wave
        ((2048,) * 4, "unfused"),  # whole tiles that fill the SMs
        ((4096,) * 4, "unfused"),
        ((2048, 2048, 2048, 1800), "unfused"),  # edge tiles in T @ C alone
        ((2048, 2047, 2048, 2048), "unfused"),  # ... in A @ B alone
    ],
)
def test_auto_on_an_h100(shape, expected, monkeypatch):
    # As on an H100 80GB HBM3: 132 SMs, and the tiled GEMM's tiles from 2048 256 x 128,
    # transposed where the product has edge tiles (as tuned_configs.config_for_shape gives them).
    monkeypatch.setattr(triple_product, "SIMULATED", False)
    monkeypatch.setattr(triple_product, "multiprocessors", lambda: 132)
    monkeypatch.setattr(
        triple_product,
        "config_for_shape",
        lambda M, N, K, dtype: TALL if whole_tiles(TALL, M, N, K) else for_edge_tiles(TALL, dtype),
    )
    assert choose_triple_algorithm(*shape) == expected


SMALL = SMALL_FUSED_CONFIGS[np.dtype(np.float32)][0]


SPLIT_2 = TileConfig(64, 64, 16, 8, 4, 2, 1, split_k=2)  # the H100's tuned tiles at 1024^3
STACKED = TileConfig(128, 64, 16, 8, 4, 3, 8)  # SPLIT_2's groups as rows (the search space's)


@pytest.mark.parametrize(
    "n, tuned, expected",
    [
        (1000, SPLIT_2, STACKED),  # edge tiles: not the small-chain rule
        (512, SMALL, SMALL),  # stacked, 32 tiles of T: the fused kernel's own split-k tiles
        (
            256,
            TileConfig(32, 32, 16, 4, 4, 2, 1, split_k=4),
            SMALL_FUSED_CONFIGS[np.dtype(np.float32)][1],
        ),
    ],
)
def test_fused_tiles_stack_the_tiled_gemms_split_k_groups_into_rows(n, tuned, expected):
    # Outside the small-chain rule the fused grid holds both products' tiles: a split-k
    # winner of the tiled GEMM becomes the search space's config of its groups stacked.
    assert fused_tiles(tuned, n, n, n, n, 132, np.float32) == expected


@pytest.mark.parametrize(
    "shape, tuned, expected, ctas",
    [
        ((640,) * 4, SPLIT_2, SMALL, 2),  # 200 tiles of T under the small tiles
        ((768,) * 4, SPLIT_2, SMALL, 2),  # 64 x 64 in 2 groups: 144 tiles, 1.1 per SM
        ((768,) * 4, TileConfig(64, 64, 16, 4, 4, 3, 8), SMALL, 2),  # tiles without split-k
        ((960,) * 4, SPLIT_2, SMALL, 2),  # 225 tiles in 264 slots: last wave 85% full
        ((1024,) * 4, SPLIT_2, SPLIT_2, 2),  # 256 in 264: the tuned split-k tiles stay
        ((1024,) * 4, STACKED, SMALL, 2),
        ((512,) * 4, SMALL, SMALL, 1),  # 128 tiles of T: under 1.5 per SM, as before
        ((576,) * 4, SPLIT_2, SMALL, 1),  # 162 small tiles: as before (the FILL_CTAS rule)
        ((2048, 512, 1024, 512), SPLIT_2, SPLIT_2, 2),  # 512 tiles: last wave 94% full
        ((900,) * 4, SPLIT_2, STACKED, 1),  # edge tiles: as before
        ((1536,) * 4, STACKED, TileConfig(64, 64, 16, 4, 4, 3, 8), 1),  # above FUSED_UP_TO_MACS
    ],
)
def test_small_chains_run_split_k_tiles_two_ctas_per_sm(shape, tuned, expected, ctas):
    # The rule of triple_product.fused_ctas_per_sm (docs/design/triple-product.md): whole
    # split-k tiles two to an SM where T has 1.5 or more per SM, the tuned 64 x 64 in 2 groups
    # where they fill the last wave of two per SM (N = 1024), float32 only.
    config = fused_tiles(tuned, *shape, 132, np.float32)
    assert config == expected
    assert fused_ctas_per_sm(config, *shape, sms=132) == ctas
    small64 = SMALL_FUSED_CONFIGS[np.dtype(np.float64)][0]  # float64: one per SM, as before
    assert fused_ctas_per_sm(small64, *shape, np.float64, sms=132) == 1


def test_t_in_column_order_where_it_fills_one_wave_of_two_per_sm():
    # triple_product.COLUMN_ORDER_T_FILL: T in column order only where its tiles, two CTAs per
    # SM, fill 95% to 100% of one wave (N = 1024: 256 tiles in 264 slots).
    assert triple_product.fused_t_column_order(SPLIT_2, 1024, 1024, 1024, 1024, sms=132)
    assert triple_product.fused_t_column_order(
        SPLIT_2, 1024, 512, 1024, 2048, sms=132
    )  # T's tiles alike
    assert not triple_product.fused_t_column_order(
        SPLIT_2, 1024, 1024, 1024, 1024, sms=120
    )  # 2 waves
    assert not triple_product.fused_t_column_order(
        SPLIT_2, 1024, 1024, 1024, 1024, np.float64, sms=132
    )
    assert not triple_product.fused_t_column_order(SMALL, 704, 704, 704, 704, sms=132)  # 242: 92%
    assert not triple_product.fused_t_column_order(SMALL, 640, 640, 640, 640, sms=132)  # 200: 76%
    assert not triple_product.fused_t_column_order(
        SMALL, 768, 768, 768, 768, sms=132
    )  # 288: 2 waves
    assert not triple_product.fused_t_column_order(SMALL, 512, 512, 512, 512, sms=132)  # one per SM
    assert not triple_product.fused_t_column_order(STACKED, 2048, 2048, 2048, 2048, sms=132)


def test_fused_launch_checks_t_column_order():
    a, b, c, d, t, sync = _fused_operands()
    config = SIMULATOR_FUSED_CONFIG
    with pytest.raises(TypeError, match="t_column_order must be a bool; got 1"):
        triple_kernels.plan_fused(config, a, b, c, d, t, sync, t_column_order=1)
    partials = describe(np.empty((4, 256), np.float32), "partials")
    with pytest.raises(ValueError, match="t_column_order orders one CTA per tile"):
        triple_kernels.plan_fused(
            config, a, b, c, d, t, sync, (2, 2), partials, t_column_order=True
        )


def test_two_ctas_per_sm_only_for_whole_split_k_tiles():
    assert fused_ctas_per_sm(SMALL, 768, 768, 768, 768, sms=132) == 2
    assert fused_ctas_per_sm(SMALL, 768, 768, 768, 768, np.float64, sms=132) == 1
    assert fused_ctas_per_sm(SMALL, 704, 704, 704, 704, sms=132) == 2  # 242 tiles: 1.8 per SM
    assert fused_ctas_per_sm(SMALL, 640, 640, 640, 640, sms=160) == 1  # 200 on 160 SMs
    assert fused_ctas_per_sm(SMALL, 700, 700, 700, 700, sms=132) == 1  # edge tiles
    assert fused_ctas_per_sm(SPLIT_2, 768, 768, 768, 768, sms=132) == 1  # 144 tiles
    assert fused_ctas_per_sm(STACKED, 2048, 2048, 2048, 2048, sms=132) == 1  # no split-k
    assert fused_ctas_per_sm(TALL, 4096, 4096, 4096, 4096, sms=132) == 1


@pytest.mark.parametrize(
    "n, tuned, overlapped, expected",
    [
        (
            256,
            TileConfig(32, 32, 16, 4, 4, 2, 1, split_k=4),
            True,
            "fused",
        ),  # host-bound: one launch
        (512, SMALL, True, "unfused"),  # the tiled GEMM's own split-k tiles, launches overlapped
        (512, SMALL, False, "fused"),  # launches that do not overlap (before Hopper)
        (512, TileConfig(64, 64, 32, 4, 4, 3, 8), True, "fused"),  # tiles that leave SMs idle
        (1024, SPLIT_2, True, "unfused"),  # the fused kernel runs the tuned tiles
        (1024, STACKED, True, "fused"),
        (500, SMALL, True, "unfused"),  # edge tiles do not make a small chain fused
        (768, SPLIT_2, True, "fused"),  # other tiles, two CTAs per SM
        (960, SPLIT_2, True, "fused"),
        (576, SPLIT_2, True, "unfused"),  # other tiles, but one CTA per SM
        (900, SPLIT_2, True, "unfused"),  # edge tiles
    ],
)
def test_auto_fuses_small_chains_unless_the_tiled_gemm_splits_k_itself(
    n, tuned, overlapped, expected, monkeypatch
):
    # The rule of FUSED_UP_TO_MACS and FUSED_ALWAYS_UP_TO_MACS (docs/design/triple-product.md):
    # where the tiled GEMM splits k itself and launches overlap, two launches, unless the
    # fused kernel runs its own tiles two CTAs per SM (640 to 960, whole tiles); at 256, fused.
    monkeypatch.setattr(triple_product, "SIMULATED", False)
    monkeypatch.setattr(triple_product, "multiprocessors", lambda: 132)
    monkeypatch.setattr(triple_product, "programmatic_launch", lambda: overlapped)
    monkeypatch.setattr(triple_product, "config_for_shape", lambda M, N, K, dtype: tuned)
    assert choose_triple_algorithm(n, n, n, n) == expected


@pytest.mark.parametrize(
    "tuned, shape, expected",
    [
        (TALL, (2047,) * 4, TALL_TRANSPOSED),  # edge tiles along every axis
        (TALL, (4095,) * 4, TALL_TRANSPOSED),
        (TALL, (3500,) * 4, TALL_TRANSPOSED),
        (TALL, (2048, 2047, 2048, 2048), TALL_TRANSPOSED),  # only A @ B's k has an edge
        (TALL, (1500, 2047, 2047, 2047), TileConfig(128, 128, 16, 8, 8, 4, 8)),  # then halved
        (TALL, (2048,) * 4, TALL),  # whole tiles: as tuned
        (WIDE, (2047,) * 4, WIDE),  # already wide
        (TileConfig(128, 64, 16, 8, 4, 3, 8), (1000,) * 4, TileConfig(128, 64, 16, 8, 4, 3, 8)),
    ],
)
def test_fused_tiles_run_tall_large_tiles_transposed_where_tiles_have_edges(tuned, shape, expected):
    # As the tiled GEMM does (tiled.for_edge_tiles): tall large tiles transposed on edge tiles,
    # as tuned on whole ones.
    assert fused_tiles(tuned, *shape, 132, np.float32) == expected


@pytest.mark.parametrize(
    "tuned, n, expected",
    [
        (TALL, 1800, TALL_TRANSPOSED),  # 120 tiles of T: most SMs busy, large tiles stay
        (TileConfig(128, 64, 16, 8, 4, 3, 8), 900, TileConfig(128, 64, 16, 8, 4, 3, 8)),  # 120
        (TileConfig(128, 64, 16, 8, 4, 3, 8), 960, SMALL),  # 120, but the small tiles fit whole
        (TileConfig(128, 64, 16, 8, 4, 3, 8), 704, SMALL),  # 6 x 11 = 66 tiles: too few
    ],
)
def test_fused_tiles_keep_large_tiles_that_nearly_fill_the_sms(tuned, n, expected):
    assert fused_tiles(tuned, n, n, n, n, 132, np.float32) == expected


@pytest.mark.skipif(not SIMULATED, reason="large chains depend on the GPU's SMs")
def test_auto_fuses_small_chains_and_leaves_large_ones_unfused_on_the_simulator():
    assert choose_triple_algorithm(512, 512, 512, 512) == "fused"  # 2 x 512^3 multiply-adds
    assert choose_triple_algorithm(1024, 1024, 1024, 1024) == "fused"  # 2 x 1024^3
    assert choose_triple_algorithm(64, 4096, 4096, 4096) == "fused"  # also exactly 2 x 1024^3
    # Above that, the simulator has no SMs whose waves fusion could fill.
    assert choose_triple_algorithm(64, 4096, 4096, 4097) == "unfused"
    assert choose_triple_algorithm(1536, 1536, 1536, 1536) == "unfused"


def test_fused_tiles_keep_tuned_tiles_that_cannot_narrow():
    # 64 x 8 tiles cannot halve their 2-wide thread blocks into 16-byte vectors: kept.
    tuned = TileConfig(64, 8, 16, 4, 4, 2, 8)
    assert fused_tiles(tuned, 4096, 64, 1000, 8, 132, np.float32) == tuned


@pytest.mark.parametrize("algorithm", ["naive", "unfused"])
def test_float64_and_new_output(algorithm, rng):
    a, b, c = make_triple_operands(9, 17, 6, 13, np.float64, "sliced", rng)
    d = numba_gemm.triple(a, b, c, algorithm=algorithm)
    assert isinstance(d, np.ndarray) and d.shape == (9, 13) and d.dtype == np.float64
    assert_triple(d, a, b, c, np.float64)


def test_fused_with_an_explicit_config(rng):
    # 32 threads, three stages, two 16-byte runs per thread along n: another specialisation.
    config = TileConfig(
        block_m=16, block_n=32, block_k=8, thread_m=4, thread_n=4, stages=3, group_m=1
    )
    a, b, c = make_triple_operands(21, 13, 40, 35, np.float32, "row", rng)
    out = poisoned((21, 35), np.float32)
    numba_gemm.triple(a, b, c, out, algorithm="fused", order="left", config=config)
    assert_triple(out, a, b, c, np.float32)


def test_fused_leaves_its_counters_at_zero(rng):
    # Consecutive launches of different shapes share the counter buffer: each must find it zero.
    for shape in [(19, 9, 20, 17), (33, 5, 40, 3), (7, 3, 2, 9)]:
        a, b, c = make_triple_operands(*shape, np.float32, "row", rng)
        out = poisoned((shape[0], shape[3]), np.float32)
        numba_gemm.triple(a, b, c, out, algorithm="fused", order="left")
        assert_triple(out, a, b, c, np.float32)
        for data in _COUNTERS.buffers("sync"):
            data = data.copy_to_host() if hasattr(data, "copy_to_host") else data
            assert not np.any(data), "the fused kernel left a counter non-zero"


# Stream-K: (33, 21, 40, 17) in the simulator's 16 x 16 x 4 tiles has 9 T tiles of 6
# k-iterations and 6 D tiles of 10. Worker counts below the tiles make ranges that cross tiles
# (partials added by the next worker), above them several workers per tile, one a single
# worker per product summing every tile itself.
STREAM_K_SHAPE = (33, 21, 40, 17)


@pytest.mark.parametrize(
    "workers, order",
    [
        ((5, 4), "left"),
        ((7, 11), "left"),
        ((1, 1), "left"),
        ((5, 4), "right"),
        ((5, 4), "whole tiles"),
    ],
    ids=str,
)
def test_stream_k_matches_float64_reference(workers, order, rng, monkeypatch):
    monkeypatch.setattr(triple_product, "fused_workers", lambda *args: workers)
    shape = STREAM_K_SHAPE if order == "left" else STREAM_K_SHAPE[::-1]
    if order == "whole tiles":  # the kernel without edge code: 6 T and 6 D tiles of 4 and 12
        shape, order = (32, 16, 48, 48), "left"  # k-iterations, in 5 and 4 ranges
    a, b, c = make_triple_operands(*shape, np.float32, "mixed", rng)
    out = poisoned((shape[0], shape[3]), np.float32, layout="col")
    # The tiles the counts above assume, on a GPU too (where fused_config picks larger ones).
    numba_gemm.triple(a, b, c, out, algorithm="fused", order=order, config=SIMULATOR_FUSED_CONFIG)
    assert_triple(out, a, b, c, np.float32)
    for counters in _COUNTERS.buffers("sync"):  # zero again for the next launch
        assert not np.any(counters), "the stream-K kernel left a counter or flag non-zero"


@pytest.mark.parametrize(
    "variant, dtype", [("split_k", np.float64), ("row-major T", np.float32)], ids=str
)
def test_stream_k_with_split_k_groups_and_row_major_intermediate(variant, dtype, rng, monkeypatch):
    monkeypatch.setattr(triple_product, "fused_workers", lambda *args: (4, 5))
    config = SIMULATOR_FUSED_CONFIG  # (on a GPU too, where fused_config picks larger tiles)
    if variant == "split_k":
        config = TileConfig(16, 16, 4, 4, 4, 2, 1, split_k=2)
    else:
        monkeypatch.setattr(triple_product, "intermediate_row_major", lambda *operands: True)
    a, b, c = make_triple_operands(*STREAM_K_SHAPE, dtype, "row", rng)
    out = poisoned((STREAM_K_SHAPE[0], STREAM_K_SHAPE[3]), dtype)
    numba_gemm.triple(a, b, c, out, algorithm="fused", order="left", config=config)
    assert_triple(out, a, b, c, dtype)


NARROW = TileConfig(128, 128, 16, 8, 8, 3, 8)


@pytest.mark.parametrize(
    "config, n, expected",
    [
        (NARROW, 1536, (132, 132)),  # 288 tiles on 132 SMs: 27% of 3 waves idle
        (NARROW, 3072, None),  # 1152 tiles: 3% of 9 waves idle
        (TileConfig(64, 128, 16, 4, 8, 3, 8), 1024, None),  # 256 tiles: 3%
        (WIDE, 1536, None),  # 8 x 16 register tiles need every register: never stream-K
        (SMALL_FUSED_CONFIGS[np.dtype(np.float32)][0], 512, None),  # split-k groups
        (NARROW, 128, (8, 8)),  # 1 tile each, 8 k-iterations: one worker per k-iteration
    ],
    ids=str,
)
def test_stream_k_runs_where_one_tile_per_cta_leaves_waves_idle(config, n, expected):
    assert triple_product.fused_workers(config, n, n, n, n, sms=132) == expected


@pytest.mark.parametrize(
    "workers, partials, message",
    [
        ((0, 4), 10_000, "workers for T must be an int from 1 to 54"),
        ((5, 61), 10_000, "workers for D must be an int from 1 to 60"),
        ((5, 4.0), 10_000, "workers for D must be an int"),
        ((5, 4), 100, "partials must hold 2304 float32 elements"),
        ((5, 4), None, "got none"),
    ],
)
def test_stream_k_plan_errors(workers, partials, message):
    M, K1, K2, N = STREAM_K_SHAPE
    config = TileConfig(16, 16, 4, 4, 4, 2, 1)
    a, b, c, d = (
        describe(np.ones(shape, np.float32), name)
        for name, shape in zip("abcd", ((M, K1), (K1, K2), (K2, N), (M, N)))
    )
    t = describe(np.empty((M, K2), np.float32), "t")
    sync = triple_kernels.counters_desc(256, np.zeros(256, np.uint32))
    buffer = None if partials is None else describe(np.empty((1, partials), np.float32), "partials")
    with pytest.raises(ValueError, match=message):
        triple_kernels.plan_fused(config, a, b, c, d, t, sync, workers, buffer)


@pytest.mark.parametrize("row_major", [False, True])
def test_the_intermediates_padding_is_zero(row_major, rng, monkeypatch, poisoned_fresh_outputs):
    """Fresh device memory starts as NaN here: the fused kernel's T, whose rows (or columns)
    are padded to whole 16-byte vectors that the kernel reads but never writes, is zeroed when
    allocated (compute-sanitizer's initcheck saw those reads as uninitialised memory)."""
    from numba_gemm.reference import to_host

    monkeypatch.setattr(triple_product, "intermediate_row_major", lambda *_: row_major)
    _INTERMEDIATES._buffers.clear()
    a, b, c = make_triple_operands(19, 9, 21, 17, np.float32, "row", rng)  # 19, 21: padded
    assert_triple(numba_gemm.triple(a, b, c, algorithm="fused", order="left"), a, b, c, F32)
    [t] = [held for key, held in _INTERMEDIATES._buffers.items() if key[-1] == "t"]
    assert t.shape == intermediate_shape(19, 21, F32, row_major)
    assert np.isfinite(to_host(t.buffer())).all()


@pytest.mark.parametrize("algorithm", ["fused", "unfused"])
def test_calls_on_a_stream_share_their_intermediate(algorithm, rng):
    # T is kept per (stream, shape, dtype) between calls, and its old contents never leak in.
    a, b, c = make_triple_operands(19, 9, 20, 17, np.float32, "row", rng)
    first = numba_gemm.triple(a, b, c, algorithm=algorithm, order="left")
    held = dict(_INTERMEDIATES._buffers)
    a2, b2, c2 = make_triple_operands(19, 9, 20, 17, np.float32, "row", rng)
    second = numba_gemm.triple(a2, b2, c2, algorithm=algorithm, order="left")
    assert_triple(first, a, b, c, np.float32)
    assert_triple(second, a2, b2, c2, np.float32)
    assert all(_INTERMEDIATES._buffers[key] is buffer for key, buffer in held.items())
    numba_gemm.triple(
        *make_triple_operands(7, 3, 5, 2, np.float32, "row", rng), algorithm=algorithm
    )
    assert next(reversed(_INTERMEDIATES._buffers)) not in held  # a new shape, a new T
    assert len(_INTERMEDIATES._buffers) <= INTERMEDIATES_KEPT


@pytest.mark.parametrize(
    "shape, expected",
    [
        ((10, 100, 10, 100), "left"),  # (A @ B) is 10 x 10: cheap
        ((100, 10, 100, 10), "right"),  # (B @ C) is 10 x 10: cheap
        ((8, 8, 8, 8), "left"),  # ties go left
    ],
)
def test_order_by_flop_count(shape, expected):
    M, K1, K2, N = shape
    assert choose_order(M, K1, K2, N) == expected
    left, right = M * K1 * K2 + M * K2 * N, K1 * K2 * N + M * K1 * N
    assert (left <= right) == (expected == "left")


def test_auto_is_correct_for_a_right_leaning_chain(rng):
    a, b, c = make_triple_operands(30, 3, 30, 2, np.float32, "row", rng)
    assert choose_order(30, 3, 30, 2) == "right"
    assert_triple(numba_gemm.triple(a, b, c), a, b, c, np.float32)


def _chain(M=4, K1=5, K2=6, N=7, dtype=np.float32):
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal(s).astype(dtype) for s in [(M, K1), (K1, K2), (K2, N)])


def test_naive_limit_points_to_fused():
    a, b, c = _chain(2, 3, 1025, 4)
    with pytest.raises(
        ValueError,
        match=r"N <= 1024 and K2 <= 1024 \(1024 threads per block, "
        r"49152 bytes of shared memory\); got K2 = 1025, N = 4; "
        r"use algorithm='fused'",
    ):
        numba_gemm.triple(a, b, c, algorithm="naive", order="left")
    a, b, c = _chain(2, 3, 4, 1500)
    with pytest.raises(ValueError, match=r"got K2 = 4, N = 1500; use algorithm='fused'"):
        numba_gemm.triple(a, b, c, algorithm="naive", order="left")


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        ("mismatch_ab", {}, ValueError, "a is 4x5 and b is 6x6; a's columns must equal b's rows"),
        ("mismatch_bc", {}, ValueError, "b is 5x6 and c is 7x7; b's columns must equal c's rows"),
        ("dtype", {}, TypeError, "b is float32 but c is float64"),
        ("rank", {}, ValueError, "c must be 2-D"),
        ("ok", {"algorithm": "fast"}, ValueError, "algorithm must be one of 'auto', 'naive'"),
        ("ok", {"order": "middle"}, ValueError, "order must be one of 'auto', 'left', 'right'"),
        (
            "ok",
            {"algorithm": "unfused", "config": TileConfig()},
            ValueError,
            "config applies to the fused triple-product kernel",
        ),
        ("ok", {"config": "big"}, TypeError, "config must be a numba_gemm.TileConfig"),
        (
            "ok",
            {"algorithm": "fused", "config": TileConfig(64, 64, 16, 4, 4, 2, 1, split_k=8)},
            ValueError,
            "2048 threads per CTA",
        ),
    ],
)
def test_argument_errors(args, kwargs, error, message):
    a, b, c = _chain()
    operands = {
        "ok": (a, b, c),
        "mismatch_ab": (a, np.ones((6, 6), np.float32), c),
        "mismatch_bc": (a, b, np.ones((7, 7), np.float32)),
        "dtype": (a, b, c.astype(np.float64)),
        "rank": (a, b, c[None]),
    }[args]
    with pytest.raises(error, match=message.replace("(", r"\(")):
        numba_gemm.triple(*operands, **kwargs)


def test_output_errors():
    a, b, c = _chain()
    with pytest.raises(ValueError, match=r"out has shape \(4, 6\); the product needs \(4, 7\)"):
        numba_gemm.triple(a, b, c, np.empty((4, 6), np.float32))
    with pytest.raises(TypeError, match="out is float64"):
        numba_gemm.triple(a, b, c, np.empty((4, 7), np.float64))
    big = np.zeros((8, 7), np.float32)
    with pytest.raises(ValueError, match="out overlaps c"):
        numba_gemm.triple(a, b, big[:6], big[2:6])
