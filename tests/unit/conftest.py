"""Fixtures shared by unit test modules that opt in (none is autouse here)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """The code under test installs root handlers (``setup_logging``); put the root logger back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
