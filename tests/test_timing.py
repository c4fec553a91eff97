"""numba_gemm.timing: where the benchmarks write their JSON, the versions they record, and the
interleaved rounds they time methods in."""

import datetime
import json

import pytest

from numba_gemm.timing import results_file, write_results


@pytest.mark.parametrize(
    "device, slug",
    [
        ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
        ("NVIDIA H200", "nvidia-h200"),
        ("  Odd//Name (rev 2) ", "odd-name-rev-2"),
    ],
)
def test_results_file_is_one_per_suite_and_device(tmp_path, device, slug):
    folder = tmp_path / "new" / "results"
    path, date = results_file(folder, device, "triple_product")
    assert path == folder / "triple_product" / f"{slug}.json"
    assert path.parent.is_dir() and not path.exists()
    when = datetime.datetime.fromisoformat(date)
    assert when.tzinfo is not None and when.utcoffset() == datetime.timedelta(0)


def test_write_results_puts_date_device_and_suite_first_and_replaces_the_last_run(tmp_path):
    path = write_results(tmp_path, "NVIDIA H100 80GB HBM3", "suite", {"rows": [1, 2]})
    assert path == tmp_path / "suite" / "nvidia-h100-80gb-hbm3.json"
    record = json.loads(path.read_text())
    assert list(record) == ["date", "device", "suite", "rows"]
    assert record["device"] == "NVIDIA H100 80GB HBM3" and record["rows"] == [1, 2]
    datetime.datetime.fromisoformat(record["date"])
    # A record's own "device" (the benchmark session's details) replaces the name in place.
    path = write_results(tmp_path, "H100", "other", {"versions": {}, "device": {"name": "H100"}})
    assert list(json.loads(path.read_text()).items())[:2][1] == ("device", {"name": "H100"})
    # The next run of a suite on a device replaces its file.
    again = write_results(tmp_path, "NVIDIA H100 80GB HBM3", "suite", {"rows": [3]})
    assert again == tmp_path / "suite" / "nvidia-h100-80gb-hbm3.json"
    assert json.loads(again.read_text())["rows"] == [3]


def _sleeper(log, name, seconds, stalls=(), stall_s=0.0):
    """A method that logs its name and sleeps ``seconds``, or ``stall_s`` on its own calls
    numbered in ``stalls`` (from 0)."""
    import time

    def fn():
        time.sleep(stall_s if log.count(name) in stalls else seconds)
        log.append(name)

    return fn


def _blocks(log):
    """The log as runs of one name: [(name, count), ...]."""
    blocks = []
    for name in log:
        if blocks and blocks[-1][0] == name:
            blocks[-1][1] += 1
        else:
            blocks.append([name, 1])
    return blocks


def test_interleaved_medians_runs_every_method_each_round():
    # On the simulator device_clock is the host's clock: the order of the calls is what counts.
    from numba_gemm.timing import interleaved_medians

    log = []
    methods = {"slow": _sleeper(log, "slow", 0.004), "fast": _sleeper(log, "fast", 0.001)}
    medians, rounds, calls = interleaved_medians(methods, rounds=4, round_s=0.008, warmup=1)
    assert [len(r) for r in rounds.values()] == [4, 4]
    assert medians["slow"] > medians["fast"] > 0
    # Warm-up and calibration come first, a block per method; then each round is one block of
    # slow calls and one of fast calls, the same counts every round.
    timed = _blocks(log)[-8:]
    assert [name for name, _ in timed] == ["slow", "fast"] * 4
    assert {count for name, count in timed if name == "slow"} == {calls["slow"]}
    assert {count for name, count in timed if name == "fast"} == {calls["fast"]}
    assert calls["fast"] > calls["slow"]


