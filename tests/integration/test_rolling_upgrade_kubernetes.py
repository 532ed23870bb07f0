"""rolling_upgrade.yml with the kubernetes drain adapter, up to the plan: the plan's read of every Node; and the
window reading the Nodes again during the run.

No API server runs here: ``kubernetes.core.k8s_info`` is a test double (tests/integration/collections) that
answers with the Nodes of a ``kubectl get nodes -o json`` file, given as ``gpuops_upgrade_kubeconfig``. The
inventory's nodes are this machine without nvidia-smi, so the survey leaves both out as unhealthy; the Nodes say
gpu-h100 is cordoned by an earlier run of ours and gpu-l40s by someone else. The window's case runs the strategy on
stand-in nodes (tests/integration/playbooks/upgrade_window.yml) with the reads the drain adapter gives it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import drain_adapter, run_journal, upgrade_settings

from tests.integration.playbook_run import REPO, run_playbook

pytestmark = pytest.mark.integration

STAND_IN = REPO / "tests" / "integration" / "collections"
NODES = REPO / "tests" / "fixtures" / "kubernetes" / "nodes-after-crash.json"
PLAN = "Print the plan before any node moves"


def cluster(path: Path) -> Path:
    """The fixture's Nodes, gpu-a02 (our cordon) as gpu-h100 and gpu-a03 (someone else's) as gpu-l40s."""
    nodes = json.loads(NODES.read_text())
    renamed = {"gpu-a02": "gpu-h100", "gpu-a03": "gpu-l40s"}
    for node in nodes["items"]:
        name = node["metadata"]["name"]
        node["metadata"]["name"] = renamed.get(name, name)
    path.write_text(json.dumps(nodes))
    return path


@pytest.mark.parametrize("check", [False, True], ids=["plan-only", "plan-only-check-mode"])
def test_the_plan_resumes_our_cordon_and_leaves_another_alone(tmp_path, monkeypatch, check):
    report_dir = tmp_path / "cwd"
    report_dir.mkdir()
    monkeypatch.setenv("PWD", str(report_dir))
    run = run_playbook(
        "rolling_upgrade.yml",
        "tests/integration/inventories/valid/hosts.yml",
        tmp_path / "runner",
        extravars={
            "gpuops_upgrade_plan_only": True,
            "gpuops_upgrade_drain": "kubernetes",
            "gpuops_upgrade_kubeconfig": str(cluster(tmp_path / "nodes.json")),
        },
        check=check,
        collections=(STAND_IN,),
    )
    assert run.rc == 0, run.stdout[-3000:]
    read = run.results_for(
        play="Plan the window", task="Read every Kubernetes Node's cordon and whose it is (one API call)"
    )
    assert [r.failed for r in read] == [False]
    plan = run.results_for(play="Plan the window", task=PLAN)[0].result["msg"]
    assert plan[0].endswith("drain adapter kubernetes, on failure halt, plan only: nothing moves")
    # gpu-l40s, cordoned by someone else: out of service, not touched
    assert plan[1].endswith("1 to upgrade, 0 already done, 1 down or drained by others")
    # unhealthy by the survey, yet our cordon holds it: resumed (gated, then given back), not left cordoned
    assert "resumed first, out of service already (left by an earlier run): gpu-h100" in plan
    assert any(line.startswith("order: gpu-h100") for line in plan), plan
    assert run.results_for(play="Upgrade in a sliding window") == []
    assert [r.host for r in run.changed] == []


def test_a_host_the_cluster_has_no_node_for_stops_the_plan(tmp_path, monkeypatch):
    monkeypatch.setenv("PWD", str(tmp_path))
    nodes = json.loads(NODES.read_text())
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))  # no Node named gpu-h100 or gpu-l40s
    run = run_playbook(
        "rolling_upgrade.yml",
        "tests/integration/inventories/valid/hosts.yml",
        tmp_path / "runner",
        extravars={
            "gpuops_upgrade_plan_only": True,
            "gpuops_upgrade_drain": "kubernetes",
            "gpuops_upgrade_kubeconfig": str(tmp_path / "nodes.json"),
        },
        collections=(STAND_IN,),
    )
    assert run.rc != 0
    failed = [r for r in run.results_for(play="Plan the window") if r.failed]
    assert len(failed) == 1
    assert "Kubernetes has no Node named gpu-h100, gpu-l40s" in failed[0].result["msg"]


# The window reads the Nodes again during the run, as it reads Slurm's fleet.

WINDOW = "tests/integration/playbooks/upgrade_window.yml"


def node(name: str, cordoned=False, ready=True) -> dict:
    """A Node of the fixture (gpu-a01's, in service) renamed, cordoned by someone else (no mark) or not Ready."""
    found = copy.deepcopy(json.loads(NODES.read_text())["items"][0])
    found["metadata"]["name"] = name
    if cordoned:  # what kubectl cordon sets
        found["spec"]["unschedulable"] = True
        found["spec"]["taints"] = [{"effect": "NoSchedule", "key": "node.kubernetes.io/unschedulable"}]
    if not ready:
        for condition in found["status"]["conditions"]:
            if condition["type"] == "Ready":
                condition.update(status="False", reason="KubeletNotReady", message="container runtime is down")
    return found


def test_the_window_reads_the_nodes_again_and_leaves_out_those_cordoned_or_not_ready_since_the_plan(tmp_path):
    """The plan saw n1-n4 in service and n5 cordoned by someone else. Read during the run, k8s_info says k3 is
    cordoned by someone else now, k4 not Ready, and k5 uncordoned. The canary n1 and n2 are upgraded; n3 and n4 pass
    their slot not admitted, named, out of service by others; n5 counts no more (else n2 would not fit
    max_unavailable 3 beside n3 and n4)."""
    hosts = ["n1", "n2", "n3", "n4"]
    names = {"n%d" % i: "k%d" % i for i in range(1, 6)}
    nodes_file = tmp_path / "nodes.json"
    nodes_file.write_text(
        json.dumps(
            {
                "kind": "List",
                "apiVersion": "v1",
                "items": [node("k1"), node("k2"), node("k3", cordoned=True), node("k4", ready=False), node("k5")],
            }
        )
    )
    window_nodes = [{"name": name, "canary": name == "n1"} for name in hosts] + [
        {"name": "n5", "state": "drained_by_others"}
    ]
    settings = {"max_unavailable": 3}
    run_settings = upgrade_settings.settings(
        {"gpuops_upgrade_drain": "kubernetes", "gpuops_upgrade_refresh_interval": 1}
    )
    journal_path = tmp_path / "gpuops-upgrade-k1.journal.jsonl"
    journal = {"path": str(journal_path), "run_id": "k1", "target": "t", "resume": "none"}
    window = drain_adapter.window_run(
        {"nodes": window_nodes, "settings": settings}, run_settings, "localhost", names, "k1", journal, str(nodes_file)
    )
    assert window["refresh"]["adapter"] == "kubernetes"
    inventory = tmp_path / "fleet.yml"
    fleet_vars = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inventory.write_text(
        yaml.safe_dump(
            {
                "fleet": {
                    "hosts": {name: {"work_seconds": 4 if name == "n1" else 1} for name in hosts},
                    "vars": fleet_vars,
                }
            }
        )
    )
    extravars = {
        "window_nodes": window["nodes"],
        "window_settings": window["settings"],
        "window_refresh": window["refresh"],
        "window_journal": window["journal"],
    }
    run = run_playbook(WINDOW, inventory, tmp_path / "runner", extravars=extravars, collections=(STAND_IN,))
    assert run.rc == 0, run.stdout[-3000:]
    reads = run.results_for(task="Read the fleet again for the window (kubernetes.core.k8s_info)")
    assert reads
    assert not [read for read in reads if read.failed]
    acquired = {r.host: r.result for r in run.results_for(task="Wait for a slot in the window")}
    assert [host for host in hosts if acquired[host]["admitted"]] == ["n1", "n2"]
    assert acquired["n3"]["slot"]["reason"] == (
        "unavailable: left alone: drained by someone else (cordoned without the gpuops.cluster/cordon annotation of "
        "this upgrade): not touched; seen during the run"
    )
    assert acquired["n4"]["slot"]["reason"] == (
        "unavailable: left alone: down in Kubernetes (not Ready: False, KubeletNotReady): not touched; seen during "
        "the run"
    )
    entries = run_journal.read(str(journal_path))
    refreshes = [entry for entry in entries if entry["event"] == "refresh"]
    assert refreshes
    assert all(entry["ok"] for entry in refreshes), refreshes
    changed = [entry["changes"] for entry in refreshes if entry["changes"]]
    assert changed[0] == {"left": {"n3": "drained_by_others", "n4": "down"}, "back": ["n5"]}
    passes = {entry["node"]: entry["why"] for entry in entries if entry["event"] == "pass"}
    assert passes == {"n3": acquired["n3"]["slot"]["reason"], "n4": acquired["n4"]["slot"]["reason"]}
    admitted = [entry["node"] for entry in entries if entry["event"] == "admit"]
    assert admitted == ["n1", "n2"]
    # n2 was admitted after the read that left n3 and n4 out
    first = next(entry for entry in refreshes if entry["changes"])
    assert (
        next(entry for entry in entries if entry.get("node") == "n2" and entry["event"] == "admit")["at"] >= first["at"]
    )
