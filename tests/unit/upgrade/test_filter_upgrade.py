"""The gpuops.cluster upgrade_* filters: wrapping, errors with the filter's FQCN."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter import upgrade


def test_filters_are_registered():
    assert set(upgrade.FilterModule().filters()) == {
        "upgrade_waves",
        "upgrade_decision",
        "upgrade_stack_fact",
        "upgrade_report",
        "upgrade_settings_findings",
        "upgrade_drain_record",
        "kubernetes_node_state",
        "kubernetes_blocking_pods",
    }


def test_upgrade_waves_defaults_and_lines():
    result = upgrade.upgrade_waves(["a", "b", "c", "d"], max_unavailable=2)
    assert [w["hosts"] for w in result["waves"]] == [["a"], ["b"], ["c"], ["d"]]
    assert result["lines"][1] == "canary: a"


def test_upgrade_waves_error_names_the_filter():
    with pytest.raises(AnsibleFilterError, match=r"gpuops.cluster.upgrade_waves: wave size 'x'"):
        upgrade.upgrade_waves(["a"], waves=["x"])


def test_upgrade_decision_and_its_input_check():
    stack = {"drift": {"installed_differs": [], "loaded_differs": False, "reboot_required": False}}
    assert upgrade.upgrade_decision(stack, {"healthy": True})["decision"] == "skip"
    with pytest.raises(AnsibleFilterError, match="upgrade_decision"):
        upgrade.upgrade_decision("nope")


def test_upgrade_stack_fact_steps():
    target = {"driver_version": "2"}
    begun = upgrade.upgrade_stack_fact({}, target, "begin", "r1", "t0", fallback_previous={"driver_version": "1"})
    done = upgrade.upgrade_stack_fact(begun, target, "finish", "r1", "t1", result="upgraded")
    assert done["current"]["driver_version"] == "2"
    assert done["previous"]["driver_version"] == "1"
    with pytest.raises(AnsibleFilterError, match="step must be begin or finish"):
        upgrade.upgrade_stack_fact({}, target, "middle", "r1", "t")
    with pytest.raises(AnsibleFilterError, match="unknown node status"):
        upgrade.upgrade_stack_fact({}, target, "finish", "r1", "t", result="bogus")


def test_upgrade_report_adds_the_summary():
    plan = upgrade.upgrade_waves(["a"])
    audit = upgrade.upgrade_report([{"host": "a", "status": "upgraded"}], "r1", plan, "t0", "t1")
    assert audit["summary"][0] == "run r1: completed (upgraded 1)"
    with pytest.raises(AnsibleFilterError, match="upgrade_report"):
        upgrade.upgrade_report([{"status": "x"}], "r1", plan, "t0", "t1")


def test_upgrade_settings_findings_in_the_validation_report_form():
    found = upgrade.upgrade_settings_findings({"drain": "slurm"}, run={}, hosts=["ctl"])
    assert found == {
        "problems": [
            "gpuops_upgrade_drain is slurm but gpuops_upgrade_slurm_controller is not set; "
            "name the inventory host that runs scontrol (the Slurm controller)"
        ],
        "warnings": [],
    }


@pytest.mark.parametrize(("settings", "run"), [(["drain"], None), ({"drain": "none"}, ["waves"])])
def test_upgrade_settings_findings_rejects_non_mappings(settings, run):
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.upgrade_settings_findings"):
        upgrade.upgrade_settings_findings(settings, run=run)


KUBERNETES = Path(__file__).resolve().parents[2] / "fixtures" / "kubernetes"


def test_kubernetes_node_state_reads_the_cordon():
    assert upgrade.kubernetes_node_state(json.loads((KUBERNETES / "node-cordoned.json").read_text()))["cordoned"]
    node = json.loads((KUBERNETES / "node-schedulable.json").read_text())
    assert upgrade.kubernetes_node_state(node)["cordoned"] is False
    node["spec"]["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    assert upgrade.kubernetes_node_state(node)["cordoned"] is True
    other_taint = json.loads((KUBERNETES / "node-tainted-only.json").read_text())
    assert upgrade.kubernetes_node_state(other_taint)["cordoned"] is False


def test_kubernetes_blocking_pods_from_a_recorded_pod_list():
    pods = json.loads((KUBERNETES / "pods-on-gpu-a01.json").read_text())
    from_list = upgrade.kubernetes_blocking_pods(pods, "gpu-a01")
    assert from_list == upgrade.kubernetes_blocking_pods(pods["items"], "gpu-a01")
    assert from_list
    assert all(set(pod) == {"namespace", "name", "gpus"} for pod in from_list)


@pytest.mark.parametrize("value", [{"kind": "Pod"}, "gpu-a01"])
def test_kubernetes_node_state_rejects_other_input(value):
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.kubernetes_node_state"):
        upgrade.kubernetes_node_state(value)


def test_kubernetes_blocking_pods_rejects_other_input():
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.kubernetes_blocking_pods"):
        upgrade.kubernetes_blocking_pods("pods", "gpu-a01")


def test_upgrade_drain_record_errors_carry_the_filter_name():
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.upgrade_drain_record: unknown drain adapter"):
        upgrade.upgrade_drain_record("slrum")
