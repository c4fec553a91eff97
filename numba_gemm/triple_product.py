"""``triple``: D = A @ B @ C (seed 003), naive, fused or as two tiled GEMMs, in either order."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any

import numpy as np

from .api import (
    check_choice,
    check_config,
    describe_product,
    flipped_host,
    plan,
    positive_host,
    prepared_call,
    run_in_memory_space,
    through_fresh_out,
    zero_fill_launches,
)
from .descriptor import MatrixDesc
from .kernels.tiled import TileConfig, for_edge_tiles, valid_or
from .kernels.triple_product import (
    MAX_CTAS_PER_SM,
    fused_tiles_per_product,
    intermediate_row_major,
    intermediate_shape,
    intermediate_view,
    large_register_tiles,
    partials_shape,
    plan_fused,
    plan_naive,
    sync_slots,
    whole_products,
)
from .launch import (
    SIMULATED,
    KernelLaunch,
    allocate_output,
    cdiv,
    checked_stream,
    multiprocessors,
    programmatic_launch,
    serialised_on_simulator,
    zero_fill,
)
from .precision import Preset, default_preset, normalise
from .prepared import Done, PreparedCalls
from .scratch import StreamScratch, stream_key
from .tuned_configs import SEARCH_SPACE, config_for_shape

__all__ = [
    "TRIPLE_ALGORITHMS",
    "ORDERS",
    "FUSED_UP_TO_MACS",
    "FUSED_ALWAYS_UP_TO_MACS",
    "STREAM_K_FROM_IDLE",
    "triple",
    "choose_order",
    "choose_triple_algorithm",
    "fusion_changes_tiles",
    "fused_config",
    "fused_tiles",
    "fused_workers",
    "TWO_PER_SM_FROM",
    "FULL_WAVE",
    "TWO_PER_SM_DTYPES",
    "fused_ctas_per_sm",
    "COLUMN_ORDER_T_FILL",
    "fused_t_column_order",
    "plan_triple",
]

TRIPLE_ALGORITHMS = ("auto", "naive", "fused", "unfused")
ORDERS = ("auto", "left", "right")

# The fused kernel's tiles (fused_config) start from the tiled GEMM's tuned tiles for A @ B;
# see fused_tiles for how they adapt to the fused grid. SMALL_FUSED_CONFIGS: split-k tiles for
# chains whose T has fewer than FILL_CTAS large tiles, largest first, so that a 512-chain's 128
# tiles per product keep 8 warps on each SM (why these shapes: docs/design/triple-product.md).
SMALL_FUSED_CONFIGS = {
    np.dtype(np.float32): (
        TileConfig(32, 64, 16, 8, 4, 2, 1, split_k=4),
        TileConfig(32, 32, 16, 4, 4, 2, 1, split_k=4),
    ),
    np.dtype(np.float64): (TileConfig(32, 64, 16, 4, 4, 2, 1, split_k=2),),
}
FILL_CTAS = 128  # tiles of T that keep one CTA on each SM of a 132-SM GPU busy
# From NEAR_FILL_CTAS to FILL_CTAS tiles of T the large tiles leave few SMs idle: they stay
# unless the small tiles cut the chain whole (no edge code) where the large ones do not.
NEAR_FILL_CTAS = 96
SIMULATOR_FUSED_CONFIG = TileConfig(16, 16, 4, 4, 4, 2, 1)  # 16 threads: simulator-sized


def choose_order(M: int, K1: int, K2: int, N: int) -> str:
    """``"left"`` for (A @ B) @ C, ``"right"`` for A @ (B @ C): the one with fewer
    multiply-adds, as ``numpy.linalg.multi_dot`` chooses (ties go left)."""
    left = M * K1 * K2 + M * K2 * N
    right = K1 * K2 * N + M * K1 * N
    return "left" if left <= right else "right"


def fused_config(M: int, K1: int, K2: int, N: int, dtype) -> TileConfig:
    """The fused kernel's default tiles for A (M x K1) @ B (K1 x K2) @ C (K2 x N): the tiled
    GEMM's tuned tiles for A @ B, adjusted to the fused grid by :func:`fused_tiles`."""
    if SIMULATED:
        return SIMULATOR_FUSED_CONFIG
    return fused_tiles(config_for_shape(M, K2, K1, dtype), M, K1, K2, N, multiprocessors(), dtype)


