"""Lowerings of ``gemm_p``: XLA launches the kernel (GPU), Python launches it (GPU, CPU).

All three run the launch that ``numba_gemm.api.plan`` decides (algorithm,
tile config, grid, shared memory), on descriptors built from the strides of
``jax_bridge.mapping.strided_gemm``: the kernels, configs and geometry are
``numba_gemm.matmul``'s own.

- **GPU, ``lowering="native"``** (default): the kernel's PTX goes into XLA's
  kernel-call custom call: jaxlib's handler (``triton_kernel_call_ffi``, the one
  jax-triton and Pallas use), registered once more under ``KERNEL_CALL_TARGET``
  with the command-buffer trait (jaxlib registers it without one). XLA loads and
  launches the kernel on its own stream; no Python runs per call, and XLA
  captures the launch into the CUDA graphs (command buffers) it runs a jitted
  program's kernels in, as it does its own GEMMs.
  Numba passes an array argument as 7 parameters (meminfo, parent, item
  count, item size, data pointer, shape, stride in bytes): the data pointer
  is an XLA buffer (inputs, then the output), the rest are constants. The
  kernels take their matrices as 1-D buffers, so this is the whole ABI.
- **GPU, ``lowering="callback"``**: ``jax.experimental.buffer_callback``;
  Python launches the kernel on XLA's stream with the buffers' device
  pointers (zero-copy). ~100 us of Python per call; a cross-check.
- **CPU**: the same callback with host buffers, run on the Numba CUDA
  simulator (``NUMBA_ENABLE_CUDASIM=1``), or on a GPU through copies when
  Numba sees one.
"""

from __future__ import annotations

import functools
import re
import zlib

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.buffer_callback import buffer_callback
from jax.interpreters import mlir
from jax.interpreters.mlir import ir

from .mapping import StridedGemm, strided_gemm
from .primitive import (
    _host_product,
    check_options,
    contraction,
    gemm_p,
    gemm_shard_p,
    platform_preset,
)
from .sharding import register_partitioned

__all__ = [
    "kernel_call",
    "kernel_call_lowering",
    "operand_order",
    "callback_lowering",
    "ptx_for",
    "xla_ptx",
]

# jaxlib's kernel-call handler, registered under a name of the bridge's own with the
# COMMAND_BUFFER_COMPATIBLE trait: the handler's one cuLaunchKernel on XLA's stream (the tensor
# maps are built on the device, scratch zeroed by cuMemsetAsync) is safe to capture and replay.
KERNEL_CALL_TARGET = "numba_gemm_kernel_call"
JAXLIB_KERNEL_CALL = "triton_kernel_call_ffi"
# XLA aligns every buffer to at least 16 bytes; the kernel call checks the pointers.
BUFFER_ALIGNMENT = 16


def _descs(
    gemm: StridedGemm,
    dtypes,
    on_device: bool,
    arrays=(None, None, None),
    addresses=(0, 0, 0),
):
    """MatrixDesc values for A, B and C of ``gemm``, of ``dtypes`` (the operands', the
    result's): 1-D ``arrays`` (or none, for a launch that XLA fills in) at ``addresses``
    (0 = XLA's aligned buffers)."""
    from numba_gemm.descriptor import MatrixDesc

    operand_dtype, out_dtype = map(np.dtype, dtypes)
    shapes = ((gemm.m, gemm.k), (gemm.k, gemm.n), (gemm.m, gemm.n))
    strides = (gemm.lhs, gemm.rhs, gemm.out)
    return tuple(
        MatrixDesc(
            name,
            shape,
            (stride[1], stride[2]),
            dtype,
            array,
            on_device,
            address,
            array,
            batch=gemm.batch,
            batch_stride=stride[0],
        )
        for name, shape, stride, array, address, dtype in zip(
            ("lhs", "rhs", "out"),
            shapes,
            strides,
            arrays,
            addresses,
            (operand_dtype, operand_dtype, out_dtype),
        )
    )


def _zeros(out_aval):
    """An empty output, or an empty contraction (k = 0): zeros, no launch."""
    return mlir.lower_fun(
        lambda *_: jnp.zeros(out_aval.shape, out_aval.dtype), multiple_results=False
    )


# -- native: XLA's kernel call -----------------------------------------------------------


def _max_ptx_version() -> tuple[int, int] | None:
    """The newest PTX ISA the driver JIT-compiles (CUDA 13.x: 9.x), or None if unknown."""
    from numba.cuda.cudadrv.driver import driver

    major, minor = driver.get_version()
    return (major - 4, minor) if major >= 13 else None


