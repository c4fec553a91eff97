"""The bridge's sharded products compiled by XLA's GPU compiler for N devices, on one GPU.

    python tools/mock_mesh.py N [--steps STEP ...] [--dtype float32|bfloat16|float16]

With ``N`` > 1 on a GPU machine, jax's mock processes (``mock_num_gpu_processes``) make one GPU
pose as the first of N: ``jax.devices()`` lists N, the program is partitioned and compiled for
all of them (the partitioner's callbacks, XLA's GPU passes and checks), and the local GPU runs
its own part. That is how a compile that fails only on several GPUs (an abort in XLA's GPU
passes) can be reproduced and fixed with one GPU. XLA's autotuning is off
(``--xla_gpu_autotune_level=0``): under mock processes a compile that autotunes does not end.
On the CPU it runs on N host devices (``--xla_force_host_platform_device_count``), where the
collectives are real.

Each step is a 64 x 96 x 48 product on an N x 1 mesh (x, y) of Explicit or Auto axes:

- ``rows``: A's rows on x, B's columns on y: no collective;
- ``k_rep``: k on x, a replicated result: one all-reduce;
- ``k_scatter``: k on x, the result's rows on x: one reduce-scatter;
- ``grads``: ``jax.grad`` of the sum of squares of the ``rows`` product (dB reduces over x).

For each: the collectives and kernel calls of the compiled program, then each local shard's
largest error relative to the largest element of the float64 product. Under mock processes
the collectives do not communicate, so a reduced shard holds the local device's partial sum:
its error against the whole product says nothing; only ``rows`` is checked there.
"""

from __future__ import annotations

import argparse
import os
import re

import numpy as np

STEPS = [
    f"{axes}_{form}"
    for axes in ("explicit", "auto")
    for form in ("rows", "k_rep", "k_scatter", "grads")
]
# A collective in compiled HLO text (GPUs run them asynchronously: ``all-reduce-start(``)
COLLECTIVES = re.compile(
    r"\b(all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(?:-start)?\("
)


def run_step(mesh, step: str, dtype: str = "float32", seed: int = 0) -> dict:
    """Compile and run one step on ``mesh`` (an N x 1 mesh with axes x, y, of the axis types the
    step names) under ``jax.set_mesh``. Returns the step's collectives, kernel calls, result
    types and each local shard's relative error (none for ``grads``)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_bridge

    form = step.split("_", 1)[1]
    rng = np.random.default_rng(seed)
    a = np.asarray(jnp.asarray(rng.standard_normal((64, 96)), dtype))
    b = np.asarray(jnp.asarray(rng.standard_normal((96, 48)), dtype))
    specs = (P("x", None), P(None, "y")) if form in ("rows", "grads") else (P(None, "x"), P("x"))
    explicit = step.startswith("explicit")
    with jax.set_mesh(mesh):
        A, B = (
            jax.make_array_from_callback(x.shape, NamedSharding(mesh, s), lambda i, x=x: x[i])
            for x, s in zip((a, b), specs)
        )  # each process makes its own shards: with mock processes not every device is local
        if form == "rows":
            fn = jax.jit(jax_bridge.matmul)
        elif form == "grads":
            loss = lambda x, y: jnp.sum(jax_bridge.matmul(x, y).astype(jnp.float32) ** 2)  # noqa: E731
            fn = jax.jit(jax.grad(loss, (0, 1)))
        else:
            wanted = P() if form == "k_rep" else P("x", None)
            fn = (
                jax.jit(lambda x, y: jax_bridge.matmul(x, y, out_sharding=wanted))
                if explicit
                else jax.jit(jax_bridge.matmul, out_shardings=NamedSharding(mesh, wanted))
            )
        text = fn.lower(A, B).compile().as_text()
        out = jax.block_until_ready(fn(A, B))
    report = {
        "collectives": sorted(set(COLLECTIVES.findall(text))),
        "kernel_calls": text.count('custom_call_target="numba_gemm_kernel_call"'),
        "types": jax.tree.map(lambda x: str(jax.typeof(x)), out),
        "errors": [],
    }
    if form != "grads":
        exact = a.astype(np.float64) @ b.astype(np.float64)
        scale = np.abs(exact).max()
        for shard in out.addressable_shards:
            got = np.asarray(shard.data).astype(np.float64)
            report["errors"].append(float(np.abs(got - exact[shard.index]).max() / scale))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("devices", type=int, help="N, the devices the mesh has")
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=STEPS)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args()

    if args.devices > 1:  # before jax starts its backends; the CPU backend ignores both
        # XLA's autotuning waits on the mocked processes: the grads' compile never ends with it
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0"
    import jax

    if args.devices > 1:
        jax.config.update("mock_num_gpu_processes", args.devices)
    on_gpu = jax.default_backend() == "gpu"
    devices = jax.devices()
    if len(devices) < args.devices:
        raise SystemExit(
            f"{len(devices)} devices, {args.devices} asked for: on the CPU set "
            f"--xla_force_host_platform_device_count={args.devices} in XLA_FLAGS"
        )
    mocked = on_gpu and args.devices > 1
    print(
        f"{args.devices} devices, {len(jax.local_devices())} local"
        f"{' (mock processes: collectives do not communicate)' if mocked else ''}"
    )
    from jax.sharding import AxisType, Mesh

    grid = np.array(devices[: args.devices]).reshape(args.devices, 1)
    for step in args.steps:
        axis_type = AxisType.Explicit if step.startswith("explicit") else AxisType.Auto
        mesh = Mesh(grid, ("x", "y"), axis_types=(axis_type,) * 2)
        report = run_step(mesh, step, args.dtype)
        errors = ", ".join(f"{e:.1e}" for e in report["errors"]) or "-"
        unchecked = mocked and report["collectives"] and not step.endswith("grads")
        print(
            f"{step:20s} {args.dtype:9s} collectives {report['collectives']}, "
            f"{report['kernel_calls']} kernel calls, result {report['types']}, "
            f"errors {errors}{' (partial sums: not checked)' if unchecked else ''}"
        )


if __name__ == "__main__":
    main()
