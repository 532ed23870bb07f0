"""The lab's stand-in dcgmi and all_reduce_perf: the fixtures' layouts, read by the health parsers, and their faults."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import dcgm_diag, nccl_tests, thresholds

ROOT = Path(__file__).resolve().parents[3]
LAB = ROOT / "extensions" / "molecule" / "lab"
FIXTURES = ROOT / "tests" / "fixtures"


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dcgmi = load("dcgmi_sim", LAB / "gpu-tools" / "dcgmi_sim.py")
nccl = load("all_reduce_perf_sim", LAB / "gpu-tools" / "all_reduce_perf_sim.py")


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A lab node root with driver 550.127.05 and 8 H100 SXM; the stand-ins ask the simulated nvidia-smi."""
    monkeypatch.setenv("GPUOPS_LAB_ROOT", str(tmp_path))
    smi = LAB / "nvidia-smi" / "nvidia_smi_sim.py"
    monkeypatch.setenv("GPUOPS_LAB_NVIDIA_SMI", f"{sys.executable} {smi}")
    (tmp_path / "usr/share/gpuops-lab").mkdir(parents=True)
    (tmp_path / "etc/gpuops-lab").mkdir(parents=True)
    (tmp_path / "usr/share/gpuops-lab/driver.json").write_text(json.dumps({"version": "550.127.05", "cuda": "12.4"}))
    (tmp_path / "etc/gpuops-lab/gpus.json").write_text(json.dumps({"model": "H100-SXM", "count": 8, "nvswitch": True}))
    return tmp_path


def shape(document):
    return [
        (category["category"], [(test["name"], len(test["results"])) for test in category["tests"]])
        for category in document["DCGM GPU Diagnostic"]["test_categories"]
    ]


@pytest.mark.parametrize(
    ("level", "fixture"), [("1", "dcgmi-diag-r1-pass.json"), ("2", "dcgmi-diag-r2-pcie-fail.json")]
)
def test_dcgmi_diag_has_the_layout_of_the_fixture(node, capsys, level, fixture):
    assert dcgmi.main(["diag", "-r", level, "-j"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert shape(document) == shape(json.loads((FIXTURES / "dcgm" / fixture).read_text()))
    parsed = dcgm_diag.parse(json.dumps(document))
    assert parsed["results"]
    assert parsed["failed"] == []


def test_dcgmi_fail_test_fault_names_the_gpu(node, capsys):
    (node / "etc/gpuops-lab/dcgmi.fault").write_text("fail-test PCIe 4\n")
    assert dcgmi.main(["diag", "-r", "2", "-j"]) == 1
    parsed = dcgm_diag.parse(capsys.readouterr().out)
    assert [(failure["test"], failure["gpu_index"]) for failure in parsed["failed"]] == [("PCIe", 4)]


@pytest.mark.parametrize(("fault", "code"), [("no-hostengine", 255), ("fail", 1), ("empty", 0)])
def test_dcgmi_faults_give_no_results(node, capsys, fault, code):
    (node / "etc/gpuops-lab/dcgmi.fault").write_text(fault + "\n")
    assert dcgmi.main(["diag", "-r", "1", "-j"]) == code
    captured = capsys.readouterr()
    assert captured.out == ""
    assert dcgm_diag.parse(captured.out)["results"] == []
    if fault != "empty":
        assert "Unable to connect to host engine" in captured.err


def test_dcgmi_driver_mismatch_fails_the_nvml_test(node, capsys):
    (node / "run/gpuops-lab").mkdir(parents=True)
    (node / "run/gpuops-lab/nvidia-version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.08\n")
    assert dcgmi.main(["diag", "-r", "2", "-j"]) == 1
    parsed = dcgm_diag.parse(capsys.readouterr().out)
    assert [failure["test"] for failure in parsed["failed"]] == ["NVML Library"]


def test_all_reduce_perf_reads_like_the_fixture(node, capsys):
    assert nccl.main(["-b", "1G", "-e", "16G", "-f", "2", "-g", "8"]) == 0
    out = capsys.readouterr().out
    fixture = (FIXTURES / "nccl-tests" / "all_reduce_perf-h100-8x.txt").read_text()
    assert [line[:14] for line in out.splitlines() if line.startswith("#")][:3] == [
        line[:14] for line in fixture.splitlines() if line.startswith("#")
    ][:3]
    parsed = nccl_tests.parse(out)
    assert parsed["max_size_bytes"] == 16 * 1024**3
    assert parsed["wrong"] == 0
    # the fixture's 460.37 at 16 GB, so an H100 node passes the health check's 460 GB/s as the real one does
    assert parsed["busbw_gbps"] == pytest.approx(nccl_tests.parse(fixture)["busbw_gbps"], abs=0.01)
    assert parsed["busbw_gbps"] >= thresholds.nccl_busbw_minimum([{"product_name": "NVIDIA H100 80GB HBM3"}])
    assert out.count("#  Rank ") == 8


@pytest.mark.parametrize(("fault", "code"), [("empty", 0), ("fail", 1), ("slow", 0), ("wrong", 1)])
def test_all_reduce_perf_faults(node, capsys, fault, code):
    (node / "etc/gpuops-lab/all_reduce_perf.fault").write_text(fault)
    assert nccl.main(["-b", "16G", "-e", "16G", "-f", "2", "-g", "8"]) == code
    parsed = nccl_tests.parse(capsys.readouterr().out)
    if fault in ("empty", "fail"):
        assert parsed["busbw_gbps"] is None
    elif fault == "slow":
        assert parsed["busbw_gbps"] < 240
    else:
        assert parsed["wrong"] == 2


def test_all_reduce_perf_more_gpus_than_present_fails(node, capsys):
    assert nccl.main(["-b", "16G", "-e", "16G", "-f", "2", "-g", "9"]) == 1
    assert "Test CUDA failure" in capsys.readouterr().out