def fused_tiles(tuned: TileConfig, M: int, K1: int, K2: int, N: int, sms: int, dtype) -> TileConfig:
    """The fused kernel's tiles for A (M x K1) @ B (K1 x K2) @ C (K2 x N) on ``sms`` SMs, from
    ``tuned`` (the tiled GEMM's for A @ B).

    A chain of up to ``FUSED_UP_TO_MACS`` multiply-adds where the first of
    ``SMALL_FUSED_CONFIGS`` would run two CTAs per SM (:func:`fused_ctas_per_sm`: whole split-k
    tiles, at least :data:`TWO_PER_SM_FROM` of T per SM, a dtype of :data:`TWO_PER_SM_DTYPES`)
    runs those small tiles, or the tuned tiles where they would run two per SM too and fill the
    last wave of two per SM to :data:`FULL_WAVE` (see there). Otherwise: ``tuned``, a split-k
    winner with its groups stacked into rows (:func:`_groups_as_rows`), transposed where tall
    large tiles meet edge tiles in either product (``tiled.for_edge_tiles``); then half as large
    along their longer side (n on a tie) where the fused grid's last wave (T's and D's tiles, one
    CTA per SM) fills less than half the SMs; then, where T has fewer than ``FILL_CTAS`` tiles
    (see ``NEAR_FILL_CTAS`` for the exception), the first of ``SMALL_FUSED_CONFIGS`` that gives
    it that many (the smallest where none does)."""

    def t_tiles(config):
        return fused_tiles_per_product(config, M, K2, N)[0]

    def whole(config):  # both products without edge code
        return all(whole_products(config, M, K1, K2, N))

    def two_per_sm(config):
        return fused_ctas_per_sm(config, M, K1, K2, N, dtype, sms) > 1

    small = SMALL_FUSED_CONFIGS[np.dtype(dtype)]
    if M * K1 * K2 + M * K2 * N <= FUSED_UP_TO_MACS and two_per_sm(small[0]):
        slots = MAX_CTAS_PER_SM * sms
        last_wave = t_tiles(tuned) % slots
        fills = two_per_sm(tuned) and (last_wave == 0 or last_wave >= FULL_WAVE * slots)
        return tuned if fills else small[0]
    if tuned.split_k > 1:
        tuned = _groups_as_rows(tuned, dtype)
    config = tuned if whole(tuned) else for_edge_tiles(tuned, dtype)
    last_wave = sum(fused_tiles_per_product(config, M, K2, N)) % sms
    if 0 < last_wave < sms / 2:
        if config.block_m > config.block_n:  # 256 x 128 -> 128 x 128, as 128 x 256 -> 128 x 128
            narrow = replace(config, block_m=config.block_m // 2, thread_m=config.thread_m // 2)
        else:
            narrow = replace(config, block_n=config.block_n // 2, thread_n=config.thread_n // 2)
        config = valid_or(narrow, config, dtype)
    if t_tiles(config) >= FILL_CTAS or (
        t_tiles(config) >= NEAR_FILL_CTAS and (whole(config) or not whole(small[0]))
    ):
        return config
    for candidate in small:
        if t_tiles(candidate) >= FILL_CTAS:
            return candidate
    return candidate


def _groups_as_rows(tuned: TileConfig, dtype) -> TileConfig:
    """A split-k winner of the tiled GEMM with its groups stacked into rows (64 x 64 in 2 groups
    -> 128 x 64, the same threads): the search space's config of that shape where there is one,
    else the stacked config itself (``tuned`` where that is not valid).

    The tiled GEMM's split-k groups fill the SMs with one product's few tiles; the fused grid
    holds both products' tiles (and falls back to its own split-k tiles, SMALL_FUSED_CONFIGS,
    where they are too few), so it runs the same threads as taller tiles without groups."""
    rows = tuned.block_m * tuned.split_k
    shape = (rows, tuned.block_n, tuned.thread_m, tuned.thread_n)
    for candidate in SEARCH_SPACE.get(np.dtype(dtype), ()):
        if (
            candidate.split_k == 1
            and (candidate.block_m, candidate.block_n, candidate.thread_m, candidate.thread_n)
            == shape
        ):
            return candidate
    return valid_or(replace(tuned, block_m=rows, split_k=1), tuned, dtype)


# Split-k tiles that cut both products whole run two CTAs per SM (16 warps instead of 8; two
# is as many as their registers allow) where T has at least TWO_PER_SM_FROM tiles per SM: with
# fewer, the block scheduler puts T tiles two to an SM beside SMs whose D tiles wait for them.
# The tuned tiles replace the small ones where they fill the last wave of two per SM to
# FULL_WAVE. Float32 only, where it was measured (docs/design/triple-product.md).
TWO_PER_SM_FROM = 1.5
FULL_WAVE = 0.9
TWO_PER_SM_DTYPES = (np.dtype(np.float32),)


def fused_ctas_per_sm(
    config: TileConfig, M: int, K1: int, K2: int, N: int, dtype=np.float32, sms: int | None = None
) -> int:
    """How many CTAs of the fused kernel may share an SM under ``config`` for A (M x K1) @ B
    (K1 x K2) @ C (K2 x N) in ``dtype`` on ``sms`` SMs (default: this GPU's):
    ``MAX_CTAS_PER_SM`` for split-k tiles that cut both products into whole tiles, at least
    :data:`TWO_PER_SM_FROM` of T per SM, in :data:`TWO_PER_SM_DTYPES`; else 1."""
    if (
        config.split_k == 1
        or np.dtype(dtype) not in TWO_PER_SM_DTYPES
        or not all(whole_products(config, M, K1, K2, N))
    ):
        return 1
    if sms is None and SIMULATED:
        return 1
    t_tiles = fused_tiles_per_product(config, M, K2, N)[0]
    return MAX_CTAS_PER_SM if t_tiles >= TWO_PER_SM_FROM * (sms or multiprocessors()) else 1


# T's tiles column by column (``plan_fused``'s ``t_column_order``) where T's tiles, two CTAs per
# SM, fill at least COLUMN_ORDER_T_FILL of one wave and no more (N = 1024 on 132 SMs: 256 tiles
# in 264 slots); in grouped order such a chain ran about 2% slower (docs/design/triple-product.md).
COLUMN_ORDER_T_FILL = 0.95


def fused_t_column_order(
    config: TileConfig, M: int, K1: int, K2: int, N: int, dtype=np.float32, sms: int | None = None
) -> bool:
    """Whether the fused kernel hands out T's tiles column by column for this chain under
    ``config`` on ``sms`` SMs (default: this GPU's): where they run two CTAs per SM
    (:func:`fused_ctas_per_sm`) and fill from :data:`COLUMN_ORDER_T_FILL` to all of one wave."""
    ctas_per_sm = fused_ctas_per_sm(config, M, K1, K2, N, dtype, sms)
    if ctas_per_sm == 1:
        return False
    slots = ctas_per_sm * (sms or multiprocessors())
    return COLUMN_ORDER_T_FILL * slots <= fused_tiles_per_product(config, M, K2, N)[0] <= slots


# Stream-K (``plan_fused`` with workers): one CTA per SM per product, each a range of k-iterations
# that may start and end inside a tile, partial tiles passed through a scratch buffer. It wins back
# the idle SMs of a ragged last wave, but its loop runs slower per tile, so it runs only where one
# CTA per tile leaves at least STREAM_K_FROM_IDLE of the waves idle (N = 1536: 27%), and never under
# large register tiles, which need every register (docs/design/triple-product.md).
STREAM_K_FROM_IDLE = 0.10


def fused_workers(
    config: TileConfig, M: int, K1: int, K2: int, N: int, sms: int | None = None
) -> tuple[int, int] | None:
    """The fused kernel's stream-K workers per product for this chain, one per SM (``sms``,
    default this GPU's), or None for one CTA per tile (see :data:`STREAM_K_FROM_IDLE`)."""
    if config.split_k > 1 or large_register_tiles(config) or (sms is None and SIMULATED):
        return None
    sms = sms or multiprocessors()
    t_tiles, d_tiles = fused_tiles_per_product(config, M, K2, N)
    tiles = t_tiles + d_tiles
    if 1 - tiles / (cdiv(tiles, sms) * sms) < STREAM_K_FROM_IDLE:
        return None
    # At most one worker per k-iteration, so that none is idle.
    return (
        min(sms, t_tiles * cdiv(K1, config.block_k)),
        min(sms, d_tiles * cdiv(K2, config.block_k)),
    )


# The fused kernel's uint32 counters ("sync"), zero between launches (the kernel leaves them
# zero), per (context, stream, thread).
_COUNTERS = StreamScratch()


class _Intermediates:
    """Intermediates (T = A @ B) of ``triple`` per (context, stream, host thread), kept between
    calls: kernels on one stream run in order, so a thread's call starts only after its last
    call's kernels are done with T (allocating it per call would cost more host time than a
    small chain's kernel takes: docs/design/launch-and-timing.md). Each is zeroed once when
    allocated: the fused kernel reads T in whole 16-byte vectors, padding included, which it
    never writes. The buffers of the last
    INTERMEDIATES_KEPT (context, stream, thread, shape, dtype) are kept; an evicted one goes
    back to the memory pool (``launch.new_device_array``) in order on its stream, once no
    cached call (``numba_gemm.prepared``) holds it."""

    def __init__(self):
        self._buffers: OrderedDict = OrderedDict()

    def get(self, shape: tuple, dtype, stream, name: str) -> MatrixDesc:
        key = (*stream_key(stream), tuple(shape), np.dtype(dtype), name)
        held = self._buffers.get(key)
        if held is None:
            held = self._buffers[key] = allocate_output(shape, dtype, True, name, stream=stream)
            zero_fill(held, stream)  # the fused kernel reads T's padding in whole vectors
            if len(self._buffers) > INTERMEDIATES_KEPT:
                self._buffers.popitem(last=False)
        else:
            self._buffers.move_to_end(key)
        return held


# (context, stream, thread, shape, dtype) entries: a model's few chains on a few threads
INTERMEDIATES_KEPT = 32
_INTERMEDIATES = _Intermediates()


def check_triple_arguments(algorithm: str, order: str, config) -> None:
    """``ValueError``/``TypeError`` naming ``algorithm``, ``order`` or ``config``."""
    check_choice("algorithm", algorithm, TRIPLE_ALGORITHMS)
    check_choice("order", order, ORDERS)
    check_config(config, algorithm, ("fused", "auto"), "the fused triple-product kernel")
    if config is not None and not isinstance(config, TileConfig):
        raise TypeError(
            f"config must be a numba_gemm.TileConfig (the fused kernel's); got "
            f"{type(config).__name__}"
        )


def resolve(
    M: int,
    K1: int,
    K2: int,
    N: int,
    algorithm: str,
    order: str,
    config: TileConfig | None = None,
    dtype=np.float32,
) -> tuple[str, str]:
    """(algorithm, order) with ``"auto"`` decided: the order by :func:`choose_order`, then the
    algorithm by :func:`choose_triple_algorithm` for that order's sizes (``"fused"`` when a
    config is given)."""
    if order == "auto":
        order = choose_order(M, K1, K2, N)
    if algorithm == "auto" and default_preset(dtype).tensor_cores:
        algorithm = "unfused"  # 16-bit operands: two products on the tensor cores
    if algorithm == "auto":
        sizes = (M, K1, K2, N) if order == "left" else (N, K2, K1, M)
        algorithm = "fused" if config is not None else choose_triple_algorithm(*sizes, dtype)
    return algorithm, order


# "auto" (choose_triple_algorithm) fuses chains of up to FUSED_ALWAYS_UP_TO_MACS multiply-adds (N =
# 256: two launches are bound by their host time there), and up to FUSED_UP_TO_MACS (N = 1024)
# unless the tiled GEMM's tuned tiles have split-k groups and launches overlap (Hopper's
# programmatic dependent launch), where two launches are faster unless the fused kernel runs its own
# tiles two CTAs per SM. Above, it fuses where one launch saves a ragged wave or both products have
# edge tiles; where each product fills its waves, two launches are as fast
# (docs/design/triple-product.md).
FUSED_UP_TO_MACS = 2 * 1024**3
FUSED_ALWAYS_UP_TO_MACS = 2 * 256**3


def fusion_changes_tiles(
    tuned: TileConfig, M: int, K1: int, K2: int, N: int, sms: int, dtype
) -> bool:
    """Whether :func:`fused_tiles` runs other tiles than the tiled GEMM would for this chain
    on ``sms`` SMs (``tuned``: its tiles for A @ B, which it transposes where that product has
    edge tiles): where the two products' tiles leave a ragged last wave that one launch of
    narrower tiles fills, or where so few tiles that the small split-k tiles run instead. The
    transposition that edge tiles in T @ C alone bring to both products does not count."""
    return _other_tiles(fused_tiles(tuned, M, K1, K2, N, sms, dtype), tuned, dtype)


def _other_tiles(fused: TileConfig, tuned: TileConfig, dtype) -> bool:
    """Whether the fused kernel's tiles ``fused`` differ from the tiled GEMM's: it runs
    ``tuned``, or ``tuned`` transposed where its product has edge tiles."""
    return fused not in (tuned, for_edge_tiles(tuned, dtype))


def choose_triple_algorithm(M: int, K1: int, K2: int, N: int, dtype=np.float32) -> str:
    """``"auto"`` for the left-order chain (A @ B) @ C of these sizes: ``"fused"`` for chains
    of up to :data:`FUSED_ALWAYS_UP_TO_MACS` multiply-adds, and up to :data:`FUSED_UP_TO_MACS`
    unless the tiled GEMM's tuned tiles for A @ B have split-k groups and launches overlap
    (see there): then only where the fused kernel runs other tiles, two CTAs per SM
    (:func:`fused_ctas_per_sm`); above, where both products have edge tiles under the fused
    kernel's tiles or :func:`fusion_changes_tiles` on this GPU; ``"unfused"`` (two tiled
    GEMMs) otherwise."""
    macs = M * K1 * K2 + M * K2 * N
    if macs <= FUSED_ALWAYS_UP_TO_MACS:
        return "fused"
    if SIMULATED:  # no SMs to fill: the simulator runs one block at a time
        return "fused" if macs <= FUSED_UP_TO_MACS else "unfused"
    tuned = config_for_shape(M, K2, K1, dtype)
    fused = fused_tiles(tuned, M, K1, K2, N, multiprocessors(), dtype)
    if macs <= FUSED_UP_TO_MACS:
        if tuned.split_k == 1 or not programmatic_launch():
            return "fused"
        two_per_sm = fused_ctas_per_sm(fused, M, K1, K2, N, dtype) > 1
        return "fused" if two_per_sm and _other_tiles(fused, tuned, dtype) else "unfused"
    edges = not any(whole_products(fused, M, K1, K2, N))
    return "fused" if edges or _other_tiles(fused, tuned, dtype) else "unfused"


def plan_triple(
    a: MatrixDesc,
    b: MatrixDesc,
    c: MatrixDesc,
    out: MatrixDesc,
    algorithm: str = "auto",
    order: str = "auto",
    config: TileConfig | None = None,
    counters=None,
    scratch=None,
    preset: Preset | None = None,
) -> list[KernelLaunch]:
    """The launches that compute ``out = a @ b @ c`` on validated operands, at ``preset``
    (default: the operands' exact one). Presets on the tensor cores run two ``mma`` products
    through an intermediate of the operands' dtype (``"unfused"``).

    The one place that decides order, algorithm and tiles (``numba_gemm.triple``
    runs the result, ``jax_bridge.triple`` hands it to XLA). The right order is
    the left order of the transposed chain: D^T = (C^T @ B^T) @ A^T, on
    transposed views. ``counters(count)`` gives the fused kernel's zeroed uint32
    buffer, ``scratch(shape, name)`` a row-major scratch buffer named ``"ab"`` or ``"t"``
    (the intermediate) or ``"partials"`` (stream-K's partial tiles), both as descriptors.
    """
    preset = default_preset(a.dtype) if preset is None else preset
    if preset.tensor_cores:
        if algorithm not in ("auto", "unfused"):
            raise ValueError(
                f"algorithm={algorithm!r} cannot compute precision {preset.name}; the tensor "
                "cores run 'unfused' (two mma products)"
            )
        algorithm = "unfused"
    algorithm, order = resolve(
        a.shape[0], a.shape[1], c.shape[0], c.shape[1], algorithm, order, config, a.dtype
    )
    if order == "right":
        a, b, c, out = c.transposed(), b.transposed(), a.transposed(), out.transposed()
    M, K2 = a.shape[0], c.shape[0]
    if algorithm == "naive":
        return [plan_naive(a, b, c, out)]
    if algorithm == "fused":
        K1, N = a.shape[1], c.shape[1]
        config = config or fused_config(M, K1, K2, N, a.dtype)
        row_major = intermediate_row_major(config, a, b, c, out)
        t = intermediate_view(
            scratch(intermediate_shape(M, K2, a.dtype, row_major), "t"), M, K2, row_major
        )
        workers = fused_workers(config, M, K1, K2, N)
        partials = scratch(partials_shape(config, workers), "partials") if workers else None
        return [
            plan_fused(
                config,
                a,
                b,
                c,
                out,
                t,
                counters(sync_slots(M, config, workers)),
                workers,
                partials,
                fused_ctas_per_sm(config, M, K1, K2, N, a.dtype),
                fused_t_column_order(config, M, K1, K2, N, a.dtype),
            )
        ]
    intermediate = scratch((M, K2), "ab")
    algorithm = "auto" if preset.tensor_cores else "tiled"
    return [
        plan(a, b, intermediate, algorithm, None, preset),
        plan(intermediate, c, out, algorithm, None, preset),
    ]


@serialised_on_simulator
def triple(
    a: Any,
    b: Any,
    c: Any,
    out: Any = None,
    *,
    algorithm: str = "auto",
    order: str = "auto",
    config: TileConfig | None = None,
    precision: Any = None,
    stream: Any = None,
) -> Any:
    """D = A @ B @ C for A (M x K1), B (K1 x K2), C (K2 x N): float32, float64, bfloat16 or
    float16, any strides
    (negative ones as ``matmul`` takes them), any sizes (zero: NumPy's result, empty or
    zeros), all on the host or all on the current GPU (as ``matmul``). Safe from any number of
    host threads and streams: each (context, stream, thread) has its own scratch.

    ``algorithm``:

    - ``"fused"``: one launch that runs the tiles of both products, each tile of D
      as soon as its rows of the intermediate are done (the intermediate passes
      through L2; ``numba_gemm.kernels.triple_product``). No size limit.
    - ``"auto"``: fused for small chains and where one launch saves a ragged wave of
      tiles, else unfused (:func:`choose_triple_algorithm`).
    - ``"naive"``: seed 003's kernel, one block per row of D and one thread per
      column; needs max(K2, N) <= 1024 (``ValueError`` otherwise).
    - ``"unfused"``: two tiled GEMMs through an intermediate in global memory.

    ``order``: ``"left"`` computes (A @ B) @ C, ``"right"`` A @ (B @ C);
    ``"auto"`` the one with fewer multiply-adds (:func:`choose_order`).
    ``precision``: as ``matmul``'s (``numba_gemm.precision``); presets on the tensor cores
    (the default for bfloat16 and float16) run ``"unfused"``, two ``mma`` products whose
    intermediate has the operands' dtype (float32 for the float32 presets, which keep
    float32's accuracy with ``_X3``/``_X6``/``_X9``).
    ``config``: the fused kernel's :class:`~numba_gemm.TileConfig` (default:
    :func:`fused_config`; ``split_k`` > 1 runs several thread groups per tile, and two CTAs
    per SM where :func:`fused_ctas_per_sm` says).

    ``stream``: as ``matmul``'s (by default PyTorch's or CuPy's current stream for their
    arrays). Without ``out``, D is a new row-major array (on the GPU from the library's memory
    pool: ``launch.new_device_array``). As ``matmul``, the first call of a signature validates
    and plans, and later ones launch that plan on their arrays (``numba_gemm.prepared``).
    """
    # The thread is part of the key: a prepared call holds its thread's scratch (stream_key).
    options = (algorithm, order, config, precision, threading.get_ident())
    return _CALLS.call(_prepare_triple, (a, b, c), out, options, stream)


def _prepare_triple(operands: tuple, out: Any, options: tuple, stream: Any):
    """``triple``'s first call of a signature (``numba_gemm.prepared``): every check, then the
    plan as a :class:`PreparedCall`; for host memory, the whole call run here (:class:`Done`)."""
    (a, b, c), (algorithm, order, config, precision, _) = operands, options
    check_triple_arguments(algorithm, order, config)
    precision = normalise(precision)
    stream = checked_stream(stream)
    if flipped_host(out):
        return Done(
            through_fresh_out(
                out,
                lambda fresh: triple(
                    a, b, c, fresh, algorithm=algorithm, order=order, config=config,
                    precision=precision, stream=stream,
                ),
            )
        )  # fmt: skip
    (a_desc, b_desc, c_desc), out_desc, preset = describe_product(
        (("a", positive_host(a)), ("b", positive_host(b)), ("c", positive_host(c))),
        out,
        stream,
        precision,
    )
    dtype = a_desc.dtype
    if config is not None:
        if preset.tensor_cores:
            raise ValueError(
                f"config sets the fused kernel's tiles; precision {preset.name} runs unfused"
            )
        config.check(dtype)
    inputs, keep = (a_desc, b_desc, c_desc), []  # keep: scratch, or the zeros of K = 0

    def allocate_scratch(shape, name):
        keep.append(_INTERMEDIATES.get(shape, dtype, stream, name))
        return keep[-1]

    def launches(a, b, c, out):
        if out.span == 0:  # M or N is 0: an empty result
            return []
        if 0 in (a.shape[1], c.shape[0]):  # K1 or K2 is 0: every element is 0
            zero_launches, zeros = zero_fill_launches(out, stream)
            keep.extend(zeros)
            return zero_launches
        return plan_triple(
            a,
            b,
            c,
            out,
            algorithm,
            order,
            config,
            scratch=allocate_scratch,
            counters=lambda count: _COUNTERS.get("sync", (count, 1), np.uint32, stream),
            preset=preset,
        )

    if not out_desc.on_device:
        run_in_memory_space(inputs, out_desc, launches, stream)
        return Done(out_desc.source)
    planned = launches(*inputs, out_desc)
    if out_desc.span == 0 or 0 in (a_desc.shape[1], c_desc.shape[0]):
        inputs = (None, None, None)  # never read
    return prepared_call(planned, inputs, out_desc, out is not None, tuple(keep), stream)


# Every call on device arrays goes through its prepared call (numba_gemm.prepared).
_CALLS = PreparedCalls()
