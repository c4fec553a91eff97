"""SPMD partitioning of the bridge's primitives: each device runs the kernels on its own shards.

Under ``jax.jit`` with sharded operands, XLA's partitioner splits every operation across the
devices of a mesh. A custom call it knows nothing about gets its operands gathered and runs
whole on every device. So the bridge's primitives (``numba_gemm_dot``, ``numba_gemm_triple``)
lower through ``jax.experimental.custom_partitioning``, which tells the partitioner how a
product splits, and put the kernels' own launch in per-device primitives
(``numba_gemm_dot_shard``, ``numba_gemm_triple_shard``) whose lowerings are
``jax_bridge.lowering``'s. A program on one device (or inside ``jax.shard_map``, where every
mesh axis is manual) inlines the per-device primitive: nothing changes there.

A product is an einsum over *factors* (:class:`Contraction`): each operand axis is one factor;
the result keeps the batch and free factors; the contracting factors are reduced.

1. *Rule.* Shardy, JAX's partitioner, reads an einsum-like rule (``"b m k, b k n -> b m n"``,
   the contracting factors named as reduction factors) and propagates shardings through it;
   the older GSPMD partitioner asks :func:`Contraction.plan` for the result's sharding.
2. *Plan* (:meth:`Contraction.plan`). Each factor takes the mesh axes its first operand
   (in argument order) shards it on, less axes an earlier factor took: every mesh axis splits
   one factor at most. Operands are resharded to agree where they differ (the partitioner
   inserts the collectives); the result is sharded as its kept factors are.
3. *Per device.* Each device runs the kernels on its shards. Where contracting factors are
   sharded, each device's product is a partial sum: one ``psum`` over those mesh axes, or a
   ``psum_scatter`` along a result axis where the result's sharding asks for that axis split
   over them (a reduce-scatter: each device keeps its part of the sum).

Batch, M and N shardings pass through with no communication; only a sharded contracting
dimension communicates, once. On the CPU (the Numba simulator), a Python callback cannot run
inside a partitioned program (XLA:CPU loses the callback: a segfault), so there the
per-device products of a partitioned program are XLA's own ``dot_general`` at the same
precision; the rules, shapes and collectives are those of the GPU, where the kernels run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jax import lax
from jax._src import core as jax_core  # operands' varying manual axes matched as lax does
from jax._src import dispatch  # no public way to say a primitive's lowering needs the devices
from jax.experimental.custom_partitioning import custom_partitioning
from jax.interpreters import mlir
from jax.sharding import AxisType, NamedSharding, get_abstract_mesh, reshard, use_abstract_mesh
from jax.sharding import PartitionSpec as P

__all__ = [
    "Contraction", "Plan", "register_partitioned", "axes_of", "entry_of", "padded_spec",
    "spec_of", "varying_alike",
]  # fmt: skip


def varying_alike(*operands):
    """``operands`` varying over the same manual mesh axes inside ``jax.shard_map`` (the ones
    that do not are marked varying, ``pvary``), as lax's products take them: a block sharded
    over x times a replicated one is a product that varies over x."""
    insert = getattr(jax_core, "auto_insert_reshard", None) or getattr(
        jax_core, "standard_insert_pvary", None
    )
    return tuple(insert(*operands)) if insert is not None else operands


def axes_of(entry) -> tuple[str, ...]:
    """A ``PartitionSpec`` entry (None, an axis name, a tuple of them) as a tuple of names."""
    if entry is None or entry is P.UNCONSTRAINED:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def entry_of(axes: tuple[str, ...]):
    """A tuple of mesh axis names as a ``PartitionSpec`` entry."""
    return None if not axes else axes[0] if len(axes) == 1 else tuple(axes)


def padded_spec(spec, ndim: int) -> tuple:
    """A ``PartitionSpec``'s entries as they are (``UNCONSTRAINED`` kept), None past its end up
    to ``ndim`` axes."""
    spec = tuple(spec or ())
    return spec + (None,) * (ndim - len(spec))


def spec_of(sharding, ndim: int) -> list[tuple[str, ...]]:
    """A ``NamedSharding``'s spec as ``ndim`` tuples of axis names (unsharded: empty)."""
    return [axes_of(e) for e in padded_spec(getattr(sharding, "spec", ()), ndim)]


