# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fresh state during a rolling upgrade: when the window reads the fleet again, and what it read.

The plan reads Slurm once before any node moves; a window that runs for hours or days
must see what changed since: jobs that started on nodes still waiting (they must not
be drained for a job that will not end within ``max_job_wait``), jobs that ended
early (the node may go now), nodes someone else drained, downed or reserved.

:class:`RefreshSchedule` says when to read again: after each release (a node is back,
so the window is about to admit the next ones) and, while nodes wait, whenever the
last read is ``interval`` seconds old; one read at a time (releases during a read ask
for one more read after it). ``interval`` 0 reads after releases only. A read that
failed is retried at the next occasion; the window keeps its last view meanwhile.
Admission waits for the read that follows a release (:meth:`RefreshSchedule.holds`),
at most :data:`HOLD_LIMIT` seconds: the next node is chosen on the fresh view, not
drained for a job that started since the last read.

:func:`observations` turns what ``gpuops.cluster.slurm_fleet`` returned into the
nodes of :meth:`window.Window.observe`, named by inventory host, with the
reasons of nodes out of service or reserved (``fleet_nodes``' rules, as the plan).
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import fleet_nodes

# The longest admission waits for the read that follows a release (a Slurm controller that is slow to answer
# must not stop the window): then it admits on the last view.
HOLD_LIMIT = 60


class RefreshSchedule:
    """When the window reads the fleet again (see the module's docstring); records every read."""

    def __init__(self, interval, now):
        if isinstance(interval, str) and interval.strip().isdigit():
            interval = int(interval)
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0:
            raise ValueError(
                "refresh_interval is %r: set the most seconds between two reads of the fleet while nodes wait, "
                "such as 60 (0 reads only after each release)" % (interval,)
            )
        self.interval = interval
        self.last_at = now  # the plan's read
        self.running_since = None
        self.release_pending = False
        self.released_at = None
        self.reads: list[dict] = []
        self._why = None

    def released(self, now):
        """A node gave its slot back: read again before admitting on the old view."""
        self.release_pending = True
        if self.released_at is None:
            self.released_at = now

    def holds(self, now) -> bool:
        """Whether admission waits: a release not read since (pending, or its read running), for HOLD_LIMIT at most."""
        if self.released_at is None:
            return False
        if now - self.released_at >= HOLD_LIMIT:
            return False
        return self.release_pending or (self.running_since is not None and self._why == "release")

    def due(self, now) -> str | None:
        """``release`` or ``interval`` when a read should start now, None otherwise (or while one runs)."""
        if self.running_since is not None:
            return None
        if self.release_pending:
            return "release"
        if self.interval and now - self.last_at >= self.interval:
            return "interval"
        return None

    def started(self, now, why: str):
        self.running_since = now
        self.release_pending = False
        self._why = why

    def finished(self, now, ok: bool, changes=None, error=None) -> dict:
        """The read is over: its record (``at``, ``took``, ``why``, ``ok``, ``changes`` or ``error``)."""
        started = self.running_since if self.running_since is not None else now
        self.running_since = None
        self.last_at = now
        if not self.release_pending:
            self.released_at = None
        read = {"at": started, "took": round(now - started, 3), "why": self._why, "ok": bool(ok)}
        if ok:
            read["changes"] = changes or {}
        else:
            read["error"] = error
        self.reads.append(read)
        return read

    @property
    def fresh(self) -> bool:
        """No release since the last read and none running: the view holds every release."""
        return self.running_since is None and not self.release_pending


def observations(slurm_nodes, scheduler_names: dict) -> tuple[list[dict], dict]:
    """``(nodes, reasons)`` for :meth:`window.Window.observe` from ``slurm_fleet``'s ``nodes``.

    ``scheduler_names`` maps each inventory host to its Slurm node name. A node in a
    reservation is ``reserved``; a drain of ours leaves the node ``idle`` or ``busy``
    (``slurm_fleet``'s rule). Hosts Slurm did not return are left out.
    """
    by_name = {}
    for entry in slurm_nodes or []:
        if not isinstance(entry, dict) or "name" not in entry:
            raise ValueError("a Slurm node must be a mapping with a name, got %r" % (entry,))
        by_name[entry["name"]] = entry
    unavailable = fleet_nodes.unavailable_reasons(slurm_nodes)
    reserved = fleet_nodes.reserved_reasons(slurm_nodes)
    nodes = []
    reasons = {}
    for host, scheduler_name in scheduler_names.items():
        entry = by_name.get(scheduler_name or host)
        if entry is None:
            continue
        state = entry.get("state")
        if state in ("idle", "busy") and fleet_nodes.in_reservation(entry):
            state = "reserved"
        nodes.append({"name": host, "state": state, "job_end": entry.get("job_end") if state == "busy" else None})
        why = unavailable.get(entry["name"]) or reserved.get(entry["name"])
        if why:
            reasons[host] = why
    return nodes, reasons
