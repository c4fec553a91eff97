"""What the current device offers, asked once per device: shared memory per block and per SM,
compute capability, SM count, and whether launches overlap (programmatic dependent launch).
On the simulator, Hopper's figures where a plan needs one."""

from __future__ import annotations

import functools

from numba import cuda

from .driver import SIMULATED

__all__ = [
    "STATIC_SHARED_LIMIT",
    "shared_memory_limit",
    "shared_memory_per_multiprocessor",
    "at_most_on_multiprocessor",
    "compute_capability",
    "multiprocessors",
    "OVERLAP_LAUNCHES",
    "PROGRAMMATIC_LAUNCH_CC",
    "programmatic_launch",
]

# The simulator has no limit of its own; report Hopper's (227 KB per block, opt-in).
SIMULATED_SHARED_LIMIT = 227 * 1024
STATIC_SHARED_LIMIT = 48 * 1024  # what a kernel gets without opting in


def shared_memory_limit() -> int:
    """Bytes of shared memory one block may use on the current device (after opting in)."""
    if SIMULATED:
        return SIMULATED_SHARED_LIMIT
    return device_shared_limit(cuda.get_current_device().id)


@functools.cache
def device_shared_limit(device_id: int) -> int:
    return cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN


def shared_memory_per_multiprocessor() -> int:
    """Bytes of shared memory one SM of the current device holds for all its blocks."""
    if SIMULATED:
        return SIMULATED_SHARED_LIMIT + 1024
    return _device_shared_per_multiprocessor(cuda.get_current_device().id)


@functools.cache
def _device_shared_per_multiprocessor(device_id: int) -> int:
    return cuda.get_current_device().MAX_SHARED_MEMORY_PER_MULTIPROCESSOR


def at_most_on_multiprocessor(shared: int, per_multiprocessor: int, blocks: int = 1) -> int:
    """Dynamic shared memory for a block of which at most ``blocks`` may run on one SM:
    ``shared``, or more than 1 / (``blocks`` + 1) of the SM's ``per_multiprocessor`` bytes, so
    that no more fit (registers may allow fewer)."""
    if not isinstance(blocks, int) or blocks < 1:
        raise ValueError(f"blocks per SM must be an int >= 1; got {blocks!r}")
    return max(shared, per_multiprocessor // (blocks + 1) + 1)


# Programmatic dependent launch (Hopper): the tiled and fused kernels wait for the launch ahead of
# them on the stream (``ptx.await_prior_grids``) before they touch memory, and ``PreparedLaunch``
# launches them with programmatic stream serialization, so that a launch starts as the last CTAs of
# the one ahead exit instead of after that grid's completion has gone through: about a microsecond
# per launch (docs/design/launch-and-timing.md; ``tiled.overlap_launches``). Set OVERLAP_LAUNCHES to
# False before the first launch to compile and launch without it (kernels are cached with the
# choice).
OVERLAP_LAUNCHES = True
PROGRAMMATIC_LAUNCH_CC = (9, 0)  # griddepcontrol and the launch attribute


def programmatic_launch() -> bool:
    """Whether kernels built now use programmatic dependent launch: :data:`OVERLAP_LAUNCHES`,
    on a GPU of compute capability :data:`PROGRAMMATIC_LAUNCH_CC` or later (never on the
    simulator, which runs one launch at a time)."""
    if not OVERLAP_LAUNCHES or SIMULATED:
        return False
    return tuple(cuda.get_current_device().compute_capability) >= PROGRAMMATIC_LAUNCH_CC


def compute_capability() -> tuple[int, int] | None:
    """The current device's compute capability, or None on the simulator."""
    if SIMULATED:
        return None
    return _device_compute_capability(cuda.get_current_device().id)


@functools.cache
def _device_compute_capability(device_id: int) -> tuple[int, int]:
    return tuple(cuda.get_current_device().compute_capability)


SIMULATED_MULTIPROCESSORS = 1  # the simulator's: persistent CTAs loop over several tiles


def multiprocessors() -> int:
    """The current device's SM count (:data:`SIMULATED_MULTIPROCESSORS` on the simulator)."""
    if SIMULATED:
        return SIMULATED_MULTIPROCESSORS
    return _device_multiprocessors(cuda.get_current_device().id)


@functools.cache
def _device_multiprocessors(device_id: int) -> int:
    return cuda.get_current_device().MULTIPROCESSOR_COUNT
