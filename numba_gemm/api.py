"""``matmul``: validate, choose an algorithm, launch, return in the caller's memory space."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .descriptor import ArrayDesc, MatrixDesc, current_device, describe, describe_array
from .kernels.hopper import (
    WGMMA_CC,
    WgmmaConfig,
    plan_wgmma,
    wgmma_takes,
)
from .kernels.loop_orders import LOOP_ORDERS, plan_loop_order
from .kernels.mma import MmaConfig, default_mma_config, plan_mma, shape_mma_config, storage_dtype
from .kernels.skinny import as_computed as skinny_as_computed
from .kernels.skinny import lanes_along_n, plan_skinny
from .kernels.skinny import rows_fit as skinny_rows_fit
from .kernels.skinny import strips as skinny_strips
from .kernels.tiled import NARROW_M, TileConfig, narrow_config, plan_tiled, with_k_ctas
from .launch import (
    MAX_GRID_YZ,
    SIMULATED,
    KernelLaunch,
    allocate_array,
    allocate_output,
    checked_stream,
    compute_capability,
    copy_to_host,
    device_operand,
    fresh_device_output,
    launch_kernel,
    multiprocessors,
    require_gpu,
    serialised_on_simulator,
    to_device,
)
from .loops import fold_loops
from .precision import BFLOAT16, FLOAT16, Preset, default_preset, normalise, output_dtypes, resolve
from .prepared import Done, PreparedCall, PreparedCalls
from .scratch import SPLIT_K_SCRATCH
from .tuned_configs import config_for

__all__ = [
    "ALGORITHMS",
    "FFMA_ALGORITHMS",
    "TENSOR_CORE_ALGORITHMS",
    "matmul",
    "choose_algorithm",
    "check_algorithm",
    "check_choice",
    "check_config",
    "check_pair",
    "check_preset",
    "check_inner",
    "check_current_device",
    "check_output",
    "check_output_memory",
    "describe_matmul",
    "describe_product",
    "zero_fill_launches",
    "prepared_call",
    "flipped_host",
    "positive_host",
    "through_fresh_out",
    "Product",
    "plan",
    "execute",
    "split_k_scratch",
    "run_in_memory_space",
]

ALGORITHMS = ("auto", "tiled", "skinny", "mma", "wgmma") + tuple(LOOP_ORDERS)
# The algorithms of each kind of preset: the FFMA kernels compute float32 and float64 exactly,
# the tensor-core kernel every bf16, f16 and TF32 preset; the skinny kernel also computes bf16
# and f16 operands at their own presets (float32 products and sums, as the tensor cores).
FFMA_ALGORITHMS = ("auto", "tiled", "skinny") + tuple(LOOP_ORDERS)
TENSOR_CORE_ALGORITHMS = ("auto", "mma", "wgmma")
SKINNY_16_BIT_PRESETS = tuple(default_preset(d).name for d in (BFLOAT16, FLOAT16))
# "auto" runs 16-bit matrix-vector products on the skinny kernel from one CTA per two SMs
# (read along k, 128 CTAs streamed 3.5 TB/s on an H200's 132 SMs)
SKINNY_16_BIT_SMS_PER_CTA = 2
CONFIG_TYPES = {"tiled": TileConfig, "mma": MmaConfig, "wgmma": WgmmaConfig}

# "auto" runs the tiled kernel from this many multiply-adds on (64^3); below it a large tile
# is mostly empty and one thread per element does as well (docs/design/loop-orders.md).
TILED_FROM_MACS = 64**3


def choose_algorithm(a: MatrixDesc, b: MatrixDesc) -> str:
    """``"skinny"`` for products whose result is one row or column (a matrix-vector
    product), or a few read along n, ``"tiled"`` for the rest, but for tiny problems the loop
    order that coalesces for the layouts.

    A matrix-vector product (a decode step's M = 1) is bound by reading its large operand once,
    which the skinny kernel streams (``kernels/skinny.py``), as are results of 2 to
    ``skinny.ROWS_MAX_M`` rows whose B is read along n (its lanes along n: float32 2-4 x 8192 x
    8192 on an H200 in 71-75 us against 86 for the 16-row tiles); other results of up to
    ``NARROW_M`` rows or columns take the tiled kernel's 16-row tiles (:func:`plan`).

    Among the loop orders only the register-accumulating ones (``mnk``/``nmk``) are
    candidates: the k-outer orders move C through memory at every step and never win. ``mnk``
    runs threads along n and wants B row-major; ``nmk`` runs them along m and wants A
    column-major (see ``kernels/loop_orders.py``).
    """
    (M, K), N = a.shape, b.shape[1]
    if M * N * K >= TILED_FROM_MACS:
        return "skinny" if min(M, N) == 1 or lanes_along_n(a, b) else "tiled"
    if b.layout != "row" and a.layout == "col":
        return "nmk"
    return "mnk"


def check_pair(a, b) -> None:
    """Errors naming both operands unless they can meet in one product: dtypes, memory space,
    device. (Inner sizes: :func:`check_inner`.)"""
    x, y = a.name, b.name
    if a.dtype != b.dtype:
        raise TypeError(f"{x} is {a.dtype} but {y} is {b.dtype}; cast one so both dtypes match")
    if a.on_device != b.on_device:
        where = {True: "on the GPU", False: "a host (NumPy) array"}
        raise TypeError(
            f"{x} is {where[a.on_device]} but {y} is {where[b.on_device]}; pass both on the "
            f"same side"
        )
    if a.device != b.device:
        raise ValueError(
            f"{x} is on GPU {a.device} but {y} is on GPU {b.device}; move both to one device"
        )
    check_current_device(a)


def check_current_device(x) -> None:
    """``ValueError`` unless device memory ``x`` is on the current thread's device (kernels run
    there, on its streams)."""
    if x.on_device and not SIMULATED and x.device != (here := current_device()):
        raise ValueError(
            f"{x.name} is on GPU {x.device} but this thread's current device is GPU {here}; "
            f"call under `with numba.cuda.gpus[{x.device}]:`"
        )


def check_inner(a: MatrixDesc, b: MatrixDesc) -> None:
    """``ValueError`` naming both unless ``a``'s columns equal ``b``'s rows."""
    x, y = a.name, b.name
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"inner dimensions differ: {x} is {a.shape[0]}x{a.shape[1]} and {y} is "
            f"{b.shape[0]}x{b.shape[1]}; {x}'s columns must equal {y}'s rows"
        )


READ_ONLY_OUT = (
    "out is a read-only array (its producer forbids writes: a read-only NumPy array, a JAX "
    "array, a PyTorch tensor that requires grad, a read-only CUDA array interface); pass a "
    "writable one"
)


def check_output(out, shape: tuple, dtype, on_device: bool, inputs: tuple) -> None:
    """``out`` (a :class:`MatrixDesc` or :class:`ArrayDesc`) can take the product: shape,
    dtype (``dtype``, or one of a tuple of them), memory space and device, writable, no element
    reached twice, no input overlapped."""
    if out.shape != tuple(shape):
        raise ValueError(f"out has shape {out.shape}; the product needs {tuple(shape)}")
    dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
    if out.dtype not in dtypes:
        raise TypeError(f"out is {out.dtype}; the product is {' or '.join(map(str, dtypes))}")
    if out.on_device != on_device:
        side = "the GPU" if on_device else "the host"
        raise TypeError(f"out must live where the inputs do ({side})")
    if inputs and out.device != inputs[0].device:
        raise ValueError(
            f"out is on GPU {out.device} but {inputs[0].name} is on GPU {inputs[0].device}"
        )
    check_output_memory(out)
    for x in inputs:
        if out.overlaps(x):
            raise ValueError(
                f"out overlaps {x.name} in memory (their address ranges intersect); the "
                f"kernels read {x.name} while writing out, so pass a separate output"
            )


def check_output_memory(out) -> None:
    """``ValueError`` unless every element of ``out`` (a :class:`MatrixDesc` or
    :class:`ArrayDesc`) is its own memory (no stride 0, no two indices on one element) and may
    be written."""
    if out.span:  # an empty out has no element to share (NumPy gives those odd strides)
        broadcast = [i for i, (n, s) in enumerate(zip(out.shape, out.strides)) if n > 1 and s == 0]
        if broadcast:
            raise ValueError(
                f"out has stride 0 on axis {broadcast[0]} (a broadcast view): distinct elements "
                "share memory"
            )
        if out.has_internal_overlap():
            raise ValueError(
                f"out has strides {out.strides} under which distinct elements share memory"
            )
    if out.readonly:
        raise ValueError(READ_ONLY_OUT)


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """``ValueError`` naming the argument unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def check_config(config, algorithm: str, takes_config: tuple[str, ...], kernel: str) -> None:
    """``TypeError`` unless ``config`` is None or a TileConfig; ``ValueError`` if the chosen
    ``algorithm`` is not one of those that take one (``kernel`` says whose tiles it sets)."""
    if config is None:
        return
    if not isinstance(config, tuple(CONFIG_TYPES.values())):
        raise TypeError(
            "config must be a numba_gemm.TileConfig, MmaConfig or WgmmaConfig; got "
            f"{type(config).__name__}"
        )
    if algorithm not in takes_config:
        raise ValueError(f"config applies to {kernel}; algorithm={algorithm!r} takes none")


