"""The health checks on a GPU with MIG on: ECC per MIG device, row remaps from the kernel log, the layout.

Fixture: nvidia-smi/h200-1x-mig-3211.xml (the real H200 capture with MIG on as the driver reports it; see
tests/fixtures/README.md), checked against the real nvsmi_device_v12.dtd excerpt next to it.
"""

import copy
import re

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    health_checks,
    kernel_log,
    mig_health,
    node_verdict,
    nvidia_smi_xml,
)

from .conftest import FIXTURES

MIG_XML = "nvidia-smi/h200-1x-mig-3211.xml"
DTD = FIXTURES / "nvidia-smi/nvsmi_device_v12-535.261.03-mig-excerpt.dtd"
# matrix/mig_profiles.yml's h200-141gb set as the filter mig_profile_set gives it (the file's form)
H200_SET = {
    "memory_gb": 141,
    "profiles": [
        {"name": "1g.18gb", "id": 19, "compute": 1, "memory": 1, "placements": [0, 1, 2, 3, 4, 5, 6]},
        {"name": "1g.18gb+me", "id": 20, "compute": 1, "memory": 1, "placements": [0, 1, 2, 3, 4, 5, 6]},
        {"name": "1g.35gb", "id": 15, "compute": 1, "memory": 2, "placements": [0, 2, 4, 6]},
        {"name": "2g.35gb", "id": 14, "compute": 2, "memory": 2, "placements": [0, 2, 4]},
        {"name": "3g.71gb", "id": 9, "compute": 3, "memory": 4, "placements": [0, 4]},
        {"name": "4g.71gb", "id": 5, "compute": 4, "memory": 4, "placements": [0]},
        {"name": "7g.141gb", "id": 0, "compute": 7, "memory": 8, "placements": [0]},
    ],
}
XID_LINE = "2026-12-04T15:02:11+0000 h200-vm kernel: NVRM: Xid (PCI:0000:00:06): %d, pid=818, name=python3, %s\n"


def mig_text(fixture_text):
    return fixture_text(MIG_XML)


def evaluate(text, kernel_text="", options=None, **inputs):
    given = {"smi": nvidia_smi_xml.parse(text)}
    if kernel_text is not None:
        given["kernel"] = kernel_log.parse(kernel_text)
    given.update(inputs)
    return health_checks.evaluate(given, options)


def check(result, name):
    found = [c for c in result["checks"] if c["name"] == name]
    assert len(found) == 1, found
    return found[0]


def with_device_count(text, gpu_instance, count):
    """The fixture with one MIG device's volatile uncorrectable SRAM count set."""
    pattern = re.compile(
        r"(<gpu_instance_id>%d</gpu_instance_id>.*?<sram_uncorrectable>)0(</sram_uncorrectable>)" % gpu_instance,
        re.S,
    )
    changed, replaced = pattern.subn(r"\g<1>%s\g<2>" % count, text, count=1)
    assert replaced == 1
    return changed


# --- the reading --------------------------------------------------------------------------------------------


def test_parser_reads_the_mig_devices_and_the_na_readings_of_mig_on(fixture_text):
    smi = nvidia_smi_xml.parse(mig_text(fixture_text))
    assert smi["warnings"] == []
    gpu = smi["gpus"][0]
    assert gpu["mig_mode"] == {"current": True, "pending": True}
    assert gpu["mig_devices"] == 4
    assert gpu["ecc_errors"]["volatile"] == {"correctable": None, "uncorrectable": None}
    assert gpu["ecc_errors"]["aggregate"] == {"correctable": 0, "uncorrectable": 0}
    assert gpu["remapped_rows"] is None
    assert gpu["mig_device_readings"][0] == {
        "index": 0,
        "gpu_instance_id": 2,
        "compute_instance_id": 0,
        "multiprocessors": 60,
        "copy_engines": 3,
        "decoders": 3,
        "ofa": 0,
        "memory_total_mib": 71424,
        "volatile_sram_uncorrectable": 0,
    }
    assert [p["gpu_instance_id"] for p in gpu["processes"]] == [2]


def test_an_unreadable_mig_device_count_is_a_parse_warning(fixture_text):
    text = with_device_count(mig_text(fixture_text), 4, "Unknown Error")
    smi = nvidia_smi_xml.parse(text)
    assert smi["gpus"][0]["mig_device_readings"][1]["volatile_sram_uncorrectable"] is None
    assert any("mig_device[1]/ecc_error_count/volatile_count/sram_uncorrectable" in w for w in smi["warnings"])


