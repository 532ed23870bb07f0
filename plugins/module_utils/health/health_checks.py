# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health checks: decide a node's GPU health from parsed readings. Pure: no I/O, no clock.

:func:`evaluate` takes what the parsers of this collection return
(``nvidia_smi_xml``, ``kernel_log``, ``nvlink``, ``infiniband``,
``dcgm_diag``, ``nccl_tests``) plus the operator's expectations and returns
``{healthy, checks, actions, facts, summary}``. Each check is
``{name, status: pass|warn|fail|skip, detail, gpu_index, pci_bus_id, action}``.
The node is healthy when no check fails. ``actions`` holds the strongest
recommended action per GPU and for the node (see ``xid_catalog.ACTIONS``).

The limits come from :mod:`thresholds`; :mod:`prometheus_textfile` turns a result into
a node_exporter textfile.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    cdi_spec,
    dcgm_exporter,
    gpudirect_rdma,
    kernel_modules,
    mig_drift,
    mig_health,
    node_verdict,
    nvlink_counts,
    thresholds,
    xid_catalog,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.health.nvidia_smi_xml import normalize_bus_id

CHECKS = (
    "nvidia_smi",
    "gpu_count",
    "gpu_model",
    "driver_version",
    "persistence_mode",
    "mig_mode",
    "mig_layout",
    "ecc_mode",
    "ecc_errors",
    "row_remap",
    "retired_pages",
    "pcie_link",
    "temperature",
    "clock_events",
    "recovery",
    "fabric",
    "fabricmanager",
    "xid",
    "fallen_off_bus",
    "sxid",
    "nvlink",
    "nvlink_errors",
    "infiniband",
    "dcgm_diag",
    "nccl_busbw",
    "kernel_module",
    "cdi_spec",
    "dcgm_exporter",
    "gpudirect_rdma",
)
STATUSES = ("pass", "warn", "fail", "skip")
STATUS_RANK = {"skip": 0, "pass": 1, "warn": 2, "fail": 3}  # worst last

_HW_SLOWDOWN = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
_IDLE_PSTATES = ("P8", "P10", "P12")

# What a failing platform check adds: the setting that describes a platform built that way.
NVLINK_NONE_HINT = "if this platform has no NVLink, set gpuops_health_expected_nvlinks: 0"
NVLINK_FEWER_HINT = "if this platform gives %d, set gpuops_health_expected_nvlinks: %d"
PCIE_WIDTH_HINT = "if this platform gives x%d by design, set gpuops_health_expected_pcie_width: %d"
PCIE_GEN_HINT = "if this platform gives Gen%d by design, set gpuops_health_expected_pcie_gen: %d"
# The setting each reference of the PCIe check comes from.
PCIE_SETTINGS = {
    "this node's baseline": "gpuops_health_pcie_baseline",
    "the platform's declared value": "gpuops_health_expected_pcie_width / gpuops_health_expected_pcie_gen",
}


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


def _check(name, status, detail, gpu=None, action="none", pci_bus_id=None):
    return {
        "name": name,
        "status": status,
        "detail": detail,
        "gpu_index": gpu["index"] if gpu else None,
        "pci_bus_id": gpu["pci_bus_id"] if gpu else pci_bus_id,
        "action": action if status in ("warn", "fail") else "none",
    }


class _Finding:
    """Collects the problems of one check on one GPU; the worst decides."""

    def __init__(self):
        self.status = "pass"
        self.action = "none"
        self.details = []

    def add(self, status, detail, action="none"):
        if STATUS_RANK[status] > STATUS_RANK[self.status]:
            self.status = status
        self.action = xid_catalog.strongest([self.action, action])
        self.details.append(detail)

    def result(self, name, gpu, ok_detail):
        return _check(name, self.status, "; ".join(self.details) or ok_detail, gpu, self.action)


def pcie_baseline_by_bus(baseline):
    """A PCIe baseline (``{pci_bus_id: {width, gen}}``, any bus id spelling) keyed like ``gpu["pci_key"]``."""
    keyed = {}
    for bus, value in (baseline or {}).items():
        key = normalize_bus_id(bus)
        if key is None or not isinstance(value, dict):
            raise ValueError("pcie_baseline: %r is not a PCI bus id with {width, gen}" % (bus,))
        keyed[key] = {"width": value.get("width"), "gen": value.get("gen")}
    return keyed


def pcie_links(smi):
    """What each GPU's PCIe link trained at now (``{pci_bus_id: {width, gen}}``): a baseline to keep.

    The generation of an idle GPU is None (it trains down to save power)."""
    links = {}
    for gpu in (smi or {}).get("gpus", []):
        if not gpu.get("pci_bus_id"):
            continue
        pcie = gpu.get("pcie") or {}
        idle = (gpu.get("clock_events") or {}).get("gpu_idle") or gpu.get("performance_state") in _IDLE_PSTATES
        # an idle GPU's generation is its power-saving one, not what the slot gives: no baseline of it
        links[gpu["pci_bus_id"]] = {
            "width": pcie.get("width_current"),
            "gen": None if idle else pcie.get("gen_current"),
        }
    return links


# --- per-GPU judges -------------------------------------------------------------------------------


