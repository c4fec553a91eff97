"""``jax_bridge.triple``: D = A @ B @ C with ``numba_gemm.triple``'s kernels inside ``jax.jit``.

One primitive, ``numba_gemm_triple`` (``triple_p``), over 2-D operands:

- *Abstract evaluation* checks ranks, dtypes and the chain's inner sizes, naming
  ``a``, ``b`` or ``c``.
- *Lowering*: ``numba_gemm.triple_product.plan_triple`` decides order, algorithm and tiles,
  as for ``numba_gemm.triple``. On the GPU the fused (or naive) kernel's PTX goes
  into XLA's kernel call (as ``jax_bridge.lowering`` does for products); the
  fused kernel's intermediate and counters are scratch outputs, the counters
  zeroed by the kernel call before the launch. ``"unfused"`` lowers to two ``jax_bridge.matmul``
  products. On the CPU the kernels run on the Numba CUDA simulator through a
  buffer callback.
- *Differentiation*: ``grad``/``vjp`` through a custom VJP whose cotangents are
  triple products themselves: dA = G C^T B^T, dB = A^T G C^T, dC = B^T A^T G.
- *Batching*: ``vmap`` computes the chain as two batched ``jax_bridge.matmul``
  products (one launch each).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from numba_gemm.descriptor import SUPPORTED_DTYPES
from numba_gemm.launch import SIMULATOR_LOCK

from .lowering import (
    _check_device_backend,
    _check_host_backend,
    _zeros,
    callback_lowering,
    kernel_call_lowering,
)
from .primitive import matmul
from .sharding import Contraction, entry_of, register_partitioned, spec_of, varying_alike

__all__ = ["triple", "triple_p", "triple_shard_p"]

triple_p = Primitive("numba_gemm_triple")


def _check(a, b, c) -> None:
    for name, x in (("a", a), ("b", b), ("c", c)):
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2-D (a matrix), got shape {tuple(x.shape)}")
        if np.dtype(x.dtype) not in SUPPORTED_DTYPES:
            raise TypeError(
                f"{name} has dtype {x.dtype}; supported: " + ", ".join(map(str, SUPPORTED_DTYPES))
            )
    for (x, y), (p, q) in (((a, b), ("a", "b")), ((b, c), ("b", "c"))):
        if x.shape[1] != y.shape[0]:
            raise ValueError(
                f"inner dimensions differ: {p} is {x.shape[0]}x{x.shape[1]} and {q} is "
                f"{y.shape[0]}x{y.shape[1]}; {p}'s columns must equal {q}'s rows"
            )
        if x.dtype != y.dtype:
            raise TypeError(f"{p} is {x.dtype} but {q} is {y.dtype}; cast one so both dtypes match")


def _check_plan(a, c, algorithm: str, order: str, config) -> None:
    """The plan's own refusals at trace time: the config for the dtype, the naive kernel's
    size limit for the order it runs."""
    from numba_gemm.kernels.triple_product import check_naive
    from numba_gemm.triple_product import resolve

    if config is not None:
        config.check(a.dtype)
    (M, K1), (K2, N) = a.shape, c.shape
    if 0 in (M, K1, K2, N):  # zeros or an empty result: no kernel runs
        return
    algorithm, order = resolve(M, K1, K2, N, algorithm, order, config, a.dtype)
    if algorithm == "naive":
        check_naive(*((K2, N) if order == "left" else (K1, M)), a.dtype)


def _abstract_eval(a, b, c, *, algorithm, order, config):
    _check(a, b, c)
    _check_plan(a, c, algorithm, order, config)
    # The result as lax's two products give it (its varying manual axes in shard_map), sharded
    # with Explicit mesh axes as the partitioner runs it: A's rows, C's columns, the sums
    # over sharded k1 and k2 reduced (jax_bridge.sharding)
    mesh = getattr(a.sharding, "mesh", None)
    ab_sharding = out_sharding = None
    if mesh is not None and not mesh.empty:
        specs = [spec_of(x.sharding, 2) for x in (a, b, c)]
        plan = CONTRACTION.plan(specs)
        ab_sharding = NamedSharding(mesh, P(entry_of(plan.result[0]), None))
        out_sharding = NamedSharding(mesh, P(*map(entry_of, plan.result)))
    product = (((1,), (0,)), ((), ()))
    ab, _ = lax.dot_general_p.abstract_eval(a, b, dimension_numbers=product, precision=None,
                                            preferred_element_type=a.dtype,
                                            out_sharding=ab_sharding)  # fmt: skip
    out, _ = lax.dot_general_p.abstract_eval(ab, c, dimension_numbers=product, precision=None,
                                             preferred_element_type=a.dtype,
                                             out_sharding=out_sharding)  # fmt: skip
    return out


@functools.partial(jax.jit, static_argnames=("algorithm", "order", "config"))
def _compiled(a, b, c, **params):
    return triple_p.bind(a, b, c, **params)


triple_p.def_abstract_eval(_abstract_eval)
triple_p.def_impl(_compiled)

# The chain on one device's shards: the kernels' launch. triple_p lowers to it through the
# partitioner (jax_bridge.sharding), inlined on one device.
triple_shard_p = Primitive("numba_gemm_triple_shard")
triple_shard_p.def_abstract_eval(_abstract_eval)
CONTRACTION = Contraction((("m", "k1"), ("k1", "k2"), ("k2", "n")), ("m", "n"))


def _host_chain(a, b, c, **_):
    """A device's chain inside a partitioned program on the CPU (jax_bridge.sharding): XLA's
    products, float32 exactly."""
    highest = lax.Precision.HIGHEST
    return jnp.matmul(jnp.matmul(a, b, precision=highest), c, precision=highest)


# -- lowerings ----------------------------------------------------------------------------


def _row_major(name: str, shape, dtype):
    from numba_gemm.descriptor import MatrixDesc

    return MatrixDesc(name, tuple(shape), (shape[1], 1), np.dtype(dtype), None, True, 0, None)


def _unfused(ctx, a, b, c, order: str):
    def chain(a, b, c):
        return matmul(matmul(a, b), c) if order == "left" else matmul(a, matmul(b, c))

    return mlir.lower_fun(chain, multiple_results=False)(ctx, a, b, c)


def _native(ctx, a, b, c, *, algorithm, order, config):
    from numba_gemm.kernels.triple_product import counters_desc
    from numba_gemm.triple_product import plan_triple, resolve

    (M, K1), (K2, N) = ctx.avals_in[0].shape, ctx.avals_in[2].shape
    dtype = ctx.avals_in[0].dtype
    algorithm, order = resolve(M, K1, K2, N, algorithm, order, config, dtype)
    if algorithm == "unfused":
        return _unfused(ctx, a, b, c, order)
    descs = [
        _row_major(name, aval.shape, dtype)
        for name, aval in zip(("a", "b", "c", "out"), (*ctx.avals_in, ctx.avals_out[0]))
    ]
    # The fused kernel's scratch buffers (T, stream-K's partial tiles, the counters) are extra
    # outputs of the kernel call, which zeroes the counters before the launch; XLA buffers
    # have no address yet.
    scratch = {}

    def counters(count):
        scratch["sync"] = (count,), np.uint32
        return counters_desc(count)

    def intermediate(shape, name):
        scratch[name] = shape, dtype
        return _row_major(name, shape, dtype)

    [launch] = plan_triple(
        *descs, algorithm, order, config, counters=counters, scratch=intermediate
    )
    outputs = [arg.name for arg in launch.args if getattr(arg, "name", None) in scratch]
    avals_out = [ctx.avals_out[0], *(jax.core.ShapedArray(*scratch[name]) for name in outputs)]
    rule = kernel_call_lowering(launch, ("a", "b", "c"), zeroed=("sync",))
    return rule(ctx.replace(avals_out=avals_out), a, b, c)[:1]


def _run_on_host(algorithm, order, config, ctx, out, a, b, c) -> None:
    import numba_gemm

    with SIMULATOR_LOCK:
        numba_gemm.triple(
            np.asarray(a),
            np.asarray(b),
            np.asarray(c),
            np.asarray(out),
            algorithm=algorithm,
            order=order,
            config=config,
        )


def _empty_chain(ctx) -> bool:
    """An empty result, or an empty inner dimension (K1 or K2 = 0): zeros, no launch."""
    (M, K1), (K2, N) = ctx.avals_in[0].shape, ctx.avals_in[2].shape
    return 0 in (M, K1, K2, N)


def _lower_cpu(ctx, a, b, c, *, algorithm, order, config):
    if _empty_chain(ctx):
        return _zeros(ctx.avals_out[0])(ctx, a, b, c)
    _check_host_backend()
    return callback_lowering(
        ctx, functools.partial(_run_on_host, algorithm, order, config), a, b, c
    )


def _lower_gpu(ctx, a, b, c, **params):
    if _empty_chain(ctx):
        return _zeros(ctx.avals_out[0])(ctx, a, b, c)
    _check_device_backend()
    return _native(ctx, a, b, c, **params)


mlir.register_lowering(triple_shard_p, _lower_cpu, platform="cpu")
mlir.register_lowering(triple_shard_p, _lower_gpu, platform="cuda")
register_partitioned(triple_p, lambda params, shapes: CONTRACTION, triple_shard_p.bind,
                     _host_chain, n_operands=3)  # fmt: skip


# -- batching: two batched products -----------------------------------------------------


def _batch(args, dims, *, algorithm, order, config):
    """vmap: the chain as two products, each vmapped by ``jax_bridge.matmul``'s own batching
    rule (one launch each; an unmapped operand is broadcast by stride 0, not copied)."""
    a, b, c = args
    da, db, dc = dims  # None: not mapped
    if order == "right":
        bc, dbc = _product(b, db, c, dc)
        return _product(a, da, bc, dbc)
    ab, dab = _product(a, da, b, db)
    return _product(ab, dab, c, dc)


def _product(x, dx, y, dy):
    if dx is None and dy is None:
        return matmul(x, y), None
    return jax.vmap(matmul, in_axes=(dx, dy))(x, y), 0


batching.primitive_batchers[triple_p] = _batch


# -- the user-facing function -----------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _triple(a, b, c, algorithm, order, config):
    a, b, c = varying_alike(a, b, c)
    return triple_p.bind(a, b, c, algorithm=algorithm, order=order, config=config)


def _triple_fwd(a, b, c, algorithm, order, config):
    return _triple(a, b, c, algorithm, order, config), (a, b, c)


def _triple_bwd(algorithm, order, config, residuals, g):
    a, b, c = residuals
    cotangents = (
        _triple(g, c.T, b.T, algorithm, "auto", config),
        _triple(a.T, g, c.T, algorithm, "auto", config),
        _triple(b.T, a.T, g, algorithm, "auto", config),
    )
    return tuple(map(_sharded_as, cotangents, residuals))


def _sharded_as(x, like):
    """``x`` resharded as ``like`` where an Explicit mesh gives them different shardings (a
    cotangent has its primal's type)."""
    sharding = jax.typeof(like).sharding
    if isinstance(sharding, NamedSharding) and not sharding.mesh.empty:
        if jax.typeof(x).sharding.spec != sharding.spec:
            return jax.reshard(x, sharding.spec)
    return x


_triple.defvjp(_triple_fwd, _triple_bwd)


def triple(a, b, c, *, algorithm: str = "auto", order: str = "auto", config=None):
    """``a @ b @ c`` for 2-D ``a`` (M, K1), ``b`` (K1, K2), ``c`` (K2, N) with numba-gemm's
    triple-product kernels (``numba_gemm.triple``), inside or outside ``jax.jit``.

    ``algorithm``: ``"auto"``, ``"fused"``, ``"naive"`` or ``"unfused"``; ``order``:
    ``"auto"`` (fewer multiply-adds), ``"left"`` or ``"right"``; ``config``: the fused
    kernel's :class:`numba_gemm.TileConfig`. Errors (shapes, dtypes, arguments) are raised
    at trace time. Differentiable with ``grad``/``vjp`` (not forward mode); ``vmap`` runs
    two batched products.
    """
    from numba_gemm.triple_product import check_triple_arguments

    check_triple_arguments(algorithm, order, config)
    a, b, c = jnp.asarray(a), jnp.asarray(b), jnp.asarray(c)
    _check(a, b, c)
    return _triple(a, b, c, algorithm, order, config)
