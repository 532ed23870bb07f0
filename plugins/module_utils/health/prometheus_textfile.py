# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A health verdict (:func:`health_checks.evaluate`) as node_exporter textfile-collector text. Pure.

The gauges: ``gpuops_gpu_health_check{check,gpu,pci_bus_id}`` (0 pass, 1 warn, 2 fail, 3 skip),
``gpuops_gpu_health_healthy``, ``gpuops_gpu_health_action{action}`` and
``gpuops_gpu_health_last_run_timestamp_seconds``. The module writes the text as it is; the node-side
command adds its run's duration.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import xid_catalog
from ansible_collections.gpuops.cluster.plugins.module_utils.health.check_record import STATUS_RANK

_STATUS_VALUE = {"pass": 0, "warn": 1, "fail": 2, "skip": 3}


def _label(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_prometheus(result, timestamp):
    """node_exporter textfile-collector text for ``result`` (one gauge per check and GPU).

    Checks that repeat on the same GPU (several Xid codes) are folded into
    their worst status so no series appears twice. ``timestamp`` is the run
    time in seconds since the epoch.
    """
    worst = {}
    for check in result["checks"]:
        gpu = "" if check["gpu_index"] is None else str(check["gpu_index"])
        key = (check["name"], gpu, check["pci_bus_id"] or "")
        if key not in worst or STATUS_RANK[check["status"]] > STATUS_RANK[worst[key]]:
            worst[key] = check["status"]
    lines = [
        "# HELP gpuops_gpu_health_check Result of one gpuops.cluster.gpu_health check: 0 pass, 1 warn, 2 fail, 3 skip.",
        "# TYPE gpuops_gpu_health_check gauge",
    ]
    for (name, gpu, bus), status in sorted(worst.items()):
        lines.append(
            'gpuops_gpu_health_check{check="%s",gpu="%s",pci_bus_id="%s"} %d'
            % (_label(name), _label(gpu), _label(bus), _STATUS_VALUE[status])
        )
    lines += [
        "# HELP gpuops_gpu_health_healthy 1 when no check failed on this node.",
        "# TYPE gpuops_gpu_health_healthy gauge",
        "gpuops_gpu_health_healthy %d" % (1 if result["healthy"] else 0),
        "# HELP gpuops_gpu_health_action Strongest recommended action for the node (1 marks it).",
        "# TYPE gpuops_gpu_health_action gauge",
    ]
    for action in xid_catalog.ACTIONS:
        lines.append(
            'gpuops_gpu_health_action{action="%s"} %d' % (action, 1 if result["actions"]["node"] == action else 0)
        )
    lines += [
        "# HELP gpuops_gpu_health_last_run_timestamp_seconds When gpuops.cluster.gpu_health last ran.",
        "# TYPE gpuops_gpu_health_last_run_timestamp_seconds gauge",
        "gpuops_gpu_health_last_run_timestamp_seconds %d" % int(timestamp),
    ]
    return "\n".join(lines) + "\n"
