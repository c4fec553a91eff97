"""The bridge under JAX's SPMD partitioning (``jax_bridge.sharding``): ``jax.jit`` with sharded
operands on a mesh of several devices (CI: four CPU devices, ``conftest.HOST_DEVICES``; a GPU
machine: its GPUs, from two).

- The rules: factors and Shardy's rule per contraction, the plan per sharding.
- The compiled programs against ``lax.dot_general`` under the same shardings: batch, M and N
  shardings pass through with no collective, each device's product has its shard's shape, a
  sharded k gives one all-reduce (or a reduce-scatter where the result's sharding asks), and
  no all-gather of an operand where lax has none; results against float64 NumPy; for every
  dtype and precision preset; Auto and Explicit mesh axes; grads and vmap; the triple product.
- ``shard_map`` with the bridge inside (the kernels on the simulator on the CPU).

On the CPU a partitioned program's per-device products are XLA's dots (a Python callback
cannot run inside one: ``jax_bridge.sharding``); on a GPU they are the kernels.
"""

import math
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_bridge  # noqa: E402
from checks import assert_near_reference  # noqa: E402
from jax_bridge.primitive import contraction, platform_preset  # noqa: E402
from jax_bridge.sharding import Contraction, axes_of  # noqa: E402
from numba_gemm.precision import BFLOAT16, FLOAT16  # noqa: E402
from numba_gemm.reference import relative_error  # noqa: E402
from tools.mock_mesh import COLLECTIVES, run_step  # noqa: E402

DEVICES = jax.devices()
pytestmark = pytest.mark.skipif(len(DEVICES) < 2, reason="needs two devices")
ON_GPU = DEVICES[0].platform == "gpu"


def mesh(axis_type=AxisType.Auto):
    """A 2 x 2 mesh (x, y) of four devices, or 2 x 1 of two."""
    shape = (2, 2) if len(DEVICES) >= 4 else (2, 1)
    return jax.make_mesh(shape, ("x", "y"), axis_types=(axis_type,) * 2)


def collectives(fn, *args) -> set:
    return set(COLLECTIVES.findall(fn.lower(*args).compile().as_text()))


def communication(ours, theirs, *operands) -> tuple[set, set]:
    """The collectives of ``ours`` and of ``theirs`` (lax under the same shardings), checked
    that ``ours`` gathers no operand where lax gathers none."""
    found, lax_found = collectives(ours, *operands), collectives(theirs, *operands)
    assert "all-gather" not in found or "all-gather" in lax_found, (found, lax_found)
    return found, lax_found


def assert_communicates_as_lax(kind: str, ours, theirs, *operands) -> None:
    """``ours`` communicates as ``kind`` says (``SHARDINGS``): "reduce" a sharded k's sum,
    "gather" an operand gathered as lax gathers it, "" nothing."""
    found, lax_found = communication(ours, theirs, *operands)
    if kind == "reduce":
        assert found & {"all-reduce", "reduce-scatter"}, found
    elif kind == "gather":
        assert "all-gather" in found and found <= lax_found, (found, lax_found)
    else:
        assert not found, found


def products(fn, *args) -> list:
    """The result shape of each device's products in the compiled program: the kernel calls
    on a GPU (the first of their outputs: a kernel may have scratch outputs too), XLA's dots
    on the CPU (module docstring)."""
    found = []
    for line in fn.lower(*args).compile().as_text().splitlines():
        if ('custom_call_target="numba_gemm_kernel_call"' in line) if ON_GPU else " dot(" in line:
            found.append(tuple(map(int, re.search(r"= \(?\w+\[([\d,]+)\]", line)[1].split(","))))
    return found


def spec(x) -> tuple:
    """A result's sharding (or a ``PartitionSpec``) as a tuple of axis tuples, trailing
    unsharded axes dropped."""
    axes = [axes_of(e) for e in (x if isinstance(x, P) else x.sharding.spec)]
    while axes and not axes[-1]:
        axes.pop()
    return tuple(axes)


# dot_general and triple take lax's default precision where none is given: float32 at DEFAULT
# is TF32 on a GPU, exact on the CPU
LAX_DEFAULT = platform_preset("DEFAULT", np.dtype(np.float32), jax.default_backend()).name


def put(m, x, *spec_):
    return jax.device_put(x, NamedSharding(m, P(*spec_)))


