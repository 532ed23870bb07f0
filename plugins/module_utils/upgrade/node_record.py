# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's record in a rolling upgrade, and the state machine that moves it along.

The window play of ``playbooks/rolling_upgrade.yml`` keeps one record per node
(``gpuops_upgrade_node``); the audit report (``upgrade_record.report``) reads it::

    {host, status, reason,
     before: {driver_version, loaded_version}, after: {driver_version, loaded_version} or None,
     target, gate_level,
     gates: [{phase, level, healthy, failed}],
     drain: {adapter, action, ours, pre_existing, timed_out, reason, waited, blocking_pods, timeout},
     timings: {started, drain_started, drained, upgraded, gated, finished},   # epoch seconds (floats)
     halt}

``step(record, event, now, **data)`` returns the record after ``event``; it never changes
its input (every dict and list of the answer is new) and does no I/O. A transition the
table below does not allow, or data that is missing or malformed, raises ValueError
naming the event, the record's status and what is allowed.

=================  ============================================  =================================
event              allowed from                                  status after
=================  ============================================  =================================
start              no record (None or {})                        in_progress, blocked, deferred,
                                                                 unavailable, reserved, not_reached
drain_started      in_progress                                   in_progress
drained            in_progress                                   in_progress, deferred
upgraded           in_progress                                   in_progress
gated              in_progress                                   in_progress (the playbook fails
                                                                 the node on an unhealthy gate)
upgraded_ok        in_progress, with a drain and a healthy gate  upgraded
failed             in_progress, deferred, upgraded               failed
rolled_back        failed                                        rolled_back
rollback_failed    failed                                        rollback_failed
finished           any status                                    unchanged
=================  ============================================  =================================

A node the window did not admit because its job does not end within ``max_job_wait``
starts ``deferred`` (its slot reason starts with ``deferred``); one drained or downed by someone
else during the run starts ``unavailable``, one put into a reservation not ours ``reserved``
(left alone, as the plan leaves such nodes). A drained node whose jobs
outlast the drain's wait (``max_job_wait``) is ``deferred`` too: the playbook returns it to
service (never left drained, idle, not upgraded), and ``halt`` follows ``on_drain_timeout``
(``continue`` by default). Its reason names the job's end Slurm gave (``job_end``) when known.

Why ``failed`` is allowed after ``deferred`` and ``upgraded``: the playbook's rescue is
entered from any task of the block, and tasks still run after the record took those
statuses (the return to service after a deferral, the slot release after either). When
one of them fails, the failure supersedes the status, as the playbook's ``combine`` always
did. It is refused from ``failed``, ``rolled_back`` and ``rollback_failed`` (the rescue does
not re-enter itself; a second failure would erase the first and its rollback), and from
``blocked`` and ``not_reached`` (the node was never admitted and ends before the block).

``is_final`` tells whether a record's outcome is settled: every status but ``in_progress``
and ``failed`` (a failed node may still be rolled back). ``slot_release`` says what the
node's ``gpuops.cluster.upgrade_slot`` release reports to the window.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import upgrade_record

STATUSES = (*upgrade_record.NODE_STATUSES, "in_progress")
ADAPTERS = ("slurm", "kubernetes", "none")
ON_DRAIN_TIMEOUT = ("halt", "continue")
DEFAULT_ON_DRAIN_TIMEOUT = "continue"
# The drain entry keeps what upgrade_record.drain_record gives for every adapter (its keys
# and ``reason``), ``action`` (what gpuops.cluster.upgrade_drain did: the report shows it) and
# ``timeout`` (the drain_timeout of the "drained" event, when given). The rest of the task's
# result (changed, failed, msg, invocation, state, node, ...) is dropped.
DRAIN_KEYS = ("adapter", "action", "ours", "pre_existing", "timed_out", "reason", "waited", "blocking_pods")
DEFERRED_REASON = "jobs still running after the wait (max_job_wait); returned to service, not upgraded"
UPGRADED_REASON = "on the target stack, gated"
OTHER_OWNER_KEPT = "; drain of its other owner kept"
FINAL_STATUSES = frozenset(STATUSES) - {"in_progress", "failed"}

