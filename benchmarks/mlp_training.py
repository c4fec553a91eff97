"""A real client of the bridge: an MLP trained with jax_bridge.dot_general against lax.

    python benchmarks/mlp_training.py [--steps 300] [--results DIR]

Trains the same 3-layer tanh MLP (64 -> 256 -> 256 -> 10, batch 256, SGD on a
regression to a fixed random teacher) twice from the same initial weights:
once with every dense layer's ``dot_general`` from ``jax_bridge`` (forward and
backward run numba-gemm's kernels), once with ``lax.dot_general`` at
``precision="highest"`` (cuBLAS, true fp32). Both are jitted training steps.
Prints the loss curves side by side and writes them to
``<DIR>/mlp_training/<device>.json``. ``tests/test_gpu_bridge.py`` runs
:func:`compare` and checks the curves agree within :data:`LOSS_TOLERANCE`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jax_bridge
from numba_gemm.timing import write_results

LAYERS = (64, 256, 256, 10)
BATCH = 256
LEARNING_RATE = 0.05
LOSS_TOLERANCE = 1e-4  # relative, at every step
DENSE = (((1,), (0,)), ((), ()))  # x (batch, in) . W (in, out), as flax.linen.Dense calls it


def init(key, layers=LAYERS):
    """Float32 parameters, as flax's Dense initialises them (lecun normal, zero bias)."""
    params = []
    for fan_in, fan_out in zip(layers[:-1], layers[1:]):
        key, sub = jax.random.split(key)
        params.append(
            (jax.random.normal(sub, (fan_in, fan_out)) / np.sqrt(fan_in), jnp.zeros(fan_out))
        )
    return params


def forward(params, x, dot_general):
    for i, (w, b) in enumerate(params):
        x = dot_general(x, w, DENSE) + b
        if i < len(params) - 1:
            x = jnp.tanh(x)
    return x


def lax_dot_general(lhs, rhs, dims):
    return lax.dot_general(lhs, rhs, dims, precision=lax.Precision.HIGHEST)


def bridge_dot_general(lhs, rhs, dims):
    """The bridge at the same precision as :func:`lax_dot_general` (its default, like lax's,
    is TF32 on a GPU)."""
    return jax_bridge.dot_general(lhs, rhs, dims, precision=lax.Precision.HIGHEST)


def train(dot_general, steps: int, seed: int = 0) -> list[float]:
    """The loss at every step of SGD on a teacher-student regression."""
    key_data, key_teacher, key_student = jax.random.split(jax.random.key(seed), 3)
    teacher = init(key_teacher)
    params = init(key_student)

    def loss(params, x, y):
        return jnp.mean((forward(params, x, dot_general) - y) ** 2)

    @jax.jit
    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads), value

    @jax.jit
    def batch(key):
        x = jax.random.normal(key, (BATCH, LAYERS[0]))
        return x, forward(teacher, x, lax_dot_general)

    losses = []
    for key in jax.random.split(key_data, steps):
        x, y = batch(key)
        params, value = step(params, x, y)
        losses.append(float(value))
    return losses


def compare(steps: int = 300) -> tuple[list[float], list[float]]:
    """(bridge losses, lax losses) from the same data and initial weights."""
    return train(bridge_dot_general, steps), train(lax_dot_general, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--results", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    ours, theirs = compare(args.steps)
    relative = [abs(x - y) / abs(y) for x, y in zip(ours, theirs)]
    device = jax.devices()[0].device_kind
    print(f"MLP {LAYERS}, batch {BATCH}, SGD lr {LEARNING_RATE}, {args.steps} steps on {device}")
    print(f"{'step':>6} {'jax_bridge':>12} {'lax (highest)':>14} {'relative diff':>14}")
    for i in sorted({0, *range(49, args.steps, 50), args.steps - 1}):
        print(f"{i + 1:6d} {ours[i]:12.6f} {theirs[i]:14.6f} {relative[i]:14.2e}")
    print(
        f"largest relative difference over all steps: {max(relative):.2e} "
        f"(tolerance {LOSS_TOLERANCE:.0e})"
    )
    path = write_results(
        args.results,
        device,
        "mlp_training",
        {
            "versions": {"jax": jax.__version__},
            "layers": LAYERS,
            "batch": BATCH,
            "learning_rate": LEARNING_RATE,
            "steps": args.steps,
            "loss_jax_bridge": ours,
            "loss_lax_highest": theirs,
            "max_relative_difference": max(relative),
            "tolerance": LOSS_TOLERANCE,
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