@dataclass(frozen=True)
class Plan:
    """How a contraction runs on a mesh: each operand's spec and the result's (tuples of mesh
    axis names per axis), the mesh axes its partial sums are added over (``psum``), and the
    result axis ``scatter_dim`` a reduce-scatter splits over ``scatter_axes`` (None: none)."""

    operands: tuple
    result: tuple
    reduce_axes: tuple[str, ...]
    scatter_dim: int | None = None
    scatter_axes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Contraction:
    """An einsum over factors: ``operands`` (one tuple of factor names per operand, one per
    axis), ``result`` (the kept factors in the result's axis order) and ``reduced`` (the
    contracting factors: in the operands, not in the result)."""

    operands: tuple[tuple[str, ...], ...]
    result: tuple[str, ...]

    @property
    def reduced(self) -> tuple[str, ...]:
        seen = dict.fromkeys(f for factors in self.operands for f in factors)
        return tuple(f for f in seen if f not in self.result)

    def rule(self) -> tuple[str, dict]:
        """Shardy's rule: the einsum-like string and its reduction factors."""
        operands = ", ".join(" ".join(factors) for factors in self.operands)
        rule = f"{operands} -> {' '.join(self.result)}"
        return rule, ({"reduction_factors": self.reduced} if self.reduced else {})

    def plan(self, specs, wanted=None, axis_sizes=None, result_shape=None) -> Plan:
        """The :class:`Plan` for operands sharded as ``specs`` (one list of axis-name tuples
        per operand, :func:`spec_of`), steps 2 and 3 of the module's docstring. ``wanted``: the
        result spec the partitioner asks for (a reduce-scatter where it splits a result axis
        over reduced mesh axes that divide it: ``axis_sizes`` and ``result_shape`` say)."""
        taken, factor_axes = set(), {}
        for factors, spec in zip(self.operands, specs):
            for factor, axes in zip(factors, spec):
                if factor in factor_axes:
                    continue
                free = tuple(a for a in axes if a not in taken)
                factor_axes[factor] = free if free == axes else ()  # all of its axes or none
                taken.update(factor_axes[factor])
        operands = tuple(tuple(factor_axes[f] for f in factors) for factors in self.operands)
        result = [factor_axes[f] for f in self.result]
        reduce_axes = tuple(a for f in self.reduced for a in factor_axes[f])
        if reduce_axes and wanted is not None and axis_sizes and result_shape is not None:
            for dim, axes in enumerate(wanted):
                if not axes or result[dim] or not set(axes) <= set(reduce_axes):
                    continue
                if result_shape[dim] % math.prod(axis_sizes[a] for a in axes) == 0:
                    result[dim] = tuple(axes)
                    rest = tuple(a for a in reduce_axes if a not in axes)
                    return Plan(operands, tuple(result), rest, dim, tuple(axes))
        return Plan(operands, tuple(result), reduce_axes)


def _sharding(mesh, spec) -> NamedSharding:
    """A plan's spec (a tuple of axis-name tuples per axis) as a ``NamedSharding``."""
    return NamedSharding(mesh, P(*(entry_of(axes) for axes in spec)))


def register_partitioned(primitive, contraction_of, per_device, host_per_device,
                         n_operands: int) -> None:  # fmt: skip
    """Lower ``primitive`` through the partitioner on every platform: its operands split as
    ``contraction_of(params, shapes)`` (a :class:`Contraction`) says; ``per_device(*operands,
    **params)`` binds the per-device primitive; ``host_per_device`` is the CPU's stand-in
    inside a partitioned program (module docstring). Its lowering needs the program's devices
    (as ``custom_partitioning``'s own does) and is not cached: a cached lowering sees none."""
    dispatch.prim_requires_devices_during_lowering.add(primitive)
    mlir.register_lowering(
        primitive,
        _partitioned_lowering(contraction_of, per_device, host_per_device, n_operands),
        cacheable=False,
    )


