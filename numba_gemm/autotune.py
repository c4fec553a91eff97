"""``tune``: time the tiled kernel's candidate configs for one shape on this GPU, keep the fastest.

    >>> import numba_gemm
    >>> numba_gemm.tune(4096, 4096, 4096)          # on a GPU; prints one line per config
    >>> python -m numba_gemm tune --size 4096       # the same from a shell

The candidates, the cache the winner goes to and how ``matmul`` finds it again live in
:mod:`numba_gemm.tuned_configs`; this module sits above ``api``, whose plans it times.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .api import check_choice, plan
from .descriptor import describe, is_int
from .kernels.tiled import TileConfig, kernel_resources
from .launch import SIMULATED, PreparedLaunch, shared_memory_limit
from .reference import LAYOUTS, make_operands, poisoned, reference, relative_error, tolerance
from .timing import median_seconds
from .tuned_configs import SEARCH_SPACE, cache_path, device_key, layout_key, store

__all__ = ["tune"]


def tune(
    M: int,
    N: int,
    K: int | None = None,
    dtype=np.float32,
    layout: str = "row",
    *,
    configs=None,
    min_time: float = 0.02,
    reps: int = 7,
    save: bool | str | Path = True,
    progress=print,
) -> list[dict]:
    """Time each config on the current GPU for C (M x N) = A (M x K) @ B, keep the fastest.

    ``layout``: one of ``numba_gemm.reference.LAYOUTS`` (operands are fresh random
    device arrays in that layout). ``configs``: the candidates (default
    :data:`SEARCH_SPACE` for ``dtype``), those that do not fit this device are
    skipped. Arguments are checked before anything runs. Each is compiled, checked against
    float64 NumPy on sampled rows, and timed (median of ``reps`` rounds of back-to-back
    launches, each round at least ``min_time`` seconds) of one launch prepared once
    (``launch.PreparedLaunch``), so the time is the kernel's, not the host's. ``save``: store
    the winner in the cache (``True``: :func:`cache_path`; or a path; safe from concurrent
    tuners: ``tuned_configs.store``). Returns one dict per timed config, fastest first.
    """
    K = M if K is None else K
    for name, value in (("M", M), ("N", N), ("K", K), ("reps", reps)):
        if not is_int(value):
            raise TypeError(f"{name} must be an int; got {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be at least 1; got {value}")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        dtype = None
    if dtype not in SEARCH_SPACE:
        raise TypeError(
            f"dtype must be one of {', '.join(d.name for d in SEARCH_SPACE)}; got {dtype}"
        )
    check_choice("layout", layout, tuple(LAYOUTS))
    if not isinstance(min_time, (int, float)) or not min_time > 0:
        raise ValueError(f"min_time must be a positive number of seconds; got {min_time!r}")
    candidates = SEARCH_SPACE[dtype] if configs is None else tuple(configs)
    for config in candidates:
        if not isinstance(config, TileConfig):
            raise TypeError(f"configs must hold numba_gemm.TileConfig values; got {config!r}")
    if SIMULATED:
        raise RuntimeError("tune() times kernels on a GPU; the CUDA simulator has no timings")

    device, arch = device_key()
    limit = shared_memory_limit()
    rng = np.random.default_rng(0)
    a, b = make_operands(M, N, K, dtype, layout, rng, to_device=True)
    out = poisoned((M, N), dtype, to_device=True, layout=layout)
    a_desc, b_desc, out_desc = describe(a, "a"), describe(b, "b"), describe(out, "out")
    rows = np.unique(rng.integers(0, M, size=min(M, 64)))
    expected = reference(a, b, rows)  # float64, once for all candidates
    flops = 2 * M * N * K
    results = []
    progress(f"tuning {M}x{N}x{K} {dtype.name} {layout} on {device}: {len(candidates)} configs")
    for i, config in enumerate(candidates, 1):
        try:
            config.check(dtype)
        except ValueError as error:
            progress(f"  [{i}/{len(candidates)}] {config.label():28} skipped: {error}")
            continue
        if config.shared_bytes(dtype) > limit:
            progress(
                f"  [{i}/{len(candidates)}] {config.label():28} skipped: needs "
                f"{config.shared_bytes(dtype)} B of shared memory, the device allows {limit}"
            )
            continue

        # Not matmul: its checks and planning on every call would time the host, not the
        # kernel, for every fast config at 512^3 and 1024^3.
        run = PreparedLaunch(plan(a_desc, b_desc, out_desc, "tiled", config))  # compiles
        run()
        resources = kernel_resources(config, a_desc, b_desc, out_desc)
        error = relative_error(out.copy_to_host()[rows], expected)
        if not error <= tolerance(dtype, K):
            raise AssertionError(
                f"{config.label()} computed a wrong product "
                f"(relative error {error:.2e}); not timing it"
            )
        once = median_seconds(run, warmup=1, reps=3)
        calls = max(1, int(min_time / max(once, 1e-7)))  # a clock tick of 0 is not 0 seconds
        seconds = median_seconds(run, warmup=1, reps=reps, calls_per_rep=calls)
        results.append(
            {
                "config": config,
                "seconds": seconds,
                "tflops": flops / seconds / 1e12,
                "error": error,
                **resources,
            }
        )
        progress(
            f"  [{i}/{len(candidates)}] {config.label():28} {seconds * 1e3:9.3f} ms "
            f"{flops / seconds / 1e12:7.2f} TFLOP/s  {resources['registers']} registers, "
            f"{resources['local_bytes']} B local"
        )
    results.sort(key=lambda r: r["seconds"])
    if not results:
        raise ValueError("no candidate config fits this device")
    best = results[0]
    progress(f"best: {best['config'].label()} at {best['tflops']:.2f} TFLOP/s")
    if save:
        path = cache_path() if save is True else Path(save)
        store(path, device, arch, dtype, layout_key(a_desc, b_desc), (M, N, K), best)
    return results