# event: (statuses it is allowed from (None: no record yet), data it requires, data it accepts besides)
# What a node the window did not admit is, by the first word of the window's reason (else not_reached).
NOT_ADMITTED_STATUSES = ("blocked", "deferred", "unavailable", "reserved")
EVENTS = {
    "start": (
        (None,),
        ("host", "admitted", "adapter"),
        ("slot_reason", "decision_reason", "before_driver", "before_loaded", "target", "gate_level"),
    ),
    "drain_started": (("in_progress",), (), ()),
    "drained": (("in_progress",), ("drain",), ("on_drain_timeout", "drain_timeout", "job_end")),
    "upgraded": (("in_progress",), (), ()),
    "gated": (("in_progress",), ("result",), ("level", "phase")),
    "upgraded_ok": (("in_progress",), ("after_driver", "after_loaded"), ("adapter",)),
    "failed": (("in_progress", "deferred", "upgraded"), (), ("task", "msg")),
    "rolled_back": (("failed",), ("target_driver", "after_driver", "after_loaded", "gate", "level"), ()),
    "rollback_failed": (("failed",), (), ("task", "msg")),
    "finished": (STATUSES, (), ()),
}

_TRUE = ("true", "yes", "on", "1", "y", "t")
_FALSE = ("false", "no", "off", "0", "n", "f")


# Values as Jinja hands them over (str/dict subclasses, numbers as strings) ------------------


def _plain(value):
    """A copy of ``value`` whose every mapping is a new dict and every list or tuple a new list."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _epoch(value, what: str = "now") -> float:
    if isinstance(value, bool) or value is None:
        raise ValueError("%s must be epoch seconds (a number), got %r" % (what, value))
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError("%s must be epoch seconds (a number), got %r" % (what, value)) from None
    if not math.isfinite(number):
        raise ValueError("%s must be epoch seconds (a number), got %r" % (what, value))
    return number


def _flag(value, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("%s must be true or false, got %r" % (what, value))


def _seconds(value, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError("%s must be a whole number of seconds >= 0, got %r" % (what, value))
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError("%s must be a whole number of seconds >= 0, got %r" % (what, value)) from None
    if not math.isfinite(number) or number < 0 or number != int(number):
        raise ValueError("%s must be a whole number of seconds >= 0, got %r" % (what, value))
    return int(number)


def _text(value):
    return None if value is None else str(value)


def _mapping(value, what: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise ValueError("%s must be a mapping, got %r" % (what, value))
    return value


def _choice(value, choices, what: str) -> str:
    if value not in choices:
        raise ValueError("%s is %r: expected one of %s" % (what, value, ", ".join(choices)))
    return str(value)


# The state machine --------------------------------------------------------------------------


def status_of(record) -> str | None:
    """The record's status, None when there is no record yet (None or an empty mapping)."""
    if record is None or (isinstance(record, Mapping) and not record):
        return None
    if not isinstance(record, Mapping):
        raise ValueError("the node's record must be a mapping (or None before 'start'), got %r" % (record,))
    status = record.get("status")
    if status not in STATUSES:
        raise ValueError("the node's record has status %r: expected one of %s" % (status, ", ".join(STATUSES)))
    return str(status)


def _allowed_text(allowed) -> str:
    return ", ".join("no record" if status is None else status for status in allowed)


def _check(record, event: str, data: dict) -> str | None:
    if not isinstance(event, str) or event not in EVENTS:
        raise ValueError("unknown event %r: expected one of %s" % (event, ", ".join(EVENTS)))
    allowed, required, optional = EVENTS[event]
    status = status_of(record)
    if status not in allowed:
        if status is None:
            raise ValueError(
                "event %r needs the node's record: it has none yet ('start' it first); %r is allowed from %s"
                % (event, event, _allowed_text(allowed))
            )
        raise ValueError(
            "event %r is not allowed from status %r (host %s): %r is allowed from %s"
            % (event, status, record.get("host"), event, _allowed_text(allowed))
        )
    unknown = sorted(set(data) - set(required) - set(optional))
    if unknown:
        raise ValueError(
            "event %r does not take %s: it takes %s"
            % (event, ", ".join(unknown), ", ".join((*required, *optional)) or "no data")
        )
    missing = [key for key in required if key not in data]
    if missing:
        raise ValueError("event %r needs %s" % (event, ", ".join(missing)))
    return status


