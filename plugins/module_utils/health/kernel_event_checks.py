# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checks of the kernel log's GPU events: Xid, a GPU fallen off the bus, NVSwitch SXid. Pure.

Each takes ``kernel_log.parse``'s reading (and nvidia-smi's GPUs, to name the GPU of an event) and returns
checks (:mod:`check_record`); :mod:`xid_catalog` gives each code's severity and action.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import xid_catalog
from ansible_collections.gpuops.cluster.plugins.module_utils.health.check_record import check
from ansible_collections.gpuops.cluster.plugins.module_utils.health.nvidia_smi_xml import normalize_bus_id


def _smi_bus_id(value):
    """A kernel-log bus id in the form nvidia-smi prints (``0000:db:00`` -> ``00000000:DB:00.0``).

    Used for a GPU that nvidia-smi no longer lists, so that every check (and
    every Prometheus label) names GPUs one way. Unparsable ids are kept as they are.
    """
    short = normalize_bus_id(value)
    if short is None:
        return value
    domain, bus, device = short.split(":")
    return ("%08x:%s:%s.0" % (int(domain, 16), bus, device)).upper()


def _gpu_by_bus(gpus):
    return {gpu["pci_key"]: gpu for gpu in gpus if gpu.get("pci_key")}


def _events_by_code_and_bus(kernel, kind):
    """Kernel events of one kind grouped by (code, PCI bus id): ``{key: {count, last}}``."""
    groups = {}
    for event in kernel["events"]:
        if event["kind"] != kind:
            continue
        group = groups.setdefault((event["code"], event["pci_bus_id"]), {"count": 0, "last": event})
        group["count"] += 1
        group["last"] = event
    return groups


def xid(kernel, gpus):
    by_bus = _gpu_by_bus(gpus)
    groups = _events_by_code_and_bus(kernel, "xid")
    if not groups:
        return [check("xid", "pass", "no Xid events in the window")]
    checks = []
    for (code, bus), group in sorted(groups.items()):
        info = xid_catalog.lookup(code, group["last"]["text"])
        status = {"critical": "fail", "warning": "warn", "info": "pass"}[info["severity"]]
        gpu = by_bus.get(normalize_bus_id(bus))
        kind = "application fault" if info["application_fault"] else info["severity"]
        detail = "Xid %d (%s, %s) x%d on %s: %s" % (
            code,
            info["name"],
            kind,
            group["count"],
            bus,
            group["last"]["text"],
        )
        if not info["known"]:
            detail += " (unknown code: look it up at %s)" % info["source"]
        if gpu is None:
            detail += " (GPU not in nvidia-smi output)"
        checks.append(check("xid", status, detail, gpu, info["action"], pci_bus_id=_smi_bus_id(bus)))
    return checks


def fallen_off_bus(kernel, gpus):
    """One check per PCI address the driver said fell off the bus (any wording, with or without an Xid line).

    A message without an address fails the node on its own only when no addressed one explains it.
    """
    by_bus = _gpu_by_bus(gpus)
    xid79 = {event["pci_bus_id"] for event in kernel["events"] if event["kind"] == "xid" and event["code"] == 79}
    groups = {}
    for event in kernel["events"]:
        if event["kind"] == "fallen_off_bus":
            group = groups.setdefault(event["pci_bus_id"], {"count": 0, "last": event})
            group["count"] += 1
            group["last"] = event
    if not groups:
        return [check("fallen_off_bus", "pass", "no GPU fell off the bus in the window")]
    action = xid_catalog.lookup(79, "")["action"]
    checks = []
    unaddressed = groups.pop(None, None)
    for bus, group in sorted(groups.items()):
        gpu = by_bus.get(normalize_bus_id(bus))
        detail = "GPU %s fell off the bus (x%d%s): %s" % (
            bus,
            group["count"],
            ", also Xid 79" if bus in xid79 else ", no Xid logged",
            group["last"]["text"],
        )
        if gpu is None:
            detail += " (GPU not in nvidia-smi output)"
        detail += ": reboot; reseat or inspect the GPU and riser if it repeats"
        checks.append(check("fallen_off_bus", "fail", detail, gpu, action, pci_bus_id=_smi_bus_id(bus)))
    if unaddressed:
        if checks:
            checks[-1]["detail"] += (
                " (and %d driver message(s) of a lost GPU without an address)" % (unaddressed["count"])
            )
        elif not xid79:
            checks.append(
                check(
                    "fallen_off_bus",
                    "fail",
                    "the driver says a GPU is lost (x%d, no PCI address in the message): %s: compare nvidia-smi "
                    "with lspci to find it, then reboot" % (unaddressed["count"], unaddressed["last"]["text"]),
                    action=action,
                )
            )
    return checks


def sxid(kernel):
    groups = _events_by_code_and_bus(kernel, "sxid")
    if not groups:
        return [check("sxid", "pass", "no NVSwitch SXid events in the window")]
    checks = []
    for (code, bus), group in sorted(groups.items()):
        info = xid_catalog.lookup_sxid(code, group["last"]["text"])
        status = "fail" if info["severity"] == "critical" else "warn"
        detail = "SXid %d x%d on %s %s: %s" % (
            code,
            group["count"],
            group["last"]["device"],
            bus,
            group["last"]["text"],
        )
        checks.append(check("sxid", status, detail, None, info["action"], pci_bus_id=bus))
    return checks
