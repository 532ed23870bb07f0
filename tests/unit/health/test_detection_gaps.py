"""The three kinds of miss a held-out set of captures found (issue 18, item 5), each solved as a class.

1. a GPU that fell off the bus with no Xid line, in any of the driver's wordings;
2. ``nvidia-smi nvlink -s`` saying all links are inactive on GPUs whose model has NVLink;
3. a PCIe width below the GPU's maximum that is the platform's normal state.
"""

import pathlib

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    health_checks,
    kernel_log,
    nvidia_smi_xml,
    nvlink,
    nvlink_counts,
)

from .conftest import FIXTURES

MATRIX = pathlib.Path(__file__).resolve().parents[3] / "matrix" / "nvidia_stack.yml"


def smi(fixture_text, name):
    return nvidia_smi_xml.parse(fixture_text("nvidia-smi/" + name))


def by_name(result, name):
    return [c for c in result["checks"] if c["name"] == name]


def statuses(result, name):
    return [c["status"] for c in by_name(result, name)]


# --- 1. fallen off the bus ----------------------------------------------------------------------------


def test_fallen_off_bus_without_xid_fails_and_names_the_gpu(fixture_text):
    result = health_checks.evaluate(
        {
            "smi": smi(fixture_text, "h100-sxm-7of8.xml"),
            "kernel": kernel_log.parse(fixture_text("kernel-log/fallen-off-bus-dmesg.log")),
        },
        {},
    )
    assert result["healthy"] is False
    assert statuses(result, "xid") == ["pass"]  # no Xid line at all
    lost = by_name(result, "fallen_off_bus")
    assert [(c["status"], c["pci_bus_id"]) for c in lost] == [
        ("fail", "00000000:9A:00.0"),  # the probe message: not in nvidia-smi, named like nvidia-smi names GPUs
        ("fail", "00000000:AB:00.0"),
    ]
    assert "no Xid logged" in lost[0]["detail"]
    assert "GPU not in nvidia-smi output" in lost[0]["detail"]
    assert lost[1]["gpu_index"] is not None  # still listed by nvidia-smi: attributed to its index
    assert "without an address" in lost[1]["detail"]  # the NV_ERR_GPU_IS_LOST line is folded in
    assert {c["action"] for c in lost} == {"reboot_node"}  # Xid 79's action in the catalog
    assert result["actions"]["node"] == "reboot_node"


def test_fallen_off_bus_with_its_xid_79_says_so(fixture_text):
    result = health_checks.evaluate(
        {
            "smi": smi(fixture_text, "h100-sxm-7of8.xml"),
            "kernel": kernel_log.parse(fixture_text("kernel-log/xid-dmesg.log")),
        },
        {},
    )
    (lost,) = by_name(result, "fallen_off_bus")
    assert lost["status"] == "fail"
    assert "also Xid 79" in lost["detail"]


def test_lost_gpu_without_any_address_fails_the_node():
    text = "[ 10.5] NVRM: GPU is lost, skipping nvidia_ioctl\n"
    result = health_checks.evaluate({"smi": None, "kernel": kernel_log.parse(text)}, {})
    (lost,) = by_name(result, "fallen_off_bus")
    assert lost["status"] == "fail"
    assert lost["pci_bus_id"] is None
    assert "compare nvidia-smi with lspci" in lost["detail"]


def test_clean_log_passes_fallen_off_bus(fixture_text):
    log = kernel_log.parse(fixture_text("kernel-log/clean-journal-short-iso.log"))
    result = health_checks.evaluate({"kernel": log})
    assert statuses(result, "fallen_off_bus") == ["pass"]


# --- 2. NVLink expectations from the GPU model and the NVSwitches ------------------------------------


def test_all_links_inactive_on_every_sxm_gpu_fails_every_gpu(fixture_text):
    status = nvlink.parse_status(fixture_text("nvlink/h100-8x-status-all-inactive.txt"))
    assert all(gpu["all_inactive"] and not gpu["links"] for gpu in status["gpus"])
    result = health_checks.evaluate({"smi": smi(fixture_text, "h100-sxm-8x-healthy.xml"), "nvlink_status": status})
    checks = by_name(result, "nvlink")
    assert [c["status"] for c in checks] == ["fail"] * 8
    assert [c["gpu_index"] for c in checks] == list(range(8))
    assert checks[0]["detail"].startswith("all links inactive, an NVIDIA H100 80GB HBM3 has 18 NVLinks")
    assert {c["action"] for c in checks} == {"reset_gpu"}