def step(record, event: str, now, **data) -> dict:
    """The node's record after ``event`` at ``now`` (epoch seconds); ``data`` as the event needs it.

    See the module's docstring for the events; raises ValueError on a transition it does not
    allow or on missing or malformed data. ``record`` is never changed.
    """
    _check(record, event, data)
    now = _epoch(now)
    if event == "start":
        return _start(now, **data)
    new = _plain(record)
    if new.get("timings") is None:
        new["timings"] = {}
    if not isinstance(new["timings"], dict):
        raise ValueError("the node's record has timings %r: expected a mapping" % (new["timings"],))
    return _EVENT_STEPS[event](new, now, **data)


def _start(
    now,
    host,
    admitted,
    adapter,
    slot_reason=None,
    decision_reason=None,
    before_driver=None,
    before_loaded=None,
    target=None,
    gate_level=None,
) -> dict:
    if not host or not isinstance(host, str):
        raise ValueError("event 'start' needs host, the node's inventory name, got %r" % (host,))
    admitted = _flag(admitted, "admitted")
    adapter = _choice(adapter, ADAPTERS, "adapter")
    before = {"driver_version": _text(before_driver), "loaded_version": _text(before_loaded)}
    record = {
        "host": str(host),
        "status": "in_progress",
        "reason": _text(decision_reason),
        "before": before,
        "after": None,
        "target": _text(target),
        "gate_level": _text(gate_level),
        "gates": [],
        "drain": {"adapter": adapter},
        "timings": {"started": now},
        "halt": False,
    }
    if admitted:
        return record
    if not slot_reason or not isinstance(slot_reason, str):
        raise ValueError(
            "event 'start' of a node the window did not admit needs slot_reason (why not), got %r" % (slot_reason,)
        )
    # the window's reason says why: a rule, its job, someone else took it out of service or into a reservation
    # during the run (it is left alone), else the run halted first
    status = next(
        (status for status in NOT_ADMITTED_STATUSES if slot_reason.startswith(status)),
        "not_reached",
    )
    record.update(
        status=status,
        reason=str(slot_reason),
        after=dict(before),
    )
    record["timings"]["finished"] = now
    return record


def _drain_started(record, now) -> dict:
    record["timings"]["drain_started"] = now
    return record


def _drain_entry(record, drain, drain_timeout) -> dict:
    drain = _mapping(drain, "drain (the result of gpuops.cluster.upgrade_drain)")
    if drain.get("failed"):
        raise ValueError("the drain failed: %s" % (drain.get("msg") or "no message"))
    if "timed_out" not in drain:
        raise ValueError(
            "drain must be the result of gpuops.cluster.upgrade_drain (with timed_out), got keys %s"
            % (", ".join(sorted(map(str, drain))) or "none")
        )
    entry = dict(record.get("drain") or {})
    adapter = entry.get("adapter")
    if "adapter" in drain and adapter is not None and drain["adapter"] != adapter:
        raise ValueError("the drain was done by adapter %r, the node's record says %r" % (drain["adapter"], adapter))
    entry.update({key: _plain(drain[key]) for key in DRAIN_KEYS if key in drain})
    entry["timed_out"] = _flag(drain["timed_out"], "drain.timed_out")
    pods = entry.get("blocking_pods")
    if pods is not None and not isinstance(pods, list):
        raise ValueError("drain.blocking_pods must be a list, got %r" % (pods,))
    if drain_timeout is not None:
        entry["timeout"] = _seconds(drain_timeout, "drain_timeout")
    return entry


def deferred_reason(waited=None, job_end=None, pods=()) -> str:
    """Why a drained node was returned to service, not upgraded: the wait, the job's end, the pods."""
    reason = DEFERRED_REASON
    if waited is not None:
        reason = "jobs still running after %ds (max_job_wait); returned to service, not upgraded" % waited
    if job_end is not None:
        reason += "; its job ends at %s (Slurm's EndTime)" % time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(_epoch(job_end, "job_end"))
        )
    if pods:
        reason += ": pods " + ", ".join(map(str, pods))
    return reason


