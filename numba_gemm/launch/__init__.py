"""Everything between a plan and the GPU, one job per module:

- ``driver``: the simulator flag (:data:`SIMULATED`), driver set-up, errors, streams;
- ``devices``: what the current device offers (shared memory, SMs, compute capability);
- ``memory``: operands copied to the GPU, outputs allocated, the stream-ordered pool;
- ``tensor_maps``: TMA's tensor maps, encoded on the host or as templates;
- ``launches``: :class:`KernelLaunch`, compiled once per context, run as one
  ``cuLaunchKernel`` (:class:`PreparedLaunch`).

Nothing here imports ``numba_gemm.kernels``: kernels and their plans import from here. The
names below are re-exported for the library's modules; settings (``devices.OVERLAP_LAUNCHES``)
are set on their own module.
"""

from .devices import (
    PROGRAMMATIC_LAUNCH_CC,
    STATIC_SHARED_LIMIT,
    at_most_on_multiprocessor,
    compute_capability,
    multiprocessors,
    programmatic_launch,
    shared_memory_limit,
    shared_memory_per_multiprocessor,
)
from .driver import (
    SIMULATED,
    SIMULATOR_LOCK,
    checked,
    checked_stream,
    require_gpu,
    serialised_on_simulator,
    stream_handle,
)
from .launches import (
    MAX_GRID_YZ,
    KernelLaunch,
    PreparedLaunch,
    cdiv,
    kernel_launch,
    kernel_signature,
    launch_kernel,
    numba_parameters,
)
from .memory import (
    POOL_RELEASE_THRESHOLD,
    allocate_array,
    allocate_output,
    array_template,
    copy_to_host,
    device_operand,
    fresh_device_output,
    new_device_array,
    to_device,
    zero_fill,
)

__all__ = [
    "SIMULATED",
    "SIMULATOR_LOCK",
    "serialised_on_simulator",
    "require_gpu",
    "checked",
    "checked_stream",
    "stream_handle",
    "STATIC_SHARED_LIMIT",
    "shared_memory_limit",
    "shared_memory_per_multiprocessor",
    "at_most_on_multiprocessor",
    "compute_capability",
    "multiprocessors",
    "PROGRAMMATIC_LAUNCH_CC",
    "programmatic_launch",
    "to_device",
    "copy_to_host",
    "device_operand",
    "fresh_device_output",
    "zero_fill",
    "allocate_output",
    "allocate_array",
    "POOL_RELEASE_THRESHOLD",
    "new_device_array",
    "array_template",
    "cdiv",
    "MAX_GRID_YZ",
    "KernelLaunch",
    "kernel_launch",
    "numba_parameters",
    "kernel_signature",
    "launch_kernel",
    "PreparedLaunch",
]
