"""Many host threads at once: 8 threads, each making its own arrays and calling every algorithm
of ``matmul`` and ``triple`` many times with distinct inputs, every result checked against
float64 NumPy. On the simulator the library serialises the launches; on a GPU the threads run on
the legacy default stream and on their per-thread default streams (one handle, a stream per
thread), where the triple product's scratch must be each thread's own.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from numba import cuda

import numba_gemm
from numba_gemm.launch import SIMULATED
from numba_gemm.reference import relative_error, tolerance
from numba_gemm.triple_product import TRIPLE_ALGORITHMS

THREADS = 8
CALLS = 2 if SIMULATED else 12
MATMUL_ALGORITHMS = ("tiled", "mnk", "nmk", "kmn", "knm")
# Sizes vary per call so that calls of one thread differ in shape too; on a GPU large enough
# for several CTAs per product and for the fused kernel's tile tickets.
SIZES = (5, 9, 12) if SIMULATED else (96, 200, 333)


def _streams():
    if SIMULATED:
        return {"default": lambda: 0}
    return {"default": lambda: 0, "per-thread": cuda.per_thread_default_stream}


def _in_threads(work) -> list:
    """``work(thread)`` in THREADS threads at once; every thread's list of errors."""
    with ThreadPoolExecutor(THREADS) as pool:
        return [f.result() for f in [pool.submit(work, t) for t in range(THREADS)]]


def _operand(rng, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    return x, cuda.to_device(x)


def _errors(results) -> list:
    """(what, error, tolerance) of every result outside its tolerance."""
    return [r for thread in results for r in thread if not r[1] <= r[2]]


@pytest.mark.parametrize("stream_kind", list(_streams()))
def test_matmul_from_many_threads(stream_kind):
    make_stream = _streams()[stream_kind]

    def work(thread):
        rng = np.random.default_rng(1000 + thread)
        stream = make_stream()
        checked = []
        for call in range(CALLS):
            M, K, N = (SIZES[(call + i + thread) % 3] + thread for i in range(3))
            (a, a_d), (b, b_d) = _operand(rng, M, K), _operand(rng, K, N)
            for algorithm in MATMUL_ALGORITHMS:
                for _ in range(2):  # the second call of the same arrays: a prepared launch
                    out = numba_gemm.matmul(a_d, b_d, algorithm=algorithm, stream=stream)
                    result = out.copy_to_host(stream=stream)
                    if stream:
                        stream.synchronize()
                    error = relative_error(result, a.astype(np.float64) @ b)
                    checked.append((f"{algorithm} {M}x{K}x{N}", error, tolerance(np.float32, K)))
        return checked

    results = _in_threads(work)
    assert sum(map(len, results)) == THREADS * CALLS * len(MATMUL_ALGORITHMS) * 2
    assert _errors(results) == []


@pytest.mark.parametrize("stream_kind", list(_streams()))
def test_triple_from_many_threads(stream_kind):
    make_stream = _streams()[stream_kind]
    algorithms = [a for a in TRIPLE_ALGORITHMS if a != "auto"]

    def work(thread):
        rng = np.random.default_rng(2000 + thread)
        stream = make_stream()
        checked = []
        for call in range(CALLS):
            M, K1, K2, N = (SIZES[(call + i + thread) % 3] + thread for i in range(4))
            operands = [_operand(rng, r, c) for r, c in ((M, K1), (K1, K2), (K2, N))]
            (a, _), (b, _), (c, _) = operands
            expected = a.astype(np.float64) @ b @ c
            for algorithm in algorithms:
                for order in ("left", "right"):
                    out = numba_gemm.triple(
                        *(d for _, d in operands), algorithm=algorithm, order=order, stream=stream
                    )
                    result = out.copy_to_host(stream=stream)
                    if stream:
                        stream.synchronize()
                    checked.append(
                        (
                            f"{algorithm} {order} {M}x{K1}x{K2}x{N}",
                            relative_error(result, expected),
                            tolerance(np.float32, K1 + K2),
                        )
                    )
        return checked

    results = _in_threads(work)
    assert sum(map(len, results)) == THREADS * CALLS * len(algorithms) * 2
    assert _errors(results) == []


def test_jax_bridge_from_many_threads():
    jax = pytest.importorskip("jax")
    import jax_bridge

    product = jax.jit(jax_bridge.matmul)
    chain = jax.jit(jax_bridge.triple)

    def work(thread):
        rng = np.random.default_rng(3000 + thread)
        checked = []
        for call in range(CALLS):
            M, K, N = (SIZES[(call + i + thread) % 3] + thread for i in range(3))
            a, b = (rng.standard_normal(s).astype(np.float32) for s in ((M, K), (K, N)))
            c = rng.standard_normal((N, M)).astype(np.float32)
            error = relative_error(np.asarray(product(a, b)), a.astype(np.float64) @ b)
            checked.append(("matmul", error, tolerance(np.float32, K)))
            error = relative_error(np.asarray(chain(a, b, c)), a.astype(np.float64) @ b @ c)
            checked.append(("triple", error, tolerance(np.float32, K + N)))
        return checked

    assert _errors(_in_threads(work)) == []


@pytest.mark.gpu
def test_tune_from_many_threads(tmp_path):
    """Tuners in several threads at once: each checks and times its candidates, and every
    winner lands in the one cache file, whole."""
    from numba_gemm.tuned_configs import _load

    configs = (numba_gemm.TileConfig(64, 64, 16, 4, 4, 3, 8),)
    path = tmp_path / "tuning.json"
    shapes = [(192 << (t % 4), 160 << (t // 4), 96) for t in range(THREADS)]  # 8 shape classes

    def work(thread):
        results = numba_gemm.tune(
            *shapes[thread], configs=configs, save=path, progress=lambda line: None, reps=3
        )
        return [(f"tune {shapes[thread]}", results[0]["error"], tolerance(np.float32, 96))]

    assert _errors(_in_threads(work)) == []
    assert sorted(tuple(e["shape"]) for e in _load(path).values()) == sorted(shapes)


FIRST_USERS = """
import sys, threading
import numpy as np
from numba import cuda
import numba_gemm

THREADS = {threads}
start, errors = threading.Barrier(THREADS), []

def work(thread):
    rng = np.random.default_rng(thread)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((40, 30), (30, 50), (50, 20)))
    start.wait()  # every thread's first CUDA call at once
    try:
        d = numba_gemm.triple(*(cuda.to_device(x) for x in (a, b, c))).copy_to_host()
        error = np.linalg.norm(d - a.astype(np.float64) @ b @ c) / np.linalg.norm(d)
        if not error < 1e-5:
            errors.append(f"thread {{thread}}: relative error {{error:.2e}}")
    except Exception as failure:
        errors.append(f"thread {{thread}}: {{type(failure).__name__}}: {{failure}}")

threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("\\n".join(errors) or "ok")
sys.exit(1 if errors else 0)
"""


@pytest.mark.gpu
def test_threads_as_a_process_first_cuda_users():
    """A server whose worker threads handle the first requests: in a fresh process that has
    only imported the library, THREADS threads make their first CUDA calls at once
    (``cuda.to_device``, then ``triple``). Numba's own lazy initialisation races there; the
    library's import initialises the driver first."""
    import subprocess
    import sys

    script = FIRST_USERS.format(threads=THREADS)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
