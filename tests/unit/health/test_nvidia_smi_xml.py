"""nvidia_smi_xml.parse on captured-shape fixtures of every DTD generation."""

import re
import xml.etree.ElementTree as ET

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import nvidia_smi_xml

from .conftest import FIXTURES


def test_h100_healthy_v12(fixture_text):
    parsed = nvidia_smi_xml.parse(fixture_text("nvidia-smi/h100-sxm-8x-healthy.xml"))
    assert parsed["warnings"] == []
    assert parsed["driver_version"] == "550.54.15"
    assert parsed["attached_gpus"] == 8
    assert [gpu["index"] for gpu in parsed["gpus"]] == list(range(8))
    gpu = parsed["gpus"][0]
    assert gpu["product_name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["pci_bus_id"] == "00000000:18:00.0"
    assert gpu["pci_key"] == "0000:18:00"
    assert gpu["clock_event_block"] == "clocks_event_reasons"
    assert gpu["clock_events"]["gpu_idle"] is True
    assert gpu["clock_events"]["hw_slowdown"] is False
    assert gpu["pcie"] == {
        "gen_current": 5, "gen_max": 5, "gen_max_device": 5, "gen_max_host": 5,
        "width_current": 16, "width_max": 16, "replay_counter": 0,
    }  # fmt: skip
    assert gpu["temperature"] == {"gpu": 33, "memory": 41, "slowdown": 89, "shutdown": 92}
    assert gpu["power"] == {"draw": 71.43, "limit": 700.0, "block": "gpu_power_readings"}
    assert gpu["fabric"] == {"state": "Completed", "status": "Success"}
    assert gpu["retired_pages"] is None  # every field N/A on Hopper
    assert gpu["remapped_rows"]["pending"] is False
    assert gpu["mig_mode"] == {"current": False, "pending": False}
    assert gpu["persistence_mode"] is True
    assert gpu["reset_required"] is False


def test_a100_pending_row_remap(fixture_text):
    parsed = nvidia_smi_xml.parse(fixture_text("nvidia-smi/a100-sxm4-8x-row-remap-pending.xml"))
    gpu = parsed["gpus"][3]
    assert gpu["remapped_rows"]["pending"] is True
    assert gpu["remapped_rows"]["uncorrectable"] == 1
    assert gpu["ecc_errors"]["volatile"] == {"correctable": 0, "uncorrectable": 1}
    assert gpu["fabric"] == {"state": None, "status": None}  # N/A before Hopper
    assert all(other["remapped_rows"]["pending"] is False for other in parsed["gpus"] if other["index"] != 3)


def test_v100_r470_throttle_block_and_retired_pages(fixture_text):
    parsed = nvidia_smi_xml.parse(fixture_text("nvidia-smi/v100-sxm2-8x-r470-retired-pages.xml"))
    assert parsed["warnings"] == []
    gpu = parsed["gpus"][2]
    assert gpu["clock_event_block"] == "clocks_throttle_reasons"
    assert gpu["clock_events"]["gpu_idle"] is True
    assert gpu["remapped_rows"] is None  # <remapped_rows>N/A</remapped_rows>
    assert gpu["retired_pages"] == {"single_bit": 3, "double_bit": 2, "pending": True}
    assert gpu["ecc_errors"]["aggregate"] == {"correctable": 17, "uncorrectable": 2}
    assert gpu["power"] == {"draw": 43.44, "limit": 300.0, "block": "power_readings"}
    assert gpu["mig_mode"] == {"current": None, "pending": None}


def test_l40s_single_pcie(fixture_text):
    parsed = nvidia_smi_xml.parse(fixture_text("nvidia-smi/l40s-1x.xml"))
    (gpu,) = parsed["gpus"]
    assert gpu["product_name"] == "NVIDIA L40S"
    assert gpu["pcie"]["gen_current"] == 1
    assert gpu["pcie"]["gen_max"] == 4
    assert gpu["temperature"]["memory"] is None
    assert gpu["performance_state"] == "P8"


def test_seven_of_eight(fixture_text):
    parsed = nvidia_smi_xml.parse(fixture_text("nvidia-smi/h100-sxm-7of8.xml"))
    assert len(parsed["gpus"]) == 7
    assert "0000:9a:00" not in {gpu["pci_key"] for gpu in parsed["gpus"]}


@pytest.mark.parametrize(
    ("reading", "expected"),
    [("N/A", None), ("[N/A]", None), ("Not Supported", None), ("[Not Supported]", None), ("45 C", 45), ("-5 C", -5)],
)
def test_absent_readings_become_none(reading, expected):
    xml = '<nvidia_smi_log><gpu id="00000000:01:00.0"><temperature><gpu_temp>%s</gpu_temp></temperature>' % reading
    xml += "<clocks_event_reasons/></gpu></nvidia_smi_log>"
    assert nvidia_smi_xml.parse(xml)["gpus"][0]["temperature"]["gpu"] == expected


def test_unknown_error_is_a_field_error_and_a_warning():
    xml = (
        '<nvidia_smi_log><attached_gpus>1</attached_gpus><gpu id="00000000:01:00.0">'
        "<temperature><gpu_temp>Unknown Error</gpu_temp></temperature>"
        "<remapped_rows><remapped_row_pending>[GPU requires reset]</remapped_row_pending></remapped_rows>"
        "<clocks_event_reasons/></gpu></nvidia_smi_log>"
    )
    parsed = nvidia_smi_xml.parse(xml)
    gpu = parsed["gpus"][0]
    assert gpu["temperature"]["gpu"] is None
    assert {error["field"] for error in gpu["field_errors"]} == {
        "temperature/gpu_temp",
        "remapped_rows/remapped_row_pending",
    }
    assert any("Unknown Error" in warning for warning in parsed["warnings"])


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "no nvidia_smi_log"),
        ("<nvidia_smi_log><gpu>", "does not parse"),
        ("<?xml version='1.0'?><other/>", "unexpected root"),
    ],
)
def test_bad_input_is_a_warning_not_a_crash(text, needle):
    parsed = nvidia_smi_xml.parse(text)
    assert parsed["gpus"] == []
    assert any(needle in warning for warning in parsed["warnings"])


