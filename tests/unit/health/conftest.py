"""Shared paths of the health engine tests."""

from pathlib import Path

import pytest

from tests.unit.module_harness import ModuleHarness

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture
def fixture_text():
    def read(relative):
        return (FIXTURES / relative).read_text(encoding="utf-8")

    return read


@pytest.fixture
def harness(monkeypatch):
    """The module harness (tests/unit/module_harness.py); no command is answered until a test says so."""
    return ModuleHarness(monkeypatch)
