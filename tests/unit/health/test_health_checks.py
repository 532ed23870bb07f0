"""health_checks.evaluate on every fixture node, and the Prometheus rendering."""

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    check_record,
    dcgm_diag,
    health_checks,
    infiniband,
    kernel_log,
    nccl_tests,
    nvidia_smi_xml,
    nvlink,
)

from .conftest import FIXTURES


def smi(fixture_text, name):
    return nvidia_smi_xml.parse(fixture_text("nvidia-smi/" + name))


def failing(result):
    return {(c["name"], c["gpu_index"]) for c in result["checks"] if c["status"] == "fail"}


def by_name(result, name):
    return [c for c in result["checks"] if c["name"] == name]


def test_healthy_h100_node(fixture_text):
    result = health_checks.evaluate(
        {
            "smi": smi(fixture_text, "h100-sxm-8x-healthy.xml"),
            "kernel": kernel_log.parse(fixture_text("kernel-log/clean-journal-short-iso.log")),
            "nvlink_status": nvlink.parse_status(fixture_text("nvlink/h100-8x-status-healthy.txt")),
            "nvlink_errors": nvlink.parse_errors(fixture_text("nvlink/h100-8x-errors-clean.txt")),
            "infiniband": infiniband.read_ports(str(FIXTURES / "infiniband/healthy-8x-ndr")),
            "fabricmanager": {"required": True, "state": "active"},
            "dcgm": {"level": "1", "parsed": dcgm_diag.parse(fixture_text("dcgm/dcgmi-diag-r1-pass.json"))},
            "nccl": {"parsed": nccl_tests.parse(fixture_text("nccl-tests/all_reduce_perf-h100-8x.txt"))},
        },
        {
            "expected_gpu_count": 8,
            "expected_gpu_model": "H100",
            "expected_driver_version": "550",
            "expected_ib_ports": ["mlx5_%d" % i for i in range(8)],
            "expected_ib_rate": 400,
        },
    )
    assert result["healthy"] is True, result["summary"]
    assert result["summary"]["counts"]["warn"] == 0
    assert result["actions"]["node"] == "none"
    assert [g["action"] for g in result["actions"]["gpus"]] == ["none"] * 8
    assert result["facts"]["gpu_count"] == 8
    assert result["facts"]["gpu_models"] == ["NVIDIA H100 80GB HBM3"]
    assert {c["status"] for c in by_name(result, "fabric")} == {"pass"}
    assert by_name(result, "nccl_busbw")[0]["detail"].startswith("bus bandwidth 460.7")
    # every check name is accounted for, skipped ones with a reason
    assert {c["name"] for c in result["checks"]} == set(health_checks.CHECKS)
    assert all(c["detail"] for c in result["checks"])


def test_a100_pending_row_remap_needs_a_gpu_reset(fixture_text):
    result = health_checks.evaluate({"smi": smi(fixture_text, "a100-sxm4-8x-row-remap-pending.xml")}, {})
    assert result["healthy"] is False
    assert failing(result) == {("row_remap", 3), ("ecc_errors", 3)}
    assert result["actions"]["node"] == "reset_gpu"
    assert result["actions"]["gpus"][3] == {"gpu_index": 3, "pci_bus_id": "00000000:4E:00.0", "action": "reset_gpu"}
    assert result["actions"]["gpus"][2]["action"] == "none"
    assert {c["status"] for c in by_name(result, "fabric")} == {"skip"}  # no fabric before Hopper


def test_inactive_nvlink_fails_that_gpu(fixture_text):
    result = health_checks.evaluate(
        {
            "smi": smi(fixture_text, "h100-sxm-8x-healthy.xml"),
            "nvlink_status": nvlink.parse_status(fixture_text("nvlink/h100-8x-status-link-inactive.txt")),
            "nvlink_errors": nvlink.parse_errors(fixture_text("nvlink/h100-8x-errors-crc.txt")),
        }
    )
    assert failing(result) == {("nvlink", 2)}
    (check,) = [c for c in by_name(result, "nvlink") if c["status"] == "fail"]
    assert check["pci_bus_id"] == "00000000:3A:00.0"  # matched by UUID
    assert check["detail"] == "NVLink 7 inactive of 18"
    warned = [c for c in by_name(result, "nvlink_errors") if c["status"] == "warn"]
    assert [c["gpu_index"] for c in warned] == [2]