def check_algorithm(algorithm: str, config) -> None:
    """``ValueError``/``TypeError`` for an unknown algorithm or a config it cannot take: a
    ``TileConfig`` for ``"tiled"``, an ``MmaConfig`` for ``"mma"``, a ``WgmmaConfig`` for
    ``"wgmma"`` (any for ``"auto"``)."""
    check_choice("algorithm", algorithm, ALGORITHMS)
    check_config(config, algorithm, (*CONFIG_TYPES, "auto"), "the tiled, mma and wgmma kernels")
    wanted = CONFIG_TYPES.get(algorithm)
    if config is not None and wanted is not None and not isinstance(config, wanted):
        raise TypeError(
            f"algorithm={algorithm!r} takes a numba_gemm.{wanted.__name__}; got "
            f"{type(config).__name__}"
        )


def check_preset(preset: Preset, algorithm: str, config) -> None:
    """``ValueError`` unless ``algorithm`` (and ``config``'s kind) can compute ``preset``."""
    tensor_cores = preset.tensor_cores
    algorithms = TENSOR_CORE_ALGORITHMS if tensor_cores else FFMA_ALGORITHMS
    if preset.name in SKINNY_16_BIT_PRESETS:
        algorithms += ("skinny",)
    if algorithm not in algorithms:
        raise ValueError(
            f"algorithm={algorithm!r} cannot compute precision {preset.name}; it runs on "
            f"{', '.join(map(repr, algorithms))}"
        )
    kinds = (MmaConfig, WgmmaConfig) if tensor_cores else (TileConfig,)
    if config is not None and not isinstance(config, kinds):
        raise TypeError(
            f"precision {preset.name} runs the {'mma or wgmma' if tensor_cores else 'tiled'} "
            f"kernel, which takes a numba_gemm.{' or '.join(k.__name__ for k in kinds)}; got "
            f"{type(config).__name__}"
        )


