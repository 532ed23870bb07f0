# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checks of each GPU, and of the node's GPU count, model and driver, from one ``nvidia-smi -q -x``. Pure.

Each takes a GPU (or the node's reading) from ``nvidia_smi_xml.parse`` and the limits of :mod:`thresholds`
and returns a check (:mod:`check_record`). The PCIe link is judged in :mod:`pcie_link`, the fabric
registration in :mod:`fabric_checks`.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health.check_record import Finding, check

_HW_SLOWDOWN = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


def persistence(gpu):
    mode = gpu.get("persistence_mode")
    if mode is None:
        return check("persistence_mode", "skip", "persistence mode not reported", gpu)
    if mode:
        return check("persistence_mode", "pass", "enabled", gpu)
    return check("persistence_mode", "warn", "disabled: enable nvidia-persistenced", gpu)


def ecc_mode(gpu):
    mode = gpu.get("ecc_mode") or {}
    if mode.get("current") is None:
        return check("ecc_mode", "skip", "ECC not supported", gpu)
    if mode.get("pending") is not None and mode["pending"] != mode["current"]:
        return check("ecc_mode", "warn", "ECC mode change pending: reset the GPU to apply", gpu, "reset_gpu")
    if not mode["current"]:
        return check("ecc_mode", "warn", "ECC disabled", gpu)
    return check("ecc_mode", "pass", "ECC enabled", gpu)


def ecc_errors(gpu, limits):
    errors = gpu.get("ecc_errors") or {}
    volatile = errors.get("volatile") or {}
    aggregate = errors.get("aggregate") or {}
    if (gpu.get("ecc_mode") or {}).get("current") is None and volatile.get("uncorrectable") is None:
        return check("ecc_errors", "skip", "ECC not supported", gpu)
    finding = Finding()
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


def row_remap(gpu, limits):
    rows = gpu.get("remapped_rows")
    if rows is None:
        return check("row_remap", "skip", "row remapping not reported (Volta or older)", gpu)
    finding = Finding()
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


def retired_pages(gpu, limits):
    pages = gpu.get("retired_pages")
    if pages is None:
        return check("retired_pages", "skip", "page retirement not reported (Ampere and later remap rows)", gpu)
    finding = Finding()
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


def temperature(gpu, limits):
    temperature = gpu.get("temperature") or {}
    current = temperature.get("gpu")
    if current is None:
        return check("temperature", "skip", "GPU temperature not reported", gpu)
    fail_at = limits["temperature_fail"] or temperature.get("slowdown") or 90
    if current >= fail_at:
        return check(
            "temperature",
            "fail",
            "%s C, at or above %s C: check cooling" % (current, fail_at),
            gpu,
            "hardware_inspection",
        )
    if current >= limits["temperature_warn"]:
        return check("temperature", "warn", "%s C, at or above %s C" % (current, limits["temperature_warn"]), gpu)
    return check("temperature", "pass", "%s C" % current, gpu)


def clock_events(gpu):
    events = gpu.get("clock_events") or {}
    if not events:
        return check("clock_events", "skip", "clock event reasons not reported", gpu)
    finding = Finding()
    for reason in _HW_SLOWDOWN:
        if events.get(reason):
            finding.add("fail", "%s active: check power and cooling" % reason, "hardware_inspection")
    if events.get("sw_thermal_slowdown"):
        finding.add("warn", "sw_thermal_slowdown active")
    active = sorted(name for name, value in events.items() if value)
    return finding.result("clock_events", gpu, "no slowdown (active: %s)" % (", ".join(active) or "none"))


def recovery(gpu):
    finding = Finding()
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


def gpu_count(smi, expected):
    found = len(smi["gpus"])
    if expected is None:
        return check("gpu_count", "skip", "%d GPUs; no expected_gpu_count given" % found)
    if found < expected:
        return check(
            "gpu_count",
            "fail",
            "%d of %d GPUs visible: reboot; inspect if one stays missing" % (found, expected),
            action="reboot_node",
        )
    if found > expected:
        return check("gpu_count", "warn", "%d GPUs visible, %d expected" % (found, expected))
    return check("gpu_count", "pass", "%d GPUs" % found)


def gpu_model(gpus, expected):
    if not expected:
        return [check("gpu_model", "skip", "no expected_gpu_model given")]
    checks = []
    for gpu in gpus:
        name = gpu.get("product_name") or ""
        if expected.lower() in name.lower():
            checks.append(check("gpu_model", "pass", name, gpu))
        else:
            checks.append(check("gpu_model", "fail", "%r is not a %s" % (name, expected), gpu, "hardware_inspection"))
    return checks


def driver_version(smi, expected):
    found = smi.get("driver_version")
    if not expected:
        return check("driver_version", "skip", "driver %s; no expected_driver_version given" % found)
    if found and (found == expected or found.startswith(expected + ".")):
        return check("driver_version", "pass", "driver %s" % found)
    return check("driver_version", "fail", "driver %s, expected %s" % (found, expected))
