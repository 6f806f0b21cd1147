"""Fixtures shared by the kernel tests."""
import pytest

from rtd.kernels import native


@pytest.fixture
def native_threads():
    """native.set_threads for the test, then one thread again (every other test's setting), pass or fail."""
    yield native.set_threads
    native.set_threads(1)
