# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The kernel_tuning role's one node_tuning call: each area's options from the role's settings, and what each area
changed from the call's result (docs: kernel_tuning_options.yml, kernel_tuning_results.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

# The areas node_tuning runs, in its order.
AREAS = ("sysctl_profile", "kernel_runtime", "irq_affinity", "kernel_cmdline", "rdma_dropins", "pcie_acs")
RUNTIME_REPLACES = ["gpuops-thp", "gpuops-hugepages", "gpuops-governor"]
SETTINGS = (
    "sysctl_file",
    "sysctls",
    "numa_enabled",
    "numa_balancing",
    "rdma_enabled",
    "rdma_sysctls",
    "sysctl_extra",
    "thp_enabled",
    "thp_mode",
    "thp_defrag",
    "hugepages_enabled",
    "hugepages",
    "hugepages_per_node",
    "hugepage_size_kb",
    "governor_enabled",
    "governor",
    "irq_drivers",
    "irq_devices",
    "irq_housekeeping_cpus",
    "irqbalance",
    "irqbalance_config",
    "irq_script",
    "irq_conf",
    "cmdline_args",
    "cmdline_max_cstate",
    "cmdline_extra_args",
    "cmdline_remove_args",
    "bootloader",
    "memlock_enabled",
    "memlock_limit",
    "peermem_enabled",
    "acs_disable",
    "apply_live",
    "root",
)


def _on(value):
    return boolean(value, strict=False)


def _sysctls(s):
    """The one drop-in's keys: the profile's (or the override), numa_balancing and the RDMA keys when their areas are
    on, the operator's extra keys over them."""
    sysctls = dict(s["sysctls"] or {})
    if _on(s["numa_enabled"]) and s["numa_balancing"] is not None:
        sysctls["kernel.numa_balancing"] = int(_on(s["numa_balancing"]))
    if _on(s["rdma_enabled"]):
        sysctls.update(s["rdma_sysctls"] or {})
    sysctls.update(s["sysctl_extra"] or {})
    return sysctls


def _runtime(s):
    """kernel_runtime's options: an area switched off is not passed."""
    options = {
        "name": "gpuops-kernel-runtime",
        "replaces": list(RUNTIME_REPLACES),
        "hugepage_size_kb": s["hugepage_size_kb"],
        "apply_live": s["apply_live"],
        "root": s["root"],
    }
    if _on(s["thp_enabled"]):
        options.update(thp_enabled=s["thp_mode"], thp_defrag=s["thp_defrag"])
    if _on(s["hugepages_enabled"]):
        if s["hugepages"] is not None:
            options["hugepages"] = s["hugepages"]
        if s["hugepages_per_node"]:
            options["hugepages_per_node"] = s["hugepages_per_node"]
    if _on(s["governor_enabled"]):
        options["governor"] = s["governor"]
    return options


def _cmdline_args(s):
    cstate = s["cmdline_max_cstate"]
    extra = [] if cstate is None else ["processor.max_cstate=%s" % cstate, "intel_idle.max_cstate=%s" % cstate]
    return list(s["cmdline_args"] or []) + extra + list(s["cmdline_extra_args"] or [])


def kernel_tuning_options(settings):
    """node_tuning's options of every area (name -> its options) from the role's settings (:data:`SETTINGS`)."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError("gpuops.cluster.kernel_tuning_options: the input must be the role's settings (a dict)")
    missing = [name for name in SETTINGS if name not in settings]
    if missing:
        raise AnsibleFilterError("gpuops.cluster.kernel_tuning_options: settings lack %s" % ", ".join(missing))
    s = settings
    sysctls = _sysctls(s)
    live = {"apply_live": s["apply_live"], "root": s["root"]}
    dropins = {"peermem": _on(s["peermem_enabled"]), "root": s["root"]}
    if _on(s["memlock_enabled"]) and s["memlock_limit"] is not None:
        dropins["memlock_limit"] = str(s["memlock_limit"])
    return {
        "sysctl_profile": dict(
            name=s["sysctl_file"], sysctls=sysctls, state="present" if sysctls else "absent", **live
        ),
        "kernel_runtime": _runtime(s),
        "irq_affinity": dict(
            drivers=s["irq_drivers"],
            devices=s["irq_devices"],
            housekeeping_cpus=s["irq_housekeeping_cpus"],
            irqbalance=s["irqbalance"],
            irqbalance_config=s["irqbalance_config"],
            policy_script=s["irq_script"],
            persist_path=s["irq_conf"],
            boot_unit=True,
            **live,
        ),
        "kernel_cmdline": dict(
            args=_cmdline_args(s), remove_args=s["cmdline_remove_args"], bootloader=s["bootloader"], **live
        ),
        "rdma_dropins": dropins,
        "pcie_acs": {"state": "disabled" if _on(s["acs_disable"]) else "report", "apply_live": s["apply_live"]},
    }


def kernel_tuning_results(parts):
    """What each area of the role changed, from node_tuning's ``results`` (``{}`` where the call did not run):
    ``{sysctl, runtime, thp, hugepages, governor, irq, cmdline, memlock, peermem, acs}``, each the module's result
    or ``{changed: bool}``."""
    parts = parts or {}
    if not isinstance(parts, dict):
        raise AnsibleFilterError("gpuops.cluster.kernel_tuning_results: the input must be node_tuning's results")
    runtime = parts.get("kernel_runtime") or {}
    runtime_areas = runtime.get("changed_areas") or []
    dropins = parts.get("rdma_dropins") or {}
    return {
        "sysctl": parts.get("sysctl_profile") or {},
        # its areas report their own change
        "runtime": dict(runtime, changed=False),
        "thp": {"changed": "thp" in runtime_areas},
        "hugepages": {"changed": "hugepages" in runtime_areas},
        "governor": {"changed": "governor" in runtime_areas},
        "irq": parts.get("irq_affinity") or {},
        "cmdline": parts.get("kernel_cmdline") or {},
        "memlock": {"changed": bool(dropins.get("changed_limits")) or bool(dropins.get("changed_systemd"))},
        "peermem": {"changed": bool(dropins.get("changed_peermem"))},
        "acs": parts.get("pcie_acs") or {},
    }


class FilterModule:
    """gpuops.cluster kernel_tuning filters."""

    def filters(self):
        return {"kernel_tuning_options": kernel_tuning_options, "kernel_tuning_results": kernel_tuning_results}
