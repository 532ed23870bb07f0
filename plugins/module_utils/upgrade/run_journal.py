# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run's journal: the window's decisions as they happen, one JSON line each, on the controller.

The window lives in the controller's memory; a controller that dies mid-run would take it
along, and a re-run would see its own leftover drains as idle or busy nodes and take more
nodes out than ``max_unavailable`` allows. So the strategy appends every decision to a
journal the moment it takes it (:class:`JournalWriter`: append, flush, fsync, mode 0644 when it
creates the file, never through a symbolic link; operators ``tail -f`` it or ship it), and the report
is built from it.

Entries (``event``, ``at`` in epoch seconds, then its fields):

* ``start``: ``run_id``, ``target`` (what the run upgrades, to find it again), ``resumed_from``
  (the journal this run continues, or None), ``resumed`` (its nodes taken first) and ``report`` (the plan's part of
  the report: the plan, the window's nodes and settings, the run's settings, the survey's records of the nodes
  outside the window; ``upgrade_record.report_payload``).
* ``admit``: ``node``, ``canary``, ``resume``: the node leaves service now.
* ``release``: ``node``, ``ok``, ``deferred``, ``halt``: back in service (``ok``), or failed; ``record`` the node's
  record its release built, ``slot`` its slot's (without the reads of the fleet, which are ``refresh`` entries).
* ``not_admitted``: ``node``, ``record``, ``slot``: a node the window did not admit, its record as its slot task
  built it.
* ``defer``: ``node``, ``why``: passed over for its job, in service, not upgraded.
* ``pass``: ``node``, ``why``: not admitted (halted, blocked, left the plan).
* ``halt``: ``node``, ``why``: nothing new starts.
* ``refresh``: ``ok``, ``took``, ``why``, ``changes`` or ``error``: a read of the fleet.
* ``drain_ahead``: ``node``, ``ok``, ``job_end`` or ``why``: drained in Slurm ahead of its slot (``ok``), or not.
* ``undrain``: ``node``, ``ok``: a node drained ahead given back to its scheduler, not upgraded.
* ``end``: the play ended (a run killed mid-way has none).

