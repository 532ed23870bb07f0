#!/usr/bin/env python3
"""Simulated ``nvidia-smi`` for the gpuops lab (never shipped by a role).

The stand-in ``nvidia-smi`` package installs this file as ``/usr/bin/nvidia-smi`` and
links it as ``/usr/sbin/gpuops-lab-fault``. Everything it reports comes from
plain files, so tests can set up any node state:

``/usr/share/gpuops-lab/driver.json``
    written by the libnvidia-ml1 package: ``{"version": "550.127.05", "cuda": "12.4"}``
    (the user-space library, i.e. what NVML reports as installed).
``/run/gpuops-lab/nvidia-version``
    the "loaded kernel module", in the format of ``/proc/driver/nvidia/version``.
    Absent after boot (``/run`` is fresh when a lab node restarts); the first
    call "loads" the installed version, as nvidia-modprobe does. When it differs
    from the library, every call fails with NVML's "Driver/library version
    mismatch" (exit 18), as on a real node after an upgrade without a reboot.
``/etc/gpuops-lab/gpus.json``
    the node's GPUs: ``{"model": "H100-SXM", "count": 8, "nvswitch": true}``;
    optional ``bus_ids`` (list), ``serial_base`` (int). Models: see ``MODELS``.
``/etc/gpuops-lab/faults.json``
    injected faults, usually written with ``gpuops-lab-fault`` (see ``--help``):
    ``missing`` [gpu index], ``ecc`` {index: {"volatile_uncorrectable": n,
    "aggregate_uncorrectable": n, "volatile_correctable": n}}, ``row_remap_pending``
    [index], ``row_remap_failure`` [index], ``hw_slowdown`` [index],
    ``hw_thermal_slowdown`` [index], ``hw_power_brake_slowdown`` [index],
    ``nvlink_down`` {index: [link]}, ``nvlink_errors`` {index: {link: {"replay": n, "recovery": n,
    "crc": n}}} (what ``nvlink -e`` counts), ``pcie_degraded`` {index: {"gen": g, "width": w}}.
``/var/log/gpuops-lab/kern.log``
    the kernel log the health check reads; ``gpuops-lab-fault xid`` appends an
    ``NVRM: Xid`` line to it in the rsyslog high-precision format.
``/run/gpuops-lab/fabricmanager-ready``, ``/run/gpuops-lab/persistenced-ready``
    written by the stand-in daemons while they run; they drive the fabric state
    and the persistence mode that ``-q`` reports.

MIG (``-mig``, ``-r``, ``nvidia-smi mig ...``, ``<mig_mode>``) lives in ``nvidia_smi_mig.py``, installed
beside this file as ``/usr/lib/gpuops-lab/nvidia_smi_mig.py``; its docstring lists its state files.

``GPUOPS_LAB_ROOT`` prefixes every path (unit tests point it at a temp dir).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import socket
import sys
import xml.etree.ElementTree as ET

# MIG: next to this file in the repository, in /usr/lib/gpuops-lab on a lab node.
sys.path[:0] = [os.path.dirname(os.path.realpath(__file__)), "/usr/lib/gpuops-lab"]
import nvidia_smi_mig as mig

# Model table: name as nvidia-smi prints it, memory, power limit, PCIe link,
# NVLink count, architecture, PCI device id and compute capability.
MODELS = {
    "H100-SXM": {
        "product_name": "NVIDIA H100 80GB HBM3",
        "architecture": "Hopper",
        "memory_mib": 81559,
        "power_limit_w": 700,
        "pcie_gen": 5,
        "pcie_width": 16,
        "nvlinks": 18,
        "nvlink_gbps": 26.562,
        "pci_device_id": "233010DE",
        "compute_cap": "9.0",
        "bus_ids": ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"],
    },
    "H200-SXM": {
        "product_name": "NVIDIA H200",
        "architecture": "Hopper",
        "memory_mib": 143771,
        "power_limit_w": 700,
        "pcie_gen": 5,
        "pcie_width": 16,
        "nvlinks": 18,
        "nvlink_gbps": 26.562,
        "pci_device_id": "233510DE",
        "compute_cap": "9.0",
        "bus_ids": ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"],
    },
    "A100-SXM4-80GB": {
        "product_name": "NVIDIA A100-SXM4-80GB",
        "architecture": "Ampere",
        "memory_mib": 81920,
        "power_limit_w": 400,
        "pcie_gen": 4,
        "pcie_width": 16,
        "nvlinks": 12,
        "nvlink_gbps": 25.0,
        "pci_device_id": "20B210DE",
        "compute_cap": "8.0",
        "bus_ids": ["07", "0F", "47", "4E", "87", "90", "B7", "BD"],
    },
    "L40S": {
        "product_name": "NVIDIA L40S",
        "architecture": "Ada Lovelace",
        "memory_mib": 46068,
        "power_limit_w": 350,
        "pcie_gen": 4,
        "pcie_width": 16,
        "nvlinks": 0,
        "nvlink_gbps": 0.0,
        "pci_device_id": "26B910DE",
        "compute_cap": "8.9",
        "bus_ids": ["01", "25", "41", "61", "81", "A1", "C1", "E1"],
    },
}

CLOCK_EVENT_REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "display_clocks_setting",
)

# nvidia-smi nvlink -e counters: fault key -> the name nvidia-smi prints before "Errors".
NVLINK_COUNTERS = {"replay": "Replay", "recovery": "Recovery", "crc": "CRC"}

EXIT_OK = 0
EXIT_INVALID_ARGUMENT = 2
EXIT_NO_DEVICE = 6
EXIT_VERSION_MISMATCH = 18
EXIT_NO_DRIVER = 9


class SmiError(Exception):
    """An error nvidia-smi prints on stdout before exiting with ``code``."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def lab_path(path: str) -> str:
    return os.environ.get("GPUOPS_LAB_ROOT", "") + path


