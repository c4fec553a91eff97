"""The tensor-core kernels against cuBLAS (through PyTorch) at the same precision, same run.

    python benchmarks/tensor_cores.py [--sizes 1024 4096 8192] [--cases bf16 tf32 ...]
        [--config 128,256,4,8] [--out benchmarks/results]

For each case (operand dtype and precision preset) and square size: numba-gemm's launch (the
plan ``matmul`` makes, launched as its prepared calls launch it: ``median_s``), the user's call
(``numba_gemm.matmul`` on the PyTorch tensors: ``call_median_s``) and ``torch.matmul`` on the
same operands (``cublas_median_s``), interleaved rounds of back-to-back calls on the CUDA event
clock (``numba_gemm.timing``), and each result's relative error against a float64 product. cuBLAS's
peer: bf16 and f16 products as they are, TF32 with ``torch.set_float32_matmul_precision("high")``,
float32 (the peer of the float32-accurate presets) with ``"highest"``. For bf16 and f16 also
the Triton tutorial's kernel (``triton_peer.py``), autotuned before the timed rounds.
"""

from __future__ import annotations

import argparse

import numpy as np

CASES = {  # name -> (operand dtype, preset, the peer's dtype, the peer's float32 precision)
    "bf16": ("bfloat16", "BF16_BF16_F32", "bfloat16", "highest"),
    "f16": ("float16", "F16_F16_F32", "float16", "highest"),
    "tf32": ("float32", "TF32_TF32_F32", "float32", "high"),
    "tf32x3": ("float32", "TF32_TF32_F32_X3", "float32", "highest"),
    "bf16x3": ("float32", "BF16_BF16_F32_X3", "float32", "highest"),
    "bf16x6": ("float32", "BF16_BF16_F32_X6", "float32", "highest"),
    "bf16x9": ("float32", "BF16_BF16_F32_X9", "float32", "highest"),
    "f32": ("float32", "F32_F32_F32", "float32", "highest"),
}


def measure(case: str, n: int, config=None, tensor_maps: str = "host") -> dict:
    import torch

    import numba_gemm
    from numba_gemm.api import plan
    from numba_gemm.descriptor import describe
    from numba_gemm.launch import PreparedLaunch
    from numba_gemm.precision import BFLOAT16, resolve
    from numba_gemm.timing import interleaved_medians

    dtype_name, preset_name, peer_dtype, peer_precision = CASES[case]
    torch_dtype = getattr(torch, peer_dtype)
    generator = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn((n, n), device="cuda", generator=generator).to(torch_dtype)
    b = torch.randn((n, n), device="cuda", generator=generator).to(torch_dtype)
    c = torch.full((n, n), float("nan"), device="cuda", dtype=torch_dtype)
    peer_out = torch.empty_like(c)
    preset = resolve(preset_name, BFLOAT16 if dtype_name == "bfloat16" else np.dtype(dtype_name))
    launch = plan(describe(a, "a"), describe(b, "b"), describe(c, "out"), "auto", config, preset,
                  tensor_maps)  # fmt: skip
    ours = PreparedLaunch(launch, 0)

    def peer():
        torch.set_float32_matmul_precision(peer_precision)
        torch.matmul(a, b, out=peer_out)

    def call():  # what a user calls: the public function on PyTorch tensors
        numba_gemm.matmul(a, b, c, precision=preset_name, config=config)

    calls = {"numba_gemm": ours, "call": call, "cublas": peer}
    if dtype_name in ("bfloat16", "float16"):  # the Triton tutorial's kernel, 16-bit only
        from triton_peer import triton_matmul

        calls["triton"] = triton_matmul(a, b, torch.empty_like(c))
        calls["triton"]()  # autotune outside the timed rounds
    timed = interleaved_medians(calls, rounds=9, round_s=0.05)
    torch.cuda.synchronize()
    reference = a.double() @ b.double()

    def error(x):
        return float(torch.linalg.norm(x.double() - reference) / torch.linalg.norm(reference))

    flops = 2 * n**3
    ours_s, peer_s = timed.medians["numba_gemm"], timed.medians["cublas"]
    return {
        "case": case,
        "preset": preset.name,
        "dtype": dtype_name,
        "size": n,
        "kernel": launch.kernel.py_func.__name__,
        "config": config.label() if config else "default",
        "tma": launch.tma,
        "median_s": ours_s,
        "call_median_s": timed.medians["call"],
        "cublas_median_s": peer_s,
        "numba_gemm_tflops": flops / ours_s / 1e12,
        "cublas_tflops": flops / peer_s / 1e12,
        "ratio": peer_s / ours_s,
        "call_ratio": peer_s / timed.medians["call"],
        **(
            {
                "triton_tflops": flops / timed.medians["triton"] / 1e12,
                "triton_ratio": timed.medians["triton"] / ours_s,
            }
            if "triton" in calls
            else {}
        ),
        "numba_gemm_error": error(c),
        "cublas_error": error(peer_out),
    }