def test_seven_of_eight_with_xid_79(fixture_text):
    result = health_checks.evaluate(
        {
            "smi": smi(fixture_text, "h100-sxm-7of8.xml"),
            "kernel": kernel_log.parse(fixture_text("kernel-log/xid-dmesg-T.log")),
        },
        {"expected_gpu_count": 8},
    )
    assert result["healthy"] is False
    assert ("gpu_count", None) in failing(result)
    (xid79,) = [c for c in by_name(result, "xid") if "Xid 79" in c["detail"]]
    assert xid79["status"] == "fail"
    assert xid79["gpu_index"] is None
    assert xid79["pci_bus_id"] == "00000000:9A:00.0"  # named as nvidia-smi names GPUs
    assert "not in nvidia-smi output" in xid79["detail"]
    assert result["actions"]["node"] == "reboot_node"


def test_application_faults_alone_leave_the_node_healthy(fixture_text):
    lines = [
        line
        for line in fixture_text("kernel-log/xid-journal-short.log").splitlines()
        if "): 13," in line or "): 31," in line
    ]
    result = health_checks.evaluate(
        {"smi": smi(fixture_text, "h100-sxm-8x-healthy.xml"), "kernel": kernel_log.parse("\n".join(lines))}
    )
    assert result["healthy"] is True
    xids = by_name(result, "xid")
    assert {c["status"] for c in xids} == {"warn"}
    assert all("application fault" in c["detail"] for c in xids)
    assert result["actions"]["node"] == "restart_application"
    assert "x2 on 0000:18:00" in xids[0]["detail"]  # two Xid 13 lines, one check


def test_hw_slowdown(fixture_text):
    result = health_checks.evaluate({"smi": smi(fixture_text, "h100-sxm-8x-hw-slowdown.xml")})
    assert failing(result) == {("clock_events", 5)}
    (check,) = [c for c in by_name(result, "clock_events") if c["gpu_index"] == 5]
    assert "hw_slowdown active" in check["detail"]
    assert "hw_power_brake_slowdown active" in check["detail"]
    assert check["action"] == "hardware_inspection"
    assert by_name(result, "clock_events")[0]["detail"] == "no slowdown (active: sw_power_cap)"


def test_l40s_idle_link_downshift_is_not_a_problem(fixture_text):
    result = health_checks.evaluate(
        {
            "smi": smi(fixture_text, "l40s-1x.xml"),
            "nvlink_status": nvlink.parse_status(fixture_text("nvlink/l40s-status.txt")),
        },
        {"expected_gpu_count": 1, "expected_gpu_model": "L40S"},
    )
    assert result["healthy"] is True
    (pcie,) = by_name(result, "pcie_link")
    assert pcie["status"] == "pass"
    assert "idle" in pcie["detail"]
    assert by_name(result, "nvlink")[0]["status"] == "skip"


def test_pcie_downshift_under_load_warns_and_narrow_link_fails(fixture_text):
    parsed = smi(fixture_text, "h100-sxm-8x-hw-slowdown.xml")
    parsed["gpus"][1]["pcie"]["gen_current"] = 3
    parsed["gpus"][6]["pcie"]["width_current"] = 8
    checks = {c["gpu_index"]: c for c in by_name(health_checks.evaluate({"smi": parsed}), "pcie_link")}
    assert checks[1]["status"] == "warn"
    assert checks[6]["status"] == "fail"
    assert checks[6]["action"] == "hardware_inspection"


