# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Error rates and repeats: this run's counters against the node's own earlier samples. Pure: no I/O, no clock.

A snapshot says how many errors a GPU has; an operator acts on how fast they grow. The node keeps
its earlier samples (see :mod:`health_state`); :func:`take_sample` turns this run's readings into one
sample, :func:`judge` compares it with the history and returns checks in :mod:`health_checks`' shape
plus the history to keep. The first run (no history) sets the baseline and says so.

Rules (:data:`RATE_RULES`, one table: the name is the threshold's key, the window is in the name):

==============================  =============  =======  =======  ==================================
threshold (default)             counter        window   verdict  action
==============================  =============  =======  =======  ==================================
ecc_correctable_per_hour (10)   volatile SBE   1 h      fail     hardware_inspection (isolate)
ecc_uncorrectable_per_day (0)   volatile DBE   24 h     fail     reset_gpu
row_remap_per_day (0)           remapped rows  24 h     warn     none (a pending remap fails already)
ib_errors_per_hour (10)         IB error sum   1 h      fail     hardware_inspection (cable, HCA)
ib_link_downed_per_hour (0)     link_downed    1 h      warn     none (a flap; a down port fails)
==============================  =============  =======  =======  ==================================

"More than the threshold within the window" fails. The reference is the oldest sample inside the
window (the count is then what arrived within it); when every sample is older, the newest one, and
the count is scaled to the window. A counter that went down (driver reload, GPU reset, reboot), or a
volatile counter across a boot, counts from zero: what it holds now arrived since the reference.

Xid repeats: every fatal Xid (NVIDIA's bucket says reset the GPU or reboot) is kept with its time
for ``xid_repeat_hours`` (24). Lines closer than ``xid_episode_minutes`` (10) are one episode (one
fault prints several lines); ``xid_repeat_count`` (2) episodes of the same code on the same GPU
within the window escalate from reset to inspection: the reset did not cure it, send it for RMA.
"""

from __future__ import annotations

import datetime

from ansible_collections.gpuops.cluster.plugins.module_utils.health import xid_catalog
from ansible_collections.gpuops.cluster.plugins.module_utils.health.nvidia_smi_xml import normalize_bus_id

HOUR = 3600.0
# name: (check, scope, counter, default, window s, status, action, what, what to do)
RATE_RULES = {
    "ecc_correctable_per_hour": (
        "ecc_rate", "gpu", "ecc_volatile_correctable", 10, HOUR, "fail", "hardware_inspection",
        "correctable (single-bit) ECC errors",
        "isolate the GPU, run dcgmi diag -r 3 and watch row remapping; RMA if it goes on",
    ),
    "ecc_uncorrectable_per_day": (
        "ecc_rate", "gpu", "ecc_volatile_uncorrectable", 0, 24 * HOUR, "fail", "reset_gpu",
        "uncorrectable (double-bit) ECC errors", "drain and reset the GPU",
    ),
    "row_remap_per_day": (
        "row_remap_rate", "gpu", "remapped_rows", 0, 24 * HOUR, "warn", "none",
        "rows remapped", "watch it; a pending remap needs a GPU reset",
    ),
    "ib_errors_per_hour": (
        "infiniband_rate", "port", "ib_errors", 10, HOUR, "fail", "hardware_inspection",
        "InfiniBand port errors", "check the cable, transceiver and HCA (ibdiagnet)",
    ),
    "ib_link_downed_per_hour": (
        "infiniband_rate", "port", "ib_link_downed", 0, HOUR, "warn", "none",
        "InfiniBand link-down events (a flapping link)", "check the cable and the switch port",
    ),
}  # fmt: skip
VOLATILE = ("ecc_volatile_correctable", "ecc_volatile_uncorrectable")
XID_DEFAULTS = {"xid_repeat_hours": 24, "xid_repeat_count": 2, "xid_episode_minutes": 10}
DEFAULT_RATE_THRESHOLDS = dict({name: rule[3] for name, rule in RATE_RULES.items()}, **XID_DEFAULTS)
RATE_CHECKS = ("ecc_rate", "row_remap_rate", "infiniband_rate", "xid_repeat")
_FATAL_ACTIONS = ("reset_gpu", "reboot_node", "hardware_inspection")
_KEEP_RECENT = HOUR  # every sample of the last hour is kept; older ones one per hour, up to the longest window


def thresholds(overrides=None):
    """:data:`DEFAULT_RATE_THRESHOLDS` with ``overrides`` (None values ignored); unknown names raise ValueError."""
    limits = dict(DEFAULT_RATE_THRESHOLDS)
    for name, value in (overrides or {}).items():
        if name not in limits:
            raise ValueError(
                "rate_thresholds: unknown %r; known: %s" % (name, ", ".join(sorted(DEFAULT_RATE_THRESHOLDS)))
            )
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError("rate_thresholds: %s must be a number >= 0, not %r" % (name, value))
            limits[name] = value
    return limits


# --- the sample -----------------------------------------------------------------------------------


def _gpu_key(gpu):
    return gpu.get("uuid") or gpu.get("pci_key") or "index-%s" % gpu.get("index")


def _plus(*values):
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def take_sample(inputs, now, boot_id=None):
    """This run's counters: ``{time, boot_id, gpus: {key: {...}}, ib: {port: {...}}}`` (``now``: epoch seconds).

    GPUs are keyed by UUID (stable when indexes move), ports by ``mlx5_0:1``; counters a reading lacks are None.
    """
    gpus = {}
    for gpu in ((inputs.get("smi") or {}).get("gpus")) or []:
        errors = gpu.get("ecc_errors") or {}
        volatile = errors.get("volatile") or {}
        rows = gpu.get("remapped_rows") or {}
        gpus[_gpu_key(gpu)] = {
            "index": gpu.get("index"),
            "pci_bus_id": gpu.get("pci_bus_id"),
            "ecc_volatile_correctable": volatile.get("correctable"),
            "ecc_volatile_uncorrectable": volatile.get("uncorrectable"),
            "remapped_rows": _plus(rows.get("correctable"), rows.get("uncorrectable")),
        }
    ports = {}
    for port in ((inputs.get("infiniband") or {}).get("ports")) or []:
        counters = port.get("counters") or {}
        if not counters:
            continue
        ports[port["name"]] = {
            "ib_errors": sum(value for name, value in counters.items() if name != "link_downed"),
            "ib_link_downed": counters.get("link_downed"),
        }
    return {"time": float(now), "boot_id": boot_id, "gpus": gpus, "ib": ports}


def fatal_xids(kernel, now):
    """``[{code, bus, time}]`` of the Xids in ``kernel`` whose NVIDIA bucket needs a reset or more."""
    found = []
    for event in (kernel or {}).get("events") or []:
        if event.get("kind") != "xid":
            continue
        info = xid_catalog.lookup(event["code"], event.get("text") or "")
        if info["severity"] != "critical" or info["action"] not in _FATAL_ACTIONS:
            continue
        found.append({"code": event["code"], "bus": event.get("pci_bus_id"), "time": _epoch(event.get("time"), now)})
    return found


def _epoch(iso, default):
    if not iso:
        return float(default)
    try:
        when = datetime.datetime.fromisoformat(iso)
    except ValueError:
        return float(default)
    if when.tzinfo is None:
        when = when.astimezone()
    return when.timestamp()


# --- judging --------------------------------------------------------------------------------------


def _check(name, status, detail, gpu=None, action="none", pci_bus_id=None):
    return {
        "name": name,
        "status": status,
        "detail": detail,
        "gpu_index": gpu.get("index") if gpu else None,
        "pci_bus_id": (gpu.get("pci_bus_id") if gpu else None) or pci_bus_id,
        "action": action if status in ("warn", "fail") else "none",
    }


def _span(seconds):
    if seconds >= 2 * HOUR:
        return "%.1f h" % (seconds / HOUR)
    return "%d min" % max(1, round(seconds / 60))


def _reference(history, key, scope, counter, now, window):
    """``(sample's value, sample's boot, sample's time)`` to count from, or None when no sample has the counter."""
    having = [s for s in history if (s.get(scope) or {}).get(key, {}).get(counter) is not None]
    if not having:
        return None
    inside = [s for s in having if now - s["time"] <= window]
    chosen = inside[0] if inside else having[-1]
    return chosen[scope][key][counter], chosen.get("boot_id"), chosen["time"]


def _count(rule, reference, value, boot_id):
    """Errors that arrived since the reference: the difference, or all of ``value`` after a reset or a boot."""
    before, before_boot, _when = reference
    reset = value < before or (rule[2] in VOLATILE and before_boot and boot_id and before_boot != boot_id)
    return (value if reset else value - before), reset


def judge(history, sample, limits=None):
    """``(checks, notes)``: every rule of :data:`RATE_RULES` for every GPU and port of ``sample`` against ``history``.

    ``history``: the earlier samples, oldest first (empty on the first run). ``limits``: see :func:`thresholds`.
    """
    limits = limits or thresholds()
    history = sorted(history or [], key=lambda s: s["time"])
    now = sample["time"]
    if not history:
        note = "first run: baseline set (%d GPUs, %d InfiniBand ports); rates are judged from the next run" % (
            len(sample["gpus"]),
            len(sample["ib"]),
        )
        names = sorted({rule[0] for rule in RATE_RULES.values()})
        return [_check(name, "pass", note) for name in names], [note]
    per_subject = {}  # (check, scope, key) -> finding list
    notes = []
    for name, rule in RATE_RULES.items():
        check, scope, counter, _default, window, status, action, what, todo = rule
        scope_key = "gpus" if scope == "gpu" else "ib"
        limit = limits[name]
        for key, values in sorted(sample[scope_key].items()):
            subject = per_subject.setdefault((check, scope, key), {"values": values, "problems": [], "seen": []})
            value = values.get(counter)
            if value is None:
                continue
            reference = _reference(history, key, scope_key, counter, now, window)
            if reference is None:
                subject["seen"].append("%s: baseline set" % counter)
                continue
            count, reset = _count(rule, reference, value, sample.get("boot_id"))
            elapsed = max(now - reference[2], 1.0)
            per_window = count if elapsed <= window else count * window / elapsed
            unit = "hour" if window == HOUR else "%d h" % (window / HOUR)
            if per_window > limit:
                subject["problems"].append(
                    (status, action, "%d %s in %s%s, above %s per %s: %s" % (
                        count, what, _span(elapsed), " (counter reset since)" if reset else "", limit, unit, todo,
                    ))
                )  # fmt: skip
            elif count:
                subject["seen"].append("%d %s in %s" % (count, what, _span(elapsed)))
    checks = []
    order = sorted(per_subject, key=lambda k: (k[0], per_subject[k]["values"].get("index", -1), k[2]))
    for check, scope, key in order:
        subject = per_subject[(check, scope, key)]
        values = subject["values"]
        gpu = values if scope == "gpu" else None
        where = {} if gpu else {"pci_bus_id": None}
        label = "" if gpu else "%s: " % key
        if subject["problems"]:
            worst = "fail" if any(p[0] == "fail" for p in subject["problems"]) else "warn"
            act = xid_catalog.strongest(p[1] for p in subject["problems"])
            detail = label + "; ".join(p[2] for p in subject["problems"])
            checks.append(_check(check, worst, detail, gpu, act, **where))
        else:
            detail = label + ("; ".join(subject["seen"]) or "no new errors")
            checks.append(_check(check, "pass", detail, gpu, **where))
    return checks, notes


def judge_xids(stored, new, now, gpus=(), limits=None):
    """``(checks, kept)``: fatal Xid repeats over the stored occurrences and this run's (``fatal_xids``).

    ``kept`` is the list to store: occurrences inside ``xid_repeat_hours``, each once.
    """
    limits = limits or thresholds()
    window = limits["xid_repeat_hours"] * HOUR
    gap = limits["xid_episode_minutes"] * 60
    seen = set()
    kept = []
    for entry in sorted([*(stored or []), *(new or [])], key=lambda e: e["time"]):
        identity = (entry["code"], entry.get("bus"), int(entry["time"]))
        if identity in seen or now - entry["time"] > window:
            continue
        seen.add(identity)
        kept.append({"code": entry["code"], "bus": entry.get("bus"), "time": entry["time"]})
    by_bus = {gpu.get("pci_key"): gpu for gpu in gpus if gpu.get("pci_key")}
    groups = {}
    for entry in kept:
        groups.setdefault((entry["code"], entry["bus"]), []).append(entry["time"])
    checks = []
    for (code, bus), times in sorted(groups.items(), key=lambda item: (item[0][0], item[0][1] or "")):
        episodes = 1 + sum(1 for before, after in zip(times, times[1:]) if after - before > gap)
        gpu = by_bus.get(normalize_bus_id(bus) if bus else None)
        name = xid_catalog.lookup(code)["name"]
        hours = limits["xid_repeat_hours"]
        if episodes >= limits["xid_repeat_count"]:
            detail = (
                "fatal Xid %d (%s) %d times in %s h on %s: a reset did not cure it; inspect the GPU and send it "
                "for RMA" % (code, name, episodes, hours, bus)
            )
            checks.append(_check("xid_repeat", "fail", detail, gpu, "hardware_inspection", pci_bus_id=bus))
        else:
            detail = "fatal Xid %d (%s) once in %s h on %s" % (code, name, hours, bus)
            checks.append(_check("xid_repeat", "pass", detail, gpu, pci_bus_id=bus))
    if not checks:
        checks.append(_check("xid_repeat", "pass", "no fatal Xid in %s h" % limits["xid_repeat_hours"]))
    return checks, kept


def keep_history(history, sample, longest=None):
    """The samples to store after this run: all of the last hour, one per hour before, none beyond ``longest``."""
    longest = longest or max(rule[4] for rule in RATE_RULES.values())
    now = sample["time"]
    kept, last_hour_slot = [], None
    for entry in sorted([*(history or []), sample], key=lambda s: s["time"]):
        age = now - entry["time"]
        if age > longest + HOUR:
            continue
        if age > _KEEP_RECENT:
            slot = int(entry["time"] // HOUR)
            if slot == last_hour_slot:
                continue
            last_hour_slot = slot
        kept.append(entry)
    return kept