def _persistence(gpu):
    mode = gpu.get("persistence_mode")
    if mode is None:
        return _check("persistence_mode", "skip", "persistence mode not reported", gpu)
    if mode:
        return _check("persistence_mode", "pass", "enabled", gpu)
    return _check("persistence_mode", "warn", "disabled: enable nvidia-persistenced", gpu)


def _judged(name, gpu, verdict):
    """A check from a judge's ``(status, detail, action)`` (``mig_health``'s); None for None (the judge passes)."""
    return None if verdict is None else _check(name, verdict[0], verdict[1], gpu, verdict[2])


def _ecc_mode(gpu):
    mode = gpu.get("ecc_mode") or {}
    if mode.get("current") is None:
        return _check("ecc_mode", "skip", "ECC not supported", gpu)
    if mode.get("pending") is not None and mode["pending"] != mode["current"]:
        return _check("ecc_mode", "warn", "ECC mode change pending: reset the GPU to apply", gpu, "reset_gpu")
    if not mode["current"]:
        return _check("ecc_mode", "warn", "ECC disabled", gpu)
    return _check("ecc_mode", "pass", "ECC enabled", gpu)


def _ecc_errors(gpu, limits):
    errors = gpu.get("ecc_errors") or {}
    volatile = errors.get("volatile") or {}
    aggregate = errors.get("aggregate") or {}
    if (gpu.get("ecc_mode") or {}).get("current") is None and volatile.get("uncorrectable") is None:
        return _check("ecc_errors", "skip", "ECC not supported", gpu)
    finding = _Finding()
    if (volatile.get("uncorrectable") or 0) > limits["ecc_volatile_uncorrectable"]:
        finding.add(
            "fail", "%d uncorrectable ECC errors since the driver loaded" % volatile["uncorrectable"], "reset_gpu"
        )
    if (aggregate.get("uncorrectable") or 0) > limits["ecc_aggregate_uncorrectable"]:
        finding.add("warn", "%d uncorrectable ECC errors over the GPU's life" % aggregate["uncorrectable"])
    if (volatile.get("correctable") or 0) > limits["ecc_volatile_correctable"]:
        finding.add("warn", "%d correctable ECC errors since the driver loaded" % volatile["correctable"])
    if errors.get("sram_threshold_exceeded"):
        finding.add("fail", "SRAM uncorrectable error threshold exceeded", "hardware_inspection")
    return finding.result("ecc_errors", gpu, "no uncorrectable ECC errors")


def _row_remap(gpu, limits):
    rows = gpu.get("remapped_rows")
    if rows is None:
        return _check("row_remap", "skip", "row remapping not reported (Volta or older)", gpu)
    finding = _Finding()
    if rows.get("failure"):
        finding.add("fail", "a row remapping failed: the GPU needs replacing", "hardware_inspection")
    if rows.get("pending"):
        finding.add("fail", "row remapping pending: reset the GPU to apply it", "reset_gpu")
    if (rows.get("uncorrectable") or 0) >= limits["row_remap_uncorrectable"]:
        finding.add("warn", "%d rows remapped for uncorrectable errors" % rows["uncorrectable"])
    if (rows.get("histogram_none") or 0) > 0:
        finding.add("warn", "%d memory banks have no spare rows left" % rows["histogram_none"])
    return finding.result(
        "row_remap",
        gpu,
        "no pending or failed remap (%s correctable, %s uncorrectable remapped)"
        % (rows.get("correctable"), rows.get("uncorrectable")),
    )


def _retired_pages(gpu, limits):
    pages = gpu.get("retired_pages")
    if pages is None:
        return _check("retired_pages", "skip", "page retirement not reported (Ampere and later remap rows)", gpu)
    finding = _Finding()
    total = (pages.get("single_bit") or 0) + (pages.get("double_bit") or 0)
    if pages.get("pending"):
        finding.add("fail", "page retirement pending: reset the GPU (or reboot) to retire it", "reset_gpu")
    if total >= limits["retired_pages"]:
        finding.add(
            "fail",
            "%d pages retired (limit %d): the GPU needs replacing" % (total, limits["retired_pages"]),
            "hardware_inspection",
        )
    return finding.result("retired_pages", gpu, "%d pages retired, none pending" % total)


def _pcie_reference(gpu, platform, baseline):
    """``(width, gen, what)`` the link is judged against: the node's baseline for this GPU, else the declared
    platform value, else the GPU's own maximum (``what`` None)."""
    recorded = (baseline or {}).get(gpu.get("pci_key")) or {}
    if recorded.get("width") is not None or recorded.get("gen") is not None:
        return recorded.get("width"), recorded.get("gen"), "this node's baseline"
    platform = platform or {}
    if platform.get("width") is not None or platform.get("gen") is not None:
        return platform.get("width"), platform.get("gen"), "the platform's declared value"
    return None, None, None


