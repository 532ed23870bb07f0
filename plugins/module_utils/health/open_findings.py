# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fatal kernel-log findings kept open until they are acted on. Pure.

The node-side command reads the kernel log "since the last run". Without this, a fatal Xid is seen by one run
only: if that run could not drain the node (the controller unreachable, a run without ``--drain``, an operator's
drain in place that is later lifted), the next run no longer sees it and passes. So the fatal events of a run
(:func:`fatal`) are stored (``open`` in :mod:`health_state`) and every later run judges them again with what it
read (:func:`reopen`), until

- a drain by the command is confirmed in Slurm (drained now, or drained with this reason already): cleared; or
- the node has rebooted (another ``boot_id``): the events belong to the boot that had them, and the reboot was
  the action.

Reopened events carry ``reopened: True``: they are judged, never counted again as new occurrences (the Xid
repeat count of :mod:`error_rates` takes the fresh ones only).
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import xid_catalog

KEYS = ("kind", "code", "pci_bus_id", "device", "text", "line", "time")


def fatal(event):
    """Whether an event fails the node by itself (the same severities as the evaluator's checks)."""
    if event.get("kind") == "xid":
        return xid_catalog.lookup(event["code"], event.get("text") or "")["severity"] == "critical"
    if event.get("kind") == "sxid":
        return xid_catalog.lookup_sxid(event["code"], event.get("text") or "")["severity"] == "critical"
    return event.get("kind") == "fallen_off_bus"


def _identity(event):
    return (event.get("kind"), event.get("code"), event.get("pci_bus_id"), event.get("line"), event.get("time"))


def reopen(kernel, stored, boot_id):
    """``kernel`` (a :func:`kernel_log.parse` result, or None when the log was not read) with the stored open
    events of this boot added, each once, marked ``reopened``; ``(kernel, reopened count)``."""
    if kernel is None:
        return None, 0
    seen = {_identity(event) for event in kernel["events"]}
    added = []
    for entry in stored or []:
        if entry.get("boot_id") != boot_id or _identity(entry) in seen:
            continue
        seen.add(_identity(entry))
        event = {key: entry.get(key) for key in KEYS}
        event["uptime"] = None
        event["reopened"] = True
        added.append(event)
    if not added:
        return kernel, 0
    return dict(kernel, events=[*added, *kernel["events"]]), len(added)


def fresh(kernel):
    """``kernel`` without the reopened events (for what counts occurrences)."""
    if kernel is None:
        return None
    return dict(kernel, events=[event for event in kernel["events"] if not event.get("reopened")])


def still_open(kernel, stored, boot_id, acted_on, keep=None):
    """The open events to store: none when ``acted_on`` (a drain confirmed); else every fatal event judged (and
    every one ``keep`` is true of: an Xid 63 of a GPU with MIG on, ``mig_health.pending_remap``), or, when this
    run could not read the kernel log (``kernel`` None), the stored ones of this boot."""
    if acted_on:
        return []
    if kernel is None:
        return [entry for entry in stored or [] if entry.get("boot_id") == boot_id]
    kept = []
    for event in kernel["events"]:
        if fatal(event) or (keep is not None and keep(event)):
            entry = {key: event.get(key) for key in KEYS}
            entry["boot_id"] = boot_id
            kept.append(entry)
    return kept