# -- the rules -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dimension_numbers, ndims, rule",
    [
        ((((1,), (0,)), ((), ())), (2, 2), "m0 k0, k0 n0 -> m0 n0"),
        ((((0,), (0,)), ((), ())), (2, 2), "k0 m0, k0 n0 -> m0 n0"),  # transposed a
        ((((1,), (1,)), ((), ())), (2, 2), "m0 k0, n0 k0 -> m0 n0"),  # transposed b
        ((((2,), (1,)), ((0,), (0,))), (3, 3), "b0 m0 k0, b0 k0 n0 -> b0 m0 n0"),
        ((((2,), (0,)), ((), ())), (3, 2), "m0 m1 k0, k0 n0 -> m0 m1 n0"),  # Dense on (b, s, f)
        ((((0,), (0,)), ((), ())), (1, 1), "k0, k0 -> "),  # a dot of vectors
    ],
)
def test_each_contraction_has_its_factors_and_shardy_rule(dimension_numbers, ndims, rule):
    shapes = [(3,) * n for n in ndims]
    found, reductions = contraction({"dimension_numbers": dimension_numbers}, shapes).rule()
    assert found.strip() == rule.strip()
    assert reductions == {"reduction_factors": ("k0",)}


MATMUL = Contraction((("m", "k"), ("k", "n")), ("m", "n"))


@pytest.mark.parametrize(
    "specs, operands, result, reduce_axes",
    [
        ([[("x",), ()], [(), ("y",)]], ((("x",), ()), ((), ("y",))), (("x",), ("y",)), ()),
        ([[(), ("x",)], [("x",), ()]], (((), ("x",)), (("x",), ())), ((), ()), ("x",)),
        # b's k differs from a's: resharded as a's; b's n on x, which m took: unsharded
        ([[("x",), ("y",)], [(), ("x",)]], ((("x",), ("y",)), (("y",), ())), (("x",), ()),
         ("y",)),
        ([[("x", "y"), ()], [(), ()]], ((("x", "y"), ()), ((), ())), (("x", "y"), ()), ()),
    ],
)  # fmt: skip
def test_the_plan_keeps_each_mesh_axis_on_one_factor(specs, operands, result, reduce_axes):
    plan = MATMUL.plan(specs)
    assert (plan.operands, plan.result, plan.reduce_axes) == (operands, result, reduce_axes)
    assert plan.scatter_dim is None


def test_the_plan_reduce_scatters_where_the_result_asks():
    plan = MATMUL.plan([[(), ("x",)], [("x",), ()]], [("x",), ()], {"x": 2}, (8, 6))
    assert (plan.result, plan.reduce_axes, plan.scatter_dim, plan.scatter_axes) == (
        (("x",), ()), (), 0, ("x",))  # fmt: skip
    odd = MATMUL.plan([[(), ("x",)], [("x",), ()]], [("x",), ()], {"x": 2}, (7, 6))
    assert (odd.result, odd.reduce_axes, odd.scatter_dim) == (((), ()), ("x",), None)


# -- jit with sharded operands: Auto mesh axes -----------------------------------------------

# name: (a's spec, b's spec, the mesh axes splitting each device's product's rows and columns,
# the collective: "" none, "reduce" a sharded k's sum, "gather" b gathered where m took n's axis)
SHARDINGS = {
    "rows": ((("x",), None), (None, None), ("x", ""), ""),
    "columns": ((None, None), (None, "y"), ("", "y"), ""),
    "rows and columns": (("x", None), (None, "y"), ("x", "y"), ""),
    "rows on both axes": ((("x", "y"), None), (None, None), (("x", "y"), ""), ""),
    "k": ((None, "x"), ("x", None), ("", ""), "reduce"),
    "k and rows": (("y", "x"), ("x", None), ("y", ""), "reduce"),
    "k in a only": ((None, "x"), (None, None), ("", ""), "reduce"),  # b sliced to agree
    "m and n on one axis": (("x", None), (None, "x"), ("x", ""), "gather"),
}
CASES = [  # (operand dtype, precision preset, result dtype): every preset (float64 needs x64)
    (np.float32, None, None),
    (np.float32, "TF32_TF32_F32", None),
    (np.float32, "TF32_TF32_F32_X3", None),
    (np.float32, "BF16_BF16_F32", None),
    (np.float32, "BF16_BF16_F32_X3", None),
    (np.float32, "BF16_BF16_F32_X6", None),
    (np.float32, "BF16_BF16_F32_X9", None),
    (BFLOAT16, None, None),
    (BFLOAT16, None, np.float32),
    (FLOAT16, None, None),
    (FLOAT16, None, np.float32),
]