def read_json(path: str, default):
    try:
        with open(lab_path(path), encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default


def write_file(path: str, text: str, append: bool = False) -> None:
    full = lab_path(path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "a" if append else "w", encoding="utf-8") as handle:
        handle.write(text)


def module_version_text(version: str) -> str:
    """The text of /proc/driver/nvidia/version for ``version`` in the installed module flavour."""
    flavour = read_json("/usr/share/gpuops-lab/kernel-module.json", {}).get("flavour", "open")
    kind = "Open Kernel Module for x86_64" if flavour == "open" else "x86_64 Kernel Module"
    return (
        f"NVRM version: NVIDIA UNIX {kind}  {version}  Release Build  "
        "(gpuops-lab@stand-in)  Mon Jan  1 00:00:00 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )


def parse_module_version(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            for word in line.split():
                if word[:1].isdigit() and "." in word:
                    return word
    return None


def driver_state() -> dict:
    """Installed library version and loaded module version; loads when none is."""
    driver = read_json("/usr/share/gpuops-lab/driver.json", None)
    if driver is None:
        raise SmiError(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.",
            EXIT_NO_DRIVER,
        )
    try:
        with open(lab_path("/run/gpuops-lab/nvidia-version"), encoding="utf-8") as handle:
            loaded = parse_module_version(handle.read())
    except FileNotFoundError:
        write_file("/run/gpuops-lab/nvidia-version", module_version_text(driver["version"]))
        loaded = driver["version"]
        mig.on_module_load()  # boot or reload: pending MIG modes take effect, no instance survives
    if loaded != driver["version"]:
        nvml = ".".join(driver["version"].split(".")[:2])
        raise SmiError(
            f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {nvml}",
            EXIT_VERSION_MISMATCH,
        )
    return driver


def node_gpus() -> list[dict]:
    """The GPUs present (missing ones removed), each with its faults applied."""
    config = read_json("/etc/gpuops-lab/gpus.json", {})
    faults = read_json("/etc/gpuops-lab/faults.json", {})
    count = int(config.get("count", 0))
    if not count:
        return []
    model_name = config.get("model", "H100-SXM")
    if model_name not in MODELS:
        raise SmiError(f"gpuops-lab: unknown GPU model {model_name!r} in gpus.json; known: {sorted(MODELS)}", 1)
    model = MODELS[model_name]
    bus_ids = config.get("bus_ids") or [f"00000000:{bus}:00.0" for bus in model["bus_ids"]]
    serial_base = int(config.get("serial_base", 1654922000000))
    host = socket.gethostname()
    missing = {int(i) for i in faults.get("missing", [])}
    gpus = []
    for index in range(count):
        if index in missing:
            continue
        key = str(index)
        ecc = {"volatile_uncorrectable": 0, "aggregate_uncorrectable": 0, "volatile_correctable": 0}
        ecc.update(faults.get("ecc", {}).get(key, {}))
        link = {"gen": model["pcie_gen"], "width": model["pcie_width"]}
        link.update(faults.get("pcie_degraded", {}).get(key, {}))
        events = {reason: False for reason in CLOCK_EVENT_REASONS}
        for reason in ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"):
            events[reason] = index in {int(i) for i in faults.get(reason, [])}
        events["hw_slowdown"] = events["hw_slowdown"] or events["hw_thermal_slowdown"]
        events["hw_slowdown"] = events["hw_slowdown"] or events["hw_power_brake_slowdown"]
        events["gpu_idle"] = not any(events.values())
        digest = hashlib.sha1(f"{host}/{index}".encode()).hexdigest()
        gpus.append(
            {
                "index": len(gpus),
                "slot": index,
                "model": model,
                "model_name": model_name,
                "bus_id": bus_ids[index % len(bus_ids)],
                "serial": str(serial_base + index),
                "uuid": f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}",
                "ecc": ecc,
                "row_remap_pending": index in {int(i) for i in faults.get("row_remap_pending", [])},
                "row_remap_failure": index in {int(i) for i in faults.get("row_remap_failure", [])},
                "events": events,
                "link": link,
                "nvlink_down": {int(n) for n in faults.get("nvlink_down", {}).get(key, [])},
                "nvlink_errors": {int(n): c for n, c in faults.get("nvlink_errors", {}).get(key, {}).items()},
            }
        )
    return gpus


def nvswitch_node() -> bool:
    return bool(read_json("/etc/gpuops-lab/gpus.json", {}).get("nvswitch", False))


def persistence_enabled() -> bool:
    return os.path.exists(lab_path("/run/gpuops-lab/persistenced-ready")) or os.path.exists(
        lab_path("/run/gpuops-lab/persistence-mode")
    )


def fabric_state() -> tuple[str, str]:
    if not nvswitch_node():
        return "N/A", "N/A"
    if os.path.exists(lab_path("/run/gpuops-lab/fabricmanager-ready")):
        return "Completed", "Success"
    return "In Progress", "N/A"


def select(gpus: list[dict], ids: str | None) -> list[dict]:
    if ids is None:
        return gpus
    chosen = []
    for item in ids.split(","):
        match = [g for g in gpus if item in (str(g["index"]), g["uuid"], g["serial"], g["bus_id"])]
        if not match:
            raise SmiError(f"No devices were found matching {item!r}", EXIT_NO_DEVICE)
        chosen.extend(match)
    return chosen


def require_gpus(gpus: list[dict]) -> None:
    if not gpus:
        raise SmiError("No devices were found", EXIT_NO_DEVICE)


def sub(parent: ET.Element, tag: str, text: object = None) -> ET.Element:
    element = ET.SubElement(parent, tag)
    if text is not None:
        element.text = str(text)
    return element


def active(flag: bool) -> str:
    return "Active" if flag else "Not Active"


def mig_device_xml(parent: ET.Element, number: int, device: dict, sram_uncorrectable: int) -> None:
    """One ``<mig_device>``, its children in the order of nvidia-smi's ``nvsmi_device_v12.dtd``."""
    element = sub(parent, "mig_device")
    sub(element, "index", number)
    sub(element, "gpu_instance_id", device["gi"])
    sub(element, "compute_instance_id", device["ci"])
    shared = sub(sub(element, "device_attributes"), "shared")
    for name, value in (
        ("multiprocessor_count", device["sm"]), ("copy_engine_count", device["copy_engines"]),
        ("encoder_count", 0), ("decoder_count", device["decoders"]), ("ofa_count", device["ofa"]),
        ("jpg_count", device["jpeg"]),
    ):  # fmt: skip
        sub(shared, name, value)
    sub(sub(sub(element, "ecc_error_count"), "volatile_count"), "sram_uncorrectable", sram_uncorrectable)
    memory = sub(element, "fb_memory_usage")
    for name, value in (("total", device["memory_mib"]), ("reserved", 0), ("used", 13)):
        sub(memory, name, f"{value} MiB")
    sub(memory, "free", f"{device['memory_mib'] - 13} MiB")
    bar1 = sub(element, "bar1_memory_usage")
    for name, value in (("total", 32767), ("used", 0), ("free", 32767)):
        sub(bar1, name, f"{value} MiB")


def remapped_rows_xml(remap: ET.Element, pending: bool, failure: bool) -> None:
    sub(remap, "remapped_row_corr", 0)
    sub(remap, "remapped_row_unc", 1 if (pending or failure) else 0)
    sub(remap, "remapped_row_pending", "Yes" if pending else "No")
    sub(remap, "remapped_row_failure", "Yes" if failure else "No")
    # Bank remap availability: a pending remap has used one of its bank's spare rows (the bank
    # leaves Max); only a failed remap means a bank with no spare row left (None).
    histogram = sub(remap, "row_remapper_histogram")
    banks = {"max": 2560, "high": 0, "partial": 0, "low": 0, "none": 0}
    if failure:
        banks["max"], banks["none"] = banks["max"] - 1, 1
    elif pending:
        banks["max"], banks["partial"] = banks["max"] - 1, 1
    for name, value in banks.items():
        sub(histogram, f"row_remapper_histogram_{name}", f"{value} bank(s)")


def gpu_xml(root: ET.Element, gpu: dict) -> None:
    model = gpu["model"]
    node = sub(root, "gpu")
    node.set("id", gpu["bus_id"])
    sub(node, "product_name", model["product_name"])
    sub(node, "product_brand", "NVIDIA")
    sub(node, "product_architecture", model["architecture"])
    sub(node, "display_mode", "Disabled")
    sub(node, "display_active", "Disabled")
    sub(node, "persistence_mode", "Enabled" if persistence_enabled() else "Disabled")
    sub(node, "addressing_mode", "None")
    mig_mode = mig.mode(gpu)
    mode_element = sub(node, "mig_mode")
    for name in ("current", "pending"):
        sub(mode_element, f"{name}_mig", "N/A" if mig_mode is None else ("Enabled" if mig_mode[name] else "Disabled"))
    mig_on = bool(mig_mode and mig_mode["current"])
    mig_devices = mig.devices(gpu) if mig_on else []
    devices_element = sub(node, "mig_devices", None if mig_devices else "None")
    for number, device in enumerate(mig_devices):
        # with MIG on the driver counts volatile ECC errors per MIG device, uncorrectable SRAM ones only
        mig_device_xml(devices_element, number, device, gpu["ecc"]["volatile_uncorrectable"] if number == 0 else 0)
    sub(node, "accounting_mode", "Disabled")
    sub(node, "accounting_mode_buffer_size", 4000)
    dm = sub(node, "driver_model")
    sub(dm, "current_dm", "N/A")
    sub(dm, "pending_dm", "N/A")
    sub(node, "serial", gpu["serial"])
    sub(node, "uuid", gpu["uuid"])
    sub(node, "minor_number", gpu["slot"])
    sub(node, "vbios_version", "96.00.99.00.01")
    sub(node, "multigpu_board", "No")
    sub(node, "board_id", "0x" + gpu["bus_id"].split(":")[1].lower() + "00")
    sub(node, "gpu_module_id", gpu["slot"] + 1)
    fabric = sub(node, "fabric")
    state, status = fabric_state()
    sub(fabric, "state", state)
    sub(fabric, "status", status)
    pci = sub(node, "pci")
    domain, bus, device_function = gpu["bus_id"].split(":")
    sub(pci, "pci_bus", bus)
    sub(pci, "pci_device", device_function.split(".")[0])
    sub(pci, "pci_domain", domain[-4:])
    sub(pci, "pci_device_id", model["pci_device_id"])
    sub(pci, "pci_bus_id", gpu["bus_id"])
    sub(pci, "pci_sub_system_id", "16C110DE")
    link_info = sub(pci, "pci_gpu_link_info")
    gen = sub(link_info, "pcie_gen")
    sub(gen, "max_link_gen", model["pcie_gen"])
    sub(gen, "current_link_gen", gpu["link"]["gen"])
    sub(gen, "device_current_link_gen", gpu["link"]["gen"])
    sub(gen, "max_device_link_gen", model["pcie_gen"])
    sub(gen, "max_host_link_gen", model["pcie_gen"])
    widths = sub(link_info, "link_widths")
    sub(widths, "max_link_width", f"{model['pcie_width']}x")
    sub(widths, "current_link_width", f"{gpu['link']['width']}x")
    sub(pci, "replay_counter", 0)
    sub(pci, "replay_rollover_counter", 0)
    sub(pci, "tx_util", "0 KB/s")
    sub(pci, "rx_util", "0 KB/s")
    sub(node, "fan_speed", "N/A")
    sub(node, "performance_state", "P0")
    reasons = sub(node, "clocks_event_reasons")
    for reason in CLOCK_EVENT_REASONS:
        sub(reasons, f"clocks_event_reason_{reason}", active(gpu["events"][reason]))
    memory = sub(node, "fb_memory_usage")
    sub(memory, "total", f"{model['memory_mib']} MiB")
    sub(memory, "reserved", "328 MiB")
    sub(memory, "used", "1 MiB")
    sub(memory, "free", f"{model['memory_mib'] - 329} MiB")
    sub(node, "compute_mode", "Default")
    utilization = sub(node, "utilization")
    for name in ("gpu_util", "memory_util", "encoder_util", "decoder_util"):
        sub(utilization, name, "N/A" if mig_on else "0 %")  # NVML reports no utilization of a MIG-enabled GPU
    ecc_mode = sub(node, "ecc_mode")
    sub(ecc_mode, "current_ecc", "Enabled")
    sub(ecc_mode, "pending_ecc", "Enabled")
    errors = sub(node, "ecc_errors")
    ecc = gpu["ecc"]
    for scope in ("volatile", "aggregate"):
        block = sub(errors, scope)
        counts = (0, 0, 0, ecc["volatile_correctable"], ecc[f"{scope}_uncorrectable"])
        names = ("sram_correctable", "sram_uncorrectable_parity", "sram_uncorrectable_secded", "dram_correctable")
        for name, count in zip((*names, "dram_uncorrectable"), counts):
            sub(block, name, "N/A" if mig_on and scope == "volatile" else count)  # MIG on: per MIG device
        if scope == "aggregate":
            sub(block, "sram_threshold_exceeded", "No")
    retired = sub(node, "retired_pages")
    for name in ("multiple_single_bit_retirement", "double_bit_retirement"):
        block = sub(retired, name)
        sub(block, "retired_count", "N/A")
        sub(block, "retired_pagelist", "N/A")
    sub(retired, "pending_blacklist", "N/A")
    sub(retired, "pending_retirement", "N/A")
    remap = sub(node, "remapped_rows", "N/A" if mig_on else None)  # NVML: not supported with MIG enabled
    if not mig_on:
        remapped_rows_xml(remap, gpu["row_remap_pending"], gpu["row_remap_failure"])
    temperature = sub(node, "temperature")
    hot = gpu["events"]["hw_thermal_slowdown"]
    sub(temperature, "gpu_temp", f"{91 if hot else 32} C")
    sub(temperature, "gpu_temp_tlimit", f"{1 if hot else 53} C")
    sub(temperature, "gpu_temp_max_threshold", "92 C")
    sub(temperature, "gpu_temp_slow_threshold", "89 C")
    sub(temperature, "gpu_temp_max_gpu_threshold", "87 C")
    sub(temperature, "gpu_target_temperature", "N/A")
    sub(temperature, "memory_temp", "40 C")
    sub(temperature, "gpu_temp_max_mem_threshold", "95 C")
    power = sub(node, "gpu_power_readings")
    limit = f"{model['power_limit_w']:.2f} W"
    sub(power, "power_state", "P0")
    sub(power, "average_power_draw", "71.23 W")
    sub(power, "instant_power_draw", "71.50 W")
    sub(power, "current_power_limit", limit)
    sub(power, "requested_power_limit", limit)
    sub(power, "default_power_limit", limit)
    sub(power, "min_power_limit", "200.00 W")
    sub(power, "max_power_limit", limit)
    process_list = sub(node, "processes")
    for process in mig.processes(gpu):
        info = sub(process_list, "process_info")
        sub(info, "gpu_instance_id", process.get("gpu_instance_id", "N/A"))
        sub(info, "compute_instance_id", process.get("compute_instance_id", "N/A"))
        sub(info, "pid", process["pid"])
        sub(info, "type", "C")
        sub(info, "process_name", process["name"])
        sub(info, "used_memory", f"{process.get('used_memory_mib', 1024)} MiB")


def query_xml(gpus: list[dict], driver: dict) -> str:
    root = ET.Element("nvidia_smi_log")
    sub(root, "timestamp", datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y"))
    sub(root, "driver_version", driver["version"])
    sub(root, "cuda_version", driver.get("cuda", "N/A"))
    sub(root, "attached_gpus", len(gpus))
    for gpu in gpus:
        gpu_xml(root, gpu)
    ET.indent(root, space="\t")
    body = ET.tostring(root, encoding="unicode")
    return f'<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n{body}\n'


def query_text(gpus: list[dict], driver: dict) -> str:
    lines = [
        "",
        "==============NVSMI LOG==============",
        "",
        f"Driver Version                            : {driver['version']}",
        f"CUDA Version                              : {driver.get('cuda', 'N/A')}",
        "",
        f"Attached GPUs                             : {len(gpus)}",
    ]
    for gpu in gpus:
        lines += [
            f"GPU {gpu['bus_id']}",
            f"    Product Name                          : {gpu['model']['product_name']}",
            f"    Persistence Mode                      : {'Enabled' if persistence_enabled() else 'Disabled'}",
            f"    Serial Number                         : {gpu['serial']}",
            f"    GPU UUID                              : {gpu['uuid']}",
            "",
        ]
    return "\n".join(lines) + "\n"


def query_fields(gpu: dict, driver: dict, count: int) -> dict:
    """Value of each ``--query-gpu`` field as (plain value, unit suffix)."""
    model, ecc, events = gpu["model"], gpu["ecc"], gpu["events"]
    fields = {
        "timestamp": (datetime.datetime.now().strftime("%Y/%m/%d %H:%M:%S.000"), ""),
        "driver_version": (driver["version"], ""),
        "count": (count, ""),
        "name": (model["product_name"], ""),
        "gpu_name": (model["product_name"], ""),
        "serial": (gpu["serial"], ""),
        "gpu_serial": (gpu["serial"], ""),
        "uuid": (gpu["uuid"], ""),
        "gpu_uuid": (gpu["uuid"], ""),
        "index": (gpu["index"], ""),
        "pci.bus_id": (gpu["bus_id"], ""),
        "gpu_bus_id": (gpu["bus_id"], ""),
        "pci.device_id": ("0x" + model["pci_device_id"], ""),
        "compute_cap": (model["compute_cap"], ""),
        "vbios_version": ("96.00.99.00.01", ""),
        "persistence_mode": ("Enabled" if persistence_enabled() else "Disabled", ""),
        "mig.mode.current": (mig_word(gpu, "current"), ""),
        "mig.mode.pending": (mig_word(gpu, "pending"), ""),
        "pcie.link.gen.current": (gpu["link"]["gen"], ""),
        "pcie.link.gen.gpucurrent": (gpu["link"]["gen"], ""),
        "pcie.link.gen.max": (model["pcie_gen"], ""),
        "pcie.link.width.current": (gpu["link"]["width"], ""),
        "pcie.link.width.max": (model["pcie_width"], ""),
        "memory.total": (model["memory_mib"], " MiB"),
        "memory.used": (1, " MiB"),
        "temperature.gpu": (91 if events["hw_thermal_slowdown"] else 32, ""),
        "power.draw": ("71.23", " W"),
        "power.limit": (f"{model['power_limit_w']:.2f}", " W"),
        "utilization.gpu": (0, " %"),
        "ecc.mode.current": ("Enabled", ""),
        "ecc.errors.corrected.volatile.total": (ecc["volatile_correctable"], ""),
        "ecc.errors.uncorrected.volatile.total": (ecc["volatile_uncorrectable"], ""),
        "ecc.errors.uncorrected.aggregate.total": (ecc["aggregate_uncorrectable"], ""),
        "retired_pages.pending": ("[N/A]", ""),
        "remapped_rows.pending": ("Yes" if gpu["row_remap_pending"] else "No", ""),
        "remapped_rows.failure": ("Yes" if gpu["row_remap_failure"] else "No", ""),
    }
    for reason in CLOCK_EVENT_REASONS:
        value = (active(events[reason]), "")
        fields[f"clocks_event_reasons.{reason}"] = value
        fields[f"clocks_throttle_reasons.{reason}"] = value
    return fields


def mig_word(gpu: dict, which: str) -> str:
    mig_mode = mig.mode(gpu)
    return "[N/A]" if mig_mode is None else ("Enabled" if mig_mode[which] else "Disabled")


def query_gpu(gpus: list[dict], driver: dict, names: str, fmt: str) -> str:
    options = {part.strip() for part in fmt.split(",")}
    if "csv" not in options:
        raise SmiError(f'"{fmt}" is not a valid format: the gpuops lab supports csv only.', EXIT_INVALID_ARGUMENT)
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    known = query_fields(gpus[0], driver, len(gpus)) if gpus else None
    if known is not None:
        for name in wanted:
            if name not in known:
                raise SmiError(f'Field "{name}" is not a valid field to query.', EXIT_INVALID_ARGUMENT)
    lines = []
    if "noheader" not in options:
        unit_for = {}
        if known is not None:
            unit_for = {name: known[name][1].strip() for name in wanted}
        header = [
            f"{name} [{unit_for[name]}]" if unit_for.get(name) and "nounits" not in options else name for name in wanted
        ]
        lines.append(", ".join(header))
    for gpu in gpus:
        values = query_fields(gpu, driver, len(gpus))
        row = []
        for name in wanted:
            value, unit = values[name]
            row.append(f"{value}" if "nounits" in options else f"{value}{unit}")
        lines.append(", ".join(row))
    return "\n".join(lines) + "\n"


def list_gpus(gpus: list[dict]) -> str:
    """``nvidia-smi -L``; MIG devices indented under their GPU as R470+ drivers print them (MIG user guide)."""
    lines = []
    for gpu in gpus:
        lines.append(f"GPU {gpu['index']}: {gpu['model']['product_name']} (UUID: {gpu['uuid']})")
        mig_mode = mig.mode(gpu)
        for number, device in enumerate(mig.devices(gpu) if mig_mode and mig_mode["current"] else []):
            digest = hashlib.sha1(f"{gpu['uuid']}/{device['gi']}/{device['ci']}".encode()).hexdigest()
            uuid = f"MIG-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
            lines.append(f"  MIG {device['name']:<13} Device {number:2d}: (UUID: {uuid})")
    return "".join(line + "\n" for line in lines)


def nvlink_status(gpus: list[dict]) -> str:
    lines = []
    for gpu in gpus:
        lines.append(f"GPU {gpu['index']}: {gpu['model']['product_name']} (UUID: {gpu['uuid']})")
        for link in range(gpu["model"]["nvlinks"]):
            speed = "<inactive>" if link in gpu["nvlink_down"] else f"{gpu['model']['nvlink_gbps']:.3f} GB/s"
            lines.append(f"\t Link {link}: {speed}")
    return "\n".join(lines) + "\n"


def nvlink_error_counters(gpus: list[dict]) -> str:
    """``nvidia-smi nvlink -e``: replay, recovery and CRC counters of every link."""
    lines = []
    for gpu in gpus:
        lines.append(f"GPU {gpu['index']}: {gpu['model']['product_name']} (UUID: {gpu['uuid']})")
        for link in range(gpu["model"]["nvlinks"]):
            counters = gpu["nvlink_errors"].get(link, {})
            for name, printed in NVLINK_COUNTERS.items():
                lines.append(f"\t Link {link}: {printed} Errors: {counters.get(name, 0)}")
    return "\n".join(lines) + "\n"


def version_text(driver: dict) -> str:
    nvml = ".".join(driver["version"].split(".")[:2])
    return (
        f"NVIDIA-SMI version  : {driver['version']}\n"
        f"NVML version        : {nvml}\n"
        f"DRIVER version      : {driver['version']}\n"
        f"CUDA Version        : {driver.get('cuda', 'N/A')}\n"
    )


def summary(gpus: list[dict], driver: dict) -> str:
    head = (
        f"| NVIDIA-SMI {driver['version']}    Driver Version: {driver['version']}    "
        f"CUDA Version: {driver.get('cuda', 'N/A')}     |"
    )
    lines = ["+" + "-" * (len(head) - 2) + "+", head, "+" + "-" * (len(head) - 2) + "+"]
    for gpu in gpus:
        lines.append(f"|   {gpu['index']}  {gpu['model']['product_name']:<30} {gpu['bus_id']}  P0  32C")
    return "\n".join(lines) + "\n"


def smi_main(argv: list[str]) -> str:
    """Run one nvidia-smi command line; return stdout or raise SmiError."""
    if argv[:1] == ["nvlink"]:
        parser = argparse.ArgumentParser(prog="nvidia-smi nvlink", add_help=False)
        parser.add_argument("-s", "--status", action="store_true")
        parser.add_argument("-e", "--errorcounters", action="store_true")
        parser.add_argument("-i", "--id")
        args, unknown = parser.parse_known_args(argv[1:])
        if unknown or args.status == args.errorcounters:
            raise SmiError(
                f"Invalid combination of input arguments: nvlink {' '.join(argv[1:])} "
                "(gpuops lab simulator: nvlink -s or -e, optionally -i ID)",
                EXIT_INVALID_ARGUMENT,
            )
        driver_state()
        gpus = select(node_gpus(), args.id)
        require_gpus(gpus)
        return nvlink_error_counters(gpus) if args.errorcounters else nvlink_status(gpus)
    if argv[:1] == ["mig"]:
        driver_state()
        rest = list(argv[1:])
        ids = None
        for flag in ("-i", "--id"):
            if flag in rest[:-1]:
                ids = rest[rest.index(flag) + 1]
                del rest[rest.index(flag) : rest.index(flag) + 2]
        gpus = select(node_gpus(), ids)
        require_gpus(gpus)
        try:
            return mig.main(gpus, rest)
        except mig.MigError as error:
            raise SmiError(str(error), error.code) from error
    parser = argparse.ArgumentParser(prog="nvidia-smi", add_help=False)
    parser.add_argument("-q", "--query", action="store_true")
    parser.add_argument("-x", "--xml-format", action="store_true")
    parser.add_argument("-L", "--list-gpus", action="store_true")
    parser.add_argument("-i", "--id")
    parser.add_argument("--query-gpu")
    parser.add_argument("--format", default="csv")
    parser.add_argument("-pm", "--persistence-mode")
    parser.add_argument("-mig", "--multi-instance-gpu")
    parser.add_argument("-r", "--gpu-reset", action="store_true")
    parser.add_argument("--version", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    args, unknown = parser.parse_known_args(argv)
    if args.help:
        return (
            "gpuops lab nvidia-smi: -q [-x], -L, --query-gpu=F --format=csv[,noheader][,nounits], nvlink -s|-e,\n"
            "  -i ID, -i ID -mig 0|1, -i ID -r,\n"
            "  mig [-i ID] -lgip|-lgipp|-lgi|-lci|-cgi IDS [-C]|-cci [IDS] -gi ID|-dci [-gi ID] [-ci ID]|-dgi [-gi ID]"
            "\n"
        )
    if unknown:
        raise SmiError(
            f"Invalid combination of input arguments: {' '.join(unknown)} (gpuops lab simulator)", EXIT_INVALID_ARGUMENT
        )
    driver = driver_state()
    if args.version:
        return version_text(driver)
    gpus = select(node_gpus(), args.id)
    if args.persistence_mode is not None:
        require_gpus(gpus)
        if args.persistence_mode in ("1", "ENABLED"):
            write_file("/run/gpuops-lab/persistence-mode", "1\n")
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lab_path("/run/gpuops-lab/persistence-mode"))
        mode = "Enabled" if persistence_enabled() else "Disabled"
        return "".join(f"Persistence mode is already {mode} for GPU {g['bus_id']}.\n" for g in gpus)
    try:
        if args.multi_instance_gpu is not None:
            require_gpus(gpus)
            if args.multi_instance_gpu not in ("0", "1", "ENABLED", "DISABLED"):
                raise SmiError(
                    f'"{args.multi_instance_gpu}" is not a valid MIG mode: give 0 or 1', EXIT_INVALID_ARGUMENT
                )
            return mig.set_mode(gpus, args.multi_instance_gpu in ("1", "ENABLED"))
        if args.gpu_reset:
            require_gpus(gpus)
            return mig.reset(gpus)
    except mig.MigError as error:
        raise SmiError(str(error), error.code) from error
    if args.query_gpu:
        return query_gpu(gpus, driver, args.query_gpu, args.format)
    if args.list_gpus:
        require_gpus(gpus)
        return list_gpus(gpus)
    if args.query and args.xml_format:
        return query_xml(gpus, driver)
    require_gpus(gpus)
    if args.query:
        return query_text(gpus, driver)
    return summary(gpus, driver)


# --- gpuops-lab-fault: inject and clear faults --------------------------------------------------------------------


def xid_line(bus_id: str, code: int, message: str, host: str, when: datetime.datetime) -> str:
    """One kernel log line as rsyslog writes it (RFC 3339 high-precision timestamps)."""
    pci = bus_id.split(":", 1)[1].rsplit(".", 1)[0].lower()
    return f"{when.isoformat(timespec='microseconds')} {host} kernel: NVRM: Xid (PCI:0000:{pci}): {code}, {message}\n"


def fault_main(argv: list[str]) -> str:
    parser = argparse.ArgumentParser(prog="gpuops-lab-fault", description="Inject faults into the lab nvidia-smi.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("missing", "row-remap-pending", "row-remap-failure", "hw-slowdown", "hw-thermal-slowdown"):
        commands.add_parser(name).add_argument("--gpu", type=int, required=True)
    commands.add_parser("hw-power-brake-slowdown").add_argument("--gpu", type=int, required=True)
    ecc = commands.add_parser("ecc")
    ecc.add_argument("--gpu", type=int, required=True)
    ecc.add_argument("--volatile-uncorrectable", type=int, default=1)
    ecc.add_argument("--aggregate-uncorrectable", type=int, default=None)
    ecc.add_argument("--volatile-correctable", type=int, default=0)
    nvlink = commands.add_parser("nvlink-down")
    nvlink.add_argument("--gpu", type=int, required=True)
    nvlink.add_argument("--link", type=int, action="append", required=True)
    nvlink_counters = commands.add_parser("nvlink-errors")
    nvlink_counters.add_argument("--gpu", type=int, required=True)
    nvlink_counters.add_argument("--link", type=int, required=True)
    for name in NVLINK_COUNTERS:
        nvlink_counters.add_argument(f"--{name}", type=int, default=0)
    pcie = commands.add_parser("pcie-degraded")
    pcie.add_argument("--gpu", type=int, required=True)
    pcie.add_argument("--gen", type=int, required=True)
    pcie.add_argument("--width", type=int, required=True)
    xid = commands.add_parser("xid")
    xid.add_argument("--gpu", type=int, required=True)
    xid.add_argument("--code", type=int, required=True)
    xid.add_argument("--message", default="pid=0, name=gpuops-lab, Ch 00000008")
    commands.add_parser("clear")
    commands.add_parser("show")
    args = parser.parse_args(argv)

    faults = read_json("/etc/gpuops-lab/faults.json", {})
    key = None if getattr(args, "gpu", None) is None else str(args.gpu)
    if args.command == "show":
        return json.dumps(faults, indent=2, sort_keys=True) + "\n"
    if args.command == "clear":
        faults = {}
    elif args.command == "xid":
        config = read_json("/etc/gpuops-lab/gpus.json", {})
        model = MODELS[config.get("model", "H100-SXM")]
        bus_ids = config.get("bus_ids") or [f"00000000:{bus}:00.0" for bus in model["bus_ids"]]
        now = datetime.datetime.now(datetime.timezone.utc)
        line = xid_line(bus_ids[args.gpu % len(bus_ids)], args.code, args.message, socket.gethostname(), now)
        write_file("/var/log/gpuops-lab/kern.log", line, append=True)
        return line
    elif args.command == "ecc":
        aggregate = args.aggregate_uncorrectable
        if aggregate is None:
            aggregate = args.volatile_uncorrectable
        faults.setdefault("ecc", {})[key] = {
            "volatile_uncorrectable": args.volatile_uncorrectable,
            "aggregate_uncorrectable": aggregate,
            "volatile_correctable": args.volatile_correctable,
        }
    elif args.command == "nvlink-down":
        links = set(faults.setdefault("nvlink_down", {}).get(key, [])) | set(args.link)
        faults["nvlink_down"][key] = sorted(links)
    elif args.command == "nvlink-errors":
        counters = {name: getattr(args, name) for name in NVLINK_COUNTERS}
        faults.setdefault("nvlink_errors", {}).setdefault(key, {})[str(args.link)] = counters
    elif args.command == "pcie-degraded":
        faults.setdefault("pcie_degraded", {})[key] = {"gen": args.gen, "width": args.width}
    else:
        name = args.command.replace("-", "_")
        faults[name] = sorted(set(faults.get(name, [])) | {args.gpu})
    write_file("/etc/gpuops-lab/faults.json", json.dumps(faults, indent=2, sort_keys=True) + "\n")
    return json.dumps(faults, sort_keys=True) + "\n"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    prog = os.path.basename(sys.argv[0] if prog is None else prog)
    try:
        out = fault_main(argv) if prog == "gpuops-lab-fault" else smi_main(argv)
    except SmiError as error:
        sys.stdout.write(f"{error}\n")
        return error.code
    sys.stdout.write(out)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
