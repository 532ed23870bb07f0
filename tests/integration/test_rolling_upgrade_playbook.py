"""rolling_upgrade.yml end to end where no lab is needed: validation, survey, plan and report.

The inventory's nodes are this machine (local connection) without nvidia-smi, so the
survey finds every node unhealthy: the plan must leave them all out, no node may be
changed, and the report must say why. The window itself is proven on stand-in
nodes in test_upgrade_window.py; the upgrade needs the lab
(extensions/molecule/rolling_upgrade, see the report of issue 6).
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.integration.playbook_run import run_playbook
from tests.integration.test_health_check_playbook import MIG_LAYOUTS
from tests.integration.test_health_check_playbook import _inventory as health_inventory

pytestmark = pytest.mark.integration


def test_unhealthy_nodes_are_reported_and_left_out(tmp_path, monkeypatch):
    report_dir = tmp_path / "cwd"
    report_dir.mkdir()
    monkeypatch.setenv("PWD", str(report_dir))  # the default report path is $PWD/gpuops-upgrade-<run id>.json
    run = run_playbook("rolling_upgrade.yml", "tests/integration/inventories/valid/hosts.yml", tmp_path / "runner")
    assert run.rc == 0, run.stdout[-3000:]
    assert run.plays_started[:4] == [
        "Validate the controller, the inventory and the requested stack",
        "Survey the fleet before the rolling upgrade",
        "Plan the window",
        "Upgrade in a sliding window",
    ]
    # no task of the upgrade play ran on any node, and nothing changed on the nodes
    assert run.results_for(play="Upgrade in a sliding window") == []
    assert [r.host for r in run.changed] == ["localhost"]
    plan = run.results_for(play="Plan the window", task="Print the plan before any node moves")[0].result["msg"]
    assert "order: nothing to upgrade" in plan
    reports = list(report_dir.glob("gpuops-upgrade-*.json"))
    assert len(reports) == 1
    audit = json.loads(reports[0].read_text())
    assert audit["result"] == "partial"  # nothing upgraded, and no node is on the target
    assert [node["status"] for node in audit["not_upgraded"]] == ["excluded", "excluded"]
    assert audit["counts"] == {"excluded": 2}
    assert {node["host"] for node in audit["nodes"]} == {"gpu-h100", "gpu-l40s"}
    assert all("nvidia-smi not found" in node["reason"] for node in audit["nodes"])
    assert audit["plan"]["order"] == []
    assert audit["window"] == {"timeline": [], "violations": [], "makespan": None, "drained_ahead": []}


def test_a_typo_in_a_setting_stops_the_run_before_any_node_is_read(tmp_path):
    settings = {
        "gpuops_upgrade_drain": "slrum",
        "gpuops_upgrade_on_failure": "rolback",
        "gpuops_upgrade_waves": [1, "0%"],
        "gpuops_upgrade_per_domain": {"rack": 0},
        "gpuops_upgrade_report_path": str(tmp_path / "report.json"),
    }
    run = run_playbook(
        "rolling_upgrade.yml", "tests/integration/inventories/valid/hosts.yml", tmp_path / "runner", extravars=settings
    )
    assert run.rc != 0
    assert run.plays_started == ["Validate the controller, the inventory and the requested stack"]
    failed = [r for r in run.failures if r.task == "Stop the run when any host has a problem"]
    assert len(failed) == 1
    message = failed[0].result["msg"]
    assert "validation failed on 2 of 2 host(s); nothing was changed" in message
    assert "gpuops_upgrade_drain is 'slrum'; set one of: none, slurm, kubernetes" in message
    assert "gpuops_upgrade_on_failure is 'rolback'; set one of: halt, rollback" in message
    assert "gpuops_upgrade_per_domain: per_domain.rack is 0: set a positive integer" in message
    # the waves of earlier releases are gone: the variable is reported as unknown, not ignored
    assert "gpuops_upgrade_waves" in message
    assert not (tmp_path / "report.json").exists()
    assert run.changed == []


# "true": -e gpuops_upgrade_plan_only=true, as the README writes it, gives a string; the run reads the registry's bool
@pytest.mark.parametrize("plan_only", [True, "true"])
def test_plan_only_prints_the_window_and_moves_nothing(tmp_path, monkeypatch, plan_only):
    report_dir = tmp_path / "cwd"
    report_dir.mkdir()
    monkeypatch.setenv("PWD", str(report_dir))
    run = run_playbook(
        "rolling_upgrade.yml",
        "tests/integration/inventories/valid/hosts.yml",
        tmp_path / "runner",
        extravars={
            "gpuops_upgrade_plan_only": plan_only,
            "gpuops_upgrade_per_domain": {"rack": 1},
            # a per_domain kind no host declares is refused in validation
            "gpuops_upgrade_domains": {"rack": "r01"},
        },
    )
    assert run.rc == 0, run.stdout[-3000:]
    plan = run.results_for(play="Plan the window", task="Print the plan before any node moves")[0].result["msg"]
    assert plan[0].endswith("plan only: nothing moves")
    assert "at most 1 per rack" in plan[1]
    assert run.results_for(play="Upgrade in a sliding window") == []
    assert run.results_for(play="Report the rolling upgrade", task="Write the audit report on the controller") == []
    assert list(report_dir.iterdir()) == []
    assert [r.host for r in run.changed] == []


SURVEY_HEALTH = "Check the node's GPU health (quick) before anything is done"
DECISION = "Decide whether the node is upgraded, skipped or left out"


def test_the_gate_judges_the_declared_mig_layout(tmp_path, monkeypatch):
    """Issue 29 item 3: every gpu_health call of the rolling upgrade (the survey's pre-check, the gate, the rollback's
    gate: one module_defaults set, rolling_upgrade_health_options) gets the host's declared layout as
    health_check.yml passes it. Two H200s with the same MIG layout (the real capture): the one declaring another
    layout fails the pre-check's mig_layout, naming the GPU and the difference; a host without gpuops_mig gets none."""
    report_dir = tmp_path / "cwd"
    report_dir.mkdir()
    monkeypatch.setenv("PWD", str(report_dir))
    nodes = {name: ("h200-1x-mig-3211.xml", "h200-1x-vm-status-empty.txt") for name in ("mig-kept", "mig-changed")}
    nodes["no-mig"] = ("h100-sxm-8x-healthy.xml", "h100-8x-status-healthy.txt")
    inventory = health_inventory(tmp_path, nodes)
    document = yaml.safe_load(inventory.read_text())
    group = document["gpu_nodes"]
    group["vars"].update(
        gpuops_os="Ubuntu", gpuops_os_version="22.04", gpuops_stack={"driver": "580", "cuda": "13.0", "dcgm": "4"}
    )
    for name in ("mig-kept", "mig-changed"):
        group["hosts"][name].update(gpuops_gpu="NVIDIA H200", gpuops_mig=MIG_LAYOUTS)
    group["hosts"]["mig-kept"]["gpuops_mig_config"] = "as-built"
    group["hosts"]["mig-changed"]["gpuops_mig_config"] = "all-1g.18gb"
    group["hosts"]["no-mig"]["gpuops_gpu"] = "NVIDIA H100 80GB HBM3"
    inventory.write_text(yaml.safe_dump(document))
    run = run_playbook("rolling_upgrade.yml", inventory, tmp_path / "runner")
    # this machine's package index holds no NVIDIA stack: the nodes the survey would upgrade stop the run there,
    # before anything moves; the one whose layout differs is left out as unhealthy and not asked
    stopped = {r.host: r.result["msg"] for r in run.failures}
    assert sorted(stopped) == ["mig-changed", "mig-kept", "no-mig"], run.stdout[-3000:]
    assert all(msg.startswith("The NVIDIA package index does not hold the target stack") for msg in stopped.values())
    assert "mig-kept: " in stopped["mig-kept"]
    assert "mig-changed: " not in stopped["mig-kept"]
    assert run.results_for(play="Upgrade in a sliding window") == []
    health = {r.host: r.result for r in run.results_for(task=SURVEY_HEALTH)}
    assert sorted(health) == ["mig-changed", "mig-kept", "no-mig"]
    layout = {host: [c for c in result["checks"] if c["name"] == "mig_layout"] for host, result in health.items()}
    assert [(c["status"], c["gpu_index"]) for c in layout["mig-kept"]] == [("pass", 0)]
    assert [c["detail"] for c in layout["mig-changed"]] == [
        "GPU 0: declared 7x 1g.18gb, found 2x 1g.18gb + 1x 2g.35gb + 1x 3g.71gb"
    ]
    assert {c["status"] for c in layout["no-mig"]} == {"skip"}
    # mig_profile_set reached the module too: the instances are named by profile
    assert [gi["profile"] for gi in health["mig-kept"]["facts"]["gpus"][0]["mig"]["gpu_instances"]] == [
        "3g.71gb",
        "2g.35gb",
        "1g.18gb",
        "1g.18gb",
    ]
    decisions = {r.host: r.result["ansible_facts"]["rolling_upgrade_decision"] for r in run.results_for(task=DECISION)}
    assert decisions["mig-changed"]["decision"] == "exclude"
    assert "mig_layout[gpu0]" in decisions["mig-changed"]["reason"]