def _drained(record, now, drain, on_drain_timeout=DEFAULT_ON_DRAIN_TIMEOUT, drain_timeout=None, job_end=None) -> dict:
    on_drain_timeout = _choice(on_drain_timeout, ON_DRAIN_TIMEOUT, "on_drain_timeout")
    record["drain"] = _drain_entry(record, drain, drain_timeout)
    record["timings"]["drained"] = now
    if record["drain"]["timed_out"]:
        record.update(
            status="deferred",
            halt=on_drain_timeout == "halt",
            reason=deferred_reason(record["drain"].get("timeout"), job_end, record["drain"].get("blocking_pods") or []),
        )
        record["timings"]["finished"] = now
    return record


def _upgraded(record, now) -> dict:
    record["timings"]["upgraded"] = now
    return record


def gate_entry(result, level, phase: str = "gate") -> dict:
    """A ``gates`` entry from the registered result of gpuops.cluster.gpu_health.

    ``failed`` is the result's ``summary.failed`` (an empty list on a healthy gate), else
    its ``msg`` or ``no verdict`` (a gate that did not run, or failed before its checks).
    """
    result = _mapping(result, "the gate's result (the registered gpuops.cluster.gpu_health)")
    summary = result.get("summary")
    failed = summary.get("failed") if isinstance(summary, Mapping) else None
    if failed is None:
        failed = [result.get("msg") or "no verdict"]
    elif not isinstance(failed, (list, tuple)):
        failed = [failed]
    return {
        "phase": str(phase),
        "level": _text(level),
        "healthy": _flag(result.get("healthy") or False, "the gate's healthy"),
        "failed": _plain(list(failed)),
    }


def _gates(record) -> list:
    gates = record.get("gates")
    if gates is None:
        return []
    if not isinstance(gates, list):
        raise ValueError("the node's record has gates %r: expected a list" % (gates,))
    return gates


def _gated(record, now, result, level=None, phase="gate") -> dict:
    if not phase or not isinstance(phase, str):
        raise ValueError("phase must be a name such as 'gate', got %r" % (phase,))
    record["gates"] = [*_gates(record), gate_entry(result, record.get("gate_level") if level is None else level, phase)]
    record["timings"]["gated"] = now
    return record


def _upgraded_ok(record, now, after_driver, after_loaded, adapter=None) -> dict:
    drain = record.get("drain") or {}
    if adapter is None:
        adapter = drain.get("adapter")
    adapter = _choice(adapter, ADAPTERS, "adapter")
    if drain.get("adapter") not in (None, adapter):
        raise ValueError("adapter is %r, the node's record says %r" % (adapter, drain.get("adapter")))
    if "timed_out" not in drain:
        raise ValueError(
            "event 'upgraded_ok' needs the drain recorded first (event 'drained'), host %s" % record["host"]
        )
    gates = _gates(record)
    if not gates:
        raise ValueError("event 'upgraded_ok' needs a healthy gate (event 'gated'), host %s has none" % record["host"])
    last = gates[-1] if isinstance(gates[-1], Mapping) else {}
    if not _flag(last.get("healthy") or False, "the last gate's healthy"):
        raise ValueError(
            "event 'upgraded_ok' needs a healthy last gate, host %s's (%s, %s) failed: %s"
            % (
                record["host"],
                last.get("phase"),
                last.get("level"),
                "; ".join(map(str, last.get("failed") or ["no verdict"])),
            )
        )
    kept = not (drain.get("ours") or adapter == "none")
    record.update(
        status="upgraded",
        reason=UPGRADED_REASON + (OTHER_OWNER_KEPT if kept else ""),
        after={"driver_version": _text(after_driver), "loaded_version": _text(after_loaded)},
    )
    record["timings"]["finished"] = now
    return record


def _failure(task, msg) -> str:
    return "%s: %s" % (task or "a step", msg or "failed")


def _failed(record, _now, task=None, msg=None) -> dict:
    # the end is noted by 'finished', after the rescue's rollback
    record.update(status="failed", halt=True, reason=_failure(task, msg))
    return record