def test_v100_pending_retirement(fixture_text):
    result = health_checks.evaluate({"smi": smi(fixture_text, "v100-sxm2-8x-r470-retired-pages.xml")})
    assert ("retired_pages", 2) in failing(result)
    assert {c["status"] for c in by_name(result, "row_remap")} == {"skip"}
    assert result["actions"]["gpus"][2]["action"] == "reset_gpu"


def test_retired_page_limit(fixture_text):
    parsed = smi(fixture_text, "v100-sxm2-8x-r470-retired-pages.xml")
    parsed["gpus"][0]["retired_pages"] = {"single_bit": 40, "double_bit": 22, "pending": False}
    (check,) = [c for c in by_name(health_checks.evaluate({"smi": parsed}), "retired_pages") if c["gpu_index"] == 0]
    assert check["status"] == "fail"
    assert check["action"] == "hardware_inspection"


def test_full_fault_picture(fixture_text):
    result = health_checks.evaluate(
        {
            "smi": smi(fixture_text, "h100-sxm-8x-healthy.xml"),
            "kernel": kernel_log.parse(fixture_text("kernel-log/xid-kmsg.log")),
            "infiniband": infiniband.read_ports(str(FIXTURES / "infiniband/degraded-8x-ndr")),
            "fabricmanager": {"required": True, "state": "inactive"},
            "dcgm": {"level": "2", "parsed": dcgm_diag.parse(fixture_text("dcgm/dcgmi-diag-r2-pcie-fail.json"))},
            "nccl": {"parsed": nccl_tests.parse(fixture_text("nccl-tests/all_reduce_perf-h100-8x-slow.txt"))},
        },
        {"expected_ib_ports": ["mlx5_3:1", "mlx5_5", "mlx5_9"], "expected_ib_rate": 400},
    )
    statuses = {(c["name"], c["detail"].split(" (")[0][:6]): c["status"] for c in by_name(result, "xid")}
    assert statuses[("xid", "Xid 48")] == "fail"
    assert statuses[("xid", "Xid 11")] == "fail"  # 119
    sxid = {c["detail"].split(" x")[0]: c for c in by_name(result, "sxid")}
    assert sxid["SXid 20034"]["status"] == "fail"
    assert sxid["SXid 20009"]["status"] == "warn"
    ib = by_name(result, "infiniband")
    assert [c["status"] for c in ib] == ["fail", "fail", "fail"]
    assert "expected port mlx5_9:1 not found" in ib[2]["detail"]
    assert by_name(result, "fabricmanager")[0]["status"] == "fail"
    assert by_name(result, "dcgm_diag")[0]["gpu_index"] == 4
    assert by_name(result, "nccl_busbw")[0]["status"] == "fail"
    assert result["actions"]["node"] == "hardware_inspection"


def test_unknown_xid_warns(fixture_text):
    kernel = kernel_log.parse("[ 12.5] NVRM: Xid (PCI:0000:18:00): 4242, pid=1, something new\n")
    (check,) = by_name(
        health_checks.evaluate({"smi": smi(fixture_text, "h100-sxm-8x-healthy.xml"), "kernel": kernel}), "xid"
    )
    assert check["status"] == "warn"
    assert "unknown code" in check["detail"]
    assert check["gpu_index"] == 0


def test_missing_nvidia_smi_fails_and_skips_the_rest():
    result = health_checks.evaluate({"unavailable": {"smi": "nvidia-smi not found: install the NVIDIA driver"}})
    assert result["healthy"] is False
    (check,) = by_name(result, "nvidia_smi")
    assert check["detail"] == "nvidia-smi not found: install the NVIDIA driver"
    assert by_name(result, "ecc_errors")[0]["status"] == "skip"


