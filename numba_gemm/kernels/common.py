"""What every kernel family uses: the simulator flag, ``cuda.jit`` with a register cap, checks
of a tile config's fields, and ``unrolled`` (straight-line code from a step function).

Every kernel building block picks its PTX form or its simulator twin by :data:`SIMULATED`
(``launch.driver``'s, the library's one spelling of the flag).
"""

from __future__ import annotations

from dataclasses import fields

from numba import cuda

from ..descriptor import is_int
from ..launch.driver import SIMULATED

__all__ = [
    "SIMULATED",
    "VECTOR_BYTES",
    "WARP",
    "MAX_CONFIG_FIELD",
    "check_field_range",
    "int_fields",
    "REGISTERS_PER_SM",
    "kernel_jit",
    "kernel_registers",
    "unrolled",
]

VECTOR_BYTES = 16  # one 128-bit load or store
WARP = 32
REGISTERS_PER_SM = 65536


# No field of any kernel config is larger: tiles, stages and split-k are bounded far below it
# by threads and shared memory, and a group height past it orders tiles as one of 2^16 does.
MAX_CONFIG_FIELD = 1 << 16


def check_field_range(config) -> None:
    """``ValueError`` naming the field unless every field of ``config`` lies in
    [1, :data:`MAX_CONFIG_FIELD`] (a value past it could not be a compile-time constant), or
    from 0 for the fields the config class names in ``ZERO_MEANS_OFF``."""
    for field in fields(config):
        value = getattr(config, field.name)
        low = 0 if field.name in getattr(config, "ZERO_MEANS_OFF", ()) else 1
        if not low <= value <= MAX_CONFIG_FIELD:
            kind = "a non-negative" if low == 0 else "a positive"
            raise ValueError(
                f"{type(config).__name__}.{field.name} must be {kind} integer up to "
                f"{MAX_CONFIG_FIELD}; got {value!r}"
            )


def int_fields(config) -> None:
    """``TypeError`` naming the field unless every field of the frozen dataclass ``config`` is
    an int (``is_int``: a list or a float would fail later as "unhashable" or deep in a kernel
    build); NumPy ints are stored as Python ints."""
    for field in fields(config):
        value = getattr(config, field.name)
        if not is_int(value):
            raise TypeError(f"{type(config).__name__}.{field.name} must be an int; got {value!r}")
        object.__setattr__(config, field.name, int(value))


def kernel_jit(threads: int, ctas_per_sm: int = 1):
    """``cuda.jit`` for a kernel launched with ``threads`` threads per block: registers capped
    so that ``ctas_per_sm`` blocks fit an SM (64K registers; at most 255 per thread), as a
    launch bound would. The simulator takes no register option."""
    if SIMULATED:
        return cuda.jit
    return cuda.jit(max_registers=kernel_registers(threads, ctas_per_sm))


def kernel_registers(threads: int, ctas_per_sm: int = 1) -> int:
    """The registers per thread :func:`kernel_jit` allows a kernel of ``threads`` threads per
    block, ``ctas_per_sm`` blocks to an SM."""
    return min(255, REGISTERS_PER_SM // (threads * ctas_per_sm) // 8 * 8)


def unrolled(step, count, params: str):
    """Device function ``f(params)`` = ``step(params, 0); ...; step(params, count - 1)``; or,
    for a list of index tuples ``count``, one ``step(params, *index)`` per tuple.

    NVVM leaves a k loop with a large body rolled (numba-cuda has no unroll
    pragma): a loop counter, and no way to load the next step's fragments while
    this step's FMAs run. Writing the steps out, with ``kk`` a literal in each,
    gives straight-line code that ptxas schedules freely (and a register array indexed
    by literals stays in registers, where a rolled loop's run-time index puts it in memory).
    """
    indices = [(kk,) for kk in range(count)] if isinstance(count, int) else list(count)
    source = f"def unrolled({params}):\n" + "".join(
        f"    step({params}, {', '.join(map(str, index))})\n" for index in indices
    )
    if not indices:
        source += "    pass\n"
    namespace = {"step": step}
    exec(compile(source, f"<unrolled {len(indices)} x {step.__name__}>", "exec"), namespace)
    return cuda.jit(device=True)(namespace["unrolled"])
