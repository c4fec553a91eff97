"""`python -m numba_gemm model`, `demo`, `bench` and `tune`, run as a user would."""

import os
import subprocess
import sys


def run(*args, **env):
    return subprocess.run(
        [sys.executable, "-m", "numba_gemm", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=600,
    )


def test_model_prints_the_twelve_cases_and_checks_them():
    result = run("model", "--M", "3", "--N", "4", "--K", "5", "--simulate")
    assert result.returncode == 0, result.stderr
    rows = [
        line
        for line in result.stdout.splitlines()
        if line.split()[:1] in (["mnk"], ["nmk"], ["kmn"], ["knm"])
    ]
    assert len(rows) == 12
    assert "agrees with every row" in result.stdout


def test_demo_on_the_simulator():
    result = run("demo", "--size", "9", NUMBA_ENABLE_CUDASIM="1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "simulator" in result.stdout and "FAILED" not in result.stdout
    lines = result.stdout.splitlines()
    assert lines[-1] == "PASSED: all 64 results within their tolerance of float64 NumPy"
    assert not any("TFLOP/s" in line for line in lines)  # the simulator's times measure Python
    assert (
        sum(line.startswith(("auto", "tiled", "mnk", "nmk", "kmn", "knm")) for line in lines) == 28
    )
    skinny = [line for line in lines if line.startswith("skinny")]
    assert len(skinny) == 4 and all(" 1 x " in line for line in skinny)  # one row of C
    # the tensor cores: mma and wgmma, each in bf16 and at float32 accuracy, in 4 layouts
    assert sum(line.startswith(("mma:", "wgmma:")) for line in lines) == 16
    triple_rows = [
        line for line in lines if line.startswith(("auto:fused", "naive", "fused", "unfused"))
    ]
    assert len(triple_rows) == 16  # 4 algorithms x 2 orders x 2 layouts, each checked


def test_model_refuses_to_simulate_what_would_take_hours():
    result = run("model", "--simulate")  # the default 2048^3
    assert result.returncode == 2 and "give M N K <= 4096" in result.stderr
    assert result.stdout == ""


def test_demo_reports_the_naive_kernels_refusal_past_its_limit(monkeypatch, capsys):
    # At the GPU's default size (1024) the demo's chain has K2 = 1031, past the naive
    # kernel's 1024 threads per block: the demo says so and goes on (here with a limit of 8).
    import numpy as np

    import numba_gemm.kernels.triple_product as triple_kernels
    from numba_gemm.__main__ import _demo_triple
    from numba_gemm.launch import SIMULATED

    monkeypatch.setattr(triple_kernels, "NAIVE_MAX_THREADS", 8)
    assert _demo_triple(9, np.random.default_rng(0), SIMULATED, 1) == (12, 0)  # 4 refused
    lines = capsys.readouterr().out.splitlines()
    refused = [line for line in lines if line.startswith("naive") and "refused" in line]
    assert len(refused) == 4, lines  # 2 orders x 2 layouts
    assert "use algorithm='fused'" in refused[0]
    assert sum(line.startswith(("auto:fused", "fused", "unfused")) for line in lines) == 12


def test_bench_prints_the_committed_results():
    result = run("bench", "--algorithm", "tiled", "--algorithm", "jnp.matmul")
    assert result.returncode == 0, result.stderr
    assert "x cuBLAS" in result.stdout and "tiled" in result.stdout and "mnk" not in result.stdout


def test_bench_finds_a_device_as_users_type_it_and_aligns_its_columns():
    for typed in ("H200", "nvidia-h200", "h200"):
        result = run("bench", "--device", typed)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[0].startswith("NVIDIA H200 ") and len(lines) > 3
        assert {len(line) for line in lines[1:]} == {len(lines[1])}  # every column aligned
    assert run("bench", "--device", "H300").returncode == 1


def test_bench_on_a_missing_folder_says_so(tmp_path):
    result = run("bench", "--results", str(tmp_path / "nowhere"))
    assert result.returncode == 2 and "no results file or folder" in result.stderr
    assert "Traceback" not in result.stderr


def test_bench_plot_needs_matplotlib_or_draws(tmp_path):
    import importlib.util

    result = run("bench", "--plot", str(tmp_path / "plot.png"))
    if importlib.util.find_spec("matplotlib") is None:
        assert result.returncode == 2 and "pip install 'numba-gemm[plot]'" in result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
    else:
        assert result.returncode == 0 and (tmp_path / "plot.png").stat().st_size > 0


def test_bench_readme_plot_draws_both_panels_or_needs_matplotlib(tmp_path):
    import importlib.util

    result = run("bench", "--readme", "--plot", str(tmp_path / "readme.png"))
    if importlib.util.find_spec("matplotlib") is None:
        assert result.returncode == 2 and "pip install 'numba-gemm[plot]'" in result.stderr
    else:
        assert result.returncode == 0 and (tmp_path / "readme.png").stat().st_size > 0


def test_tune_without_a_gpu_says_so():
    result = run("tune", "--size", "64", NUMBA_ENABLE_CUDASIM="1")  # no GPU, even on a GPU machine
    assert result.returncode == 2 and "GPU" in result.stderr