def skinny_at_preset(algorithm: str, config, preset: Preset, a: MatrixDesc,
                     b: MatrixDesc) -> bool:  # fmt: skip
    """Whether a tensor-core preset's product runs on the skinny kernel: asked for, or
    ``"auto"`` (no config) on a matrix-vector product (a decode step's token) of bf16 or f16
    operands at their own preset where the kernel reads the matrix along k (B k-major as
    computed: a weight stored (out, in), times a column) in at least one CTA per
    :data:`SKINNY_16_BIT_SMS_PER_CTA` SMs, or along n with its lanes along n (a JAX ``Dense``
    kernel times a row; k split across CTAs); or of float32 operands at ``TF32_TF32_F32`` read
    along n (computed in float32: no less exact than TF32). There it streams the matrix faster
    than a tensor-core tile of 64 rows of which one is used (``docs/design/skinny.md``). With 2
    to 16 rows the wgmma kernel's tile serves them as fast or faster. ``ValueError`` where
    ``"skinny"`` is asked for on operands it does not take (float32 ones at a bf16 preset are
    rounded to bf16 first: the tensor cores' work)."""
    own_preset = np.dtype(a.dtype) in (BFLOAT16, FLOAT16) and default_preset(a.dtype) == preset
    if algorithm == "skinny" and not own_preset:
        raise ValueError(
            f"algorithm='skinny' computes bf16 and f16 operands at their own precision; "
            f"{a.dtype} operands at precision {preset.name} run on 'mma' or 'wgmma'"
        )
    if algorithm == "skinny":
        return True
    tf32 = preset.name == "TF32_TF32_F32"  # float32 operands: the only ones it takes
    if algorithm != "auto" or config is not None or not (own_preset or tf32):
        return False
    if min(a.shape[0], b.shape[1]) != 1:
        return False
    x, y, _, b_loads = skinny_as_computed(a, b, b)  # (C's descriptor plays no part here)
    if skinny_rows_fit(x, b_loads):  # lanes along n
        return True
    if tf32:
        return False
    strips = skinny_strips(y.shape[1], a.dtype)
    return b_loads == "runs" and strips * SKINNY_16_BIT_SMS_PER_CTA >= multiprocessors()


