"""The validation play's findings carry gpuops_mps's problems, its clash with the MIG layout included."""

from __future__ import annotations

import datetime

from ansible_collections.gpuops.cluster.plugins.module_utils import variable_registry
from ansible_collections.gpuops.cluster.plugins.module_utils.host_validation import findings

HOST = {"gpuops_stack": {"driver": "580", "cuda": "13.0"}, "gpuops_gpu": "h100-sxm"}
LAYOUT = {
    "version": "v1",
    "mig-configs": {
        "half": [
            {"devices": [0, 1, 2, 3], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
            {"devices": [4, 5, 6, 7], "mig-enabled": False},
        ],
        "h200-only": [
            {"device-filter": ["0x233510DE"], "devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}},
            {"device-filter": ["0x233010DE"], "devices": "all", "mig-enabled": False},
        ],
    },
}


def find(values):
    return findings(
        values,
        names=list(values),
        checks=["stack"],
        os_name="Ubuntu",
        os_version="22.04",
        today=datetime.date(2026, 12, 4),
    )["problems"]


def test_registry_declares_gpuops_mps():
    assert variable_registry.load_specs()["gpuops_mps"]["type"] == "dict"


def test_mps_beside_a_layout_that_leaves_its_gpus_whole_passes():
    values = dict(HOST, gpuops_mig=LAYOUT, gpuops_mig_config="half", gpuops_mps={"devices": [4, 5, 6, 7]})
    assert find(values) == []


def test_mps_on_a_gpu_the_layout_enables_mig_on_is_one_problem_of_the_host():
    values = dict(
        HOST,
        gpuops_mig=LAYOUT,
        gpuops_mig_config="half",
        gpuops_upgrade_drain="kubernetes",
        gpuops_mps={"devices": [2, 4]},
    )
    assert find(values) == [
        "gpuops_mps shares GPU 2, 4 by MPS, and the MIG layout gpuops_mig_config selects enables MIG on GPU 2: the "
        "Kubernetes device plugin does not support MPS on devices with MIG enabled (scheduler kubernetes); give "
        "gpuops_mps devices only GPUs whose MIG is off, or disable MIG on them"
    ]


def test_an_entry_for_another_gpu_model_is_told_apart_by_the_hosts_model():
    values = dict(HOST, gpuops_mig=LAYOUT, gpuops_mig_config="h200-only", gpuops_mps={})
    assert find(values) == []
    values["gpuops_gpu"] = "h200-sxm"
    assert "enables MIG on every GPU" in find(values)[0]


def test_a_bad_value_is_reported_beside_the_others():
    values = dict(HOST, gpuops_reboot="sometimes", gpuops_mps={"active_thread_percentage": 150})
    problems = find(values)
    assert len(problems) == 2
    assert any("gpuops_reboot" in problem for problem in problems)
    assert any("active_thread_percentage is 150" in problem for problem in problems)


def test_a_wrong_type_is_named_once_by_the_value_check():
    problems = find(dict(HOST, gpuops_mps="on"))
    assert problems == ["gpuops_mps is 'on'; set a mapping"]
