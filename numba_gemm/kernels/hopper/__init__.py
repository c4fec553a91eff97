"""Hopper tensor-core GEMM on ``wgmma``: bf16, f16, TF32 and 3xTF32, float32 accumulation.

Shapes: C (M x N) = A (M x K) @ B (K x N), each a 1-D buffer plus element strides, as in
``mma``; any M, N, K >= 1, any strides; a batch along grid y. Operands are bf16 or f16 (passed
as their uint16 bits), or float32 under ``TF32_TF32_F32`` or ``TF32_TF32_F32_X3``; C is
float32, or bf16/f16 rounded from the float32 accumulator. Compute capability 9.0 (``wgmma``
is sm_90a); the simulator runs it through twins (``warpgroup``).

The package, by role:

- ``config``: :class:`WgmmaConfig`, the shipped configs and :func:`default_wgmma_config`;
- ``mainloop``: filling a stage (``cp.async`` or TMA) and multiplying one k slice;
- ``kernels``: :func:`kernels.kernel_for`, the factory of three kernels that read the operands
  as they lie (below): one CTA per tile, persistent, persistent warp-specialised;
- ``converting``: :func:`converting.converting_kernel_for`, the fourth kernel: float32
  operands through a conversion step, for the split preset (each operand's parts) and for
  TF32 where neither operand is k-major;
- ``epilogue``: C from the accumulators, through shared memory (16-byte stores or TMA stores);
- ``plan``: :func:`plan_wgmma`, which picks the kernel, config, copies, grid and launch.

The kernels share the grouped order, the tile layout and the epilogue. 16-bit operands go from
global memory straight into the tiles wgmma reads; so do float32 operands at
``TF32_TF32_F32`` where one of them is k-major, with A's block read from registers (TF32 wgmma
reads k-major tiles only; the registers can hold A in either layout), computing
C^T = B^T A^T where only A is k-major.

Algorithm (one CTA of ``block_m / 64`` warpgroups per BLOCK_M x BLOCK_N tile of C; warpgroup w
owns rows 64 w .. 64 w + 63 of the tile):

1. *Which tile*: program id -> ``(pid_m, pid_n)`` through seed 004's grouped order
   (``ordering.tile_of``); grid y is the product of the batch.
2. *Pipeline*: ``stages`` shared-memory buffers of one slice (one 128-byte row of k: 64 16-bit
   or 32 float32 elements) of A (BLOCK_M rows) and of B (BLOCK_N), 128-byte swizzled
   (``warpgroup.tile_slot``), each stored as its operand lies (k-major or m/n-major: ``wgmma``
   transposes m/n-major 16-bit blocks as it reads them). In ``kernel_for``, where TMA can copy
   both operands, thread 0 fills a stage with TMA copies (``kernels/tma``: a box per k-major
   tile or per 128-byte chunk of an m/n-major one, zero-filled past the matrix) whose bytes
   complete the stage's mbarrier, through tensor maps the host encodes or, in XLA's kernel
   call, the CTA builds from templates; otherwise every thread fills them with ``cp.async``
   (16-byte runs along the contiguous axis, zero-filled past the matrix; element copies for
   operands with no usable contiguous axis). ``LOOKAHEAD`` slices load while the tensor cores
   multiply, and ``IN_FLIGHT`` slices' wgmmas may still read theirs.
3. *Multiply*: per slice, each warpgroup issues four ``wgmma.m64nNk16`` (N = BLOCK_N; TF32:
   ``k8`` with A from registers, each warp's 16 rows loaded and rounded first, into one of two
   register sets), its 64 x BLOCK_N accumulators in registers (BLOCK_N / 2 float32 per
   thread), then commits them as one group and waits until at most ``IN_FLIGHT`` groups are
   pending, so that the next slice's copies and the tensor cores overlap.
4. *Epilogue*: the warpgroups write their accumulators into a float32 C tile in shared memory
   (the pipeline's buffers, free after the k loop), its lines along C's contiguous axis; then
   every thread converts 16 bytes' worth of C's elements at a time and stores them along that
   axis (consecutive threads, consecutive vectors), element by element at the edges or where
   C's lines are not contiguous and aligned.

The persistent form (``WgmmaConfig.persistent`` CTAs per SM; not the converting kernel): each CTA
loops over tiles x, x + grid x, ... of its product; the slices of all its tiles form one
stream through the same pipeline, so the next tile's first slices load while a tile's last
ones are multiplied and its epilogue runs, from a C tile of its own after the pipeline's
buffers (``WgmmaConfig.c_tile_offset``).

The warp-specialised form (``WgmmaConfig.producers`` 1; TMA only): one more
warpgroup, whose first thread issues each slice's copies once every consumer thread has
arrived on the buffer's "free" mbarrier (so up to ``stages`` slices ahead), while the other
warpgroups wait on "landed", multiply and free the slice before; ``setmaxnreg`` moves the
producer's registers to the consumers; the epilogue runs between the consumers' named barrier.
Persistent and warp-specialised (``persistent`` 1 and ``producers`` 1: what "auto" runs the
default tiles in where TMA goes both ways): the producer's stream is all the CTA's tiles'
slices, and the epilogue stages C in boxes that one thread hands to TMA stores
(``epilogue.c_tma_writer``), which drain while the next tile's wgmmas run.

Order of a slice's buffer: with ``cp.async``, copies land (``cp.async.wait_group``), each
thread makes its writes visible to the tensor cores (``fence.proxy.async``), a CTA barrier;
with TMA, every thread waits for the stage mbarrier's phase (TMA and wgmma share the async
proxy). Either way a buffer is refilled only after the barrier that follows every
warpgroup's wait for the wgmmas that read it.

Constraints (``WgmmaConfig.check``): BLOCK_M a multiple of 64 (at most 4 warpgroups),
BLOCK_N a multiple of 64 up to 256 (one wgmma's N), tiles that split into whole 16-byte copies
per thread, ``stages`` >= IN_FLIGHT + 2; in the converting kernel BLOCK_M = 128 (the
conversion runs 8 warps) and ``stages`` >= 2; with a producer at most two consumer
warpgroups and ``persistent`` 0 or 1, and (``plan_wgmma``) operands TMA can copy and, when
persistent, a C that TMA can store.
"""

