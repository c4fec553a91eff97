"""``matmul``: validate, choose an algorithm, launch, return in the caller's memory space."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .descriptor import MatrixDesc, describe
from .kernels.loop_orders import LOOP_ORDERS, plan_loop_order
from .kernels.tiled import TileConfig, plan_tiled
from .launch import KernelLaunch, allocate_output, device_operand, launch_kernel, simulated
from .prepared import PreparedCalls
from .tuned_configs import config_for

__all__ = [
    "ALGORITHMS",
    "matmul",
    "choose_algorithm",
    "check_algorithm",
    "check_choice",
    "check_config",
    "check_pair",
    "check_output",
    "describe_product",
    "plan",
    "execute",
    "run_in_memory_space",
]

ALGORITHMS = ("auto", "tiled") + tuple(LOOP_ORDERS)

# "auto" runs the tiled kernel from this many multiply-adds on (64^3); below it a large tile
# is mostly empty and one thread per element does as well (docs/design/loop-orders.md).
TILED_FROM_MACS = 64**3


def choose_algorithm(a: MatrixDesc, b: MatrixDesc) -> str:
    """``"tiled"`` for all but tiny problems; else the loop order that coalesces for the layouts.

    Among the loop orders only the register-accumulating ones (``mnk``/``nmk``)
    are candidates: the k-outer orders move C through memory at every step and
    never win. ``mnk`` runs threads along n and wants B row-major; ``nmk`` runs
    them along m and wants A column-major (see ``kernels/loop_orders.py``).
    """
    (M, K), N = a.shape, b.shape[1]
    if M * N * K >= TILED_FROM_MACS:
        return "tiled"
    if b.layout != "row" and a.layout == "col":
        return "nmk"
    return "mnk"


def check_pair(a: MatrixDesc, b: MatrixDesc) -> None:
    """Errors naming both operands unless ``a @ b`` is defined: inner sizes, dtypes, memory
    space."""
    x, y = a.name, b.name
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"inner dimensions differ: {x} is {a.shape[0]}x{a.shape[1]} and {y} is "
            f"{b.shape[0]}x{b.shape[1]}; {x}'s columns must equal {y}'s rows"
        )
    if a.dtype != b.dtype:
        raise TypeError(f"{x} is {a.dtype} but {y} is {b.dtype}; cast one so both dtypes match")
    if a.on_device != b.on_device:
        where = {True: "on the GPU", False: "a host (NumPy) array"}
        raise TypeError(
            f"{x} is {where[a.on_device]} but {y} is {where[b.on_device]}; pass both on the "
            f"same side"
        )


def check_output(
    out: MatrixDesc,
    shape: tuple[int, int],
    dtype: np.dtype,
    on_device: bool,
    inputs: tuple[MatrixDesc, ...],
) -> None:
    if out.shape != shape:
        raise ValueError(f"out has shape {out.shape}; the product needs {shape}")
    if out.dtype != dtype:
        raise TypeError(f"out is {out.dtype}; the product is {dtype}")
    if out.on_device != on_device:
        side = "the GPU" if on_device else "the host"
        raise TypeError(f"out must live where the inputs do ({side})")
    if not out.on_device and isinstance(out.source, np.ndarray) and not out.source.flags.writeable:
        raise ValueError("out is a read-only array")
    if out.has_internal_overlap():
        raise ValueError(
            f"out has strides {out.strides} under which distinct elements share memory"
        )
    for x in inputs:
        if out.overlaps(x):
            raise ValueError(
                f"out overlaps {x.name} in memory (their address ranges intersect); the "
                f"kernels read {x.name} while writing out, so pass a separate output"
            )


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """``ValueError`` naming the argument unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def check_config(config, algorithm: str, takes_config: tuple[str, ...], kernel: str) -> None:
    """``TypeError`` unless ``config`` is None or a TileConfig; ``ValueError`` if the chosen
    ``algorithm`` is not one of those that take one (``kernel`` says whose tiles it sets)."""
    if config is None:
        return
    if not isinstance(config, TileConfig):
        raise TypeError(f"config must be a numba_gemm.TileConfig; got {type(config).__name__}")
    if algorithm not in takes_config:
        raise ValueError(f"config applies to {kernel}; algorithm={algorithm!r} takes none")


def check_algorithm(algorithm: str, config: TileConfig | None) -> None:
    """``ValueError``/``TypeError`` for an unknown algorithm or a config it cannot take."""
    check_choice("algorithm", algorithm, ALGORITHMS)
    check_config(config, algorithm, ("tiled", "auto"), "the tiled kernel")


def plan(
    a: MatrixDesc,
    b: MatrixDesc,
    out: MatrixDesc,
    algorithm: str = "auto",
    config: TileConfig | None = None,
) -> KernelLaunch:
    """The launch that computes ``out = a @ b`` (for each of ``out.batch`` products) on
    validated operands: the algorithm (``"auto"``: :func:`choose_algorithm`), the tile
    config (by default the tuned one) and the launch geometry.

    The one place these are decided: :func:`matmul` executes the plan through
    Numba, ``jax_bridge`` hands the same plan to XLA.
    """
    if algorithm == "auto":
        algorithm = "tiled" if config is not None else choose_algorithm(a, b)
    if algorithm != "tiled":
        return plan_loop_order(algorithm, a, b, out)
    if config is None:
        config = config_for(a, b, out)
    return plan_tiled(config, a, b, out)