def _wall_median(fn, sync, calls: int = 50, runs: int = 7) -> float:
    """Median seconds per call of ``calls`` back-to-back calls, synchronised once per run (wall
    clock: the JAX and Numba launches run on different streams)."""
    import statistics
    import time

    fn()
    sync()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def measure_bridge(n: int) -> dict:
    """bf16 n^3 through ``jax.jit(jax_bridge.matmul)`` (XLA launches the kernel) against the
    same plan launched directly, and ``jnp.matmul`` (cuBLAS through XLA)."""
    import jax
    import jax.numpy as jnp
    from numba import cuda

    import jax_bridge
    from numba_gemm.api import plan
    from numba_gemm.descriptor import describe
    from numba_gemm.launch import PreparedLaunch

    a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.bfloat16)
    bridge, peer = jax.jit(jax_bridge.matmul), jax.jit(jnp.matmul)
    out = cuda.device_array((n, n), np.uint16).view(np.dtype(jnp.bfloat16))
    direct = PreparedLaunch(plan(describe(a, "a"), describe(b, "b"), describe(out, "out")), 0)
    times = {
        "bridge": _wall_median(lambda: bridge(a, b), lambda: jax.block_until_ready(bridge(a, b))),
        "direct": _wall_median(direct, cuda.synchronize),
        "jnp": _wall_median(lambda: peer(a, b), lambda: jax.block_until_ready(peer(a, b))),
    }
    flops = 2 * n**3
    return {
        "case": "bridge-bf16",
        "size": n,
        **{f"{k}_s": v for k, v in times.items()},
        **{f"{k}_tflops": flops / v / 1e12 for k, v in times.items()},
        "bridge_over_direct": times["direct"] / times["bridge"],
    }


def measure_triple(n: int, preset_name: str) -> dict:
    """``numba_gemm.triple`` of float32 n x n matrices at ``preset_name`` against PyTorch
    eager float32 (two SGEMMs, TF32 off), and both errors against float64."""
    import torch
    from numba import cuda

    import numba_gemm

    torch.set_float32_matmul_precision("highest")
    g = torch.Generator(device="cuda").manual_seed(n)
    a, b, c = (torch.randn((n, n), device="cuda", generator=g) for _ in range(3))
    ta, tb, tc = (cuda.as_cuda_array(x) for x in (a, b, c))
    out = cuda.device_array((n, n), np.float32)

    def ours():
        numba_gemm.triple(ta, tb, tc, out, precision=preset_name)

    def peer():
        return a @ b @ c

    times = {
        "numba_gemm": _wall_median(ours, cuda.synchronize, calls=200),
        "torch": _wall_median(peer, torch.cuda.synchronize, calls=200),
    }
    reference = a.double() @ b.double() @ c.double()
    result = torch.as_tensor(out, device="cuda")

    def error(x):
        return float(torch.linalg.norm(x.double() - reference) / torch.linalg.norm(reference))

    return {
        "case": f"triple-{preset_name}",
        "size": n,
        "numba_gemm_us": times["numba_gemm"] * 1e6,
        "torch_us": times["torch"] * 1e6,
        "speedup": times["torch"] / times["numba_gemm"],
        "numba_gemm_error": error(result),
        "torch_error": error(peer()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument(
        "--config", help="comma-separated ints: an MmaConfig's 7 or a WgmmaConfig's 4"
    )
    parser.add_argument(
        "--tensor-maps",
        choices=("host", "none"),
        default="host",
        help="the wgmma kernel's TMA copies through host-encoded tensor maps (a direct "
        "call's), or none: cp.async copies",
    )
    parser.add_argument("--out", help="write <out>/tensor_cores/<device>.json")
    parser.add_argument("--bridge", type=int, nargs="*", default=[], help="bridge sizes (bf16)")
    parser.add_argument("--triple", nargs="*", default=[], help="presets for the triple at 512")
    args = parser.parse_args()
    from numba_gemm.kernels.hopper import WgmmaConfig
    from numba_gemm.kernels.mma import MmaConfig
    from numba_gemm.timing import device_name, stack_versions, write_results

    config = None
    if args.config:
        values = tuple(map(int, args.config.split(",")))
        config = (MmaConfig if len(values) == 7 else WgmmaConfig)(*values)
    rows = []

    def write():  # after every row: a run cut short keeps what it measured
        if args.out:
            record = {"stack": stack_versions("torch"), "rows": rows}
            return write_results(args.out, device_name(), "tensor_cores", record)

    for case in args.cases:
        for n in args.sizes:
            row = measure(case, n, config if case != "f32" else None, args.tensor_maps)
            rows.append(row)
            write()
            print(
                f"{case:7s} {n:5d} {row['kernel'][:5]}{'+tma' if row['tma'] else ''}: "
                f"{row['numba_gemm_tflops']:7.1f} "
                f"TFLOP/s, cuBLAS {row['cublas_tflops']:7.1f} ({row['ratio']:.3f}x; the call "
                f"{row['call_ratio']:.3f}x); "
                f"error {row['numba_gemm_error']:.2e} (cuBLAS {row['cublas_error']:.2e})"
                + (f"; Triton {row['triton_tflops']:.1f}" if "triton_tflops" in row else ""),
                flush=True,
            )
    for n in args.bridge:
        rows.append(measure_bridge(n))
        write()
        print(rows[-1], flush=True)
    for preset_name in args.triple:
        rows.append(measure_triple(512, preset_name))
        print(rows[-1], flush=True)
    if args.out:
        print(f"wrote {write()}")


if __name__ == "__main__":
    main()
