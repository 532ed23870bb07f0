"""Fixtures of the MIG tests: a lab node (the simulated nvidia-smi, its state under tmp_path) and a module harness."""

from __future__ import annotations

import pytest

from tests.unit.mig.test_gpu_mig_module import Lab
from tests.unit.module_harness import FakeCommands, ModuleHarness


@pytest.fixture
def lab(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUOPS_LAB_ROOT", str(tmp_path))
    return Lab(tmp_path)


@pytest.fixture
def harness(monkeypatch, lab):
    return ModuleHarness(monkeypatch, commands=FakeCommands(fallback=lab.answer))
