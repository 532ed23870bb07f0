# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the sliding window of a rolling upgrade is given: the fleet's nodes and the window's settings, validated.

* A node (:class:`Node`) is ``{name, domains, partitions, gpus, state, job_end, canary, done, resume,
  maintenance, drained_ahead}``; :func:`nodes_of` validates a list of them (names unique).
  ``domains`` maps a kind of failure domain to the node's member
  (``{"rack": "r01", "nvlink": "nvl72-5"}``), ``state`` is ``idle``, ``busy``
  (``job_end``: when its running job ends, epoch seconds, Slurm's EndTime, or
  None when not known), ``drained_by_others``, ``down`` or ``reserved`` (in a
  Slurm reservation that is not ours: in service for its users, left alone,
  never admitted, not counted out of service). ``done`` nodes (already on the
  target) are skipped. ``resume`` nodes were left out of service by an
  earlier run of ours that did not finish them (a controller crash: drained
  by us, or admitted in its journal with no release): they count as out of
  service from the start and are admitted first, whatever the rules (they are
  out already; holding them back would keep them drained and idle).
  ``maintenance`` nodes are in the Slurm reservation the operator set aside for
  the upgrade: out of users' service already, they are taken like ``resume`` ones.
* The settings (:class:`Settings`, keys :data:`SETTINGS`, defaults :data:`DEFAULTS`, the one source of the
  window's defaults) are validated for a fleet size: ``max_unavailable`` is a count or ``"N%"`` of the whole
  fleet (:func:`size_of`, rounded down, at least one node, as Ansible's ``serial`` rounds).
* :func:`ready` and :func:`job_wait_reason` say whether a busy node may take a slot now, and why not.

The rules the window applies to them are in :mod:`window` (the state machine), the audit of a
run's timeline in :mod:`window_audit`, the plan-only preview in :mod:`window_preview`.
"""

from __future__ import annotations

import re
from time import gmtime, strftime

STATES = ("idle", "busy", "drained_by_others", "down", "reserved")
ADMISSIBLE_STATES = ("idle", "busy")
# Out of service whoever took them out: counted by every rule, never admitted.
OUT_OF_SERVICE_STATES = ("drained_by_others", "down")
# The longest a node's upgrade waits for its running job, by default: one hour. A node is drained only
# when Slurm's EndTime of its job is at most this far off, so a slot is never held longer for a job
# than about one node's upgrade takes (install, reboot, gate); a week-long training job keeps its
# node, in service, until its last hour, and the rest of the fleet goes on meanwhile.
DEFAULT_MAX_JOB_WAIT = 3600
# The reason text (after our prefix and run id) of a drain ahead of the slot: a re-run after a crash knows the
# node was drained ahead, not admitted.
DRAIN_AHEAD_REASON = "drained ahead of its upgrade slot"
SETTINGS = (
    "max_unavailable",
    "per_domain",
    "partition_floor",
    "spread_by",
    "granularity",
    "halt_on_failure",
    "barrier",
    "max_job_wait",
    "drain_ahead",
    "deadline",
)
DEFAULTS = {
    "max_unavailable": "10%",
    "per_domain": None,
    "partition_floor": None,
    "spread_by": "rack",
    "granularity": 600,
    "halt_on_failure": True,
    "barrier": False,
    "max_job_wait": DEFAULT_MAX_JOB_WAIT,
    # Off by default: draining ahead shows nodes the run will not upgrade for hours as drained to users and to
    # Slurm's backfill planning; an operator turns it on knowingly.
    "drain_ahead": 0,
    # When the run stops waiting for running jobs (epoch seconds; 0: it waits for none). None: the latest EndTime of
    # the jobs running when the window is built (:func:`auto_deadline`), so every one of them gets its turn and the
    # run always ends.
    "deadline": None,
}
# Floating point slack for the partition floor (GPU counts are integers).
FLOOR_EPSILON = 1e-9

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_COUNT = re.compile(r"^\s*(\d+)\s*$")


def size_of(entry, fleet_size: int, what: str = "max_unavailable") -> int:
    """Number of nodes an entry (count or ``"N%"``) means for a fleet of ``fleet_size`` nodes."""
    if isinstance(entry, bool):
        raise ValueError(
            "%s size %r is a boolean: give a count such as 2 or a percentage such as '25%%'" % (what, entry)
        )
    if isinstance(entry, int):
        count = entry
    elif isinstance(entry, str) and _COUNT.match(entry):
        count = int(entry)
    elif isinstance(entry, str) and _PERCENT.match(entry):
        percent = float(_PERCENT.match(entry).group(1))
        if percent <= 0 or percent > 100:
            raise ValueError("%s size %r must be a percentage above 0%% and at most 100%%" % (what, entry))
        return max(1, int(percent * fleet_size // 100))
    else:
        raise ValueError("%s size %r is neither a count (2) nor a percentage ('25%%')" % (what, entry))
    if count < 1:
        raise ValueError("%s size %r must be at least 1" % (what, entry))
    return count


class Node:
    """One node of the fleet, validated."""

    __slots__ = (
        "canary",
        "domains",
        "done",
        "drained_ahead",
        "gpus",
        "job_end",
        "maintenance",
        "name",
        "partitions",
        "resume",
        "state",
    )

    def __init__(
        self,
        name,
        domains=None,
        partitions=(),
        gpus=8,
        state="idle",
        job_end=None,
        canary=False,
        done=False,
        resume=False,
        drained_ahead=False,
        maintenance=False,
    ):
        if not isinstance(name, str) or not name:
            raise ValueError("node name %r is not a host name" % (name,))
        if domains is None:
            domains = {}
        if not isinstance(domains, dict) or not all(
            isinstance(kind, str) and isinstance(member, str) and kind and member for kind, member in domains.items()
        ):
            raise ValueError(
                "node %s: domains must map a domain kind to the node's member, such as {'rack': 'r01'}, got %r"
                % (name, domains)
            )
        if partitions is None:
            partitions = ()
        if isinstance(partitions, str) or not all(isinstance(part, str) and part for part in partitions):
            raise ValueError("node %s: partitions must be a list of Slurm partition names, got %r" % (name, partitions))
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
            raise ValueError("node %s: gpus must be a count of GPUs (0 or more), got %r" % (name, gpus))
        if state not in STATES:
            raise ValueError("node %s: state %r is not one of %s" % (name, state, ", ".join(STATES)))
        if job_end is not None and (isinstance(job_end, bool) or not isinstance(job_end, (int, float))):
            raise ValueError("node %s: job_end must be epoch seconds or None (unknown), got %r" % (name, job_end))
        self.name = name
        self.domains = dict(domains)
        self.partitions = tuple(dict.fromkeys(partitions))
        self.gpus = gpus
        self.state = state
        self.job_end = job_end if state == "busy" else None
        self.canary = bool(canary)
        self.done = bool(done)
        # In the maintenance reservation the operator named for the upgrade: out of users' service already.
        self.maintenance = bool(maintenance) and not self.done and state in ADMISSIBLE_STATES
        # Out of service already, left by an earlier run of ours or set aside for the upgrade (maintenance): counted
        # from the start, admitted first.
        self.resume = (bool(resume) or self.maintenance) and not self.done and state in ADMISSIBLE_STATES
        # Drained ahead of its slot by an earlier run of ours (Slurm's reason says so): waiting, not out of service.
        self.drained_ahead = bool(drained_ahead) and not self.done and not self.resume and state in ADMISSIBLE_STATES

    def __repr__(self):
        return "Node(%r, state=%r)" % (self.name, self.state)


def node_of(value) -> Node:
    """A :class:`Node` from a Node or a dict of its fields."""
    if isinstance(value, Node):
        return value
    if not isinstance(value, dict):
        raise ValueError(
            "a node must be a dict such as {'name': 'gpu001', 'domains': {'rack': 'r01'}}, got %r" % (value,)
        )
    unknown = sorted(set(value) - set(Node.__slots__))
    if unknown:
        raise ValueError(
            "node %s: unknown field(s) %s; known: %s"
            % (value.get("name"), ", ".join(unknown), ", ".join(sorted(Node.__slots__)))
        )
    return Node(**value)


def nodes_of(values) -> list[Node]:
    """Validated nodes, names unique."""
    if values is None or isinstance(values, (str, dict)):
        raise ValueError("nodes must be a list of nodes, got %r" % (values,))
    nodes = [node_of(value) for value in values]
    seen = set()
    for node in nodes:
        if node.name in seen:
            raise ValueError("node %s is listed twice" % node.name)
        seen.add(node.name)
    return nodes


class Settings:
    """The window's settings, validated for a fleet of ``fleet_size`` nodes."""

    __slots__ = SETTINGS

    def __init__(self, raw=None, fleet_size=1):
        raw = {} if raw is None else raw
        if isinstance(raw, Settings):
            raw = {key: getattr(raw, key) for key in SETTINGS}
        if not isinstance(raw, dict):
            raise ValueError("window settings must be a dict with keys among %s, got %r" % (", ".join(SETTINGS), raw))
        unknown = sorted(set(raw) - set(SETTINGS))
        if unknown:
            raise ValueError(
                "unknown window setting(s) %s; set only %s" % (", ".join(map(str, unknown)), ", ".join(SETTINGS))
            )
        values = dict(DEFAULTS)
        values.update({key: value for key, value in raw.items() if value is not None})
        self.max_unavailable = size_of(values["max_unavailable"], max(fleet_size, 1), "max_unavailable")

        per_domain = values["per_domain"] or {}
        if not isinstance(per_domain, dict):
            raise ValueError(
                "per_domain must map a domain kind to the most nodes out of service in one of its members, "
                "such as {'rack': 1}, got %r" % (per_domain,)
            )
        self.per_domain = {}
        for kind, given in per_domain.items():
            limit = given
            if not isinstance(kind, str) or not kind:
                raise ValueError("per_domain has the key %r: set a domain kind such as 'rack'" % (kind,))
            if isinstance(limit, str) and limit.strip().isdigit():
                limit = int(limit)
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(
                    "per_domain.%s is %r: set a positive integer, the most nodes of one %s out of service at once "
                    "(such as 1)" % (kind, limit, kind)
                )
            self.per_domain[kind] = limit

        floor = values["partition_floor"]
        if floor is not None:
            if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 < floor <= 1:
                raise ValueError(
                    "partition_floor is %r: set a fraction above 0 and at most 1, the least share of each "
                    "partition's GPUs that stays schedulable (such as 0.85), or leave it unset for no floor" % (floor,)
                )
            floor = float(floor)
        self.partition_floor = floor

        spread_by = values["spread_by"]
        if not isinstance(spread_by, str) or not spread_by:
            raise ValueError(
                "spread_by is %r: set the domain kind to spread admissions over, such as 'rack'" % (spread_by,)
            )
        self.spread_by = spread_by

        granularity = values["granularity"]
        if isinstance(granularity, bool) or not isinstance(granularity, (int, float)) or granularity <= 0:
            raise ValueError(
                "granularity is %r: set the seconds within which job ends count as equal, such as 600" % (granularity,)
            )
        self.granularity = granularity

        halt = values["halt_on_failure"]
        if not isinstance(halt, bool):
            raise ValueError("halt_on_failure is %r: set true or false" % (halt,))
        self.halt_on_failure = halt

        barrier = values["barrier"]
        if not isinstance(barrier, bool):
            raise ValueError(
                "barrier is %r: set true (waves: nothing starts until every node in flight is back) or false"
                % (barrier,)
            )
        self.barrier = barrier

        wait = values["max_job_wait"]
        if isinstance(wait, str) and wait.strip().isdigit():
            wait = int(wait)
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or wait < 0:
            raise ValueError(
                "max_job_wait is %r: set the seconds a node's upgrade may wait for its running job (Slurm's "
                "EndTime), such as 3600; 0 takes only nodes without jobs" % (wait,)
            )
        self.max_job_wait = wait

        ahead = values["drain_ahead"]
        if isinstance(ahead, str) and ahead.strip().isdigit():
            ahead = int(ahead)
        if isinstance(ahead, bool) or not isinstance(ahead, int) or ahead < 0:
            raise ValueError(
                "drain_ahead is %r: set how many busy nodes next in line may be drained ahead of their slot at "
                "once, such as 4 (0: none)" % (ahead,)
            )
        self.drain_ahead = ahead

        deadline = values["deadline"]
        if isinstance(deadline, str) and re.match(r"^\s*\d+(\.\d+)?\s*$", deadline):
            deadline = float(deadline)
        if deadline is not None and (
            isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or deadline < 0
        ):
            raise ValueError(
                "deadline is %r: set when the run stops waiting for running jobs, in seconds since the epoch "
                "(0: it waits for none), or leave it unset for the latest end of the jobs running now" % (deadline,)
            )
        self.deadline = deadline

    def as_dict(self) -> dict:
        return {key: getattr(self, key) for key in SETTINGS}


def ready(node: Node, now, max_job_wait) -> bool:
    """Whether ``node`` may take a slot at ``now``: idle, or its job ends within ``max_job_wait`` seconds."""
    if node.state == "idle":
        return True
    return node.state == "busy" and node.job_end is not None and node.job_end - now <= max_job_wait


def _when(epoch) -> str:
    return strftime("%Y-%m-%dT%H:%M:%SZ", gmtime(epoch))


def job_wait_reason(node: Node, now, max_job_wait) -> str:
    """Why a busy node does not take a slot now, in the operator's words."""
    if node.job_end is None:
        return "its job has no known end (no time limit in Slurm); it keeps running, in service"
    return "its job ends at %s (EndTime, in %ds), beyond max_job_wait %ds; it keeps running, in service" % (
        _when(node.job_end),
        int(node.job_end - now),
        int(max_job_wait),
    )


def auto_deadline(nodes, now) -> float:
    """The default deadline: the latest EndTime of the busy nodes' jobs (Slurm's EndTime is the job's start plus its
    time limit, which the partition's MaxTime bounds), ``now`` when none runs."""
    ends = [node.job_end for node in nodes if node.state == "busy" and node.job_end is not None]
    return max([now, *ends])


def deadline_reason(node: Node, now, max_job_wait, deadline) -> str | None:
    """Why a node waiting for its job is deferred now (in service, not upgraded), or None while its job comes within
    ``max_job_wait`` of its end before the run's ``deadline`` (it waits, in service)."""
    if node.job_end is not None and node.job_end - max_job_wait <= deadline and now < deadline:
        return None
    if node.job_end is None or now >= deadline:
        return job_wait_reason(node, now, max_job_wait)
    return "its job ends at %s (EndTime), after the run's deadline %s; it keeps running, in service" % (
        _when(node.job_end),
        _when(deadline),
    )
