"""The plan's read of the Kubernetes Nodes: a re-run finishes the cordons an earlier run of ours left, leaves others'.

Against ``tests/fixtures/kubernetes/nodes-after-crash.json`` (``kubectl get nodes -o json``'s shape, a ``List``;
``kubernetes.core.k8s_info`` gives the same Nodes as ``resources``): no API server can run here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter import upgrade
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import (
    drain_adapter,
    kubernetes_node,
    upgrade_settings,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window import Window

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kubernetes"
NODES = json.loads((FIXTURES / "nodes-after-crash.json").read_text())
NAMES = ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04", "gpu-a05", "gpu-a06"]
OURS = "gpuops-upgrade[20261202T103000Z]"


def k8s_info(nodes=NODES):
    """What kubernetes.core.k8s_info kind=Node registers: the Nodes under resources."""
    return {"changed": False, "api_found": True, "resources": nodes["items"]}


def hosts(done=()):
    """The survey's entries: inventory host n01..n06, its Node gpu-a01..gpu-a06, one rack each."""
    return [
        {"host": "n%02d" % i, "done": name in done, "domains": {"rack": "r%d" % i}, "scheduler_name": name}
        for i, name in enumerate(NAMES, 1)
    ]


def run(**settings):
    values = {"gpuops_upgrade_drain": "kubernetes", "gpuops_upgrade_max_unavailable": 3}
    values.update({"gpuops_upgrade_" + key: value for key, value in settings.items()})
    return upgrade_settings.settings(values)


def test_survey_reads_each_cordon_and_whose_it_is():
    fleet = {entry["name"]: entry for entry in kubernetes_node.survey(NODES, NAMES, "gpuops-upgrade")}
    assert [fleet[name]["state"] for name in NAMES] == [
        "idle",  # in service
        "idle",  # cordoned by us: one the run takes
        "drained_by_others",  # cordoned, no mark
        "down",  # not Ready, whoever cordoned it
        "idle",  # our mark, no cordon (uncordoned by someone): in service
        "drained_by_others",  # a mark of another prefix is not ours
    ]
    assert [fleet[name]["owner"] for name in NAMES] == ["none", "ours", "other", "ours", "none", "other"]
    assert fleet["gpu-a02"]["reason"] == "cordoned by " + OURS
    assert fleet["gpu-a03"]["reason"] == "cordoned without the gpuops.cluster/cordon annotation of this upgrade"
    assert fleet["gpu-a04"]["reason"] == "not Ready: Unknown, NodeStatusUnknown; cordoned by " + OURS
    assert fleet["gpu-a01"]["reason"] is None
    assert {entry["scheduler"] for entry in fleet.values()} == {"Kubernetes"}
    assert {entry["job_end"] for entry in fleet.values()} == {None}  # Kubernetes shows no job end
    # our mark on a Node in service: a later cordon by someone else would pass for ours
    assert [name for name in NAMES if fleet[name]["stale_mark"]] == ["gpu-a05"]


def test_survey_takes_the_k8s_info_result_a_node_list_or_a_list_in_the_order_given():
    order = ["gpu-a03", "gpu-a01", "gpu-a03"]
    by_list = kubernetes_node.survey(NODES["items"], order, "gpuops-upgrade")
    assert [entry["name"] for entry in by_list] == ["gpu-a03", "gpu-a01"]
    assert kubernetes_node.survey(k8s_info(), order, "gpuops-upgrade") == by_list
    assert kubernetes_node.survey(NODES, order, "gpuops-upgrade") == by_list


def test_the_reason_prefix_decides_what_is_ours():
    fleet = {entry["name"]: entry for entry in kubernetes_node.survey(NODES, NAMES, "gpuops-upgrade-staging")}
    assert (fleet["gpu-a06"]["owner"], fleet["gpu-a06"]["state"]) == ("ours", "idle")
    assert (fleet["gpu-a02"]["owner"], fleet["gpu-a02"]["state"]) == ("other", "drained_by_others")