def _compute_capability() -> tuple[int, int]:
    from numba import cuda

    return tuple(cuda.get_current_device().compute_capability)


def ptx_for(kernel, arg_kinds: tuple) -> tuple[str, str]:
    """(PTX, entry name) of a kernel specialisation for the current GPU, compiled once per
    compute capability (:func:`_ptx_for`)."""
    return _ptx_for(kernel, arg_kinds, _compute_capability())


@functools.cache
def _ptx_for(kernel, arg_kinds: tuple, cc: tuple[int, int]) -> tuple[str, str]:
    """(PTX, entry name) of a kernel specialisation for compute capability ``cc``.

    The PTX is the code Numba's own launches run: where Numba links with LTO (its
    default wherever nvJitLink is installed, as on the GPU image), the PTX nvJitLink
    links, so that XLA's ptxas compiles what Numba's launches run (the same registers and k
    loops); else NVVM's PTX, which can compile to another, slower schedule
    (``docs/design/jax-bridge.md``).
    """
    from numba_gemm.launch import kernel_signature

    compiled = kernel.compile(kernel_signature(kernel, arg_kinds))
    # Hopper and later: the arch-specific target (sm_90a), as Numba's own launches compile for
    # it; wgmma needs it, and jaxlib's ptxas assembles it.
    arch = (*cc, "a") if tuple(cc) >= (9, 0) else cc
    ptx = (
        compiled.inspect_lto_ptx(arch)
        if kernel.targetoptions.get("lto")
        else (compiled.inspect_asm(arch))
    )
    return xla_ptx(ptx, _max_ptx_version(), kernel.targetoptions.get("max_registers"))


def xla_ptx(
    ptx: str, newest_version: tuple[int, int] | None, max_registers: int | None
) -> tuple[str, str]:
    """(PTX, entry name): Numba's PTX of one kernel, made fit for XLA's ptxas.

    - nvJitLink ends its PTX with NUL bytes, which ptxas reads as text: stripped.
    - Numba's NVVM may stamp a PTX version newer than the driver and ptxas accept
      (``newest_version``); the kernels use no newer feature, so the version line is
      lowered to it.
    - A register cap (``max_registers``) becomes the entry's ``.maxnreg``: Numba
      applies it when it links, so its PTX lacks one, and ptxas, which knows nothing
      of the block size, could exceed what the block can launch with.
    """
    ptx = ptx.rstrip("\x00").strip() + "\n"
    version = re.search(r"^\.version (\d+)\.(\d+)", ptx, re.M)
    if newest_version and version and tuple(map(int, version.groups())) > newest_version:
        ptx = ptx.replace(version.group(0), ".version {}.{}".format(*newest_version), 1)
    entry = re.search(r"\.entry\s+([^\s(]+)\s*\(", ptx)
    if entry is None:
        raise RuntimeError("no .entry in the PTX Numba produced")
    body = ptx.index("{", entry.end())
    if max_registers and ".maxnreg" not in ptx[entry.end() : body]:  # none in the header yet
        ptx = f"{ptx[:body]}.maxnreg {int(max_registers)}\n{ptx[body:]}"
    return ptx, entry.group(1)


@functools.cache
def _triton_kernel(kernel, arg_kinds: tuple, threads: int, shared: int, cc: tuple[int, int]):
    """jaxlib's kernel object for one specialisation, block size and compute capability."""
    from jax._src.lib import gpu_triton

    if threads % 32:
        raise ValueError(
            f"XLA's kernel call launches whole warps; this launch has {threads} "
            "threads per block (use lowering='callback' or another config)"
        )
    ptx, name = _ptx_for(kernel, arg_kinds, cc)
    major, minor = cc
    # (name, num_warps, num_ctas, dynamic shared bytes, ptx, ttir, compute capability)
    return gpu_triton.TritonKernel(
        name, threads // 32, 1, shared, ptx, "", major * 10 + minor
    ), name


