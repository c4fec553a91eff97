"""The triple product D = A @ B @ C (seed 003) against PyTorch and JAX, N = 256 to 4096.

    python benchmarks/triple_product.py [--sizes 256 512 ...] [--sweep] [--results DIR]
    python benchmarks/triple_product.py --plot-from RESULTS.json [--plot PNG]

Square float32 operands, true fp32 everywhere (no TF32): numba-gemm's
``triple`` with ``algorithm="naive"`` (N <= 1024), ``"fused"``, ``"unfused"`` and
``"auto"``, and ``jax_bridge.triple`` in ``jax.jit``; PyTorch eager ``a @ b @ c`` (two
cuBLAS sgemm launches, TF32 off), the same two launches replayed from a CUDA graph (their GPU
time without eager PyTorch's host work) and ``jax.jit(lambda a, b, c: a @ b @ c)`` at
``precision="highest"``, compiled twice: as XLA compiles it by default (``jax``: at N = 512,
Triton GEMMs whose tiles XLA autotunes while it compiles) and with
``xla_gpu_enable_triton_gemm=False`` (``jax, cuBLAS``: cuBLASLt), with the speed-ups also
against the faster of the two (``speedup_vs_jax_best``). Every method is timed in the same run
on the same GPU: back-to-back calls between two CUDA events after a context-wide synchronize,
warm-up first, median of 15 rounds of about 20 ms, each method's calls per round calibrated on
the fastest of three batches (``numba_gemm.timing.interleaved_medians``), the methods' rounds
interleaved (round r of each before round r + 1 of any).
numba-gemm's rows write into a given ``out``; the ``fused, new out`` row lets ``triple``
allocate D on every call, as torch and JAX do (through their caching allocators). The
``unfused, again`` row times the very same call as ``unfused`` under another name: its ratio
to ``unfused`` is the run's noise floor, what a tie looks like, against which ``fused``'s ratio
reads. Each result is checked against a float64
product (torch on the GPU) before it is timed. ``host_s`` is the
host's time per call alone: the median over 5 runs of 50 calls queued without waiting for
the GPU. Where it comes near the time per call, the method is bound by its host work (as
PyTorch eager is at N = 512), and its time follows the host's speed from run to run.

``--sweep`` also times the fused kernel under each candidate tile config.
Writes ``<DIR>/triple_product/<device>.json`` and its plot beside it (``<device>.png``, time
per call against N; needs matplotlib), and prints a table last; ``--plot-from`` draws the plot
again from such a file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

# 768: the small split-k tiles two CTAs per SM (triple_product.fused_ctas_per_sm). 1800 and 2047 are
# ragged: the fused kernel and the tiled GEMM run edge tiles there.
SIZES = (256, 512, 768, 1024, 1536, 1800, 2047, 2048, 3072, 4096)
ROUND_S = 0.02  # each timed round runs at least this long
ROUNDS = 15
WARMUP = 3
HOST_CALLS, HOST_RUNS = 50, 5  # few enough calls that the launch queue never fills

SWEEP = (  # (block_m, block_n, block_k, thread_m, thread_n, stages, group_m, split_k)
    (32, 64, 16, 4, 4, 3, 1, 1),
    (32, 64, 16, 4, 4, 3, 1, 2),
    (32, 64, 16, 4, 4, 3, 1, 4),
    (32, 64, 16, 4, 4, 4, 1, 4),
    (32, 32, 16, 4, 4, 3, 1, 4),
    (64, 32, 16, 4, 4, 3, 1, 4),
    (64, 64, 16, 4, 4, 3, 8, 2),
    (64, 128, 16, 4, 8, 3, 8, 1),
    (128, 256, 16, 8, 16, 3, 8, 1),
)


def _torch_graph(fn):
    """``fn``'s CUDA work captured in a CUDA graph (torch's): a function that replays it."""
    import torch

    side = torch.cuda.Stream()  # capture needs warm-up off the default stream
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn()

    def replay():
        graph.replay()
        return result

    return replay


def measure(n: int, sweep: bool, rng) -> list[dict]:
    import jax
    import jax.numpy as jnp
    import torch
    from numba import cuda

    import jax_bridge
    import numba_gemm
    from numba_gemm.kernels.tiled import TileConfig
    from numba_gemm.reference import tolerance
    from numba_gemm.timing import host_seconds, interleaved_medians
    from numba_gemm.triple_product import choose_triple_algorithm, fused_config, fused_workers

    host = [rng.standard_normal((n, n)).astype(np.float32) for _ in range(3)]
    a, b, c = (cuda.to_device(x) for x in host)
    out = cuda.device_array((n, n), np.float32)
    ta, tb, tc = (torch.from_numpy(x).cuda() for x in host)
    ja, jb, jc = (jax.device_put(x) for x in host)
    reference = ((ta.double() @ tb.double()) @ tc.double()).cpu().numpy()
    bound = 2 * tolerance(np.float32, n)

    highest = jax.lax.Precision.HIGHEST

    def chain(a, b, c):
        return jnp.matmul(jnp.matmul(a, b, precision=highest), c, precision=highest)

    jax_chain = jax.jit(chain)
    # compiler_options are part of jit's cache key: a second executable, not the first again
    jax_cublas_chain = jax.jit(chain, compiler_options={"xla_gpu_enable_triton_gemm": False})
    bridge_chain = jax.jit(jax_bridge.triple)
    config = fused_config(n, n, n, n, np.float32)
    workers = fused_workers(config, n, n, n, n)
    fused_label = config.label() + (f" stream-K {workers[0]}+{workers[1]}" if workers else "")
    methods = {
        "torch": (lambda: ta @ tb @ tc, ""),
        "torch, CUDA graph": (_torch_graph(lambda: ta @ tb @ tc), ""),
        "jax": (lambda: jax_chain(ja, jb, jc), ""),
        "jax, cuBLAS": (lambda: jax_cublas_chain(ja, jb, jc), "xla_gpu_enable_triton_gemm=False"),
        "unfused": (lambda: numba_gemm.triple(a, b, c, out, algorithm="unfused"), ""),
        "unfused, again": (
            lambda: numba_gemm.triple(a, b, c, out, algorithm="unfused"),
            "the unfused call again: the noise floor",
        ),
        "fused": (lambda: numba_gemm.triple(a, b, c, out, algorithm="fused"), fused_label),
        "fused, new out": (lambda: numba_gemm.triple(a, b, c, algorithm="fused"), fused_label),
        "auto": (lambda: numba_gemm.triple(a, b, c, out), choose_triple_algorithm(n, n, n, n)),
        "jax_bridge.triple in jax.jit": (
            lambda: bridge_chain(ja, jb, jc),
            choose_triple_algorithm(n, n, n, n),
        ),
    }
    if n <= 1024:
        methods["naive"] = (lambda: numba_gemm.triple(a, b, c, out, algorithm="naive"), "")
    if sweep:
        for fields in SWEEP:
            config = TileConfig(*fields)
            methods[f"fused {config.label()}"] = (
                lambda config=config: numba_gemm.triple(
                    a, b, c, out, algorithm="fused", config=config
                ),
                config.label(),
            )
    errors = {}
    for name, (fn, _) in methods.items():
        out.copy_to_device(np.full((n, n), np.nan, np.float32))  # poison: unwritten shows
        result = fn()
        result = (
            result.cpu().numpy()
            if isinstance(result, torch.Tensor)
            else np.asarray(result.copy_to_host() if hasattr(result, "copy_to_host") else result)
        )
        errors[name] = float(np.linalg.norm(result - reference) / np.linalg.norm(reference))
        if not errors[name] <= bound:
            raise AssertionError(
                f"{name} at N = {n}: relative error {errors[name]:.3e} > {bound:.1e}"
            )
        if name == "torch":
            assert not torch.backends.cuda.matmul.allow_tf32
    timed = interleaved_medians(
        {name: fn for name, (fn, _) in methods.items()},
        rounds=ROUNDS,
        round_s=ROUND_S,
        warmup=WARMUP,
    )
    seconds = timed.medians
    rows = []
    for name, (fn, config) in methods.items():
        host = host_seconds(fn, calls=HOST_CALLS, runs=HOST_RUNS)
        rows.append(
            {
                "size": n,
                "method": name,
                "config": config,
                "median_s": seconds[name],
                "calls_per_round": timed.calls[name],
                "host_s": host,
                "relative_error": errors[name],
            }
        )
        print(
            f"N = {n:5d}  {name:40s} {seconds[name] * 1e6:10.1f} us  host {host * 1e6:7.1f} us"
            f"  error {errors[name]:.1e}",
            flush=True,
        )
    peers = {r["method"]: r["median_s"] for r in rows}
    peers["jax, best"] = min(peers["jax"], peers["jax, cuBLAS"])
    for r in rows:
        for peer, key in (
            ("torch", "torch"),
            ("torch, CUDA graph", "torch_graph"),
            ("jax", "jax"),
            ("jax, best", "jax_best"),
            ("unfused", "unfused"),
        ):
            r[f"speedup_vs_{key}"] = peers[peer] / r["median_s"]
    return rows


PLOTTED = (
    "naive",
    "fused",
    "unfused",
    "torch",
    "torch, CUDA graph",
    "jax",
    "jax, cuBLAS",
    "jax_bridge.triple in jax.jit",
)
LABELS = {
    "torch": "PyTorch eager a @ b @ c",
    "jax": "jax.jit(a @ b @ c), highest",
    "jax, cuBLAS": "jax.jit(a @ b @ c), highest, cuBLAS",
    "torch, CUDA graph": "PyTorch's kernels from a CUDA graph",
    "naive": "naive (seed 003)",
    "fused": "fused",
    "unfused": "unfused (2 tiled GEMMs)",
    "jax_bridge.triple in jax.jit": "jax_bridge.triple in jax.jit (auto)",
}


def plot(results: Path, path: Path) -> Path:
    """Time per call against N, log-log, one line per method of :data:`PLOTTED`."""
    from numba_gemm.report import draw

    data = json.loads(results.read_text())
    lines = []
    for method in PLOTTED:
        points = sorted(
            (r["size"], r["median_s"] * 1e6) for r in data["rows"] if r["method"] == method
        )
        if points:
            lines.append((LABELS[method], points, method in ("fused", "torch")))
    return draw(
        lines,
        path,
        xlabel="N (A, B, C all N x N, float32, no TF32)",
        ylabel="time per call (us)",
        title=f"D = A @ B @ C on {data['device']}",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--sweep", action="store_true", help="also time candidate fused configs")
    parser.add_argument("--results", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot-from", type=Path, help="draw the plot from this results JSON")
    parser.add_argument(
        "--plot", type=Path, help="where --plot-from writes (default: beside it, .png)"
    )
    args = parser.parse_args()
    if args.plot_from:
        print(f"plot: {plot(args.plot_from, args.plot or args.plot_from.with_suffix('.png'))}")
        return 0

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # true fp32, like precision="highest"
    torch.backends.cudnn.allow_tf32 = False
    from numba_gemm.timing import device_name, stack_versions, write_results

    rng = np.random.default_rng(args.seed)
    rows = [row for n in args.sizes for row in measure(n, args.sweep, rng)]
    device = device_name()
    path = write_results(
        args.results,
        device,
        "triple_product",
        {
            "versions": stack_versions("torch"),
            "timing": f"median over {ROUNDS} rounds (about {ROUND_S * 1e3:.0f} ms each, calls per "
            "round calibrated on the fastest of three batches) of back-to-back calls, per "
            "call, the methods' rounds interleaved; CUDA events after a context-wide "
            "synchronize (numba_gemm.timing); fp32, no TF32. host_s: the host's time per "
            f"call alone, median of {HOST_RUNS} runs of {HOST_CALLS} calls queued without "
            "waiting for the GPU",
            "rows": rows,
        },
    )

    print(f"\nD = A @ B @ C, float32 (no TF32), on {device}: time per call and speed-up")
    print(
        f"{'N':>5} {'method':34} {'us':>9} {'host us':>8} {'vs torch':>9} {'vs graph':>9} "
        f"{'vs jax':>8} {'vs best jax':>12} {'vs unfused':>11}"
    )
    for r in rows:
        print(
            f"{r['size']:5d} {r['method']:34} {r['median_s'] * 1e6:9.1f} {r['host_s'] * 1e6:8.1f} "
            f"{r['speedup_vs_torch']:8.2f}x {r['speedup_vs_torch_graph']:8.2f}x "
            f"{r['speedup_vs_jax']:7.2f}x {r['speedup_vs_jax_best']:11.2f}x "
            f"{r['speedup_vs_unfused']:10.3f}x"
        )
    print(f"results: {path}")
    try:
        print(f"plot: {plot(path, path.with_suffix('.png'))}")
    except RuntimeError as missing:  # no matplotlib here: draw it later with --plot-from
        print(f"no plot: {missing}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