def test_a_node_with_no_ready_condition_is_down():
    node = json.loads(json.dumps(NODES["items"][0]))
    node["status"]["conditions"] = [c for c in node["status"]["conditions"] if c["type"] != "Ready"]
    (entry,) = kubernetes_node.survey([node], ["gpu-a01"], "gpuops-upgrade")
    assert (entry["state"], entry["reason"]) == ("down", "not Ready: no Ready condition")


@pytest.mark.parametrize(
    ("nodes", "names", "message"),
    [
        (NODES, ["gpu-a01", "gpu-b07", "gpu-b08"], "Kubernetes has no Node named gpu-b07, gpu-b08: set "),
        ({"kind": "NodeList"}, ["gpu-a01"], "expected the Nodes kubernetes.core.k8s_info returned"),
        ("gpu-a01", ["gpu-a01"], "expected the Nodes kubernetes.core.k8s_info returned"),
        ([{"kind": "Pod", "metadata": {"name": "x"}}], ["x"], "expected a v1 Node object, got 'Pod'"),
    ],
)
def test_bad_reads_are_refused_naming_what_to_set(nodes, names, message):
    with pytest.raises(ValueError, match=message):
        kubernetes_node.survey(nodes, names, "gpuops-upgrade")


def test_the_plan_resumes_our_cordons_and_counts_others_out_of_service():
    plan = upgrade.upgrade_window(hosts(), upgrade=run(), kubernetes=k8s_info()["resources"], now=0)
    by_host = {node["name"]: node for node in plan["nodes"]}
    assert by_host["n02"]["resume"] is True  # cordoned by us: out of service from the start, taken first
    assert by_host["n05"]["resume"] is False  # in service, whatever mark is left on it
    assert plan["resumed"] == ["n02"]
    assert plan["unavailable"] == ["n03", "n04", "n06"]  # never admitted, never touched
    assert plan["unavailable_reasons"] == {
        "n03": "drained by someone else (cordoned without the gpuops.cluster/cordon annotation of this upgrade): "
        "not touched",
        "n04": "down in Kubernetes (not Ready: Unknown, NodeStatusUnknown; cordoned by %s): not touched" % OURS,
        "n06": "drained by someone else (cordoned without the gpuops.cluster/cordon annotation of this upgrade): "
        "not touched",
    }
    # max_unavailable 3: n03, n04 and n06 are out and n02 is resumed, so nothing else starts
    assert plan["first_window"] == ["n02"]
    assert "resumed first, out of service already (left by an earlier run): n02" in plan["lines"]
    assert plan["lines"][-1] == (
        "in service with our gpuops.cluster/cordon annotation left on (uncordoned by someone): n05 (Node gpu-a05); "
        "remove it (kubectl annotate node NAME gpuops.cluster/cordon-), or a later cordon by someone else would pass "
        "for ours"
    )


def test_a_node_on_the_target_that_our_cordon_still_holds_is_resumed_not_done():
    """Skipped by the survey (on the target, healthy), but cordoned by us: gated again, then given back."""
    plan = upgrade.upgrade_window(
        hosts(done=NAMES), upgrade=run(max_unavailable=6), kubernetes=k8s_info()["resources"], now=0
    )
    by_host = {node["name"]: node for node in plan["nodes"]}
    assert (by_host["n02"]["done"], by_host["n02"]["resume"]) == (False, True)
    assert plan["order"] == ["n02"]
    assert plan["skipped"] == ["n01", "n05"]
    assert plan["first_window"] == ["n02"]