def tensor_core_algorithm(algorithm: str, config, preset: Preset, a: MatrixDesc,
                          b: MatrixDesc) -> str:  # fmt: skip
    """``"wgmma"`` or ``"mma"``: the tensor-core kernel for ``preset`` on ``a @ b``. ``"auto"``
    (with no config to say) takes wgmma where it computes the preset (16-bit operands at their
    own precision, float32 ones as TF32 or 3xTF32: ``kernels.hopper.wgmma_takes``) on a GPU of
    compute capability 9.0 (Hopper) and the product's shape suits its tiles (not a narrow
    output or a short k: ``kernels.mma.shape_mma_config``), mma otherwise (the bf16 splits of
    float32, other GPUs, the simulator, those shapes). ``ValueError`` where wgmma is asked for
    and cannot run."""
    if algorithm == "auto" and config is not None:
        algorithm = "wgmma" if isinstance(config, WgmmaConfig) else "mma"
    cc = compute_capability()
    takes = wgmma_takes(preset, a.dtype)
    if algorithm == "auto":
        hopper = cc is not None and cc[0] == WGMMA_CC[0]
        suits = shape_mma_config(b.shape[1], a.shape[1]) is None
        return "wgmma" if takes and hopper and suits else "mma"
    if algorithm == "wgmma":
        if not takes:
            raise ValueError(
                "algorithm='wgmma' takes bfloat16 or float16 operands at their own precision "
                f"and float32 ones at TF32_TF32_F32 or TF32_TF32_F32_X3; {a.dtype} operands at "
                f"precision {preset.name} run on 'mma'"
            )
        if cc is not None and cc[0] != WGMMA_CC[0]:
            raise ValueError(
                f"algorithm='wgmma' needs a Hopper GPU (compute capability 9.x); this one is "
                f"{cc[0]}.{cc[1]}: use 'mma'"
            )
    return algorithm


def plan(
    a: MatrixDesc,
    b: MatrixDesc,
    out: MatrixDesc,
    algorithm: str = "auto",
    config: TileConfig | MmaConfig | WgmmaConfig | None = None,
    preset: Preset | None = None,
    tensor_maps: str = "host",
    workspace=None,
    scratch=None,
) -> KernelLaunch:
    """The launch that computes ``out = a @ b`` (for each of ``out.batch`` products) on
    validated operands: the algorithm (``"auto"``: the tensor-core kernel for the presets
    that run on tensor cores, else :func:`choose_algorithm`), the tile config (by default
    the tuned one) and the launch geometry. ``preset``: by default the operands' exact one
    (:func:`numba_gemm.precision.default_preset`). ``tensor_maps``: how the ``wgmma``
    kernel's TMA copies get the operands' tensor maps: "host" (encoded here: the operands'
    addresses are real), "device" (built by the kernel into ``workspace(nbytes)``, a uint8
    buffer: XLA's kernel call) or "none" (``cp.async`` copies instead); see
    :func:`numba_gemm.kernels.hopper.plan_wgmma`. ``scratch(name, shape, dtype)``: the
    descriptors of split-k's buffers (``kernels.split_k``), where the caller has them; without
    it the default configs keep every tile in one CTA.

    The one place these are decided: :func:`matmul` executes the plan through
    Numba, ``jax_bridge`` hands the same plan to XLA.
    """
    preset = default_preset(a.dtype) if preset is None else preset
    check_preset(preset, algorithm, config)
    if preset.tensor_cores and skinny_at_preset(algorithm, config, preset, a, b):
        return plan_skinny(a, b, out, scratch)
    if preset.tensor_cores:
        if tensor_core_algorithm(algorithm, config, preset, a, b) == "wgmma":
            return plan_wgmma(config, preset, a, b, out, tensor_maps, workspace, scratch)
        (M, K), N = a.shape, b.shape[1]
        config = config or default_mma_config(storage_dtype(a.dtype), preset, M, N, K, out.batch,
                                               scratch is not None)  # fmt: skip
        return plan_mma(config, preset, a, b, out, scratch)
    if config is not None:
        config.check(a.dtype)
    if algorithm == "auto":
        algorithm = "tiled" if config is not None else choose_algorithm(a, b)
    if algorithm == "skinny":
        return plan_skinny(a, b, out, scratch)
    if algorithm != "tiled":
        return plan_loop_order(algorithm, a, b, out)
    (M, K), N = a.shape, b.shape[1]
    if config is None and min(M, N) <= NARROW_M:  # 16-row tiles, as C^T = B^T A^T if N is narrow
        if N < M:
            a, b, out, M, N = b.transposed(), a.transposed(), out.transposed(), N, M
        config = narrow_config(M, N, K, out.batch, a.dtype, scratch is not None)
    elif config is None:
        config = config_for(a, b, out)
        if scratch is not None:
            config = with_k_ctas(config, M, N, K, out.batch)
    return plan_tiled(config, a, b, out, scratch)


