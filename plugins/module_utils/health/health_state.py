# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the node-side health command keeps between runs, in one JSON file (``/var/lib/gpuops-health/state.json``).

``{version, host, cursor, samples, xids, baseline}``:

- ``cursor``: ``{time}``, when the previous run started reading the kernel log (epoch seconds); the next run
  reads the kernel log from there ("since the last run"). Only moved when the kernel log was read.
- ``samples``: error counters of earlier runs (:func:`error_rates.take_sample`, pruned by ``keep_history``).
- ``xids``: fatal Xid occurrences of the last day (:func:`error_rates.judge_xids`).
- ``baseline``: the node's last good figures (:mod:`node_baseline`).

Writes are atomic (a temporary file in the same directory, then ``os.replace``); concurrent runs (the Slurm
health check, a prolog, an operator) take ``lock`` in turn. A file that cannot be read or parsed is treated as
absent, and the reason is returned so the command can say so: the run then sets a new baseline.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import tempfile
import time

VERSION = 1
STATE_FILE = "state.json"
LOCK_FILE = "lock"


def empty(host=None):
    return {"version": VERSION, "host": host, "cursor": None, "samples": [], "xids": [], "baseline": {}}


class HealthState:
    """The state directory of one node."""

    def __init__(self, directory):
        self.directory = directory
        self.path = os.path.join(directory, STATE_FILE)
        self._lock = None

    def load(self, host=None):
        """``(state, note)``: the stored state (``empty`` when there is none) and why it was not read, or None."""
        try:
            with open(self.path, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return empty(host), "no stored state in %s" % self.directory
        except (OSError, ValueError) as error:
            return empty(host), "stored state %s unreadable (%s): starting again" % (self.path, error)
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return empty(host), "stored state %s has another format: starting again" % self.path
        state = empty(host)
        state.update({key: data[key] for key in state if key in data and key != "host"})
        if data.get("host") and host and data["host"] != host:
            return empty(host), "stored state %s belongs to %s, not %s: starting again" % (
                self.path,
                data["host"],
                host,
            )
        return state, None

    def save(self, state):
        """Write ``state`` atomically (mode 0600 directory created when missing)."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".state.", dir=self.directory)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(state, out, sort_keys=True, separators=(",", ":"))
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise

    def lock(self, wait):
        """Take the directory's lock, waiting at most ``wait`` seconds; True when taken."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self._lock = open(os.path.join(self.directory, LOCK_FILE), "a", encoding="utf-8")  # noqa: SIM115
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                    self._lock.close()
                    self._lock = None
                    return False
                time.sleep(0.05)

    def unlock(self):
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


def write_text_atomic(path, text, mode=0o644):
    """Write ``text`` to ``path`` through a temporary file in the same directory (node_exporter never reads half)."""
    directory = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
