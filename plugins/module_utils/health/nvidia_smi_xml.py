# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read ``nvidia-smi -q -x`` into plain dicts, one per GPU.

Handles the DTD generations seen in the field: ``nvsmi_device_v11.dtd``
(R460-R535: ``clocks_throttle_reasons``, ``power_readings``, ECC counted as
``single_bit``/``double_bit``, ``remapped_rows`` = ``N/A`` on Volta) and
``nvsmi_device_v12.dtd`` (R550+: ``clocks_event_reasons``,
``gpu_power_readings``, ECC counted as ``sram_*``/``dram_*``), and each ``<mig_device>`` of a GPU with MIG on
(``mig_device_readings``: what ``mig_health`` judges and names the layout from). Readings of
``N/A``, ``[N/A]``, ``Not Supported`` and friends become ``None``. Anything
unexpected is a parse warning; :func:`parse` never raises.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

# Readings that mean "no value" rather than a value.
_ABSENT = frozenset(
    {
        "",
        "n/a",
        "[n/a]",
        "not supported",
        "[not supported]",
        "none",
        "unknown",
        "requested functionality has been deprecated",
        "[requested functionality has been deprecated]",
    }
)
# Readings that mean the driver could not read the field: reported per GPU.
_ERRORS = ("unknown error", "gpu requires reset", "insufficient permissions", "gpu is lost")

_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")
_DOCTYPE = re.compile(r"<!DOCTYPE[^>\[]*(\[[^\]]*\])?\s*>", re.IGNORECASE)
_BUS_ID = re.compile(r"^(?:PCI:)?([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?$")


def normalize_bus_id(value):
    """``00000000:18:00.0``, ``0000:18:00`` or ``PCI:0000:18:00`` -> ``0000:18:00`` (lower case).

    Kernel Xid lines name a GPU by domain:bus:device without the function and
    with a 4-digit domain; nvidia-smi uses an 8-digit domain and the function.
    This is the key both are matched on. Returns None for anything else.
    """
    if not value:
        return None
    match = _BUS_ID.match(value.strip())
    if not match:
        return None
    domain, bus, device = match.group(1), match.group(2), match.group(3)
    return "%04x:%02x:%02x" % (int(domain, 16) & 0xFFFF, int(bus, 16), int(device, 16))


def _text(element, path):
    if element is None:
        return None
    found = element.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


class _Reader:
    """Reads one GPU element, remembering fields the driver could not read."""

    def __init__(self, element):
        self.element = element
        self.field_errors = []

    def raw(self, path):
        return _text(self.element, path)

    def value(self, path):
        text = self.raw(path)
        if text is None:
            return None
        lowered = text.lower()
        if lowered in _ABSENT:
            return None
        stripped = lowered.strip("[]")
        if any(stripped.startswith(error) for error in _ERRORS):
            self.field_errors.append({"field": path, "reading": text})
            return None
        return text

    def number(self, path):
        text = self.value(path)
        if text is None:
            return None
        match = _NUMBER.match(text)
        if not match:
            self.field_errors.append({"field": path, "reading": text})
            return None
        number = float(match.group(1))
        return int(number) if number.is_integer() and "." not in match.group(1) else number

    def flag(self, path, true_words=("enabled", "yes", "active"), false_words=("disabled", "no", "not active")):
        text = self.value(path)
        if text is None:
            return None
        lowered = text.lower()
        if lowered in true_words:
            return True
        if lowered in false_words:
            return False
        self.field_errors.append({"field": path, "reading": text})
        return None

    def first_number(self, *paths):
        for path in paths:
            number = self.number(path)
            if number is not None:
                return number
        return None


def _sum(values):
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _ecc_counts(reader, scope):
    """Correctable / uncorrectable totals of one ECC scope (``volatile`` or ``aggregate``)."""
    base = "ecc_errors/" + scope
    if reader.element.find(base + "/single_bit") is not None:
        # v11 and older: per-unit counts with a total per bit width.
        return {
            "correctable": reader.number(base + "/single_bit/total"),
            "uncorrectable": reader.number(base + "/double_bit/total"),
        }
    correctable = _sum([reader.number(base + "/sram_correctable"), reader.number(base + "/dram_correctable")])
    uncorrectable = _sum(
        [
            reader.number(base + "/sram_uncorrectable"),
            reader.number(base + "/sram_uncorrectable_parity"),
            reader.number(base + "/sram_uncorrectable_secded"),
            reader.number(base + "/dram_uncorrectable"),
        ]
    )
    return {"correctable": correctable, "uncorrectable": uncorrectable}


def _clock_events(reader):
    for block, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        element = reader.element.find(block)
        if element is None:
            continue
        reasons = {}
        for child in element:
            name = child.tag[len(prefix) :] if child.tag.startswith(prefix) else child.tag
            reasons[name] = reader.flag(block + "/" + child.tag)
        return block, reasons
    return None, {}


