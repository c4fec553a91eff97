"""The bridge in a real model: a training step through jax_bridge against lax, and each of the
step's products inside one jitted program.

    python benchmarks/models.py [--steps 50] [--out benchmarks/results] [--products]

**Steps.** An MLP (batch 1024, Dense 256 -> 512 -> 512 -> 10, gelu, Adam) in bfloat16 and in
float32 at default precision, each trained twice from the same weights and data: every dense
layer's ``dot_general`` from ``jax_bridge`` (forward and backward run numba-gemm's kernels),
and from ``lax``. The layers call ``dot_general`` exactly as ``flax.linen.Dense(dtype=...)``
does (inputs and kernel cast to the layer's dtype, ``(((ndim - 1,), (0,)), ((), ()))``, default
precision; float32 parameters, so the backward's weight gradients come back float32), written
out so that the benchmark needs JAX alone. Each jitted step is timed as the median of runs of
``STEP_CALLS`` steps blocked once; the losses of the two runs are compared at every step.

**Products** (``--products``): each distinct product of that model's step, 16 of them summed in
one jitted program (bf16 operands, float32 result, as the backward asks), per product, for
both ``dot_general``s. Each of the 16 has operands of its own: XLA merges products that share
an operand into one larger product (its dot merger), which would time one product of 16x
the work for lax and 16 for the bridge.

Writes ``<out>/models/<device>.json``: rows ``{"model", "dtype", "bridge_step_s",
"lax_step_s", "loss_max_rel_diff"}`` and, with ``--products``, ``product_rows``
``{"product", "bridge_s", "lax_s"}``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
from jax import lax
from mlp_training import DENSE, init  # a sibling script: benchmarks/ is on the path

import jax_bridge

LAYERS = (256, 512, 512, 10)
BATCH = 1024
LEARNING_RATE = 1e-3
STEP_CALLS, RUNS = 20, 7
DOT_GENERALS = {"bridge": jax_bridge.dot_general, "lax": lax.dot_general}


def forward(params, x, dot_general, dtype):
    """The MLP as flax.linen.Dense(dtype=dtype) layers compute it."""
    for i, (w, b) in enumerate(params):
        x = dot_general(x.astype(dtype), w.astype(dtype), DENSE) + b.astype(dtype)
        if i < len(params) - 1:
            x = jax.nn.gelu(x)
    return x


def adam(params, grads, state, step):
    """One Adam update (optax's defaults: b1 0.9, b2 0.999, eps 1e-8)."""
    m, v = state
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, grads)
    scale = LEARNING_RATE * jnp.sqrt(1 - 0.999**step) / (1 - 0.9**step)
    params = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return params, (m, v)