def _pcie(gpu, platform=None, baseline=None):
    """PCIe width and generation against the GPU's maximum, or against a declared reference.

    Some platforms run GPUs at a reduced width or generation by design (a VM's virtual root port, a
    board wired x8): there the operator declares the platform's value (``expected_pcie_width``,
    ``expected_pcie_gen``) or the node keeps a baseline of what each GPU trained at when it was good,
    and the link fails only below that. Without either, a width below the maximum fails and a
    generation below it warns under load.
    """
    pcie = gpu.get("pcie") or {}
    finding = _Finding()
    width, width_max = pcie.get("width_current"), pcie.get("width_max")
    gen, gen_max = pcie.get("gen_current"), pcie.get("gen_max")
    if width is None and gen is None:
        return _check("pcie_link", "skip", "PCIe link not reported", gpu)
    ref_width, ref_gen, what = _pcie_reference(gpu, platform, baseline)
    idle = (gpu.get("clock_events") or {}).get("gpu_idle") or gpu.get("performance_state") in _IDLE_PSTATES
    if what is None or ref_width is None:
        if width is not None and width_max is not None and width < width_max:
            finding.add(
                "fail",
                "PCIe link x%d, capable of x%d: reseat or inspect the GPU and riser; %s"
                % (width, width_max, PCIE_WIDTH_HINT % (width, width)),
                "hardware_inspection",
            )
    elif width is not None and width < ref_width:
        finding.add(
            "fail",
            "PCIe link x%d, below x%d of %s (%s): reseat or inspect the GPU and riser"
            % (width, ref_width, what, PCIE_SETTINGS[what]),
            "hardware_inspection",
        )
    elif width is not None and width_max is not None and width < width_max:
        finding.details.append("x%d of x%d, as %s (x%d)" % (width, width_max, what, ref_width))
    if what is None or ref_gen is None:
        if gen is not None and gen_max is not None and gen < gen_max:
            if idle:
                finding.details.append(
                    "Gen%d of Gen%d while idle (the link trains down to save power)" % (gen, gen_max)
                )
            else:
                finding.add(
                    "warn", "PCIe Gen%d, capable of Gen%d under load; %s" % (gen, gen_max, PCIE_GEN_HINT % (gen, gen))
                )
    elif gen is not None and gen < ref_gen:
        if idle:
            finding.details.append("Gen%d of Gen%d while idle (the link trains down to save power)" % (gen, ref_gen))
        else:
            finding.add(
                "warn", "PCIe Gen%d under load, below Gen%d of %s (%s)" % (gen, ref_gen, what, PCIE_SETTINGS[what])
            )
    elif gen is not None and gen_max is not None and gen < gen_max:
        finding.details.append("Gen%d of Gen%d, as %s (Gen%d)" % (gen, gen_max, what, ref_gen))
    if finding.status == "pass" and finding.details:
        finding.details.insert(0, "Gen%s x%s" % (gen, width))
    return finding.result("pcie_link", gpu, "Gen%s x%s" % (gen, width))


def _temperature(gpu, limits):
    temperature = gpu.get("temperature") or {}
    current = temperature.get("gpu")
    if current is None:
        return _check("temperature", "skip", "GPU temperature not reported", gpu)
    fail_at = limits["temperature_fail"] or temperature.get("slowdown") or 90
    if current >= fail_at:
        return _check(
            "temperature",
            "fail",
            "%s C, at or above %s C: check cooling" % (current, fail_at),
            gpu,
            "hardware_inspection",
        )
    if current >= limits["temperature_warn"]:
        return _check("temperature", "warn", "%s C, at or above %s C" % (current, limits["temperature_warn"]), gpu)
    return _check("temperature", "pass", "%s C" % current, gpu)


def _clock_events(gpu):
    events = gpu.get("clock_events") or {}
    if not events:
        return _check("clock_events", "skip", "clock event reasons not reported", gpu)
    finding = _Finding()
    for reason in _HW_SLOWDOWN:
        if events.get(reason):
            finding.add("fail", "%s active: check power and cooling" % reason, "hardware_inspection")
    if events.get("sw_thermal_slowdown"):
        finding.add("warn", "sw_thermal_slowdown active")
    active = sorted(name for name, value in events.items() if value)
    return finding.result("clock_events", gpu, "no slowdown (active: %s)" % (", ".join(active) or "none"))


def _recovery(gpu):
    finding = _Finding()
    if gpu.get("reset_required"):
        finding.add("fail", "the driver reports a GPU reset is required", "reset_gpu")
    if gpu.get("drain_and_reset_recommended"):
        finding.add("fail", "the driver recommends drain and reset", "reset_gpu")
    recovery = (gpu.get("recovery_action") or "").strip()
    if recovery and recovery.lower() != "none":
        action = "reboot_node" if "reboot" in recovery.lower() else "reset_gpu"
        finding.add("fail", "GPU recovery action: %s" % recovery, action)
    for error in gpu.get("field_errors") or []:
        reading = error["reading"].lower()
        if "requires reset" in reading:
            finding.add("fail", "%s reads %s" % (error["field"], error["reading"]), "reset_gpu")
        elif "lost" in reading or "unknown error" in reading:
            finding.add("fail", "%s reads %s" % (error["field"], error["reading"]), "reboot_node")
        else:
            finding.add("warn", "%s reads %s" % (error["field"], error["reading"]))
    return finding.result("recovery", gpu, "no recovery action pending")