def _case_id(case):
    dtype, preset, out = case
    return f"{np.dtype(dtype).name}-{preset or 'default'}" + (f"-to-{out.__name__}" if out else "")


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("sharding", list(SHARDINGS))
def test_sharded_products_communicate_no_more_than_lax(sharding, case, rng):
    dtype, preset, out_dtype = case
    m = mesh()
    sa, sb, (row_axes, column_axes), kind = SHARDINGS[sharding]
    M, N, K = 64, 48, 96
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    A, B = put(m, a, *sa), put(m, b, *sb)
    ours = jax.jit(lambda x, y: jax_bridge.matmul(x, y, precision=preset,
                                                  preferred_element_type=out_dtype))  # fmt: skip
    theirs = jax.jit(lambda x, y: lax.dot_general(x, y, (((1,), (0,)), ((), ())),
                                                  preferred_element_type=out_dtype))  # fmt: skip
    out, expected = ours(A, B), theirs(A, B)
    assert_near_reference(out, a.astype(np.float64) @ b, preset, np.dtype(dtype), K, out_dtype)
    assert spec(out) == spec(expected)
    assert_communicates_as_lax(kind, ours, theirs, A, B)

    def split(axes):
        return math.prod(m.shape[a] for a in axes_of(axes or None))

    assert products(ours, A, B) == [(M // split(row_axes), N // split(column_axes))]


def test_a_batched_dot_general_keeps_its_batch_sharding(rng):
    m = mesh()
    a = rng.standard_normal((4, 16, 32)).astype(np.float32)
    b = rng.standard_normal((4, 32, 8)).astype(np.float32)
    A, B = put(m, a, "x", None, None), put(m, b, "x", None, None)
    dims = (((2,), (1,)), ((0,), (0,)))
    ours = jax.jit(lambda x, y: jax_bridge.dot_general(x, y, dims))
    out = ours(A, B)
    reference = np.einsum("bmk,bkn->bmn", a.astype(np.float64), b)
    assert_near_reference(out, reference, LAX_DEFAULT, np.float32, 32)
    assert spec(out) == (("x",),) and not collectives(ours, A, B)
    assert products(ours, A, B) == [(2, 16, 8)]


@pytest.mark.parametrize(
    "lhs_shape, rhs_shape, dims, specs, communicates",
    [
        ((64,), (64,), (((0,), (0,)), ((), ())), (("x",), ("x",)), True),  # vectors: k
        ((4, 8, 32), (32, 16), (((2,), (0,)), ((), ())), (("x", None, None), (None, "y")),
         False),  # Dense on (batch, seq, features): batch and features pass through
        ((32, 16), (32, 8), (((0,), (0,)), ((), ())), ((None, "x"), (None, None)),
         False),  # a transposed lhs (transpose_a): its M sharded
    ],
    ids=["vector dot", "dense on 3-D", "transposed lhs"],
)  # fmt: skip
def test_every_form_of_contraction_partitions(lhs_shape, rhs_shape, dims, specs, communicates,
                                              rng):  # fmt: skip
    m = mesh()
    lhs, rhs = (rng.standard_normal(s).astype(np.float32) for s in (lhs_shape, rhs_shape))
    operands = [put(m, x, *spec_) for x, spec_ in zip((lhs, rhs), specs)]
    ours = jax.jit(lambda x, y: jax_bridge.dot_general(x, y, dims))
    theirs = jax.jit(lambda x, y: lax.dot_general(x, y, dims))
    out, expected = ours(*operands), theirs(*operands)
    reference = np.tensordot(lhs.astype(np.float64), rhs, (dims[0][0], dims[0][1]))
    assert_near_reference(out, reference, LAX_DEFAULT, np.float32, lhs_shape[dims[0][0][0]])
    assert spec(out) == spec(expected)
    found, _ = communication(ours, theirs, *operands)
    assert bool(found) == communicates, found


@pytest.mark.parametrize("wanted", [P(), P("x", None)], ids=["replicated", "rows"])
def test_a_sharded_k_reduces_once_as_the_result_is_sharded(wanted, rng):
    m = mesh()
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((64, 96), (96, 48)))
    A, B = put(m, a, None, "x"), put(m, b, "x", None)
    ours = jax.jit(jax_bridge.matmul, out_shardings=NamedSharding(m, wanted))
    out = ours(A, B)
    assert_near_reference(out, a.astype(np.float64) @ b, None, np.float32, 96)
    expected = {"all-reduce"} if wanted == P() else {"reduce-scatter"}
    assert collectives(ours, A, B) == expected


def test_grads_and_vmap_under_sharding_match_lax(rng):
    m = mesh()
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((64, 32), (32, 48)))
    A, B = put(m, a, "x", None), put(m, b, None, "y")

    def loss(matmul):
        return jax.jit(jax.grad(lambda x, y: jnp.sum(jnp.sin(matmul(x, y))), argnums=(0, 1)))

    ours, theirs = loss(jax_bridge.matmul), loss(lambda x, y: jnp.matmul(x, y, precision="highest"))
    for got, expected in zip(ours(A, B), theirs(A, B)):
        assert relative_error(np.asarray(got, np.float64), np.asarray(expected)) < 1e-5
        assert spec(got) == spec(expected)
    assert collectives(ours, A, B) <= collectives(theirs, A, B)
    x = put(m, rng.standard_normal((4, 16, 32)).astype(np.float32), "x", None, None)
    mapped = jax.jit(jax.vmap(jax_bridge.matmul, in_axes=(0, None)))
    out = mapped(x, B)
    assert_near_reference(out, np.asarray(x, np.float64) @ b, None, np.float32, 32)
    assert spec(out) == spec(jax.jit(jax.vmap(jnp.matmul, in_axes=(0, None)))(x, B))
    assert not collectives(mapped, x, B)


