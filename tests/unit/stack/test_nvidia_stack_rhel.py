"""RHEL family path of the nvidia_stack role: what it hands package_pin and dnf, checked on a fake node.

The role pins ``gpuops_resolved_stack.pins`` with its ``packages`` (package_pin locks the packages),
releases with ``state=present hold=false dnf_module_stream=<resolved dnf_module>`` before installing
``packages[].spec`` with the dnf module, then pins with ``state=present``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import package_index, stack_resolver
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.package_transition import superseded_packages
from ansible_collections.gpuops.cluster.plugins.modules import package_pin

# dnf repoquery output (package_index.DNF_QUERY_FORMAT) in the forms NVIDIA's RHEL 9 repository uses: drivers
# epoch 3 and "-1.el9" (tests/fixtures/package_index/rhel9-dnf-repoquery-kmod.txt), Fabric Manager and NSCQ "-1"
# without a dist tag (rhel8-yum-list-showduplicates-nvidia-fabric-manager.txt), DCGM with epoch 1 and a release
# (nvidia-stack-facts: datacenter-gpu-manager-4-core-1:4.5.2-1), the DCGM Exporter paired with DCGM 4.6.0 at
# <exporter>-1 without an epoch (matrix source dcgm_exporter_packages: rhel8
# datacenter-gpu-manager-exporter-4.5.0-1.x86_64.rpm). Built for this test at the versions it requests.
REPOQUERY = """\
nvidia-driver 3:550.127.05-1.el9 cuda-rhel9-x86_64
nvidia-driver 3:550.54.15-1.el9 cuda-rhel9-x86_64
nvidia-driver-cuda 3:550.127.05-1.el9 cuda-rhel9-x86_64
nvidia-driver-libs 3:550.127.05-1.el9 cuda-rhel9-x86_64
nvidia-persistenced 3:550.127.05-1.el9 cuda-rhel9-x86_64
kmod-nvidia-open-dkms 3:550.127.05-1.el9 cuda-rhel9-x86_64
nvidia-fabric-manager 0:550.127.05-1 cuda-rhel9-x86_64
libnvidia-nscq-550 0:550.127.05-1 cuda-rhel9-x86_64
cuda-toolkit-12-4 0:12.4.1-1 cuda-rhel9-x86_64
libnccl 0:2.25.1-1+cuda12.4 cuda-rhel9-x86_64
libnccl-devel 0:2.25.1-1+cuda12.4 cuda-rhel9-x86_64
datacenter-gpu-manager-4-core 1:4.6.0-1 cuda-rhel9-x86_64
datacenter-gpu-manager-4-cuda12 1:4.6.0-1 cuda-rhel9-x86_64
datacenter-gpu-manager-exporter 0:4.8.3-1 cuda-rhel9-x86_64
"""


@pytest.fixture(name="resolved")
def fixture_resolved():
    request = {"driver": "550.127.05", "cuda": "12.4", "dcgm": "4", "kernel_modules": "open"}
    stack = stack_resolver.resolve(request, "Rocky", "9.4", "h100-sxm", nvswitch=True)
    exact = package_index.resolve(
        stack["packages"],
        stack["pins"],
        stack["driver_request"],
        package_index.parse_dnf_repoquery(REPOQUERY),
        {},
        package_manager="dnf",
    )
    assert exact["problems"] == []
    return dict(stack, packages=exact["packages"], pins=exact["pins"])


@pytest.fixture(name="paths")
def fixture_paths(tmp_path):
    (tmp_path / "dnf").mkdir()
    return {"versionlock_path": str(tmp_path / "dnf" / "versionlock.list"), "package_manager": "dnf"}


def role_pins(resolved):
    return resolved["pins"]


def test_versionlock_takes_the_exact_packages_not_the_pin_globs(run_module, node, paths, resolved):
    # the resolver's pins carry globs (kmod-nvidia-*) that a versionlock list cannot hold
    assert any("*" in name for pin in resolved["pins"] for name in pin["names"])
    node.binaries = {"dnf", "rpm"}
    run_module(package_pin.main, {**paths, "packages": resolved["packages"], "pins": role_pins(resolved)})
    locked = Path(paths["versionlock_path"]).read_text()
    assert "*" not in locked.replace(".*\n", "\n")
    for package in resolved["packages"]:
        assert package["name"] + "-" in locked


def test_install_specs_are_name_epoch_version_release(resolved):
    specs = [p["spec"] for p in resolved["packages"]]
    assert "nvidia-driver-3:550.127.05-1.el9" in specs
    assert "kmod-nvidia-open-dkms-3:550.127.05-1.el9" in specs
    assert resolved["dnf_module"] == "nvidia-driver:550-open"


def test_release_switches_the_stream_and_drops_our_locks(run_module, node, paths, resolved):
    node.binaries = {"dnf", "rpm"}
    Path(paths["versionlock_path"]).write_text("kernel-0:5.14.0-427.42.1.el9_4.*\n")
    pinned = run_module(package_pin.main, {**paths, "packages": resolved["packages"], "pins": role_pins(resolved)})
    assert pinned["changed"] is True
    text = Path(paths["versionlock_path"]).read_text()
    assert text.startswith("kernel-0:5.14.0-427.42.1.el9_4.*\n")
    assert "nvidia-driver-3:550.127.05-1.el9.*\n" in text
    assert "kmod-nvidia-open-dkms-3:550.127.05-1.el9.*\n" in text
    assert "nvidia-fabric-manager-0:550.127.05-1.*\n" in text

    released = run_module(
        package_pin.main,
        {
            **paths,
            "packages": resolved["packages"],
            "pins": role_pins(resolved),
            "state": "present",
            "hold": False,
            "dnf_module_stream": resolved["dnf_module"],
        },
    )
    assert ["/usr/bin/dnf", "-y", "module", "enable", "nvidia-driver:550-open"] in released["commands"]
    assert node.enabled_streams == {"nvidia-driver": "550-open"}
    assert Path(paths["versionlock_path"]).read_text() == "kernel-0:5.14.0-427.42.1.el9_4.*\n"


def test_pin_after_install_is_idempotent(run_module, node, paths, resolved):
    node.binaries = {"dnf", "rpm"}
    node.enabled_streams = {"nvidia-driver": "550-open"}
    args = {
        **paths,
        "packages": resolved["packages"],
        "pins": role_pins(resolved),
        "dnf_module_stream": "nvidia-driver:550-open",
    }
    assert run_module(package_pin.main, args)["changed"] is True
    node.calls.clear()
    again = run_module(package_pin.main, args, check=True)
    assert again["changed"] is False
    # one rpm -qa (the installed packages the pins name, locked at the pin's version) and the enabled stream
    assert [call[:2] for call in node.calls] == [["/usr/bin/rpm", "-qa"], ["/usr/bin/dnf", "-q"]]
    assert node.calls[1] == ["/usr/bin/dnf", "-q", "module", "list", "--enabled", "nvidia-driver"]


def test_r580_move_on_rhel_removes_the_renamed_fabric_manager(resolved):
    installed = [p["name"] for p in resolved["packages"]]
    new = stack_resolver.resolve(
        {"driver": "580", "cuda": "13.0", "dcgm": "4", "kernel_modules": "open"},
        "Rocky",
        "9.4",
        "h100-sxm",
        nvswitch=True,
    )
    removed = superseded_packages(installed, new["packages"])
    assert "nvidia-fabric-manager" in removed
    assert "nvidia-fabricmanager" in {p["name"] for p in new["packages"]}
    assert not set(removed) & {p["name"] for p in new["packages"]}