def _fabric(gpu):
    fabric = gpu.get("fabric") or {}
    state, status = fabric.get("state"), fabric.get("status")
    if state is None:
        return _check("fabric", "skip", "no NVLink fabric reported for this GPU", gpu)
    if state.lower() == "completed" and (status is None or status.lower() == "success"):
        return _check("fabric", "pass", "fabric registration %s (%s)" % (state, status), gpu)
    return _check(
        "fabric",
        "fail",
        "fabric registration %s (%s): restart nvidia-fabricmanager, reboot if it persists" % (state, status),
        gpu,
        "reboot_node",
    )


# --- node-level judges ----------------------------------------------------------------------------


def _gpu_count(smi, expected):
    found = len(smi["gpus"])
    if expected is None:
        return _check("gpu_count", "skip", "%d GPUs; no expected_gpu_count given" % found)
    if found < expected:
        return _check(
            "gpu_count",
            "fail",
            "%d of %d GPUs visible: reboot; inspect if one stays missing" % (found, expected),
            action="reboot_node",
        )
    if found > expected:
        return _check("gpu_count", "warn", "%d GPUs visible, %d expected" % (found, expected))
    return _check("gpu_count", "pass", "%d GPUs" % found)


def _gpu_model(gpus, expected):
    if not expected:
        return [_check("gpu_model", "skip", "no expected_gpu_model given")]
    checks = []
    for gpu in gpus:
        name = gpu.get("product_name") or ""
        if expected.lower() in name.lower():
            checks.append(_check("gpu_model", "pass", name, gpu))
        else:
            checks.append(_check("gpu_model", "fail", "%r is not a %s" % (name, expected), gpu, "hardware_inspection"))
    return checks


def _driver_version(smi, expected):
    found = smi.get("driver_version")
    if not expected:
        return _check("driver_version", "skip", "driver %s; no expected_driver_version given" % found)
    if found and (found == expected or found.startswith(expected + ".")):
        return _check("driver_version", "pass", "driver %s" % found)
    return _check("driver_version", "fail", "driver %s, expected %s" % (found, expected))


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


def _xid_checks(kernel, gpus):
    by_bus = _gpu_by_bus(gpus)
    groups = _events_by_code_and_bus(kernel, "xid")
    if not groups:
        return [_check("xid", "pass", "no Xid events in the window")]
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
        checks.append(_check("xid", status, detail, gpu, info["action"], pci_bus_id=_smi_bus_id(bus)))
    return checks


def _fallen_off_bus_checks(kernel, gpus):
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
        return [_check("fallen_off_bus", "pass", "no GPU fell off the bus in the window")]
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
        checks.append(_check("fallen_off_bus", "fail", detail, gpu, action, pci_bus_id=_smi_bus_id(bus)))
    if unaddressed:
        if checks:
            checks[-1]["detail"] += (
                " (and %d driver message(s) of a lost GPU without an address)" % (unaddressed["count"])
            )
        elif not xid79:
            checks.append(
                _check(
                    "fallen_off_bus",
                    "fail",
                    "the driver says a GPU is lost (x%d, no PCI address in the message): %s: compare nvidia-smi "
                    "with lspci to find it, then reboot" % (unaddressed["count"], unaddressed["last"]["text"]),
                    action=action,
                )
            )
    return checks


def _sxid_checks(kernel):
    groups = _events_by_code_and_bus(kernel, "sxid")
    if not groups:
        return [_check("sxid", "pass", "no NVSwitch SXid events in the window")]
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
        checks.append(_check("sxid", status, detail, None, info["action"], pci_bus_id=bus))
    return checks


def _match_gpu(entry, gpus):
    """The nvidia-smi GPU an ``nvidia-smi nvlink`` block speaks of: by UUID, else by index."""
    for gpu in gpus:
        if entry.get("uuid") and gpu.get("uuid") == entry["uuid"]:
            return gpu
    if any(gpu.get("uuid") for gpu in gpus) and entry.get("uuid"):
        return {"index": entry["index"], "pci_bus_id": None}
    for gpu in gpus:
        if gpu["index"] == entry["index"]:
            return gpu
    return {"index": entry["index"], "pci_bus_id": None}