def _partitioned_lowering(contraction_of, per_device, host_per_device, n_operands: int):
    """The lowering rule :func:`register_partitioned` registers: the product as a
    ``custom_partitioning`` function of its ``n_operands`` operands and its parameters (static),
    with Shardy's rule, the GSPMD callbacks and the partition (module docstring, steps 1-3)."""

    def body2(a, b, params):  # custom_partitioning reads the signature: fixed arity
        return per_device(a, b, **dict(params))

    def body3(a, b, c, params):
        return per_device(a, b, c, **dict(params))

    product = custom_partitioning({2: body2, 3: body3}[n_operands], static_argnums=(n_operands,))

    def sharding_rule(params, mesh, operand_types, result_types):
        return contraction_of(dict(params), [tuple(t.shape) for t in operand_types]).rule()

    def plan_of(params, mesh, arg_shapes, result_shape=None) -> Plan:
        # the plan for the operands' shardings; with the result's, its reduce-scatter too
        contraction = contraction_of(dict(params), [tuple(a.shape) for a in arg_shapes])
        specs = [spec_of(a.sharding, len(a.shape)) for a in arg_shapes]
        if result_shape is None:
            return contraction.plan(specs)
        wanted = spec_of(result_shape.sharding, len(result_shape.shape))
        return contraction.plan(specs, wanted, dict(mesh.shape), tuple(result_shape.shape))

    def partition(params, mesh, arg_shapes, result_shape):
        plan = plan_of(params, mesh, arg_shapes, result_shape)
        on_host = mesh.devices.flat[0].platform == "cpu"
        compute = host_per_device if on_host else per_device

        # each device's product of its shards: a result sharding a primitive carries
        # (out_sharding) is the whole result's, not the shard's
        local = {k: None if k == "out_sharding" else v for k, v in params}

        def reduce(out):
            if plan.reduce_axes:
                out = lax.psum(out, plan.reduce_axes)
            if plan.scatter_axes:
                out = lax.psum_scatter(out, plan.scatter_axes, scatter_dimension=plan.scatter_dim,
                                       tiled=True)  # fmt: skip
            return out

        def lower_fn(*operands):
            out = compute(*operands, **local)
            if not (plan.reduce_axes or plan.scatter_axes):
                return out
            # jax 0.11 traces this under the caller's mesh: on Explicit axes each op of the
            # collective's reduction would carry a sharding annotation, which XLA rejects (the
            # GPU compiler aborts), so the reduction is traced on the same axes made Auto
            context = get_abstract_mesh()
            if AxisType.Explicit not in context.axis_types:
                return reduce(out)
            auto = context.update_axis_types(dict.fromkeys(context.axis_names, AxisType.Auto))
            with use_abstract_mesh(auto):
                return reduce(reshard(out, P()))

        operands = tuple(_sharding(mesh, spec) for spec in plan.operands)
        return mesh, lower_fn, _sharding(mesh, plan.result), operands

    def infer_sharding_from_operands(params, mesh, arg_shapes, result_shape):
        return _sharding(mesh, plan_of(params, mesh, arg_shapes).result)

    def propagate_user_sharding(params, mesh, user_shape):
        return user_shape.sharding

    product.def_partition(
        partition,
        infer_sharding_from_operands=infer_sharding_from_operands,
        propagate_user_sharding=propagate_user_sharding,
        sharding_rule=sharding_rule,
    )

    def lower(ctx, *operands, **params):
        frozen = tuple(sorted(params.items(), key=lambda item: item[0]))
        return mlir.lower_fun(lambda *xs: product(*xs, frozen), multiple_results=False)(
            ctx, *operands
        )

    return lower