def _rolled_back(record, _now, target_driver, after_driver, after_loaded, gate, level) -> dict:
    if not target_driver:
        raise ValueError("event 'rolled_back' needs target_driver, the driver rolled back to, got %r" % target_driver)
    gate = _mapping(gate, "gate (the registered gpuops.cluster.gpu_health of the rollback gate)")
    if not _flag(gate.get("healthy") or False, "the rollback gate's healthy"):
        raise ValueError(
            "event 'rolled_back' needs a healthy rollback gate, host %s's failed: %s"
            % (record["host"], "; ".join(map(str, gate_entry(gate, level)["failed"])))
        )
    summary = gate.get("summary")
    failed = summary.get("failed") if isinstance(summary, Mapping) else None
    record.update(
        status="rolled_back",
        reason="%s; rolled back to %s, gated" % (record.get("reason") or "failed", target_driver),
        after={"driver_version": _text(after_driver), "loaded_version": _text(after_loaded)},
        gates=[
            *_gates(record),
            {"phase": "rollback_gate", "level": _text(level), "healthy": True, "failed": _plain(list(failed or []))},
        ],
    )
    return record


def _rollback_failed(record, _now, task=None, msg=None) -> dict:
    record.update(
        status="rollback_failed",
        reason="%s; rollback: %s" % (record.get("reason") or "failed", _failure(task, msg)),
    )
    return record


def _finished(record, now) -> dict:
    record["timings"]["finished"] = now
    return record


_EVENT_STEPS = {
    "drain_started": _drain_started,
    "drained": _drained,
    "upgraded": _upgraded,
    "gated": _gated,
    "upgraded_ok": _upgraded_ok,
    "failed": _failed,
    "rolled_back": _rolled_back,
    "rollback_failed": _rollback_failed,
    "finished": _finished,
}


def is_final(record) -> bool:
    """Whether the record's outcome is settled: not in progress, and not failed (a rollback may follow)."""
    return status_of(record) in FINAL_STATUSES


def slot_release(record) -> dict:
    """``{ok, halt}`` (and ``deferred: true`` for a deferred node) for the node's gpuops.cluster.upgrade_slot release.

    upgraded: back in service (ok, no halt). rolled_back: back in service, but the target
    failed there (ok, halt). deferred: its jobs outlasted the wait, back in service, not
    upgraded (ok, deferred, halting per on_drain_timeout: the record's ``halt``). failed,
    rollback_failed: left drained, halt.
    """
    status = status_of(record)
    if status == "upgraded":
        return {"ok": True, "halt": False}
    if status == "rolled_back":
        return {"ok": True, "halt": True}
    if status == "deferred":
        halt = record.get("halt")
        return {"ok": True, "halt": False if halt is None else _flag(halt, "the record's halt"), "deferred": True}
    if status in ("failed", "rollback_failed"):
        return {"ok": False, "halt": True}
    raise ValueError(
        "no slot release for a node %s: its record must be upgraded, rolled_back, deferred, failed or "
        "rollback_failed" % ("without a record" if status is None else "with status %r" % status)
    )


# The record built once, from the node's registered results ---------------------------------

# What build() takes: the node as the survey found it (known before its slot) and the registered results of its steps.
START_KEYS = ("host", "adapter", "decision_reason", "before", "target")
STEP_KEYS = ("slot", "gate_level", "on_drain_timeout", "drained", "soak", "gate", "after", "failure", "rollback")
ROLLBACK_KEYS = ("target_driver", "level", "gate", "failure")


def _ran(result):
    """A registered result that ran (a mapping, not skipped), else None."""
    if not isinstance(result, Mapping) or not result or result.get("skipped"):
        return None
    return result


def _at(result, key, default):
    value = (result or {}).get(key)
    return default if value is None else _epoch(value, key)


def _versions(drift) -> dict:
    drift = drift if isinstance(drift, Mapping) else {}
    return {"driver": drift.get("installed_driver_version"), "loaded": drift.get("loaded_driver_version")}


def _failure_data(failure) -> dict:
    failure = failure if isinstance(failure, Mapping) else {}
    return {"task": _text(failure.get("task")), "msg": _text(failure.get("msg"))}


