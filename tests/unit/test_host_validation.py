"""One host's findings (module_utils/host_validation) and the validation_findings filter around it."""

from __future__ import annotations

import datetime

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.validation import validation_findings
from ansible_collections.gpuops.cluster.plugins.module_utils.host_validation import findings

TODAY = datetime.date(2026, 12, 2)
STACK = {"driver": "580", "cuda": "13.0"}
HOST = {"gpuops_stack": STACK, "gpuops_gpu": "h100-sxm"}


def find(values, checks=("stack",), **kwargs):
    kwargs.setdefault("os_name", "Ubuntu")
    kwargs.setdefault("os_version", "22.04")
    return findings(values, names=list(values), checks=list(checks), today=TODAY, **kwargs)


def test_a_good_host_resolves_with_no_problem():
    result = find(HOST)
    assert result["problems"] == []
    assert result["resolved"]["driver_branch"] == "580"


def test_names_values_and_stack_are_all_reported_together():
    values = dict(HOST, gpuops_reboot="sometimes", gpuops_stak={}, gpuops_stack={"driver": "580", "cuda": "12.7"})
    problems = find(values)["problems"]
    assert problems[0] == "unknown variable gpuops_stak: did you mean gpuops_stack?"
    assert problems[1] == "gpuops_reboot is 'sometimes'; set one of: auto, never, always"
    assert "CUDA 12.7" in problems[2]
    assert len(problems) == 3


def test_unset_stack_and_gpu_say_they_are_unset():
    problems = find({})["problems"]
    assert problems[0].startswith("gpuops_stack is not set: set the NVIDIA stack for this host")
    assert problems[1].startswith("gpuops_gpu is not set: set the host's GPU model")


def test_an_unreadable_distribution_is_the_hosts_problem():
    (problem,) = find(HOST, read_error="ssh: connect to host gpu01 port 22: Connection refused")["problems"]
    assert problem.startswith("its distribution could not be read (ssh: connect to host gpu01")


def test_a_missing_matrix_is_a_problem_with_the_real_message():
    (problem,) = find(dict(HOST, gpuops_matrix_path="/nonexistent/m.yml"))["problems"]
    assert problem.startswith("gpuops_matrix_path: compatibility matrix /nonexistent/m.yml is invalid")
    assert "No such file or directory" in problem
    assert "\n" not in problem


def test_without_the_stack_check_no_stack_is_needed():
    assert find({"kernel_tuning_hugepages": 4}, checks=()) == {"problems": [], "warnings": [], "resolved": None}
    assert find({"kernel_tuning_hugepages": -4}, checks=())["problems"] == [
        "kernel_tuning_hugepages is -4; set a whole number, at least 0"
    ]


def test_the_upgrade_check_resolves_the_rollback_target_and_the_canary_group():
    values = dict(HOST, gpuops_upgrade_previous_stack={"driver": "551", "cuda": "12.4"})
    groups = {"all": ["gpu1"], "gpu_nodes": ["gpu1"]}
    problems = find(
        values,
        checks=("stack", "upgrade"),
        run_values={"gpuops_upgrade_canary_group": "canaries"},
        groups=groups,
        fleet=["gpu1"],
    )["problems"]
    assert problems[0].startswith(
        "gpuops_upgrade_previous_stack (the rollback target) does not resolve: driver branch R551"
    )
    assert problems[1].startswith("gpuops_upgrade_canary_group is 'canaries', which is not an inventory group")


def test_a_previous_stack_is_not_checked_outside_an_upgrade():
    assert find(dict(HOST, gpuops_upgrade_previous_stack={"driver": "551"}))["problems"] == []


def test_an_unknown_check_is_an_error():
    with pytest.raises(ValueError, match="unknown check"):
        find(HOST, checks=("stak",))


def host(values, unreadable=None):
    """What lookup('gpuops.cluster.host_variables') returns for a host with these values."""
    return {"names": sorted(values), "variables": values, "unreadable": unreadable or {}}


def test_filter_reports_values_that_cannot_be_templated_and_goes_on():
    values = dict(HOST, gpuops_os="Ubuntu", gpuops_reboot="never")
    unreadable = {
        "gpuops_health_expected_gpu_count": "'lab_gpus' is undefined",
        "gpuops_health_level": "template error while templating '{{ x }}'",
    }
    result = validation_findings(host(values, unreadable), checks=["stack"], os="Ubuntu", os_version="22.04")
    assert result["problems"] == [
        "gpuops_health_expected_gpu_count cannot be read: 'lab_gpus' is undefined; fix its value or the variables it "
        "refers to",
        "gpuops_health_level cannot be read: template error while templating '{{ x }}'; fix its value or the variables "
        "it refers to",
    ]
    assert result["resolved"]["driver_branch"] == "580"


def test_filter_reads_an_unreachable_host_and_the_run_settings():
    result = validation_findings(
        host(dict(HOST)),
        checks=["stack", "upgrade"],
        read={"unreachable": True, "msg": "Failed to connect\nsecond line"},
        run={"gpuops_upgrade_canary_group": "canaries", "unrelated": 1},
        groups={"all": ["a"]},
        fleet=["a"],
    )
    assert result["problems"][0] == (
        "its distribution could not be read (Failed to connect): fix the connection to the host, or name it in the "
        "inventory with gpuops_os and gpuops_os_version"
    )
    # the canary group is a run setting: read from the controller's variables
    assert result["problems"][1].startswith(
        "gpuops_upgrade_canary_group is 'canaries', which is not an inventory group"
    )
    assert len(result["problems"]) == 2


def test_filter_errors_carry_its_name():
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.validation_findings: unknown check"):
        validation_findings(host({}), checks=["nope"])
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.validation_findings: input must be lookup"):
        validation_findings({"gpuops_stack": {}})


def test_the_platform_settings_are_known_and_checked():
    """gpuops_health_expected_nvlinks was answered with 'did you mean gpuops_health_expected_ib_ports?' (issue 26)."""
    platform = {
        "gpuops_health_expected_nvlinks": 0,
        "gpuops_health_expected_pcie_width": 8,
        "gpuops_health_expected_pcie_gen": 5,
        "gpuops_health_pcie_baseline": {"00000000:18:00.0": {"width": 16, "gen": None}},
        "gpuops_health_thresholds": {"temperature_warn": 80, "nccl_busbw_gbps": 400},
    }
    assert find(dict(HOST, **platform))["problems"] == []
    wrong = {
        "gpuops_health_expected_nvlinks": -1,
        "gpuops_health_expected_pcie_width": 0,
        "gpuops_health_thresholds": {"temprature_warn": 80},
    }
    problems = find(dict(HOST, **wrong))["problems"]
    assert problems[0] == "gpuops_health_expected_nvlinks is -1; set a whole number, at least 0"
    assert problems[1] == "gpuops_health_expected_pcie_width is 0; set a whole number, at least 1"
    assert problems[2].startswith("gpuops_health_thresholds is {temprature_warn: 80}: unknown temprature_warn (known: ")
    assert problems[2].endswith("; set only the thresholds of ansible-doc gpuops.cluster.gpu_health")
    assert len(problems) == 3