:func:`replay` reads a journal back: the nodes in flight when it stopped (admitted, never
released) and the failed ones are what a re-run must take first, the nodes drained ahead and
neither admitted nor given back start drained ahead; :func:`find_previous` picks the
journal of the same target a re-run continues: its own (a fixed journal path or a reused run id:
the re-run appends to the journal it continues, and :func:`replay` reads the runs of one target
that follow each other in it as one operation), else the newest beside it.
"""

from __future__ import annotations

import errno
import json
import os
import stat

SUFFIX = ".journal.jsonl"
EVENTS = (
    "start",
    "admit",
    "release",
    "not_admitted",
    "defer",
    "pass",
    "halt",
    "refresh",
    "drain_ahead",
    "undrain",
    "end",
)
MODE = 0o644


def entry(event: str, at, **fields) -> dict:
    """One journal entry."""
    if event not in EVENTS:
        raise ValueError("journal event %r is not one of %s" % (event, ", ".join(EVENTS)))
    return dict({"event": event, "at": round(float(at), 3)}, **fields)


def encode(item: dict) -> str:
    """One line of the journal (sorted keys, no spaces, a newline)."""
    return json.dumps(item, sort_keys=True, separators=(",", ":"), default=str) + "\n"


def unwritable(path: str) -> str | None:
    """Why the run could not write the file at ``path`` on the controller (its journal, its report), None when it can:
    a symbolic link there (never written through), or a file or folder this user cannot write. Checked by the plan,
    before anything moves; the writer checks again when it opens the file."""
    if os.path.islink(path):
        return "%s is a symbolic link, which the run never writes through" % path
    if os.path.exists(path):
        if not os.path.isfile(path) or not os.access(path, os.W_OK):
            return "%s is not a file this user can write" % path
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
        return "its folder %s does not exist or this user cannot write in it" % folder
    return None


class JournalWriter:
    """Appends entries to the journal at ``path``, each written through to the disk before the next decision.

    The journal is opened without following a symbolic link (``O_NOFOLLOW``: a link planted at the path is
    refused, never written through) and must be a regular file. A journal this writer creates gets mode 0644
    whatever the umask; one that exists keeps the mode its owner gave it. A journal whose last line was torn
    (the controller died while writing it) is truncated to its last complete line before the first append
    (``torn``: the bytes dropped), so the next entry starts on a line of its own instead of being glued to
    the fragment; :func:`parse` leaves such a fragment out as well, so nothing complete is lost either way.
    """

    def __init__(self, path: str):
        self.path = path
        self.torn = 0
        flags = os.O_RDWR | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, MODE)
            created = True
        except FileExistsError:
            self._fd = os.open(path, flags)
            created = False
        try:
            if not stat.S_ISREG(os.fstat(self._fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
            if created:
                os.fchmod(self._fd, MODE)
            else:
                self.torn = repair(self._fd)
        except OSError:
            os.close(self._fd)
            self._fd = None
            raise

    def append(self, item: dict):
        os.write(self._fd, encode(item).encode("utf-8"))
        os.fsync(self._fd)

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def repair(fd: int, chunk: int = 65536) -> int:
    """Truncates the file open at ``fd`` (read and write) after its last newline; the number of bytes dropped.

    Reads backwards from the end, ``chunk`` bytes at a time, so a long journal is not read whole.
    """
    size = os.fstat(fd).st_size
    end = size
    while end > 0:
        start = max(0, end - chunk)
        block = os.pread(fd, end - start, start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        end = start
    else:
        keep = 0
    if keep < size:
        os.ftruncate(fd, keep)
        os.fsync(fd)
    return size - keep


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

    Returns ``{run_id, target, started_at, ended_at, resumed_from, deadline, in_flight, failed, done,
    deferred, passed, halted, refreshes, drained_ahead, ahead_spans, timeline, events}``: ``in_flight`` the nodes
    admitted and never released (mid-upgrade when the journal stops), in admission order; ``failed`` those
    released not ok (left out of service); ``done`` those back upgraded; ``drained_ahead`` those drained
    ahead of their slot and neither admitted nor given back when it stops; ``ahead_spans``
    ``(node, drained_at, admitted_or_given_back_at or None)``, each time a node was drained ahead; ``timeline``
    ``(node, admitted_at, released_at or None)``; ``events`` the count of each kind.

    The report's part (:func:`upgrade_record.journal_report`): ``report`` the last run's plan (its ``start``);
    ``records`` each node's record as its last release built it, across the operation; of the last run alone,
    ``not_admitted`` the records of the nodes its window did not admit, ``slots`` each node's slot as released or
    passed, and ``lost`` the nodes it admitted that never came back with a record (``{node: why or None}``).
    """
    state = {
        "run_id": None,
        "target": None,
        "started_at": None,
        "ended_at": None,
        "resumed_from": None,
        "resumed": [],
        "deadline": None,
        "halted": None,
        "deferred": {},
        "passed": {},
        "refreshes": [],
        "events": {},
        # each node's record as its last release built it (node_record.build), in the order released
        "records": {},
        "report": None,
        "not_admitted": {},
        "slots": {},
    }
    admitted_now: dict = {}  # the last run's admissions: node -> why it came back without a record (None: it did not)
    admitted: dict = {}
    released: dict = {}
    ahead: dict = {}
    spans = []
    ahead_spans = []
    for item in operation(entries):
        kind = item.get("event")
        state["events"][kind] = state["events"].get(kind, 0) + 1
        at = item.get("at")
        node = item.get("node")
        if kind == "start":
            # a run continuing this journal (the same path): its own start, halt and end
            state.update(
                {
                    "run_id": item.get("run_id"),
                    "target": item.get("target"),
                    "started_at": at,
                    "ended_at": None,
                    "halted": None,
                    "resumed_from": item.get("resumed_from"),
                    "resumed": list(item.get("resumed") or []),
                    # the deadline of a run lost mid-way (no ``end``), which the run continuing it keeps; after a run
                    # that ended, the new run's own
                    "deadline": item.get("deadline")
                    if state["deadline"] is None or state["ended_at"] is not None
                    else state["deadline"],
                    "report": item.get("report"),
                    "not_admitted": {},
                    "slots": {},
                }
            )
            admitted_now = {}
        elif kind == "admit":
            if ahead.pop(node, None) is not None:
                _close(ahead_spans, node, at)
            admitted_now[node] = None
            if node in admitted and node not in released:
                continue  # left in flight by the run this one continues: out of service since, one span
            admitted[node] = at
            released.pop(node, None)
            state["deferred"].pop(node, None)
            spans.append([node, at, None])
        elif kind == "release":
            released[node] = {"at": at, "ok": bool(item.get("ok")), "deferred": bool(item.get("deferred"))}
            if isinstance(item.get("record"), dict):
                state["records"].pop(node, None)
                state["records"][node] = item["record"]
                admitted_now.pop(node, None)
            elif node in admitted_now:
                admitted_now[node] = item.get("why")
            if isinstance(item.get("slot"), dict):
                state["slots"][node] = item["slot"]
            _close(spans, node, at)
            if item.get("deferred"):
                state["deferred"][node] = item.get("why") or "its jobs outlasted max_job_wait"
        elif kind == "not_admitted":
            if isinstance(item.get("record"), dict):
                state["not_admitted"][node] = item["record"]
            if isinstance(item.get("slot"), dict):
                state["slots"][node] = item["slot"]
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
    state["lost"] = admitted_now
    state["in_flight"] = sorted((name for name in admitted if name not in released), key=admitted.__getitem__)
    state["failed"] = sorted(name for name, release in released.items() if not release["ok"])
    state["done"] = sorted(name for name, release in released.items() if release["ok"] and not release["deferred"])
    state["drained_ahead"] = sorted(ahead, key=ahead.__getitem__)
    state["ahead_spans"] = [tuple(span) for span in ahead_spans]
    state["timeline"] = [tuple(span) for span in spans]
    return state


def operation(entries) -> list:
    """The entries of the last operation in a journal: from the first ``start`` of the runs of the newest ``start``'s
    target that follow each other (a re-run writing to the same path continues its journal); an earlier run of
    another target in the same file is left out."""
    entries = list(entries)
    starts = [index for index, item in enumerate(entries) if item.get("event") == "start"]
    if not starts:
        return entries
    target = entries[starts[-1]].get("target")
    begin = starts[-1]
    for index in reversed(starts):
        if entries[index].get("target") != target:
            break
        begin = index
    return entries[begin:]


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


def last_start(path: str):
    """The last ``start`` entry of the journal at ``path`` (the run that wrote to it last), None when it has none or
    cannot be read."""
    try:
        entries = read(path)
    except (OSError, ValueError):
        return None
    return next((item for item in reversed(entries) if item.get("event") == "start"), None)


def find_previous(path: str, target: str):
    """The journal a re-run writing to ``path`` continues for ``target``, or None.

    Its own journal first: a journal at ``path`` whose last run was of ``target`` (a fixed journal path, or a
    reused run id) is continued, the run appending to it. Otherwise the newest journal beside ``path`` (same
    directory, same suffix) of a run of ``target``.
    """
    own = last_start(path) if os.path.lexists(path) else None
    if isinstance(own, dict) and own.get("target") == target:
        return os.path.abspath(path)
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
