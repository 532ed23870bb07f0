# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's slot in the rolling upgrade's window: what the strategy and the upgrade_slot task say to each other.

The strategy ``gpuops.cluster.upgrade_window`` decides, in the controller's main process, whether a host
waiting at its ``gpuops.cluster.upgrade_slot`` task (``state: acquired``) may leave service, and hands the
host its record in the host variable :data:`SLOT_FACT` before the task runs. The task (an action plugin)
checks the record and returns it (:func:`answer`). A release task (``state: released``) returns
``release: {ok, halt, deferred}``, which the strategy reads from the task's result (:func:`released`) to
give the slot back. Both sides take the names, the states and the rules from here; nothing here does I/O.

The window itself is the play's: the strategy builds it once, when the first host reaches its slot, from
the play variable :data:`WINDOW_VAR` (:func:`window_of`), never from a host's task arguments.

A record is ``{state, admitted, reason, ...}`` (the strategy's ``_record`` writes the rest): ``state`` is
``acquired`` from the decision until the release, then ``released``.
"""

from __future__ import annotations

import time

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import node_record

# The host variable the strategy hands each host's slot record in.
SLOT_FACT = "gpuops_upgrade_slot"
STRATEGY = "gpuops.cluster.upgrade_window"
ACTIONS = frozenset({"gpuops.cluster.upgrade_slot", "upgrade_slot"})
STATES = ("acquired", "released")
# The play variable the strategy builds the window from, and what it holds.
WINDOW_VAR = "gpuops_upgrade_window"
WINDOW_KEYS = ("nodes", "settings", "refresh", "journal", "drain_ahead", "report")
# The slot task's arguments: its state, what a release says, or the node whose record says it (``node``).
RELEASE_ARGS = ("ok", "halt", "deferred")
ARGS = ("state", "node", *RELEASE_ARGS)


def window_of(value) -> dict:
    """The play's window (the templated value of :data:`WINDOW_VAR`): every key of :data:`WINDOW_KEYS`, None when
    unset. Raises ValueError naming what to set."""
    if not isinstance(value, dict):
        raise ValueError(
            "the play variable %s is %r: set it on the play with strategy %s to {%s} (the rolling upgrade's plan "
            "play computes it)" % (WINDOW_VAR, value, STRATEGY, ", ".join(WINDOW_KEYS))
        )
    unknown = sorted(map(str, set(value) - set(WINDOW_KEYS)))
    if unknown:
        raise ValueError(
            "%s has the key(s) %s; it takes only %s" % (WINDOW_VAR, ", ".join(unknown), ", ".join(WINDOW_KEYS))
        )
    return {key: value.get(key) for key in WINDOW_KEYS}


def state_of(action, args) -> str | None:
    """``acquired`` or ``released`` for a task of ``action`` with ``args`` that is a slot task, None for any other.

    A state that is not one of :data:`STATES` counts as ``acquired`` (the task then fails, saying so).
    """
    if action not in ACTIONS:
        return None
    state = (args or {}).get("state", "acquired")
    return state if state in STATES else "acquired"


def answer(state, record, args, now=None) -> dict:
    """The slot task's result: the strategy's ``record`` for this host, checked against the task's ``state``.

    ``acquired``: ``{changed, slot, admitted}``. ``released``: ``{changed, slot, release: {ok, halt, deferred}}``
    for the strategy. With ``node`` (the node's start and, at the release, its registered steps:
    ``node_record.build``) the result also holds the node's record (``node``) built at ``now``: at the acquisition
    of a node not admitted its final one, at the release its outcome, which then says ``ok``, ``halt`` and
    ``deferred`` (``node_record.slot_release``) instead of the task's arguments. Anything the contract does not
    allow: ``{failed, msg}`` saying what to do.
    """
    args = args or {}
    now = time.time() if now is None else now
    if state not in STATES:
        return {"failed": True, "msg": "state is %r: set acquired or released" % (state,)}
    if not isinstance(record, dict) or record.get("state") not in STATES:
        return {
            "failed": True,
            "msg": "no slot decision for this host: gpuops.cluster.upgrade_slot runs only in a play with "
            "'strategy: %s', which decides each host's slot before this task runs" % STRATEGY,
        }
    node = args.get("node")
    if node is not None and any(args.get(name) is not None for name in RELEASE_ARGS):
        return {
            "failed": True,
            "msg": "give node (the node's record says ok, halt and deferred) or ok/halt/deferred, not both",
        }
    result = {"changed": False, "slot": dict(record)}
    if state == "acquired":
        if record.get("state") != "acquired":
            return {"failed": True, "msg": "this host's slot was released already; acquire it once per run"}
        result["admitted"] = bool(record.get("admitted"))
        if node is not None and not result["admitted"]:  # the record of an admitted node is built at its release
            try:
                result["node"] = node_record.build(dict(node, slot={"admitted": False, "slot": record}), now)
            except ValueError as exc:
                return {"failed": True, "msg": "the node's record: %s" % exc}
        return result
    if record.get("state") != "acquired" or not record.get("admitted"):
        return {"failed": True, "msg": "this host holds no slot to release (%s)" % record.get("reason", "none")}
    if node is not None:
        try:
            result["node"] = node_record.build(node, now)
            args = node_record.slot_release(result["node"])
        except ValueError as exc:
            return {"failed": True, "msg": "the node's record: %s" % exc}
    halt = args.get("halt")
    ok = boolean(args.get("ok", False))
    deferred = boolean(args.get("deferred", False))
    if deferred and not ok:
        return {
            "failed": True,
            "msg": "deferred is true but ok is false: a deferred node is back in service (ok: true); "
            "a node left out of service is not deferred",
        }
    result["release"] = {"ok": ok, "halt": None if halt is None else boolean(halt), "deferred": deferred}
    return result


def released(data) -> dict | None:
    """``{ok, halt, deferred}`` from a release task's result (``data``), None when it gives nothing back (skipped, or
    no release). ``halt`` None: the window's own rule; ``deferred`` only for a node back in service."""
    if not isinstance(data, dict) or data.get("skipped"):
        return None
    release = data.get("release")
    if not isinstance(release, dict):
        return None
    ok = bool(release.get("ok"))
    halt = release.get("halt")
    return {"ok": ok, "halt": None if halt is None else bool(halt), "deferred": bool(release.get("deferred")) and ok}
