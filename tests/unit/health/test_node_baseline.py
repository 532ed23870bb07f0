"""Each node's own baseline: last good NCCL bus bandwidth and DCGM figures, the fleet's median, pre-existing."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import nccl_tests, node_baseline

from .conftest import FIXTURES


def check(name, status="fail", detail="x", gpu=None, bus=None, action="reset_gpu"):
    return {"name": name, "status": status, "detail": detail, "gpu_index": gpu, "pci_bus_id": bus, "action": action}


GOOD = nccl_tests.parse((FIXTURES / "nccl-tests/all_reduce_perf-h100-8x.txt").read_text(encoding="utf-8"))
SLOW = nccl_tests.parse((FIXTURES / "nccl-tests/all_reduce_perf-h100-8x-slow.txt").read_text(encoding="utf-8"))
HEALTHY = {"healthy": True, "checks": []}
DCGM_PCIE = {
    "level": "2",
    "parsed": {
        "results": [
            {"test": "PCIe", "status": "pass", "gpu_index": 0,
             "info": "GPU 0 Host to GPU bandwidth: 54.2 GB/s; GPU to Host bandwidth: 55.1 GB/s"},
        ],
        "failed": [], "warnings": [],
    },
}  # fmt: skip


def test_the_first_figure_is_recorded_from_a_healthy_run():
    found = node_baseline.figures({"nccl": {"parsed": GOOD}})
    checks, baseline = node_baseline.judge({}, found, HEALTHY, 0.0)
    assert [c["status"] for c in checks] == ["pass"]
    assert "first figure" in checks[0]["detail"]
    stored = node_baseline.update(baseline, found, HEALTHY, 100.0)
    assert stored["nccl_busbw_gbps"] == {"value": GOOD["busbw_gbps"], "time": 100.0}
    assert node_baseline.update({}, found, {"healthy": False, "checks": []}, 100.0)["nccl_busbw_gbps"] is None


def test_a_regression_against_the_node_itself_fails():
    stored = node_baseline.update({}, node_baseline.figures({"nccl": {"parsed": GOOD}}), HEALTHY, 0.0)
    slow = node_baseline.figures({"nccl": {"parsed": SLOW}})
    checks, _baseline = node_baseline.judge(stored, slow, HEALTHY, 10.0)
    assert [(c["name"], c["status"], c["action"]) for c in checks] == [("nccl_baseline", "fail", "hardware_inspection")]
    assert "below this node's last good %.1f GB/s" % GOOD["busbw_gbps"] in checks[0]["detail"]


def test_a_regression_against_the_fleet_median_fails_without_a_node_baseline():
    found = node_baseline.figures({"nccl": {"parsed": GOOD}})
    checks, _baseline = node_baseline.judge({}, found, HEALTHY, 0.0, fleet_busbw=GOOD["busbw_gbps"] * 1.2)
    assert checks[0]["status"] == "fail"
    assert "the fleet's median" in checks[0]["detail"]
    checks, _baseline = node_baseline.judge({}, found, HEALTHY, 0.0, fleet_busbw=GOOD["busbw_gbps"] * 1.05)
    assert checks[0]["status"] == "pass"


def test_dcgm_bandwidth_figures_against_the_node_baseline():
    found = node_baseline.figures({"dcgm": DCGM_PCIE})
    assert found["dcgm"] == {"PCIe gpu0 gpu 0 host to gpu bandwidth": 54.2, "PCIe gpu0 gpu to host bandwidth": 55.1}
    stored = node_baseline.update({}, found, HEALTHY, 0.0)
    lower = {"dcgm": {key: value * 0.8 for key, value in found["dcgm"].items()}, "nccl_busbw_gbps": None}
    checks, _baseline = node_baseline.judge(stored, lower, HEALTHY, 1.0)
    assert [(c["name"], c["status"]) for c in checks] == [("dcgm_baseline", "fail")]


def test_a_failure_already_present_is_reported_as_pre_existing():
    failing = {"healthy": False, "checks": [check("pcie_link", gpu=2, bus="00000000:3A:00.0", detail="x8")]}
    stored = node_baseline.update({}, {}, failing, 1767225600.0)
    again = node_baseline.mark_pre_existing(failing, stored)
    assert again["checks"][0]["pre_existing"] == "2026-01-01 00:00 UTC"
    assert again["checks"][0]["detail"] == "x8 (pre-existing, failing since 2026-01-01 00:00 UTC)"
    new = {"healthy": False, "checks": [check("ecc_errors", gpu=2, bus="00000000:3A:00.0")]}
    assert "pre_existing" not in node_baseline.mark_pre_existing(new, stored)["checks"][0]
    assert node_baseline.update(stored, {}, HEALTHY, 2.0)["failing"] == {}