def test_all_inactive_model_from_the_nvlink_header_when_nvidia_smi_xml_is_missing(fixture_text):
    status = nvlink.parse_status(fixture_text("nvlink/b200-gpu2-all-inactive.txt"))
    (check,) = by_name(health_checks.evaluate({"nvlink_status": status}), "nvlink")
    assert check["status"] == "fail"
    assert check["gpu_index"] == 2
    assert "NVIDIA B200 has 18 NVLinks" in check["detail"]


def test_unknown_model_behind_nvswitch_needs_links(fixture_text):
    status = nvlink.parse_status(fixture_text("nvlink/h100-8x-status-all-inactive.txt").replace("H100 80GB HBM3", "X9"))
    parsed = smi(fixture_text, "h100-sxm-8x-healthy.xml")
    for gpu in parsed["gpus"]:
        gpu["product_name"], gpu["fabric"] = "NVIDIA X9", {}
    without = health_checks.evaluate({"smi": parsed, "nvlink_status": status})
    assert statuses(without, "nvlink") == ["skip"]  # nothing says links belong there: as before
    behind = health_checks.evaluate({"smi": parsed, "nvlink_status": status, "nvswitch": ["0000:05:00.0"]})
    assert set(statuses(behind, "nvlink")) == {"fail"}
    assert "NVSwitches on this node" in by_name(behind, "nvlink")[0]["detail"]


def test_fewer_links_than_the_model_has_fails(fixture_text):
    text = "\n".join(
        line for line in fixture_text("nvlink/h100-8x-status-healthy.txt").splitlines() if "Link 17:" not in line
    )
    result = health_checks.evaluate(
        {"smi": smi(fixture_text, "h100-sxm-8x-healthy.xml"), "nvlink_status": nvlink.parse_status(text)}
    )
    checks = by_name(result, "nvlink")
    assert {c["status"] for c in checks} == {"fail"}
    assert checks[0]["detail"] == (
        "17 NVLinks active, an NVIDIA H100 80GB HBM3 has 18 NVLinks: "
        "if this platform gives 17, set gpuops_health_expected_nvlinks: 17"
    )


def test_expected_nvlinks_option_wins(fixture_text):
    status = nvlink.parse_status(fixture_text("nvlink/h100-8x-status-all-inactive.txt"))
    result = health_checks.evaluate(
        {"smi": smi(fixture_text, "h100-sxm-8x-healthy.xml"), "nvlink_status": status}, {"expected_nvlinks": 0}
    )
    assert statuses(result, "nvlink") == ["skip"]


def test_pcie_gpus_still_skip(fixture_text):
    result = health_checks.evaluate(
        {
            "smi": smi(fixture_text, "l40s-1x.xml"),
            "nvlink_status": nvlink.parse_status(fixture_text("nvlink/l40s-status.txt")),
        }
    )
    assert statuses(result, "nvlink") == ["skip"]


@pytest.mark.parametrize(
    ("name", "links"),
    [
        ("NVIDIA H100 80GB HBM3", 18),
        ("NVIDIA H200", 18),
        ("NVIDIA H20", 18),
        ("NVIDIA H800", 8),
        ("NVIDIA A100-SXM4-80GB", 12),
        ("NVIDIA A800-SXM4-80GB", 8),
        ("Tesla V100-SXM2-32GB", 6),
        ("NVIDIA B200", 18),
        ("NVIDIA GB200", 18),
        ("NVIDIA H100 PCIe", 0),
        ("NVIDIA H100 NVL", 0),
        ("NVIDIA H200 NVL", 0),
        ("NVIDIA H800 PCIe", 0),
        ("NVIDIA A100 80GB PCIe", 0),
        ("Tesla V100-PCIE-32GB", 0),
        ("NVIDIA L40S", None),
        ("NVIDIA GH200 480GB", None),
    ],
)
def test_links_for_model(name, links):
    assert nvlink_counts.links_for_model(name)[0] == links


