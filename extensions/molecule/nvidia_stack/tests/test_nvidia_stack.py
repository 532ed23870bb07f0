"""Verify gpuops.cluster.nvidia_stack on the lab after converge and side_effect.yml.

State checked: the Debian 12 nodes were converged on 550.127.05 and ns-ubuntu (presenting Ubuntu 22.04,
the ubuntu2204 repository layout) on 580.65.06-0ubuntu1; side_effect.yml then moved each to its
``lab_upgrade_stack`` (ns-h100: the R580 branch; ns-ubuntu: the R580 branch's newest release in its
repository, 580.126.20-1ubuntu1; the others: 550.127.08). The side effect leaves snapshots of the installed
NVIDIA packages in /var/lib/gpuops-test/ (converged, after-upgrades, after-wrong-key, after-refused,
after-partial-mirror, upgraded) and the role's report with the resolved stack (upgrade-report.json); on ns-l40s,
whose last move ran while nvidia-persistenced could not start, what that run did (persistenced-failure.json);
every ansible-playbook run's remote module executions per host are in lab-runs.jsonl in the ephemeral directory.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from pathlib import Path

import pytest
import yaml

with open(os.environ["MOLECULE_INVENTORY_FILE"], encoding="utf-8") as _handle:
    _INVENTORY = yaml.safe_load(_handle)
# The dnf node presenting Rocky 9 has its own checks (test_rocky_dnf.py): these read apt's files and dpkg.
testinfra_hosts = [f"podman://{name}" for name in _INVENTORY["gpu_nodes"]["hosts"] if name != "ns-rocky"]

ROOT = Path(__file__).resolve().parents[4]
LAB_KEY = ROOT / ".lab" / "repo" / "keys" / "gpuops-lab-archive-keyring.gpg"
REPOS = {"ns-ubuntu": "http://gpuops-repo/compute/cuda/repos/ubuntu2204/x86_64/"}
DEBIAN_REPO = "http://gpuops-repo/compute/cuda/repos/debian12/x86_64/"
STATE = "/var/lib/gpuops-test"
RUNS = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "")) / "lab-runs.jsonl"
# What a re-run of playbooks/nvidia_stack.yml on a converged node runs there: the repository check, the one read
# of the stack and its package index, and the one node_stack call (nouveau blacklist and pins); site.yml adds
# node_tuning and gpu_health for its five (README).
RERUN_EXECUTIONS = 3
# What each node was converged on (molecule.yml's gpuops_stack): the driver package and its exact version.
CONVERGED_DRIVER = {"ns-ubuntu": ("nvidia-driver-580-open", "580.65.06-0ubuntu1")}


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
    assert f"URIs: {REPOS.get(name_of(host), DEBIAN_REPO)}" in source


def test_debian_contrib_beside_the_node_s_archive_signed_as_its_own_entry(host):
    if name_of(host) in REPOS:
        pytest.skip("Ubuntu needs no OS repository beside NVIDIA's")
    # molecule.yml: ns-l40s's archive entry names its own key file; the others set none (the Debian keyring)
    signed_by = {"ns-l40s": "/etc/apt/trusted.gpg.d/debian-archive-bookworm-stable.asc"}.get(
        name_of(host), "/usr/share/keyrings/debian-archive-keyring.gpg"
    )
    source = host.file("/etc/apt/sources.list.d/gpuops-debian-contrib.sources").content_string
    assert "URIs: http://deb.debian.org/debian" in source
    assert "Suites: bookworm" in source
    assert "Components: contrib" in source
    assert f"Signed-By: {signed_by}" in source
    # apt reads the sources without "Conflicting values set for option Signed-By" and has contrib's lists
    policy = host.run("LC_ALL=C apt-cache policy")
    assert policy.rc == 0, policy.stderr
    assert "Conflicting" not in policy.stderr
    assert any(
        "o=Debian" in line and "n=bookworm" in line and "c=contrib" in line for line in policy.stdout.splitlines()
    ), policy.stdout


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
    entries = [line.strip().strip('";') for line in blacklist.splitlines() if line.strip().endswith('";')]
    for name in report["report"]["packages"]:
        assert any(re.match(entry, name) for entry in entries), name
    # what the collection pins and nothing else: an NVIDIA package it does not manage keeps its updates
    assert "nvidia-" not in entries
    if "nvidia-container-toolkit" not in report["report"]["packages"]:
        toolkit = ("nvidia-container-toolkit", "libnvidia-container1")
        assert not any(re.match(entry, name) for entry in entries for name in toolkit)


def test_newer_releases_moved_no_pinned_package(host):
    converged = snapshot(host, "converged")
    driver, version = CONVERGED_DRIVER.get(name_of(host), ("nvidia-driver", "550.127.05-1"))
    assert converged.get(driver) == version
    # the repository publishes newer releases (debian12: 550.127.08, 580.65.06; ubuntu2204: 580.126.20 and
    # later branches): apt-get upgrade/dist-upgrade and
    # unattended-upgrades (allowed to take the lab origin) must not have moved anything
    assert snapshot(host, "after-upgrades") == converged


def test_wrong_key_installed_nothing(host):
    if name_of(host) != "ns-l40s":
        pytest.skip("the wrong-key run targets ns-l40s only")
    # the wrong-key run requested 550.127.08: nothing may have moved towards it
    assert snapshot(host, "after-wrong-key") == snapshot(host, "after-upgrades")


def test_changed_request_moved_exactly_the_resolved_packages(host, report):
    """Only the resolved packages, the removed ones and what a pin of the new stack holds at its driver moved.

    On Ubuntu the driver metapackage's Depends (= version) move with it (libnvidia-compute-580, ...): the
    resolved stack names the metapackage only, its pins cover them (nvidia-*-580, libnvidia-*-580).
    """
    before, after = snapshot(host, "converged"), snapshot(host, "upgraded")
    resolved = report["report"]["packages"]
    removed = set(report["report"]["removed"])
    moved = {name for name in set(before) | set(after) if before.get(name) != after.get(name)}
    expected = {name for name, version in resolved.items() if before.get(name) != version} | removed
    assert expected <= moved
    driver = report["report"]["driver_version"]
    globs = [glob for pin in report["resolved"]["pins"] for glob in pin["names"]]
    for name in moved - expected:
        assert any(fnmatch.fnmatchcase(name, glob) for glob in globs), f"{name} moved although no pin holds it"
        assert after.get(name, "").startswith(f"{driver}-"), f"{name} moved to {after.get(name)}, not to {driver}"
    for name in set(before) - set(resolved) - removed - moved:
        assert after[name] == before[name]


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


def test_refused_release_changed_nothing_on_any_node(host):
    """refused.yml: ns-ubuntu asked for 580.105.08, which its repository lacks; every other node asked for a change."""
    assert snapshot(host, "after-refused") == snapshot(host, "after-upgrades")


def test_check_mode_move_changed_nothing(host):
    """upgrade.yml with --check --diff (side_effect.yml checked it predicted ns-h100's flavour change and failed on
    no node): no package moved, no hold or pin released."""
    # the whole lines: the selection state (h: held) with each package and version
    lines = {phase: host.file(f"{STATE}/{phase}.txt").content_string for phase in ("after-check-move", "after-refused")}
    assert lines["after-check-move"] == lines["after-refused"]
    assert any(line.startswith("h") for line in lines["after-check-move"].splitlines())


def test_mirror_without_fabric_manager_installed_nothing(host):
    if name_of(host) != "ns-ubuntu":
        pytest.skip("the partial mirror is ubuntu2204's")
    assert snapshot(host, "after-partial-mirror") == snapshot(host, "after-refused")


def test_node_presents_ubuntu_2204(host):
    if name_of(host) != "ns-ubuntu":
        pytest.skip("ns-ubuntu presents Ubuntu 22.04")
    assert (host.system_info.distribution, host.system_info.release) == ("ubuntu", "22.04")


def test_branch_request_took_a_release_newer_than_the_matrix_lists(host, report):
    """The R580 branch resolved, in the node's index, to 580.126.20, which the operator's matrix copy does not list."""
    if name_of(host) != "ns-ubuntu":
        pytest.skip("ns-ubuntu validates against the operator's matrix copy")
    resolved = report["resolved"]
    assert resolved["driver_request"]["branch"] == "580"
    assert resolved["driver_request"]["exact"] is None
    # the resolved stack's driver_version is the newest release the matrix lists for the branch
    assert resolved["driver_version"] == "580.105.08"
    assert report["report"]["driver_version"] == "580.126.20"


def test_upgrade_within_r580_crossed_the_revision_change(host, report):
    """580.65.06-0ubuntu1 -> 580.126.20-1ubuntu1; Fabric Manager and NSCQ at -1 both sides (their own revision)."""
    if name_of(host) != "ns-ubuntu":
        pytest.skip("ns-ubuntu moves within R580")
    before, after = snapshot(host, "converged"), snapshot(host, "upgraded")
    driver_packages = [
        "nvidia-driver-580-open",
        "nvidia-kernel-source-580-open",
        "libnvidia-compute-580",
        "nvidia-compute-utils-580",
        "nvidia-utils-580",
    ]
    assert {name: before[name] for name in driver_packages} == dict.fromkeys(driver_packages, "580.65.06-0ubuntu1")
    assert {name: after[name] for name in driver_packages} == dict.fromkeys(driver_packages, "580.126.20-1ubuntu1")
    for name in ("nvidia-fabricmanager", "libnvidia-nscq"):
        assert (before[name], after[name]) == ("580.65.06-1", "580.126.20-1")
    assert report["report"]["removed"] == []
    preferences = host.file("/etc/apt/preferences.d/gpuops-nvidia.pref").content_string
    assert "580.65.06" not in preferences
    assert "Pin: version 580.126.20-1ubuntu1" in preferences


def test_idempotent_rerun_runs_three_modules_and_changes_nothing(host):
    """molecule's idempotence run of converge.yml (the second, not in check mode), counted by the lab's callback."""
    runs = [json.loads(line) for line in RUNS.read_text(encoding="utf-8").splitlines()]
    converges = [run for run in runs if run["playbook"] == "converge.yml" and not run["check"]]
    assert len(converges) >= 2, runs
    rerun = converges[1]
    assert rerun["changed"][name_of(host)] == 0
    assert rerun["failures"][name_of(host)] == 0
    assert rerun["executions"][name_of(host)] == RERUN_EXECUTIONS


def test_loaded_module_is_the_installed_driver_after_the_reboot(host, report):
    driver = report["report"]["driver_version"]
    assert host.file("/run/gpuops-lab/nvidia-version").contains(f"  {driver}  ")
    assert host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").splitlines()[0] == driver
    assert report["report"]["rebooted"] is True
    assert report["report"]["reboot_required"] is False
    assert report["report"]["reboot_reasons"] == []


def test_persistenced_that_cannot_start_is_loaded_by_the_reboot(host):
    """side_effect.yml stopped nvidia-persistenced on ns-l40s and made its starts fail until the next reboot (the
    lab hook /run/gpuops-lab/fail-start/nvidia-persistenced, as when nouveau holds the GPUs on a first install),
    then moved the node 550.127.05 -> 550.127.08: the role's start failed and its rescue took it, the node
    rebooted, and the run ends with nvidia-persistenced running and no reboot asked for."""
    if name_of(host) != "ns-l40s":
        pytest.skip("the failing nvidia-persistenced is ns-l40s's, before its last move")
    record = json.loads(host.file(f"{STATE}/persistenced-failure.json").content_string)
    # the hook: a start failed before the run, with what the real daemon says
    assert "Unable to start service nvidia-persistenced" in record["hook"]["start"]
    assert "nvidia-persistenced failed to initialize" in record["hook"]["journal"]
    # the run (it passed: side_effect.yml checks its exit status) failed to start nvidia-persistenced and rescued it
    assert record["run"]["rescued"] == [1], record["run"]
    assert len(record["run"]["failures"]) == 1, record["run"]
    assert "Unable to start service nvidia-persistenced" in " ".join(record["run"]["failures"][0].split())
    # the node rebooted in that run: another PID 1, the flag on /run gone, and the role says so
    assert record["boot"]["after"] != record["boot"]["before"]
    assert record["flag_after_run"] is False
    report = record["report"]
    assert report["rebooted"] is True
    assert record["persistenced_after_run"] == "active"
    assert report["driver_version"] == "550.127.08"
    assert report["reboot_required"] is False
    assert "driver_not_loadable" not in report["reboot_reasons"]
    assert report["reboot_reasons"] == []


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
