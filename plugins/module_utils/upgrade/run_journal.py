# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run's journal: the window's decisions as they happen, one JSON line each, on the controller.

The window lives in the controller's memory; a controller that dies mid-run would take it
along, and a re-run would see its own leftover drains as idle or busy nodes and take more
nodes out than ``max_unavailable`` allows. So the strategy appends every decision to a
journal the moment it takes it (:class:`JournalWriter`: append, flush, fsync, mode 0644;
operators ``tail -f`` it or ship it), and the report is built from it.

Entries (``event``, ``at`` in epoch seconds, then its fields):

* ``start``: ``run_id``, ``target`` (what the run upgrades, to find it again), ``resumed_from``
  (the journal this run continues, or None) and ``resumed`` (its nodes taken first).
* ``admit``: ``node``, ``canary``, ``resume``: the node leaves service now.
* ``release``: ``node``, ``ok``, ``deferred``, ``halt``: back in service (``ok``), or failed.
* ``defer``: ``node``, ``why``: passed over for its job, in service, not upgraded.
* ``pass``: ``node``, ``why``: not admitted (halted, blocked, left the plan).
* ``halt``: ``node``, ``why``: nothing new starts.
* ``refresh``: ``ok``, ``took``, ``why``, ``changes`` or ``error``: a read of the fleet.
* ``drain_ahead``: ``node``, ``ok``, ``job_end`` or ``why``: drained in Slurm ahead of its slot (``ok``), or not.
* ``undrain``: ``node``, ``ok``: a node drained ahead given back to its scheduler, not upgraded.
* ``end``: the play ended (a run killed mid-way has none).

:func:`replay` reads a journal back: the nodes in flight when it stopped (admitted, never
released) and the failed ones are what a re-run must take first, the nodes drained ahead and
neither admitted nor given back start drained ahead; :func:`newest` picks the
journal of the same target a re-run continues.
"""

from __future__ import annotations

import json
import os

SUFFIX = ".journal.jsonl"
EVENTS = ("start", "admit", "release", "defer", "pass", "halt", "refresh", "drain_ahead", "undrain", "end")
MODE = 0o644


def entry(event: str, at, **fields) -> dict:
    """One journal entry."""
    if event not in EVENTS:
        raise ValueError("journal event %r is not one of %s" % (event, ", ".join(EVENTS)))
    return dict({"event": event, "at": round(float(at), 3)}, **fields)


def encode(item: dict) -> str:
    """One line of the journal (sorted keys, no spaces, a newline)."""
    return json.dumps(item, sort_keys=True, separators=(",", ":"), default=str) + "\n"


class JournalWriter:
    """Appends entries to the journal at ``path``, each written through to the disk before the next decision."""

    def __init__(self, path: str):
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, MODE)
        os.fchmod(self._fd, MODE)

    def append(self, item: dict):
        os.write(self._fd, encode(item).encode("utf-8"))
        os.fsync(self._fd)

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def parse(text: str, name: str = "the journal") -> list[dict]:
    """The entries of a journal's text. A torn last line (the controller died while writing it) is left out."""
    lines = text.split("\n")
    entries = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            if number == len(lines) or all(not rest.strip() for rest in lines[number:]):
                break  # the last line, cut short
            raise ValueError("%s, line %d, is not a JSON entry: %s" % (name, number, exc)) from exc
        if not isinstance(item, dict) or item.get("event") not in EVENTS:
            raise ValueError("%s, line %d, is not a journal entry: %r" % (name, number, line[:200]))
        entries.append(item)
    return entries


