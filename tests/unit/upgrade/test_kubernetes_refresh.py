"""The Kubernetes Nodes read again during the run, as the window reads Slurm's fleet.

The plan read every Node once; the window reads them again at the refresh interval and after each release (one
``kubernetes.core.k8s_info kind=Node`` on the adapter's delegate host), read by the plan's own survey
(``kubernetes_node.survey``): a Node cordoned by someone else or not Ready since the plan leaves it; one back in
service counts no more. Against ``tests/fixtures/kubernetes/nodes-after-crash.json`` (no API server runs here).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import drain_adapter, run_journal, upgrade_settings
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.run_state import RunState

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kubernetes"
NODES = json.loads((FIXTURES / "nodes-after-crash.json").read_text())
HOSTS = {"n%02d" % i: "gpu-a%02d" % i for i in range(1, 7)}  # inventory host -> its Node
KUBECONFIG = "/etc/gpuops/kubeconfig"


def k8s_info(nodes=NODES):
    """What kubernetes.core.k8s_info kind=Node registers: every Node under resources."""
    return {"changed": False, "api_found": True, "resources": copy.deepcopy(nodes["items"])}


def in_service(nodes=NODES):
    """The fixture's Nodes as the plan saw them: every one Ready, uncordoned, no annotation of ours."""
    nodes = copy.deepcopy(nodes)
    for node in nodes["items"]:
        node["spec"].pop("unschedulable", None)
        node["spec"].pop("taints", None)
        node["metadata"]["annotations"].pop("gpuops.cluster/cordon", None)
        for condition in node["status"]["conditions"]:
            if condition["type"] == "Ready":
                condition.update(status="True", reason="KubeletReady")
    return nodes


def the_run(**settings):
    values = {"gpuops_upgrade_drain": "kubernetes", "gpuops_upgrade_refresh_interval": 30}
    values.update({"gpuops_upgrade_" + key: value for key, value in settings.items()})
    return upgrade_settings.settings(values)


def refresh(kubeconfig=KUBECONFIG, **settings):
    preview = {"nodes": [], "settings": {}}
    return drain_adapter.window_run(preview, the_run(**settings), "localhost", HOSTS, "r1", {}, kubeconfig)["refresh"]


def opened(tmp_path, nodes=None, max_unavailable=2):
    """A run's state with the window built on the plan's view (``nodes``, default every node idle), journaled."""
    if nodes is None:
        nodes = [{"name": host, "state": "idle"} for host in HOSTS]
    state = RunState()
    journal = {"path": str(tmp_path / "run.journal.jsonl"), "run_id": "r1", "target": "t", "resume": "none"}
    window = {
        "nodes": nodes,
        "settings": {"max_unavailable": max_unavailable},
        "refresh": refresh(),
        "journal": journal,
    }
    assert state.open(window, 0.0), state.broken
    return state


def refreshes(tmp_path):
    return [entry for entry in run_journal.read(str(tmp_path / "run.journal.jsonl")) if entry["event"] == "refresh"]


def test_the_kubernetes_adapter_reads_the_fleet_again_at_the_refresh_interval():
    assert [adapter for adapter in drain_adapter.ADAPTERS if drain_adapter.reads_fleet(adapter)] == [
        "slurm",
        "kubernetes",
    ]
    assert refresh() == {
        "delegate_to": "localhost",
        "names": HOSTS,
        "interval": 30,
        "adapter": "kubernetes",
        "reason_prefix": "gpuops-upgrade",
        "options": {"kubeconfig": KUBECONFIG},
        # k8s_info has no bound of its own: the strategy's task is bounded (a read past it failed, changing nothing)
        "timeout": 120,
    }
    assert refresh(kubeconfig=None, reason_prefix="gpuops-upgrade-staging")["options"] == {}
    assert refresh(kubeconfig=None, reason_prefix="gpuops-upgrade-staging")["reason_prefix"] == "gpuops-upgrade-staging"


def test_one_read_is_one_k8s_info_of_every_node_and_slurms_is_unchanged():
    assert drain_adapter.fleet_read_task(refresh()) == (
        "kubernetes.core.k8s_info",
        {"kind": "Node", "kubeconfig": KUBECONFIG},
    )
    assert drain_adapter.fleet_read_task(refresh(kubeconfig=None)) == ("kubernetes.core.k8s_info", {"kind": "Node"})
    slurm = {"names": {"a": "gpu-b", "b": "gpu-a"}, "options": {"reason_prefix": "gpuops-upgrade"}}
    assert drain_adapter.fleet_read_task(slurm) == (
        "gpuops.cluster.slurm_fleet",
        {"reason_prefix": "gpuops-upgrade", "nodes": ["gpu-a", "gpu-b"]},
    )
    with pytest.raises(ValueError, match=r"refresh\.adapter is 'none': set one of slurm, kubernetes"):
        drain_adapter.fleet_read_task(dict(slurm, adapter="none"))