def test_a_resumed_cordon_goes_first_and_alone_then_the_canary_then_the_rest_within_max_unavailable():
    """Our cordon is out of service already: taken first, before the canary (which goes alone), the others after."""
    extra = json.loads(json.dumps(NODES["items"][0]))
    extra["metadata"]["name"] = "gpu-a07"
    items = [NODES["items"][0], NODES["items"][1], NODES["items"][4], extra]
    entries = [host for host in hosts() if host["scheduler_name"] in ("gpu-a01", "gpu-a02", "gpu-a05")]
    entries.append({"host": "n07", "done": False, "domains": {"rack": "r7"}, "scheduler_name": "gpu-a07"})
    plan = upgrade.upgrade_window(entries, upgrade=run(max_unavailable=2), kubernetes=items, now=0, canary=["n01"])
    window = Window(plan["nodes"], plan["settings"], 0)
    assert window.admit(0) == ["n02"]
    assert window.admit(1) == []  # the canary waits until our cordon is given back
    window.finish("n02", True)
    assert window.admit(2) == ["n01"]
    window.finish("n01", True)
    assert window.admit(3) == ["n05", "n07"]


def test_the_kubernetes_read_is_the_kubernetes_adapters():
    with pytest.raises(AnsibleFilterError, match="a read of Kubernetes Nodes is the kubernetes drain adapter's"):
        upgrade.upgrade_window(hosts(), upgrade=run(drain="slurm"), kubernetes=k8s_info()["resources"], now=0)
    with pytest.raises(AnsibleFilterError, match="kubernetes needs upgrade"):
        upgrade.upgrade_window(hosts(), {"max_unavailable": 1}, kubernetes=k8s_info()["resources"], now=0)
    extra = [*hosts(), {"host": "n09", "scheduler_name": "gpu-a09"}]
    with pytest.raises(AnsibleFilterError, match="Kubernetes has no Node named gpu-a09"):
        upgrade.upgrade_window(extra, upgrade=run(), kubernetes=k8s_info()["resources"], now=0)
    assert drain_adapter.fleet_lines([{"name": "node01", "state": "idle", "owner": "ours"}], {}) == []
    # without a read (the adapter none, or slurm with its own read) the fleet is what it was
    assert drain_adapter.fleet(run(drain="none"), None, None, NAMES) is None
    assert drain_adapter.fleet(run(drain="slurm"), [{"name": "x"}], None, NAMES) == [{"name": "x"}]


def test_a_maintenance_reservation_means_nothing_to_kubernetes():
    """A Slurm reservation's name set with the kubernetes adapter is ignored, as before the read, not a failure."""
    plan = upgrade.upgrade_window(
        hosts(), upgrade=run(maintenance_reservation="upgrade-r580"), kubernetes=k8s_info()["resources"], now=0
    )
    assert plan["resumed"] == ["n02"]
    assert plan["reserved"] == []


def test_the_adapter_takes_a_resumed_cordon_as_ours_and_gives_it_back():
    """The window's drain of a resumed node finds our cordon: ours again (mark renewed); its give-back uncordons it
    and takes the mark off; a node cordoned by someone else is never uncordoned."""
    ours_node = {"resources": [NODES["items"][1]]}
    other_node = {"resources": [NODES["items"][2]]}
    args = {"adapter": "kubernetes", "node": "gpu-a02", "run_id": "20261205T050000Z"}
    drained = drain_adapter.request(dict(args, state="drained"))
    owner = drain_adapter.k8s_cordon_owner(drained, ours_node)
    assert owner == "ours"
    assert drain_adapter.k8s_plan(drained, owner) == {
        "action": "drain",
        "ours": True,
        "pre_existing": False,
        "warning": None,
        "mark": True,
    }
    restored = drain_adapter.request(dict(args, state="restored", ours=True))
    plan = drain_adapter.k8s_plan(restored, drain_adapter.k8s_cordon_owner(restored, ours_node))
    assert (plan["action"], plan["mark"]) == ("uncordon", False)
    assert drain_adapter.k8s_mark_args(restored, False)["definition"] == {
        "metadata": {"annotations": {"gpuops.cluster/cordon": None}}
    }
    other = drain_adapter.request(dict(args, node="gpu-a03", state="restored", ours=True))
    plan = drain_adapter.k8s_plan(other, drain_adapter.k8s_cordon_owner(other, other_node))
    assert (plan["action"], plan["ours"]) == ("none", False)
