"""Shared test settings: deterministic seeds and few threads (CI has 2 cores)."""

import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