def test_text_before_the_xml_is_reported(fixture_text):
    text = "WARNING: infoROM is corrupted at gpu 0000:18:00.0\n" + fixture_text("nvidia-smi/l40s-1x.xml")
    parsed = nvidia_smi_xml.parse(text)
    assert len(parsed["gpus"]) == 1
    assert any("infoROM is corrupted" in warning for warning in parsed["warnings"])


def test_count_mismatch_is_reported():
    xml = '<nvidia_smi_log><attached_gpus>2</attached_gpus><gpu id="00000000:01:00.0"><clocks_event_reasons/></gpu>'
    parsed = nvidia_smi_xml.parse(xml + "</nvidia_smi_log>")
    assert any("attached_gpus says 2" in warning for warning in parsed["warnings"])


def test_doctype_with_internal_subset_is_dropped_before_parsing():
    xml = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "boom">]><nvidia_smi_log><driver_version>&e;</driver_version>'
    parsed = nvidia_smi_xml.parse(xml + "</nvidia_smi_log>")
    assert parsed["driver_version"] is None
    assert parsed["warnings"]  # undefined entity once the DTD is gone: reported, not expanded


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("00000000:18:00.0", "0000:18:00"),
        ("0000:9A:00", "0000:9a:00"),
        ("PCI:0000:cb:00", "0000:cb:00"),
        ("00000001:00:0D.0", "0001:00:0d"),
        ("garbage", None),
        (None, None),
    ],
)
def test_normalize_bus_id(value, expected):
    assert nvidia_smi_xml.normalize_bus_id(value) == expected


@pytest.mark.parametrize("name", sorted(path.name for path in (FIXTURES / "nvidia-smi").glob("*.xml")))
def test_the_xml_carries_no_nvlink_link_state(name):
    """Why ``nvidia-smi nvlink -s``/``-e`` stay calls of their own (node_reader): no capture, v11 or v12 DTD, has a
    per-link NVLink element under ``<gpu>``; NVLink shows only as ``<fabric>``. A capture that does should be read
    from the one ``-q -x`` call instead."""
    root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", (FIXTURES / "nvidia-smi" / name).read_text()))
    for gpu in root.iter("gpu"):
        tags = {element.tag for element in gpu.iter()}
        assert not {tag for tag in tags if "nvlink" in tag.lower()}, name
