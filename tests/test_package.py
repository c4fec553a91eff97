"""The package's public names: loaded lazily, then kept."""

import pytest

import numba_gemm


def test_every_public_name_resolves():
    for name in numba_gemm.__all__:
        assert getattr(numba_gemm, name) is not None, name


def test_a_resolved_name_is_kept_in_the_module():
    from numba_gemm import api, chain

    assert numba_gemm.matmul is api.matmul and numba_gemm.triple is chain.triple
    # later lookups are plain module attributes, not calls of the module's __getattr__
    assert vars(numba_gemm)["matmul"] is api.matmul and vars(numba_gemm)["triple"] is chain.triple


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'matmull'"):
        numba_gemm.matmull
