"""The folders "as shipped" (tests/pretrained/shipped.py), built once per session on first use."""

from __future__ import annotations

import pytest

from tests.pretrained.shipped import Shipped


@pytest.fixture(scope="session")
def shipped(tmp_path_factory) -> Shipped:
    return Shipped(tmp_path_factory.mktemp("shipped"))