from .config import (
    CONVERTING_WGMMA_CONFIGS,
    DEFAULT_WGMMA_CONFIG,
    SHORT_K,
    SHORT_K_WGMMA_CONFIG,
    SIMULATOR_CONVERTING_WGMMA_CONFIG,
    SIMULATOR_WGMMA_CONFIG,
    SMALL_WGMMA_CONFIG,
    TALL_WGMMA_CONFIG,
    TINY_WGMMA_CONFIG,
    WARP_SPECIALISED_WGMMA_CONFIG,
    WGMMA_CC,
    WgmmaConfig,
    default_wgmma_config,
    narrow_wgmma_config,
)
from .plan import WGMMA_PRESETS, plan_wgmma, wgmma_takes

__all__ = [
    "WgmmaConfig",
    "DEFAULT_WGMMA_CONFIG",
    "WARP_SPECIALISED_WGMMA_CONFIG",
    "TALL_WGMMA_CONFIG",
    "SHORT_K",
    "SHORT_K_WGMMA_CONFIG",
    "SIMULATOR_WGMMA_CONFIG",
    "SIMULATOR_CONVERTING_WGMMA_CONFIG",
    "SMALL_WGMMA_CONFIG",
    "TINY_WGMMA_CONFIG",
    "CONVERTING_WGMMA_CONFIGS",
    "WGMMA_CC",
    "default_wgmma_config",
    "narrow_wgmma_config",
    "plan_wgmma",
    "wgmma_takes",
    "WGMMA_PRESETS",
]
