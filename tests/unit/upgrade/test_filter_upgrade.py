"""The gpuops.cluster upgrade_* filters: wrapping, errors with the filter's FQCN."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter import upgrade


def test_filters_are_registered():
    assert set(upgrade.FilterModule().filters()) == {
        "upgrade_waves",
        "upgrade_decision",
        "upgrade_stack_fact",
        "upgrade_report",
        "upgrade_drain_record",
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


def test_upgrade_drain_record_errors_carry_the_filter_name():
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.upgrade_drain_record: unknown drain adapter"):
        upgrade.upgrade_drain_record("slrum")
