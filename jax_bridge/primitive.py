"""The ``numba_gemm_dot`` primitive: abstract evaluation, differentiation and batching.

``gemm_p`` computes ``lax.dot_general(lhs, rhs, dimension_numbers)`` for the
contractions that ``jax_bridge.mapping`` maps onto one strided, batched GEMM,
with numba-gemm's kernels (lowerings: ``jax_bridge.lowering``). The user-facing
functions are :func:`matmul`, :func:`dot_general` and :func:`make_dot_general`.

- *Abstract evaluation* checks ranks, dtypes, axes and extents at trace time
  and names the offending argument.
- *Differentiation*: the product is bilinear, so its JVP is two products and
  its transpose (the VJP) is a product of the cotangent with the other
  operand. The operands are ordered so that the result comes out in the
  operand's own axis order: for ``C = A @ B`` the gradients are
  ``dA = dC @ B^T`` and ``dB = A^T @ dC``, with the transposes expressed as
  strides. No transpose op appears unless a layout admits no such order.
- *Batching*: ``vmap`` adds a batch axis to the dimension numbers (or a free
  axis, when one operand is unbatched); the mapping folds it into the
  kernel's batch loop or into m / n, so a vmapped product is one launch.
"""

from __future__ import annotations

import functools
import operator

import jax
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching

from numba_gemm.descriptor import SUPPORTED_DTYPES
from numba_gemm.precision import FLOAT32, normalise, output_dtypes, resolve

from .mapping import free_axes, strided_gemm
from .sharding import Contraction, padded_spec, varying_alike

__all__ = [
    "gemm_p",
    "gemm_shard_p",
    "contraction",
    "matmul",
    "dot_general",
    "make_dot_general",
    "lax_precision",
    "platform_preset",
    "check_options",
    "LOWERINGS",
]

LOWERINGS = ("native", "callback")

gemm_p = Primitive("numba_gemm_dot")


