"""Planning a ``wgmma`` launch: which kernel, which config, tensor maps or ``cp.async``, grid and
shared memory (:func:`plan_wgmma`).
"""

from __future__ import annotations

import numpy as np

from ...descriptor import MatrixDesc
from ...launch import (
    STATIC_SHARED_LIMIT,
    KernelLaunch,
    cdiv,
    kernel_launch,
    multiprocessors,
    shared_memory_limit,
)
from ...launch.tensor_maps import MAP_BYTES, TensorMapArg, tensor_map_template
from ...precision import FLOAT32, Preset
from ..mma import (
    UINT16,
    operand_mode,
    storage_dtype,
    storage_view,
)
from ..split_k import split_buffers, working_config
from ..warpgroup import (
    tile_k,
)
from .config import (
    DEFAULT_WGMMA_CONFIG,
    WARP_SPECIALISED_WGMMA_CONFIG,
    WgmmaConfig,
    default_wgmma_config,
)
from .converting import converting_kernel_for
from .epilogue import c_store_problem, c_tensor_map_spec
from .kernels import kernel_for
from .mainloop import tensor_map_spec


def persistent_ctas(tiles: int, batch: int, per_sm: int) -> int:
    """A persistent grid's CTAs per product of ``batch`` of ``tiles`` tiles each: ``per_sm``
    CTAs per SM shared by the products, at least one each."""
    return min(tiles, max(1, per_sm * multiprocessors() // batch))


def persistent_rounds(tiles: int, batch: int, per_sm: int) -> int:
    """The tiles the busiest SM runs one after another in a persistent grid (its CTAs' waves
    times each CTA's tiles), against ``cdiv(tiles * batch, SMs)`` for one CTA per tile and SM:
    equal for one product; more where a batch leaves each product one CTA and those CTAs
    fill one wave and a bit of the next."""
    ctas = persistent_ctas(tiles, batch, per_sm)
    return cdiv(ctas * batch, per_sm * multiprocessors()) * cdiv(tiles, ctas)


WGMMA_PRESETS = ("BF16_BF16_F32", "F16_F16_F32", "TF32_TF32_F32", "TF32_TF32_F32_X3")


def wgmma_takes(preset: Preset, dtype) -> bool:
    """Whether the wgmma kernels compute ``preset`` on operands of ``dtype``: 16-bit ones at
    their own precision, float32 ones as TF32 (one or two parts)."""
    sixteen_bit = np.dtype(dtype).itemsize == 2
    return preset.name in WGMMA_PRESETS and sixteen_bit == (preset.operand != "tf32")


def plan_wgmma(config: WgmmaConfig | None, preset: Preset, a: MatrixDesc, b: MatrixDesc,
               c: MatrixDesc, tensor_maps: str = "host", workspace=None, scratch=None
               ) -> KernelLaunch:  # fmt: skip
    """The launch of a ``wgmma`` kernel on validated operands: C (M x N) = A (M x K) @
    B (K x N) under ``preset`` for each of ``c.batch`` products (``config`` None: the default
    for the kernel chosen).

    1. 16-bit operands at ``BF16_BF16_F32`` / ``F16_F16_F32``: the kernel reads both as they
       lie.
    2. Float32 operands at ``TF32_TF32_F32`` where B is k-major: A from registers, B as it
       lies; where only A is, the same kernel computes C^T = B^T A^T (``transposed``: B^T
       goes through registers, A^T is the k-major one; the arguments stay A, B, C).
    3. Otherwise (``TF32_TF32_F32_X3``, or neither operand k-major) the converting kernel.

    In cases 1 and 2 TMA fills the tiles where it can copy both operands (a contiguous axis,
    16-byte aligned, strides multiples of 16 bytes, no broadcast batch), through tensor maps
    the host encodes (``tensor_maps`` "host": the operands' addresses are real) or the
    kernel builds from templates ("device": XLA's kernel call; ``workspace(nbytes)`` gives the
    uint8 buffer, as a descriptor, where it publishes them); else, or with "none",
    ``cp.async`` copies.

    With ``config.producers`` = 1, warpgroup 0's first thread issues the copies and the other
    warpgroups only multiply (TMA only: ``ValueError`` where it cannot copy the operands).
    With ``config.persistent`` > 0, that many CTAs per SM (at least one per product of the
    batch) loop over the tiles (:func:`kernel_for`). With ``config.k_ctas`` > 1 (the default
    config's where the tiles are few and ``scratch`` is given), that many CTAs share each
    tile's k loop (``kernels.split_k``; fewer where
    fewer get a range: ``split_k.working_k_ctas``):
    ``scratch(name, shape, dtype)`` gives the descriptors of their float32 ``"partials"``
    and of the uint32 counters ``"sync"`` (zero at launch; the kernel leaves them zero)."""
    if tensor_maps not in ("host", "device", "none"):
        raise ValueError(f"tensor_maps is 'host', 'device' or 'none'; got {tensor_maps!r}")
    if tensor_maps == "device" and workspace is None:
        raise ValueError("tensor_maps='device' needs a workspace (where the CTAs publish them)")
    if not wgmma_takes(preset, a.dtype):
        raise ValueError(
            "the wgmma kernels take bfloat16 or float16 operands at their own precision and "
            f"float32 ones at TF32_TF32_F32 or TF32_TF32_F32_X3; got {a.dtype} operands at "
            f"{preset.name}"
        )
    storage = storage_dtype(a.dtype)
    a, b = storage_view(a, storage), storage_view(b, storage)
    out_dtype = np.dtype(c.dtype)
    if c.dtype.itemsize == 2:
        c = storage_view(c, UINT16)
    converting = storage == FLOAT32 and preset.parts > 1
    transposed = False  # the kernel computes C^T = B^T A^T
    if storage == FLOAT32 and not converting and operand_mode(b, False)[0] != "k":
        transposed = operand_mode(a, True)[0] == "k"
        converting = not transposed
    # the product as the kernel computes it: X (M x K) @ Y (K x N) -> D
    x, y, d = (b.transposed(), a.transposed(), c.transposed()) if transposed else (a, b, c)
    M, N = x.shape[0], y.shape[1]
    parts = preset.parts if converting else 0
    K = x.shape[1]
    chosen = config is None
    config = config or default_wgmma_config(M, N, K, c.batch, parts, storage.itemsize,
                                            scratch is not None)  # fmt: skip
    config.check(storage, converting)
    config = working_config(config, cdiv(K, tile_k(storage.itemsize)), scratch)
    x_mode, y_mode, d_mode = operand_mode(x, True), operand_mode(y, False), operand_mode(d, True)
    maps = "none" if converting else tensor_maps
    if maps != "none":
        specs = (tensor_map_spec(x, x_mode[0], config.block_m, True, c.batch),
                 tensor_map_spec(y, y_mode[0], config.block_n, False, c.batch))  # fmt: skip
        if any(spec.problem() is not None for spec in specs):
            maps = "none"
    tiles = cdiv(M, config.block_m) * cdiv(N, config.block_n)
    if (chosen and config == DEFAULT_WGMMA_CONFIG and storage == UINT16 and maps != "none"
            and d_mode[0] == "k" and c_store_problem(d, "k", config, c.batch) is None
            and persistent_rounds(tiles, c.batch, 1) <= cdiv(tiles * c.batch, multiprocessors())
            ):  # fmt: skip
        config = WARP_SPECIALISED_WGMMA_CONFIG  # the same tiles, persistent, TMA both ways
    grid = (tiles, c.batch, config.k_ctas)
    if config.persistent:
        grid = (persistent_ctas(tiles, c.batch, config.persistent), c.batch, 1)
    if config.producers and maps == "none":
        raise ValueError(
            f"{config.label()}: WgmmaConfig.producers = 1 needs operands TMA can copy (a "
            "contiguous axis, 16-byte aligned, strides multiples of 16 bytes, no broadcast "
            "batch); use producers = 0 for these"
        )
    if config.stores_with_tma:  # C's map, for the stores
        if (problem := c_store_problem(d, d_mode[0], config, c.batch)) is not None:
            raise ValueError(
                f"{config.label()}: the persistent warp-specialised kernel stores the output "
                f"with TMA, which cannot write this one ({problem}); use persistent = 0 or "
                "producers = 0 for it"
            )
        specs, descs = (*specs, c_tensor_map_spec(d, d_mode[0], config, c.batch)), (x, y, d)
    else:
        descs = (x, y)
    # the kernel's a_map, b_map, c_map (C's only with TMA stores) and workspace
    map_args, workspace_arg = [0, 0, 0], 0
    if maps == "host":
        map_args[: len(specs)] = [TensorMapArg(spec, desc.name, desc.span)
                                  for spec, desc in zip(specs, descs)]  # fmt: skip
    elif maps == "device":
        map_args[: len(specs)] = [tensor_map_template(spec) for spec in specs]
        workspace_arg = workspace(config.map_count * MAP_BYTES * grid[0] * grid[1] * grid[2])
    if transposed:  # A's and B's maps in the caller's order
        map_args[:2] = map_args[1::-1]
    extra = (*map_args, workspace_arg)
    shared = config.shared_bytes(parts, maps)
    if shared > STATIC_SHARED_LIMIT and shared > (limit := shared_memory_limit()):
        raise ValueError(
            f"{config.label()} needs {shared} bytes of shared memory per block; this device "
            f"allows {limit}"
        )
    if converting:
        kernel = converting_kernel_for(config, preset, out_dtype, x_mode, y_mode, d_mode)
        extra = ()
    else:
        kernel = kernel_for(config, preset.operand, out_dtype, x_mode, y_mode, d_mode, transposed,
                         maps)  # fmt: skip
        split = split_buffers(config.k_ctas, grid[0] * grid[1],
                              config.threads * config.block_n // 2, FLOAT32, scratch)  # fmt: skip
        extra = (*extra, *split)
    # the arguments in the caller's order (A, B, C: XLA's buffers; M, N, K of A @ B), whatever
    # the kernel makes of them
    return kernel_launch(kernel, grid, config.threads, shared,
                         (a, a.batch_stride, *a.strides, b, b.batch_stride, *b.strides,
                          c, c.batch_stride, *c.strides,
                          a.shape[0], b.shape[1], a.shape[1], *extra),
                         tma=maps != "none")  # fmt: skip
