"""The Hopper kernels (``kernels/wgmma.py``): bf16 and f16 on ``wgmma``, float32 as TF32 (A's
block from registers where an operand is k-major) or 3xTF32 (the converting kernel), every
layout and edge.

On the simulator ``wgmma`` is its twin (``kernels/warpgroup.py``), which reads each block
through the matrix descriptor's layout (leading and stride offsets, the 128-byte swizzle) as
PTX defines it, while the kernel's copies store tiles through ``tile_slot``: a mismatch between
the two shows as a wrong product. ``gpu`` tests run the real instructions on a Hopper GPU.
"""

import ml_dtypes
import numpy as np
import pytest

import numba_gemm
from checks import assert_split_keeps_infinities, assert_within_preset, check_layouts
from numba_gemm.kernels.hopper import SIMULATOR_WGMMA_CONFIG, WgmmaConfig
from numba_gemm.kernels.warpgroup import TF32_TILE_K, TILE_K, _element_byte, tile_slot
from numba_gemm.launch import SIMULATED
from numba_gemm.precision import PRESETS
from numba_gemm.reference import LAYOUTS, make_operands, poisoned

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
PRESET = {BF16: "BF16_BF16_F32", F16: "F16_F16_F32"}
TF32, TF32_X3 = "TF32_TF32_F32", "TF32_TF32_F32_X3"
SMALL = SIMULATOR_WGMMA_CONFIG  # one warpgroup, 64 x 64 tiles, 3 stages
simulator_only = pytest.mark.skipif(
    not SIMULATED, reason="checks what the simulator runs (its twins, its choice of kernel)"
)
# 1; edges of every tile (two CTAs each way, a k tail, element copies where rows of an odd
# length misalign); whole tiles: two CTAs, four k slices (each of the 3 stages refilled).
SHAPES = [(1, 1, 1), (65, 67, 70), (64, 128, 256)]
# bf16 in every layout (the transposed descriptors); f16 (the same code, another type) in two.
SIMULATED_CASES = [(BF16, shape, layout) for shape in SHAPES for layout in LAYOUTS] + [
    (F16, shape, layout) for shape in SHAPES for layout in ("row", "b_col")
]
# Float32 operands: both TF32 presets in every layout on the edge shapes (TF32: from registers
# where B is k-major (b_col, col), or A is (row, sliced: C^T = B^T A^T), else converted
# (a_col)); the two-CTA shape for TF32 converted and 3xTF32 (slow to simulate: three wgmmas
# per k step) in the row layout.
FLOAT32_CASES = (
    [
        (preset, shape, layout)
        for preset in (TF32, TF32_X3)
        for shape in SHAPES[:2]
        for layout in LAYOUTS
    ]
    + [(TF32, SHAPES[2], layout) for layout in ("row", "a_col")]
    + [(TF32_X3, SHAPES[2], "row")]
)