@serialised_on_simulator
def matmul(
    a: Any,
    b: Any,
    out: Any = None,
    *,
    precision: Any = None,
    algorithm: str = "auto",
    config: TileConfig | MmaConfig | WgmmaConfig | None = None,
    stream: Any = None,
) -> Any:
    """``a @ b`` with NumPy's ``matmul`` semantics; float32, float64, bfloat16 or float16; any
    strides.

    ``a`` (..., M, K) and ``b`` (..., K, N): matrices, or stacks of them whose leading (batch)
    axes broadcast against each other; a 1-D ``a`` is a row (K,) and a 1-D ``b`` a column
    (K,), their added axis dropped from the result, as in NumPy. The batch runs as one launch
    wherever its axes fold into one stride in all three arrays (contiguous stacks, one operand
    broadcast), else one launch per outer index. Zero-size dimensions give NumPy's result
    (empty, or zeros when K = 0). Negative strides: NumPy arrays are copied to positive-strided
    ones; device arrays are refused (``describe``).

    ``a``, ``b`` (and ``out``) are NumPy arrays or CUDA arrays (Numba, CuPy, PyTorch, JAX, ...);
    all on the host or all on the current GPU. The result comes back in the inputs' memory
    space: in ``out`` when given, otherwise in a new row-major array (a Numba device array for
    device inputs).

    ``precision``: how the product is computed, with JAX's names (``numba_gemm.precision``):
    a preset (``"BF16_BF16_F32"``, ``"BF16_BF16_F32_X3"``/``_X6``/``_X9``, ``"TF32_TF32_F32"``,
    ``"TF32_TF32_F32_X3"``, ``"F16_F16_F32"``, ``"F32_F32_F32"``, ``"F64_F64_F64"``, or a
    ``jax.lax.DotAlgorithmPreset`` member) or ``"default"``/``"high"``/``"highest"`` (a
    ``jax.lax.Precision``): float32 on TF32 tensor cores for the first two, exact for the last.
    ``None`` (default): float32 and float64 exactly, on FMA units, as always; bfloat16 and
    float16 on the tensor cores (``BF16_BF16_F32``, ``F16_F16_F32``). Accumulation is in float32
    (float64 for float64). Both operands must have one dtype. The result has the operands'
    dtype, or ``out``'s where given: bfloat16 and float16 operands may write float32.

    ``algorithm``: ``"tiled"`` (shared-memory tiles, register blocking, a cp.async pipeline and
    grouped CTA order: ``numba_gemm.kernels.tiled``), ``"skinny"`` (a result of at most 16 rows
    or columns, float32 or float64: every lane streams its rows of the large operand,
    ``numba_gemm.kernels.skinny``), ``"mnk"``, ``"nmk"``, ``"kmn"``, ``"knm"``
    (seed 001's loop orders, see ``numba_gemm.kernels.loop_orders``), ``"mma"`` (tensor cores
    through ``mma.sync``: ``numba_gemm.kernels.mma``), ``"wgmma"`` (Hopper's warpgroup tensor-core
    instructions, bf16/f16 operands and float32 ones as TF32 or 3xTF32:
    ``numba_gemm.kernels.hopper``) or ``"auto"``: the tensor cores for presets that use them
    (wgmma where it takes the preset on Hopper, else mma), else skinny for a result of one row
    or column (or up to 4 read along n) and tiled for the rest, but for tiny problems
    (:func:`choose_algorithm`). All
    checks run before any launch and raise ``ValueError``/``TypeError`` naming the argument.

    ``config``: the tiled kernel's :class:`~numba_gemm.TileConfig` (by default the tuned one for
    this device, dtype, layout and shape class: :func:`numba_gemm.tuned_configs.config_for`, or
    for a result of at most 16 rows or columns ``numba_gemm.kernels.tiled.narrow_config``'s), or
    the mma kernel's ``MmaConfig``, or the wgmma kernel's ``WgmmaConfig``.

    ``stream``: the stream the kernels run on: a Numba, PyTorch or CuPy stream, or a raw
    ``CUstream`` handle (an int; 0 is the legacy default stream). ``None`` (default): PyTorch's
    current stream for PyTorch tensors, CuPy's for CuPy arrays, else the legacy default stream.
    The launch is ordered after the work PyTorch and CuPy have queued on their current stream
    and after the computation of a JAX array (and of any DLPack producer); Numba arrays, as with
    any Numba launch, are the caller's to order. Device results are not synchronised. A new
    device result comes from the library's stream-ordered pool and goes back to it on the
    launch's stream once dropped (``launch.new_device_array``).

    The first call with a given signature (the arrays' kinds, dtypes, shapes, strides and
    alignment, and every other argument, the stream and the device) validates and plans; later
    calls with that signature, on these arrays or any others, read the arrays' addresses,
    check what changed and launch the prepared plan (``numba_gemm.prepared``). Safe from any
    number of host threads (on the simulator the library serialises launches).
    """
    # The thread is part of the key: a prepared call holds its thread's scratch (``scratch``).
    options = (precision, algorithm, config, threading.get_ident())
    return _CALLS.call(_prepare_matmul, (a, b), out, options, stream)


