# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node-side verdict as NHC callers read it: an exit code and one line. Pure.

:func:`with_checks` adds checks judged outside :func:`health_checks.evaluate` (rates, repeats, baselines) to its
result and recomputes ``healthy``, ``actions`` and ``summary`` the way ``evaluate`` does.
:func:`reason` picks the one failure to name (the strongest action first, then the order of the checks) and
writes it as the operator reads it in ``sinfo -R``::

    GPU 3 (0000:1b:00.0) ecc_errors: 12 uncorrectable ECC errors since the driver loaded; action: drain and reset

Exit codes (NHC's convention: zero healthy, anything else not): :data:`EXIT_HEALTHY`, :data:`EXIT_UNHEALTHY`,
:data:`EXIT_CONFIG` (the configuration or the command line is wrong), :data:`EXIT_ERROR` (the command itself broke).
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import xid_catalog
from ansible_collections.gpuops.cluster.plugins.module_utils.health.nvidia_smi_xml import normalize_bus_id

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
EXIT_CONFIG = 2
EXIT_ERROR = 3
ACTION_WORDS = {
    "none": "check the node",
    "restart_application": "restart the job",
    "reset_gpu": "drain and reset",
    "reboot_node": "drain and reboot",
    "hardware_inspection": "drain and inspect the hardware (RMA)",
}
REASON_LENGTH = 240  # a Slurm reason stays readable in sinfo -R and scontrol show node
STATUSES = ("pass", "warn", "fail", "skip")


def with_checks(verdict, extra, gpus=(), skip=()):
    """``verdict`` with ``extra`` checks appended (those named in ``skip`` become skips), totals recomputed."""
    skip = set(skip or ())
    checks = list(verdict["checks"])
    for check in extra:
        if check["name"] in skip:
            continue
        checks.append(check)
    for name in sorted(skip & {check["name"] for check in extra}):
        checks.append(
            {"name": name, "status": "skip", "detail": "skipped by skip_checks", "gpu_index": None,
             "pci_bus_id": None, "action": "none"}
        )  # fmt: skip
    result = dict(verdict, checks=checks)
    result["healthy"] = not any(check["status"] == "fail" for check in checks)
    result["actions"] = actions(checks, gpus, verdict.get("actions") or {})
    counts = {status: 0 for status in STATUSES}
    for check in checks:
        counts[check["status"]] += 1
    failed = [_summary_line(check) for check in checks if check["status"] == "fail"]
    result["summary"] = {"counts": counts, "failed": failed}
    return result


def _summary_line(check):
    where = "" if check["gpu_index"] is None else "[gpu%d]" % check["gpu_index"]
    return "%s%s: %s" % (check["name"], where, check["detail"])


def actions(checks, gpus, before=None):
    """``{node, gpus}``: the strongest action of the failed or warned ``checks`` for the node and for each GPU
    (every GPU listed, ``none`` when nothing concerns it), over the per-GPU actions of ``before`` (a verdict's
    ``actions`` that ``checks`` add to)."""
    per_gpu = {entry["gpu_index"]: dict(entry) for entry in (before or {}).get("gpus") or []}
    for gpu in gpus:
        per_gpu.setdefault(gpu["index"], {"gpu_index": gpu["index"], "pci_bus_id": gpu["pci_bus_id"], "action": "none"})
    for check in checks:
        if check["gpu_index"] is None or check["status"] not in ("warn", "fail"):
            continue
        entry = per_gpu.setdefault(
            check["gpu_index"], {"gpu_index": check["gpu_index"], "pci_bus_id": check["pci_bus_id"], "action": "none"}
        )
        entry["action"] = xid_catalog.strongest([entry["action"], check["action"]])
    node = xid_catalog.strongest(check["action"] for check in checks if check["status"] in ("warn", "fail"))
    return {"node": node, "gpus": [per_gpu[index] for index in sorted(per_gpu)]}


def short_bus(value):
    """``00000000:1B:00.0`` -> ``0000:1b:00.0`` (what ``lspci -D`` prints); other spellings kept."""
    key = normalize_bus_id(value)
    if key is None:
        return value
    function = value.rsplit(".", 1)[1] if "." in value[-2:] else "0"
    return "%s.%s" % (key, function)


def describe(check, length=None):
    """One failure in the operator's words: ``GPU 3 (0000:1b:00.0) ecc_errors: ...; action: drain and reset``.

    With ``length``, the detail is shortened (never the GPU, the check or the action) to fit.
    """
    if check["gpu_index"] is not None and check["pci_bus_id"]:
        where = "GPU %d (%s) " % (check["gpu_index"], short_bus(check["pci_bus_id"]))
    elif check["gpu_index"] is not None:
        where = "GPU %d " % check["gpu_index"]
    elif check["pci_bus_id"]:
        where = "%s " % short_bus(check["pci_bus_id"])
    else:
        where = ""
    head = "%s%s: " % (where, check["name"])
    tail = "; action: %s" % ACTION_WORDS.get(check["action"], check["action"])
    detail = check["detail"]
    if length is not None and len(head) + len(detail) + len(tail) > length:
        detail = detail[: max(length - len(head) - len(tail) - 3, 20)].rstrip() + "..."
    return head + detail + tail


def worst_failure(checks):
    """The failed check to name: the strongest action, then the first in the order of the checks."""
    failed = [check for check in checks if check["status"] == "fail"]
    if not failed:
        return None
    rank = {action: position for position, action in enumerate(xid_catalog.ACTIONS)}
    return max(enumerate(failed), key=lambda item: (rank.get(item[1]["action"], 0), -item[0]))[1]


def reason(verdict, length=REASON_LENGTH):
    """The one line of an unhealthy node (None when healthy), at most ``length`` characters.

    Further failures are counted at the end: ``(+2 more: row_remap[gpu3], xid)``.
    """
    chosen = worst_failure(verdict["checks"])
    if chosen is None:
        return None
    others = [check for check in verdict["checks"] if check["status"] == "fail" and check is not chosen]
    if others:
        names = []
        for check in others:
            name = check["name"] + ("" if check["gpu_index"] is None else "[gpu%d]" % check["gpu_index"])
            if name not in names:
                names.append(name)
        more = " (+%d more: %s)" % (len(others), ", ".join(names[:4]) + (", ..." if len(names) > 4 else ""))
    else:
        more = ""
    return describe(chosen, length - len(more)) + more


def exit_code(verdict):
    return EXIT_HEALTHY if verdict["healthy"] else EXIT_UNHEALTHY
