"""``unrolled``: straight-line code from a step function, for every kernel's k loops."""

from __future__ import annotations

from numba import cuda

__all__ = ["unrolled"]


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