def build(node, now) -> dict:
    """The node's record from what its steps registered, at ``now`` (epoch seconds: when its slot is given back).

    ``node`` holds :data:`START_KEYS` (``before`` and ``after`` are ``gpu_stack.drift`` reads) and, once the window
    decided its slot, :data:`STEP_KEYS`: ``slot`` the registered ``gpuops.cluster.upgrade_slot`` acquisition, then
    the results of the drain, the canary's soak, the gate, the failure the rescue noted (``{task, msg}``) and the
    rollback (:data:`ROLLBACK_KEYS`: its target, gate level, registered gate, and the failure that ended it). A step
    that did not run is None or a skipped result. The events of :func:`step` are replayed in order, timed by the
    results: admitted (the slot's ``admitted_at``), the drain's ``started_at`` and ``ended_at`` (the controller's
    clock), the gate's ``started_at`` less the soak's ``elapsed`` (upgraded) and its ``ended_at`` (gated: the node's
    clock), and ``now`` for the end. A node whose steps have not all run yet (no gate, or an unhealthy one and no
    failure noted yet) is ``in_progress``: the role reads it on the way, and a release of it fails
    (:func:`slot_release`). Raises ValueError as :func:`step` does.
    """
    node = _mapping(node, "node (the node's start and its registered steps)")
    now = _epoch(now)
    unknown = sorted(map(str, set(node) - set(START_KEYS) - set(STEP_KEYS)))
    if unknown:
        raise ValueError(
            "node has the key(s) %s; it takes %s" % (", ".join(unknown), ", ".join(START_KEYS + STEP_KEYS))
        )
    slot_result = _mapping(node.get("slot") or {}, "slot (the registered gpuops.cluster.upgrade_slot acquisition)")
    slot = slot_result.get("slot") if isinstance(slot_result.get("slot"), Mapping) else {}
    admitted = _flag(slot_result.get("admitted", slot.get("admitted", False)), "slot.admitted")
    before = _versions(node.get("before"))
    record = step(
        None,
        "start",
        _at(slot, "admitted_at", now) if admitted else now,
        host=node.get("host"),
        admitted=admitted,
        adapter=node.get("adapter"),
        slot_reason=slot.get("reason"),
        decision_reason=node.get("decision_reason"),
        before_driver=before["driver"],
        before_loaded=before["loaded"],
        target=node.get("target"),
        gate_level=node.get("gate_level"),
    )
    if not admitted:
        return record
    drained, gate = _ran(node.get("drained")), _ran(node.get("gate"))
    failure = node.get("failure")
    if drained is not None and not drained.get("failed"):
        record = step(record, "drain_started", _at(drained, "started_at", now))
        record = step(
            record,
            "drained",
            _at(drained, "ended_at", now),
            drain=drained,
            on_drain_timeout=node.get("on_drain_timeout") or DEFAULT_ON_DRAIN_TIMEOUT,
            drain_timeout=slot.get("max_job_wait"),
            job_end=slot.get("job_end"),
        )
    if gate is not None and record["status"] == "in_progress":
        soaked = float((_ran(node.get("soak")) or {}).get("elapsed") or 0)
        record = step(record, "upgraded", _at(gate, "started_at", now) - soaked)
        record = step(record, "gated", _at(gate, "ended_at", now), result=gate, level=node.get("gate_level"))
    if failure is None:
        if record["status"] != "in_progress":
            return record  # deferred: finished when its wait ended
        if gate is None or not record["gates"][-1]["healthy"]:
            return record  # still on its way (or its gate failed: the role fails the node next)
        after = _versions(node.get("after"))
        record = step(record, "upgraded_ok", now, after_driver=after["driver"], after_loaded=after["loaded"])
        return step(record, "finished", now)
    record = step(record, "failed", now, **_failure_data(failure))
    rollback = node.get("rollback")
    if isinstance(rollback, Mapping):
        rollback_gate = _ran(rollback.get("gate"))
        if rollback_gate is not None and not rollback_gate.get("failed") and rollback_gate.get("healthy"):
            after = _versions(node.get("after"))
            record = step(
                record,
                "rolled_back",
                now,
                target_driver=rollback.get("target_driver"),
                after_driver=after["driver"],
                after_loaded=after["loaded"],
                gate=rollback_gate,
                level=rollback.get("level"),
            )
        else:
            record = step(record, "rollback_failed", now, **_failure_data(rollback.get("failure")))
    return step(record, "finished", now)