# -- Explicit mesh axes (jax.make_mesh's default) ---------------------------------------------


# Three functions, not one: the tests of several GPUs run each function in its own process, so
# that a crash in XLA's compile names its case.


def explicit_operands(rng, a_spec, b_spec, dtype=np.float32):
    """A (64 x 96) and B (96 x 48) of ``dtype`` on an Explicit mesh as ``a_spec`` and
    ``b_spec`` say, and their host values (call inside ``jax.set_mesh``)."""
    a, b = (rng.standard_normal(s).astype(dtype) for s in ((64, 96), (96, 48)))
    return jax.device_put(a, a_spec), jax.device_put(b, b_spec), a, b


def test_explicit_axes_type_results_as_lax_does(rng):
    with jax.set_mesh(mesh(AxisType.Explicit)):
        A, B, a, b = explicit_operands(rng, P("x", None), P(None, "y"))
        out = jax.jit(jax_bridge.matmul)(A, B)
        assert spec(jax.typeof(out)) == spec(jax.typeof(jnp.matmul(A, B)))
        assert_near_reference(out, a.astype(np.float64) @ b, None, np.float32, 96)


def test_explicit_axes_sharded_k_takes_the_result_sharding_asked_for(rng):
    """lax's rule: a sharded k needs the result's sharding (``out_sharding``); one reduction."""
    with jax.set_mesh(mesh(AxisType.Explicit)):
        A, B, a, b = explicit_operands(rng, P(None, "x"), P("x", None))
        with pytest.raises(jax.sharding.ShardingTypeError if hasattr(jax.sharding,
                           "ShardingTypeError") else Exception, match="out_sharding"):  # fmt: skip
            jax.jit(jax_bridge.matmul)(A, B)
        for wanted, expected in ((P(), {"all-reduce"}), (P("x", None), {"reduce-scatter"})):
            fn = jax.jit(lambda x, y, wanted=wanted: jax_bridge.matmul(x, y, out_sharding=wanted))
            out = fn(A, B)
            assert spec(jax.typeof(out)) == spec(wanted)
            assert_near_reference(out, a.astype(np.float64) @ b, None, np.float32, 96)
            assert collectives(fn, A, B) == expected


