"""`python -m numba_gemm model`, `demo`, `bench` and `tune`, run as a user would."""

import os
import subprocess
import sys


def run(*args, **env):
    return subprocess.run([sys.executable, "-m", "numba_gemm", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=600)


def test_model_prints_the_twelve_cases_and_checks_them():
    result = run("model", "--M", "3", "--N", "4", "--K", "5", "--simulate")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.split()[:1] in (["mnk"], ["nmk"], ["kmn"], ["knm"])]
    assert len(rows) == 12
    assert "agrees with every row" in result.stdout


def test_demo_on_the_simulator():
    result = run("demo", "--size", "9", NUMBA_ENABLE_CUDASIM="1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "simulator" in result.stdout and "FAILED" not in result.stdout
    lines = result.stdout.splitlines()
    assert sum(line.startswith(("auto", "tiled", "mnk", "nmk", "kmn", "knm")) for line in lines) == 28
    triple_rows = [line for line in lines if line.startswith(("auto:fused", "naive", "fused", "unfused"))]
    assert len(triple_rows) == 16  # 4 algorithms x 2 orders x 2 layouts, each checked


def test_bench_prints_the_committed_results():
    result = run("bench", "--algorithm", "tiled", "--algorithm", "jnp.matmul")
    assert result.returncode == 0, result.stderr
    assert "x cuBLAS" in result.stdout and "tiled" in result.stdout and "mnk" not in result.stdout


def test_bench_plot_needs_matplotlib_or_draws(tmp_path):
    import importlib.util

    result = run("bench", "--plot", str(tmp_path / "plot.png"))
    if importlib.util.find_spec("matplotlib") is None:
        assert result.returncode != 0 and "pip install 'numba-gemm[plot]'" in result.stderr
    else:
        assert result.returncode == 0 and (tmp_path / "plot.png").stat().st_size > 0


def test_tune_without_a_gpu_says_so():
    result = run("tune", "--size", "64", NUMBA_ENABLE_CUDASIM="1")  # no GPU, even on a GPU machine
    assert result.returncode == 2 and "GPU" in result.stderr