def _nvlink_checks(status, gpus, nvswitch=None, override=None, expected_gpu_count=None):
    """Every GPU's links against what its model (or the node's NVSwitches) says it must have.

    Without any expectation (PCIe GPUs, unknown models on a node without NVSwitch, one GPU alone
    without NVSwitch) the GPUs are judged against each other only, and a node where no GPU lists a
    link passes (one GPU alone) or is a skip, as before. A failure the model's count decides names
    the setting of a platform without (or with fewer) links.
    """
    entries = {}
    for entry in status["gpus"]:
        gpu = _match_gpu(entry, gpus)
        entries[gpu["index"]] = (gpu, entry)
    for gpu in gpus:
        entries.setdefault(gpu["index"], (gpu, None))
    expected = nvlink_counts.node_expected_links(
        [
            dict(gpu, product_name=gpu.get("product_name") or (entry or {}).get("name"))
            for gpu, entry in entries.values()
        ],
        nvswitch,
        override,
        expected_gpu_count,
    )
    peers = max((len(entry["links"]) for entry in status["gpus"]), default=0)
    if peers == 0 and not any(want["links"] for want in expected.values()):
        if [want["reason"] for want in expected.values()] == [nvlink_counts.ONE_GPU]:
            gpu, _entry = next(iter(entries.values()))
            return [_check("nvlink", "pass", nvlink_counts.ONE_GPU, gpu)]
        return [_check("nvlink", "skip", "no NVLink links reported (PCIe GPUs, or NVLink absent)")]
    checks = []
    for index in sorted(entries):
        gpu, entry = entries[index]
        want = expected[index]
        links = entry["links"] if entry else []
        active = [link for link in links if link["active"]]
        inactive = [link["link"] for link in links if not link["active"]]
        needed = want["links"] if want["links"] > 0 else peers
        by_model = override is None and want["links"] > 0  # the model's count, not the operator's
        if entry is None and want["links"]:
            detail = "not listed by nvidia-smi nvlink -s (%s)" % want["reason"]
            if by_model:
                detail += ": %s" % NVLINK_NONE_HINT
        elif not links and (want["links"] or peers):
            said = "all links inactive" if entry and entry["all_inactive"] else "no NVLink link listed"
            why = want["reason"] if want["links"] else "peers have %d" % peers
            detail = "%s, %s: reset the GPU; if all GPUs show it, check nvidia-fabricmanager and reboot" % (said, why)
            if by_model:
                detail += "; %s" % NVLINK_NONE_HINT
        elif inactive:
            detail = "NVLink %s inactive of %d" % (", ".join(map(str, inactive)), len(links))
        elif needed and len(active) < needed:
            why = want["reason"] if want["links"] > 0 else "peers have %d" % peers
            detail = "%d NVLinks active, %s" % (len(active), why)
            if by_model:
                detail += ": %s" % (NVLINK_FEWER_HINT % (len(active), len(active)))
        elif not links:
            checks.append(_check("nvlink", "pass", "no NVLink expected (%s)" % want["reason"], gpu))
            continue
        else:
            speeds = sorted({link["speed_gbps"] for link in links})
            checks.append(_check("nvlink", "pass", "%d links active at %s GB/s" % (len(links), speeds), gpu))
            continue
        checks.append(_check("nvlink", "fail", detail, gpu, "reset_gpu"))
    return checks


def _nvlink_error_checks(errors, gpus, limit):
    checks = []
    for entry in errors["gpus"]:
        if not entry["links"]:
            continue  # a GPU without NVLink (PCIe cards): nothing to judge
        gpu = _match_gpu(entry, gpus)
        high = [
            "link %d %s=%d" % (link["link"], name, value)
            for link in entry["links"]
            for name, value in sorted(link["counters"].items())
            if value > limit
        ]
        if high:
            checks.append(
                _check("nvlink_errors", "warn", "NVLink error counters above %d: %s" % (limit, ", ".join(high)), gpu)
            )
        else:
            checks.append(_check("nvlink_errors", "pass", "NVLink error counters at or below %d" % limit, gpu))
    return checks or [_check("nvlink_errors", "skip", "no NVLink error counters reported")]


def _infiniband_count_check(ib, expected_count, expected_rate):
    """The node must have ``expected_count`` InfiniBand ports up (Active, LinkUp, at the rate): fails short of it."""
    ports = [port for port in ib["ports"] if (port.get("link_layer") or "InfiniBand").lower() == "infiniband"]
    up = [
        port["name"]
        for port in ports
        if (port["state"] or "").upper() == "ACTIVE"
        and (port["phys_state"] or "").lower() == "linkup"
        and (not expected_rate or (port["rate_gbps"] or 0) >= expected_rate)
    ]
    down = sorted(port["name"] for port in ports if port["name"] not in up)
    if len(up) < expected_count:
        return _check(
            "infiniband",
            "fail",
            "%d of %d expected InfiniBand ports up%s (down: %s): check cables, the switch port and the HCA"
            % (len(up), expected_count, " at %d Gb/s" % expected_rate if expected_rate else "", ", ".join(down) or "-"),
            action="hardware_inspection",
        )
    return _check("infiniband", "pass", "%d InfiniBand ports up, %d expected" % (len(up), expected_count))


def _infiniband_checks(ib, expected_ports, expected_rate, limit):
    ports = {port["name"]: port for port in ib["ports"]}
    by_device = {}
    for port in ib["ports"]:
        by_device.setdefault(port["device"], []).append(port)
    if expected_ports:
        wanted = []
        for name in expected_ports:
            if ":" in name:
                wanted.append((name, ports.get(name)))
            else:
                wanted.extend([(port["name"], port) for port in by_device.get(name, [])] or [(name + ":1", None)])
        strict = True
    else:
        if not ib["ports"]:
            return [_check("infiniband", "skip", "no InfiniBand ports found")]
        wanted = [(port["name"], port) for port in ib["ports"]]
        strict = False
    checks = []
    for name, port in wanted:
        if port is None:
            checks.append(
                _check(
                    "infiniband",
                    "fail",
                    "expected port %s not found" % name,
                    action="hardware_inspection",
                    pci_bus_id=None,
                )
            )
            continue
        finding = _Finding()
        bad = "fail" if strict else "warn"
        if (port["state"] or "").upper() != "ACTIVE":
            finding.add(bad, "%s state %s" % (name, port["state"]), "hardware_inspection")
        if (port["phys_state"] or "").lower() != "linkup":
            finding.add(bad, "%s phys_state %s" % (name, port["phys_state"]), "hardware_inspection")
        if expected_rate and (port["rate_gbps"] or 0) < expected_rate:
            finding.add(
                bad, "%s rate %s, expected %s Gb/s" % (name, port["rate"], expected_rate), "hardware_inspection"
            )
        high = ["%s=%d" % (counter, value) for counter, value in sorted(port["counters"].items()) if value > limit]
        if high:
            finding.add("warn", "%s error counters above %d: %s" % (name, limit, ", ".join(high)))
        checks.append(
            finding.result("infiniband", None, "%s %s %s %s" % (name, port["state"], port["phys_state"], port["rate"]))
        )
    return checks


