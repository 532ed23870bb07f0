# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The operator's ``gpuops_health_*`` settings as ``gpuops.cluster.gpu_health`` options, from one table.

playbooks/health_check.yml, the rolling upgrade's survey and gate (roles/rolling_upgrade) and the node-side
command's configuration (roles/gpu_healthcheck) all take their options from :func:`health_options` (through the
lookup gpuops.cluster.health_options), so a setting reaches every one of them: ``gpuops_health_<option>`` is
option ``<option>``. A caller leaves out, by name, what it sets itself (the upgrade writes no metrics file; the
node command keeps its own kernel-log cursor).

An option whose variable has a default other than the module's has it in :data:`DEFAULTS`, and nowhere else; the
registry playbooks/vars/gpuops_variables.yml documents it under ``default`` and a unit test keeps the two equal.
"""

from __future__ import annotations

PREFIX = "gpuops_health_"
# Options whose setting is not gpuops_health_<option>: a setting the health check shares with a role.
# gpudirect_rdma: the nvidia_stack role loads nvidia-peermem by it, the health check judges the node by it.
VARIABLES = {"gpudirect_rdma": "gpuops_gpudirect_rdma"}
# gpu_health options an operator sets for the fleet, a group or a host (the level and fail_on_unhealthy belong to
# each caller).
OPTIONS = (
    "expected_gpu_count",
    "expected_gpu_model",
    "expected_driver_version",
    "expected_ib_ports",
    "expected_ib_port_count",
    "expected_ib_rate",
    # what the platform gives, where it is less than the GPU model has (a VM, a board wired x8)
    "expected_nvlinks",
    "expected_pcie_width",
    "expected_pcie_gen",
    "pcie_baseline",
    "thresholds",
    "skip_checks",
    "since",
    "prometheus_textfile",
    "nvidia_smi_path",
    "all_reduce_perf_path",
    "kernel_log",
    "infiniband_root",
    "settle_timeout",
    "gpudirect_rdma",
)
# Defaults of the variables that differ from gpu_health's own. settle_timeout: the rolling upgrade's gates (the only
# callers that take it; the health check, the survey and the node command judge the node as it runs) wait up to
# 300 s after the node's reboot for Fabric Manager, the NVLink fabric, the NVLinks and InfiniBand before judging.
DEFAULTS = {"settle_timeout": 300}


def variable(option) -> str:
    """The variable an option comes from: ``gpuops_health_<option>``, or the one :data:`VARIABLES` names."""
    return VARIABLES.get(option, PREFIX + option)


def health_options(variables, exclude=()) -> dict:
    """``{option: value}`` for each ``gpuops_health_<option>`` set (not null) in ``variables``, else its default in
    :data:`DEFAULTS` if it has one, but those in ``exclude``."""
    if not isinstance(variables, dict):
        raise ValueError("health_options takes the host's variables as a mapping, got %r" % (variables,))
    if isinstance(exclude, str):
        exclude = [exclude]
    unknown = sorted(set(exclude) - set(OPTIONS))
    if unknown:
        raise ValueError("exclude names %s, not health options; known: %s" % (", ".join(unknown), ", ".join(OPTIONS)))
    values = {option: variables.get(variable(option)) for option in OPTIONS if option not in exclude}
    return {
        option: DEFAULTS.get(option) if value is None else value
        for option, value in values.items()
        if value is not None or option in DEFAULTS
    }
