"""Host time per call: ``numba_gemm.matmul`` (and ``triple``) on the arrays users have, against
their framework's own ``matmul`` on the same arrays, same run.

    python benchmarks/call_overhead.py [--size 256] [--out benchmarks/results] [--profile]

Each row times calls queued back to back without waiting for the GPU (``timing.host_seconds``:
runs of ``CALLS`` calls, the GPU waited for between runs; median of ``RUNS``): at 256^3 the
kernel takes a few microseconds, so the figure is the host's cost of a call, which is what
bounds small products and every product in a model step. Peers: ``torch.matmul(a, b, out=c)``
and ``cupy.matmul(a, b, out=c)``; JAX arrays (outside ``jax.jit``, no ``out``), Numba arrays
and NumPy arrays (copied to the GPU and back) have none. Every result is checked against
float64 first. ``--profile``: cProfile of a first call and of repeated calls on PyTorch
tensors, printed (the design page's profile, ``docs/design/call-path.md``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats

import numpy as np

CALLS, RUNS = 200, 9


def _check(result, a, b, bound: float) -> None:
    from numba_gemm.reference import reference, relative_error

    error = relative_error(result, reference(a, b))
    if not error <= bound:
        raise AssertionError(f"relative error {error:.2e} > {bound:.2e}")


def rows(n: int) -> list[dict]:
    import torch

    import numba_gemm
    from numba_gemm.timing import host_seconds

    found = []

    def row(operands, dtype, ours, peer=None, **extra):
        ours()
        seconds = host_seconds(ours, calls=CALLS, runs=RUNS)
        peer_s = host_seconds(peer, calls=CALLS, runs=RUNS) if peer else None
        found.append(
            {
                "operands": operands,
                "dtype": dtype,
                "size": n,
                **extra,
                "ours_us": seconds * 1e6,
                "peer_us": None if peer_s is None else peer_s * 1e6,
                "ratio": None if peer_s is None else seconds / peer_s,
            }
        )
        print(found[-1], flush=True)

    torch.backends.cuda.matmul.allow_tf32 = False
    for dtype, precision in (("float32", None), ("bfloat16", None), ("float32", "TF32_TF32_F32")):
        t = getattr(torch, dtype)
        a, b = (torch.randn(n, n, device="cuda").to(t) for _ in range(2))
        c = torch.empty(n, n, device="cuda", dtype=t)
        peer_c = torch.empty_like(c)
        numba_gemm.matmul(a, b, c, precision=precision)
        _check(c, a, b, 1e-2 if dtype == "bfloat16" or precision else 1e-5)

        def peer(a=a, b=b, peer_c=peer_c, tf32=precision is not None):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.matmul(a, b, out=peer_c)

        row(
            "torch", dtype,
            lambda a=a, b=b, c=c, p=precision: numba_gemm.matmul(a, b, c, precision=p),
            peer, precision=precision or "default", call="matmul",
        )  # fmt: skip
    a, b, c = (torch.randn(n, n, device="cuda") for _ in range(3))
    out = torch.empty(n, n, device="cuda")
    row("torch", "float32", lambda: numba_gemm.triple(a, b, c, out), lambda: a @ b @ c,
        precision="default", call="triple")  # fmt: skip
    try:
        import cupy
    except ImportError:
        print("cupy is not installed here: no CuPy rows", flush=True)
    else:
        ca, cb = (cupy.random.standard_normal((n, n), dtype=cupy.float32) for _ in range(2))
        cc, peer_cc = cupy.empty((n, n), cupy.float32), cupy.empty((n, n), cupy.float32)
        numba_gemm.matmul(ca, cb, cc)
        _check(cc, ca, cb, 1e-5)
        row("cupy", "float32", lambda: numba_gemm.matmul(ca, cb, cc),
            lambda: cupy.matmul(ca, cb, out=peer_cc), precision="default",
            call="matmul")  # fmt: skip
    import jax
    import jax.numpy as jnp

    ja = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    jb = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    _check(numba_gemm.matmul(ja, jb), ja, jb, 1e-5)
    row("jax", "float32", lambda: numba_gemm.matmul(ja, jb), precision="default",
        call="matmul (no out)")  # fmt: skip
    from numba import cuda

    na, nb = (cuda.to_device(np.random.default_rng(i).standard_normal((n, n)).astype(np.float32))
              for i in range(2))  # fmt: skip
    nc = cuda.device_array((n, n), np.float32)
    numba_gemm.matmul(na, nb, nc)
    _check(nc, na, nb, 1e-5)
    row("numba", "float32", lambda: numba_gemm.matmul(na, nb, nc), precision="default",
        call="matmul")  # fmt: skip
    ha, hb = (np.random.default_rng(i).standard_normal((n, n)).astype(np.float32) for i in (2, 3))
    hc = np.empty((n, n), np.float32)
    row("numpy", "float32", lambda: numba_gemm.matmul(ha, hb, hc), precision="default",
        call="matmul (copies both ways)")  # fmt: skip
    return found


def profile(n: int) -> str:
    """cProfile of a first call (a new signature: validation and planning) and of 1000
    repeated calls, on PyTorch bf16 tensors."""
    import torch

    import numba_gemm
    from numba_gemm import prepared

    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    numba_gemm.matmul(a, b, c)  # compiled
    prepared.forget_prepared_calls()
    report = io.StringIO()
    for title, calls in (("first call", 1), ("1000 repeated calls", 1000)):
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            numba_gemm.matmul(a, b, c)
        profiler.disable()
        torch.cuda.synchronize()
        report.write(f"== {title}\n")
        pstats.Stats(profiler, stream=report).sort_stats("tottime").print_stats(14)
    return report.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--out", help="write <out>/call_overhead/<device>.json")
    parser.add_argument("--profile", action="store_true", help="print cProfile reports")
    args = parser.parse_args()
    from numba_gemm.timing import device_name, stack_versions, write_results

    found = rows(args.size)
    if args.profile:
        print(profile(args.size))
    if args.out:
        record = {
            "stack": stack_versions("torch", "cupy-cuda13x", "cupy-cuda12x"),
            "method": f"timing.host_seconds: median of {RUNS} runs of {CALLS} calls queued "
            "without waiting for the GPU, waited for between runs",
            "rows": found,
        }
        print(f"wrote {write_results(args.out, device_name(), 'call_overhead', record)}")


if __name__ == "__main__":
    main()
