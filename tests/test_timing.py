"""numba_gemm.timing.results_file: where the benchmarks write their JSON."""

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