def replay(entries) -> dict:
    """Where a run stood at the end of its journal.

    Returns ``{run_id, target, started_at, ended_at, resumed_from, in_flight, failed, done,
    deferred, passed, halted, refreshes, drained_ahead, ahead_spans, timeline, events}``: ``in_flight`` the nodes
    admitted and never released (mid-upgrade when the journal stops), in admission order; ``failed`` those
    released not ok (left out of service); ``done`` those back upgraded; ``drained_ahead`` those drained
    ahead of their slot and neither admitted nor given back when it stops; ``ahead_spans``
    ``(node, drained_at, admitted_or_given_back_at or None)``, each time a node was drained ahead; ``timeline``
    ``(node, admitted_at, released_at or None)``; ``events`` the count of each kind.
    """
    state = {
        "run_id": None,
        "target": None,
        "started_at": None,
        "ended_at": None,
        "resumed_from": None,
        "resumed": [],
        "halted": None,
        "deferred": {},
        "passed": {},
        "refreshes": [],
        "events": {},
    }
    admitted: dict = {}
    released: dict = {}
    ahead: dict = {}
    spans = []
    ahead_spans = []
    for item in entries:
        kind = item.get("event")
        state["events"][kind] = state["events"].get(kind, 0) + 1
        at = item.get("at")
        node = item.get("node")
        if kind == "start":
            state.update(
                {
                    "run_id": item.get("run_id"),
                    "target": item.get("target"),
                    "started_at": at,
                    "resumed_from": item.get("resumed_from"),
                    "resumed": list(item.get("resumed") or []),
                }
            )
        elif kind == "admit":
            if ahead.pop(node, None) is not None:
                _close(ahead_spans, node, at)
            admitted[node] = at
            released.pop(node, None)
            spans.append([node, at, None])
        elif kind == "release":
            released[node] = {"at": at, "ok": bool(item.get("ok")), "deferred": bool(item.get("deferred"))}
            _close(spans, node, at)
            if item.get("deferred"):
                state["deferred"][node] = item.get("why") or "its jobs outlasted max_job_wait"
        elif kind == "defer":
            state["deferred"][node] = item.get("why")
        elif kind == "pass":
            state["passed"][node] = item.get("why")
        elif kind == "halt":
            state["halted"] = {"at": at, "node": node, "why": item.get("why")}
        elif kind == "refresh":
            state["refreshes"].append({key: value for key, value in item.items() if key != "event"})
        elif kind == "drain_ahead" and item.get("ok"):
            ahead[node] = at
            ahead_spans.append([node, at, None])
        elif kind == "undrain":
            if ahead.pop(node, None) is not None:
                _close(ahead_spans, node, at)
        elif kind == "end":
            state["ended_at"] = at
    state["in_flight"] = sorted((name for name in admitted if name not in released), key=admitted.__getitem__)
    state["failed"] = sorted(name for name, release in released.items() if not release["ok"])
    state["done"] = sorted(name for name, release in released.items() if release["ok"] and not release["deferred"])
    state["drained_ahead"] = sorted(ahead, key=ahead.__getitem__)
    state["ahead_spans"] = [tuple(span) for span in ahead_spans]
    state["timeline"] = [tuple(span) for span in spans]
    return state


def _close(spans: list, node: str, at):
    """Ends the open span of ``node`` (the newest) at ``at``."""
    for span in reversed(spans):
        if span[0] == node and span[2] is None:
            span[2] = at
            return


def to_resume(replayed: dict) -> list[str]:
    """The nodes a re-run takes first: in flight when the journal stopped, or failed and left out of service."""
    return list(dict.fromkeys(replayed["in_flight"] + replayed["failed"]))


def newest(candidates, target: str, exclude: str | None = None):
    """The journal a re-run continues: the newest of ``candidates`` that a run of ``target`` started.

    ``candidates`` are ``(path, first_entry, mtime)``; ``first_entry`` None when unreadable.
    """
    matching = [
        (mtime, path)
        for path, first, mtime in candidates
        if path != exclude
        and isinstance(first, dict)
        and first.get("event") == "start"
        and first.get("target") == target
    ]
    return max(matching)[1] if matching else None


def first_entry(path: str):
    """The first entry of the journal at ``path``, None when it has none or cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            line = handle.readline()
        item = json.loads(line)
    except (OSError, ValueError):
        return None
    return item if isinstance(item, dict) else None


def find_previous(path: str, target: str):
    """The newest journal beside ``path`` (same directory, same suffix) of a run of ``target``, or None."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    candidates = []
    for name in names:
        if not name.endswith(SUFFIX):
            continue
        full = os.path.join(directory, name)
        try:
            mtime = os.stat(full).st_mtime
        except OSError:
            continue
        candidates.append((full, first_entry(full), mtime))
    return newest(candidates, target, exclude=os.path.abspath(path))


def read(path: str) -> list[dict]:
    """The entries of the journal at ``path``."""
    with open(path, encoding="utf-8") as handle:
        return parse(handle.read(), path)
