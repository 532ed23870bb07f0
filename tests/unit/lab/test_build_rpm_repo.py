"""The lab's RHEL 9 dnf repositories as build_rpm_repo.py expands them: epochs, releases, module streams."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ROOT / "extensions" / "molecule" / "lab" / "packages"
sys.path.insert(0, str(PACKAGES))

import build_rpm_repo  # the lab builder is no package: imported from its folder


@pytest.fixture(name="rhel9")
def fixture_rhel9():
    spec = yaml.safe_load((PACKAGES / "spec-rhel9.yml").read_text(encoding="utf-8"))
    return spec, build_rpm_repo.expand(spec)


def evrs(packages, name):
    return sorted(build_rpm_repo.evr(p) for p in packages if p["name"] == name)


def test_driver_packages_carry_epoch_3_and_the_el9_release(rhel9):
    _spec, packages = rhel9
    assert evrs(packages, "nvidia-driver") == ["3:580.126.20-1.el9", "3:580.95.05-1.el9", "3:595.71.05-1.el9"]
    assert evrs(packages, "kmod-nvidia-open-dkms") == evrs(packages, "nvidia-driver")


def test_fabric_manager_has_release_1_without_epoch_and_only_where_a_source_gives_it(rhel9):
    _spec, packages = rhel9
    assert evrs(packages, "nvidia-fabricmanager") == ["580.126.20-1", "580.95.05-1"]
    assert evrs(packages, "nvidia-fabric-manager-devel") == ["580.126.20-1", "580.95.05-1"]


def test_dcgm_4_carries_epoch_1(rhel9):
    _spec, packages = rhel9
    assert evrs(packages, "datacenter-gpu-manager-4-core") == ["1:4.5.2-1", "1:4.5.3-1"]


def test_dkms_and_epel_release_are_in_epel_not_in_nvidias_path(rhel9):
    spec, packages = rhel9
    where = {p["name"]: p["repository"] for p in packages}
    assert where["dkms"] == "epel"
    assert where["epel-release"] == "epel"
    assert ("dkms", "3.0.0-1.el9") not in build_rpm_repo.index(spec)


def test_streams_list_the_kernel_module_of_their_flavour_only(rhel9):
    spec, packages = rhel9
    documents = [
        yaml.safe_load(text) for text in build_rpm_repo.modules_yaml(spec, packages).split("...\n") if text.strip()
    ]
    streams = {
        (d["data"]["stream"], d["data"]["description"].split()[2]): d["data"]["artifacts"]["rpms"] for d in documents
    }
    assert set(streams) == {
        ("580-open", "580.95.05"),
        ("580-dkms", "580.95.05"),
        ("580-open", "580.126.20"),
        ("580-dkms", "580.126.20"),
        ("595-open", "595.71.05"),
        ("595-dkms", "595.71.05"),
    }
    open_580 = streams[("580-open", "580.95.05")]
    assert "kmod-nvidia-open-dkms-3:580.95.05-1.el9.noarch" in open_580
    assert not any(item.startswith("kmod-nvidia-latest-dkms") for item in open_580)
    assert "nvidia-driver-3:580.95.05-1.el9.x86_64" in open_580
    # Fabric Manager and DCGM are not modular: a stream never hides them
    assert not any(item.startswith(("nvidia-fabricmanager", "datacenter-gpu-manager")) for item in open_580)


def test_every_lab_stack_resolves_in_the_rhel9_repository(rhel9):
    spec, _packages = rhel9
    assert build_rpm_repo.build_repo.resolver_check(spec, build_rpm_repo.index(spec)) == len(spec["lab_stacks"])
