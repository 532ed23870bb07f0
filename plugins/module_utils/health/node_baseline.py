# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each node's own baseline: its last good NCCL bus bandwidth and DCGM figures, and what was already failing. Pure.

One fixed threshold table (``thresholds.NCCL_BUSBW_GBPS``) cannot tell a node that lost 15 % of its bandwidth
from one that never had more: the node is compared with itself. The baseline (stored with the node's state,
see :mod:`health_state`) is::

    {"nccl_busbw_gbps": {"value": 468.2, "time": 1767225600.0},
     "dcgm": {"<test> gpu<i> <figure>": {"value": 24.8, "time": ...}},
     "failing": {"<check> gpu<i> <bus>": first seen (epoch s)}}

- :func:`figures`: this run's numbers: the all_reduce bus bandwidth, and every ``<label>: <n> GB/s`` a DCGM test
  prints in its info (the PCIe test's host/device bandwidths at ``-r 2``/``-r 3``).
- :func:`judge`: a figure more than ``max_regression`` (0.10) below the node's last good value fails, and so
  does one below the fleet's median when it is given; the first figure is recorded and says so.
- :func:`mark_pre_existing`: a failure that was already failing at an earlier run says so in its detail
  (``pre-existing, failing since ...``) and carries ``pre_existing``: an upgrade gate reports it as found, not
  caused.
- :func:`update`: figures are kept only from a healthy run (a last *good* value); the failing set follows
  each run.
"""

from __future__ import annotations

import datetime
import re

BASELINE_CHECKS = ("nccl_baseline", "dcgm_baseline")
MAX_REGRESSION = 0.10
_BANDWIDTH = re.compile(r"(?P<label>[A-Za-z][A-Za-z0-9 /_-]*?)\s*[:=]\s*(?P<value>\d+(?:\.\d+)?)\s*GB/s")


def figures(inputs):
    """``{nccl_busbw_gbps, dcgm: {key: GB/s}}`` of this run (None / empty when not run)."""
    nccl = ((inputs.get("nccl") or {}).get("parsed") or {}).get("busbw_gbps")
    found = {}
    for result in (((inputs.get("dcgm") or {}).get("parsed") or {}).get("results")) or []:
        if result.get("status") not in ("pass", "passed"):
            continue
        for match in _BANDWIDTH.finditer(result.get("info") or ""):
            gpu = "" if result.get("gpu_index") is None else " gpu%d" % result["gpu_index"]
            key = "%s%s %s" % (result["test"], gpu, " ".join(match.group("label").split()).lower())
            found[key] = float(match.group("value"))
    return {"nccl_busbw_gbps": nccl, "dcgm": found}


def _when(epoch):
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _compare(check, what, value, recorded, fleet, max_regression):
    """``(status, detail)`` of one figure against the node's own last good value and the fleet's median."""
    problems = []
    if recorded:
        floor = recorded["value"] * (1 - max_regression)
        if value < floor:
            problems.append(
                "%.1f GB/s, %.0f%% below this node's last good %.1f GB/s (%s)"
                % (value, 100 * (1 - value / recorded["value"]), recorded["value"], _when(recorded["time"]))
            )
    if fleet and value < fleet * (1 - max_regression):
        problems.append(
            "%.1f GB/s, %.0f%% below the fleet's median %.1f GB/s" % (value, 100 * (1 - value / fleet), fleet)
        )
    if problems:
        return "fail", "%s: %s (more than %.0f%% is a regression)" % (what, "; ".join(problems), 100 * max_regression)
    if recorded:
        return "pass", "%s %.1f GB/s, this node's last good %.1f GB/s" % (what, value, recorded["value"])
    return "pass", "%s %.1f GB/s: first figure, recorded as this node's baseline when the run is healthy" % (
        what,
        value,
    )


def _check(name, status, detail, action="none"):
    return {
        "name": name,
        "status": status,
        "detail": detail,
        "gpu_index": None,
        "pci_bus_id": None,
        "action": action if status in ("warn", "fail") else "none",
    }


def judge(baseline, found, verdict, now, max_regression=MAX_REGRESSION, fleet_busbw=None):
    """``(checks, baseline)``: this run's figures against the node's baseline (and the fleet's median)."""
    del verdict, now
    baseline = baseline or {}
    checks = []
    busbw = found.get("nccl_busbw_gbps")
    if busbw is not None:
        status, detail = _compare(
            "nccl_baseline", "all_reduce bus bandwidth", busbw, baseline.get("nccl_busbw_gbps"), fleet_busbw,
            max_regression,
        )  # fmt: skip
        checks.append(_check("nccl_baseline", status, detail, "hardware_inspection"))
    dcgm_problems, dcgm_seen = [], 0
    for key, value in sorted((found.get("dcgm") or {}).items()):
        recorded = (baseline.get("dcgm") or {}).get(key)
        status, detail = _compare("dcgm_baseline", key, value, recorded, None, max_regression)
        dcgm_seen += 1
        if status == "fail":
            dcgm_problems.append(detail)
    if dcgm_problems:
        checks.append(_check("dcgm_baseline", "fail", "; ".join(dcgm_problems), "hardware_inspection"))
    elif dcgm_seen:
        checks.append(_check("dcgm_baseline", "pass", "%d DCGM figures within %.0f%% of this node's baseline"
                             % (dcgm_seen, 100 * max_regression)))  # fmt: skip
    return checks, baseline


def failure_key(check):
    gpu = "" if check["gpu_index"] is None else check["gpu_index"]
    return "%s gpu%s %s" % (check["name"], gpu, check["pci_bus_id"] or "")


def mark_pre_existing(verdict, baseline):
    """``verdict`` whose failures that were failing at an earlier run say so (``pre_existing``: since when)."""
    failing = (baseline or {}).get("failing") or {}
    checks = []
    for check in verdict["checks"]:
        since = failing.get(failure_key(check)) if check["status"] == "fail" else None
        if since is None:
            checks.append(check)
            continue
        detail = "%s (pre-existing, failing since %s)" % (check["detail"], _when(since))
        checks.append(dict(check, pre_existing=_when(since), detail=detail))
    return dict(verdict, checks=checks)


def update(baseline, found, verdict, now):
    """The baseline to store after this run."""
    kept = {
        "nccl_busbw_gbps": (baseline or {}).get("nccl_busbw_gbps"),
        "dcgm": dict((baseline or {}).get("dcgm") or {}),
        "failing": {},
    }
    if verdict["healthy"]:
        if found.get("nccl_busbw_gbps") is not None:
            kept["nccl_busbw_gbps"] = {"value": found["nccl_busbw_gbps"], "time": now}
        for key, value in (found.get("dcgm") or {}).items():
            kept["dcgm"][key] = {"value": value, "time": now}
    before = (baseline or {}).get("failing") or {}
    for check in verdict["checks"]:
        if check["status"] == "fail":
            key = failure_key(check)
            kept["failing"][key] = before.get(key, now)
    return kept
