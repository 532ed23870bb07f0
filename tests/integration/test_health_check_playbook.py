"""playbooks/health_check.yml: every node checked, one line each, a JSON report, one failure at the end."""

import json
import os
from pathlib import Path

import pytest
import yaml

from .playbook_run import REPO, run_playbook

pytestmark = pytest.mark.integration

FIXTURES = REPO / "tests" / "fixtures"
NODES = {
    "gpu-good": ("h100-sxm-8x-healthy.xml", "h100-8x-status-healthy.txt"),
    "gpu-remap": ("a100-sxm4-8x-row-remap-pending.xml", "h100-8x-status-healthy.txt"),
    "gpu-l40s": ("l40s-1x.xml", "l40s-status.txt"),
}
FAKE_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  "-q -x") cat {xml} ;;
  "nvlink -s") cat {nvlink} ;;
  *) echo "unsupported: $*" >&2; exit 2 ;;
esac
"""


def _inventory(tmp_path: Path, nodes) -> Path:
    hosts = {}
    for name, (xml, status) in nodes.items():
        binary = tmp_path / name / "nvidia-smi"
        binary.parent.mkdir()
        binary.write_text(
            FAKE_NVIDIA_SMI.format(xml=FIXTURES / "nvidia-smi" / xml, nvlink=FIXTURES / "nvlink" / status)
        )
        os.chmod(binary, 0o755)
        hosts[name] = {"gpuops_health_nvidia_smi_path": str(binary)}
    inventory = {
        "gpu_nodes": {
            "hosts": hosts,
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": str(REPO / ".venv" / "bin" / "python"),
                "ansible_become": False,
                "gpuops_health_kernel_log": str(FIXTURES / "kernel-log" / "clean-journal-short-iso.log"),
                "gpuops_health_infiniband_root": str(tmp_path),
                "gpuops_health_skip_checks": ["fabricmanager"],
            },
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def test_unhealthy_node_fails_the_run_once_after_every_node(tmp_path: Path):
    report = tmp_path / "report.json"
    run = run_playbook(
        "playbooks/health_check.yml",
        _inventory(tmp_path, NODES),
        tmp_path / "runner",
        extravars={"gpuops_health_report_path": str(report)},
    )
    assert run.status == "failed"
    assert run.rc == 2
    checked = {r.host for r in run.results_for(task="Judge GPUs, kernel log, NVLink, Fabric Manager and InfiniBand")}
    assert checked == set(NODES)
    lines = {r.host: r.result["msg"] for r in run.results_for(task="Print one line for this node")}
    assert lines["gpu-good"].startswith("HEALTHY")
    assert lines["gpu-remap"].startswith("UNHEALTHY gpu-remap action=reset_gpu")
    (failure,) = run.failures
    assert failure.task == "Fail the run when any node is unhealthy"
    assert "gpu-remap" in failure.result["msg"]
    document = json.loads(report.read_text())
    assert document["unhealthy"] == ["gpu-remap"]
    assert {node["host"]: node["healthy"] for node in document["nodes"]} == {
        "gpu-good": True,
        "gpu-remap": False,
        "gpu-l40s": True,
    }


def test_healthy_cluster_passes(tmp_path: Path):
    report = tmp_path / "report.json"
    healthy = {name: NODES[name] for name in ("gpu-good", "gpu-l40s")}
    run = run_playbook(
        "playbooks/health_check.yml",
        _inventory(tmp_path, healthy),
        tmp_path / "runner",
        extravars={"gpuops_health_report_path": str(report)},
    )
    assert run.status == "successful", run.stdout[-2000:]
    assert json.loads(report.read_text())["unhealthy"] == []


def test_a_run_limited_to_an_unhealthy_node_fails(tmp_path: Path):
    """``--limit node`` leaves localhost out: the summary and the failure still come, from the nodes' play."""
    report = tmp_path / "report.json"
    run = run_playbook(
        "playbooks/health_check.yml",
        _inventory(tmp_path, NODES),
        tmp_path / "runner",
        extravars={"gpuops_health_report_path": str(report)},
        limit="gpu-remap",
    )
    assert run.status == "failed"
    assert run.rc == 2
    (failure,) = run.failures
    assert failure.task == "Fail the run when any node is unhealthy"
    assert "gpu-remap" in failure.result["msg"]
    assert json.loads(report.read_text())["unhealthy"] == ["gpu-remap"]


def test_a_run_limited_to_a_healthy_node_passes(tmp_path: Path):
    report = tmp_path / "report.json"
    run = run_playbook(
        "playbooks/health_check.yml",
        _inventory(tmp_path, NODES),
        tmp_path / "runner",
        extravars={"gpuops_health_report_path": str(report)},
        limit="gpu-good",
    )
    assert run.status == "successful", run.stdout[-2000:]
    assert [node["host"] for node in json.loads(report.read_text())["nodes"]] == ["gpu-good"]


MIG_LAYOUTS = {
    "version": "v1",
    "mig-configs": {
        "as-built": [
            {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}}
        ],
        "all-1g.18gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}],
    },
}


def test_a_node_whose_mig_layout_differs_from_the_declared_one_fails_naming_the_gpu(tmp_path: Path):
    """Two H200s with the same layout (the real MIG capture): the one that declares another layout fails."""
    nodes = {name: ("h200-1x-mig-3211.xml", "h200-1x-vm-status-empty.txt") for name in ("mig-kept", "mig-changed")}
    inventory = _inventory(tmp_path, nodes)
    document = yaml.safe_load(inventory.read_text())
    document["gpu_nodes"]["vars"].update(gpuops_gpu="NVIDIA H200", gpuops_mig=MIG_LAYOUTS)
    document["gpu_nodes"]["hosts"]["mig-kept"]["gpuops_mig_config"] = "as-built"
    document["gpu_nodes"]["hosts"]["mig-changed"]["gpuops_mig_config"] = "all-1g.18gb"
    inventory.write_text(yaml.safe_dump(document))
    report = tmp_path / "report.json"
    run = run_playbook(
        "playbooks/health_check.yml",
        inventory,
        tmp_path / "runner",
        extravars={"gpuops_health_report_path": str(report)},
    )
    assert run.status == "failed", run.stdout[-3000:]
    nodes_found = {node["host"]: node for node in json.loads(report.read_text())["nodes"]}
    assert nodes_found["mig-kept"]["healthy"] is True, nodes_found["mig-kept"]["problems"]
    kept = [c for c in nodes_found["mig-kept"]["checks"] if c["name"] == "mig_layout"]
    assert [(c["status"], c["gpu_index"]) for c in kept] == [("pass", 0)]
    assert nodes_found["mig-changed"]["healthy"] is False
    assert nodes_found["mig-changed"]["problems"] == [
        "mig_layout[gpu0]: GPU 0: declared 7x 1g.18gb, found 2x 1g.18gb + 1x 2g.35gb + 1x 3g.71gb"
    ]
