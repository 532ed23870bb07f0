"""Every read and pin of the NVIDIA stack names the package manager of the resolved OS.

The modules' ``package_manager: auto`` takes the first tool found (dpkg-query, then rpm; apt-mark, then dnf). The
lab's dnf node (Debian's dnf on Debian, presenting Rocky 9) has both, as a RHEL node with EPEL's dpkg has: read with
auto, its stack was read with dpkg-query and apt-cache, and the role refused a repository that holds the stack.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
MODULES = ("gpuops.cluster.gpu_stack_facts", "gpuops.cluster.package_pin")


def calls(node, found):
    """(module, options) of every task in a loaded YAML document that calls one of MODULES."""
    if isinstance(node, dict):
        for module in MODULES:
            if module in node and "name" in node:
                found.append((module, node[module] or {}))
        for value in node.values():
            calls(value, found)
    elif isinstance(node, list):
        for item in node:
            calls(item, found)
    return found


def module_defaults(path):
    """What the role's main.yml gives MODULES through module_defaults."""
    main = path.parent / "main.yml"
    if path.parts[-3:-1] != ("nvidia_stack", "tasks") or not main.is_file():
        return {}
    block = yaml.safe_load(main.read_text(encoding="utf-8"))[0]
    return block.get("module_defaults", {})


FILES = sorted([*ROOT.glob("playbooks/*.yml"), *ROOT.glob("roles/*/tasks/*.yml")])
CALLS = [
    (path.relative_to(ROOT), module, options)
    for path in FILES
    for module, options in calls(yaml.safe_load(path.read_text(encoding="utf-8")), [])
    if module not in module_defaults(path) or "package_manager" not in module_defaults(path)[module]
]


def test_the_calls_are_found():
    names = {str(path) for path, _module, _options in CALLS}
    assert "playbooks/mirror_check.yml" in names
    assert "roles/rolling_upgrade/tasks/survey.yml" in names


@pytest.mark.parametrize(("path", "module", "options"), CALLS, ids=[f"{p}:{m}" for p, m, _o in CALLS])
def test_the_call_names_the_resolved_os_package_manager(path, module, options):
    assert "package_manager" in options, f"{path}: {module} must set package_manager (the resolved stack's)"
