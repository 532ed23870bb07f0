"""rolling_upgrade.yml with the kubernetes drain adapter, up to the plan: the plan's read of every Node.

No API server runs here: ``kubernetes.core.k8s_info`` is a test double (tests/integration/collections) that
answers with the Nodes of a ``kubectl get nodes -o json`` file, given as ``gpuops_upgrade_kubeconfig``. The
inventory's nodes are this machine without nvidia-smi, so the survey leaves both out as unhealthy; the Nodes say
gpu-h100 is cordoned by an earlier run of ours and gpu-l40s by someone else.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