def matmul(
    a: Any,
    b: Any,
    out: Any = None,
    *,
    algorithm: str = "auto",
    config: TileConfig | None = None,
    stream: Any = 0,
) -> Any:
    """C = A @ B for A (M x K) and B (K x N), float32 or float64, any positive strides.

    ``a``, ``b`` (and ``out``) are NumPy arrays or CUDA arrays (Numba, CuPy,
    PyTorch, JAX, ...); all on the host or all on the GPU. The result comes
    back in the inputs' memory space: in ``out`` when given, otherwise in a
    new row-major array (a Numba device array for device inputs).

    ``algorithm``: ``"tiled"`` (shared-memory tiles, register blocking, a
    cp.async pipeline and grouped CTA order: ``numba_gemm.kernels.tiled``),
    ``"mnk"``, ``"nmk"``, ``"kmn"``, ``"knm"`` (seed 001's loop orders, see
    ``numba_gemm.kernels.loop_orders``) or ``"auto"``: tiled for all but tiny
    problems (:func:`choose_algorithm`). All checks run before any launch and
    raise ``ValueError``/``TypeError`` naming the argument.

    ``config``: the tiled kernel's :class:`~numba_gemm.TileConfig`; by default
    the tuned one for this device, dtype, layout and shape class
    (:func:`numba_gemm.tuned_configs.config_for`). Only with ``algorithm="tiled"``/``"auto"``.

    ``stream``: the Numba stream the kernel runs on (default: the default
    stream). Foreign device arrays offering DLPack are ordered before it;
    device results are not synchronised, as with any kernel launch. A new device
    result comes from the library's stream-ordered pool and goes back to it on
    ``stream`` once dropped (``launch.new_device_array``).

    Repeated calls with the same Numba device arrays and arguments launch the plan
    prepared by the first (``numba_gemm.prepared``): one ``cuLaunchKernel``.
    """
    check_algorithm(algorithm, config)
    operands = (a, b)
    key = _CALLS.key(operands, out, (algorithm, config), stream)
    if key is not None and (result := _CALLS.run(key, operands, out, stream)) is not None:
        return result
    (a_desc, b_desc), out_desc = describe_product((("a", a), ("b", b)), out, stream)
    if config is not None:
        config.check(a_desc.dtype)
    if key is None:
        execute(a_desc, b_desc, out_desc, algorithm, config, stream)
    else:
        _CALLS.prepare(
            key,
            operands,
            out,
            [plan(a_desc, b_desc, out_desc, algorithm, config)],
            (),
            out_desc.shape,
            out_desc.dtype,
            stream,
        )
    return out_desc.source


# Repeated calls with the same Numba device arrays skip describing, checking and planning
# (numba_gemm.prepared).
_CALLS = PreparedCalls()


def describe_product(
    operands: tuple, out: Any, stream: Any = 0
) -> tuple[list[MatrixDesc], MatrixDesc]:
    """Describe and check the matrices of a product ``operands[0] @ operands[1] @ ...``
    (``(name, object)`` pairs) and its output: each neighbouring pair must multiply
    (:func:`check_pair`); ``out`` is checked (:func:`check_output`), or allocated in the
    operands' memory space when None. Returns (operand descriptors, output descriptor)."""
    descs = [describe(x, name, stream) for name, x in operands]
    for left, right in zip(descs, descs[1:]):
        check_pair(left, right)
    shape, dtype, on_device = (
        (descs[0].shape[0], descs[-1].shape[1]),
        descs[0].dtype,
        descs[0].on_device,
    )
    if out is None:
        return descs, allocate_output(shape, dtype, on_device, stream=stream)
    out_desc = describe(out, "out", stream)
    check_output(out_desc, shape, dtype, on_device, tuple(descs))
    return descs, out_desc


def execute(
    a: MatrixDesc,
    b: MatrixDesc,
    out: MatrixDesc,
    algorithm: str = "auto",
    config: TileConfig | None = None,
    stream: Any = 0,
) -> None:
    """Compute ``out = a @ b`` on validated operands in one memory space (see
    :func:`run_in_memory_space`)."""
    run_in_memory_space((a, b), out, lambda a, b, out: [plan(a, b, out, algorithm, config)], stream)


def run_in_memory_space(
    inputs: tuple[MatrixDesc, ...],
    out: MatrixDesc,
    launches: Callable[..., list[KernelLaunch]],
    stream: Any = 0,
) -> None:
    """Run ``launches(*inputs, out)`` in order: on the GPU (or the simulator) in place; host
    operands on a GPU on device copies of their spans, the result copied back into ``out``."""
    if out.on_device or simulated():
        for launch in launches(*inputs, out):
            launch_kernel(launch, stream)
        return
    # Host operands on a GPU: device copies of every span, out's too, so that copying its
    # span back leaves the elements between its rows as they were.
    device_out = device_operand(out, stream)
    for launch in launches(*(device_operand(x, stream) for x in inputs), device_out):
        launch_kernel(launch, stream)
    device_out.data.copy_to_host(out.data, stream=stream)
    if stream:
        stream.synchronize()  # an asynchronous copy must land before NumPy reads it
