"""A tensor-parallel MLP trained through numba-gemm's products under JAX's own sharding.

    python examples/tensor_parallel_mlp.py [--steps 300] [--dtype bfloat16] [--width 1024]

The model is y = gelu(x @ W1) @ W2 on a mesh of every visible device, ("data", "model") =
(1, devices), as Megatron-LM splits a transformer's MLP:

1. *Column-parallel* W1 (d, h): its columns sharded over "model". Each device computes its own
   slice of the hidden layer, x @ W1[:, slice], with no communication.
2. *Row-parallel* W2 (h, d): its rows sharded over "model", as the hidden layer is. Each
   device's product is a partial sum over its slice of h; the partitioner adds them with one
   all-reduce.

Nothing here is specific to numba-gemm but the ``dot_general`` the layers call: the parameters
carry ``NamedSharding``s, the step is a plain ``jax.jit``, and the same model with
``lax.dot_general`` trains from the same start for comparison. The script checks that both
runs' losses agree at every logged step (within the dtype's accuracy) and that the compiled
step of the bridge communicates no more than lax's. Exit status 1 if not.
"""

from __future__ import annotations

import argparse
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jax_bridge

COLLECTIVES = re.compile(r"\b(all-gather|all-reduce|reduce-scatter|all-to-all)\(")


def dense(x, w, dot_general):
    """x (batch, in) @ w (in, out) through ``dot_general``, float32 accumulation."""
    return dot_general(x, w, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def loss_fn(params, x, y, dot_general):
    w1, w2 = params
    hidden = jax.nn.gelu(dense(x, w1, dot_general)).astype(x.dtype)
    out = dense(hidden, w2, dot_general)
    return jnp.mean((out - y.astype(jnp.float32)) ** 2)


def make_step(dot_general, learning_rate: float):
    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, dot_general)
        params = jax.tree.map(lambda p, g: (p - learning_rate * g).astype(p.dtype), params, grads)
        return params, loss

    return step


def init(mesh, width: int, hidden: int, dtype, seed: int = 0):
    """W1 column-parallel, W2 row-parallel, and a teacher the MLP learns."""
    keys = jax.random.split(jax.random.key(seed), 3)
    w1 = jax.random.normal(keys[0], (width, hidden), jnp.float32) / np.sqrt(width)
    w2 = jax.random.normal(keys[1], (hidden, width), jnp.float32) / np.sqrt(hidden)
    teacher = jax.random.normal(keys[2], (width, width), jnp.float32) / np.sqrt(width)
    params = (
        jax.device_put(w1.astype(dtype), NamedSharding(mesh, P(None, "model"))),
        jax.device_put(w2.astype(dtype), NamedSharding(mesh, P("model", None))),
    )
    return params, teacher


def batches(teacher, batch: int, width: int, dtype, steps: int, seed: int = 1):
    key = jax.random.key(seed)
    for _ in range(steps):
        key, sub = jax.random.split(key)
        x = jax.random.normal(sub, (batch, width), jnp.float32)
        yield x.astype(dtype), jnp.tanh(x @ teacher).astype(dtype)


def train(mesh, dot_general, args, log_every: int):
    dtype = jnp.dtype(args.dtype)
    params, teacher = init(mesh, args.width, 4 * args.width, dtype)
    step = make_step(dot_general, args.learning_rate)
    data = NamedSharding(mesh, P("data", None))
    losses = []
    for i, (x, y) in enumerate(batches(teacher, args.batch, args.width, dtype, args.steps)):
        x, y = jax.device_put(x, data), jax.device_put(y, data)
        params, loss = step(params, x, y)
        if i % log_every == 0 or i == args.steps - 1:
            losses.append((i, float(loss)))
    collectives = set(COLLECTIVES.findall(step.lower(params, x, y).compile().as_text()))
    return losses, params, collectives


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    args = parser.parse_args(argv)
    devices = jax.devices()
    mesh = jax.make_mesh((1, len(devices)), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    print(f"{len(devices)} x {devices[0].device_kind}; mesh {dict(mesh.shape)}; {args.dtype}")
    log_every = max(1, args.steps // 6)
    ours, _, ours_comm = train(mesh, jax_bridge.dot_general, args, log_every)
    theirs, _, lax_comm = train(mesh, lax.dot_general, args, log_every)
    # bf16 operands: the two runs round differently; their losses stay within a few percent
    tolerance = 0.05 if args.dtype == "bfloat16" else 1e-3
    ok = True
    print(f"{'step':>6} {'bridge':>12} {'lax':>12}")
    for (i, a), (_, b) in zip(ours, theirs):
        flag = "" if abs(a - b) <= tolerance * abs(b) else "  <- differ"
        ok &= not flag
        print(f"{i:6d} {a:12.6f} {b:12.6f}{flag}")
    print(f"collectives per step: bridge {sorted(ours_comm)}, lax {sorted(lax_comm)}")
    if ours[-1][1] >= ours[0][1]:
        print("the bridge's run did not learn")
        ok = False
    if ours_comm - lax_comm:
        print(f"the bridge's step communicates more than lax's: {sorted(ours_comm - lax_comm)}")
        ok = False
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