def test_lead_in_calls_run_untimed_before_each_round():
    from numba_gemm.timing import interleaved_medians

    log = []
    methods = {"a": _sleeper(log, "a", 0.001), "b": _sleeper(log, "b", 0.001)}
    _, rounds, calls = interleaved_medians(methods, rounds=3, round_s=0.008, warmup=1,
                                           lead_in=0.5)  # fmt: skip
    assert [len(r) for r in rounds.values()] == [3, 3]
    # each round: one block of the method's calls, its lead-in and its timed calls together
    timed = _blocks(log)[-6:]
    assert [name for name, _ in timed] == ["a", "b"] * 3
    for name, count in timed:
        assert count == calls[name] + -(-calls[name] // 2)
    with pytest.raises(ValueError, match="lead_in"):
        interleaved_medians(methods, lead_in=-1)


def test_slow_first_calls_do_not_shrink_the_rounds():
    # A method whose second and third calls stall for 10 rounds' time each (jax.jit's chain
    # did something like it once in a while). The stalls must not leave rounds of a call or
    # two, which would time one call's latency instead of back-to-back calls.
    from numba_gemm.timing import interleaved_medians

    log = []
    methods = {
        "m": _sleeper(log, "m", 0.0005, stalls=(1, 2), stall_s=0.1),
        "other": _sleeper(log, "other", 0.0005),
    }
    medians, _, calls = interleaved_medians(methods, rounds=3, round_s=0.01, warmup=1)
    rounds = _blocks(log)[-6:]
    assert [name for name, _ in rounds] == ["m", "other"] * 3
    # about 20 at 0.5 ms, as many as the method that never stalls (both slower alike where the
    # host is loaded: other test processes), never the stalls' one or two
    assert calls["m"] >= max(3, calls["other"] // 2)
    assert all(count == calls["m"] for name, count in rounds if name == "m")
    assert medians["m"] < 0.002


def test_stack_versions():
    import platform

    import numpy as np

    from numba_gemm.timing import stack_versions

    found = stack_versions("no-such-distribution")
    assert found["python"] == platform.python_version() and found["numpy"] == np.__version__
    assert {"numba", "numba-cuda", "jax", "jaxlib"} <= found.keys()
    assert found["no-such-distribution"] is None


@pytest.mark.skipif(
    not __import__("numba").cuda.config.ENABLE_CUDASIM, reason="names the simulator as the device"
)
def test_l2_ordering_summary_names_its_results_file(tmp_path, benchmark_module):
    # benchmarks/l2_ordering.py summarize: ncu's CSV (a compile launch, then the profiled one,
    # per case) paired with the cases, written where every benchmark writes its results.
    import csv
    import json

    l2 = benchmark_module("l2_ordering")
    ncu = tmp_path / "ncu.csv"
    with ncu.open("w", newline="") as f:
        f.write("==PROF== Connected to process\n")  # ncu's own lines come before the table
        writer = csv.writer(f, quoting=csv.QUOTE_ALL)
        writer.writerow(["ID", "Kernel Name", "Metric Name", "Metric Value"])
        for launch in range(2 * len(l2.CASES)):
            for index, metric in enumerate(l2.METRICS):
                writer.writerow([launch, "tiled", metric, f"{1000 * launch + index:,}"])
    l2.summarize(str(ncu), str(tmp_path / "results"))
    [written] = (tmp_path / "results").rglob("*.json")
    assert written == tmp_path / "results" / "l2_ordering" / "simulator.json"
    payload = json.loads(written.read_text())
    assert payload["device"] == "simulator" and payload["versions"]["numba-cuda"]
    rows = payload["rows"]
    assert [(r["M"], r["N"], r["K"], r["group_m"]) for r in rows] == [
        (*shape, group) for shape, group in l2.CASES
    ]
    # Each case's figures come from its profiled (odd) launch, not its compile launch.
    assert [r["l2_hit_pct"] for r in rows] == [1000.0 * (2 * i + 1) for i in range(len(rows))]
    assert rows[0]["kernel_s"] == pytest.approx(1003e-9)


def test_the_shapes_benchmark_has_every_row_the_shape_sweep_needs(benchmark_module):
    # benchmarks/shapes.py: M in {1, 16, 128, 1024, 8192} against four projections, then
    # small k, large k, tall-skinny and the two attention-like batched products.
    shapes = benchmark_module("shapes")
    rows = {(batch, m, n, k) for _, batch, m, n, k in shapes.SHAPES}
    for m in (1, 16, 128, 1024, 8192):
        for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)):
            assert (1, m, n, k) in rows
    for row in ((1, 8192, 8192, 64), (1, 1024, 1024, 65536), (1, 65536, 256, 1024),
                (64, 2048, 2048, 128), (64, 2048, 128, 2048)):  # fmt: skip
        assert row in rows
    assert len(rows) == len(shapes.SHAPES) == 25
    assert {c: shapes.CASES[c][1] for c in shapes.CASES} == {
        "f32": "F32_F32_F32", "tf32": "TF32_TF32_F32", "bf16": "BF16_BF16_F32"
    }  # fmt: skip
    assert {kind for kind, _, m, _, _ in shapes.SHAPES if m <= shapes.SKINNY_M} == {"skinny"}


