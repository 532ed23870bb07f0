"""Verify the lab smoke scenario through podman:// hosts (one podman exec per check)."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest
import yaml

with open(os.environ["MOLECULE_INVENTORY_FILE"], encoding="utf-8") as _handle:
    _INVENTORY = yaml.safe_load(_handle)
testinfra_hosts = [f"podman://{name}" for name in _INVENTORY["lab_nodes"]["hosts"]]

DRIVER = "550.127.05-1"
REPO = "http://gpuops-repo/compute/cuda/repos/debian12/x86_64/"


def simulated_gpus(host):
    """The node's GPU description that the shared prepare wrote from its inventory."""
    return json.loads(host.file("/etc/gpuops-lab/gpus.json").content_string)


def test_keyring_is_a_binary_keyring_used_by_signed_by(host):
    keyring = host.file("/usr/share/keyrings/gpuops-lab-archive-keyring.gpg")
    assert keyring.is_file
    assert keyring.mode == 0o644
    source = host.file("/etc/apt/sources.list.d/gpuops-lab-cuda.sources").content_string
    assert "Signed-By: /usr/share/keyrings/gpuops-lab-archive-keyring.gpg" in source
    assert f"URIs: {REPO}" in source


def test_driver_installed_at_the_exact_version(host):
    for name in ("nvidia-driver", "nvidia-smi", "libnvidia-ml1", "nvidia-kernel-dkms", "nvidia-persistenced"):
        assert host.package(name).is_installed, name
        assert host.package(name).version == DRIVER, name


def test_newer_release_is_published_but_not_installed(host):
    policy = host.check_output("apt-cache policy nvidia-driver")
    assert "550.127.08-1" in policy
    assert "580.65.06-1" in policy
    assert f"Installed: {DRIVER}" in policy


def test_nvidia_smi_reports_the_node(host):
    smi = host.run("nvidia-smi -q -x")
    assert smi.rc == 0, smi.stdout
    root = ET.fromstring(smi.stdout.split("\n", 2)[2])
    expected = simulated_gpus(host)
    assert root.findtext("driver_version") == "550.127.05"
    assert root.findtext("attached_gpus") == str(expected["count"])
    assert root.find("gpu").findtext("persistence_mode") == "Enabled"
    assert host.file("/run/gpuops-lab/nvidia-version").contains("  550.127.05  ")


def test_persistenced_runs(host):
    service = host.service("nvidia-persistenced")
    assert service.is_running
    assert service.is_enabled


def test_fabricmanager_only_on_nvswitch_nodes(host):
    nvswitch = simulated_gpus(host)["nvswitch"]
    package = host.package("nvidia-fabricmanager-550")
    if nvswitch:
        assert package.version == DRIVER
        assert host.service("nvidia-fabricmanager").is_running
        assert "<state>Completed</state>" in host.check_output("nvidia-smi -q -x")
    else:
        assert not package.is_installed


def test_fabricmanager_depends_on_the_exact_driver(host):
    depends = host.check_output("apt-cache show nvidia-fabricmanager-550=550.127.08-1 | sed -n 's/^Depends: //p'")
    assert "nvidia-driver (= 550.127.08-1)" in depends


def test_wrong_key_is_refused(host):
    sources = f"deb [signed-by=/tmp/wrong.gpg] {REPO} /\n"
    fetch = host.run(
        'python3 -c \'import urllib.request as u; u.urlretrieve("http://gpuops-repo/keys/gpuops-lab-wrong-keyring.gpg",'
        ' "/tmp/wrong.gpg")\''
    )
    assert fetch.rc == 0, fetch.stderr
    host.run(f"printf '{sources}' > /tmp/wrong.list && mkdir -p /tmp/wrong-lists/partial")
    update = host.run(
        "apt-get update -o Dir::Etc::sourcelist=/tmp/wrong.list -o Dir::Etc::sourceparts=- "
        "-o Dir::State::Lists=/tmp/wrong-lists -o APT::Get::List-Cleanup=0"
    )
    assert update.rc != 0
    assert "NO_PUBKEY" in update.stderr or "not signed" in update.stderr


@pytest.mark.parametrize("code", [79])
def test_fault_injection_reaches_nvidia_smi_and_the_kernel_log(host, code):
    try:
        host.check_output("gpuops-lab-fault row-remap-pending --gpu 0")
        host.check_output("gpuops-lab-fault nvlink-down --gpu 0 --link 1")
        host.check_output(f"gpuops-lab-fault xid --gpu 0 --code {code}")
        assert "<remapped_row_pending>Yes</remapped_row_pending>" in host.check_output("nvidia-smi -q -x -i 0")
        assert f"): {code}, " in host.file("/var/log/gpuops-lab/kern.log").content_string
        if simulated_gpus(host)["nvswitch"]:
            assert "Link 1: <inactive>" in host.check_output("nvidia-smi nvlink -s -i 0")
    finally:
        host.run("gpuops-lab-fault clear; rm -f /var/log/gpuops-lab/kern.log")