def kernel_call(launch, zeroed: tuple[str, ...] = ()) -> tuple[object, str]:
    """(``TritonKernelCall``, kernel name) for a ``numba_gemm.launch.KernelLaunch`` whose
    matrices are XLA's buffers, in order. Buffers of the matrices named in ``zeroed``
    (scratch outputs the kernel needs zero) are zeroed by the kernel call before the launch."""
    from jax._src.lib import gpu_triton

    from numba_gemm.descriptor import MatrixDesc
    from numba_gemm.launch import numba_parameters

    kernel, name = _triton_kernel(
        launch.kernel, launch.arg_kinds(), launch.block, launch.shared, _compute_capability()
    )
    # Each data pointer is the next XLA buffer; every other parameter is a constant.
    params = [
        gpu_triton.create_array_parameter(
            v.span * v.dtype.itemsize if v.name in zeroed else 0, BUFFER_ALIGNMENT
        )
        if isinstance(v, MatrixDesc)
        else gpu_triton.create_scalar_parameter(int(v), "i64")
        for v in numba_parameters(launch.args)
    ]
    return gpu_triton.TritonKernelCall(kernel, *launch.grid, params), name


@functools.cache
def kernel_call_target() -> str:
    """The custom-call target the native lowering names: jaxlib's kernel-call handler
    registered once, for CUDA, under ``KERNEL_CALL_TARGET`` with the command-buffer trait."""
    from jax._src.lib import gpu_triton
    from jaxlib.xla_client import CustomCallTargetTraits

    handler = gpu_triton._cuda_triton.registrations()[JAXLIB_KERNEL_CALL]
    jax.ffi.register_ffi_target(
        KERNEL_CALL_TARGET,
        handler,
        platform="CUDA",
        api_version=1,
        traits=CustomCallTargetTraits.COMMAND_BUFFER_COMPATIBLE,
    )
    return KERNEL_CALL_TARGET


def operand_order(launch, inputs: tuple[str, ...]) -> list[int]:
    """Positions in ``inputs`` (the operands' names) of the matrices ``launch`` takes first, in
    its order. ``AssertionError`` where the launch takes another matrix (an output) before
    all of them, since XLA's buffers put the results after the operands."""
    from numba_gemm.descriptor import MatrixDesc

    taken = [arg.name for arg in launch.args if isinstance(arg, MatrixDesc)][: len(inputs)]
    if sorted(taken) != sorted(inputs):
        raise AssertionError(f"the launch takes its matrices as {taken}, not {inputs} first")
    return [inputs.index(name) for name in taken]


def kernel_call_lowering(launch, inputs: tuple[str, ...], zeroed: tuple[str, ...] = ()):
    """The lowering rule ``rule(ctx, *operands)`` of XLA's kernel call for ``launch`` (see
    :func:`kernel_call`), whose operands are the matrices named ``inputs``, in that order: its
    results are the launch's outputs, in order.

    XLA hands the kernel its buffers by position (operands, then results), while a plan may
    take the operands in another order (the skinny kernel computes C^T = B^T A^T where C has
    few columns; the triple product's right order multiplies C^T B^T A^T): the rule passes the
    operands in the order of the launch's matrices."""
    call, name = kernel_call(launch, zeroed)
    opaque = zlib.compress(call.to_proto(name, b""))
    lowering = jax.ffi.ffi_lowering(
        kernel_call_target(),
        backend_config={"name": ir.StringAttr.get(name), "opaque": ir.StringAttr.get(opaque)},
    )
    order = operand_order(launch, inputs)

    def rule(ctx, *operands):
        avals_in = [ctx.avals_in[i] for i in order]
        return lowering(ctx.replace(avals_in=avals_in), *(operands[i] for i in order))

    return rule


def _dtypes(ctx) -> tuple:
    return ctx.avals_in[0].dtype, ctx.avals_out[0].dtype


def _native(ctx, lhs, rhs, gemm: StridedGemm, algorithm: str, config, preset):
    from numba_gemm.api import plan
    from numba_gemm.descriptor import scratch_desc
    from numba_gemm.launch.tensor_maps import map_workspace

    # XLA passes its buffers' addresses at run time only, so what the kernel needs besides the
    # operands is one more output of the kernel call each: the workspace where the wgmma
    # kernel builds its tensor maps, split-k's partial tiles and its counters (zeroed by the
    # kernel call before the launch).
    scratch = {}

    def workspace_of(nbytes):
        scratch["tensor_maps"] = (nbytes,), np.uint8
        return map_workspace(nbytes)

    def call_output(name, shape, dtype):  # split-k's partials and counters
        scratch[name] = (int(np.prod(shape)),), dtype
        return scratch_desc(name, shape, dtype)

    launch = plan(*_descs(gemm, _dtypes(ctx), on_device=True), algorithm, config, preset,
                  "device", workspace_of, call_output)  # fmt: skip
    outputs = [arg.name for arg in launch.args if getattr(arg, "name", None) in scratch]
    avals_out = [*ctx.avals_out, *(jax.core.ShapedArray(*scratch[name]) for name in outputs)]
    rule = kernel_call_lowering(launch, ("lhs", "rhs"), zeroed=("sync",))
    return rule(ctx.replace(avals_out=avals_out), lhs, rhs)[:1]


