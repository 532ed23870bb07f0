"""Fixtures for the kernel tuning tests: fake /sys and /proc trees and a module runner."""

from __future__ import annotations

import pytest

from .sysfs_tree import build


@pytest.fixture
def make_tree(tmp_path):
    """Build a topology from tests/fixtures/sysfs under a fresh directory; returns (root, spec)."""

    def _make(name: str):
        root = tmp_path / name
        spec = build(name, root)
        return root, spec

    return _make


@pytest.fixture
def run_module(monkeypatch):
    """``run_module(module, args, run_command=None, bins=None, check_mode=False, diff=False)``: the shared harness.

    ``run_command`` answers every argv (default ``(0, "", "")``), ``bins`` maps binary names to paths; the
    result carries ``_commands`` (every argv) and ``_failed``. See tests/unit/module_harness.py.
    """
    from tests.unit.module_harness import make_run_module

    return make_run_module(monkeypatch)


@pytest.fixture
def as_running_system(monkeypatch):
    """Let a module treat the test tree as the running system so its command path (sysctl, update-grub,
    grubby) is exercised; run_command is always mocked by run_module, so nothing runs for real."""
    from ansible_collections.gpuops.cluster.plugins.module_utils import container_detection

    monkeypatch.setattr(container_detection, "is_running_system", lambda root: True)
