"""Global-memory traffic of seed 001's four loop orders under its three cache scenarios.

Counts are in matrix elements (multiply by the item size for bytes), for
C (M x N) = A (M x K) @ B (K x N), the nest ``C(i,j) = C(i,j) + A(i,k) * B(k,j)``:

=========  ===================  ==========================  ==================================
order      loops, outer first   held in a register          ``vector`` cache / ``full`` cache
=========  ===================  ==========================  ==================================
``mnk``    i, j, k              C(i, j) (invariant in k)    row A(i, :) / + all of B
``nmk``    j, i, k              C(i, j)                     column B(:, j) / + all of A
``kmn``    k, i, j              A(i, k) (invariant in j)    row B(k, :) / + all of C
``knm``    k, j, i              B(k, j) (invariant in i)    column A(:, k) / + all of C
=========  ===================  ==========================  ==================================

``cache="none"`` holds only the register. Honest counting rules, applied
alike by the closed forms (:func:`traffic`) and the executed nest
(:func:`simulate`):

- an operand element is read from memory when it is neither in the register
  nor in the cache; the cache holds exactly what the scenario names;
- C is write-back where it is held (register, or cache in the ``full`` K-outer
  scenarios: one write per element when it leaves) and write-through
  elsewhere (one write per k step);
- the first k step of an element reads no C: its sum starts from the product
  (C holds nothing yet), every later step of a C element that is not held
  reads the partial sum back: MN(K-1) reads in the K-outer orders.

The seed counts the same, except where :data:`ERRATA` says otherwise;
:func:`seed_traffic` gives the seed's own formulas for comparison.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

__all__ = ["ORDERS", "CACHES", "Traffic", "traffic", "simulate", "seed_traffic", "ERRATA"]

ORDERS = ("mnk", "nmk", "kmn", "knm")
CACHES = ("none", "vector", "full")


@dataclass(frozen=True)
class Traffic:
    """Element counts of one loop order and cache scenario; ``flops`` = 2MNK."""

    a_reads: int
    b_reads: int
    c_reads: int
    c_writes: int
    flops: int

    @property
    def total(self) -> int:
        return self.a_reads + self.b_reads + self.c_reads + self.c_writes

    @property
    def intensity(self) -> float:
        """Flops per element moved (the seed's CI; divide by the item size for flop/byte)."""
        return self.flops / self.total


def _check(order: str, M: int, N: int, K: int, cache: str) -> None:
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}; got {order!r}")
    if cache not in CACHES:
        raise ValueError(f"cache must be one of {CACHES}; got {cache!r}")
    for name, n in (("M", M), ("N", N), ("K", K)):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"{name} must be a positive integer; got {n!r}")


def traffic(order: str, M: int, N: int, K: int, cache: str = "none") -> Traffic:
    """Closed-form global reads and writes of ``order`` under ``cache``."""
    _check(order, M, N, K, cache)
    MNK, flops = M * N * K, 2 * M * N * K
    if cache == "full":
        return Traffic(M * K, K * N, 0, M * N, flops)
    if order in ("mnk", "nmk"):  # C accumulates in a register: written once, never read
        a = M * K if (order, cache) == ("mnk", "vector") else MNK
        b = K * N if (order, cache) == ("nmk", "vector") else MNK
        return Traffic(a, b, 0, M * N, flops)
    # K outermost: C's partial sum goes through memory at every k step.
    a = M * K if order == "kmn" or cache == "vector" else MNK
    b = K * N if order == "knm" or cache == "vector" else MNK
    return Traffic(a, b, M * N * (K - 1), MNK, flops)


_NESTS = {"mnk": "ijk", "nmk": "jik", "kmn": "kij", "knm": "kji"}


def _holds(order: str, cache: str):
    """Predicate: may (matrix, row, col) sit in the register or cache at loop state (i, j, k)?"""
    register = {
        "mnk": lambda m, r, c, i, j, k: m == "C" and (r, c) == (i, j),
        "nmk": lambda m, r, c, i, j, k: m == "C" and (r, c) == (i, j),
        "kmn": lambda m, r, c, i, j, k: m == "A" and (r, c) == (i, k),
        "knm": lambda m, r, c, i, j, k: m == "B" and (r, c) == (k, j),
    }[order]
    vector = {  # the one row/column the innermost two loops reuse
        "mnk": lambda m, r, c, i, j, k: m == "A" and r == i,
        "nmk": lambda m, r, c, i, j, k: m == "B" and c == j,
        "kmn": lambda m, r, c, i, j, k: m == "B" and r == k,
        "knm": lambda m, r, c, i, j, k: m == "A" and c == k,
    }[order]
    whole = {"mnk": "B", "nmk": "A", "kmn": "C", "knm": "C"}[order]
    if cache == "none":
        return register
    if cache == "vector":
        return lambda *key_state: register(*key_state) or vector(*key_state)
    return lambda m, *rest: m == whole or register(m, *rest) or vector(m, *rest)


