# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the node-side health command keeps between runs, in one JSON file (``/var/lib/gpuops-health/state.json``).

``{version, host, cursor, samples, xids, baseline, open}``:

- ``cursor``: ``{time}``, when the previous run started reading the kernel log (epoch seconds); the next run
  reads the kernel log from there ("since the last run"). Only moved when the kernel log was read.
- ``samples``: error counters of earlier runs (:func:`error_rates.take_sample`, pruned by ``keep_history``).
- ``xids``: fatal Xid occurrences of the last day (:func:`error_rates.judge_xids`).
- ``baseline``: the node's last good figures (:mod:`node_baseline`).
- ``open``: the fatal kernel-log findings not acted on yet (:mod:`open_findings`): kept until a drain by the
  command is confirmed in Slurm or the node reboots.

Writes are atomic (a temporary file in the same directory, fsync, then ``os.replace``); concurrent runs (the
Slurm health check, a prolog, an operator) take ``lock`` in turn. A stored state is checked field by field: one
that cannot be read, or whose fields have the wrong shape, is set aside (renamed ``state.json.unreadable-<time>``,
kept for inspection) and the run goes on from a fresh state; ``set_aside`` says why, for the command to report
the lost history as a failed check. Nothing here raises on a full disk or a
read-only directory: ``lock`` and ``save`` return why they could not, and the command notes it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import numbers
import os
import tempfile
import time

VERSION = 1
STATE_FILE = "state.json"
LOCK_FILE = "lock"
SET_ASIDE = ".unreadable-"


def empty(host=None):
    return {"version": VERSION, "host": host, "cursor": None, "samples": [], "xids": [], "baseline": {}, "open": []}


def _number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _text_or_none(value):
    return value is None or isinstance(value, str)


def _list_of(value, valid):
    return isinstance(value, list) and all(isinstance(entry, dict) and valid(entry) for entry in value)


def _sample(entry):
    return (
        _number(entry.get("time"))
        and _text_or_none(entry.get("boot_id"))
        and isinstance(entry.get("gpus", {}), dict)
        and all(isinstance(gpu, dict) for gpu in entry.get("gpus", {}).values())
        and isinstance(entry.get("ib", {}), dict)
        and all(isinstance(port, dict) for port in entry.get("ib", {}).values())
    )


def _xid(entry):
    return isinstance(entry.get("code"), int) and _number(entry.get("time")) and _text_or_none(entry.get("bus"))


def _figure(entry):
    return entry is None or (isinstance(entry, dict) and _number(entry.get("value")) and _number(entry.get("time")))


def _baseline(value):
    """``{nccl_busbw_gbps: figure, dcgm: {key: figure}, failing: {key: epoch}}`` (:mod:`node_baseline`)."""
    dcgm = value.get("dcgm") or {}
    failing = value.get("failing") or {}
    return (
        _figure(value.get("nccl_busbw_gbps"))
        and isinstance(dcgm, dict)
        and all(entry is not None and _figure(entry) for entry in dcgm.values())
        and isinstance(failing, dict)
        and all(_number(entry) for entry in failing.values())
    )


def _finding(entry):
    return (
        entry.get("kind") in ("xid", "sxid", "fallen_off_bus")
        and (entry.get("code") is None or isinstance(entry.get("code"), int))
        and all(_text_or_none(entry.get(key)) for key in ("pci_bus_id", "device", "time", "boot_id"))
        and all(isinstance(entry.get(key), str) for key in ("text", "line"))
    )


FIELDS = {
    "cursor": lambda value: value is None or (isinstance(value, dict) and _number(value.get("time"))),
    "samples": lambda value: _list_of(value, _sample),
    "xids": lambda value: _list_of(value, _xid),
    "baseline": lambda value: isinstance(value, dict) and _baseline(value),
    "open": lambda value: _list_of(value, _finding),
}


def problems(data):
    """What is wrong with a loaded state, field by field (empty when it can be used)."""
    if not isinstance(data, dict):
        return ["not a JSON object"]
    if data.get("version") != VERSION:
        return ["version %r, not %d" % (data.get("version"), VERSION)]
    found = [] if _text_or_none(data.get("host")) else ["host is not a string"]
    found += ["%s has the wrong shape" % key for key, valid in FIELDS.items() if key in data and not valid(data[key])]
    return found


class HealthState:
    """The state directory of one node."""

    def __init__(self, directory):
        self.directory = directory
        self.path = os.path.join(directory, STATE_FILE)
        self._lock = None
        self.lock_error = None
        self.set_aside = None  # why the stored state this run loaded was set aside, when it was

    def load(self, host=None, set_aside=True):
        """``(state, note)``: the stored state (``empty`` when there is none or it is unusable) and why, or None.

        An unusable file is set aside (renamed, kept for inspection) when ``set_aside`` (the caller holds the
        lock); a run without the lock reads it and leaves it where it is.
        """
        try:
            with open(self.path, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return empty(host), "no stored state in %s" % self.directory
        except (OSError, ValueError) as error:
            return empty(host), self._unusable(["unreadable (%s)" % error], set_aside)
        found = problems(data)
        if found:
            return empty(host), self._unusable(found, set_aside)
        if data.get("host") and host and data["host"] != host:
            return empty(host), self._unusable(["it belongs to %s, not %s" % (data["host"], host)], set_aside)
        state = empty(host)
        state.update({key: data[key] for key in state if key in data and key != "host"})
        return state, None

    def _unusable(self, found, set_aside):
        what = "stored state %s: %s" % (self.path, "; ".join(found))
        if not set_aside:
            return "%s: judged from a fresh state" % what
        aside = "%s%s%d" % (self.path, SET_ASIDE, int(time.time()))
        try:
            os.replace(self.path, aside)
        except OSError as error:
            self.set_aside = "stored state unusable (%s), not set aside: %s" % ("; ".join(found), error)
            return "%s: judged from a fresh state (not set aside: %s)" % (what, error)
        self.set_aside = "stored state unusable (%s), set aside as %s" % ("; ".join(found), aside)
        return "%s: set aside as %s, judged from a fresh state" % (what, aside)

    def save(self, state):
        """Write ``state`` atomically (mode 0700 directory created when missing); None, or why it was not saved."""
        temporary = None
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=".state.", dir=self.directory)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(state, out, sort_keys=True, separators=(",", ":"))
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
            temporary = None
            _fsync_directory(self.directory)
        except OSError as error:
            return "state not saved in %s: %s" % (self.directory, error)
        finally:
            if temporary is not None and os.path.exists(temporary):
                os.unlink(temporary)
        return None

    def lock(self, wait):
        """Take the directory's lock, waiting at most ``wait`` seconds; True when taken, else ``lock_error`` says."""
        self.lock_error = None
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            self._lock = open(os.path.join(self.directory, LOCK_FILE), "a", encoding="utf-8")  # noqa: SIM115
        except OSError as error:
            self.lock_error = "cannot open the lock in %s: %s" % (self.directory, error)
            return False
        deadline = time.monotonic() + max(wait, 0)
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                    self._lock.close()
                    self._lock = None
                    self.lock_error = "another run holds %s (waited %s s)" % (self.directory, wait)
                    if error.errno not in (errno.EAGAIN, errno.EACCES):
                        self.lock_error = "cannot lock %s: %s" % (self.directory, error)
                    return False
                time.sleep(0.05)

    def unlock(self):
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


def _fsync_directory(directory):
    """Make a rename in ``directory`` durable (a crash after it keeps the new file, not an empty one)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path, text, mode=0o644):
    """Write ``text`` to ``path`` through a temporary file in the same directory (node_exporter never reads half)."""
    directory = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