def _sequence(name):
    """The children of a DTD element declared as a plain sequence ``(a, b, c)``."""
    text = DTD.read_text(encoding="utf-8")
    match = re.search(r"<!ELEMENT\s+%s\s+\(([^()|]*)\)\+?>" % name, text)
    assert match, name
    return [part.strip() for part in match.group(1).split(",")]


@pytest.mark.parametrize(
    ("element", "path"),
    [
        ("mig_device", "mig_devices/mig_device"),
        ("shared", "mig_devices/mig_device/device_attributes/shared"),
        ("ecc_error_count", "mig_devices/mig_device/ecc_error_count"),
        ("volatile_count", "mig_devices/mig_device/ecc_error_count/volatile_count"),
        ("fb_memory_usage", "mig_devices/mig_device/fb_memory_usage"),
        ("process_info", "processes/process_info"),
        ("mig_mode", "mig_mode"),
    ],
)
def test_the_fixture_follows_the_real_dtd(fixture_text, element, path):
    """Each element's children are those, in that order, that the real nvidia-smi's DTD declares."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", mig_text(fixture_text)))
    found = root.findall("gpu/" + path)
    assert found
    for node in found:
        assert [child.tag for child in node] == _sequence(element)


def test_the_dtd_lets_remapped_rows_read_na_and_counts_mig_ecc_per_device():
    text = DTD.read_text(encoding="utf-8")
    assert re.search(r"<!ELEMENT remapped_rows\s+\(#PCDATA\|", text)
    assert _sequence("ecc_error_count") == ["volatile_count"]
    assert _sequence("volatile_count") == ["sram_uncorrectable"]


# --- ECC with MIG on ----------------------------------------------------------------------------------------


def test_mig_on_ecc_passes_on_the_mig_devices_counts_not_on_na(fixture_text):
    result = evaluate(mig_text(fixture_text))
    ecc = check(result, "ecc_errors")
    assert ecc["status"] == "pass"
    assert "4 MIG devices" in ecc["detail"]
    assert "no volatile DRAM" in ecc["detail"]
    assert result["healthy"]


def test_an_uncorrectable_error_on_one_mig_device_fails_the_gpu_naming_the_device(fixture_text):
    result = evaluate(with_device_count(mig_text(fixture_text), 7, 2))
    ecc = check(result, "ecc_errors")
    assert ecc["status"] == "fail"
    assert ecc["action"] == "reset_gpu"
    assert "2 uncorrectable SRAM ECC errors" in ecc["detail"]
    assert "GI 7/CI 0: 2" in ecc["detail"]
    assert not result["healthy"]
    assert node_verdict.reason(result).startswith("GPU 0 (0000:00:06.0) ecc_errors: 2 uncorrectable SRAM")


def test_counts_of_several_mig_devices_are_summed_against_the_limit(fixture_text):
    text = with_device_count(with_device_count(mig_text(fixture_text), 7, 1), 8, 1)
    limits = {"thresholds": {"ecc_volatile_uncorrectable": 1}}
    ecc = check(evaluate(text, options=limits), "ecc_errors")
    assert ecc["status"] == "fail"
    assert "GI 7/CI 0: 1, GI 8/CI 0: 1" in ecc["detail"]
    one = with_device_count(mig_text(fixture_text), 7, 1)
    assert check(evaluate(one, options=limits), "ecc_errors")["status"] == "pass"


def test_an_unreadable_mig_device_count_is_no_pass(fixture_text):
    ecc = check(evaluate(with_device_count(mig_text(fixture_text), 4, "N/A")), "ecc_errors")
    assert ecc["status"] == "warn"
    assert "not readable on MIG device GI 4/CI 0" in ecc["detail"]


def test_mig_on_without_any_mig_device_cannot_read_volatile_counts(fixture_text):
    text = re.sub(r"<mig_devices>.*</mig_devices>", "<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>",
                  mig_text(fixture_text), flags=re.S)  # fmt: skip
    result = evaluate(text)
    assert check(result, "ecc_errors")["status"] == "warn"
    assert "has none" in check(result, "ecc_errors")["detail"]
    mode = check(result, "mig_mode")
    assert mode["status"] == "warn"
    assert "no GPU instance" in mode["detail"]


def test_aggregate_errors_and_the_sram_threshold_are_still_judged_with_mig_on(fixture_text):
    text = mig_text(fixture_text).replace(
        "<sram_threshold_exceeded>No</sram_threshold_exceeded>",
        "<sram_threshold_exceeded>Yes</sram_threshold_exceeded>",
    )
    text = text.replace(
        "<dram_uncorrectable>0</dram_uncorrectable>\n\t\t\t\t<sram_threshold",
        "<dram_uncorrectable>3</dram_uncorrectable>\n\t\t\t\t<sram_threshold",
    )
    ecc = check(evaluate(text), "ecc_errors")
    assert ecc["status"] == "fail"
    assert ecc["action"] == "hardware_inspection"
    assert "3 uncorrectable ECC errors over the GPU's life" in ecc["detail"]


def test_mig_off_gpus_are_judged_as_before(fixture_text):
    healthy = evaluate(fixture_text("nvidia-smi/h200-1x-vm-idle.xml"))
    assert check(healthy, "ecc_errors")["detail"] == "no uncorrectable ECC errors"
    assert check(healthy, "mig_mode")["detail"] == "MIG disabled"
    assert check(healthy, "row_remap")["status"] == "pass"
    pending = evaluate(fixture_text("nvidia-smi/a100-sxm4-8x-row-remap-pending.xml"))
    assert [c["gpu_index"] for c in pending["checks"] if c["name"] == "row_remap" and c["status"] == "fail"] == [3]
    assert mig_health.ecc_errors(nvidia_smi_xml.parse(fixture_text("nvidia-smi/h200-1x-vm-idle.xml"))["gpus"][0],
                                 {}) is None  # fmt: skip


# --- row remapping with MIG on ------------------------------------------------------------------------------


def test_mig_on_row_remap_is_judged_from_the_kernel_log(fixture_text):
    row = check(evaluate(mig_text(fixture_text)), "row_remap")
    assert row["status"] == "pass"
    assert "no Xid 63 or 64 for this GPU" in row["detail"]
    assert "does not report remapped rows" in row["detail"]


def test_an_xid_63_of_this_gpu_with_mig_on_fails_until_the_gpu_is_reset(fixture_text):
    kernel = XID_LINE % (63, "Row Remapper: New row (0x00000000001ff1c0) Marked for Remapping, reset gpu to activate.")
    result = evaluate(mig_text(fixture_text), kernel)
    row = check(result, "row_remap")
    assert row["status"] == "fail"
    assert row["action"] == "reset_gpu"
    assert "Xid 63 x1" in row["detail"]


def test_an_xid_64_of_this_gpu_with_mig_on_fails_with_the_catalog_action(fixture_text):
    kernel = XID_LINE % (64, "Row Remapper Error: failed to record the remap.")
    row = check(evaluate(mig_text(fixture_text), kernel), "row_remap")
    assert row["status"] == "fail"
    assert "Xid 64 x1" in row["detail"]
    assert row["action"] == mig_health.xid_catalog.lookup(64)["action"]


def test_an_xid_63_of_another_gpu_does_not_count(fixture_text):
    kernel = (XID_LINE % (63, "row remap")).replace("0000:00:06", "0000:18:00")
    assert check(evaluate(mig_text(fixture_text), kernel), "row_remap")["status"] == "pass"


def test_mig_on_without_the_kernel_log_says_so(fixture_text):
    skipped = check(evaluate(mig_text(fixture_text), None), "row_remap")
    assert skipped["status"] == "skip"
    assert "was not read" in skipped["detail"]
    failed = evaluate(mig_text(fixture_text), None, failed={"kernel": "journalctl timed out after 60 s"})
    row = check(failed, "row_remap")
    assert row["status"] == "fail"
    assert "journalctl timed out" in row["detail"]


def test_remapped_rows_reported_with_mig_on_are_judged_as_the_driver_gives_them(fixture_text):
    """A driver that does report remapped rows with MIG on (no active instance): its reading decides."""
    text = mig_text(fixture_text).replace(
        "<remapped_rows>N/A</remapped_rows>",
        "<remapped_rows><remapped_row_corr>0</remapped_row_corr><remapped_row_unc>1</remapped_row_unc>"
        "<remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No</remapped_row_failure>"
        "</remapped_rows>",
    )
    row = check(evaluate(text), "row_remap")
    assert row["status"] == "fail"
    assert row["detail"].startswith("row remapping pending")


# --- the layout in the verdict --------------------------------------------------------------------------------


def test_the_verdict_carries_the_layout_named_from_the_profile_set(fixture_text):
    result = evaluate(mig_text(fixture_text), options={"mig_profile_set": H200_SET})
    mig = result["facts"]["gpus"][0]["mig"]
    assert mig["current"] is True
    assert mig["pending"] is True
    assert [(i["id"], i["profile"], i["compute_instances"]) for i in mig["gpu_instances"]] == [
        (2, "3g.71gb", [0]),
        (4, "2g.35gb", [0]),
        (7, "1g.18gb", [0]),
        (8, "1g.18gb", [0]),
    ]
    assert check(result, "mig_mode")["detail"] == "MIG enabled: 3g.71gb (GI 2), 2g.35gb (GI 4), 2 x 1g.18gb (GI 7, 8)"


def test_without_a_profile_set_the_layout_names_instances_by_id_and_memory(fixture_text):
    result = evaluate(mig_text(fixture_text))
    instances = result["facts"]["gpus"][0]["mig"]["gpu_instances"]
    assert [i["profile"] for i in instances] == [None] * 4
    assert instances[0]["memory_mib"] == 71424
    assert instances[0]["multiprocessors"] == 60
    assert "71424 MiB (GI 2)" in check(result, "mig_mode")["detail"]


def test_a_gpu_without_mig_reports_its_mode_and_no_instance(fixture_text):
    facts = evaluate(fixture_text("nvidia-smi/h200-1x-vm-idle.xml"))["facts"]
    assert facts["gpus"][0]["mig"] == {"current": False, "pending": False, "gpu_instances": []}
    l40s = evaluate(fixture_text("nvidia-smi/l40s-1x.xml"))["facts"]["gpus"][0]["mig"]
    assert l40s["current"] is None
    assert l40s["gpu_instances"] == []


@pytest.mark.parametrize(
    ("instance", "expected"),
    [
        ({"memory_mib": 16384, "copy_engines": 1, "ofa": 0}, ["1g.18gb"]),
        ({"memory_mib": 16384, "copy_engines": 1, "ofa": 1}, ["1g.18gb+me"]),
        ({"memory_mib": 33280, "copy_engines": 1, "ofa": 0}, ["1g.35gb"]),
        ({"memory_mib": 33280, "copy_engines": 2, "ofa": 0}, ["2g.35gb"]),
        ({"memory_mib": 71424, "copy_engines": 4, "ofa": 0}, ["4g.71gb"]),
        ({"memory_mib": 143360, "copy_engines": 8, "ofa": 1}, ["7g.141gb"]),
        # engines unknown: every profile of that memory, none chosen
        ({"memory_mib": 33280, "copy_engines": None, "ofa": None}, ["1g.35gb", "2g.35gb"]),
        ({"memory_mib": None}, []),
    ],
)
def test_profile_candidates(instance, expected):
    assert mig_health.profile_candidates(instance, 143771, H200_SET) == expected


def test_ambiguous_readings_list_the_candidates_instead_of_guessing(fixture_text):
    text = mig_text(fixture_text).replace("<copy_engine_count>2</copy_engine_count>",
                                          "<copy_engine_count>N/A</copy_engine_count>")  # fmt: skip
    result = evaluate(text, options={"mig_profile_set": H200_SET})
    instance = result["facts"]["gpus"][0]["mig"]["gpu_instances"][1]
    assert instance["profile"] is None
    assert instance["profile_candidates"] == ["1g.35gb", "2g.35gb"]


def test_the_loaded_form_of_a_profile_set_names_the_same(fixture_text):
    loaded = {"profiles": {p["name"]: {k: v for k, v in p.items() if k != "name"} for p in H200_SET["profiles"]}}
    gpu = nvidia_smi_xml.parse(mig_text(fixture_text))["gpus"][0]
    assert [i["profile"] for i in mig_health.layout(gpu, loaded)["gpu_instances"]] == [
        i["profile"] for i in mig_health.layout(gpu, copy.deepcopy(H200_SET))["gpu_instances"]
    ]


def test_a_pending_mode_change_still_warns_to_reset(fixture_text):
    text = mig_text(fixture_text).replace("<pending_mig>Enabled</pending_mig>", "<pending_mig>Disabled</pending_mig>")
    mode = check(evaluate(text), "mig_mode")
    assert mode["status"] == "warn"
    assert mode["action"] == "reset_gpu"
    assert mode["detail"] == "MIG enabled, disabled pending: reset the GPU to apply"
