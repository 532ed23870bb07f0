"""The validation play's findings carry the MIG layout's problems beside every other problem of the host."""

from __future__ import annotations

import datetime

from ansible_collections.gpuops.cluster.plugins.module_utils import variable_registry
from ansible_collections.gpuops.cluster.plugins.module_utils.host_validation import findings

HOST = {"gpuops_stack": {"driver": "580", "cuda": "13.0"}, "gpuops_gpu": "h100-sxm"}
LAYOUT = {
    "version": "v1",
    "mig-configs": {
        "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        "all-1g.18gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}],
    },
}


def find(values, checks=("stack",)):
    return findings(
        values,
        names=list(values),
        checks=list(checks),
        os_name="Ubuntu",
        os_version="22.04",
        today=datetime.date(2026, 12, 4),
    )["problems"]


def test_registry_declares_the_mig_settings():
    specs = variable_registry.load_specs()
    assert specs["gpuops_mig"]["type"] == "dict"
    assert specs["gpuops_mig_config"]["type"] == "str"


def test_a_layout_the_gpu_holds_passes():
    assert find(dict(HOST, gpuops_mig=LAYOUT, gpuops_mig_config="all-1g.10gb")) == []


def test_a_layout_the_gpu_cannot_hold_is_a_problem_with_the_others():
    values = dict(HOST, gpuops_reboot="sometimes", gpuops_mig=LAYOUT, gpuops_mig_config="all-1g.18gb")
    problems = find(values)
    assert problems[0] == "gpuops_reboot is 'sometimes'; set one of: auto, never, always"
    assert problems[1].startswith(
        "gpuops_mig config all-1g.18gb entry 0 on h100-sxm (gpuops_gpu 'h100-sxm'): 1g.18gb: no such MIG profile; "
        "h100-sxm (h100-80gb: 7 SM slices, 8 memory slices) holds 1g.10gb (id 19) x7"
    )
    assert len(problems) == 2


def test_checked_without_the_stack_check_too():
    # health_check.yml and kernel_tuning.yml validate names and values only; a layout is still checked.
    values = dict(HOST, gpuops_mig=LAYOUT, gpuops_mig_config="all-1g.18gb")
    assert len(find(values, checks=())) == 1


def test_wrong_types_are_named_once():
    problems = find(dict(HOST, gpuops_mig="all-1g.10gb", gpuops_mig_config="all-1g.10gb"))
    assert problems == ["gpuops_mig is 'all-1g.10gb'; set a mapping"]


def test_an_unknown_gpu_is_named_once():
    values = dict(HOST, gpuops_gpu="NVIDIA H1000", gpuops_mig=LAYOUT, gpuops_mig_config="all-1g.10gb")
    with_stack = find(values)
    assert len(with_stack) == 1  # the stack check's own message
    assert "gpuops_mig" not in with_stack[0]
    assert find(values, checks=()) == [
        "gpuops_gpu 'NVIDIA H1000' is no GPU of the compatibility matrix: the MIG layout cannot be checked"
    ]
