"""Seed 001's traffic model: closed forms == the executed loop nests, and the seed's errata."""

import itertools

import pytest

from numba_gemm.model import CACHES, ERRATA, ORDERS, format_table, seed_traffic, simulate, traffic

SIZES = [(3, 4, 5), (5, 3, 2), (2, 7, 3), (4, 2, 6), (1, 3, 2)]


@pytest.mark.parametrize("M, N, K", SIZES)
@pytest.mark.parametrize("order, cache", list(itertools.product(ORDERS, CACHES)))
def test_closed_form_equals_simulation(order, cache, M, N, K):
    assert traffic(order, M, N, K, cache) == simulate(order, M, N, K, cache)


@pytest.mark.parametrize("order, cache", list(itertools.product(ORDERS, CACHES)))
def test_flops_and_intensity(order, cache):
    M, N, K = 6, 7, 8
    t = traffic(order, M, N, K, cache)
    assert t.flops == 2 * M * N * K
    assert t.total == t.a_reads + t.b_reads + t.c_reads + t.c_writes
    assert t.intensity == pytest.approx(t.flops / t.total)


def test_seed_formulas_where_the_seed_is_right():
    """Register orders and full caches: the seed's counts are the honest ones."""
    M, N, K = 5, 6, 7
    for order, cache in itertools.product(ORDERS, CACHES):
        if order in ("mnk", "nmk") or cache == "full":
            assert seed_traffic(order, M, N, K, cache) == traffic(order, M, N, K, cache)


@pytest.mark.parametrize("order", ["kmn", "knm"])
@pytest.mark.parametrize("cache", ["none", "vector"])
def test_seed_omits_partial_sum_reads_in_k_outer_orders(order, cache):
    M, N, K = 5, 6, 7
    honest, seed = traffic(order, M, N, K, cache), seed_traffic(order, M, N, K, cache)
    assert honest.c_reads == M * N * (K - 1) and seed.c_reads == 0
    assert honest.total - seed.total == M * N * (K - 1)


def test_seed_closed_forms_spot_values():
    """The seed's formulas as written, e.g. M-N-K: total = 2MNK + MN, MNK + MN + MK,
    MN + MK + KN."""
    M, N, K = 3, 4, 5
    assert seed_traffic("mnk", M, N, K, "none").total == 2 * M * N * K + M * N
    assert seed_traffic("mnk", M, N, K, "vector").total == M * N * K + M * N + M * K
    assert seed_traffic("nmk", M, N, K, "vector").total == M * N * K + M * N + K * N
    assert seed_traffic("kmn", M, N, K, "none").total == 2 * M * N * K + M * K
    assert seed_traffic("knm", M, N, K, "vector").total == M * N * K + M * K + K * N
    for order in ORDERS:
        assert seed_traffic(order, M, N, K, "full").total == M * N + M * K + K * N


def test_caches_never_add_traffic():
    M, N, K = 9, 8, 7
    for order in ORDERS:
        totals = [traffic(order, M, N, K, cache).total for cache in CACHES]
        assert totals == sorted(totals, reverse=True)


def test_bad_arguments():
    with pytest.raises(ValueError, match="order must be one of"):
        traffic("ijk", 2, 2, 2)
    with pytest.raises(ValueError, match="cache must be one of"):
        traffic("mnk", 2, 2, 2, "l2")
    with pytest.raises(ValueError, match="K must be a positive integer"):
        simulate("mnk", 2, 2, 0)


def test_table_and_errata():
    table = format_table(64, 48, 32)
    assert table.count("\n") >= 14 and "kmn   none" in table and " *" in table
    assert len(ERRATA) >= 5 and all(len(e) == 3 for e in ERRATA)