@pytest.mark.parametrize(
    "case, dtype",
    [("all-reduce", np.float32), ("reduce-scatter", np.float32), ("triple k1", np.float32),
     ("all-reduce", BFLOAT16), ("reduce-scatter", FLOAT16)],
)  # fmt: skip
def test_explicit_axes_reduce_with_a_plain_add_while_the_mesh_is_set(case, dtype, rng,
                                                                     monkeypatch):  # fmt: skip
    """jax 0.11 still has the caller's mesh set when XLA's partitioner calls back into Python,
    so the per-device function is traced under Explicit axes (0.10 clears the mesh there). The
    collective's reduction must still be a plain add: XLA rejects one whose ops carry sharding
    annotations (the GPU compiler aborts). Here the callback is traced under the mesh as 0.11
    traces it, on any jax."""
    from jax._src import custom_partitioning
    from jax._src import mesh as mesh_lib

    m = mesh(AxisType.Explicit)

    def under_mesh(fn):
        def traced(*args, **kwargs):
            with mesh_lib.use_abstract_mesh(m.abstract_mesh):
                return fn(*args, **kwargs)

        return traced

    make_jaxpr = custom_partitioning.api.make_jaxpr
    monkeypatch.setattr(custom_partitioning, "_to_jax_shape",
                        under_mesh(custom_partitioning._to_jax_shape))  # fmt: skip
    monkeypatch.setattr(custom_partitioning.api, "make_jaxpr",
                        lambda fn, **kwargs: under_mesh(make_jaxpr(fn, **kwargs)))  # fmt: skip
    with jax.set_mesh(m):
        A, B, a, b = explicit_operands(rng, P(None, "x"), P("x", None), dtype)
        if case == "triple k1":  # A's columns and B's rows: the first product's sum reduced
            c = rng.standard_normal((48, 40)).astype(np.float32)
            operands, exact, k = (A, B, jax.device_put(c, P())), a.astype(np.float64) @ b @ c, 192
            fn = jax.jit(jax_bridge.triple)
        else:
            wanted = P() if case == "all-reduce" else P("x", None)
            operands, exact, k = (A, B), a.astype(np.float64) @ b, 96
            fn = jax.jit(lambda x, y: jax_bridge.matmul(x, y, out_sharding=wanted))
        text = fn.lower(*operands).compile().as_text()
        assert COLLECTIVES.search(text) and 'custom_call_target="Sharding"' not in text
        assert_near_reference(fn(*operands), exact, None, np.dtype(dtype), k)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize(
    "sharding, wanted", [("rows and columns", None), ("k", P()), ("k and rows", P("y", None))]
)
def test_explicit_axes_products_at_every_preset_as_lax(sharding, wanted, case, rng):
    """Every dtype and precision preset under Explicit axes: the result typed, communicated and
    accurate as ``lax.dot_general``'s with the same ``out_sharding``."""
    dtype, preset, out_dtype = case
    (sa, sb, _, kind), K = SHARDINGS[sharding], 96
    with jax.set_mesh(mesh(AxisType.Explicit)):
        a, b = (rng.standard_normal(s).astype(dtype) for s in ((64, K), (K, 48)))
        A, B = jax.device_put(a, P(*sa)), jax.device_put(b, P(*sb))
        result = dict(preferred_element_type=out_dtype, out_sharding=wanted)
        ours = jax.jit(lambda x, y: jax_bridge.matmul(x, y, precision=preset, **result))
        theirs = jax.jit(lambda x, y: lax.dot_general(x, y, (((1,), (0,)), ((), ())), **result))
        out = ours(A, B)
        assert spec(jax.typeof(out)) == spec(jax.typeof(theirs(A, B)))
        assert_near_reference(out, a.astype(np.float64) @ b, preset, np.dtype(dtype), K, out_dtype)
        assert_communicates_as_lax(kind, ours, theirs, A, B)


def test_explicit_axes_type_each_cotangent_as_its_operand(rng):
    with jax.set_mesh(mesh(AxisType.Explicit)):
        A, B, _, _ = explicit_operands(rng, P("x", None), P(None, "y"))
        grads = jax.jit(jax.grad(lambda x, y: jnp.sum(jax_bridge.matmul(x, y) ** 2), (0, 1)))
        for got, operand in zip(grads(A, B), (A, B)):
            assert spec(jax.typeof(got)) == spec(jax.typeof(operand))