@pytest.mark.parametrize("axis, size", [("k", 2), ("x", 2), ("k", 4)])
def test_tile_slots_are_what_the_descriptors_read(axis, size):
    """Element (x, k) of a tile, stored through ``tile_slot``, is where a wgmma block's
    descriptor (start at row x0, k step) reads it: checked for every element of a 128-row tile
    of 16-bit elements (either layout) or TF32 ones (k-major)."""
    slot = tile_slot(axis, size)
    tile_k, k_per_wgmma = (TILE_K, 16) if size == 2 else (TF32_TILE_K, 8)
    for x in range(128):
        for k in range(tile_k):
            x0, k_step = (x // 64) * 64, k // k_per_wgmma
            if axis == "k":
                start = x0 * 128 + k_step * 32
            else:
                start = (x0 // 64) * 8192 + k_step * 16 * 128
            read = _element_byte(axis, start, x - x0, k % k_per_wgmma, size)
            assert read == size * slot(x, k), (x, k)


@pytest.mark.parametrize(
    "dtype, shape, layout",
    SIMULATED_CASES,
    ids=[f"{d}-{'x'.join(map(str, s))}-{layout}" for d, s, layout in SIMULATED_CASES],
)
def test_wgmma_matches_float64_reference(dtype, shape, layout, rng):
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng)
    out = poisoned((M, N), dtype, layout=layout)
    if min(shape) > 1:
        check_layouts(layout, a, b, out)
    assert numba_gemm.matmul(a, b, out, algorithm="wgmma", config=SMALL) is out
    assert_within_preset(out, a, b, None, dtype)


@pytest.mark.parametrize(
    "preset, shape, layout",
    FLOAT32_CASES,
    ids=[f"{p}-{'x'.join(map(str, s))}-{layout}" for p, s, layout in FLOAT32_CASES],
)
def test_wgmma_float32_matches_float64_reference(preset, shape, layout, rng):
    """Float32 operands at TF32 (A's block through registers, or both converted in shared
    memory) or 3xTF32, within the preset's tolerance: TF32-sized error for one part, float32's
    for the split."""
    M, N, K = shape
    a, b = make_operands(M, N, K, F32, layout, rng)
    out = poisoned((M, N), F32, layout=layout)
    if min(shape) > 1:
        check_layouts(layout, a, b, out)
    numba_gemm.matmul(a, b, out, precision=preset, algorithm="wgmma")
    assert_within_preset(out, a, b, preset, F32)


# 1 + 3 2^-12: TF32 rounds it to 1 + 2^-10 (to nearest) and truncates it to 1
NOT_TF32 = np.float32(1 + 3 * 2.0**-12)
ROUNDED, TRUNCATED = 8 * (1 + 2.0**-10), 8.0


def skip_unless_hopper() -> None:
    from numba import cuda

    if cuda.get_current_device().compute_capability[0] != 9:
        pytest.skip("wgmma needs a Hopper GPU")


def tf32_times_ones(a: np.ndarray, layout: str, to_device: bool = False,
                    algorithm: str = "wgmma") -> np.ndarray:  # fmt: skip
    """A (16 x 8 float32) @ ones (8 x 16) at TF32 through ``algorithm``, A and B in
    ``layout`` ("row", "b_col", "a_col"), from host arrays or (``to_device``) device ones."""
    from numba import cuda

    a_layout, b_layout, _ = LAYOUTS[layout]
    b = np.ones((8, 16), np.float32)
    a, b = (np.asfortranarray(x) if lay == "col" else x
            for x, lay in ((a, a_layout), (b, b_layout)))  # fmt: skip
    if to_device:
        a, b = cuda.to_device(a), cuda.to_device(b)
    out = numba_gemm.matmul(a, b, precision=TF32, algorithm=algorithm)
    return np.asarray(out if not to_device else out.copy_to_host())


def tf32_reads(layout: str, to_device: bool = False) -> float:
    """C(0, 0) of A (16 x 8, every element ``NOT_TF32``) @ ones: 8 times A's element as the
    TF32 kernel multiplies it."""
    a = np.full((16, 8), NOT_TF32, np.float32)
    return float(tf32_times_ones(a, layout, to_device)[0, 0])


TF32_READS = {"b_col": ROUNDED, "row": TRUNCATED, "a_col": ROUNDED}


@pytest.mark.parametrize("layout", TF32_READS)
def test_tf32_rounds_the_register_operand_and_truncates_the_shared_one(layout):
    """B k-major (b_col): A through registers, rounded. Only A k-major (row): C^T = B^T A^T,
    A^T the shared operand, whose low 13 bits the tensor cores drop. Neither (a_col): both
    converted, rounded. The twin reads as the hardware does (``test_gpu_tf32_reads``)."""
    assert tf32_reads(layout) == TF32_READS[layout]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", TF32_READS)
def test_gpu_tf32_reads(layout):
    skip_unless_hopper()
    assert tf32_reads(layout, to_device=True) == TF32_READS[layout]


CANONICAL_NAN = np.uint32(0x7FFFFFFF).view(np.float32)  # CUDA's NaN: every mantissa bit set


def check_specials(layout: str, to_device: bool = False, algorithm: str = "wgmma") -> None:
    """Rows 0-2 of A (16 x 8: CUDA's NaN in row 0, inf in row 1, ones elsewhere) @ ones are
    NaN, inf and 8."""
    a = np.ones((16, 8), np.float32)
    a[0, 3], a[1, 5] = CANONICAL_NAN, np.inf
    rows = tf32_times_ones(a, layout, to_device, algorithm)[:3]
    assert np.isnan(rows[0]).all() and (rows[1] == np.inf).all() and (rows[2] == 8).all()


@pytest.mark.parametrize("algorithm", ["wgmma", "mma"])
@pytest.mark.parametrize("layout", TF32_READS)
def test_tf32_keeps_nan_and_inf(layout, algorithm):
    """Rounding to TF32 adds half a unit to finite values only: CUDA's NaN (all mantissa
    bits set) would otherwise carry into the sign and read as -0."""
    check_specials(layout, algorithm=algorithm)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", TF32_READS)
def test_gpu_tf32_keeps_nan_and_inf(layout):
    skip_unless_hopper()
    check_specials(layout, to_device=True)


def test_split_tf32_keeps_infinities(rng):
    assert_split_keeps_infinities(PRESETS[TF32_X3], rng, "wgmma")


@pytest.mark.gpu
def test_gpu_split_tf32_keeps_infinities(rng):
    skip_unless_hopper()
    assert_split_keeps_infinities(PRESETS[TF32_X3], rng, "wgmma", on_device=True)


def aligned_view(rows: int, cols: int, dtype, col_major: bool, rng, batch: tuple = ()
                 ) -> np.ndarray:  # fmt: skip
    """Fresh random (``batch`` of) rows x cols values in a view of a larger array whose lines
    are 16-element multiples (strides of whole 16-byte pieces, as TMA needs them) and longer
    than the view."""
    lines, length = (cols, rows) if col_major else (rows, cols)
    base = rng.standard_normal((*batch, lines + 1, -(-(length + 1) // 16) * 16)).astype(dtype)
    view = base[..., :lines, :length]
    return view.swapaxes(-1, -2) if col_major else view


def uses_tma(a, b, out, preset: str) -> bool:
    """Whether the wgmma launch for ``out = a @ b`` at ``preset`` fills its tiles with TMA."""
    from numba_gemm.api import plan
    from numba_gemm.descriptor import describe

    launch = plan(describe(a, "a"), describe(b, "b"), describe(out, "out"), "wgmma", None,
                  PRESETS[preset])  # fmt: skip
    return launch.tma


def device_maps_launch(a, b, out, config, preset: str):
    """The wgmma launch for ``out = a @ b`` as XLA's kernel call plans it (tensor maps the
    kernel builds, published to a workspace), and the workspace (uint8, filled by the launch)."""
    from numba_gemm.api import describe_matmul, plan
    from numba_gemm.launch.tensor_maps import map_workspace

    workspace = []

    def allocate(nbytes):
        workspace.append(np.zeros(nbytes, np.uint8))
        return map_workspace(nbytes, workspace[0])

    [(a_desc, b_desc, out_desc)] = describe_matmul(a, b, out, precision=preset).parts
    launch = plan(a_desc, b_desc, out_desc, "wgmma", config, PRESETS[preset], "device", allocate)
    return launch, workspace


# (operand dtype, preset, A column-major, B column-major): the TMA kernels' layouts (TF32 with
# neither operand k-major goes to the converting kernel, which copies with cp.async)
TMA_CASES = [(BF16, PRESET[BF16], a_col, b_col) for a_col in (0, 1) for b_col in (0, 1)] + [
    (F32, TF32, a_col, b_col) for a_col, b_col in ((0, 0), (0, 1), (1, 1))
]


@pytest.mark.parametrize("shape", [(1, 1, 1), (65, 67, 70)], ids=str)
@pytest.mark.parametrize("dtype, preset, a_col, b_col", TMA_CASES, ids=str)
def test_tma_copies_edges(dtype, preset, a_col, b_col, shape, rng):
    """Operands TMA can copy (16-byte aligned lines) but whose tiles overrun the matrix on every
    side: the copies' zero fill (the twin walks the box as the hardware does, past the extents
    of the view, not of the array under it) and swizzle give the product."""
    M, N, K = shape
    a = aligned_view(M, K, dtype, a_col, rng)
    b = aligned_view(K, N, dtype, b_col, rng)
    out = poisoned((M, N), F32 if dtype == F32 else dtype)
    assert uses_tma(a, b, out, preset)
    numba_gemm.matmul(a, b, out, precision=preset, algorithm="wgmma", config=SMALL)
    assert_within_preset(out, a, b, preset, dtype)


@simulator_only
@pytest.mark.parametrize(
    "dtype, preset, a_col, b_col", [TMA_CASES[0], TMA_CASES[1], TMA_CASES[4]], ids=str
)
def test_tma_copies_through_maps_the_kernel_builds(dtype, preset, a_col, b_col, rng):
    """XLA's launches (``tensor_maps="device"``): each CTA completes the templates with the
    buffers' addresses and publishes them to its two slots of the workspace; a batch of two
    products on two CTAs each. On a GPU the same kernels run under XLA's kernel call
    (``test_gpu_bridge``) and on device arrays in ``tools/sanitize_calls.py``."""
    from numba_gemm.launch import launch_kernel
    from numba_gemm.launch.tensor_maps import MAP_BYTES

    M, N, K = 65, 67, 70
    a = aligned_view(M, K, dtype, a_col, rng, batch=(2,))
    b = aligned_view(K, N, dtype, b_col, rng, batch=(2,))
    out = np.full((2, M, N), np.nan, F32)
    launch, workspace = device_maps_launch(a, b, out, SMALL, preset)
    launch_kernel(launch)
    assert_within_preset(out, a, b, preset, dtype)
    slots = workspace[0].reshape(-1, MAP_BYTES)[:, :8].view(np.int64)[:, 0]  # twin maps' keys
    # two maps per CTA, 2 x 2 tiles per product, two products: every slot its own map
    assert len(slots) == 2 * 4 * 2 and len(set(slots)) == len(slots) and slots.all()


def test_tma_copies_batches(rng):
    a = rng.standard_normal((3, 33, 72)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((3, 72, 40)).astype(ml_dtypes.bfloat16)
    out = np.full((3, 33, 40), np.nan, np.float32)
    assert uses_tma(a[0], b[0], out[0], PRESET[BF16])
    numba_gemm.matmul(a, b, out, algorithm="wgmma", config=SMALL)
    assert_within_preset(out, a, b, None, BF16, np.float32)


# One producer warpgroup (its first thread issues the TMA copies), one or two multiplying.
PRODUCER = WgmmaConfig(64, 64, 3, 1, producers=1)
PRODUCER_CASES = [(BF16, PRESET[BF16], a_col, b_col) for a_col in (0, 1) for b_col in (0, 1)] + [
    (F16, PRESET[F16], 0, 1), (F32, TF32, 0, 0), (F32, TF32, 1, 1)
]  # fmt: skip


@pytest.mark.parametrize("shape", [(1, 1, 1), (65, 67, 70), (64, 128, 448)], ids=str)
@pytest.mark.parametrize("dtype, preset, a_col, b_col", PRODUCER_CASES, ids=str)
def test_producer_warpgroup_matches_float64_reference(dtype, preset, a_col, b_col, shape, rng):
    """Warp specialisation: the consumers wait for each slice's "landed" barrier, the producer
    for each buffer's "free" one, STAGES slices ahead at most: k of one slice, of a slice and a
    bit, and of seven slices (each buffer filled and freed more than twice); tiles past the
    matrix on every side; 16-bit operands in every layout, TF32 from registers (one operand
    k-major, and neither: C^T = B^T A^T)."""
    M, N, K = shape
    a = aligned_view(M, K, dtype, a_col, rng)
    b = aligned_view(K, N, dtype, b_col, rng)
    out = poisoned((M, N), F32 if dtype == F32 else dtype)
    numba_gemm.matmul(a, b, out, precision=preset, algorithm="wgmma", config=PRODUCER)
    assert_within_preset(out, a, b, preset, dtype)


@simulator_only
def test_producer_warpgroup_with_two_consumers_in_xlas_launch(rng):
    """Two consumer warpgroups (128-row tiles; four buffers freed by two arrivals each), maps
    the kernel builds (XLA's kernel call) and a batch of two products."""
    from numba_gemm.launch import launch_kernel

    config = WgmmaConfig(128, 64, 4, 1, producers=1)
    a = aligned_view(130, 330, BF16, False, rng, batch=(2,))
    b = aligned_view(330, 67, BF16, True, rng, batch=(2,))
    out = np.full((2, 130, 67), np.nan, F32)
    launch, _ = device_maps_launch(a, b, out, config, PRESET[BF16])
    assert launch.block == 3 * 128
    launch_kernel(launch)
    assert_within_preset(out, a, b, None, BF16, F32)


GPU_PRODUCER = [
    WgmmaConfig(128, 256, 4, 8, producers=1),
    WgmmaConfig(128, 128, 4, 8, producers=1),
    WgmmaConfig(64, 128, 4, 8, producers=1),  # one consumer warpgroup: 255 registers at launch
]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["row", "col", "a_col", "b_col"])
@pytest.mark.parametrize("preset", ["BF16_BF16_F32", "TF32_TF32_F32"])
@pytest.mark.parametrize("config", GPU_PRODUCER, ids=WgmmaConfig.label)
@pytest.mark.parametrize("shape", [(1000, 1032, 1000), (2048, 2048, 4096), (8, 264, 72)], ids=str)
def test_gpu_producer_warpgroup(shape, config, preset, layout, rng):
    """The producer form on the GPU: setmaxnreg's parted registers, the "free" barriers'
    arrivals, tiles past the matrix; lines of multiples of 16 bytes (TMA). TF32 with neither
    operand k-major (``a_col``) is the converting kernel's, which has no producer form."""
    from numba import cuda

    skip_unless_hopper()
    dtype = BF16 if preset.startswith("BF16") else F32
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng, to_device=True)
    out = poisoned((M, N), F32, to_device=True, layout=layout)
    if preset == TF32 and layout == "a_col":
        with pytest.raises(ValueError, match="producers must be 0 where float32 operands"):
            numba_gemm.matmul(a, b, out, precision=preset, algorithm="wgmma", config=config)
        return
    numba_gemm.matmul(a, b, out, precision=preset, algorithm="wgmma", config=config)
    cuda.synchronize()
    assert_within_preset(out, a, b, preset, dtype, F32)


def test_producer_warpgroup_refusals(rng):
    """What the producer form does not take, refused before any launch, naming why."""
    a, b = rng.standard_normal((70, 40)).astype(BF16), rng.standard_normal((40, 30)).astype(BF16)
    with pytest.raises(ValueError, match="producers = 1 needs operands TMA can copy"):
        numba_gemm.matmul(a[:, :37], b[:37], algorithm="wgmma", config=PRODUCER)  # 74-byte lines
    for config, match in (
        (WgmmaConfig(64, 64, 3, 1, producers=2), "producers must be 0 or 1"),
        (WgmmaConfig(64, 64, 3, 1, persistent=2, producers=1), "must be 0 or 1 with a producer"),
        (WgmmaConfig(64, 64, 3, 1, k_ctas=2, producers=1), "producers must be 0 where"),
        (WgmmaConfig(192, 64, 3, 1, producers=1), "must be 64 or 128 with a producer"),
    ):
        with pytest.raises(ValueError, match=match):
            config.check(np.uint16)
    with pytest.raises(ValueError, match="producers must be 0 where"):
        PRODUCER.check(np.float32, converting=True)
    assert PRODUCER.threads == 256 and PRODUCER.consumer_threads == 128
    assert PRODUCER.label().endswith("/ws") and PRODUCER.ctas_per_sm(0, "host") == 1


# On the simulator's one SM: two CTAs per product, each looping over its tiles.
PERSISTENT = WgmmaConfig(64, 64, 3, 1, persistent=2)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", [(1, 1, 1), (130, 67, 150), (64, 192, 64)], ids=str)
def test_persistent_kernel_matches_float64_reference(shape, layout, rng):
    """CTAs that loop over tiles, the next tile's slices loading during an epilogue: edges of
    every tile, k cut inside a slice, tiles of one slice (an epilogue after every slice), CTAs
    with three tiles and with one; ``cp.async`` copies (these lines are not 16-byte aligned)."""
    M, N, K = shape
    a, b = make_operands(M, N, K, BF16, layout, rng)
    out = poisoned((M, N), F32, layout=layout)
    numba_gemm.matmul(a, b, out, algorithm="wgmma", config=PERSISTENT)
    assert_within_preset(out, a, b, None, BF16, F32)


@pytest.mark.parametrize("a_col, b_col", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_persistent_kernel_fills_with_tma(a_col, b_col, rng, monkeypatch):
    from numba_gemm.api import plan
    from numba_gemm.descriptor import describe
    from numba_gemm.kernels import hopper as wgmma

    M, N, K = 130, 67, 150
    a, b = aligned_view(M, K, F16, a_col, rng), aligned_view(K, N, F16, b_col, rng)
    out = poisoned((M, N), F32)
    monkeypatch.setattr(wgmma.plan, "multiprocessors", lambda: 1)  # 2 CTAs on one SM, any GPU
    launch = plan(describe(a, "a"), describe(b, "b"), describe(out, "out"), "wgmma", PERSISTENT,
                  PRESETS[PRESET[F16]])  # fmt: skip
    assert launch.tma and launch.grid == (2, 1, 1)  # 6 tiles on 2 CTAs
    numba_gemm.matmul(a, b, out, algorithm="wgmma", config=PERSISTENT)
    assert_within_preset(out, a, b, None, F16, F32)


@simulator_only
def test_persistent_kernel_in_xlas_launch_and_a_batch(rng):
    """Maps the kernel builds (XLA's kernel call), a batch of three products of two CTAs
    each; and a batch of one CTA per product (``persistent`` 1 on one SM) written as bf16."""
    from numba_gemm.launch import launch_kernel
    from numba_gemm.launch.tensor_maps import MAP_BYTES

    a = aligned_view(130, 72, BF16, False, rng, batch=(3,))
    b = aligned_view(72, 67, BF16, False, rng, batch=(3,))
    out = np.full((3, 130, 67), np.nan, F32)
    launch, workspace = device_maps_launch(a, b, out, PERSISTENT, PRESET[BF16])
    assert launch.grid == (1, 3, 1)  # 2 CTAs per SM on one SM, at least one per product
    launch_kernel(launch)
    assert_within_preset(out, a, b, None, BF16, F32)
    assert len(workspace[0]) == 2 * MAP_BYTES * 3
    out = np.full((3, 130, 67), np.nan, BF16)
    numba_gemm.matmul(a, b, out, algorithm="wgmma", config=WgmmaConfig(64, 64, 3, 1, persistent=1))
    assert_within_preset(out, a, b, None, BF16)


# The persistent warp-specialised form: the simulator's one SM, so one CTA over every tile.
PERSISTENT_PRODUCER = WgmmaConfig(64, 64, 3, 1, persistent=1, producers=1)


@simulator_only
@pytest.mark.parametrize("shape", [(1, 1, 1), (130, 67, 150), (64, 192, 64)], ids=str)
@pytest.mark.parametrize("dtype, preset, a_col, b_col", PRODUCER_CASES, ids=str)
def test_persistent_producer_matches_float64_reference(dtype, preset, a_col, b_col, shape, rng):
    """One CTA's stream of slices across its tiles: the producer refills each buffer with the
    next tile's slices as the consumers free it (tiles of three slices, of one); the epilogue's
    TMA stores of C's boxes (16-bit or float32, C's rows contiguous or, with A column-major,
    its columns), past the matrix on every side. Simulator only: on the GPU these host
    outputs go through contiguous device copies, whose 67-element rows TMA cannot store
    (``test_gpu_persistent_producer`` runs the kernel there)."""
    M, N, K = shape
    a = aligned_view(M, K, dtype, a_col, rng)
    b = aligned_view(K, N, dtype, b_col, rng)
    out = aligned_view(M, N, F32 if dtype == F32 else dtype, a_col, rng)
    out[...] = np.nan
    numba_gemm.matmul(a, b, out, precision=preset, algorithm="wgmma", config=PERSISTENT_PRODUCER)
    assert_within_preset(out, a, b, preset, dtype)


@simulator_only
@pytest.mark.parametrize("c_layout", ["row", "col"])
def test_persistent_producer_with_two_consumers_in_xlas_launch(c_layout, rng):
    """Two consumer warpgroups (128-row tiles), maps the kernel builds (C's too: XLA's kernel
    call), a batch of two products (one CTA each on the one SM), C's rows or columns
    contiguous (the staged boxes along n or along m)."""
    from numba_gemm.launch import launch_kernel

    config = WgmmaConfig(128, 64, 4, 1, persistent=1, producers=1)
    a = aligned_view(200, 200, BF16, False, rng, batch=(2,))
    b = aligned_view(200, 136, BF16, True, rng, batch=(2,))
    out = np.full((2, 200, 136), np.nan, F32)
    if c_layout == "col":
        out = np.full((2, 136, 200), np.nan, F32).swapaxes(-1, -2)
    launch, _ = device_maps_launch(a, b, out, config, PRESET[BF16])
    assert launch.block == 3 * 128 and launch.grid == (1, 2, 1)
    assert launch.kernel.py_func.__name__ == "persistent_producer_kernel"
    launch_kernel(launch)
    assert_within_preset(out, a, b, None, BF16, F32)


def test_persistent_producer_refuses_an_output_tma_cannot_store(rng):
    a, b = aligned_view(70, 40, BF16, False, rng), aligned_view(40, 67, BF16, False, rng)
    with pytest.raises(ValueError, match="stores the output with TMA, which cannot write"):
        numba_gemm.matmul(a, b, algorithm="wgmma", config=PERSISTENT_PRODUCER)  # 134-byte rows
    assert PERSISTENT_PRODUCER.map_count == 3 and PRODUCER.map_count == 2


GPU_PERSISTENT = [
    WgmmaConfig(64, 128, 3, 8, persistent=2),
    WgmmaConfig(128, 128, 4, 8, persistent=1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("config", GPU_PERSISTENT, ids=WgmmaConfig.label)
@pytest.mark.parametrize("shape", [(1000, 1030, 96), (3000, 517, 1000), (1, 1, 1)], ids=str)
def test_gpu_persistent_kernel(shape, config, layout, rng):
    from numba import cuda

    skip_unless_hopper()
    M, N, K = shape
    a, b = make_operands(M, N, K, BF16, layout, rng, to_device=True)
    out = poisoned((M, N), F32, to_device=True, layout=layout)
    numba_gemm.matmul(a, b, out, algorithm="wgmma", config=config)
    cuda.synchronize()
    assert_within_preset(out, a, b, None, BF16, F32)


GPU_PERSISTENT_PRODUCER = [
    WgmmaConfig(128, 256, 4, 8, persistent=1, producers=1),
    WgmmaConfig(128, 128, 6, 8, persistent=1, producers=1),
    WgmmaConfig(64, 128, 4, 8, persistent=1, producers=1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["row", "col", "b_col"])
@pytest.mark.parametrize("dtype, preset", [(BF16, "BF16_BF16_F32"), (F32, "TF32_TF32_F32")])
@pytest.mark.parametrize("config", GPU_PERSISTENT_PRODUCER, ids=WgmmaConfig.label)
@pytest.mark.parametrize(
    "shape", [(1000, 1032, 1000), (2048, 4096, 4096), (8, 264, 72), (1, 1, 1)], ids=str
)
def test_gpu_persistent_producer(shape, config, dtype, preset, layout, rng):
    """The persistent warp-specialised form on the GPU, written as its operands' dtype: tiles
    past the matrix, a CTA's several tiles, TMA stores of C with its rows contiguous and its
    columns; lines of multiples of 16 bytes (TMA)."""
    from numba import cuda

    skip_unless_hopper()
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng, to_device=True)
    out = poisoned((M, N), dtype, to_device=True, layout=layout)
    numba_gemm.matmul(a, b, out, precision=preset, algorithm="wgmma", config=config)
    cuda.synchronize()
    assert_within_preset(out, a, b, preset, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("preset", ["BF16_BF16_F32", "TF32_TF32_F32"])
@pytest.mark.parametrize("shape", [(1000, 1032, 96), (2048, 2048, 64), (520, 264, 1000)], ids=str)
def test_gpu_tiles_two_to_an_sm(shape, preset, layout, rng):
    """128 x 128 tiles in three stages, compiled for two CTAs per SM (their registers capped:
    ``WgmmaConfig.ctas_per_sm``), filled by TMA."""
    from numba import cuda

    skip_unless_hopper()
    config = WgmmaConfig(128, 128, 3, 8)
    assert config.ctas_per_sm(0, "host") == 2
    dtype = BF16 if preset.startswith("BF16") else F32
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng, to_device=True)
    out = poisoned((M, N), F32, to_device=True, layout=layout)
    numba_gemm.matmul(a, b, out, precision=preset, algorithm="wgmma", config=config)
    cuda.synchronize()
    assert_within_preset(out, a, b, preset, dtype, F32)


@pytest.mark.gpu
@pytest.mark.parametrize("config", GPU_PERSISTENT, ids=WgmmaConfig.label)
def test_gpu_persistent_kernel_batch(config, rng):
    from numba import cuda

    from numba_gemm.launch import to_device

    skip_unless_hopper()
    a = rng.standard_normal((64, 517, 128)).astype(BF16)  # attention's scores, smaller
    b = rng.standard_normal((64, 128, 300)).astype(BF16)
    out = to_device(np.full((64, 517, 300), np.nan, BF16))
    numba_gemm.matmul(to_device(a), to_device(b), out, algorithm="wgmma", config=config)
    cuda.synchronize()
    assert_within_preset(out, a, b, None, BF16)


@pytest.mark.parametrize("layout", ["row", "b_col", "col"])  # C^T = B^T A^T; C = A B; C = A B
def test_persistent_kernel_tf32(layout, rng):
    a, b = make_operands(130, 67, 150, F32, layout, rng)  # 5 slices of 32: pairs, one left
    out = poisoned((130, 67), F32, layout=layout)
    config = WgmmaConfig(64, 64, 3, 1, persistent=1)  # one SM: one CTA over its 6 tiles
    numba_gemm.matmul(a, b, out, precision=TF32, algorithm="wgmma", config=config)
    assert_within_preset(out, a, b, TF32, F32)


def test_persistent_kernel_refusals(rng):
    a, b = make_operands(70, 70, 70, F32, "row", rng)
    with pytest.raises(ValueError, match="persistent must be 0 where float32 operands are conv"):
        numba_gemm.matmul(a, b, precision=TF32_X3, algorithm="wgmma", config=PERSISTENT)
    a, b = make_operands(70, 70, 70, BF16, "row", rng)
    with pytest.raises(ValueError, match="persistent must be 0"):
        numba_gemm.matmul(a, b, algorithm="wgmma",
                          config=WgmmaConfig(64, 64, 3, 1, k_ctas=2, persistent=1))  # fmt: skip
    with pytest.raises(ValueError, match="persistent must be a non-negative integer"):
        WgmmaConfig(64, 64, 3, 1, persistent=-1).check(np.uint16)


def test_wgmma_float32_batches(rng):
    a = rng.standard_normal((2, 33, 40)).astype(np.float32)
    b = rng.standard_normal((2, 40, 20)).astype(np.float32)
    out = numba_gemm.matmul(a, b, precision=TF32, algorithm="wgmma")
    assert_within_preset(out, a, b, TF32, F32)


def test_wgmma_writes_float32_and_batches(rng):
    a = rng.standard_normal((2, 33, 70)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((70, 40)).astype(ml_dtypes.bfloat16)  # broadcast over the batch
    out = np.full((2, 33, 40), np.nan, np.float32)
    numba_gemm.matmul(a, b, out, algorithm="wgmma")  # the simulator's default: SMALL
    assert_within_preset(out, a, b, None, BF16, np.float32)


@simulator_only
def test_auto_takes_mma_on_the_simulator(rng):
    from numba_gemm.api import plan
    from numba_gemm.descriptor import describe

    a, b = make_operands(8, 8, 8, BF16, "row", rng)
    c = np.empty((8, 8), BF16)
    launch = plan(describe(a), describe(b), describe(c), "auto", None, PRESETS["BF16_BF16_F32"])
    assert launch.kernel.py_func.__name__ == "mma_kernel"
    launch = plan(describe(a), describe(b), describe(c), "wgmma", None, PRESETS["BF16_BF16_F32"])
    assert launch.kernel.py_func.__name__ == "wgmma_kernel"


@pytest.mark.parametrize(
    "cc, dtype, preset, layout, kernel",
    [
        ((9, 0), BF16, "BF16_BF16_F32", "row", "wgmma_kernel"),
        ((9, 0), F16, "F16_F16_F32", "a_col", "wgmma_kernel"),
        ((9, 0), F32, "TF32_TF32_F32", "row", "wgmma_kernel"),  # A k-major: C^T = B^T A^T
        ((9, 0), F32, "TF32_TF32_F32", "b_col", "wgmma_kernel"),  # B k-major
        ((9, 0), F32, "TF32_TF32_F32", "a_col", "wgmma_converting_kernel"),  # neither
        ((9, 0), F32, "TF32_TF32_F32_X3", "row", "wgmma_converting_kernel"),
        ((9, 0), F32, "BF16_BF16_F32", "row", "mma_kernel"),  # bf16 from float32: mma.sync
        ((9, 0), F32, "BF16_BF16_F32_X6", "row", "mma_kernel"),
        ((8, 0), F32, "TF32_TF32_F32", "row", "mma_kernel"),
        ((8, 0), BF16, "BF16_BF16_F32", "row", "mma_kernel"),
        ((8, 9), F16, "F16_F16_F32", "row", "mma_kernel"),
    ],
)
def test_auto_picks_the_kernel_that_takes_the_preset(cc, dtype, preset, layout, kernel,
                                                      monkeypatch, rng):  # fmt: skip
    from numba_gemm import api
    from numba_gemm.descriptor import describe

    monkeypatch.setattr(api, "compute_capability", lambda: cc)
    a, b = make_operands(8, 24, 40, dtype, layout, rng)  # N > 16, K > 32: wgmma's shape
    launch = api.plan(describe(a), describe(b), describe(np.empty((8, 24), dtype)),
                      "auto", None, PRESETS[preset])  # fmt: skip
    assert launch.kernel.py_func.__name__ == kernel


def test_wgmma_refuses_gpus_before_hopper(monkeypatch):
    from numba_gemm import api

    monkeypatch.setattr(api, "compute_capability", lambda: (8, 9))
    a = np.ones((8, 8), BF16)
    with pytest.raises(ValueError, match="needs a Hopper GPU"):
        numba_gemm.matmul(a, a.copy(), algorithm="wgmma")


@pytest.mark.parametrize(
    "config, ctas",
    [
        (WgmmaConfig(128, 256, 4, 8), 1),  # 193 KB of shared memory
        (WgmmaConfig(128, 128, 3, 8), 2),  # 97 KB: two, at 128 registers per thread
        (WgmmaConfig(64, 128, 3, 8), 3),  # 73 KB
        (WgmmaConfig(64, 64, 3, 8), 4),  # 49 KB: four of 128 threads at 128 registers
        (WgmmaConfig(128, 64, 3, 8, persistent=2), 2),  # the C tile apart: 107 KB
    ],
    ids=str,
)
def test_ctas_per_sm_by_shared_memory_and_registers(config, ctas):
    from numba_gemm.kernels.common import REGISTERS_PER_SM
    from numba_gemm.kernels.hopper.config import MIN_REGISTERS, SM_SHARED_BYTES

    for maps in ("none", "host", "device"):
        assert config.ctas_per_sm(0, maps) == ctas
        assert ctas * config.shared_bytes(0, maps) <= SM_SHARED_BYTES
        assert ctas * config.threads * MIN_REGISTERS <= REGISTERS_PER_SM


def test_default_tiles_halve_for_small_problems(monkeypatch):
    from dataclasses import replace

    from numba_gemm.kernels import hopper as wgmma

    monkeypatch.setattr(wgmma.config, "SIMULATED", False)
    for module in (wgmma.config, wgmma.plan):
        monkeypatch.setattr(module, "multiprocessors", lambda: 132)

    def tiles(M, N, batch=1, K=192):  # three slices of k: nothing to split, past SHORT_K
        return wgmma.default_wgmma_config(M, N, K, batch)

    assert tiles(1024, 1024) == wgmma.SMALL_WGMMA_CONFIG  # 32 big tiles
    assert tiles(2048, 2048) == wgmma.DEFAULT_WGMMA_CONFIG  # 128
    assert tiles(1024, 1024, batch=4) == wgmma.DEFAULT_WGMMA_CONFIG
    assert tiles(1024, 512) == wgmma.TINY_WGMMA_CONFIG  # 32 small tiles
    assert tiles(1024, 1024) != wgmma.TINY_WGMMA_CONFIG  # 64
    # many tiles: taller ones where the output is narrower than 256; two to an SM for short k
    assert tiles(2048, 128, batch=64) == wgmma.TALL_WGMMA_CONFIG  # 512 tiles, not 1024
    assert tiles(65536, 256) == wgmma.DEFAULT_WGMMA_CONFIG  # as many either way
    assert tiles(128, 2048, batch=64) == wgmma.DEFAULT_WGMMA_CONFIG  # N wide: 128 x 256 fits
    assert tiles(14336, 128) == wgmma.SMALL_WGMMA_CONFIG  # 56 tall tiles: fewer than the SMs
    assert tiles(2048, 2048, batch=64, K=128) == wgmma.SHORT_K_WGMMA_CONFIG
    assert tiles(8192, 8192, K=129) == wgmma.DEFAULT_WGMMA_CONFIG
    assert tiles(1024, 1024, K=64) == wgmma.SMALL_WGMMA_CONFIG  # few tiles: as for any k
    # narrow outputs: 64 along the narrow side; both narrow: the tiny tiles
    assert tiles(16, 8192) == wgmma.WgmmaConfig(64, 128, 6, 8)
    assert tiles(8192, 1) == wgmma.WgmmaConfig(128, 64, 6, 8)
    assert tiles(64, 64) == wgmma.TINY_WGMMA_CONFIG
    # few tiles over a long k: split into one wave (a slice is 64 k of 16-bit operands)
    assert wgmma.default_wgmma_config(16, 8192, 8192) == wgmma.WgmmaConfig(64, 128, 6, 8, 2)
    assert wgmma.default_wgmma_config(16, 14336, 4096).k_ctas == 1  # 112 narrow tiles
    assert wgmma.default_wgmma_config(1024, 1024, 65536) == replace(  # 32 big tiles, 128 CTAs
        wgmma.DEFAULT_WGMMA_CONFIG, k_ctas=4
    )
    assert wgmma.default_wgmma_config(128, 4096, 4096) == replace(  # 32 small tiles, 4 each
        wgmma.SMALL_WGMMA_CONFIG, k_ctas=4
    )
    assert wgmma.default_wgmma_config(1024, 512, 512) == wgmma.TINY_WGMMA_CONFIG  # 8 slices
    assert wgmma.default_wgmma_config(1024, 1024, 65536, split=False) == wgmma.SMALL_WGMMA_CONFIG
    assert wgmma.default_wgmma_config(2048, 2048, 65536).k_ctas == 1  # a wave already


def test_auto_takes_the_warp_specialised_kernel_where_tma_goes_both_ways(monkeypatch, rng):
    """The default 128 x 256 tiles run in the persistent warp-specialised kernel where TMA
    can copy the operands and store C (its rows contiguous), for 16-bit operands; else in the
    one-tile kernel. Planned as on an H100 (nothing runs)."""
    from numba_gemm.api import describe_matmul, plan
    from numba_gemm.kernels import hopper as wgmma
    from numba_gemm.launch.tensor_maps import map_workspace

    monkeypatch.setattr(wgmma.config, "SIMULATED", False)
    for module in (wgmma.config, wgmma.plan):
        monkeypatch.setattr(module, "multiprocessors", lambda: 132)

    def workspace(nbytes):
        return map_workspace(nbytes, np.zeros(nbytes, np.uint8))

    def kernel(a, b, out, preset, tensor_maps="host"):
        [operands] = describe_matmul(a, b, out, precision=preset).parts
        launch = plan(*operands, "wgmma", None, PRESETS[preset], tensor_maps, workspace)
        return launch.kernel.py_func.__name__, launch.grid

    M, N, K = 1536, 2816, 520  # 12 x 11 tiles of 128 x 256: one per SM
    a, b = aligned_view(M, K, BF16, False, rng), aligned_view(K, N, BF16, True, rng)
    for out in (np.empty((M, N), BF16), np.empty((M, N), F32)):
        assert kernel(a, b, out, PRESET[BF16]) == ("persistent_producer_kernel", (132, 1, 1))
    assert kernel(a, b, np.empty((M, N), BF16), PRESET[BF16], "device")[0] == (
        "persistent_producer_kernel"
    )
    for out in (np.empty((M, N + 1), BF16)[:, :N], np.empty((N, M), BF16).T):  # C: rows unaligned,
        assert kernel(a, b, out, PRESET[BF16])[0] == "wgmma_kernel"  # columns contiguous
    odd = rng.standard_normal((M, K + 1)).astype(BF16)[:, :K]  # 1042-byte rows: cp.async
    assert kernel(odd, b, np.empty((M, N), BF16), PRESET[BF16])[0] == "wgmma_kernel"
    x, y = aligned_view(M, K, F32, False, rng), aligned_view(K, N, F32, True, rng)
    assert kernel(x, y, np.empty((M, N), F32), TF32)[0] == "wgmma_kernel"
    # batches of 2 x 2 tiles: one CTA per product; 133 of them would take two rounds of 4
    # tiles (one SM in the second), where one CTA per tile takes 5 waves; 264 take 8 either way
    a = aligned_view(256, 192, BF16, False, rng, (264,))
    b = aligned_view(192, 512, BF16, False, rng, (264,))
    out = np.empty((264, 256, 512), BF16)
    assert kernel(a[:133], b[:133], out[:133], PRESET[BF16])[0] == "wgmma_kernel"
    assert kernel(a, b, out, PRESET[BF16]) == ("persistent_producer_kernel", (1, 264, 1))


@pytest.mark.gpu
@pytest.mark.parametrize("out_dtype", [BF16, F32])
@pytest.mark.parametrize(
    "shape", [(1536, 2816, 520), (2048, 2048, 1000), (1000, 4104, 72)], ids=str
)
def test_gpu_auto_takes_the_warp_specialised_kernel(shape, out_dtype, rng):
    from numba import cuda

    skip_unless_hopper()
    M, N, K = shape
    a, b = make_operands(M, N, K, BF16, "row", rng, to_device=True)
    out = poisoned((M, N), out_dtype, to_device=True)
    numba_gemm.matmul(a, b, out)
    cuda.synchronize()
    assert_within_preset(out, a, b, None, BF16, out_dtype)


@pytest.mark.parametrize(
    "m, n, k, algorithm, config",
    [
        (1024, 10, 512, "mma", "NARROW_MMA_CONFIG"),  # a 10-class layer
        (512, 16, 1024, "mma", "NARROW_MMA_CONFIG"),
        (1024, 512, 10, "mma", "SHORT_K_MMA_CONFIG"),  # its input gradient
        (1024, 17, 33, "wgmma", None),
        (10, 1024, 512, "wgmma", None),  # narrow rows: the shape issue's
    ],
)
def test_auto_runs_narrow_and_short_k_products_on_mma(monkeypatch, m, n, k, algorithm, config):
    from numba_gemm import api
    from numba_gemm.descriptor import describe
    from numba_gemm.kernels import mma

    monkeypatch.setattr(api, "compute_capability", lambda: (9, 0))
    monkeypatch.setattr(mma, "SIMULATED", False)
    a, b = (describe(np.ones(shape, BF16), name) for shape, name in (((m, k), "a"), ((k, n), "b")))
    preset = PRESETS["BF16_BF16_F32"]
    assert api.tensor_core_algorithm("auto", None, preset, a, b) == algorithm
    assert api.tensor_core_algorithm("wgmma", None, preset, a, b) == "wgmma"  # asked for: kept
    if config:
        assert mma.default_mma_config(np.uint16, preset, m, n, k, split=False) == getattr(
            mma, config
        )


def test_copies_refuse_a_tile_they_cannot_step_through(rng):
    # One warpgroup copying a 64 k x 256 n tile of row-major B: 32 16-byte copies per k row,
    # so copy r lies 4 k rows after the first, and the swizzle (period 8 rows) is not linear
    # in steps of 4.
    a, b = make_operands(64, 256, 64, BF16, "row", rng)
    with pytest.raises(ValueError, match="not linear"):
        numba_gemm.matmul(a, b, algorithm="wgmma", config=WgmmaConfig(64, 256, 3, 1))


@pytest.mark.parametrize(
    "kwargs, dtype, error, fragment",
    [
        ({"algorithm": "wgmma"}, F32, ValueError, "cannot compute"),
        ({"algorithm": "wgmma", "precision": "BF16_BF16_F32"}, F32, ValueError, "bfloat16 or f"),
        ({"algorithm": "mma", "config": WgmmaConfig()}, BF16, TypeError, "MmaConfig"),
        ({"algorithm": "wgmma", "config": WgmmaConfig(96)}, BF16, ValueError, "64 rows"),
        ({"algorithm": "wgmma", "config": WgmmaConfig(64, 320)}, BF16, ValueError, "up to 256"),
        ({"algorithm": "wgmma", "config": WgmmaConfig(64, 64, 2)}, BF16, ValueError, "stages"),
        ({"precision": "BF16_BF16_F32_X6", "config": WgmmaConfig()}, F32, ValueError, "bfloat16"),
        ({"precision": TF32_X3, "config": WgmmaConfig(64, 64)}, F32, ValueError, "must be 128"),
        ({"precision": TF32_X3, "config": WgmmaConfig(128, 64, 1)}, F32, ValueError, "stages"),
        ({"precision": TF32, "config": WgmmaConfig(128, 64, 2)}, F32, ValueError, "stages"),
    ],
)
def test_wgmma_refusals(kwargs, dtype, error, fragment):
    a = np.ones((4, 4), dtype)
    with pytest.raises(error, match=fragment):
        numba_gemm.matmul(a, a.copy(), **kwargs)


# (operand dtype, precision, output dtype): 16-bit operands writing their own dtype or float32,
# float32 operands at both TF32 presets
GPU_CASES = [
    (BF16, None, None),
    (BF16, None, F32),
    (F16, None, None),
    (F16, None, F32),
    (F32, TF32, None),
    (F32, TF32_X3, None),
]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", [(1, 1, 1), (127, 129, 131), (256, 384, 512), (300, 520, 1000)],
                         ids=str)  # fmt: skip
@pytest.mark.parametrize(
    "dtype, precision, out_dtype",
    GPU_CASES,
    ids=[f"{d}-{p or 'own'}-{o or 'own'}" for d, p, o in GPU_CASES],
)
def test_gpu_wgmma_default_config(dtype, precision, out_dtype, shape, layout, rng):
    from numba import cuda

    skip_unless_hopper()
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng, to_device=True)
    out = poisoned((M, N), out_dtype or dtype, to_device=True, layout=layout)
    numba_gemm.matmul(a, b, out, precision=precision, algorithm="wgmma")
    cuda.synchronize()
    assert_within_preset(out, a, b, precision, dtype, out_dtype)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape", [(72, 517, 128, 300), (72, 130, 517, 300), (4, 1000, 1030, 96), (4, 1000, 1030, 129)],
    ids=str,
)  # fmt: skip
@pytest.mark.parametrize("dtype, precision, out_dtype", [(BF16, None, F32), (F32, TF32, None)])
def test_gpu_auto_on_tall_and_short_k_batches(dtype, precision, out_dtype, shape, rng):
    """ "auto" on batches of many tiles: 256 x 128 tiles where N is under 256 < M (as the
    kernel sees it: TF32 runs these row-major operands as C^T = B^T A^T), one warpgroup's
    64 x 128 tiles for k <= 128."""
    from numba import cuda

    from numba_gemm.launch import to_device

    skip_unless_hopper()
    batch, M, N, K = shape
    a = rng.standard_normal((batch, M, K)).astype(dtype)
    b = rng.standard_normal((batch, K, N)).astype(dtype)
    out = to_device(np.full((batch, M, N), np.nan, out_dtype or dtype))
    numba_gemm.matmul(to_device(a), to_device(b), out, precision=precision)
    cuda.synchronize()
    assert_within_preset(out, a, b, precision, dtype, out_dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    "shape",
    [(1024, 10, 512), (512, 10, 1024), (1024, 512, 10), (1024, 512, 512), (129, 16, 33),
     (67, 17, 32), (3, 1, 200)],
    ids=str,
)  # fmt: skip
@pytest.mark.parametrize("dtype, precision, out_dtype", [(BF16, None, F32), (F32, TF32, None)])
def test_gpu_auto_on_narrow_short_k_and_small_products(dtype, precision, out_dtype, shape,
                                                         layout, rng):  # fmt: skip
    """ "auto" on a model's small products and the edges of its shape rules (N <= 16 and K <= 32
    run on mma, small outputs in wgmma's 64 x 64 tiles)."""
    from numba import cuda

    skip_unless_hopper()
    M, N, K = shape
    a, b = make_operands(M, N, K, dtype, layout, rng, to_device=True)
    out = poisoned((M, N), out_dtype or dtype, to_device=True, layout=layout)
    numba_gemm.matmul(a, b, out, precision=precision)
    cuda.synchronize()
    assert_within_preset(out, a, b, precision, dtype, out_dtype)
