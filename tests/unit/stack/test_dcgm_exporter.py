"""The DCGM Exporter as a stack component: the matrix pairs each exporter release with its DCGM (NVIDIA/dcgm-exporter
tags <DCGM>-<exporter>), the resolver adds the paired package, the node's index gives its exact version."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils import variable_values
from ansible_collections.gpuops.cluster.plugins.module_utils.health import dcgm_exporter as health_exporter
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import (
    dcgm_exporter,
    dcgm_exporter_dropin,
    package_index,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.matrix_schema import schema_errors
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import (
    StackMatrix,
    default_matrix,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_resolver import resolve, violations
from ansible_collections.gpuops.cluster.plugins.modules import node_stack

TODAY = datetime.date(2026, 12, 2)
ROOT = Path(__file__).resolve().parents[3]
# NVIDIA/dcgm-exporter tags (hack/VERSION NEW_DCGM_VERSION / NEW_EXPORTER_VERSION at each).
TAGGED_PAIRS = {"4.1.1": "4.0.4", "4.5.1": "4.8.0", "4.5.2": "4.8.1", "4.5.3": "4.8.2"}


def run(request, os="Debian", os_version="12", gpu="h100-sxm", matrix=None):
    return resolve(request, os, os_version, gpu, today=TODAY, matrix=matrix)


def rules(request, matrix=None):
    return [v["rule"] for v in violations(request, "Debian", "12", "h100-sxm", today=TODAY, matrix=matrix)]


def exporter_packages(result):
    return [(p["name"], p["version"]) for p in result["packages"] if p["component"] == "dcgm_exporter"]


def test_the_matrix_pairs_each_tagged_dcgm_with_its_exporter():
    pairs = {entry["version"]: entry.get("exporter") for entry in default_matrix().dcgm}
    for dcgm, exporter in TAGGED_PAIRS.items():
        assert pairs[dcgm] == exporter
    assert pairs["3.3.6"] is None  # no exporter package paired with DCGM 3 was found


@pytest.mark.parametrize(("dcgm", "exporter"), sorted(TAGGED_PAIRS.items()))
def test_auto_installs_the_exporter_paired_with_the_dcgm(dcgm, exporter):
    driver = "550" if dcgm == "4.1.1" else "580"
    result = run({"driver": driver, "dcgm": dcgm})
    assert exporter_packages(result) == [("datacenter-gpu-manager-exporter", exporter)]
    assert result["dcgm_exporter"] == {
        "version": exporter,
        "dcgm": dcgm,
        "package": "datacenter-gpu-manager-exporter",
        "service": "nvidia-dcgm-exporter",
    }
    pins = [pin for pin in result["pins"] if pin["component"] == "dcgm_exporter"]
    assert pins == [
        {
            "component": "dcgm_exporter",
            "names": ["datacenter-gpu-manager-exporter"],
            "version": exporter,
            "follows_driver": False,
        }
    ]


def test_no_dcgm_no_exporter():
    result = run({"driver": "580"})
    assert result["dcgm_exporter"] is None
    assert exporter_packages(result) == []


def test_false_leaves_the_exporter_out():
    for value in (False, "false", "no"):
        result = run({"driver": "580", "dcgm": "4.5.3", "dcgm_exporter": value})
        assert result["dcgm_exporter"] is None
        assert exporter_packages(result) == []


def test_true_without_dcgm_is_refused():
    assert rules({"driver": "580", "dcgm_exporter": True}) == ["dcgm_exporter.needs_dcgm"]


def test_dcgm_3_has_no_paired_exporter_auto_warns_true_refuses():
    result = run({"driver": "550", "dcgm": "3"})
    assert result["dcgm_exporter"] is None
    assert any("pairs no DCGM Exporter release with DCGM 3.3.6" in w for w in result["warnings"])
    found = violations({"driver": "550", "dcgm": "3", "dcgm_exporter": "true"}, "Debian", "12", "h100-sxm", today=TODAY)
    assert [v["rule"] for v in found] == ["dcgm_exporter.unpaired"]
    assert "set dcgm_exporter: false" in found[0]["message"]
    assert "4.5.3" in found[0]["message"]


def test_a_malformed_choice_is_refused():
    assert rules({"driver": "580", "dcgm": "4", "dcgm_exporter": "sometimes"}) == ["dcgm_exporter.malformed"]


def test_rhel_matches_the_rpm_build_number():
    result = run({"driver": "580", "dcgm": "4.5.3"}, os="Rocky", os_version="9.4")
    assert exporter_packages(result) == [("datacenter-gpu-manager-exporter", "4.8.2*")]


def _index_resolve(result, index, manager):
    return package_index.resolve(result["packages"], result["pins"], result["driver_request"], index, {}, manager)


def test_the_node_index_gives_the_exact_deb_version():
    result = run({"driver": "580.65.06", "dcgm": "4.5.2"})
    madison = "".join(
        "%s | %s | http://repo/ Packages\n" % (package["name"], "580.65.06-1" if package["follows_driver"] else "x")
        for package in result["packages"]
        if package["component"] != "dcgm_exporter"
    )
    index = package_index.parse_apt_madison(madison)
    for package in result["packages"]:
        if not package["follows_driver"] and package["component"] != "dcgm_exporter":
            index[package["name"]] = [{"version": "1:%s-1" % package["version"].split("-")[0], "source": "repo"}]
    # ubuntu2404's datacenter-gpu-manager-exporter_4.8.2-1 form, one release older and newer beside it
    index["datacenter-gpu-manager-exporter"] = [
        {"version": version, "source": "repo"} for version in ("4.8.0-1", "4.8.1-1", "4.8.2-1")
    ]
    exact = _index_resolve(result, index, "apt")
    exporter = [p for p in exact["packages"] if p["name"] == "datacenter-gpu-manager-exporter"]
    assert [p["spec"] for p in exporter] == ["datacenter-gpu-manager-exporter=4.8.1-1"]
    assert [p["version"] for p in exact["pins"] if p["component"] == "dcgm_exporter"] == ["4.8.1-1"]


def test_an_index_without_the_paired_exporter_is_a_problem():
    result = run({"driver": "580.65.06", "dcgm": "4.5.2"})
    index = {
        package["name"]: [{"version": "580.65.06-1" if package["follows_driver"] else "1:4.5.2-1", "source": "r"}]
        for package in result["packages"]
        if package["component"] != "dcgm_exporter"
    }
    index["datacenter-gpu-manager-exporter"] = [{"version": "4.8.2-1", "source": "r"}]  # DCGM 4.5.3's exporter
    exact = _index_resolve(result, index, "apt")
    assert exact["packages"] == []
    assert exact["problems"] == ["datacenter-gpu-manager-exporter 4.8.1: the repository holds 4.8.2-1"]


def test_the_rpm_pattern_takes_the_build_numbered_release_and_not_another():
    result = run({"driver": "580", "dcgm": "4.6.0"}, os="Rocky", os_version="9.4")
    found = [v for v in ("4.8.2-1", "4.8.3-1", "4.8.3.3901-1", "4.8.4.3955-1") if package_index.matches("4.8.3*", v)]
    assert found == ["4.8.3-1", "4.8.3.3901-1"]
    assert exporter_packages(result) == [("datacenter-gpu-manager-exporter", "4.8.3*")]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"exporter": "4.8"}, "exporter must be an exporter release"),
        ({"exporter": "4.8.2"}, "needs an exporter_source"),
    ],
)
def test_the_schema_refuses_a_bad_exporter(entry, message):
    data = copy.deepcopy(default_matrix().data)
    data["dcgm"][-1] = {key: value for key, value in data["dcgm"][-1].items() if not key.startswith("exporter")}
    data["dcgm"][-1].update(entry)
    errors = schema_errors(data)
    assert any(message in error for error in errors), errors


def test_a_matrix_without_pairs_still_loads_and_installs_no_exporter():
    data = copy.deepcopy(default_matrix().data)
    for entry in data["dcgm"]:
        entry.pop("exporter", None)
        entry.pop("exporter_source", None)
    result = run({"driver": "580", "dcgm": "4"}, matrix=StackMatrix(data))
    assert result["dcgm_exporter"] is None


def test_module_constants_name_the_real_package_and_unit():
    assert dcgm_exporter.PACKAGE == "datacenter-gpu-manager-exporter"
    assert dcgm_exporter.SERVICE == "nvidia-dcgm-exporter"


# --- the drop-in (node_stack part dcgm_exporter) -----------------------------------------------------------------


def test_the_dropin_binds_the_exporter_to_the_host_engine():
    text = dcgm_exporter_dropin.render(9400, "/etc/dcgm-exporter/default-counters.csv", "localhost:5555")
    lines = text.splitlines()
    assert lines[2:] == [
        "[Unit]",
        "PartOf=nvidia-dcgm.service",
        "After=nvidia-dcgm.service",
        "",
        "[Service]",
        "ExecStart=",
        "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv -a :9400 -r localhost:5555",
        "Restart=on-failure",
        "RestartSec=5",
    ]
    # the health check reads the port the drop-in gives, at the path the drop-in is written
    assert health_exporter.port_from_unit(text) == 9400
    assert health_exporter.DROPIN == dcgm_exporter_dropin.PATH


def test_without_a_host_engine_the_exporter_embeds_its_own():
    text = dcgm_exporter_dropin.render(9500, "/etc/x.csv", "")
    assert "PartOf" not in text
    assert "ExecStart=/usr/bin/dcgm-exporter -f /etc/x.csv -a :9500\n" in text


@pytest.mark.parametrize(
    ("port", "collectors", "hostengine", "said"),
    [
        (0, "/etc/x.csv", "localhost:5555", "port 0"),
        (70000, "/etc/x.csv", "", "port 70000"),
        (9400, "etc/x.csv", "", "collectors"),
        (9400, "/etc/x y.csv", "", "collectors"),
        (9400, "/etc/x.csv", "localhost", "hostengine"),
    ],
)
def test_the_dropin_refuses_bad_values(port, collectors, hostengine, said):
    with pytest.raises(ValueError, match=said):
        dcgm_exporter_dropin.render(port, collectors, hostengine)


def test_node_stack_writes_the_dropin_once(run_module, tmp_path):
    options = {"dcgm_exporter": {"port": 9401, "root": str(tmp_path)}}
    path = tmp_path / dcgm_exporter_dropin.PATH.lstrip("/")
    checked = run_module(node_stack.main, options, check=True)
    assert checked["changed_parts"] == ["dcgm_exporter"]
    assert not path.exists()
    first = run_module(node_stack.main, options, diff=True)
    assert first["changed_parts"] == ["dcgm_exporter"]
    assert "-a :9401 -r localhost:5555" in path.read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert first["diff"][0]["after_header"] == str(path)
    again = run_module(node_stack.main, options)
    assert again["changed_parts"] == []


def test_node_stack_refuses_a_bad_port_and_writes_nothing(run_module, tmp_path):
    with pytest.raises(Exception, match="port 0"):
        run_module(node_stack.main, {"dcgm_exporter": {"port": 0, "root": str(tmp_path)}})
    assert not (tmp_path / "etc").exists()


@pytest.mark.parametrize(
    ("name", "value", "refused"),
    [
        ("gpuops_dcgm_exporter_port", 9400, False),
        ("gpuops_dcgm_exporter_port", 0, True),
        ("gpuops_dcgm_exporter_port", 70000, True),
        ("gpuops_dcgm_exporter_collectors", "/etc/dcgm-exporter/dcp-metrics-included.csv", False),
        ("gpuops_dcgm_exporter_collectors", "dcp-metrics-included.csv", True),
        ("gpuops_dcgm_exporter_collectors", "/etc/dcgm exporter.csv", True),
    ],
)
def test_the_validation_play_refuses_a_bad_port_or_collectors_file(name, value, refused):
    """Refused by the validation play, before any host changes (the drop-in's renderer refuses them too)."""
    registry = yaml.safe_load((ROOT / "playbooks/vars/gpuops_variables.yml").read_text(encoding="utf-8"))
    spec = {key: registry["gpuops_variables"][name][key] for key in ("type", "min", "format")
            if key in registry["gpuops_variables"][name]}  # fmt: skip
    assert bool(variable_values.check(name, value, spec)) is refused
