"""Shared test setup: one torch thread per test (the test machine has 2 shared cores,
and small models run faster single-threaded than oversubscribed)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