def test_every_matrix_model_behind_nvswitch_has_a_link_count():
    """The matrix says which models sit behind NVSwitch; the table must give each of them links."""
    matrix = yaml.safe_load(MATRIX.read_text(encoding="utf-8"))
    for model in matrix["gpus"]:
        names = [alias for alias in model["aliases"] if " " in alias or "-" in alias]  # product names, not keys
        for name in names:
            links, _why = nvlink_counts.links_for_model(name)
            if model["nvswitch"]:
                assert links, "%s (%s) has nvswitch: true but no NVLink count" % (name, model["key"])
            elif model["key"].endswith(("-pcie", "-nvl")):
                assert links == 0, "%s (%s) is a PCIe/NVL form" % (name, model["key"])


# --- 3. PCIe width/speed against the platform's value or the node's baseline -------------------------


def test_reduced_width_fails_without_a_reference(fixture_text):
    result = health_checks.evaluate({"smi": smi(fixture_text, "h100-sxm-8x-pcie-x8-platform.xml")})
    checks = by_name(result, "pcie_link")
    assert {c["status"] for c in checks} == {"fail"}  # today's behaviour, kept
    assert checks[0]["detail"].startswith("PCIe link x8, capable of x16")


def test_reduced_width_is_normal_on_a_declared_platform(fixture_text):
    result = health_checks.evaluate(
        {"smi": smi(fixture_text, "h100-sxm-8x-pcie-x8-platform.xml")}, {"expected_pcie_width": 8}
    )
    checks = by_name(result, "pcie_link")
    assert {c["status"] for c in checks} == {"pass"}
    assert checks[0]["detail"] == "Gen5 x8; x8 of x16, as the platform's declared value (x8)"


def test_narrower_than_the_platform_fails(fixture_text):
    parsed = smi(fixture_text, "h100-sxm-8x-pcie-x8-platform.xml")
    parsed["gpus"][3]["pcie"]["width_current"] = 4
    result = health_checks.evaluate({"smi": parsed}, {"expected_pcie_width": 8, "expected_pcie_gen": 5})
    failed = [c for c in by_name(result, "pcie_link") if c["status"] == "fail"]
    assert [c["gpu_index"] for c in failed] == [3]
    assert failed[0]["detail"].startswith("PCIe link x4, below x8 of the platform's declared value")
    assert failed[0]["action"] == "hardware_inspection"


def test_lower_gen_than_the_platform_under_load_warns(fixture_text):
    parsed = smi(fixture_text, "h100-sxm-8x-pcie-x8-platform.xml")
    parsed["gpus"][0]["pcie"]["gen_current"] = 4
    result = health_checks.evaluate({"smi": parsed}, {"expected_pcie_width": 8, "expected_pcie_gen": 5})
    assert statuses(result, "pcie_link")[0] == "warn"


def test_node_baseline_wins_and_is_what_the_module_reports(fixture_text):
    parsed = smi(fixture_text, "h100-sxm-8x-pcie-x8-platform.xml")
    baseline = health_checks.evaluate({"smi": parsed})["facts"]["pcie"]
    assert baseline["00000000:18:00.0"] == {"width": 8, "gen": 5}
    assert len(baseline) == 8
    # the same node later: GPU 5 trained at x4; the platform value (x16) is overruled by the node's baseline
    parsed["gpus"][5]["pcie"]["width_current"] = 4
    result = health_checks.evaluate({"smi": parsed}, {"pcie_baseline": baseline, "expected_pcie_width": 16})
    assert statuses(result, "pcie_link") == ["pass"] * 5 + ["fail"] + ["pass"] * 2
    assert "below x8 of this node's baseline" in by_name(result, "pcie_link")[5]["detail"]


def test_baseline_keys_in_any_spelling(fixture_text):
    parsed = smi(fixture_text, "h100-sxm-8x-pcie-x8-platform.xml")
    result = health_checks.evaluate({"smi": parsed}, {"pcie_baseline": {"0000:18:00": {"width": 8}}})
    assert statuses(result, "pcie_link")[0] == "pass"
    assert statuses(result, "pcie_link")[1] == "fail"  # no baseline for it and no platform value
    with pytest.raises(ValueError, match="pcie_baseline"):
        health_checks.evaluate({"smi": parsed}, {"pcie_baseline": {"not-a-bus": {"width": 8}}})


def test_idle_gpu_records_no_generation(fixture_text):
    baseline = health_checks.evaluate({"smi": smi(fixture_text, "l40s-1x.xml")})["facts"]["pcie"]
    assert [value["gen"] for value in baseline.values()] == [None]


def test_fixture_file_exists():
    assert (FIXTURES / "nvidia-smi/h100-sxm-8x-pcie-x8-platform.xml").is_file()