def _remapped_rows(reader):
    element = reader.element.find("remapped_rows")
    if element is None or len(element) == 0:
        return None  # absent or "N/A" (Volta and older, or MIG enabled)
    base = "remapped_rows/"
    return {
        "correctable": reader.number(base + "remapped_row_corr"),
        "uncorrectable": reader.number(base + "remapped_row_unc"),
        "pending": reader.flag(base + "remapped_row_pending"),
        "failure": reader.flag(base + "remapped_row_failure"),
        "histogram_none": reader.number(base + "row_remapper_histogram/row_remapper_histogram_none"),
        "histogram_low": reader.number(base + "row_remapper_histogram/row_remapper_histogram_low"),
    }


def _retired_pages(reader):
    element = reader.element.find("retired_pages")
    if element is None or len(element) == 0:
        return None
    base = "retired_pages/"
    single = reader.number(base + "multiple_single_bit_retirement/retired_count")
    double = reader.number(base + "double_bit_retirement/retired_count")
    pending = reader.flag(base + "pending_retirement")
    if pending is None:
        pending = reader.flag(base + "pending_blacklist")
    if single is None and double is None and pending is None:
        return None  # every field N/A: Ampere and later use row remapping
    return {"single_bit": single, "double_bit": double, "pending": pending}


def _power(reader):
    for block in ("gpu_power_readings", "power_readings"):
        if reader.element.find(block) is None:
            continue
        return {
            "draw": reader.first_number(block + "/power_draw", block + "/instant_power_draw"),
            "limit": reader.first_number(
                block + "/current_power_limit", block + "/enforced_power_limit", block + "/power_limit"
            ),
            "block": block,
        }
    return {"draw": None, "limit": None, "block": None}


def _processes(element):
    """``<processes><process_info>``: pid, name, type, used memory and, under MIG, the GPU/compute instance ids."""
    found = []
    for info in element.findall("processes/process_info"):
        reader = _Reader(info)
        found.append(
            {
                "pid": reader.number("pid"),
                "name": reader.value("process_name"),
                "type": reader.value("type"),
                "used_memory_mib": reader.number("used_memory"),
                "gpu_instance_id": reader.number("gpu_instance_id"),
                "compute_instance_id": reader.number("compute_instance_id"),
            }
        )
    return found


def _mig_device_readings(element, field_errors):
    """``<mig_devices><mig_device>`` (``nvsmi_device_v12.dtd``: index, gpu_instance_id, compute_instance_id,
    device_attributes/shared, ecc_error_count/volatile_count/sram_uncorrectable, fb_memory_usage, bar1_memory_usage).

    One entry per MIG device (a compute instance in its GPU instance). The XML names no profile; the shared
    engine counts and the memory are what tell one apart. With MIG on, the driver counts volatile ECC errors per
    MIG device, and only uncorrectable SRAM ones (NVML ``nvmlDeviceGetMemoryErrorCounter``).
    """
    found = []
    for number, device in enumerate(element.findall("mig_devices/mig_device")):
        reader = _Reader(device)
        shared = "device_attributes/shared/"
        found.append(
            {
                "index": reader.number("index"),
                "gpu_instance_id": reader.number("gpu_instance_id"),
                "compute_instance_id": reader.number("compute_instance_id"),
                "multiprocessors": reader.number(shared + "multiprocessor_count"),
                "copy_engines": reader.number(shared + "copy_engine_count"),
                "decoders": reader.number(shared + "decoder_count"),
                "ofa": reader.number(shared + "ofa_count"),
                "memory_total_mib": reader.number("fb_memory_usage/total"),
                "volatile_sram_uncorrectable": reader.number("ecc_error_count/volatile_count/sram_uncorrectable"),
            }
        )
        for error in reader.field_errors:
            field_errors.append(dict(error, field="mig_devices/mig_device[%d]/%s" % (number, error["field"])))
    return found