def simulate(order: str, M: int, N: int, K: int, cache: str = "none") -> Traffic:
    """Execute the loop nest over an explicit register + cache and count global traffic.

    O(MNK x cache size): meant for small problems, as a check on :func:`traffic`.
    """
    _check(order, M, N, K, cache)
    holds = _holds(order, cache)
    extents = {"i": M, "j": N, "k": K}
    nest = _NESTS[order]
    resident: dict[tuple, bool] = {}  # held element -> dirty
    c_stored: set[tuple] = set()  # C elements whose partial sum lives in memory or cache
    counts = {"A": 0, "B": 0, "C": 0, "C_w": 0}

    def read(key, state):
        if key in resident:
            return
        if key[0] == "C" and key not in c_stored:
            return  # first k step: the sum starts from the product, nothing to read
        counts[key[0]] += 1
        if holds(*key, *state):
            resident[key] = False

    for indices in itertools.product(*(range(extents[v]) for v in nest)):
        loop = dict(zip(nest, indices))
        state = (loop["i"], loop["j"], loop["k"])
        for key in [key for key in resident if not holds(*key, *state)]:
            counts["C_w"] += resident.pop(key)  # evict; a dirty element is written back
        i, j, k = state
        read(("C", i, j), state)
        read(("A", i, k), state)
        read(("B", k, j), state)
        c_key = ("C", i, j)
        c_stored.add(c_key)
        if holds(*c_key, *state):
            resident[c_key] = True
        else:
            counts["C_w"] += 1
    counts["C_w"] += sum(resident.values())  # flush at the end
    return Traffic(counts["A"], counts["B"], counts["C"], counts["C_w"], 2 * M * N * K)


# The seed's own formulas: (A_r, B_r, C_w) as functions of (M, N, K); it counts no C reads.
_SEED = {
    ("mnk", "none"): lambda M, N, K: (M * N * K, M * N * K, M * N),
    ("mnk", "vector"): lambda M, N, K: (M * K, M * N * K, M * N),
    ("mnk", "full"): lambda M, N, K: (M * K, K * N, M * N),
    ("nmk", "none"): lambda M, N, K: (M * N * K, M * N * K, M * N),
    ("nmk", "vector"): lambda M, N, K: (M * N * K, K * N, M * N),
    ("nmk", "full"): lambda M, N, K: (M * K, K * N, M * N),
    ("kmn", "none"): lambda M, N, K: (M * K, M * N * K, M * N * K),
    ("kmn", "vector"): lambda M, N, K: (M * K, K * N, M * N * K),
    ("kmn", "full"): lambda M, N, K: (M * K, K * N, M * N),
    ("knm", "none"): lambda M, N, K: (M * N * K, K * N, M * N * K),
    ("knm", "vector"): lambda M, N, K: (M * K, K * N, M * N * K),
    ("knm", "full"): lambda M, N, K: (M * K, K * N, M * N),
}


def seed_traffic(order: str, M: int, N: int, K: int, cache: str = "none") -> Traffic:
    """The counts seed 001 writes down (C reads never counted)."""
    _check(order, M, N, K, cache)
    a, b, c_w = _SEED[order, cache](M, N, K)
    return Traffic(a, b, 0, c_w, 2 * M * N * K)


ERRATA = (
    (
        "K-M-N and K-N-M, caches none and vector",
        "C_w = MNK, total = 2MNK+MK / 2MNK+KN (none), MNK+MK+KN (vector); no C reads",
        "every k step after the first reads the partial sum back: C_r = MN(K-1), so the totals "
        "are 3MNK-MN+MK / 3MNK-MN+KN (none) and 2MNK-MN+MK+KN (vector); intensity is lower than "
        "the seed says (about 2/3 and 1 instead of 1 and 2)",
    ),
    (
        "K-N-M, cache vector, text",
        "'B 的每个元素只需读取一次, 即 MK 次'",
        "B is read KN times (its formula B_r = KN is right)",
    ),
    (
        "K-N-M, cache full, text",
        "'A[K] ... 即 KN 次', 'B ... 即 MK 次'",
        "swapped: A is read MK times and B KN times (the formulas are right)",
    ),
    (
        "N-M-K, code",
        "for (int j = 0; j < N; n++)",
        "the loop increments n, not j: for (int j = 0; j < N; j++)",
    ),
    (
        "M-N-K and N-M-K, column-major B listing",
        "[..., b_{1M}, b_{2M}, ..., b_{KM}]",
        "B has N columns: [..., b_{1N}, b_{2N}, ..., b_{KN}]",
    ),
    (
        "K-M-N and K-N-M, row-major B listing",
        "[..., b_{K1}, b_{K2}, ..., b_{KM}]",
        "B's last row ends at b_{KN}",
    ),
    (
        "K-M-N, caches vector and full, text",
        "'B[j] 可以缓存', 'B 的第 j 行'",
        "the cached vector is B's k-th row, B(k, :), the row the inner i, j loops reuse",
    ),
    (
        "N-M-K, cache full, text",
        "'A[i] 和 B 可以缓存在缓存中'",
        "the scenario caches all of A and the column B(:, j)",
    ),
)