def _dcgm_checks(dcgm, gpus):
    by_index = {gpu["index"]: gpu for gpu in gpus}
    parsed = dcgm["parsed"]
    if not parsed["results"]:
        return [
            _check(
                "dcgm_diag",
                "fail",
                "dcgmi diag -r %s gave no results (%s): the DCGM host engine did not answer; start it "
                "(systemctl enable --now nvidia-dcgm) and run again" % (dcgm["level"], "; ".join(parsed["warnings"])),
            )
        ]
    if dcgm.get("rc") not in (None, 0) and not parsed["failed"]:
        return [
            _check(
                "dcgm_diag",
                "fail",
                "dcgmi diag -r %s exited %s with no failed test: %s"
                % (dcgm["level"], dcgm["rc"], "; ".join(parsed["warnings"]) or "see dcgmi diag output"),
            )
        ]
    if not parsed["failed"]:
        return [
            _check(
                "dcgm_diag",
                "pass",
                "dcgmi diag -r %s: %d results, none failed" % (dcgm["level"], len(parsed["results"])),
            )
        ]
    checks = []
    for failure in parsed["failed"]:
        gpu = by_index.get(failure["gpu_index"]) if isinstance(failure["gpu_index"], int) else None
        info = failure["info"]
        checks.append(
            _check(
                "dcgm_diag",
                "fail",
                "dcgmi diag -r %s: %s failed %s" % (dcgm["level"], failure["test"], info),
                gpu,
                "reset_gpu",
            )
        )
    return checks


def _nccl_check(nccl, gpus, minimum):
    parsed = nccl["parsed"]
    minimum = thresholds.nccl_busbw_minimum(gpus, minimum)
    busbw = parsed["busbw_gbps"]
    if busbw is None:
        return _check(
            "nccl_busbw",
            "fail",
            "all_reduce_perf gave no bus bandwidth: %s" % ("; ".join(parsed["warnings"]) or "empty output"),
        )
    if parsed["wrong"]:
        return _check(
            "nccl_busbw",
            "fail",
            "all_reduce_perf found %d wrong results" % parsed["wrong"],
            action="hardware_inspection",
        )
    if minimum is None:
        return _check("nccl_busbw", "pass", "bus bandwidth %.1f GB/s (no threshold for this GPU model)" % busbw)
    if busbw < minimum:
        return _check(
            "nccl_busbw",
            "fail",
            "bus bandwidth %.1f GB/s, expected >= %.1f" % (busbw, minimum),
            action="hardware_inspection",
        )
    return _check("nccl_busbw", "pass", "bus bandwidth %.1f GB/s >= %.1f" % (busbw, minimum))


def _fabricmanager_check(fabricmanager):
    if not fabricmanager.get("required"):
        return _check("fabricmanager", "skip", fabricmanager.get("reason") or "no NVSwitch on this node")
    state = fabricmanager.get("state")
    if state == "active":
        return _check("fabricmanager", "pass", "nvidia-fabricmanager active")
    return _check(
        "fabricmanager",
        "fail",
        "nvidia-fabricmanager %s on an NVSwitch system: start it (a reboot also does)" % state,
        action="reboot_node",
    )


# --- the evaluator --------------------------------------------------------------------------------


