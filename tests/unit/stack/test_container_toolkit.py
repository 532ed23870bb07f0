"""The NVIDIA Container Toolkit as a stack component: matrix entries, the request's values, the auto filter."""

from __future__ import annotations

import copy
import datetime

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import container_toolkit
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.matrix_schema import schema_errors
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import (
    StackMatrix,
    default_matrix,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_resolver import resolve, violations

TODAY = datetime.date(2026, 12, 2)
TOOLKIT_PACKAGES = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]


def run(request, gpu="h100-sxm", os="Debian", os_version="12", matrix=None):
    return resolve(request, os, os_version, gpu, today=TODAY, matrix=matrix)


def rules(request, matrix=None):
    return [v["rule"] for v in violations(request, "Debian", "12", "h100-sxm", today=TODAY, matrix=matrix)]


def toolkit_pairs(result):
    return [(p["name"], p["version"]) for p in result["packages"] if p["component"] == "container_toolkit"]


def test_unset_installs_no_toolkit():
    result = run({"driver": "580"})
    assert result["container_toolkit"] is None
    assert toolkit_pairs(result) == []
    assert not [pin for pin in result["pins"] if pin["component"] == "container_toolkit"]


@pytest.mark.parametrize("value", [False, "false", "no"])
def test_false_installs_no_toolkit(value):
    assert run({"driver": "580", "container_toolkit": value})["container_toolkit"] is None


@pytest.mark.parametrize(("value", "mode"), [(True, "always"), ("true", "always"), ("auto", "auto"), ("AUTO", "auto")])
def test_true_and_auto_take_the_newest_release_four_packages_at_one_version(value, mode):
    newest = default_matrix().container_toolkit[-1]["version"]
    result = run({"driver": "580", "container_toolkit": value})
    assert result["container_toolkit"] == {"version": newest, "mode": mode}
    assert toolkit_pairs(result) == [(name, newest) for name in TOOLKIT_PACKAGES]
    [pin] = [pin for pin in result["pins"] if pin["component"] == "container_toolkit"]
    assert sorted(pin["names"]) == sorted(TOOLKIT_PACKAGES)
    assert pin["version"] == newest
    assert pin["follows_driver"] is False


def test_a_release_pins_that_release_on_rhel_too():
    result = run({"driver": "580", "container_toolkit": "1.18.2"}, os="Rocky", os_version="9.4")
    assert result["container_toolkit"] == {"version": "1.18.2", "mode": "always"}
    assert toolkit_pairs(result) == [(name, "1.18.2") for name in TOOLKIT_PACKAGES]


def test_release_before_1_18_is_refused_with_the_known_ones():
    [problem] = violations({"driver": "580", "container_toolkit": "1.17.8"}, "Debian", "12", "h100-sxm", today=TODAY)
    assert problem["rule"] == "container_toolkit.unknown"
    assert "1.18.0" in problem["message"]
    assert "1.17.8" in problem["message"]


@pytest.mark.parametrize("value", ["1.18", "latest", "1.18.2-1", 3])
def test_malformed_value_is_refused(value):
    assert rules({"driver": "580", "container_toolkit": value}) == ["container_toolkit.malformed"]


def test_min_driver_is_enforced():
    data = copy.deepcopy(default_matrix().data)
    data["container_toolkit"][-1]["min_driver"] = "590.44.01"
    matrix = StackMatrix(data)
    assert rules({"driver": "580.65.06", "container_toolkit": True}, matrix=matrix) == ["container_toolkit.min_driver"]
    older = data["container_toolkit"][-2]["version"]
    assert (
        run({"driver": "580.65.06", "container_toolkit": older}, matrix=matrix)["container_toolkit"]["version"] == older
    )


def test_matrix_schema_catches_bad_entries():
    data = copy.deepcopy(default_matrix().data)
    data["container_toolkit"].append({"version": "1.18", "source": "nct_tags"})
    data["container_toolkit"].append({"version": "1.0.0", "source": "nowhere", "colour": "green"})
    errors = "\n".join(schema_errors(data))
    assert "MAJOR.MINOR.PATCH" in errors
    assert "unknown key 'colour'" in errors
    assert "nowhere" in errors
    assert "container_toolkit: entries must be listed oldest first: 1.0.0 comes after" in errors


def test_every_listed_release_names_its_source():
    for entry in default_matrix().container_toolkit:
        assert entry["source"] in default_matrix().data["sources"]
        assert container_toolkit.release_problems(entry) == []


def test_present_runtimes_from_the_binaries():
    found = {"/usr/bin/containerd", "/usr/local/bin/enroot"}
    assert container_toolkit.present_runtimes(found.__contains__) == ["containerd", "enroot"]
    assert container_toolkit.present_runtimes(set().__contains__) == []


def test_auto_leaves_the_toolkit_out_only_without_a_runtime():
    result = run({"driver": "580", "container_toolkit": "auto"})
    packages, pins = result["packages"], result["pins"]
    kept_packages, kept_pins = container_toolkit.for_node(packages, pins, "auto", [])
    assert [p for p in kept_packages if p["component"] == "container_toolkit"] == []
    assert [p for p in kept_pins if p["component"] == "container_toolkit"] == []
    assert len(kept_packages) == len(packages) - 4
    assert container_toolkit.for_node(packages, pins, "auto", ["docker"]) == (packages, pins)
    assert container_toolkit.for_node(packages, pins, "always", []) == (packages, pins)