def _gpu(element, index):
    reader = _Reader(element)
    bus_id_raw = reader.value("pci/pci_bus_id") or element.get("id")
    clock_block, clock_events = _clock_events(reader)
    recovery_action = reader.value("gpu_recovery_action")
    gpu = {
        "index": index,
        "pci_bus_id": bus_id_raw,
        "pci_key": normalize_bus_id(bus_id_raw),
        "product_name": reader.value("product_name"),
        "product_architecture": reader.value("product_architecture"),
        "uuid": reader.value("uuid"),
        "serial": reader.value("serial"),
        "minor_number": reader.number("minor_number"),
        "vbios_version": reader.value("vbios_version"),
        "persistence_mode": reader.flag("persistence_mode"),
        "mig_mode": {"current": reader.flag("mig_mode/current_mig"), "pending": reader.flag("mig_mode/pending_mig")},
        "mig_devices": len(element.findall("mig_devices/mig_device")),
        "mig_device_readings": _mig_device_readings(element, reader.field_errors),
        "ecc_mode": {"current": reader.flag("ecc_mode/current_ecc"), "pending": reader.flag("ecc_mode/pending_ecc")},
        "ecc_errors": {
            "volatile": _ecc_counts(reader, "volatile"),
            "aggregate": _ecc_counts(reader, "aggregate"),
            "sram_threshold_exceeded": reader.flag("ecc_errors/aggregate/sram_threshold_exceeded"),
        },
        "retired_pages": _retired_pages(reader),
        "remapped_rows": _remapped_rows(reader),
        "pcie": {
            "gen_current": reader.number("pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
            "gen_max": reader.number("pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
            "gen_max_device": reader.number("pci/pci_gpu_link_info/pcie_gen/max_device_link_gen"),
            "gen_max_host": reader.number("pci/pci_gpu_link_info/pcie_gen/max_host_link_gen"),
            "width_current": reader.number("pci/pci_gpu_link_info/link_widths/current_link_width"),
            "width_max": reader.number("pci/pci_gpu_link_info/link_widths/max_link_width"),
            "replay_counter": reader.number("pci/replay_counter"),
        },
        "temperature": {
            "gpu": reader.number("temperature/gpu_temp"),
            "memory": reader.number("temperature/memory_temp"),
            "slowdown": reader.number("temperature/gpu_temp_slow_threshold"),
            "shutdown": reader.number("temperature/gpu_temp_max_threshold"),
        },
        "power": _power(reader),
        "clocks": {
            "sm": reader.number("clocks/sm_clock"),
            "memory": reader.number("clocks/mem_clock"),
            "sm_max": reader.number("max_clocks/sm_clock"),
        },
        "performance_state": reader.value("performance_state"),
        "clock_event_block": clock_block,
        "clock_events": clock_events,
        "fabric": {"state": reader.value("fabric/state"), "status": reader.value("fabric/status")},
        "reset_required": reader.flag("gpu_reset_status/reset_required"),
        "drain_and_reset_recommended": reader.flag("gpu_reset_status/drain_and_reset_recommended"),
        "recovery_action": recovery_action,
        "memory_total_mib": reader.number("fb_memory_usage/total"),
        "pci_device_id": reader.value("pci/pci_device_id"),
        "processes": _processes(element),
    }
    gpu["field_errors"] = reader.field_errors
    return gpu


def _start_of_xml(text):
    for marker in ("<?xml", "<nvidia_smi_log"):
        position = text.find(marker)
        if position >= 0:
            return position
    return -1


def parse(text):
    """Parse ``nvidia-smi -q -x`` output.

    Returns ``{driver_version, cuda_version, attached_gpus, timestamp, gpus, warnings}``.
    ``gpus`` is a list of dicts in the order nvidia-smi lists them (its index
    order); ``warnings`` lists what looked wrong (text before the XML, such as
    ``WARNING: infoROM is corrupted``, a count mismatch, unreadable fields).
    """
    result = {
        "driver_version": None,
        "cuda_version": None,
        "attached_gpus": None,
        "timestamp": None,
        "gpus": [],
        "warnings": [],
    }
    if not text or not text.strip():
        result["warnings"].append("nvidia-smi output is empty")
        return result
    start = _start_of_xml(text)
    if start < 0:
        result["warnings"].append("no nvidia_smi_log XML in the output: %s" % text.strip()[:200])
        return result
    preamble = text[:start].strip()
    if preamble:
        result["warnings"].append("text before the XML: %s" % preamble[:300])
    body = _DOCTYPE.sub("", text[start:], count=1)
    try:
        root = ET.fromstring(body)
    except ET.ParseError as error:
        result["warnings"].append("nvidia-smi XML does not parse: %s" % error)
        return result
    if root.tag != "nvidia_smi_log":
        result["warnings"].append("unexpected root element <%s>, expected <nvidia_smi_log>" % root.tag)
        return result
    result["driver_version"] = _text(root, "driver_version")
    result["cuda_version"] = _text(root, "cuda_version")
    result["timestamp"] = _text(root, "timestamp")
    attached = _text(root, "attached_gpus")
    try:
        result["attached_gpus"] = int(attached) if attached is not None else None
    except ValueError:
        result["warnings"].append("attached_gpus is not a number: %s" % attached)
    for index, element in enumerate(root.findall("gpu")):
        gpu = _gpu(element, index)
        if gpu["pci_key"] is None:
            result["warnings"].append("GPU %d: PCI bus id %r not understood" % (index, gpu["pci_bus_id"]))
        if gpu["clock_event_block"] is None:
            result["warnings"].append("GPU %d: neither clocks_event_reasons nor clocks_throttle_reasons" % index)
        for error in gpu["field_errors"]:
            result["warnings"].append("GPU %d: %s reads %r" % (index, error["field"], error["reading"]))
        result["gpus"].append(gpu)
    attached_count = result["attached_gpus"]
    if isinstance(attached_count, int) and attached_count != len(result["gpus"]):
        result["warnings"].append(
            "attached_gpus says %s but the XML lists %d GPUs" % (attached_count, len(result["gpus"]))
        )
    return result