def _prepare_matmul(operands: tuple, out: Any, options: tuple, stream: Any):
    """``matmul``'s first call of a signature (``numba_gemm.prepared``): every check, then the
    plan of each launch as a :class:`PreparedCall`; for host memory, the whole call run here
    (:class:`Done`)."""
    (a, b), (precision, algorithm, config, _) = operands, options
    check_algorithm(algorithm, config)
    precision = normalise(precision)
    stream = checked_stream(stream)
    if flipped_host(out):
        return Done(
            through_fresh_out(
                out,
                lambda fresh: matmul(
                    a, b, fresh, precision=precision, algorithm=algorithm, config=config,
                    stream=stream,
                ),
            )
        )  # fmt: skip
    product = describe_matmul(positive_host(a), positive_host(b), out, stream, precision)
    preset = product.preset
    check_preset(preset, algorithm, config)
    if config is not None:
        config.check(storage_dtype(product.dtype) if preset.tensor_cores else product.dtype)
    if not product.out.on_device:
        for a_desc, b_desc, out_desc in product.parts:
            execute(a_desc, b_desc, out_desc, algorithm, config, stream, preset)
        return Done(product.out.source)
    scratch = split_k_scratch(stream)
    launches = [plan(*part, algorithm, config, preset, scratch=scratch) for part in product.parts]
    return prepared_call(launches, product.inputs, product.out, out is not None, product.keep,
                         stream)  # fmt: skip


def prepared_call(
    launches: list[KernelLaunch],
    inputs: tuple,
    out: ArrayDesc | MatrixDesc,
    out_given: bool,
    keep: tuple,
    stream: Any,
) -> PreparedCall:
    """The :class:`PreparedCall` of ``launches`` on the validated ``inputs`` (descriptors;
    None for one the launches never read) and ``out``."""
    arrays = (*inputs, out) if out_given else inputs
    return PreparedCall(
        launches,
        tuple(None if x is None else x.name for x in arrays),
        tuple(0 if x is None else x.address for x in arrays),
        tuple(0 if x is None else x.span * x.dtype.itemsize for x in arrays),
        out.device,
        keep,
        out_given,
        out.shape,
        out.dtype,
        out.address,
        stream,
    )


# Every call on device arrays goes through its prepared call (numba_gemm.prepared).
_CALLS = PreparedCalls()


def flipped_host(x) -> bool:
    """A NumPy array with a negative stride on an axis of extent > 1."""
    return isinstance(x, np.ndarray) and any(s < 0 and n > 1 for n, s in zip(x.shape, x.strides))


def positive_host(x):
    """``x``, or for a NumPy array with negative strides a positive-strided copy of it (host
    operands are copied to the GPU anyway; the kernels index from element (0, 0) forwards)."""
    return np.ascontiguousarray(x) if flipped_host(x) else x


def through_fresh_out(out: np.ndarray, compute: Callable[[np.ndarray], Any]) -> np.ndarray:
    """``compute(fresh)`` into a fresh array of ``out``'s shape and dtype (where the checks of
    shape, dtype and inputs run), then copied into ``out``, a NumPy view with negative strides:
    checked first to be writable with every element its own memory, seen with those axes
    flipped (:func:`check_output_memory`)."""
    flipped = [axis for axis, stride in enumerate(out.strides) if stride < 0]
    check_output_memory(describe_array(np.flip(out, flipped), "out"))
    out[...] = compute(np.empty(out.shape, out.dtype))
    return out


class Product(NamedTuple):
    """A validated ``matmul``: ``parts``, the (a, b, out) descriptors of each launch (a batch of
    products each; none for an empty result); ``out``, the whole result; ``dtype``, the
    operands'; ``keep``, buffers the launches read that the caller must hold (the zero operands
    of K = 0); ``preset``, the precision it is computed at; ``inputs``, the descriptors of
    ``a`` and ``b`` (None for those the launches never read: K = 0)."""

    parts: list
    out: ArrayDesc
    dtype: np.dtype
    keep: tuple
    preset: Preset
    inputs: tuple