# -- the triple product ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "specs, reduces",
    [
        (((("x",), None), (None, None), (None, "y")), False),  # A's rows, C's columns
        (((None, "x"), ("x", None), (None, None)), True),  # k1
        (((None, None), (None, "x"), ("x", None)), True),  # k2
    ],
    ids=["rows and columns", "k1", "k2"],
)
def test_the_triple_product_partitions_as_a_chain(specs, reduces, rng):
    m = mesh()
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((64, 32), (32, 48), (48, 40)))
    operands = [put(m, x, *s) for x, s in zip((a, b, c), specs)]
    fn = jax.jit(jax_bridge.triple)
    out = fn(*operands)
    assert_near_reference(out, a.astype(np.float64) @ b @ c, None, np.float32, 48 * 4)
    found = collectives(fn, *operands)
    assert ("all-reduce" in found) if reduces else not found, found
    grads = jax.jit(jax.grad(lambda *xs: jnp.sum(jax_bridge.triple(*xs) ** 2), (0, 1, 2)))
    a64, b64, c64 = (x.astype(np.float64) for x in (a, b, c))
    g = 2 * (a64 @ b64 @ c64)  # the cotangent of D = A B C under sum(D^2)
    expected = (g @ c64.T @ b64.T, a64.T @ g @ c64.T, b64.T @ a64.T @ g)
    for got, want in zip(grads(*operands), expected):  # the bridge's float32 products: exact
        assert_near_reference(got, want, None, np.float32, 2 * 48 * 4)


# -- shard_map: the kernels on each device's block ----------------------------------------------


def test_shard_map_runs_the_bridge_on_each_block(rng):
    m = mesh()
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((64, 96), (96, 48)))
    rows = jax.shard_map(jax_bridge.matmul, mesh=m, in_specs=(P("x", None), P()),
                         out_specs=P("x", None))  # fmt: skip
    k = jax.shard_map(lambda x, y: lax.psum(jax_bridge.matmul(x, y), "x"), mesh=m,
                      in_specs=(P(None, "x"), P("x", None)), out_specs=P())  # fmt: skip
    for fn in (rows, k):
        assert_near_reference(jax.jit(fn)(a, b), a.astype(np.float64) @ b, None, np.float32, 96)


# -- the example ----------------------------------------------------------------------------------


def test_the_tensor_parallel_example_trains_as_lax_does(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "tensor_parallel_mlp.py"
    spec_ = importlib.util.spec_from_file_location("tensor_parallel_mlp", path)
    example = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(example)
    assert example.main(["--steps", "24", "--width", "64", "--batch", "32"]) == 0
    assert "all-reduce" in capsys.readouterr().out  # the row-parallel layer's one reduction


def test_the_sharding_benchmark_measures_every_row(benchmark_module):
    """``benchmarks/sharding.py`` on the CPU's devices, small: one device, then rows and k over
    2 and 4, each with one device's product alone timed too; the example's step on 2."""
    bench = benchmark_module("sharding")
    rows = bench.product_rows(32, [1, 2, 4], rounds=1, calls=1)
    assert [(r["dtype"], r["sharding"], r["devices"]) for r in rows] == [
        (dtype, sharding, n)
        for dtype in ("bfloat16", "float32")
        for n, sharding in ((1, "rows"), (2, "rows"), (2, "k"), (4, "rows"), (4, "k"))
    ]
    for r in rows:
        alone = (r["device_ours_s"], r["device_jnp_s"])
        assert alone == (None, None) if r["devices"] == 1 else min(alone) > 0
        assert r["ours_s"] > 0 and r["jnp_s"] > 0 and math.isfinite(r["scaling_vs_jnp"])
    assert bench.device_operands(np.ones((8, 12)), np.ones((12, 4)), "k", 4)[1].shape == (3, 4)
    [mlp] = bench.mlp_rows([1, 2], width=64, batch=32)
    assert mlp["devices"] == 2 and mlp["ratio"] > 0


# -- tools/mock_mesh.py (one GPU posing as several: its steps run here on the CPU devices) -----


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("step", ["explicit_rows", "explicit_k_rep", "explicit_k_scatter",
                                  "explicit_grads", "auto_k_rep", "auto_k_scatter"])  # fmt: skip
def test_the_mock_mesh_tool_checks_each_step(step, dtype):
    axis_type = AxisType.Explicit if step.startswith("explicit") else AxisType.Auto
    m = jax.sharding.Mesh(np.array(DEVICES[:2]).reshape(2, 1), ("x", "y"), (axis_type,) * 2)
    report = run_step(m, step, dtype, seed=3)
    expected = {"rows": [], "k_rep": ["all-reduce"], "k_scatter": ["reduce-scatter"],
                "grads": ["all-reduce"]}[step.split("_", 1)[1]]  # fmt: skip
    assert report["collectives"] == expected
    # float32 sums of 96 products, then the result rounded to its dtype
    bound = 96 * np.finfo(np.float32).eps / 2 + 2 * float(jnp.finfo(dtype).eps)
    assert step.endswith("grads") or (report["errors"] and max(report["errors"]) < bound)
