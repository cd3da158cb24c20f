"""Fixtures of the publish tests: ``data_built``, a stand-in built image (see ``standin.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.publish.standin import Built


@pytest.fixture
def data_built(tmp_path: Path) -> Built:
    return Built.make(tmp_path)
