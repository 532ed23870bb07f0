# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preview of a rolling upgrade, for a plan-only run: what the window would start, in which order.

:func:`plan` runs the product's own :class:`window.Window` on the surveyed fleet without acting;
:func:`describe` turns the preview into the lines the operator reads before anything moves; :func:`progress_line`
is the line a running window prints at each admission and release.
"""

from __future__ import annotations

import time

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window import Window
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window_input import deadline_reason


def plan(window: Window, now=0, continues=None) -> dict:
    """A static preview of a window rollout, for a plan-only run and the plan printed before anything moves.

    ``window`` is the run's Window as the strategy opens it (``window_open.window``), which this runs dry: the
    preview leaves it admitted and finished, so the strategy opens its own. ``continues`` is what the run continues
    (``window_open.continued``: the previous journal and the deadline it keeps), None when nothing.
    Returns ``{fleet_size, settings, order, canary, first_window, after_canary,
    skipped, unavailable, reserved, waiting_for_jobs, blocked, continues, ...}``: ``first_window`` is
    what starts now, ``after_canary`` what would start once the canaries passed, if
    nothing else changed; ``waiting_for_jobs`` the busy nodes whose job does not end
    within ``max_job_wait`` now (name -> why).
    """
    preview = {
        "fleet_size": len(window.nodes),
        "settings": window.settings.as_dict(),
        "order": window.remaining,
        "canary": list(window.canaries),
        "skipped": list(window.skipped),
        "unavailable": list(window.unavailable),
        "reserved": list(window.reserved),
        "resumed": [name for name in window.resumed if not window.nodes[name].maintenance],
        "maintenance": [name for name in window.resumed if window.nodes[name].maintenance],
        "drained_ahead": window.drained_ahead,
        "waiting_for_jobs": window.waiting_for_jobs(now),
        "blocked": window.blocked,
        "now": now,
        "deadline": window.deadline,
        # the waiting nodes the run will defer (no known end, or past the deadline), name -> why
        "to_defer": to_defer(window, now),
        "jobs_end_by": jobs_end_by(window, now),
        "continues": continuing(continues),
    }
    first = window.admit(now)
    preview["first_window"] = first
    after = []
    if first and window.canary_phase:
        while window.canary_phase and window.in_flight:
            for name in window.in_flight:
                window.finish(name, True)
            window.admit(now)
        after = window.in_flight
    preview["after_canary"] = after
    return preview


def describe(preview: dict) -> list[str]:
    """Lines for the operator, from :func:`plan`."""
    settings = preview["settings"]
    rules = ["at most %d out of service" % settings["max_unavailable"]]
    rules.extend("at most %d per %s" % (limit, kind) for kind, limit in sorted(settings["per_domain"].items()))
    if settings["partition_floor"] is not None:
        rules.append("every partition keeps %g of its GPUs" % settings["partition_floor"])
    rules.append("a busy node waits for its job at most %ds" % settings["max_job_wait"])
    if settings.get("drain_ahead"):
        rules.append("at most %d busy node(s) drained ahead of their slot" % settings["drain_ahead"])
    lines = [
        "%d node(s) in the fleet, %s; %d to upgrade, %d already done, %d down or drained by others"
        % (
            preview["fleet_size"],
            ", ".join(rules),
            len(preview["order"]),
            len(preview["skipped"]),
            len(preview["unavailable"]),
        )
    ]
    continues = preview.get("continues")
    if continues:
        lines.append(
            "continues the run its journal %s left%s"
            % (
                continues["journal"],
                "" if continues["deadline"] is None else " (its deadline kept: %s)" % _when(continues["deadline"]),
            )
        )
    if preview.get("resumed"):
        lines.append(
            "resumed first, out of service already (left by an earlier run): %s" % ", ".join(preview["resumed"])
        )
    if preview.get("maintenance"):
        lines.append(
            "first, in the maintenance reservation set aside for the upgrade (out of users' service already): %s"
            % ", ".join(preview["maintenance"])
        )
    if preview.get("drained_ahead"):
        lines.append(
            "drained ahead by an earlier run, first when their job ends: %s" % ", ".join(preview["drained_ahead"])
        )
    if preview["canary"]:
        lines.append("canary, alone first: %s" % ", ".join(preview["canary"]))
    lines.append("starts now: %s" % (", ".join(preview["first_window"]) or "nothing"))
    if preview["after_canary"]:
        lines.append("starts once the canary passed: %s" % ", ".join(preview["after_canary"]))
    lines.append("order: %s" % (", ".join(preview["order"]) or "nothing to upgrade"))
    to_defer = preview.get("to_defer", {})
    for name, why in sorted(preview.get("waiting_for_jobs", {}).items()):
        if name in to_defer:
            lines.append("deferred, for a later run: %s (%s)" % (name, to_defer[name]))
        else:
            lines.append("waits for its job, in service: %s (%s)" % (name, why))
    if preview.get("jobs_end_by") is not None:
        lines.append(
            "the run waits for jobs until about %s (their latest EndTime); it stops waiting at its deadline %s"
            % (_when(preview["jobs_end_by"]), _when(preview["deadline"]))
        )
    for name in preview.get("reserved", []):
        lines.append("left alone: %s (in a Slurm reservation that is not ours)" % name)
    for name, why in sorted(preview["blocked"].items()):
        lines.append("blocked: %s (%s)" % (name, why))
    return lines


def continuing(continues) -> dict | None:
    """What a run continues, as the preview says it: ``{journal, deadline}``, None when it continues nothing."""
    if not continues or not continues.get("resumed_from"):
        return None
    return {"journal": continues["resumed_from"], "deadline": continues.get("deadline")}


def to_defer(window: Window, now) -> dict:
    """The nodes waiting for jobs that the window defers (no known end, or an end after its deadline): name -> why."""
    found = {}
    for name in window.waiting_for_jobs(now):
        why = deadline_reason(window.nodes[name], now, window.settings.max_job_wait, window.deadline)
        if why is not None:
            found[name] = why
    return found


def jobs_end_by(window: Window, now):
    """The latest EndTime of the jobs the window waits for and will not defer (the run's end, give or take the
    last upgrades), or None when it waits for none."""
    deferring = to_defer(window, now)
    ends = [window.nodes[name].job_end for name in window.waiting_for_jobs(now) if name not in deferring]
    return max(ends) if ends else None


def progress(window: Window, now) -> dict:
    """Where a run stands: counts of nodes done, in flight, waiting and deferred, and when the jobs it waits for
    end (:func:`jobs_end_by`)."""
    return {
        "done": len(window.done),
        "in_flight": len(window.in_flight),
        "waiting": len(window.remaining),
        "deferred": len(window.deferred),
        "failed": len(window.failed),
        "jobs_end_by": jobs_end_by(window, now),
    }


def progress_line(event: str, name: str, state: dict) -> str:
    """One line per admission and release, for the operator watching a long run."""
    line = "%s %s: %d done, %d in flight, %d waiting, %d deferred" % (
        event,
        name,
        state["done"],
        state["in_flight"],
        state["waiting"],
        state["deferred"],
    )
    if state["failed"]:
        line += ", %d failed" % state["failed"]
    if state["jobs_end_by"] is not None:
        line += "; waiting for jobs until about %s" % _when(state["jobs_end_by"])
    return line


def _when(epoch) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
