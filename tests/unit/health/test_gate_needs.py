"""What a health gate needs on a node (module_utils/health/gate_needs.py) and the plan's filter over it."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.upgrade_gates import upgrade_gate_needs
from ansible_collections.gpuops.cluster.plugins.module_utils.health import gate_needs

BOTH = {"dcgmi": "/usr/bin/dcgmi", "all_reduce_perf": "/opt/nccl-tests/build/all_reduce_perf"}


def test_tools_per_level():
    assert gate_needs.tools("quick") == []
    assert gate_needs.tools("standard") == ["dcgmi"]
    assert gate_needs.tools("extended") == ["dcgmi", "all_reduce_perf"]


def test_a_skipped_check_needs_no_tool():
    assert gate_needs.tools("extended", skip=["nccl_busbw"]) == ["dcgmi"]
    assert gate_needs.tools("extended", skip=["dcgm_diag", "nccl_busbw"]) == []


def test_unknown_level_is_refused():
    with pytest.raises(ValueError, match="gate level 'full'"):
        gate_needs.tools("full")


def test_lacking_names_each_missing_tool_with_its_fix():
    found = {"dcgmi": "/usr/bin/dcgmi", "all_reduce_perf": None}
    result = gate_needs.lacking(["standard", "extended"], found=found)
    assert result["standard"] == []
    assert len(result["extended"]) == 1
    assert result["extended"][0].startswith("all_reduce_perf not installed, a gate at level=extended runs it")
    assert "/opt/nccl-tests/build" in result["extended"][0]
    assert "skip nccl_busbw" in result["extended"][0]


def test_a_tool_the_run_installs_is_not_lacking():
    found = {"dcgmi": None, "all_reduce_perf": None}
    (lacking,) = gate_needs.lacking(["standard"], found=found)["standard"]
    assert lacking.startswith("dcgmi not installed, a gate at level=standard runs it: install DCGM")
    assert gate_needs.lacking(["standard"], found=found, provided=["dcgmi"]) == {"standard": []}


def test_node_level_canary_rule():
    # a named canary, or any node when none is named, is judged at the canary's level
    assert gate_needs.node_level("n1", ["n1"], "standard", "extended") == "extended"
    assert gate_needs.node_level("n2", ["n1"], "standard", "extended") == "standard"
    assert gate_needs.node_level("n2", [], "standard", "extended") == "extended"


def _surveyed(host, decision, extended=(), standard=(), said=True):
    health = {"gate_needs": {"standard": list(standard), "extended": list(extended)}} if said else {}
    return {
        "inventory_hostname": host,
        "rolling_upgrade_decision": {"decision": decision},
        "rolling_upgrade_survey_health": health,
    }


def test_filter_names_the_canary_without_all_reduce_perf_only():
    surveyed = [
        _surveyed("n1", "upgrade", extended=["all_reduce_perf not installed ..."]),
        _surveyed("n2", "upgrade", extended=["all_reduce_perf not installed ..."]),
        _surveyed("n3", "skip", extended=["all_reduce_perf not installed ..."], standard=["dcgmi not installed ..."]),
    ]
    assert upgrade_gate_needs(surveyed, canaries=["n1"]) == ["n1 (a canary): all_reduce_perf not installed ..."]
    # without a named canary any node may be picked: each is judged at the canary's level
    assert upgrade_gate_needs(surveyed) == [
        "n1 (a canary): all_reduce_perf not installed ...",
        "n2 (a canary): all_reduce_perf not installed ...",
    ]


def test_a_named_canary_already_done_leaves_the_window_to_pick_one():
    surveyed = [
        _surveyed("n1", "skip"),
        _surveyed("n2", "upgrade", extended=["all_reduce_perf not installed ..."]),
    ]
    assert upgrade_gate_needs(surveyed, canaries=["n1"]) == ["n2 (a canary): all_reduce_perf not installed ..."]


def test_filter_fails_closed_on_a_survey_that_said_nothing():
    lines = upgrade_gate_needs([_surveyed("n1", "upgrade", said=False)], canaries=["n1"])
    assert lines == ["n1: the survey did not say what the gate at level=extended needs on it"]


def test_filter_passes_a_ready_fleet_and_refuses_bad_input():
    assert upgrade_gate_needs([_surveyed("n1", "upgrade"), _surveyed("n2", "upgrade")], canaries=["n1"]) == []
    with pytest.raises(AnsibleFilterError, match="as a list"):
        upgrade_gate_needs({"n1": {}})
    with pytest.raises(AnsibleFilterError, match="gate level 'full'"):
        upgrade_gate_needs([_surveyed("n1", "upgrade")], gate_level="full", canary_gate_level="full")
