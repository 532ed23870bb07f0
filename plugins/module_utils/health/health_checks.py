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

Each check is decided in the module named after it: :mod:`gpu_checks` (each GPU from nvidia-smi),
:mod:`pcie_link`, :mod:`fabric_checks`, :mod:`kernel_event_checks` (Xid, fallen off the bus, SXid),
:mod:`nvlink_checks`, :mod:`infiniband_checks`, :mod:`diagnostic_checks` (DCGM, nccl-tests); a check's
record is :mod:`check_record`'s. The limits come from :mod:`thresholds`; :mod:`prometheus_textfile` turns
a result into a node_exporter textfile.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    cdi_spec,
    check_record,
    dcgm_exporter,
    diagnostic_checks,
    fabric_checks,
    gpu_checks,
    gpudirect_rdma,
    infiniband_checks,
    kernel_event_checks,
    kernel_modules,
    mig_drift,
    mig_health,
    node_verdict,
    nvlink_checks,
    nvlink_counts,
    pcie_link,
    thresholds,
)

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
    pcie_baseline = pcie_link.pcie_baseline_by_bus(options.get("pcie_baseline"))
    unavailable = dict(inputs.get("unavailable") or {})
    checks = []

    failed_sources = dict(inputs.get("failed") or {})

    def skipped(names, reason):
        return [check_record.check(name, "skip", reason) for name in names]

    def not_read(names, source, default):
        """Checks of a source not read: a failure when it was asked for and could not be read, else skips."""
        if source in failed_sources:
            return [check_record.check(name, "fail", failed_sources[source]) for name in names]
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
        checks.append(check_record.check("nvidia_smi", "fail", reason, action="reboot_node"))
        checks.extend(skipped(smi_checks, "no nvidia-smi output"))
    elif not gpus:
        detail = "; ".join(smi["warnings"]) or "nvidia-smi lists no GPUs"
        checks.append(check_record.check("nvidia_smi", "fail", detail, action="reboot_node"))
        checks.append(gpu_checks.gpu_count(smi, options.get("expected_gpu_count")))
        checks.extend(skipped(smi_checks[1:], "nvidia-smi lists no GPUs"))
    else:
        status = "warn" if smi["warnings"] else "pass"
        detail = "; ".join(smi["warnings"]) or "%d GPUs, driver %s" % (len(gpus), smi.get("driver_version"))
        checks.append(check_record.check("nvidia_smi", status, detail))
        checks.append(gpu_checks.gpu_count(smi, options.get("expected_gpu_count")))
        checks.extend(gpu_checks.gpu_model(gpus, options.get("expected_gpu_model")))
        checks.append(gpu_checks.driver_version(smi, options.get("expected_driver_version")))
        kernel_reading = (inputs.get("kernel"), failed_sources.get("kernel"), unavailable.get("kernel"))
        for gpu in gpus:
            mig = mig_layouts[gpu["index"]]
            checks.extend(
                [
                    gpu_checks.persistence(gpu),
                    check_record.judged("mig_mode", gpu, mig_health.mode_finding(gpu, mig)),
                    check_record.judged("mig_layout", gpu, mig_drift.judge(options.get("mig_declared"), gpu, mig)),
                    gpu_checks.ecc_mode(gpu),
                    # MIG on: volatile ECC counts per MIG device, row remaps from the kernel log (mig_health)
                    check_record.judged("ecc_errors", gpu, mig_health.ecc_errors(gpu, limits))
                    or gpu_checks.ecc_errors(gpu, limits),
                    check_record.judged("row_remap", gpu, mig_health.row_remap(gpu, *kernel_reading))
                    or gpu_checks.row_remap(gpu, limits),
                    gpu_checks.retired_pages(gpu, limits),
                    pcie_link.judge(gpu, pcie_platform, pcie_baseline),
                    gpu_checks.temperature(gpu, limits),
                    gpu_checks.clock_events(gpu),
                    gpu_checks.recovery(gpu),
                    fabric_checks.registration(gpu),
                ]
            )

    kernel = inputs.get("kernel")
    if kernel is None:
        checks.extend(not_read(("xid", "fallen_off_bus", "sxid"), "kernel", "kernel log not read"))
    else:
        checks.extend(kernel_event_checks.xid(kernel, gpus))
        checks.extend(kernel_event_checks.fallen_off_bus(kernel, gpus))
        checks.extend(kernel_event_checks.sxid(kernel))

    nvlink_expected = (inputs.get("nvswitch"), options.get("expected_nvlinks"), options.get("expected_gpu_count"))
    if inputs.get("nvlink_status") is None:
        expected = nvlink_counts.node_expected_links(gpus, *nvlink_expected)
        if "nvlink_status" in failed_sources and not any(want["links"] for want in expected.values()):
            failed_sources.pop("nvlink_status")  # no link expected on this node: a failed read is no finding
        checks.extend(not_read(("nvlink",), "nvlink_status", "NVLink status not read"))
    else:
        checks.extend(nvlink_checks.links(inputs["nvlink_status"], gpus, *nvlink_expected))
    if inputs.get("nvlink_errors") is None:
        checks.extend(not_read(("nvlink_errors",), "nvlink_errors", "NVLink error counters not read"))
    else:
        checks.extend(nvlink_checks.error_counters(inputs["nvlink_errors"], gpus, limits["nvlink_errors"]))

    if inputs.get("infiniband") is None:
        checks.extend(not_read(("infiniband",), "infiniband", "InfiniBand ports not read"))
    else:
        checks.extend(
            infiniband_checks.ports(
                inputs["infiniband"], options.get("expected_ib_ports"), options.get("expected_ib_rate"),
                limits["ib_counter_errors"],
            )
        )  # fmt: skip
        if options.get("expected_ib_port_count"):
            checks.append(
                infiniband_checks.port_count(
                    inputs["infiniband"], options["expected_ib_port_count"], options.get("expected_ib_rate")
                )
            )
            checks = [c for c in checks if not (c["name"] == "infiniband" and c["status"] == "skip")]

    if inputs.get("fabricmanager") is None:
        checks.extend(not_read(("fabricmanager",), "fabricmanager", "Fabric Manager state not read"))
    else:
        checks.append(fabric_checks.fabricmanager(inputs["fabricmanager"]))

    if inputs.get("dcgm") is None:
        checks.extend(not_read(("dcgm_diag",), "dcgm", "not run at this level"))
    else:
        checks.extend(diagnostic_checks.dcgm_diag(inputs["dcgm"], gpus))
    if inputs.get("nccl") is None:
        checks.extend(not_read(("nccl_busbw",), "nccl", "not run at this level"))
    else:
        checks.append(diagnostic_checks.nccl_busbw(inputs["nccl"], gpus, limits["nccl_busbw_gbps"]))

    if inputs.get("kernel_modules") is None:
        checks.extend(not_read(("kernel_module",), "kernel_modules", "installed kernels not read"))
    else:
        found = kernel_modules.findings(inputs["kernel_modules"])
        checks.extend(check_record.check("kernel_module", status, detail) for status, detail in found)

    if inputs.get("cdi") is None:
        checks.extend(not_read(("cdi_spec",), "cdi", "CDI specification not read"))
    else:
        checks.extend(
            check_record.check("cdi_spec", status, detail) for status, detail in cdi_spec.findings(inputs["cdi"], smi)
        )

    if inputs.get("dcgm_exporter") is None:
        checks.extend(not_read(("dcgm_exporter",), "dcgm_exporter", "DCGM Exporter not read"))
    else:
        found = dcgm_exporter.findings(inputs["dcgm_exporter"], gpus)
        checks.extend(check_record.check("dcgm_exporter", status, detail) for status, detail in found)

    # GPUDirect RDMA: which path the node has (DMA-BUF, nvidia-peermem, none needed), in the facts too
    rdma_path = None
    if inputs.get("gpudirect_rdma") is None:
        checks.extend(not_read(("gpudirect_rdma",), "gpudirect_rdma", "GPUDirect RDMA not read"))
    else:
        setting = options.get("gpudirect_rdma") or gpudirect_rdma.DEFAULT_SETTING
        decision = gpudirect_rdma.decide(inputs["gpudirect_rdma"], setting)
        rdma_path = {key: decision[key] for key in ("path", "setting", "status")}
        checks.extend(
            check_record.check("gpudirect_rdma", status, detail) for status, detail in gpudirect_rdma.findings(decision)
        )

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
        "pcie": pcie_link.pcie_links(smi),
    }


def _summary(checks):
    counts = {status: 0 for status in check_record.STATUSES}
    for check in checks:
        counts[check["status"]] += 1
    problems = ["%s%s: %s" % (check["name"], "" if check["gpu_index"] is None else "[gpu%d]" % check["gpu_index"],
                              check["detail"]) for check in checks if check["status"] == "fail"]  # fmt: skip
    return {"counts": counts, "failed": problems}
