# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One health check's record, and how the problems of one check on one GPU add up. Pure.

A check is ``{name, status: pass|warn|fail|skip, detail, gpu_index, pci_bus_id, action}``; the worst
status of a :class:`Finding` decides, its action is the strongest of its problems' (``xid_catalog.ACTIONS``).
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import xid_catalog

STATUSES = ("pass", "warn", "fail", "skip")
STATUS_RANK = {"skip": 0, "pass": 1, "warn": 2, "fail": 3}  # worst last


def check(name, status, detail, gpu=None, action="none", pci_bus_id=None):
    return {
        "name": name,
        "status": status,
        "detail": detail,
        "gpu_index": gpu["index"] if gpu else None,
        "pci_bus_id": gpu["pci_bus_id"] if gpu else pci_bus_id,
        "action": action if status in ("warn", "fail") else "none",
    }


class Finding:
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
        return check(name, self.status, "; ".join(self.details) or ok_detail, gpu, self.action)


def judged(name, gpu, verdict):
    """A check from a judge's ``(status, detail, action)`` (``mig_health``'s); None for None (the judge passes)."""
    return None if verdict is None else check(name, verdict[0], verdict[1], gpu, verdict[2])
