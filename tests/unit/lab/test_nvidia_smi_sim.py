"""The lab's simulated nvidia-smi: real output shapes, driver states and fault injection."""

from __future__ import annotations

import importlib.util
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import nvlink

SIM_PATH = Path(__file__).resolve().parents[3] / "extensions" / "molecule" / "lab" / "nvidia-smi" / "nvidia_smi_sim.py"
_spec = importlib.util.spec_from_file_location("nvidia_smi_sim", SIM_PATH)
sim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim)


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A lab node root with driver 550.127.05 installed and 8 H100 SXM behind NVSwitch."""
    monkeypatch.setenv("GPUOPS_LAB_ROOT", str(tmp_path))
    (tmp_path / "usr/share/gpuops-lab").mkdir(parents=True)
    (tmp_path / "etc/gpuops-lab").mkdir(parents=True)
    (tmp_path / "usr/share/gpuops-lab/driver.json").write_text(json.dumps({"version": "550.127.05", "cuda": "12.4"}))
    (tmp_path / "etc/gpuops-lab/gpus.json").write_text(json.dumps({"model": "H100-SXM", "count": 8, "nvswitch": True}))
    return tmp_path


def run(capsys, *argv, prog="nvidia-smi"):
    code = sim.main(list(argv), prog=prog)
    return code, capsys.readouterr().out


def xml_root(text):
    assert text.startswith('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">')
    return ET.fromstring(text.split("\n", 2)[2])


def test_xml_is_well_formed_with_the_v12_structure(node, capsys):
    code, out = run(capsys, "-q", "-x")
    assert code == 0
    root = xml_root(out)
    assert root.tag == "nvidia_smi_log"
    assert root.findtext("driver_version") == "550.127.05"
    assert root.findtext("cuda_version") == "12.4"
    assert root.findtext("attached_gpus") == "8"
    gpus = root.findall("gpu")
    assert [g.get("id") for g in gpus][:2] == ["00000000:18:00.0", "00000000:2A:00.0"]
    first = gpus[0]
    assert first.findtext("product_name") == "NVIDIA H100 80GB HBM3"
    assert first.findtext("pci/pci_gpu_link_info/pcie_gen/max_link_gen") == "5"
    assert first.findtext("pci/pci_gpu_link_info/link_widths/current_link_width") == "16x"
    assert first.findtext("mig_mode/current_mig") == "Disabled"
    assert first.findtext("clocks_event_reasons/clocks_event_reason_hw_slowdown") == "Not Active"
    assert first.findtext("ecc_errors/volatile/dram_uncorrectable") == "0"
    assert first.findtext("ecc_errors/aggregate/sram_threshold_exceeded") == "No"
    assert first.findtext("remapped_rows/remapped_row_pending") == "No"
    assert first.findtext("temperature/gpu_temp") == "32 C"
    assert first.findtext("gpu_power_readings/current_power_limit") == "700.00 W"
    assert first.findtext("serial") != gpus[1].findtext("serial")
    assert first.findtext("uuid").startswith("GPU-")
    assert len({g.findtext("uuid") for g in gpus}) == 8


def test_first_call_loads_the_installed_module(node, capsys):
    run(capsys, "-L")
    text = (node / "run/gpuops-lab/nvidia-version").read_text()
    assert sim.parse_module_version(text) == "550.127.05"
    assert text.startswith("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.05  ")


def test_upgrade_without_reboot_is_a_version_mismatch(node, capsys):
    run(capsys, "-L")
    (node / "usr/share/gpuops-lab/driver.json").write_text(json.dumps({"version": "550.127.08", "cuda": "12.4"}))
    code, out = run(capsys, "-q", "-x")
    assert code == sim.EXIT_VERSION_MISMATCH
    assert out == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.127\n"
    (node / "run/gpuops-lab/nvidia-version").unlink()  # what a lab node restart does to /run
    code, out = run(capsys, "--query-gpu=driver_version", "--format=csv,noheader")
    assert (code, out.splitlines()[0]) == (0, "550.127.08")


def test_no_driver_package(node, capsys):
    (node / "usr/share/gpuops-lab/driver.json").unlink()
    code, out = run(capsys, "-L")
    assert code == sim.EXIT_NO_DRIVER
    assert "couldn't communicate with the NVIDIA driver" in out


def test_no_gpus_configured(node, capsys):
    (node / "etc/gpuops-lab/gpus.json").unlink()
    assert run(capsys, "-L") == (sim.EXIT_NO_DEVICE, "No devices were found\n")
    root = xml_root(run(capsys, "-q", "-x")[1])
    assert root.findtext("attached_gpus") == "0"


def test_query_gpu_csv_formats(node, capsys):
    code, out = run(capsys, "--query-gpu=index,name,memory.total,power.limit", "--format=csv")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "index, name, memory.total [MiB], power.limit [W]"
    assert lines[1] == "0, NVIDIA H100 80GB HBM3, 81559 MiB, 700.00 W"
    assert len(lines) == 9
    code, out = run(capsys, "--query-gpu=index,memory.total", "--format=csv,noheader,nounits", "-i", "3")
    assert out == "3, 81559\n"


def test_query_gpu_rejects_unknown_fields(node, capsys):
    code, out = run(capsys, "--query-gpu=index,bogus.field", "--format=csv")
    assert code == sim.EXIT_INVALID_ARGUMENT
    assert out == 'Field "bogus.field" is not a valid field to query.\n'


def test_missing_gpu(node, capsys):
    run(capsys, "missing", "--gpu", "5", prog="gpuops-lab-fault")
    root = xml_root(run(capsys, "-q", "-x")[1])
    assert root.findtext("attached_gpus") == "7"
    assert "00000000:AB:00.0" not in [g.get("id") for g in root.findall("gpu")]
    assert len(run(capsys, "-L")[1].splitlines()) == 7


def test_ecc_and_row_remap_faults(node, capsys):
    run(capsys, "ecc", "--gpu", "1", "--volatile-uncorrectable", "2", prog="gpuops-lab-fault")
    run(capsys, "row-remap-pending", "--gpu", "1", prog="gpuops-lab-fault")
    run(capsys, "row-remap-failure", "--gpu", "6", prog="gpuops-lab-fault")
    gpus = xml_root(run(capsys, "-q", "-x")[1]).findall("gpu")
    assert gpus[1].findtext("ecc_errors/volatile/dram_uncorrectable") == "2"
    assert gpus[1].findtext("ecc_errors/aggregate/dram_uncorrectable") == "2"
    assert gpus[1].findtext("remapped_rows/remapped_row_pending") == "Yes"
    assert gpus[6].findtext("remapped_rows/remapped_row_failure") == "Yes"
    assert gpus[0].findtext("remapped_rows/remapped_row_pending") == "No"
    # A pending remap used a spare row (bank leaves Max); only a failure leaves a bank with none.
    assert gpus[1].findtext("remapped_rows/row_remapper_histogram/row_remapper_histogram_partial") == "1 bank(s)"
    assert gpus[1].findtext("remapped_rows/row_remapper_histogram/row_remapper_histogram_none") == "0 bank(s)"
    assert gpus[6].findtext("remapped_rows/row_remapper_histogram/row_remapper_histogram_none") == "1 bank(s)"
    assert gpus[0].findtext("remapped_rows/row_remapper_histogram/row_remapper_histogram_max") == "2560 bank(s)"
    fields = "--query-gpu=remapped_rows.pending,ecc.errors.uncorrected.volatile.total"
    assert run(capsys, fields, "--format=csv,noheader")[1].splitlines()[1] == "Yes, 2"


def test_hw_slowdown_fault(node, capsys):
    run(capsys, "hw-thermal-slowdown", "--gpu", "2", prog="gpuops-lab-fault")
    gpu = xml_root(run(capsys, "-q", "-x")[1]).findall("gpu")[2]
    assert gpu.findtext("clocks_event_reasons/clocks_event_reason_hw_thermal_slowdown") == "Active"
    assert gpu.findtext("clocks_event_reasons/clocks_event_reason_hw_slowdown") == "Active"
    assert gpu.findtext("clocks_event_reasons/clocks_event_reason_gpu_idle") == "Not Active"
    out = run(capsys, "--query-gpu=clocks_throttle_reasons.hw_slowdown", "--format=csv,noheader", "-i", "2")[1]
    assert out == "Active\n"


def test_nvlink_down_fault(node, capsys):
    healthy = run(capsys, "nvlink", "-s", "-i", "0")[1].splitlines()
    assert len(healthy) == 19
    assert "<inactive>" not in "".join(healthy)
    run(capsys, "nvlink-down", "--gpu", "0", "--link", "3", prog="gpuops-lab-fault")
    lines = run(capsys, "nvlink", "-s")[1].splitlines()
    assert "\t Link 3: <inactive>" in lines
    assert lines.count("\t Link 3: <inactive>") == 1


def test_nvlink_error_counters_and_their_fault(node, capsys):
    code, healthy = run(capsys, "nvlink", "-e", "-i", "1")
    assert code == 0
    lines = healthy.splitlines()
    assert lines[0].startswith("GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    assert lines[1:4] == ["\t Link 0: Replay Errors: 0", "\t Link 0: Recovery Errors: 0", "\t Link 0: CRC Errors: 0"]
    assert len(lines) == 1 + 18 * 3
    run(capsys, "nvlink-errors", "--gpu", "1", "--link", "4", "--replay", "7", "--crc", "2", prog="gpuops-lab-fault")
    parsed = nvlink.parse_errors(run(capsys, "nvlink", "-e")[1])
    assert parsed["warnings"] == []
    counters = {(gpu["index"], link["link"]): link["counters"] for gpu in parsed["gpus"] for link in gpu["links"]}
    assert counters[(1, 4)] == {"replay_errors": 7, "recovery_errors": 0, "crc_errors": 2}
    assert counters[(0, 4)] == {"replay_errors": 0, "recovery_errors": 0, "crc_errors": 0}
    assert len(counters) == 8 * 18


def test_nvlink_status_parses_with_the_collection_parser(node, capsys):
    run(capsys, "nvlink-down", "--gpu", "3", "--link", "17", prog="gpuops-lab-fault")
    parsed = nvlink.parse_status(run(capsys, "nvlink", "-s")[1])
    assert parsed["warnings"] == []
    inactive = [(gpu["index"], link["link"]) for gpu in parsed["gpus"] for link in gpu["links"] if not link["active"]]
    assert inactive == [(3, 17)]


@pytest.mark.parametrize("argv", [["nvlink"], ["nvlink", "-s", "-e"], ["nvlink", "-c"]])
def test_nvlink_rejects_what_it_does_not_simulate(node, capsys, argv):
    code, out = run(capsys, *argv)
    assert code == sim.EXIT_INVALID_ARGUMENT
    assert out.startswith("Invalid combination of input arguments")


def test_xid_appends_a_kernel_log_line(node, capsys):
    run(capsys, "xid", "--gpu", "2", "--code", "79", prog="gpuops-lab-fault")
    run(capsys, "xid", "--gpu", "0", "--code", "48", "--message", "DBE", prog="gpuops-lab-fault")
    lines = (node / "var/log/gpuops-lab/kern.log").read_text().splitlines()
    assert len(lines) == 2
    assert " kernel: NVRM: Xid (PCI:0000:3a:00): 79, " in lines[0]
    assert lines[1].endswith(" kernel: NVRM: Xid (PCI:0000:18:00): 48, DBE")


def test_clear_removes_every_fault(node, capsys):
    run(capsys, "missing", "--gpu", "0", prog="gpuops-lab-fault")
    run(capsys, "clear", prog="gpuops-lab-fault")
    assert json.loads((node / "etc/gpuops-lab/faults.json").read_text()) == {}
    assert xml_root(run(capsys, "-q", "-x")[1]).findtext("attached_gpus") == "8"


def test_non_nvswitch_node_has_no_nvlinks_and_no_fabric(node, capsys):
    (node / "etc/gpuops-lab/gpus.json").write_text(json.dumps({"model": "L40S", "count": 4}))
    root = xml_root(run(capsys, "-q", "-x")[1])
    assert root.findtext("attached_gpus") == "4"
    assert root.find("gpu").findtext("product_name") == "NVIDIA L40S"
    assert root.find("gpu").findtext("fabric/state") == "N/A"
    uuid = root.find("gpu").findtext("uuid")
    assert run(capsys, "nvlink", "-s", "-i", "0")[1] == f"GPU 0: NVIDIA L40S (UUID: {uuid})\n"


def test_fabric_and_persistence_follow_the_stand_in_daemons(node, capsys):
    gpu = xml_root(run(capsys, "-q", "-x")[1]).find("gpu")
    assert (gpu.findtext("fabric/state"), gpu.findtext("persistence_mode")) == ("In Progress", "Disabled")
    (node / "run/gpuops-lab/fabricmanager-ready").write_text("")
    (node / "run/gpuops-lab/persistenced-ready").write_text("")
    gpu = xml_root(run(capsys, "-q", "-x")[1]).find("gpu")
    assert (gpu.findtext("fabric/state"), gpu.findtext("persistence_mode")) == ("Completed", "Enabled")


def test_unknown_model_fails_clearly(node, capsys):
    (node / "etc/gpuops-lab/gpus.json").write_text(json.dumps({"model": "Z900", "count": 1}))
    code, out = run(capsys, "-L")
    assert code == 1
    assert "unknown GPU model 'Z900'" in out