def evaluate(inputs, options=None):
    """Judge one node.

    ``inputs`` keys (each optional): ``smi`` (nvidia_smi_xml.parse), ``kernel`` (kernel_log.parse), ``nvlink_status``
    / ``nvlink_errors`` (nvlink.parse_*), ``cdi`` (cdi_spec.read), ``infiniband`` (infiniband.read_ports),
    ``fabricmanager`` (``{required, state, reason}``), ``dcgm`` (``{level, parsed}``), ``nccl`` (``{parsed}``),
    ``kernel_modules`` (kernel_modules.read) and ``unavailable``: ``{source: reason}`` for sources not
    read, which turns their checks into skips with that reason, and ``failed``: ``{source: reason}``
    for sources asked for at this level that could not be read (tool missing, timed out, failed),
    which turns their checks into failures with that reason: the verdict fails closed. ``nvswitch``: the node's
    NVSwitch devices (None when unknown). Sources: ``smi kernel nvlink_status nvlink_errors infiniband fabricmanager
    dcgm nccl kernel_modules cdi``, and ``dcgm_exporter`` (dcgm_exporter.read).

    ``options``: ``expected_gpu_count``, ``expected_gpu_model``, ``expected_driver_version``, ``expected_ib_ports``
    (``mlx5_0`` or ``mlx5_0:1``), ``expected_ib_port_count``, ``expected_ib_rate`` (Gb/s), ``expected_nvlinks``,
    ``expected_pcie_width``, ``expected_pcie_gen``, ``pcie_baseline``, ``thresholds`` (see ``thresholds.TABLE``),
    ``skip_checks``, ``gpudirect_rdma`` (the setting, one of ``gpudirect_rdma.SETTINGS``, judged against
    ``inputs['gpudirect_rdma']``, gpudirect_rdma.read; its path goes into the facts), ``mig_profile_set`` (the GPU
    model's MIG profiles: names the GPU instances of ``facts.gpus[].mig``), ``mig_declared`` (the declared MIG
    layout, filter ``mig_declared``: judged by the ``mig_layout`` check, ``mig_drift``).
    """
    options = options or {}
    limits = thresholds.limits(options.get("thresholds"))
    skip = set(options.get("skip_checks") or [])
    pcie_platform = {"width": options.get("expected_pcie_width"), "gen": options.get("expected_pcie_gen")}
    pcie_baseline = pcie_baseline_by_bus(options.get("pcie_baseline"))
    unavailable = dict(inputs.get("unavailable") or {})
    checks = []

    failed_sources = dict(inputs.get("failed") or {})

    def skipped(names, reason):
        return [_check(name, "skip", reason) for name in names]

    def not_read(names, source, default):
        """Checks of a source not read: a failure when it was asked for and could not be read, else skips."""
        if source in failed_sources:
            return [_check(name, "fail", failed_sources[source]) for name in names]
        return skipped(names, unavailable.get(source, default))

    smi = inputs.get("smi")
    gpus = smi["gpus"] if smi else []
    mig_layouts = {gpu["index"]: mig_health.layout(gpu, options.get("mig_profile_set")) for gpu in gpus}
    smi_checks = (
        "gpu_count", "gpu_model", "driver_version", "persistence_mode", "mig_mode", "ecc_mode", "ecc_errors",
        "row_remap", "retired_pages", "pcie_link", "temperature", "clock_events", "recovery", "fabric", "mig_layout",
    )  # fmt: skip
    if smi is None:
        reason = unavailable.get("smi", "nvidia-smi output not available")
        checks.append(_check("nvidia_smi", "fail", reason, action="reboot_node"))
        checks.extend(skipped(smi_checks, "no nvidia-smi output"))
    elif not gpus:
        detail = "; ".join(smi["warnings"]) or "nvidia-smi lists no GPUs"
        checks.append(_check("nvidia_smi", "fail", detail, action="reboot_node"))
        checks.append(_gpu_count(smi, options.get("expected_gpu_count")))
        checks.extend(skipped(smi_checks[1:], "nvidia-smi lists no GPUs"))
    else:
        status = "warn" if smi["warnings"] else "pass"
        detail = "; ".join(smi["warnings"]) or "%d GPUs, driver %s" % (len(gpus), smi.get("driver_version"))
        checks.append(_check("nvidia_smi", status, detail))
        checks.append(_gpu_count(smi, options.get("expected_gpu_count")))
        checks.extend(_gpu_model(gpus, options.get("expected_gpu_model")))
        checks.append(_driver_version(smi, options.get("expected_driver_version")))
        kernel_reading = (inputs.get("kernel"), failed_sources.get("kernel"), unavailable.get("kernel"))
        for gpu in gpus:
            mig = mig_layouts[gpu["index"]]
            checks.extend(
                [
                    _persistence(gpu),
                    _judged("mig_mode", gpu, mig_health.mode_finding(gpu, mig)),
                    _judged("mig_layout", gpu, mig_drift.judge(options.get("mig_declared"), gpu, mig)),
                    _ecc_mode(gpu),
                    # MIG on: volatile ECC counts per MIG device, row remaps from the kernel log (mig_health)
                    _judged("ecc_errors", gpu, mig_health.ecc_errors(gpu, limits)) or _ecc_errors(gpu, limits),
                    _judged("row_remap", gpu, mig_health.row_remap(gpu, *kernel_reading)) or _row_remap(gpu, limits),
                    _retired_pages(gpu, limits),
                    _pcie(gpu, pcie_platform, pcie_baseline),
                    _temperature(gpu, limits),
                    _clock_events(gpu),
                    _recovery(gpu),
                    _fabric(gpu),
                ]
            )

    kernel = inputs.get("kernel")
    if kernel is None:
        checks.extend(not_read(("xid", "fallen_off_bus", "sxid"), "kernel", "kernel log not read"))
    else:
        checks.extend(_xid_checks(kernel, gpus))
        checks.extend(_fallen_off_bus_checks(kernel, gpus))
        checks.extend(_sxid_checks(kernel))

    nvlink_expected = (inputs.get("nvswitch"), options.get("expected_nvlinks"), options.get("expected_gpu_count"))
    if inputs.get("nvlink_status") is None:
        expected = nvlink_counts.node_expected_links(gpus, *nvlink_expected)
        if "nvlink_status" in failed_sources and not any(want["links"] for want in expected.values()):
            failed_sources.pop("nvlink_status")  # no link expected on this node: a failed read is no finding
        checks.extend(not_read(("nvlink",), "nvlink_status", "NVLink status not read"))
    else:
        checks.extend(_nvlink_checks(inputs["nvlink_status"], gpus, *nvlink_expected))
    if inputs.get("nvlink_errors") is None:
        checks.extend(not_read(("nvlink_errors",), "nvlink_errors", "NVLink error counters not read"))
    else:
        checks.extend(_nvlink_error_checks(inputs["nvlink_errors"], gpus, limits["nvlink_errors"]))

    if inputs.get("infiniband") is None:
        checks.extend(not_read(("infiniband",), "infiniband", "InfiniBand ports not read"))
    else:
        checks.extend(
            _infiniband_checks(
                inputs["infiniband"], options.get("expected_ib_ports"), options.get("expected_ib_rate"),
                limits["ib_counter_errors"],
            )
        )  # fmt: skip
        if options.get("expected_ib_port_count"):
            checks.append(
                _infiniband_count_check(
                    inputs["infiniband"], options["expected_ib_port_count"], options.get("expected_ib_rate")
                )
            )
            checks = [c for c in checks if not (c["name"] == "infiniband" and c["status"] == "skip")]

    if inputs.get("fabricmanager") is None:
        checks.extend(not_read(("fabricmanager",), "fabricmanager", "Fabric Manager state not read"))
    else:
        checks.append(_fabricmanager_check(inputs["fabricmanager"]))

    if inputs.get("dcgm") is None:
        checks.extend(not_read(("dcgm_diag",), "dcgm", "not run at this level"))
    else:
        checks.extend(_dcgm_checks(inputs["dcgm"], gpus))
    if inputs.get("nccl") is None:
        checks.extend(not_read(("nccl_busbw",), "nccl", "not run at this level"))
    else:
        checks.append(_nccl_check(inputs["nccl"], gpus, limits["nccl_busbw_gbps"]))

    if inputs.get("kernel_modules") is None:
        checks.extend(not_read(("kernel_module",), "kernel_modules", "installed kernels not read"))
    else:
        found = kernel_modules.findings(inputs["kernel_modules"])
        checks.extend(_check("kernel_module", status, detail) for status, detail in found)

    if inputs.get("cdi") is None:
        checks.extend(not_read(("cdi_spec",), "cdi", "CDI specification not read"))
    else:
        checks.extend(_check("cdi_spec", status, detail) for status, detail in cdi_spec.findings(inputs["cdi"], smi))

    if inputs.get("dcgm_exporter") is None:
        checks.extend(not_read(("dcgm_exporter",), "dcgm_exporter", "DCGM Exporter not read"))
    else:
        found = dcgm_exporter.findings(inputs["dcgm_exporter"], gpus)
        checks.extend(_check("dcgm_exporter", status, detail) for status, detail in found)

    # GPUDirect RDMA: which path the node has (DMA-BUF, nvidia-peermem, none needed), in the facts too
    rdma_path = None
    if inputs.get("gpudirect_rdma") is None:
        checks.extend(not_read(("gpudirect_rdma",), "gpudirect_rdma", "GPUDirect RDMA not read"))
    else:
        setting = options.get("gpudirect_rdma") or gpudirect_rdma.DEFAULT_SETTING
        decision = gpudirect_rdma.decide(inputs["gpudirect_rdma"], setting)
        rdma_path = {key: decision[key] for key in ("path", "setting", "status")}
        checks.extend(_check("gpudirect_rdma", status, detail) for status, detail in gpudirect_rdma.findings(decision))

    if skip:
        kept = [check for check in checks if check["name"] not in skip]
        checks = kept + skipped(sorted(skip & set(CHECKS)), "skipped by skip_checks")

    return {
        "healthy": not any(check["status"] == "fail" for check in checks),
        "checks": checks,
        "actions": node_verdict.actions(checks, gpus),
        "facts": dict(_facts(smi, kernel, mig_layouts), gpudirect_rdma=rdma_path),
        "summary": _summary(checks),
    }