KERNEL_SURVEY = "Ask whether the node's kernel would move to gpuops_kernel"


def test_the_survey_asks_where_gpuops_kernel_moves_the_kernel_and_leaves_out_a_node_it_cannot(tmp_path, monkeypatch):
    """Issue 26 item 5: with gpuops_kernel the survey runs gpuops.cluster.kernel_package in check mode on every node
    (its answer decides a kernel-only move into the window: tests/unit/upgrade/test_upgrade_record.py). A kernel this
    machine's package index cannot give leaves the healthy node out, named in the plan, before anything moves."""
    report_dir = tmp_path / "cwd"
    report_dir.mkdir()
    monkeypatch.setenv("PWD", str(report_dir))
    inventory = health_inventory(tmp_path, {"healthy": ("h100-sxm-8x-healthy.xml", "h100-8x-status-healthy.txt")})
    document = yaml.safe_load(inventory.read_text())
    document["gpu_nodes"]["vars"].update(
        gpuops_os="Ubuntu",
        gpuops_os_version="22.04",
        gpuops_stack={"driver": "580", "cuda": "13.0", "dcgm": "4"},
        gpuops_gpu="NVIDIA H100 80GB HBM3",
        gpuops_kernel="6.1.0-9999-amd64",
    )
    inventory.write_text(yaml.safe_dump(document))
    run = run_playbook("rolling_upgrade.yml", inventory, tmp_path / "runner")
    assert run.rc == 0, run.stdout[-3000:]
    (asked,) = run.results_for(task=KERNEL_SURVEY)
    assert asked.host == "healthy"
    assert asked.result["failed_when_result"] is False
    assert asked.changed is False  # check mode: nothing installed
    (decided,) = run.results_for(task=DECISION)
    decision = decided.result["ansible_facts"]["rolling_upgrade_decision"]
    assert decision["decision"] == "exclude"
    assert decision["reason"].startswith("gpuops_kernel cannot be moved to here: ")
    plan = run.results_for(play="Plan the window", task="Print the plan before any node moves")[0].result["msg"]
    assert "order: nothing to upgrade" in plan
    assert any(line.startswith("healthy: gpuops_kernel cannot be moved to here") for line in plan)
    assert run.results_for(play="Upgrade in a sliding window") == []
