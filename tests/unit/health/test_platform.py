"""What the platform gives (issue 26, item 7), judged on real captures.

A real H200 of an HGX passed through alone to a VM (driver 580.159.04, open modules, no NVSwitch): its
``nvidia-smi nvlink -s`` and ``-e`` print nothing, and the node is healthy, idle and under load. A node
of several GPUs keeps the model's NVLink count; a failing platform check names the setting that
describes such a platform.
"""

import copy

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    health_checks,
    nvidia_smi_xml,
    nvlink,
    nvlink_counts,
    settle_wait,
)

H200_CAPTURES = ("h200-1x-vm-idle.xml", "h200-1x-vm-load.xml")


def smi(fixture_text, name):
    return nvidia_smi_xml.parse(fixture_text("nvidia-smi/" + name))


def by_name(result, name):
    return [c for c in result["checks"] if c["name"] == name]


def h200_inputs(fixture_text, capture, nvswitch=()):
    return {
        "smi": smi(fixture_text, capture),
        "nvlink_status": nvlink.parse_status(fixture_text("nvlink/h200-1x-vm-status-empty.txt")),
        "nvlink_errors": nvlink.parse_errors(fixture_text("nvlink/h200-1x-vm-errors-empty.txt")),
        "nvswitch": list(nvswitch) if nvswitch is not None else None,
    }


# --- one GPU, no NVSwitch ---------------------------------------------------------------------------


@pytest.mark.parametrize("capture", H200_CAPTURES)
@pytest.mark.parametrize("nvswitch", [(), None], ids=["live", "offline"])
def test_one_h200_in_a_vm_is_healthy(fixture_text, capture, nvswitch):
    result = health_checks.evaluate(h200_inputs(fixture_text, capture, nvswitch))
    assert result["healthy"] is True, result["summary"]["failed"]
    assert result["actions"]["node"] == "none"
    assert result["summary"]["failed"] == []
    assert {c["action"] for c in result["checks"]} == {"none"}
    (check,) = by_name(result, "nvlink")
    assert (check["status"], check["detail"], check["gpu_index"]) == ("pass", nvlink_counts.ONE_GPU, 0)
    assert check["detail"] == "one GPU, no NVSwitch: no NVLink expected"
    assert [c["status"] for c in by_name(result, "pcie_link")] == ["pass"]  # Gen5 x16 of Gen5 x16


def test_one_gpu_whose_nvlink_read_failed_is_not_failed_for_it(fixture_text):
    inputs = h200_inputs(fixture_text, "h200-1x-vm-idle.xml")
    del inputs["nvlink_status"]
    inputs["failed"] = {"nvlink_status": "nvidia-smi nvlink -s failed (rc=255)"}
    result = health_checks.evaluate(inputs)
    assert result["healthy"] is True
    assert [c["status"] for c in by_name(result, "nvlink")] == ["skip"]


def test_the_gate_does_not_wait_for_nvlinks_one_gpu_alone_cannot_have(fixture_text):
    parsed = smi(fixture_text, "h200-1x-vm-idle.xml")
    assert settle_wait.nvlink_expectations(parsed, []) == {}
    assert settle_wait.nvlink_expectations(parsed, [], override=18) == {0: 18}


@pytest.mark.parametrize(
    ("change", "options", "why"),
    [
        (lambda parsed: None, {"expected_gpu_count": 8}, "a node meant to have 8 that shows one"),
        (lambda parsed: parsed["gpus"][0].update(fabric={"state": "Completed", "status": "Success"}), {}, "fabric"),
        (lambda parsed: parsed["gpus"][0].update(index=2), {}, "GPU 2 seen alone is one of several"),
    ],
)
def test_one_gpu_that_is_not_alone_keeps_the_models_count(fixture_text, change, options, why):
    inputs = h200_inputs(fixture_text, "h200-1x-vm-idle.xml")
    change(inputs["smi"])
    (check,) = by_name(health_checks.evaluate(inputs, options), "nvlink")
    assert check["status"] == "fail", why
    assert "an NVIDIA H200 has 18 NVLinks" in check["detail"]


def test_one_gpu_behind_nvswitches_keeps_the_models_count(fixture_text):
    result = health_checks.evaluate(h200_inputs(fixture_text, "h200-1x-vm-idle.xml", nvswitch=["0000:05:00.0"]))
    (check,) = by_name(result, "nvlink")
    assert check["status"] == "fail"
    assert result["healthy"] is False


def test_the_operators_expected_nvlinks_wins_over_one_gpu(fixture_text):
    result = health_checks.evaluate(h200_inputs(fixture_text, "h200-1x-vm-idle.xml"), {"expected_nvlinks": 18})
    (check,) = by_name(result, "nvlink")
    assert check["status"] == "fail"
    assert "expected_nvlinks=18" in check["detail"]
    assert "set gpuops_health_expected_nvlinks" not in check["detail"]  # the operator's own count: no hint


# --- several GPUs keep the model's count -------------------------------------------------------------