# -- callbacks: Python launches the kernel ------------------------------------------------


def _run_on_device(
    gemm: StridedGemm, algorithm: str, config, preset, dtypes, ctx, out, lhs, rhs
) -> None:
    from numba_gemm.api import plan, split_k_scratch
    from numba_gemm.launch import launch_kernel

    addresses = [x.__cuda_array_interface__["data"][0] for x in (lhs, rhs, out)]
    descs = _descs(gemm, dtypes, on_device=True, addresses=addresses)
    scratch = split_k_scratch(ctx.stream)
    launch_kernel(plan(*descs, algorithm, config, preset, scratch=scratch), ctx.stream)


def _run_on_host(
    gemm: StridedGemm, algorithm: str, config, preset, dtypes, ctx, out, lhs, rhs
) -> None:
    from numba_gemm.api import execute
    from numba_gemm.launch import SIMULATOR_LOCK

    arrays = [np.asarray(x).reshape(-1) for x in (lhs, rhs, out)]
    descs = _descs(
        gemm,
        dtypes,
        on_device=False,
        arrays=arrays,
        addresses=[x.ctypes.data for x in arrays],
    )
    with SIMULATOR_LOCK:  # XLA runs callbacks from several threads
        execute(*descs, algorithm, config, 0, preset)


def _check_host_backend() -> None:
    """Host buffers run on the simulator, or on a GPU through copies: one must exist."""
    from numba import cuda

    if not cuda.config.ENABLE_CUDASIM and not cuda.is_available():
        raise RuntimeError(
            "jax_bridge on the CPU runs numba-gemm's kernels on the Numba CUDA "
            "simulator: set NUMBA_ENABLE_CUDASIM=1 before Numba is imported "
            "(no CUDA GPU was found either)"
        )


def _check_device_backend() -> None:
    from numba import cuda

    if cuda.config.ENABLE_CUDASIM:
        raise RuntimeError(
            "JAX runs this product on the GPU but Numba is in simulator mode "
            "(NUMBA_ENABLE_CUDASIM=1), which takes host buffers: unset it, or run "
            "JAX on the CPU (JAX_PLATFORMS=cpu)"
        )


def callback_lowering(ctx, callback, *operands):
    """Lower to ``buffer_callback(callback)``: Python runs ``callback(ctx, out, *buffers)``
    with the one output's buffer."""
    out_aval = ctx.avals_out[0]
    call = buffer_callback(callback, jax.ShapeDtypeStruct(out_aval.shape, out_aval.dtype))
    return mlir.lower_fun(call, multiple_results=False)(ctx, *operands)


# -- registration -------------------------------------------------------------------------


def _lowering(platform: str):
    def lower(
        ctx, lhs, rhs, *, dimension_numbers, precision, out_dtype, out_sharding, algorithm,
        lowering, config
    ):  # fmt: skip
        out_aval, lhs_shape = ctx.avals_out[0], ctx.avals_in[0].shape
        if out_aval.size == 0 or any(lhs_shape[a] == 0 for a in dimension_numbers[0][0]):
            return _zeros(out_aval)(ctx, lhs, rhs)
        gemm = strided_gemm(lhs_shape, ctx.avals_in[1].shape, dimension_numbers)
        preset = platform_preset(precision, ctx.avals_in[0].dtype, platform)
        check_options(preset, algorithm, config, ctx.avals_in[0].dtype)  # before any launch
        options = (gemm, algorithm, config, preset, _dtypes(ctx))
        if platform == "cpu":
            _check_host_backend()
            return callback_lowering(ctx, functools.partial(_run_on_host, *options), lhs, rhs)
        _check_device_backend()
        if lowering == "callback":
            return callback_lowering(ctx, functools.partial(_run_on_device, *options), lhs, rhs)
        return _native(ctx, lhs, rhs, gemm, algorithm, config, preset)

    return lower


# The kernels on one device's shards; the product through the partitioner (jax_bridge.sharding)
mlir.register_lowering(gemm_shard_p, _lowering("cpu"), platform="cpu")
mlir.register_lowering(gemm_shard_p, _lowering("cuda"), platform="cuda")
register_partitioned(gemm_p, contraction, gemm_shard_p.bind, _host_product, n_operands=2)
