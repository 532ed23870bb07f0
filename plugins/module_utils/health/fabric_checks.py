# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVLink fabric: each GPU's fabric registration (nvidia-smi) and Fabric Manager's state on an NVSwitch
system. Pure.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health.check_record import check


def registration(gpu):
    fabric = gpu.get("fabric") or {}
    state, status = fabric.get("state"), fabric.get("status")
    if state is None:
        return check("fabric", "skip", "no NVLink fabric reported for this GPU", gpu)
    if state.lower() == "completed" and (status is None or status.lower() == "success"):
        return check("fabric", "pass", "fabric registration %s (%s)" % (state, status), gpu)
    return check(
        "fabric",
        "fail",
        "fabric registration %s (%s): restart nvidia-fabricmanager, reboot if it persists" % (state, status),
        gpu,
        "reboot_node",
    )


def fabricmanager(fabricmanager):
    if not fabricmanager.get("required"):
        return check("fabricmanager", "skip", fabricmanager.get("reason") or "no NVSwitch on this node")
    state = fabricmanager.get("state")
    if state == "active":
        return check("fabricmanager", "pass", "nvidia-fabricmanager active")
    return check(
        "fabricmanager",
        "fail",
        "nvidia-fabricmanager %s on an NVSwitch system: start it (a reboot also does)" % state,
        action="reboot_node",
    )
