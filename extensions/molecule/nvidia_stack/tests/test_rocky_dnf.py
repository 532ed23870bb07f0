"""The dnf node ns-rocky (Debian's real dnf 4 and rpm, presenting Rocky 9) after converge and side_effect.yml.

ns-rocky was converged on driver 580.95.05 (open kernel modules, stream nvidia-driver:580-open) with DCGM 4.5.2 from
the rhel9 stand-in repository (extensions/molecule/lab/packages/spec-rhel9.yml), EPEL and CRB added by the role where
missing; side_effect.yml ran `dnf -y upgrade` while the repository served 580.126.20 in the same stream and DCGM
4.5.3 (kept in dnf-upgrade.txt), a check-mode move, then moved the node to 580.126.20 (lab_upgrade_stack); then
(rocky_dnf.yml) a branch change to 595.71.05 through the module stream and the rollback to 580.95.05, each in
check mode first. Snapshots of the installed packages (rpm), the role's reports and the enabled streams are in
/var/lib/gpuops-test/.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

testinfra_hosts = ["podman://ns-rocky"]

STATE = "/var/lib/gpuops-test"
RUNS = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "")) / "lab-runs.jsonl"
LOCKS = "/etc/dnf/plugins/versionlock.list"
CONVERGED = "3:580.95.05-1.el9"
UPGRADED = "3:580.126.20-1.el9"
BRANCH = "3:595.71.05-1.el9"
DRIVER_PARTS = (
    "nvidia-driver",
    "nvidia-driver-cuda",
    "nvidia-driver-libs",
    "nvidia-persistenced",
    "nvidia-kmod-common",
    "kmod-nvidia-open-dkms",
)
# What a re-run of playbooks/nvidia_stack.yml on a converged node runs there, as on the apt nodes: the repository
# check (yum_repository), the one read (gpu_stack_facts) and the one node_stack call (blacklist, versionlocks).
RERUN_EXECUTIONS = 3


def snapshot(host, phase):
    text = host.file(f"{STATE}/{phase}.txt").content_string
    return {line.split()[1]: line.split()[2] for line in text.splitlines() if line.startswith("ii ")}


def rpm_evr(host, name):
    return host.check_output(f"rpm -q --qf '%{{EPOCHNUM}}:%{{VERSION}}-%{{RELEASE}}' {name}")


def report_of(host, step):
    return json.loads(host.file(f"{STATE}/{step}-report.json").content_string)


@pytest.fixture(name="report")
def fixture_report(host):
    """The last move's report: the rollback."""
    return report_of(host, "rollback")


def test_node_presents_rocky_9_to_ansible_and_dnf(host):
    assert host.system_info.distribution == "rocky"
    assert host.system_info.release.startswith("9")
    assert 'PLATFORM_ID="platform:el9"' in host.file("/etc/os-release").content_string
    assert host.file("/etc/redhat-release").linked_to == "/etc/rocky-release"


def test_converge_installed_the_matrix_release_with_its_epochs(host):
    converged = snapshot(host, "converged")
    for name in ("nvidia-driver", "nvidia-driver-cuda", "nvidia-driver-libs", "nvidia-persistenced"):
        assert converged[name] == CONVERGED, converged
    assert converged["kmod-nvidia-open-dkms"] == CONVERGED
    assert converged["nvidia-kmod-common"] == CONVERGED  # the kmod's dependency, at the same release
    assert converged["datacenter-gpu-manager-4-core"] == "1:4.5.2-1"
    assert "kmod-nvidia-latest-dkms" not in converged  # open modules: not the proprietary flavour


def test_epel_and_crb_were_added_because_they_were_missing(host):
    epel = host.file("/etc/yum.repos.d/epel.repo")
    assert epel.exists
    assert "baseurl=http://gpuops-repo/epel/9/Everything/x86_64/" in epel.content_string
    assert host.package("epel-release").is_installed
    assert host.package("dkms").is_installed  # kmod-nvidia-open-dkms requires it, from EPEL only
    repolist = host.check_output("dnf -q repolist --enabled")
    assert "crb" in repolist.split()
    assert "epel" in repolist.split()
    # EPEL's key came in before its release package (the role's rpm_key): dnf verified the package
    keys = host.check_output("rpm -q gpg-pubkey --qf '%{SUMMARY}\\n'")
    assert "gpuops lab stand-in NVIDIA repository" in keys


