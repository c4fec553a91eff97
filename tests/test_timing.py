"""numba_gemm.timing: where the benchmarks write their JSON, the versions they record, and the
interleaved rounds they time methods in."""

import datetime
import re

import pytest

from numba_gemm.timing import results_file


@pytest.mark.parametrize("device, slug", [("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
                                          ("NVIDIA H200", "nvidia-h200"),
                                          ("  Odd//Name (rev 2) ", "odd-name-rev-2")])
def test_results_file_names_date_device_and_suite(tmp_path, device, slug):
    folder = tmp_path / "new" / "results"
    path, date = results_file(folder, device, "triple_product")
    assert folder.is_dir() and path.parent == folder and not path.exists()
    when = datetime.datetime.fromisoformat(date)
    assert when.tzinfo is not None and when.utcoffset() == datetime.timedelta(0)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-" + slug + r"-triple_product\.json", path.name)
    assert path.name.startswith(f"{when:%Y-%m-%d}-")


def test_interleaved_medians_runs_every_method_each_round():
    # On the simulator device_clock is the host's clock: the order of the calls is what counts.
    import time

    from numba_gemm.timing import interleaved_medians

    log = []

    def method(name, seconds):
        def fn():
            log.append(name)
            time.sleep(seconds)
        return fn

    methods = {"slow": method("slow", 0.004), "fast": method("fast", 0.001)}
    medians, rounds = interleaved_medians(methods, rounds=4, round_s=0.008, warmup=1)
    assert [len(r) for r in rounds.values()] == [4, 4]
    assert medians["slow"] > medians["fast"] > 0
    timed = log[2 * 2 + 2:]  # after calibration (2 calls each) and warm-up (1 each)
    # Each round is one block of slow calls, then one of fast calls, the same count every round.
    blocks = [name for i, name in enumerate(timed) if i == 0 or timed[i - 1] != name]
    assert blocks == ["slow", "fast"] * 4
    assert timed.count("slow") % 4 == 0 and timed.count("fast") >= timed.count("slow")


def test_stack_versions():
    import platform

    import numpy as np

    from numba_gemm.timing import stack_versions

    found = stack_versions("no-such-distribution")
    assert found["python"] == platform.python_version() and found["numpy"] == np.__version__
    assert {"numba", "numba-cuda", "jax", "jaxlib"} <= found.keys()
    assert found["no-such-distribution"] is None