def describe_matmul(a: Any, b: Any, out: Any, stream: Any = 0, precision: Any = None) -> Product:
    """Describe and check ``matmul``'s operands and output (NumPy's ``matmul`` rules: vectors
    promoted, batch axes broadcast) and split the batch into launches.

    1. Describe ``a`` and ``b`` (:func:`describe_array`); check dtypes, memory space, device;
       resolve ``precision`` for their dtype (:func:`numba_gemm.precision.resolve`).
    2. Promote vectors: ``a`` (K,) is (1, K), ``b`` (K,) is (K, 1), with stride 0 on the added
       axis; check the inner sizes and broadcast the batch axes.
    3. Describe ``out`` (or allocate it row-major) and check it (:func:`check_output`).
    4. Fold the batch axes: neighbours merge where each of the three arrays steps over the
       inner one's whole extent with one step of the outer one (stride 0 broadcasts).
    5. One part per index of the outer batch axes (and per ``MAX_GRID_YZ`` products of the
       innermost, CUDA's limit on the launch's batch); none for an empty result; zero operands
       (1 element, strides 0) for K = 0, so that the kernels write zeros.
    """
    a, b = describe_array(a, "a", stream), describe_array(b, "b", stream)
    for x in (a, b):
        if x.ndim == 0:
            raise ValueError(
                f"{x.name} is 0-D (a scalar); matmul takes arrays of at least 1 dimension "
                "(multiply by a scalar with *)"
            )
    check_pair(a, b)
    preset = resolve(precision, a.dtype)
    a_shape, a_strides = (a.shape, a.strides) if a.ndim > 1 else ((1, *a.shape), (0, *a.strides))
    b_shape, b_strides = (b.shape, b.strides) if b.ndim > 1 else ((*b.shape, 1), (*b.strides, 0))
    (M, K), (K_b, N) = a_shape[-2:], b_shape[-2:]
    if K != K_b:
        if a.ndim == b.ndim == 2:
            check_inner(a.matrix(a.shape, a.strides), b.matrix(b.shape, b.strides))
        raise ValueError(
            f"inner dimensions differ: a {a.shape} has {K} columns but b {b.shape} has {K_b} "
            f"rows; a's last axis must equal b's {'only' if b.ndim == 1 else 'second-to-last'}"
        )
    try:
        batch_shape = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ValueError:
        raise ValueError(
            f"the batch axes of a {a.shape} and b {b.shape} do not broadcast: "
            f"{a_shape[:-2]} against {b_shape[:-2]}"
        ) from None
    out_shape = batch_shape + ((M,) if a.ndim > 1 else ()) + ((N,) if b.ndim > 1 else ())
    if out is None:
        out = allocate_array(out_shape, a.dtype, a.on_device, stream=stream)
    else:
        out = describe_array(out, "out", stream)
        check_output(out, out_shape, output_dtypes(preset, a.dtype), a.on_device, (a, b))
    # out's strides as (batch..., M, N), 0 on an axis a vector dropped
    out_strides = list(out.strides[: len(batch_shape)])
    out_strides += [out.strides[len(batch_shape)] if a.ndim > 1 else 0]
    out_strides += [out.strides[-1] if b.ndim > 1 else 0]

    def batch_strides(shape, strides):  # per batch axis of the result; 0 where broadcast
        lead = len(batch_shape) - (len(shape) - 2)
        return [
            0 if i < lead or shape[i - lead] == 1 else strides[i - lead]
            for i in range(len(batch_shape))
        ]

    loops = [
        (n, strides)
        for n, strides in zip(
            batch_shape,
            zip(
                batch_strides(a_shape, a_strides),
                batch_strides(b_shape, b_strides),
                out_strides[: len(batch_shape)],
            ),
        )
        if n != 1
    ]
    dtype, keep, inputs = a.dtype, (), (a, b)
    if out.span == 0:  # M, N or a batch extent is 0: nothing to compute
        return Product([], out, dtype, keep, preset, (None, None))
    a_mat = (a, (M, K), tuple(a_strides[-2:]))
    b_mat = (b, (K, N), tuple(b_strides[-2:]))
    if K == 0:  # every element of the result is an empty sum: 0
        zero = _zero_element(dtype, a.on_device, stream)
        keep, inputs = (zero,), (None, None)
        a_mat, b_mat = (zero, (M, 1), (0, 0)), (zero, (1, N), (0, 0))
        loops = [(n, (0, 0, s_out)) for n, (_, _, s_out) in loops]
    loops = fold_loops(loops)
    # The innermost loop is each launch's batch; the outer ones are walked here.
    matrices = (a_mat, b_mat, (out, (M, N), tuple(out_strides[-2:])))
    inner_extent, inner_strides = loops[-1] if loops else (1, (0, 0, 0))
    outer = loops[:-1]
    parts = []
    for index in itertools.product(*(range(n) for n, _ in outer)):
        offsets = [sum(i * strides[k] for i, (_, strides) in zip(index, outer)) for k in range(3)]
        for first in range(0, inner_extent, MAX_GRID_YZ):
            batch = min(MAX_GRID_YZ, inner_extent - first)
            parts.append(
                tuple(
                    array.matrix(shape, strides, batch, step, offset + first * step)
                    for (array, shape, strides), step, offset in zip(
                        matrices, inner_strides, offsets
                    )
                )
            )
    return Product(parts, out, dtype, keep, preset, inputs)


