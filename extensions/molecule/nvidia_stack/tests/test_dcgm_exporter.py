"""Verify the DCGM Exporter on the lab after converge and side_effect.yml (gpuops_stack.dcgm_exporter: auto).

ns-h100 and ns-h200 request DCGM 4.5.2, so they get the exporter NVIDIA pairs with it (4.8.1, the stand-in
datacenter-gpu-manager-exporter 4.8.1-1 of the lab's debian12 repository, whose dcgm-exporter serves /metrics from
the simulated GPUs); ns-l40s and ns-ubuntu request no DCGM and get none. The role's report of the last run
(upgrade-report.json) carries the resolved stack.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml

with open(os.environ["MOLECULE_INVENTORY_FILE"], encoding="utf-8") as _handle:
    _INVENTORY = yaml.safe_load(_handle)
testinfra_hosts = [f"podman://{name}" for name in _INVENTORY["gpu_nodes"]["hosts"]]

STATE = "/var/lib/gpuops-test"
PACKAGE = "datacenter-gpu-manager-exporter"
DROPIN = "/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpuops.conf"
URL = "http://127.0.0.1:9400/metrics"
GET = (
    "python3 -c 'import sys, urllib.request, urllib.error\n"
    "try:\n"
    " r = urllib.request.urlopen(sys.argv[1], timeout=10); print(r.status); print(r.read().decode())\n"
    "except urllib.error.HTTPError as e:\n"
    " print(e.code)' {}"
)


@pytest.fixture(name="exporter")
def fixture_exporter(host):
    report = json.loads(host.file(f"{STATE}/upgrade-report.json").content_string)
    return report["resolved"].get("dcgm_exporter")


def scrape(host):
    out = host.check_output(GET.format(URL))
    status, _sep, text = out.partition("\n")
    return int(status), text


def main_pid(host):
    return host.check_output("systemctl show -p MainPID --value nvidia-dcgm-exporter")


def test_the_exporter_comes_with_dcgm_at_the_paired_release_held_and_pinned(host, exporter):
    package = host.package(PACKAGE)
    if exporter is None:
        assert not package.is_installed
        assert not host.file(DROPIN).exists
        return
    assert exporter == {"version": "4.8.1", "dcgm": "4.5.2", "package": PACKAGE, "service": "nvidia-dcgm-exporter"}
    if host.system_info.distribution == "rocky":  # the dnf node: the RPM's version-release, locked by versionlock
        assert host.check_output(f"rpm -q --qf '%{{VERSION}}-%{{RELEASE}}' {PACKAGE}") == "4.8.1-1"
        locks = host.file("/etc/dnf/plugins/versionlock.list").content_string.split()
        assert f"{PACKAGE}-0:4.8.1-1.*" in locks
        return
    assert package.version == "4.8.1-1"
    assert PACKAGE in host.check_output("apt-mark showhold").split()
    preferences = host.file("/etc/apt/preferences.d/gpuops-nvidia.pref").content_string
    assert f"Package: {PACKAGE}\nPin: version 4.8.1-1" in preferences


def test_the_service_runs_with_the_roles_dropin(host, exporter):
    if exporter is None:
        pytest.skip("no DCGM on this node")
    dropin = host.file(DROPIN)
    assert (dropin.mode, dropin.user, dropin.group) == (0o644, "root", "root")
    assert "PartOf=nvidia-dcgm.service" in dropin.content_string
    assert "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv -a :9400 -r localhost:5555" in (
        dropin.content_string
    )
    service = host.service("nvidia-dcgm-exporter")
    assert service.is_enabled
    assert service.is_running
    # systemd took the drop-in: the running ExecStart is the drop-in's
    assert "-r localhost:5555" in host.check_output("systemctl show -p ExecStart --value nvidia-dcgm-exporter")


def test_the_endpoint_serves_every_simulated_gpu(host, exporter):
    if exporter is None:
        pytest.skip("no DCGM on this node")
    gpus = [line for line in host.check_output("nvidia-smi -L").splitlines() if line.startswith("GPU ")]
    status, text = scrape(host)
    assert status == 200, text
    temps = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert len(temps) == len(gpus) > 0
    for gpu in gpus:
        uuid = gpu.rsplit("UUID: ", 1)[1].rstrip(")")
        assert any(f'UUID="{uuid}"' in line for line in temps), uuid


def test_a_host_engine_restart_restarts_the_exporter(host, exporter):
    """PartOf=nvidia-dcgm.service: without it the stand-in, bound to the old host engine, answers 503 (stale)."""
    if exporter is None:
        pytest.skip("no DCGM on this node")
    before = main_pid(host)
    host.check_output("systemctl restart nvidia-dcgm")
    after = main_pid(host)
    assert after not in (before, "0")
    status = 0
    for _attempt in range(20):  # the new exporter waits for the new host engine's ready file
        status, text = scrape(host) if host.run(GET.format(URL)).rc == 0 else (0, "")
        if status == 200:
            break
        host.run("sleep 0.5")
    assert status == 200, text