def _normalise(dimension_numbers, lhs_ndim: int, rhs_ndim: int):
    """Dimension numbers as tuples of non-negative ints, or a ``ValueError`` saying what is
    wrong."""
    try:
        (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
        groups = [
            tuple(_axis(a) for a in axes)
            for axes in (lhs_contract, rhs_contract, lhs_batch, rhs_batch)
        ]
    except (TypeError, ValueError):
        raise TypeError(
            "dimension_numbers must be ((lhs_contracting, rhs_contracting), "
            f"(lhs_batch, rhs_batch)), each a sequence of int axes; got {dimension_numbers!r}"
        ) from None
    for name, axes, ndim in zip(
        ("lhs contracting", "rhs contracting", "lhs batch", "rhs batch"),
        groups,
        (lhs_ndim, rhs_ndim, lhs_ndim, rhs_ndim),
    ):
        if any(not -ndim <= a < ndim for a in axes):
            raise ValueError(f"{name} axes {axes} are out of range for a {ndim}-D operand")
    lhs_contract, rhs_contract, lhs_batch, rhs_batch = (
        tuple(a % ndim for a in axes)
        for axes, ndim in zip(groups, (lhs_ndim, rhs_ndim, lhs_ndim, rhs_ndim))
    )
    return (lhs_contract, rhs_contract), (lhs_batch, rhs_batch)


def _axis(axis) -> int:
    """An axis as an int: ints and NumPy ints, never a bool or a float (``operator.index``)."""
    if isinstance(axis, (bool, np.bool_)):
        raise TypeError(f"axis {axis!r} is a bool")
    return operator.index(axis)


def _flag(name: str, value) -> bool:
    """A real boolean argument: a string such as ``"no"`` or a number would read as true."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool (True or False); got {value!r}")
    return bool(value)


def _check(lhs, rhs, dimension_numbers) -> None:
    """Every trace-time check of a product; errors name the argument."""
    for name, x in (("lhs", lhs), ("rhs", rhs)):
        if np.dtype(x.dtype) not in SUPPORTED_DTYPES:
            raise TypeError(
                f"{name} has dtype {x.dtype}; numba-gemm computes "
                + ", ".join(str(d) for d in SUPPORTED_DTYPES)
            )
    if lhs.dtype != rhs.dtype:
        raise TypeError(f"lhs is {lhs.dtype} but rhs is {rhs.dtype}; cast one so both match")
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    for kind, lhs_axes, rhs_axes in (
        ("contracting", lhs_contract, rhs_contract),
        ("batch", lhs_batch, rhs_batch),
    ):
        if len(lhs_axes) != len(rhs_axes):
            raise ValueError(
                f"lhs has {len(lhs_axes)} {kind} axes {lhs_axes} but rhs has "
                f"{len(rhs_axes)} {rhs_axes}"
            )
        for la, ra in zip(lhs_axes, rhs_axes):
            if lhs.shape[la] != rhs.shape[ra]:
                raise ValueError(
                    f"{kind} axis {la} of lhs {tuple(lhs.shape)} has extent "
                    f"{lhs.shape[la]} but its partner, axis {ra} of rhs "
                    f"{tuple(rhs.shape)}, has {rhs.shape[ra]}"
                )
    for name, axes in (("lhs", lhs_contract + lhs_batch), ("rhs", rhs_contract + rhs_batch)):
        if len(set(axes)) != len(axes):
            raise ValueError(f"{name}'s contracting and batch axes {axes} repeat an axis")
    strided_gemm(lhs.shape, rhs.shape, dimension_numbers)  # NotImplementedError if not one GEMM


PLATFORM_PRECISIONS = ("DEFAULT", "HIGH")  # float32: TF32 on a GPU, exact on the CPU


def platform_preset(precision, dtype, platform: str):
    """The preset a product of ``dtype`` operands at ``precision`` (a normalised name, or None)
    runs on ``platform``, as XLA decides for ``lax.dot_general``: on a GPU DEFAULT and HIGH
    mean TF32 for float32 (:func:`numba_gemm.precision.resolve`); XLA:CPU computes float32
    exactly at every ``lax.Precision``, and so do these kernels on the simulator there."""
    if platform == "cpu" and precision in PLATFORM_PRECISIONS:
        precision = "HIGHEST"
    return resolve(precision, dtype)


def _abstract_eval(
    lhs, rhs, *, dimension_numbers, precision, out_dtype, out_sharding, algorithm, lowering, config
):
    _check(lhs, rhs, dimension_numbers)
    dtype = np.dtype(lhs.dtype)
    preset = resolve(precision, dtype)  # ValueError here, at trace time, for a misfit
    out_dtype = dtype if out_dtype is None else np.dtype(out_dtype)
    if out_dtype not in output_dtypes(preset, dtype):
        raise TypeError(
            f"{dtype} operands cannot give a {out_dtype} result; numba-gemm writes "
            + " or ".join(map(str, output_dtypes(preset, dtype)))
        )
    # Whether algorithm and config can compute the preset: here, at trace time, wherever the
    # preset is the same on every platform; float32 at DEFAULT or HIGH is TF32 on a GPU and
    # exact on the CPU, so there the lowering checks (check_options), before any launch.
    if dtype != FLOAT32 or precision not in PLATFORM_PRECISIONS:
        check_options(preset, algorithm, config, dtype)
    # The result's shape, sharding (Explicit mesh axes: batch, free axes as the operands'; a
    # sharded contracting axis needs out_sharding) and varying manual axes (in shard_map) are
    # lax.dot_general's: the same rules, the same errors
    aval, _ = lax.dot_general_p.abstract_eval(
        lhs, rhs, dimension_numbers=dimension_numbers, precision=None,
        preferred_element_type=out_dtype, out_sharding=out_sharding,
    )  # fmt: skip
    return aval


def check_options(preset, algorithm: str, config, dtype) -> None:
    """``ValueError``/``TypeError`` unless ``algorithm`` and ``config`` compute ``preset`` on
    ``dtype`` operands (``numba_gemm.matmul``'s own checks)."""
    from numba_gemm.api import check_preset
    from numba_gemm.kernels.mma import storage_dtype

    check_preset(preset, algorithm, config)
    if config is not None:
        config.check(storage_dtype(dtype) if preset.tensor_cores else dtype)


@functools.partial(
    jax.jit,
    static_argnames=(
        "dimension_numbers",
        "precision",
        "out_dtype",
        "out_sharding",
        "algorithm",
        "lowering",
        "config",
    ),
)
def _compiled(lhs, rhs, **params):
    return gemm_p.bind(lhs, rhs, **params)


gemm_p.def_abstract_eval(_abstract_eval)
gemm_p.def_impl(_compiled)  # outside jit: one cached executable per signature, as for lax ops

# The product on one device's shards: the kernels' launch (``jax_bridge.lowering``). gemm_p
# lowers to it through the partitioner (``jax_bridge.sharding``), inlined on one device.
gemm_shard_p = Primitive("numba_gemm_dot_shard")
gemm_shard_p.def_abstract_eval(_abstract_eval)


def contraction(params: dict, shapes) -> Contraction:
    """The product's factors (``jax_bridge.sharding``): batch ``b<i>``, lhs free ``m<i>``,
    rhs free ``n<i>`` and contracting ``k<i>`` axes, in each operand's axis order."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = params["dimension_numbers"]
    lhs_ndim, rhs_ndim = map(len, shapes)
    lhs, rhs = [""] * lhs_ndim, [""] * rhs_ndim
    for i, (la, ra) in enumerate(zip(lhs_batch, rhs_batch)):
        lhs[la] = rhs[ra] = f"b{i}"
    for i, (la, ra) in enumerate(zip(lhs_contract, rhs_contract)):
        lhs[la] = rhs[ra] = f"k{i}"
    lhs_free = free_axes(lhs_ndim, lhs_contract, lhs_batch)
    rhs_free = free_axes(rhs_ndim, rhs_contract, rhs_batch)
    for i, a in enumerate(lhs_free):
        lhs[a] = f"m{i}"
    for i, a in enumerate(rhs_free):
        rhs[a] = f"n{i}"
    result = (*(f"b{i}" for i in range(len(lhs_batch))), *(f"m{i}" for i in range(len(lhs_free))),
              *(f"n{i}" for i in range(len(rhs_free))))  # fmt: skip
    return Contraction((tuple(lhs), tuple(rhs)), result)


def _host_product(lhs, rhs, *, dimension_numbers, out_dtype, **_):
    """A device's product inside a partitioned program on the CPU (``jax_bridge.sharding``):
    XLA's dot at the preset's accuracy (float32 exactly, as XLA:CPU and the simulator do)."""
    return lax.dot_general(lhs, rhs, dimension_numbers, precision=lax.Precision.HIGHEST,
                           preferred_element_type=out_dtype or lhs.dtype)  # fmt: skip


# -- differentiation ---------------------------------------------------------------------


def _transpose_lhs(ct, x, y, *, dimension_numbers, swap_ans=False, **params):
    """The cotangent of lhs ``x`` given the output cotangent ``ct`` (lax's rule, with the
    operand order chosen so that the product lands in x's axis order when it can)."""
    x_aval = x.aval
    if type(ct) is ad.Zero:
        return ad.Zero(x_aval)
    # A float32 result of 16-bit operands: its cotangent is rounded to the operands' dtype,
    # which the kernels multiply (the gradient has x's dtype in any case).
    if ct.dtype != x_aval.dtype:
        ct = lax.convert_element_type(ct, x_aval.dtype)
    params = {**params, "out_dtype": None}
    del params["out_sharding"]  # the cotangent's product is sharded as x is (_sharding_like)
    (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
    y_ndim = np.ndim(y)
    x_kept = free_axes(x_aval.ndim, x_contract, x_batch)
    y_kept = free_axes(y_ndim, y_contract, y_batch)
    n_batch = len(x_batch)
    ans_batch = tuple(range(n_batch))
    first_y = n_batch if swap_ans else n_batch + len(x_kept)  # where y's free axes sit in ct
    ans_y = tuple(range(first_y, first_y + len(y_kept)))
    x_contract_by_y = [x_contract[i] for i in np.argsort(y_contract)]
    identity = list(range(x_aval.ndim))
    candidates = (  # (operands, dimension numbers, x's axis at each result position)
        (
            (ct, y),
            ((ans_y, tuple(y_kept)), (ans_batch, tuple(y_batch))),
            list(x_batch) + x_kept + x_contract_by_y,
        ),
        (
            (y, ct),
            ((tuple(y_kept), ans_y), (tuple(y_batch), ans_batch)),
            list(x_batch) + x_contract_by_y + x_kept,
        ),
    )
    fallback = None
    for operands, dims, axes in candidates:
        try:
            strided_gemm(np.shape(operands[0]), np.shape(operands[1]), dims)
        except NotImplementedError:
            continue
        if axes == identity:
            return gemm_p.bind(*varying_alike(*operands), dimension_numbers=dims,
                               **params, out_sharding=_sharding_like(x_aval, axes))  # fmt: skip
        fallback = fallback or (operands, dims, axes)
    operands, dims, axes = fallback or candidates[0]  # none strided: laid out anew (bind)
    product = bind(*operands, dims, **params, out_sharding=_sharding_like(x_aval, axes))
    return lax.transpose(product, tuple(np.argsort(axes)))


def _sharding_like(aval, axes):
    """The sharding of a product whose axis i is ``aval``'s axis ``axes[i]``, sharded as
    ``aval`` is (lax's transpose rule does the same: with Explicit mesh axes a cotangent's
    product may contract a sharded axis, and takes its operand's sharding); None without a
    mesh."""
    sharding = getattr(aval, "sharding", None)
    if not isinstance(sharding, jax.sharding.NamedSharding) or sharding.mesh.empty:
        return None
    spec = padded_spec(sharding.spec, aval.ndim)
    return sharding.update(spec=jax.sharding.PartitionSpec(*(spec[a] for a in axes)))


def _transpose_rhs(ct, x, y, *, dimension_numbers, **params):
    (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
    swapped = ((y_contract, x_contract), (y_batch, x_batch))
    return _transpose_lhs(ct, y, x, dimension_numbers=swapped, swap_ans=True, **params)


ad.defbilinear(gemm_p, _transpose_lhs, _transpose_rhs)


# -- batching ----------------------------------------------------------------------------


def _batch(args, dims, *, dimension_numbers, **params):
    """vmap: the mapped axes join the contraction as a batch axis (both operands mapped) or
    as a free axis (one mapped); the mapping folds it into the launch, never a loop."""
    lhs, rhs = args
    lhs_dim, rhs_dim = dims  # None: not mapped
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers

    def shifted(axes, mapped):
        return axes if mapped is None else tuple(a + (a >= mapped) for a in axes)

    lhs_contract, lhs_batch = shifted(lhs_contract, lhs_dim), shifted(lhs_batch, lhs_dim)
    rhs_contract, rhs_batch = shifted(rhs_contract, rhs_dim), shifted(rhs_batch, rhs_dim)
    if lhs_dim is not None and rhs_dim is not None:
        lhs_batch, rhs_batch = (lhs_dim,) + lhs_batch, (rhs_dim,) + rhs_batch
        out_dim = 0
    elif lhs_dim is not None:
        out_dim = len(lhs_batch) + free_axes(np.ndim(lhs), lhs_contract, lhs_batch).index(lhs_dim)
    else:
        lhs_free = np.ndim(lhs) - len(lhs_contract) - len(lhs_batch)
        out_dim = (
            len(rhs_batch)
            + lhs_free
            + free_axes(np.ndim(rhs), rhs_contract, rhs_batch).index(rhs_dim)
        )
    dims = ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))
    out_sharding = params.pop("out_sharding")
    if out_sharding is not None:  # the mapped axis, unsharded, where the result has it
        spec = list(padded_spec(out_sharding.spec, out_dim))
        spec.insert(out_dim, None)
        out_sharding = out_sharding.update(spec=jax.sharding.PartitionSpec(*spec))
    return bind(lhs, rhs, dims, **params, out_sharding=out_sharding), out_dim


batching.primitive_batchers[gemm_p] = _batch


# -- laying operands out anew where a contraction does not fold ------------------------------


def _canonical(shape, contract, batch, lhs: bool):
    """How to lay an operand out anew: (the axis permutation, where its contracting axes and
    its batch axes then are): batch, free, contracting axes for ``lhs``, batch, contracting,
    free for rhs, each group in its order, so that every group folds into one strided axis."""
    free = free_axes(len(shape), contract, batch)
    n_batch, n_contract = len(batch), len(contract)
    if lhs:
        axes, first = (*batch, *free, *contract), n_batch + len(free)
    else:
        axes, first = (*batch, *contract, *free), n_batch
    return axes, tuple(range(first, first + n_contract)), tuple(range(n_batch))


def bind(lhs, rhs, dimension_numbers, **params):
    """``gemm_p`` on ``lhs`` and ``rhs``, for any contraction ``lax.dot_general`` takes. Where
    its loops do not fold into one strided, batched GEMM (``mapping.strided_gemm``), the
    operands in the way (the fewest first) are laid out anew (``lax.transpose``: a copy each,
    as XLA inserts for its own dots) by :func:`_canonical`; the result's axes are the same."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    lhs_layouts = ((None, lhs_contract, lhs_batch),
                   _canonical(np.shape(lhs), lhs_contract, lhs_batch, True))  # fmt: skip
    rhs_layouts = ((None, rhs_contract, rhs_batch),
                   _canonical(np.shape(rhs), rhs_contract, rhs_batch, False))  # fmt: skip
    for lhs_moved, rhs_moved in ((0, 0), (0, 1), (1, 0), (1, 1)):  # as given; then anew
        (lhs_axes, lc, lb), (rhs_axes, rc, rb) = lhs_layouts[lhs_moved], rhs_layouts[rhs_moved]
        operands = ((lhs, lhs_axes), (rhs, rhs_axes))
        shapes = [np.shape(x) if axes is None else tuple(np.shape(x)[a] for a in axes)
                  for x, axes in operands]  # fmt: skip
        dims = ((lc, rc), (lb, rb))
        try:
            strided_gemm(*shapes, dims)
        except NotImplementedError:
            continue
        laid_out = [x if axes is None else lax.transpose(x, axes) for x, axes in operands]
        return gemm_p.bind(*varying_alike(*laid_out), dimension_numbers=dims, **params)
    raise AssertionError("operands laid out as _canonical says always fold")


# -- user-facing functions ---------------------------------------------------------------


def _options(algorithm: str, lowering: str, config) -> dict:
    from numba_gemm.api import check_algorithm  # numba_gemm.matmul's own checks

    check_algorithm(algorithm, config)
    if lowering not in LOWERINGS:
        raise ValueError(
            f"lowering must be one of {', '.join(map(repr, LOWERINGS))}; got {lowering!r}"
        )
    return {"algorithm": algorithm, "lowering": lowering, "config": config}


def _out_dtype(preferred_element_type):
    return None if preferred_element_type is None else np.dtype(preferred_element_type)


def _out_sharding(out_sharding):
    """``out_sharding`` as lax takes it: None, a ``NamedSharding``, or a ``PartitionSpec`` on
    the mesh in context (``jax.set_mesh``)."""
    if out_sharding is None or isinstance(out_sharding, jax.sharding.NamedSharding):
        return out_sharding
    if isinstance(out_sharding, jax.sharding.PartitionSpec):
        mesh = jax.sharding.get_abstract_mesh()
        if mesh.empty:
            raise ValueError(
                f"out_sharding={out_sharding} is a PartitionSpec but no mesh is set; pass a "
                "NamedSharding, or set one with jax.set_mesh(mesh)"
            )
        return jax.sharding.NamedSharding(mesh, out_sharding)
    raise TypeError(
        f"out_sharding must be None, a NamedSharding or a PartitionSpec; got {out_sharding!r}"
    )


# jax_default_matmul_precision's values, as lax reads them
_CONFIG_PRECISION = {
    "bfloat16": "DEFAULT",
    "fastest": "DEFAULT",
    "tensorfloat32": "HIGH",
    "float32": "HIGHEST",
}


def lax_precision(precision):
    """``lax.dot_general``'s ``precision`` argument as one name (None stays None: the
    operands' exact product): a ``lax.Precision`` or a pair of them (the higher counts), a
    ``DotAlgorithmPreset``, a string; where None, ``jax_default_matmul_precision`` as lax
    reads it, and DEFAULT where that is unset too."""
    if isinstance(precision, (tuple, list)):
        names = [lax_precision(p) for p in precision]
        order = ["DEFAULT", "HIGH", "HIGHEST"]
        if all(n in order for n in names):
            return max(names, key=order.index)
        if len(set(names)) != 1:
            raise ValueError(f"precision {precision!r}: two different algorithms")
        return names[0]
    if precision is None:
        configured = jax.config.jax_default_matmul_precision
        if configured is None:
            return "DEFAULT"
        return normalise(_CONFIG_PRECISION.get(str(configured).lower(), configured))
    return normalise(precision)


def _bind(lhs, rhs, dimension_numbers, options: dict):
    lhs, rhs = jax.numpy.asarray(lhs), jax.numpy.asarray(rhs)
    dims = _normalise(dimension_numbers, lhs.ndim, rhs.ndim)
    return bind(lhs, rhs, dims, **options)


def matmul(
    a,
    b,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    precision=None,
    preferred_element_type=None,
    algorithm: str = "auto",
    lowering: str = "native",
    config=None,
    out_sharding=None,
):
    """``op(a) @ op(b)`` with numba-gemm's kernels, inside or outside ``jax.jit``.

    ``a`` is (M, K), or (K, M) with ``transpose_a``; ``b`` is (K, N), or (N, K)
    with ``transpose_b``; float32, float64, bfloat16 or float16. The flags read the buffer
    transposed through strides: no copy is made. ``precision`` is ``numba_gemm.matmul``'s
    (None: float32 and float64 exactly, 16-bit operands on the tensor cores; a preset name or
    ``lax.DotAlgorithmPreset``; ``"default"``/``"high"``/``"highest"`` or a ``lax.Precision``
    as ``lax.dot_general`` reads them); ``preferred_element_type``: the result's dtype (the
    operands', or float32 for 16-bit operands). ``algorithm`` is one of
    ``numba_gemm.ALGORITHMS`` (``"auto"``: as ``numba_gemm.matmul`` decides);
    ``config`` a ``numba_gemm.TileConfig`` for the tiled kernel. On the GPU
    ``lowering="native"`` has XLA launch the kernel itself (no Python per
    call); ``"callback"`` launches it from Python through ``buffer_callback``.
    On the CPU both run the kernels on the Numba CUDA simulator.
    Differentiable (``grad``, ``jvp``, ``vjp``) and batchable (``vmap``). Under ``jax.jit``
    with sharded operands each device multiplies its shards (``jax_bridge.sharding``);
    ``out_sharding`` is ``lax.dot_general``'s (with Explicit mesh axes, where k is sharded).
    """
    options = _options(algorithm, lowering, config)
    options.update(precision=normalise(precision), out_dtype=_out_dtype(preferred_element_type),
                   out_sharding=_out_sharding(out_sharding))  # fmt: skip
    transpose_a, transpose_b = _flag("transpose_a", transpose_a), _flag("transpose_b", transpose_b)
    for name, x in (("a", a), ("b", b)):
        if np.ndim(x) != 2:
            raise ValueError(f"{name} must be 2-D (a matrix), got shape {np.shape(x)}")
    dims = (((0 if transpose_a else 1),), ((1 if transpose_b else 0),)), ((), ())
    return _bind(a, b, dims, options)


def make_dot_general(
    *, algorithm: str = "auto", lowering: str = "native", config=None, fallback: bool = False
):
    """A function with ``jax.lax.dot_general``'s signature that runs numba-gemm's kernels,
    e.g. for ``flax.linen.Dense(..., dot_general=make_dot_general())``.

    ``precision`` and ``preferred_element_type`` mean what they mean to ``lax.dot_general``
    (:func:`lax_precision`): with neither given nor ``jax_default_matmul_precision`` set,
    float32 runs at DEFAULT precision, which on a GPU is TF32 on the tensor cores (on the
    CPU, exact), as lax's does; pass ``precision=lax.Precision.HIGHEST`` for float32.
    Every contraction ``lax.dot_general`` takes runs on the kernels: where its loops do not fold
    into one strided GEMM (``jax_bridge.mapping``), the operands in the way are laid out anew
    first (:func:`bind`: a transpose copy each). Mixed operand dtypes and result dtypes the
    kernels do not write raise ``NotImplementedError``; with ``fallback=True`` they run through
    ``lax.dot_general`` instead.
    """
    options = _options(algorithm, lowering, config)
    _flag("fallback", fallback)

    def numba_gemm_dot_general(
        lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs
    ):
        lhs, rhs = jax.numpy.asarray(lhs), jax.numpy.asarray(rhs)
        name = lax_precision(precision)
        try:
            if fallback and (lhs.dtype != rhs.dtype or np.dtype(lhs.dtype) not in SUPPORTED_DTYPES):
                raise NotImplementedError(f"dtypes {lhs.dtype} and {rhs.dtype}")
            out_dtype = _out_dtype(preferred_element_type)
            if out_dtype is not None and np.dtype(lhs.dtype) in SUPPORTED_DTYPES:
                allowed = output_dtypes(resolve(name, lhs.dtype), lhs.dtype)
                if out_dtype not in allowed:
                    raise NotImplementedError(
                        f"preferred_element_type={out_dtype} for {lhs.dtype} operands; the "
                        f"kernels write {' or '.join(map(str, allowed))}"
                    )
            dims = _normalise(dimension_numbers, lhs.ndim, rhs.ndim)
            out_sharding = _out_sharding(kwargs.get("out_sharding"))
            return bind(lhs, rhs, dims, precision=name, out_dtype=out_dtype,
                        out_sharding=out_sharding, **options)  # fmt: skip
        except NotImplementedError:
            if not fallback:
                raise
            return lax.dot_general(
                lhs,
                rhs,
                dimension_numbers,
                precision=precision,
                preferred_element_type=preferred_element_type,
                **kwargs,
            )

    return numba_gemm_dot_general


dot_general = make_dot_general()
dot_general.__doc__ = (
    "``jax.lax.dot_general`` on numba-gemm's kernels (default options; "
    "see :func:`make_dot_general`)."
)