def split_k_scratch(stream: Any) -> Callable:
    """``scratch(name, shape, dtype)`` for :func:`plan`: split-k's buffers of this (context,
    ``stream``, thread) (``numba_gemm.scratch``)."""
    return lambda name, shape, dtype: SPLIT_K_SCRATCH.get(name, shape, dtype, stream)


def _zero_element(dtype: np.dtype, on_device: bool, stream: Any = 0) -> ArrayDesc:
    """One element 0 in the operands' memory space: with strides 0 it is a zero matrix of any
    shape, the operand of a K = 0 product."""
    zero = np.zeros(1, dtype)
    if on_device:
        zero = to_device(zero, stream=stream)
    return describe_array(zero, "zero", stream)


def describe_product(
    operands: tuple, out: Any, stream: Any = 0, precision: Any = None
) -> tuple[list[MatrixDesc], MatrixDesc, Preset]:
    """Describe and check the matrices of a product ``operands[0] @ operands[1] @ ...``
    (``(name, object)`` pairs) and its output: each neighbouring pair must multiply
    (:func:`check_pair`, :func:`check_inner`); ``precision`` is resolved for their dtype;
    ``out`` is checked (:func:`check_output`: the dtypes the preset writes, as ``matmul``'s),
    or allocated in the operands' memory space when None. Returns (operand descriptors,
    output descriptor, preset)."""
    descs = [describe(x, name, stream) for name, x in operands]
    for left, right in zip(descs, descs[1:]):
        check_pair(left, right)
        check_inner(left, right)
    shape, dtype, on_device = (
        (descs[0].shape[0], descs[-1].shape[1]),
        descs[0].dtype,
        descs[0].on_device,
    )
    preset = resolve(precision, dtype)
    if out is None:
        return descs, allocate_output(shape, dtype, on_device, stream=stream), preset
    out_desc = describe(out, "out", stream)
    check_output(out_desc, shape, output_dtypes(preset, dtype), on_device, tuple(descs))
    return descs, out_desc, preset


def zero_fill_launches(out: MatrixDesc, stream: Any = 0) -> tuple[list, list]:
    """The launches that write 0 to every element of ``out`` (the result of a product with an
    empty inner dimension): the product kernels on zero operands; and what they read, for the
    caller to hold."""
    zero = _zero_element(out.dtype, out.on_device, stream)
    M, N = out.shape
    return [plan(zero.matrix((M, 1), (0, 0)), zero.matrix((1, N), (0, 0)), out)], [zero]


def execute(
    a: MatrixDesc,
    b: MatrixDesc,
    out: MatrixDesc,
    algorithm: str = "auto",
    config: TileConfig | MmaConfig | WgmmaConfig | None = None,
    stream: Any = 0,
    preset: Preset | None = None,
) -> None:
    """Compute ``out = a @ b`` on validated operands in one memory space (see
    :func:`run_in_memory_space`)."""
    scratch = split_k_scratch(stream)
    run_in_memory_space(
        (a, b),
        out,
        lambda a, b, out: [plan(a, b, out, algorithm, config, preset, scratch=scratch)],
        stream,
    )


def run_in_memory_space(
    inputs: tuple[MatrixDesc, ...],
    out: MatrixDesc,
    launches: Callable[..., list[KernelLaunch]],
    stream: Any = 0,
) -> None:
    """Run ``launches(*inputs, out)`` in order: on the GPU (or the simulator) in place; host
    operands on a GPU on device copies of their spans, the result computed into a fresh
    device matrix and copied into ``out``'s own elements only (memory between its rows, which
    another thread may be writing, is never written)."""
    if out.on_device or SIMULATED:
        for launch in launches(*inputs, out):
            launch_kernel(launch, stream)
        return
    require_gpu()
    device_out = fresh_device_output(out, stream)
    for launch in launches(*(device_operand(x, stream) for x in inputs), device_out):
        launch_kernel(launch, stream)
    result = copy_to_host(device_out.data, stream=stream)
    if stream:
        stream.synchronize()  # an asynchronous copy must land before NumPy reads it
    batch, (rows, cols) = out.batch, out.shape
    item = out.dtype.itemsize
    elements = np.lib.stride_tricks.as_strided(
        out.buffer(),
        shape=(batch, rows, cols),
        strides=(out.batch_stride * item, out.strides[0] * item, out.strides[1] * item),
    )
    elements[...] = result.reshape(batch, rows, cols)
