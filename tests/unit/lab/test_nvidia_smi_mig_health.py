"""The lab simulator's ``-q -x`` with MIG on, as the real driver prints it, and the health checks reading it.

The real format: tests/fixtures/nvidia-smi/nvsmi_device_v12-535.261.03-mig-excerpt.dtd and README.md there.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import health_checks, nvidia_smi_xml
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_profiles, mig_state

REPO = Path(__file__).resolve().parents[3]
SIM_DIR = REPO / "extensions" / "molecule" / "lab" / "nvidia-smi"
DTD = REPO / "tests" / "fixtures" / "nvidia-smi" / "nvsmi_device_v12-535.261.03-mig-excerpt.dtd"
_spec = importlib.util.spec_from_file_location("nvidia_smi_sim_mig_health", SIM_DIR / "nvidia_smi_sim.py")
sim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim)
mig = sys.modules["nvidia_smi_mig"]


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A lab node with driver 580.95.05 and 2 H200 SXM, GPU 0 in MIG mode with the 3-2-1-1 layout."""
    monkeypatch.setenv("GPUOPS_LAB_ROOT", str(tmp_path))
    (tmp_path / "usr/share/gpuops-lab").mkdir(parents=True)
    (tmp_path / "etc/gpuops-lab").mkdir(parents=True)
    (tmp_path / "usr/share/gpuops-lab/driver.json").write_text(json.dumps({"version": "580.95.05", "cuda": "13.0"}))
    (tmp_path / "etc/gpuops-lab/gpus.json").write_text(json.dumps({"model": "H200-SXM", "count": 2, "nvswitch": True}))
    return tmp_path


def ok(capsys, *argv):
    code = sim.main(list(argv), prog="nvidia-smi")
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def with_layout(capsys):
    ok(capsys, "-i", "0", "-mig", "1")
    ok(capsys, "-i", "0", "-r")
    ok(capsys, "mig", "-i", "0", "-cgi", "9,19,14,19", "-C")


def faults(node, **given):
    (node / "etc/gpuops-lab/faults.json").write_text(json.dumps(given))


def query(capsys):
    return ok(capsys, "-q", "-x")


def sequence(name):
    match = re.search(r"<!ELEMENT\s+%s\s+\(([^()|]*)\)\+?>" % name, DTD.read_text(encoding="utf-8"))
    assert match, name
    return [part.strip() for part in match.group(1).split(",")]


def verdict(text, **options):
    return health_checks.evaluate({"smi": nvidia_smi_xml.parse(text), "kernel": {"events": [], "formats": []}}, options)


def checks(result, name):
    return {c["gpu_index"]: c for c in result["checks"] if c["name"] == name}


@pytest.mark.parametrize(
    ("element", "path"),
    [
        ("mig_device", "mig_devices/mig_device"),
        ("shared", "mig_devices/mig_device/device_attributes/shared"),
        ("ecc_error_count", "mig_devices/mig_device/ecc_error_count"),
        ("volatile_count", "mig_devices/mig_device/ecc_error_count/volatile_count"),
        ("fb_memory_usage", "mig_devices/mig_device/fb_memory_usage"),
        ("bar1_memory_usage", "mig_devices/mig_device/bar1_memory_usage"),
    ],
)
def test_mig_devices_follow_the_real_dtd(node, capsys, element, path):
    with_layout(capsys)
    root = ET.fromstring(query(capsys).split("\n", 2)[2])
    found = root.findall("gpu/" + path)
    assert len(found) == 4
    for item in found:
        assert [child.tag for child in item] == sequence(element)


def test_mig_on_reads_na_where_the_driver_does(node, capsys):
    with_layout(capsys)
    root = ET.fromstring(query(capsys).split("\n", 2)[2])
    on, off = root.findall("gpu")
    assert {child.text for child in on.find("ecc_errors/volatile")} == {"N/A"}
    assert on.findtext("remapped_rows").strip() == "N/A"
    assert len(on.find("remapped_rows")) == 0
    assert on.findtext("utilization/gpu_util") == "N/A"
    assert {child.text for child in off.find("ecc_errors/volatile")} == {"0"}
    assert off.findtext("remapped_rows/remapped_row_pending") == "No"
    assert off.findtext("mig_devices").strip() == "None"


def test_the_health_verdict_names_the_layout_the_simulator_created(node, capsys):
    with_layout(capsys)
    created = sorted((gi["id"], gi["profile"]) for gi in mig_state.parse_gpu_instances(ok(capsys, "mig", "-lgi")))
    profile_set = mig_profiles.default_profiles().sets["h200-141gb"]
    result = verdict(query(capsys), mig_profile_set=profile_set)
    on, off = (gpu["mig"] for gpu in result["facts"]["gpus"])
    assert sorted((i["id"], i["profile"]) for i in on["gpu_instances"]) == created
    assert [i["compute_instances"] for i in on["gpu_instances"]] == [[0]] * 4
    assert off == {"current": False, "pending": False, "gpu_instances": []}
    assert checks(result, "mig_mode")[0]["detail"].startswith("MIG enabled: ")
    assert checks(result, "ecc_errors")[0]["status"] == "pass"
    assert "4 MIG devices" in checks(result, "ecc_errors")[0]["detail"]
    assert checks(result, "row_remap")[0]["detail"].startswith("no Xid 63 or 64")
    # the lab's fabric stays In Progress without its Fabric Manager stand-in running: nothing else fails
    assert {c["name"] for c in result["checks"] if c["status"] == "fail"} == {"fabric"}


def test_an_uncorrectable_error_with_mig_on_shows_on_a_mig_device_and_fails(node, capsys):
    with_layout(capsys)
    faults(node, ecc={"0": {"volatile_uncorrectable": 2, "aggregate_uncorrectable": 2}})
    text = query(capsys)
    gpu = nvidia_smi_xml.parse(text)["gpus"][0]
    assert gpu["ecc_errors"]["volatile"]["uncorrectable"] is None
    assert [d["volatile_sram_uncorrectable"] for d in gpu["mig_device_readings"]] == [2, 0, 0, 0]
    ecc = checks(verdict(text), "ecc_errors")[0]
    assert ecc["status"] == "fail"
    assert "2 uncorrectable SRAM ECC errors" in ecc["detail"]


def test_a_pending_row_remap_is_not_in_the_xml_with_mig_on(node, capsys):
    """The lab's row_remap_pending fault: shown with MIG off, N/A with MIG on (judged from the kernel log)."""
    faults(node, row_remap_pending=[0, 1])
    with_layout(capsys)
    result = verdict(query(capsys))
    row = checks(result, "row_remap")
    assert row[1]["status"] == "fail"
    assert row[1]["detail"].startswith("row remapping pending")
    assert row[0]["status"] == "pass"
    assert "does not report remapped rows" in row[0]["detail"]
    assert mig.devices({"slot": 0, "model_name": "H200-SXM"})[0]["memory_mib"] > 0