def two_h200(fixture_text):
    parsed = smi(fixture_text, "h200-1x-vm-idle.xml")
    second = copy.deepcopy(parsed["gpus"][0])
    second.update(index=1, uuid="GPU-second", pci_bus_id="00000000:00:07.0", pci_key="0000:00:07")
    parsed["gpus"].append(second)
    return parsed


def test_two_gpus_without_nvlink_fail_and_name_the_setting(fixture_text):
    inputs = h200_inputs(fixture_text, "h200-1x-vm-idle.xml")
    inputs["smi"] = two_h200(fixture_text)
    result = health_checks.evaluate(inputs)
    checks = by_name(result, "nvlink")
    assert [(c["gpu_index"], c["status"]) for c in checks] == [(0, "fail"), (1, "fail")]
    assert checks[0]["detail"] == (
        "not listed by nvidia-smi nvlink -s (an NVIDIA H200 has 18 NVLinks): "
        "if this platform has no NVLink, set gpuops_health_expected_nvlinks: 0"
    )
    declared = health_checks.evaluate(inputs, {"expected_nvlinks": 0})
    assert declared["healthy"] is True
    assert [c["status"] for c in by_name(declared, "nvlink")] == ["skip"]


def test_eight_gpus_behind_nvswitch_with_one_missing_from_nvlink_s_still_fail(fixture_text):
    lines = fixture_text("nvlink/h100-8x-status-healthy.txt").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("GPU 3:"))
    end = next(i for i, line in enumerate(lines) if line.startswith("GPU 4:"))
    status = nvlink.parse_status("\n".join(lines[:start] + lines[end:]))
    assert [entry["index"] for entry in status["gpus"]] == [0, 1, 2, 4, 5, 6, 7]
    result = health_checks.evaluate(
        {"smi": smi(fixture_text, "h100-sxm-8x-healthy.xml"), "nvlink_status": status, "nvswitch": ["0000:05:00.0"]}
    )
    assert result["healthy"] is False
    failed = [c for c in by_name(result, "nvlink") if c["status"] == "fail"]
    assert [c["gpu_index"] for c in failed] == [3]
    assert failed[0]["detail"].startswith(
        "not listed by nvidia-smi nvlink -s (an NVIDIA H100 80GB HBM3 has 18 NVLinks)"
    )
    assert failed[0]["action"] == "reset_gpu"


def test_seven_of_eight_gpus_keep_the_models_count(fixture_text):
    # the node that lost a GPU is not judged as a smaller platform
    status = nvlink.parse_status(fixture_text("nvlink/h100-8x-status-all-inactive.txt"))
    result = health_checks.evaluate({"smi": smi(fixture_text, "h100-sxm-7of8.xml"), "nvlink_status": status})
    assert {c["status"] for c in by_name(result, "nvlink")} == {"fail"}
    assert "set gpuops_health_expected_nvlinks: 0" in by_name(result, "nvlink")[0]["detail"]


# --- PCIe failures name their settings ----------------------------------------------------------------


def test_a_narrow_pcie_link_names_the_width_setting(fixture_text):
    result = health_checks.evaluate({"smi": smi(fixture_text, "h100-sxm-8x-pcie-x8-platform.xml")})
    check = by_name(result, "pcie_link")[0]
    assert check["status"] == "fail"
    assert check["detail"] == (
        "PCIe link x8, capable of x16: reseat or inspect the GPU and riser; "
        "if this platform gives x8 by design, set gpuops_health_expected_pcie_width: 8"
    )


def test_a_low_pcie_gen_under_load_names_the_gen_setting(fixture_text):
    parsed = smi(fixture_text, "h200-1x-vm-load.xml")
    parsed["gpus"][0]["pcie"]["gen_current"] = 4
    (check,) = by_name(health_checks.evaluate({"smi": parsed}), "pcie_link")
    assert check["status"] == "warn"
    assert check["detail"].endswith("if this platform gives Gen4 by design, set gpuops_health_expected_pcie_gen: 4")


def test_a_link_below_the_declared_reference_names_where_it_came_from(fixture_text):
    parsed = smi(fixture_text, "h100-sxm-8x-pcie-x8-platform.xml")
    parsed["gpus"][3]["pcie"]["width_current"] = 4
    declared = health_checks.evaluate({"smi": parsed}, {"expected_pcie_width": 8})
    assert (
        "(gpuops_health_expected_pcie_width / gpuops_health_expected_pcie_gen)"
        in (by_name(declared, "pcie_link")[3]["detail"])
    )
    baseline = health_checks.evaluate(
        {"smi": parsed}, {"pcie_baseline": {"0000:5d:00": {"width": 8, "gen": 5}}, "expected_pcie_width": 8}
    )
    (failing,) = [c for c in by_name(baseline, "pcie_link") if c["status"] == "fail"]
    assert failing["gpu_index"] == 3
    assert "below x8 of this node's baseline (gpuops_health_pcie_baseline)" in failing["detail"]
