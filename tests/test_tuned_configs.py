"""Tuned configs: shape buckets, layout keys, storing winners and finding the nearest;
tune() off a GPU."""

import json

import numpy as np
import pytest

from checks import H100_EDGE_TILES, H100_TILES
from numba_gemm import TileConfig
from numba_gemm.autotune import tune
from numba_gemm.descriptor import describe, transpose_view
from numba_gemm.launch import simulated
from numba_gemm.tuned_configs import (
    SEARCH_SPACE,
    SHIPPED,
    _load,
    _nearest,
    cache_path,
    layout_key,
    shape_bucket,
    store,
)


def test_shape_buckets_round_up_to_powers_of_two_within_limits():
    assert shape_bucket(1000, 1024, 1025) == (1024, 1024, 2048)
    assert shape_bucket(1, 3, 100000) == (16, 16, 16384)


def test_layout_keys():
    a = np.ones((8, 4), np.float32)
    assert layout_key(describe(a), describe(a.T)) == "row-col"
    assert layout_key(describe(a[::2, ::2]), describe(transpose_view(a))) == "strided-col"


def test_cache_path_follows_its_environment_variables(tmp_path, monkeypatch):
    # Memoised, but on the variables it reads: a change of either shows at once.
    monkeypatch.delenv("NUMBA_GEMM_TUNE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "one"))
    assert cache_path() == tmp_path / "one" / ".cache" / "numba_gemm" / "tuning.json"
    monkeypatch.setenv("HOME", str(tmp_path / "two"))
    assert cache_path() == tmp_path / "two" / ".cache" / "numba_gemm" / "tuning.json"
    monkeypatch.setenv("NUMBA_GEMM_TUNE_CACHE", str(tmp_path / "mine.json"))
    assert cache_path() == tmp_path / "mine.json"


def test_every_search_space_config_is_valid():
    for dtype, space in SEARCH_SPACE.items():
        for config in space:
            config.check(dtype)


def test_store_then_find_the_nearest_bucket(tmp_path):
    path = tmp_path / "cache.json"
    small, big = TileConfig(64, 64, 16, 4, 4, 3, 8), TileConfig(128, 256, 16, 8, 16, 3, 8)
    for shape, config in (((1024,) * 3, small), ((8192,) * 3, big)):
        _store(path, shape, config)
    entries = _load(path)
    assert json.loads(path.read_text())["format"] == 1
    nearest = lambda bucket, device="GPU X", arch="sm_90", layout="row-row": _nearest(  # noqa: E731
        entries, np.float32, layout, bucket, device, arch
    )
    assert TileConfig(**nearest((1024, 2048, 1024))["config"]) == small
    assert TileConfig(**nearest((4096, 8192, 8192))["config"]) == big
    assert nearest((1024,) * 3, device="GPU Y")["device"] == "GPU X"  # same architecture
    assert nearest((1024,) * 3, device="GPU Y", arch="sm_80") is None
    assert nearest((1024,) * 3, layout="col-col") is None  # config_for then tries any layout
    assert _nearest(entries, np.float64, "row-row", (1024,) * 3, "GPU X", "sm_90") is None


def test_shipped_winners_are_valid_configs():
    entries = _load(SHIPPED)
    assert entries, "numba_gemm/tuned.json ships winners"
    for entry in entries.values():
        TileConfig(**entry["config"]).check(entry["dtype"])


def test_unreadable_cache_is_reported(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        _load(path)


@pytest.mark.skipif(not simulated(), reason="checks the refusal on the simulator")
def test_tune_needs_a_gpu():
    with pytest.raises(RuntimeError, match="GPU"):
        tune(64, 64, 64)


TALL, WIDE = H100_TILES, H100_EDGE_TILES
SMALL = TileConfig(64, 64, 16, 4, 4, 3, 8)


@pytest.fixture
def gpu_x(tmp_path, monkeypatch):
    """config_for_shape as on a GPU ("GPU X", sm_90) whose user cache is the returned path
    and which ships no winners of its own."""
    from numba_gemm import tuned_configs

    path = tmp_path / "cache.json"
    monkeypatch.setattr(tuned_configs, "simulated", lambda: False)
    monkeypatch.setattr(tuned_configs, "device_key", lambda: ("GPU X", "sm_90"))
    monkeypatch.setattr(tuned_configs, "shared_memory_limit", lambda: 232448)
    monkeypatch.setattr(tuned_configs, "SHIPPED", tmp_path / "shipped.json")
    monkeypatch.setenv("NUMBA_GEMM_TUNE_CACHE", str(path))
    tuned_configs._configs_for.cache_clear()
    yield path
    tuned_configs._configs_for.cache_clear()


def _store(path, shape, config):
    store(
        path,
        "GPU X",
        "sm_90",
        np.float32,
        "row-row",
        shape,
        {"config": config, "seconds": 1.0, "tflops": 2.0},
    )


def test_a_winner_tuned_on_edge_tiles_serves_edge_tiles_only(gpu_x):
    from numba_gemm.tuned_configs import config_for_shape

    _store(gpu_x, (2048,) * 3, TALL)
    _store(gpu_x, (2047,) * 3, SMALL)  # same bucket; edge tiles under SMALL at 2047
    assert len(_load(gpu_x)) == 2  # the 2047 winner did not replace the 2048 one
    assert config_for_shape(2048, 2048, 2048) == TALL  # whole tiles under TALL
    assert config_for_shape(1536, 2048, 1024) == TALL
    for shape in ((2047, 2047, 2047), (2000, 2048, 2048), (2048, 2048, 1800)):
        assert config_for_shape(*shape) == SMALL


def test_without_an_edge_winner_edge_tiles_run_the_whole_winner_transposed(gpu_x):
    from numba_gemm.tuned_configs import config_for_shape

    _store(gpu_x, (2048,) * 3, TALL)
    assert config_for_shape(2048, 2048, 2048) == TALL
    assert config_for_shape(2047, 2047, 2047) == WIDE  # tiled.for_edge_tiles
    # an edge winner farther away than the whole one does not serve this bucket
    _store(gpu_x, (300, 300, 300), SMALL)
    assert config_for_shape(2047, 2047, 2047) == WIDE
    assert config_for_shape(300, 300, 300) == SMALL  # its own bucket: nearer than 2048's


def test_stored_entries_say_whether_their_shape_had_edge_tiles(gpu_x):
    from numba_gemm.tuned_configs import _tuned_on_edge_tiles

    _store(gpu_x, (2048,) * 3, TALL)
    _store(gpu_x, (2048, 2048, 2047), TALL)  # K not a multiple of block_k: edge tiles
    _store(gpu_x, (1536, 1536, 1536), SMALL)  # whole under SMALL: replaces 2048's whole winner
    entries = _load(gpu_x)
    assert sorted(map(_tuned_on_edge_tiles, entries.values())) == [False, True]
    assert sorted(k.endswith("|edge") for k in entries) == [False, True]