def make_step(dot_general, dtype):
    def loss(params, x, y):
        out = forward(params, x, dot_general, dtype).astype(jnp.float32)
        return jnp.mean(cross_entropy(out, y))

    @jax.jit
    def step(params, state, count, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        params, state = adam(params, grads, state, count)
        return params, state, count + 1, value

    return step


def cross_entropy(logits, labels):
    """Cross-entropy of integer ``labels`` under ``logits`` (optax's formula)."""
    logp = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(logp, labels[:, None], axis=1)[:, 0]


def data(steps: int, layers=LAYERS, batch=BATCH, seed: int = 1):
    key_x, key_y = jax.random.split(jax.random.key(seed))
    x = jax.random.normal(key_x, (steps, batch, layers[0]))
    y = jax.random.randint(key_y, (steps, batch), 0, layers[-1])
    return x, y


def train(dot_general, dtype, steps: int, layers=LAYERS, batch=BATCH, timed: bool = True):
    """(losses at every step, median seconds per step or None where not ``timed``) from fixed
    weights and data."""
    params = init(jax.random.key(0), layers)
    state = (jax.tree.map(jnp.zeros_like, params), jax.tree.map(jnp.zeros_like, params))
    xs, ys = data(steps, layers, batch)
    step = make_step(dot_general, dtype)
    count = jnp.float32(1)
    losses = []
    for i in range(steps):
        params, state, count, value = step(params, state, count, xs[i], ys[i])
        losses.append(float(value))
    if not timed:
        return losses, None
    seconds, x, y = [], xs[-1], ys[-1]
    for _ in range(RUNS):  # the step timed on the last batch, blocked once per run
        jax.block_until_ready((params, x, y))
        start = time.perf_counter()
        for _ in range(STEP_CALLS):
            params, state, count, value = step(params, state, count, x, y)
        jax.block_until_ready(value)
        seconds.append((time.perf_counter() - start) / STEP_CALLS)
    return losses, statistics.median(seconds)


def step_rows(steps: int, layers=LAYERS, batch=BATCH) -> list[dict]:
    rows = []
    for dtype in (jnp.bfloat16, jnp.float32):
        (ours, ours_s), (theirs, theirs_s) = (
            train(DOT_GENERALS[name], dtype, steps, layers, batch) for name in ("bridge", "lax")
        )
        rows.append(
            {
                "model": f"mlp {'-'.join(map(str, layers))} batch {batch} adam",
                "layers": list(layers),
                "batch": batch,
                "dtype": jnp.dtype(dtype).name,
                "steps": steps,
                "bridge_step_s": ours_s,
                "lax_step_s": theirs_s,
                "loss_max_rel_diff": max(abs(a - b) / abs(b) for a, b in zip(ours, theirs)),
                "loss_first_last": [ours[0], ours[-1]],
            }
        )
        print(rows[-1], flush=True)
    return rows


# The step's distinct products (bf16 operands, float32 result), as (name, lhs shape, rhs shape,
# dimension numbers): forward, weight gradient, input gradient.
PRODUCTS = (
    ("1024x512 @ 512x512", (1024, 512), (512, 512), DENSE),
    ("(1024x256)^T @ 1024x512", (1024, 256), (1024, 512), (((0,), (0,)), ((), ()))),
    ("1024x512 @ (256x512)^T", (1024, 512), (256, 512), (((1,), (1,)), ((), ()))),
    ("1024x512 @ 512x10", (1024, 512), (512, 10), DENSE),
    ("(1024x512)^T @ 1024x10", (1024, 512), (1024, 10), (((0,), (0,)), ((), ()))),
    ("1024x10 @ (512x10)^T", (1024, 10), (512, 10), (((1,), (1,)), ((), ()))),
)
PRODUCTS_PER_PROGRAM = 16


def product_seconds(dot_general, lhs_shape, rhs_shape, dims, copies=PRODUCTS_PER_PROGRAM):
    """Seconds per product of ``copies`` products summed in one jitted program."""
    lhs = jax.random.normal(jax.random.key(2), (copies, *lhs_shape), jnp.bfloat16)
    rhs = jax.random.normal(jax.random.key(3), (copies, *rhs_shape), jnp.bfloat16)

    @jax.jit
    def program(lhs, rhs):
        return sum(
            dot_general(lhs[i], rhs[i], dims, preferred_element_type=jnp.float32)
            for i in range(copies)
        )

    jax.block_until_ready(program(lhs, rhs))
    seconds = []
    for _ in range(RUNS):
        start = time.perf_counter()
        for _ in range(STEP_CALLS):
            out = program(lhs, rhs)
        jax.block_until_ready(out)
        seconds.append((time.perf_counter() - start) / STEP_CALLS / copies)
    return statistics.median(seconds)


def product_rows() -> list[dict]:
    rows = []
    for name, lhs, rhs, dims in PRODUCTS:
        times = {k: product_seconds(f, lhs, rhs, dims) for k, f in DOT_GENERALS.items()}
        rows.append({"product": name, "bridge_s": times["bridge"], "lax_s": times["lax"],
                     "ratio": times["lax"] / times["bridge"]})  # fmt: skip
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--products", action="store_true", help="time the step's products too")
    parser.add_argument("--out", help="write <out>/models/<device>.json")
    args = parser.parse_args()
    from numba_gemm.timing import device_name, stack_versions, write_results

    record = {
        "stack": stack_versions(),
        "method": f"median of {RUNS} runs of {STEP_CALLS} jitted calls blocked once",
        "rows": step_rows(args.steps),
    }
    if args.products:
        record["product_rows"] = product_rows()
    if args.out:
        print(f"wrote {write_results(args.out, device_name(), 'models', record)}")


if __name__ == "__main__":
    main()
