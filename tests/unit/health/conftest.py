"""Shared paths of the health engine tests."""

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture
def fixture_text():
    def read(relative):
        return (FIXTURES / relative).read_text(encoding="utf-8")

    return read
