"""Verify gpuops.cluster.nvidia_stack on the lab after converge and side_effect.yml.

State checked: the nodes were converged on 550.127.05, then moved by side_effect.yml to each host's
``lab_upgrade_stack`` (ns-h100: the R580 branch; the others: 550.127.08). The side effect leaves
snapshots of the installed NVIDIA packages in /var/lib/gpuops-test/ (converged, after-upgrades,
after-wrong-key, upgraded) and the role's report with the resolved stack (upgrade-report.json).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

with open(os.environ["MOLECULE_INVENTORY_FILE"], encoding="utf-8") as _handle:
    _INVENTORY = yaml.safe_load(_handle)
testinfra_hosts = [f"podman://{name}" for name in _INVENTORY["gpu_nodes"]["hosts"]]

ROOT = Path(__file__).resolve().parents[4]
LAB_KEY = ROOT / ".lab" / "repo" / "keys" / "gpuops-lab-archive-keyring.gpg"
REPO = "http://gpuops-repo/compute/cuda/repos/debian12/x86_64/"
STATE = "/var/lib/gpuops-test"


def name_of(host):
    return host.backend.get_hostname()


def snapshot(host, phase):
    """{package: version} of the installed NVIDIA packages at one phase of side_effect.yml."""
    text = host.file(f"{STATE}/{phase}.txt").content_string
    return {line.split()[1]: line.split()[2] for line in text.splitlines() if line[1:2] == "i"}


@pytest.fixture(name="report")
def fixture_report(host):
    return json.loads(host.file(f"{STATE}/upgrade-report.json").content_string)


def test_keyring_is_the_repository_key_and_named_in_signed_by(host):
    keyring = host.file("/etc/apt/keyrings/gpuops-nvidia-cuda.gpg")
    assert keyring.is_file
    assert keyring.mode & 0o004, "apt (_apt user) must be able to read the keyring"
    assert keyring.sha256sum == hashlib.sha256(LAB_KEY.read_bytes()).hexdigest()
    source = host.file("/etc/apt/sources.list.d/gpuops-nvidia-cuda.sources").content_string
    assert "Signed-By: /etc/apt/keyrings/gpuops-nvidia-cuda.gpg" in source
    assert f"URIs: {REPO}" in source


def test_every_resolved_package_is_at_its_exact_version_held_and_pinned(host, report):
    held = set(host.check_output("apt-mark showhold").split())
    preferences = host.file("/etc/apt/preferences.d/gpuops-nvidia.pref").content_string
    # the exact versions the role took from the repository's index (the resolved stack gives upstream versions)
    exact = report["report"]["packages"]
    assert sorted(exact) == sorted(p["name"] for p in report["resolved"]["packages"])
    for name, version in exact.items():
        installed = host.package(name)
        assert installed.is_installed, name
        assert installed.version == version, name
        assert name in held, name
        assert f"Pin: version {version}" in preferences
    assert "Pin-Priority: 1001" in preferences
    assert "Pin-Priority: 500" not in preferences


def test_unattended_upgrades_blacklist_covers_the_stack(host, report):
    blacklist = host.file("/etc/apt/apt.conf.d/51gpuops-nvidia-blacklist").content_string
    assert "Unattended-Upgrade::Package-Blacklist" in blacklist
    assert '"nvidia-";' in blacklist or '"nvidia-"' in blacklist


def test_newer_releases_moved_no_pinned_package(host):
    converged = snapshot(host, "converged")
    assert converged.get("nvidia-driver") == "550.127.05-1"
    # the repository publishes 550.127.08 and 580.65.06: apt-get upgrade/dist-upgrade and
    # unattended-upgrades (allowed to take the lab origin) must not have moved anything
    assert snapshot(host, "after-upgrades") == converged


def test_wrong_key_installed_nothing(host):
    if name_of(host) != "ns-l40s":
        pytest.skip("the wrong-key run targets ns-l40s only")
    # the wrong-key run requested 550.127.08: nothing may have moved towards it
    assert snapshot(host, "after-wrong-key") == snapshot(host, "after-upgrades")


def test_changed_request_moved_exactly_the_resolved_packages(host, report):
    before, after = snapshot(host, "converged"), snapshot(host, "upgraded")
    resolved = report["report"]["packages"]
    moved = {name for name in set(before) | set(after) if before.get(name) != after.get(name)}
    expected = {name for name, version in resolved.items() if before.get(name) != version}
    expected |= set(report["report"]["removed"])
    assert moved == expected
    for name in set(before) - set(resolved) - set(report["report"]["removed"]):
        assert after[name] == before[name], f"{name} moved although it is not in the new stack"


def test_a_downgrade_returns_to_exactly_the_older_release(host):
    """550.127.08 -> 550.127.05 through the role, past its own pins and holds."""
    if name_of(host) != "ns-l40s":
        pytest.skip("the downgrade runs on ns-l40s")
    assert snapshot(host, "downgraded") == snapshot(host, "converged")
    assert snapshot(host, "downgraded") != snapshot(host, "upgraded")


def test_branch_change_replaced_the_old_branch_packages(host, report):
    if name_of(host) != "ns-h100":
        pytest.skip("only ns-h100 changes branch (R550 -> R580)")
    after = snapshot(host, "upgraded")
    assert sorted(report["report"]["removed"]) == [
        "cuda-drivers-550",
        "datacenter-gpu-manager-4-cuda12",
        "libnvidia-nscq-550",
        "nvidia-fabricmanager-550",
        "nvidia-kernel-dkms",
    ]
    assert after["nvidia-fabricmanager"] == "580.65.06-1"
    assert after["nvidia-kernel-open-dkms"] == "580.65.06-1"
    # CUDA toolkits install side by side: the old one stays, no longer held
    assert after["cuda-toolkit-12-4"] == "12.4.1-1"
    assert "cuda-toolkit-12-4" not in host.check_output("apt-mark showhold").split()


def test_loaded_module_is_the_installed_driver_after_the_reboot(host, report):
    driver = report["report"]["driver_version"]
    assert host.file("/run/gpuops-lab/nvidia-version").contains(f"  {driver}  ")
    assert host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").splitlines()[0] == driver
    assert report["report"]["rebooted"] is True
    assert report["report"]["reboot_required"] is False
    assert report["report"]["reboot_reasons"] == []


def test_persistenced_runs(host):
    service = host.service("nvidia-persistenced")
    assert service.is_enabled
    assert service.is_running


def test_fabric_manager_only_on_nvswitch_nodes_and_follows_the_driver(host, report):
    if report["resolved"]["fabricmanager"]:
        service = host.service("nvidia-fabricmanager")
        assert service.is_enabled
        assert service.is_running
        fabric = [p for p in report["resolved"]["packages"] if p["component"] == "fabricmanager"]
        assert fabric
        exact = report["report"]["packages"]
        assert all(exact[p["name"]] == report["report"]["driver_version"] + "-1" for p in fabric)
    else:
        assert not host.exists("nv-fabricmanager")
        assert not host.file("/lib/systemd/system/nvidia-fabricmanager.service").exists


def test_dcgm_host_engine_runs_when_requested(host, report):
    if report["resolved"]["dcgm"] is None:
        assert not host.package("datacenter-gpu-manager-4-core").is_installed
        return
    service = host.service("nvidia-dcgm")
    assert service.is_enabled
    assert service.is_running


def test_nouveau_is_blacklisted(host):
    blacklist = host.file("/etc/modprobe.d/gpuops-blacklist-nouveau.conf")
    assert (blacklist.mode, blacklist.user, blacklist.group) == (0o644, "root", "root")
    conf = blacklist.content_string
    assert "blacklist nouveau" in conf
    assert "options nouveau modeset=0" in conf
