from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.rendezvous.testbed import Testbed, available


@pytest.fixture
def bed() -> Iterator[Testbed]:
    why = available()
    if why:
        pytest.skip(f"rendezvous testbed {why}")
    testbed = Testbed.create()
    try:
        yield testbed
    finally:
        testbed.destroy()