def test_the_read_is_the_plans_survey_of_the_nodes():
    fleet = {entry["name"]: entry for entry in drain_adapter.fleet_read(refresh(), k8s_info())}
    assert [fleet[name]["state"] for name in HOSTS.values()] == [
        "idle",
        "idle",  # our cordon: ours
        "drained_by_others",  # cordoned by someone else
        "down",  # not Ready
        "idle",
        "drained_by_others",  # another prefix's cordon is not ours
    ]
    assert fleet["gpu-a02"]["owner"] == "ours"


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ({"changed": False}, "the read returned no Nodes"),
        ({"resources": NODES["items"][:2]}, "Kubernetes has no Node named gpu-a03, gpu-a04, gpu-a05, gpu-a06"),
        ({"resources": [{"kind": "Pod"}]}, "expected a v1 Node object"),
    ],
    ids=["no-resources", "nodes-missing", "not-nodes"],
)
def test_an_answer_that_is_not_the_runs_nodes_is_refused(result, message):
    with pytest.raises(ValueError, match=message):
        drain_adapter.fleet_read(refresh(), result)


def test_nodes_cordoned_by_someone_else_or_not_ready_since_the_plan_leave_the_window(tmp_path):
    state = opened(tmp_path)
    state.schedule.started(1.0, "interval")
    state.refreshed(k8s_info())
    window = state.window
    assert sorted(window.gone) == ["n03", "n04", "n06"]
    assert window.gone["n03"] == (
        "drained by someone else (cordoned without the gpuops.cluster/cordon annotation of this upgrade): not "
        "touched; seen during the run"
    )
    assert window.gone["n04"].startswith("down in Kubernetes (not Ready: Unknown, NodeStatusUnknown; cordoned by ")
    assert sorted(window.unavailable) == ["n03", "n04", "n06"]
    for host in ("n03", "n04", "n06"):
        passes, record = state.verdict(host)
        assert passes
        assert not record["admitted"]
        assert record["reason"].startswith("unavailable: left alone: ")
    assert state.verdict("n02") == (False, None)  # still waiting, in service
    (read,) = refreshes(tmp_path)
    assert read["ok"] is True
    assert read["changes"] == {"left": {"n03": "drained_by_others", "n04": "down", "n06": "drained_by_others"}}
    # out of service by others now: three count against max_unavailable 2, so nothing is admitted
    assert window.admit(2.0) == []


def test_a_node_back_in_service_counts_out_of_service_no_more(tmp_path):
    plan = {entry["name"]: entry for entry in drain_adapter.fleet_read(refresh(), k8s_info())}
    nodes = [{"name": host, "state": plan[node]["state"]} for host, node in HOSTS.items()]
    state = opened(tmp_path, nodes)
    assert sorted(state.window.unavailable) == ["n03", "n04", "n06"]
    state.schedule.started(1.0, "interval")
    state.refreshed(k8s_info(in_service()))
    assert state.window.unavailable == []
    (read,) = refreshes(tmp_path)
    assert read["changes"] == {"back": ["n03", "n04", "n06"]}


@pytest.mark.parametrize(
    "result",
    [
        {"failed": True, "msg": "Failed to load kubeconfig due to Invalid kube-config file."},
        {"unreachable": True, "msg": "Failed to connect to the host via ssh"},
        {"changed": False, "resources": NODES["items"][:2]},
    ],
    ids=["module-failed", "unreachable", "nodes-missing"],
)
def test_a_failed_read_changes_nothing_and_is_retried_at_the_next_occasion(tmp_path, result):
    state = opened(tmp_path)
    state.schedule.started(1.0, "interval")
    state.refreshed(result)
    assert state.window.gone == {}
    assert state.window.unavailable == []
    (read,) = refreshes(tmp_path)
    assert read["ok"] is False
    assert read["error"]
    # the next occasion reads again, and that read is taken
    assert state.schedule.due(state.schedule.last_at + 30) == "interval"
    state.schedule.started(state.schedule.last_at + 30, "interval")
    state.refreshed(k8s_info())
    assert sorted(state.window.gone) == ["n03", "n04", "n06"]


def test_a_node_in_flight_under_our_cordon_is_not_judged(tmp_path):
    state = opened(tmp_path, max_unavailable=1)
    state.take_admitted(state.window.admit(1.0), 1.0)
    assert state.holding == {"n01"}
    nodes = copy.deepcopy(NODES)
    nodes["items"][0] = copy.deepcopy(NODES["items"][3])  # gpu-a01 as gpu-a04: our cordon, rebooting (not Ready)
    nodes["items"][0]["metadata"]["name"] = "gpu-a01"
    state.schedule.started(2.0, "interval")
    state.refreshed(k8s_info(nodes))
    assert "n01" not in state.window.gone
    assert state.window.in_flight == ["n01"]


def test_a_refresh_of_an_adapter_that_reads_no_fleet_is_refused(tmp_path):
    state = RunState()
    window = {"nodes": [{"name": "n01"}], "settings": {}, "refresh": dict(refresh(), adapter="none")}
    assert not state.open(window, 0.0)
    assert "refresh.adapter is 'none'" in state.broken


def test_the_plans_read_of_every_node_has_the_bound_of_the_reads_during_the_run():
    """One bound for every read of the Nodes: the plan's task (roles/rolling_upgrade/tasks/plan.yml) says it as a
    literal, kept equal to drain_adapter.K8S_READ_TIMEOUT here."""
    plan = Path(__file__).resolve().parents[3] / "roles" / "rolling_upgrade" / "tasks" / "plan.yml"
    tasks = yaml.safe_load(plan.read_text(encoding="utf-8"))
    read = next(task for task in tasks if "kubernetes.core.k8s_info" in task)
    assert read["timeout"] == drain_adapter.K8S_READ_TIMEOUT == refresh()["timeout"]