def test_unavailable_sources_are_skips_with_reasons(fixture_text):
    result = health_checks.evaluate(
        {"smi": smi(fixture_text, "l40s-1x.xml"), "unavailable": {"dcgm": "dcgmi not installed", "kernel": "no log"}}
    )
    assert by_name(result, "dcgm_diag")[0] == {
        "name": "dcgm_diag", "status": "skip", "detail": "dcgmi not installed", "gpu_index": None,
        "pci_bus_id": None, "action": "none",
    }  # fmt: skip
    assert {c["detail"] for c in by_name(result, "xid") + by_name(result, "sxid")} == {"no log"}


def test_skip_checks(fixture_text):
    result = health_checks.evaluate(
        {"smi": smi(fixture_text, "a100-sxm4-8x-row-remap-pending.xml")}, {"skip_checks": ["row_remap", "ecc_errors"]}
    )
    assert result["healthy"] is True
    assert [c["status"] for c in by_name(result, "row_remap")] == ["skip"]


def test_expectations(fixture_text):
    result = health_checks.evaluate(
        {"smi": smi(fixture_text, "l40s-1x.xml")},
        {"expected_gpu_count": 2, "expected_gpu_model": "H100", "expected_driver_version": "550.54"},
    )
    assert {("gpu_count", None), ("gpu_model", 0), ("driver_version", None)} <= failing(result)


def test_thresholds(fixture_text):
    parsed = smi(fixture_text, "l40s-1x.xml")
    assert (
        by_name(health_checks.evaluate({"smi": parsed}, {"thresholds": {"temperature_warn": 25}}), "temperature")[0][
            "status"
        ]
        == "warn"
    )
    assert (
        by_name(health_checks.evaluate({"smi": parsed}, {"thresholds": {"temperature_fail": 29}}), "temperature")[0][
            "status"
        ]
        == "fail"
    )
    parsed["gpus"][0]["temperature"]["gpu"] = 91
    assert by_name(health_checks.evaluate({"smi": parsed}), "temperature")[0]["status"] == "fail"  # slowdown at 91 C


def test_field_errors_ask_for_recovery():
    xml = (
        '<nvidia_smi_log><gpu id="00000000:18:00.0"><temperature><gpu_temp>Unknown Error</gpu_temp></temperature>'
        "<gpu_recovery_action>Node Reboot</gpu_recovery_action><clocks_event_reasons/></gpu></nvidia_smi_log>"
    )
    (check,) = by_name(health_checks.evaluate({"smi": nvidia_smi_xml.parse(xml)}), "recovery")
    assert check["status"] == "fail"
    assert check["action"] == "reboot_node"


@pytest.mark.parametrize("name", ["h100-sxm-8x-healthy.xml", "l40s-1x.xml", "v100-sxm2-8x-r470-retired-pages.xml"])
def test_every_check_has_a_known_status_and_action(fixture_text, name):
    for check in health_checks.evaluate({"smi": smi(fixture_text, name)})["checks"]:
        assert check["status"] in check_record.STATUSES
        assert check["name"] in health_checks.CHECKS


def test_nvlink_error_counters_skip_gpus_without_nvlink(fixture_text):
    no_links = {"gpus": [{"index": 0, "uuid": None, "name": "NVIDIA L40S", "links": []}], "warnings": []}
    result = health_checks.evaluate({"smi": smi(fixture_text, "l40s-1x.xml"), "nvlink_errors": no_links}, {})
    (check,) = by_name(result, "nvlink_errors")
    assert check["status"] == "skip"


def test_xid_on_a_gpu_nvidia_smi_lost_names_it_like_nvidia_smi(fixture_text):
    kernel = kernel_log.parse("[  12.5] NVRM: Xid (PCI:0000:9a:00): 79, pid=0, GPU has fallen off the bus.\n")
    result = health_checks.evaluate({"smi": smi(fixture_text, "h100-sxm-7of8.xml"), "kernel": kernel}, {})
    (check,) = by_name(result, "xid")
    assert check["status"] == "fail"
    assert check["gpu_index"] is None
    assert check["pci_bus_id"] == "00000000:9A:00.0"
    assert "GPU not in nvidia-smi output" in check["detail"]