def test_the_stream_of_the_resolved_branch_is_enabled(host):
    enabled = host.check_output("dnf -q module list --enabled nvidia-driver")
    assert "580-open [e]" in enabled


def test_dnf_upgrade_kept_every_locked_package_while_newer_ones_were_served(host):
    output = host.file(f"{STATE}/dnf-upgrade.txt").content_string
    assert "Nothing to do." in output, output
    assert "cannot install the best update candidate" not in output
    assert snapshot(host, "after-upgrades") == snapshot(host, "converged")
    served = host.check_output("dnf -q repoquery --disable-modular-filtering --showduplicates nvidia-driver")
    assert "nvidia-driver-3:580.126.20-1.el9.x86_64" in served  # the newer release was there to take


def test_refused_and_check_mode_runs_changed_nothing(host):
    converged = snapshot(host, "converged")
    assert snapshot(host, "after-refused") == converged
    assert snapshot(host, "after-check-move") == converged


def test_upgrade_within_the_branch_moved_every_driver_package(host):
    upgraded = snapshot(host, "upgraded")
    for name in DRIVER_PARTS:
        assert upgraded[name] == UPGRADED
    assert upgraded["datacenter-gpu-manager-4-core"] == "1:4.5.2-1"  # DCGM asked for 4.5.2 still
    assert report_of(host, "upgrade")["report"]["driver_version"] == "580.126.20"


def test_branch_change_switched_the_stream_and_was_predicted_in_check_mode(host):
    assert snapshot(host, "branch-check") == snapshot(host, "upgraded")  # check mode changed nothing
    assert "580-open [e]" in host.file(f"{STATE}/branch-check-stream.txt").content_string
    branch = snapshot(host, "branch")
    for name in DRIVER_PARTS:
        assert branch[name] == BRANCH
    assert "595-open [e]" in host.file(f"{STATE}/branch-stream.txt").content_string
    assert report_of(host, "branch")["report"]["driver_version"] == "595.71.05"


def test_rollback_returned_to_the_converged_release_and_stream(host, report):
    assert snapshot(host, "rollback-check") == snapshot(host, "branch")
    assert snapshot(host, "rollback") == snapshot(host, "converged")
    assert "580-open [e]" in host.file(f"{STATE}/rollback-stream.txt").content_string
    assert report["report"]["driver_version"] == "580.95.05"


def test_the_locks_hold_the_last_release_one_lock_a_name(host):
    locks = host.file(LOCKS).content_string
    for name in DRIVER_PARTS:
        assert f"{name}-{CONVERGED}.*" in locks
        assert f"{name}-{UPGRADED}.*" not in locks
        assert f"{name}-{BRANCH}.*" not in locks
    assert "datacenter-gpu-manager-4-core-1:4.5.2-1.*" in locks
    # and dnf upgrade, with newer releases in the stream and a newer DCGM, still has nothing to do
    assert "Nothing to do." in host.check_output("dnf -y upgrade 2>&1")


def test_every_installed_package_is_at_its_locked_version(host, report):
    for name, version in report["report"]["packages"].items():
        assert rpm_evr(host, name) == (version if ":" in version else f"0:{version}")


def test_idempotent_rerun_runs_three_modules_and_changes_nothing(host):
    runs = [json.loads(line) for line in RUNS.read_text(encoding="utf-8").splitlines()]
    converges = [run for run in runs if run["playbook"] == "converge.yml" and not run["check"]]
    assert len(converges) >= 2, runs
    rerun = converges[1]
    assert rerun["changed"]["ns-rocky"] == 0
    assert rerun["failures"]["ns-rocky"] == 0
    assert rerun["executions"]["ns-rocky"] == RERUN_EXECUTIONS


def test_loaded_module_is_the_installed_driver_and_the_services_run(host, report):
    driver = report["report"]["driver_version"]
    assert host.file("/run/gpuops-lab/nvidia-version").contains(f"  {driver}  ")
    assert host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").splitlines()[0] == driver
    for unit in ("nvidia-persistenced", "nvidia-dcgm"):
        assert host.service(unit).is_enabled
        assert host.service(unit).is_running
    assert not host.file("/usr/lib/systemd/system/nvidia-fabricmanager.service").exists  # an L40S: no NVSwitch