def _facts(smi, kernel, mig_layouts):
    gpus = smi["gpus"] if smi else []
    return {
        "driver_version": smi.get("driver_version") if smi else None,
        "cuda_version": smi.get("cuda_version") if smi else None,
        "gpu_count": len(gpus),
        "gpu_models": sorted({gpu["product_name"] for gpu in gpus if gpu.get("product_name")}),
        "gpus": [
            {
                "index": gpu["index"],
                "pci_bus_id": gpu["pci_bus_id"],
                "product_name": gpu.get("product_name"),
                "uuid": gpu.get("uuid"),
                "serial": gpu.get("serial"),
                "mig": mig_layouts[gpu["index"]],
            }
            for gpu in gpus
        ],
        "parse_warnings": list(smi["warnings"]) if smi else [],
        "kernel_log_formats": kernel["formats"] if kernel else [],
        "kernel_events": len(kernel["events"]) if kernel else 0,
        "pcie": pcie_links(smi),
    }


def _summary(checks):
    counts = {status: 0 for status in STATUSES}
    for check in checks:
        counts[check["status"]] += 1
    problems = ["%s%s: %s" % (check["name"], "" if check["gpu_index"] is None else "[gpu%d]" % check["gpu_index"],
                              check["detail"]) for check in checks if check["status"] == "fail"]  # fmt: skip
    return {"counts": counts, "failed": problems}