def test_the_shapes_benchmark_sums_up_each_case(benchmark_module):
    shapes = benchmark_module("shapes")
    rows = [{"dtype": "bfloat16", "precision": "BF16_BF16_F32", "ratio": r} for r in (0.5, 2.0)]
    rows += [{"dtype": "bfloat16", "precision": "BF16_BF16_F32", "ratio": None}]  # failed
    rows += [{"dtype": "float32", "precision": "TF32_TF32_F32", "ratio": 0.9}]
    summary = shapes.summary(rows)
    assert summary["bfloat16 BF16_BF16_F32"] == {
        "rows": 3, "failed": 1, "lowest_ratio": 0.5, "geomean_ratio": pytest.approx(1.0)
    }  # fmt: skip
    assert summary["float32 TF32_TF32_F32"]["geomean_ratio"] == pytest.approx(0.9)
    # one token against a 4096 x 4096 float32 projection: the matrix, the token and the result
    assert shapes.moved_bytes(1, 1, 4096, 4096, 4) == (4096 * 4096 + 2 * 4096) * 4


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["f32", "tf32", "bf16"])
@pytest.mark.parametrize("shape", [("skinny", 1, 1, 384, 256), ("batched", 3, 40, 24, 72)])
def test_gpu_shapes_benchmark_measures_a_row(case, shape, benchmark_module):
    shapes = benchmark_module("shapes")
    row = shapes.measure(case, shape, bandwidth=1e12)
    assert row["error"] <= 1e-2 and row["ratio"] > 0 and row["ours_s"] > 0
    assert (row["batch"], row["M"], row["N"], row["K"]) == shape[1:]
    assert (row["bandwidth_fraction"] is not None) == (shape[2] <= shapes.SKINNY_M)


@pytest.mark.gpu
def test_gpu_timing_order_benchmark_measures_a_row(benchmark_module):
    timing_order = benchmark_module("timing_order")
    row = timing_order.measure("float32", 16, 256, 512, 0.25)
    assert row["after_cublas_s"] > 0 and row["after_ours_s"] > 0 and row["cublas_s"] > 0
    assert row["gap"] == pytest.approx(row["after_cublas_s"] / row["after_ours_s"] - 1)


def test_the_shape_configs_benchmark_times_every_split_that_fits(benchmark_module):
    shape_configs = benchmark_module("shape_configs")

    def labels(case, shape):
        return [
            (algorithm, config and config.label())
            for algorithm, config in shape_configs.candidates(case, shape, sms=132)
        ]

    # a matrix-vector product: the skinny kernel, and the narrow tiles split (64 tiles of 256
    # steps: up to 16 CTAs each within four waves of 132)
    found = labels("f32", ("skinny", 1, 1, 8192, 8192))
    assert found[0] == ("skinny", None)
    assert [label for _, label in found[1:]] == [
        "16x128x32/t4x4/s3/g8" + suffix for suffix in ("", "/kc2", "/kc4", "/kc8")
    ]
    # one 64-k slice: nothing to split; every tile shape once, the persistent ones too
    found = labels("bf16", ("small-k", 1, 8192, 8192, 64))
    assert len(found) == len(shape_configs._wgmma_tiles("bf16")) and all(
        "kc" not in c for _, c in found
    )
    assert {"wgmma 64x128/s3/g8/p2", "wgmma 128x256/s4/g8/p1/ws"} <= {c for _, c in found}
    # a long k: the persistent tiles (warp-specialised too) are never split
    found = [c for _, c in labels("bf16", ("large-k", 1, 1024, 1024, 65536))]
    assert "wgmma 128x256/s4/g8/kc4" in found and "wgmma 128x256/s4/g8/p1/ws" in found
    assert not any("/kc" in c and ("/p" in c or "/ws" in c) for c in found)
    # TF32 row-major runs as 14336 x 128: the tall tiles' 56 may split, the 128 x 256 ones' 112
    # (in the kernel's frame) only in two
    found = [c for _, c in labels("tf32", ("projection", 1, 128, 14336, 4096))]
    assert "wgmma 256x128/s4/g8/kc4" in found and "wgmma 128x256/s4/g8/kc4" not in found


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["f32", "tf32", "bf16"])
@pytest.mark.parametrize("shape", [("projection", 1, 16, 1024, 2048), ("batched", 4, 128, 256, 64)])
def test_gpu_shape_configs_benchmark_measures_a_row(case, shape, benchmark_module):
    shape_configs = benchmark_module("shape_configs")
    row = shape_configs.measure(case, shape)
    assert row["auto_over_best"] >= 1 and row["cublas_s"] > 0 and row["candidates"]
    assert "auto" not in row["candidates"] and row["best_s"] <= row["auto_s"]
    assert not [e for e in row["failed"].values() if not e.startswith("refused")], row["failed"]
