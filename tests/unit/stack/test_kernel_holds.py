"""package_pin's kernel_hold through its argument spec on a fake apt node: the kernel packages of a real Debian 12
listing (tests/fixtures/kernel/, see the README) held with the stack in the same execution, a converged re-run
that runs no change, opting out that releases only the recorded kernel holds, check mode that predicts it."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import kernel_lockstep
from ansible_collections.gpuops.cluster.plugins.modules import package_pin

from tests.unit.stack.test_kernel_lockstep import DEBIAN, dpkg_query

PACKAGES = [{"name": "nvidia-driver-580", "version": "580.95.05-1", "component": "driver"}]
KERNEL = [
    "linux-headers-6.1.0-39-amd64",
    "linux-headers-6.1.0-39-common",
    "linux-headers-amd64",
    "linux-image-5.10.0-35-amd64",
    "linux-image-6.1.0-39-amd64",
    "linux-image-amd64",
]


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "preferences.d").mkdir()
    (tmp_path / "apt.conf.d").mkdir()
    return {
        "preferences_path": str(tmp_path / "preferences.d" / "gpuops-nvidia.pref"),
        "unattended_upgrades_path": str(tmp_path / "apt.conf.d" / "51gpuops-nvidia-blacklist"),
        "package_manager": "apt",
    }


@pytest.fixture
def debian_node(node):
    for line in dpkg_query(DEBIAN).splitlines():
        name, version, status = line.split("\t")
        node.dpkg[name] = (version, status)
    node.dpkg["nvidia-driver-580"] = ("580.95.05-1", "install ok installed")
    node.dpkg["linux-libc-dev"] = ("6.1.148-1", "install ok installed")
    return node


def changes(node):
    return [call[1:] for call in node.calls if call[1] in ("hold", "unhold")]


def test_the_kernel_is_held_with_the_stack_and_a_rerun_changes_nothing(run_module, debian_node, paths):
    result = run_module(package_pin.main, {**paths, "packages": PACKAGES, "kernel_hold": True})
    assert result["kernel_holds"] == KERNEL
    assert changes(debian_node) == [["hold", *sorted([*KERNEL, "nvidia-driver-580"])]]
    assert kernel_lockstep.recorded_holds(Path(paths["preferences_path"]).read_text()) == KERNEL
    assert "linux-libc-dev" not in debian_node.held
    debian_node.calls.clear()
    again = run_module(package_pin.main, {**paths, "packages": PACKAGES, "kernel_hold": True})
    assert again["changed"] is False
    assert changes(debian_node) == []
    # the same execution: one dpkg-query of linux-* beside apt-mark showhold, nothing else
    assert sorted(Path(call[0]).name for call in debian_node.calls) == ["apt-mark", "dpkg-query"]


def test_opting_out_releases_the_recorded_kernel_holds_and_no_other(run_module, debian_node, paths):
    run_module(package_pin.main, {**paths, "packages": PACKAGES, "kernel_hold": True})
    debian_node.held.add("linux-image-5.10.0-35-amd64-by-hand")  # an operator's hold on a name we never held
    debian_node.calls.clear()
    check = run_module(package_pin.main, {**paths, "packages": PACKAGES, "kernel_hold": False}, check=True, diff=True)
    assert check["changed"] is True
    assert check["unheld"] == KERNEL
    assert changes(debian_node) == []  # check mode predicts, runs nothing
    result = run_module(package_pin.main, {**paths, "packages": PACKAGES, "kernel_hold": False})
    assert result["unheld"] == KERNEL
    assert debian_node.held == {"nvidia-driver-580", "linux-image-5.10.0-35-amd64-by-hand"}
    assert kernel_lockstep.recorded_holds(Path(paths["preferences_path"]).read_text()) == []


def test_without_kernel_hold_no_kernel_package_is_read(run_module, debian_node, paths):
    run_module(package_pin.main, {**paths, "packages": PACKAGES})
    assert [call for call in debian_node.calls if Path(call[0]).name == "dpkg-query"] == []
    assert debian_node.held == {"nvidia-driver-580"}
