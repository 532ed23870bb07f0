"""The tuning modules run commands in the C locale set once (command_runner) and read through file_reader."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"
MODULES = ["kernel_runtime", "irq_affinity", "sysctl_profile", "kernel_cmdline", "pcie_acs", "rdma_dropins"]


@pytest.mark.parametrize("name", MODULES)
def test_module_sets_the_c_locale_once_after_ansible_module(name):
    source = (PLUGINS / "modules" / f"{name}.py").read_text()
    assert "environ_update" not in source
    main = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "main")
    first_two = [ast.unparse(statement) for statement in main.body[:2]]
    assert first_two[0].startswith("module = AnsibleModule(")
    assert first_two[1] == "use_c_locale(module)"


@pytest.mark.parametrize("name", ["irq_affinity", "kernel_runtime"])
def test_readers_use_file_reader(name):
    source = (PLUGINS / "module_utils" / "tuning" / f"{name}.py").read_text()
    assert "def _read" not in source
    assert "from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value" in source
