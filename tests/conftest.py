import zlib

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    """A generator seeded from the test's id: fixed per test, different across tests."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
