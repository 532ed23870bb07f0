# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The state of a rolling upgrade's run on the controller, as the window strategy keeps it, apart from Ansible.

The strategy ``gpuops.cluster.upgrade_window`` (plugins/strategy/upgrade_window.py) runs the host loop, queues the
window's own tasks and reads their results; everything it decides with lives here, in one :class:`RunState`: the
one :class:`window.Window` (opened once from the play's window, :data:`window_slot.WINDOW_VAR`, by
:func:`window_open.window`), who arrived at
and holds a slot, every host's slot record (:data:`window_slot.SLOT_FACT`), the reads of the fleet
(:class:`fleet_refresh.RefreshSchedule`), the nodes drained ahead of their slot and their give-backs, and the
journal (:mod:`run_journal`) every decision is appended to the moment it is taken, which a re-run continues from.
Nothing here touches a host; the strategy hands the records and queues the tasks.
"""

from __future__ import annotations

import time

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import (
    drain_adapter,
    fleet_refresh,
    run_journal,
    upgrade_settings,
    window_open,
    window_preview,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window import Window


def journaled(slot: dict) -> dict:
    """A slot record as the journal keeps it: without the reads of the fleet so far (``refreshes``), each of which is
    a ``refresh`` entry of its own."""
    return {key: value for key, value in slot.items() if key != "refreshes"}


class RunState:
    """One run of the window: its Window, its slots and records, its reads, its drains ahead and its journal.

    ``say`` prints a line for the operator (the strategy's display).
    """

    def __init__(self, say=None):
        self.say = say
        self.window = None  # the one Window, built by open()
        self.broken = None  # why the window could not be built from the play's gpuops_upgrade_window
        self.arrived: dict = {}  # host name -> when it reached its slot task
        self.holding: set = set()  # hosts admitted and not released yet
        self.records: dict = {}  # host name -> its slot record
        self.admitted_at: dict = {}  # host name -> when the window admitted it
        self.refresh = None  # the window's refresh settings, when the window reads the fleet again
        self.schedule = None  # fleet_refresh.RefreshSchedule
        self.ahead = None  # the window's drain_ahead (where and how to drain ahead), None: never
        self.drained_ahead: set = set()  # hosts drained ahead of their slot by us, not given back yet
        self.not_given_back: dict = {}  # host name -> why the give-back of its drain ahead failed
        self.journal = None  # run_journal.JournalWriter, when the window names a journal
        self.halt_written = False
        self.passed: set = set()  # hosts whose pass (not admitted) is in the journal

    # The one window, built once from the play's window (window_slot.window_of).

    def open(self, args: dict, now):
        """Open the window from the play's window ``args`` (``window_open.window``: the same Window the plan
        previewed, a previous run's nodes to resume marked from its journal), its drains ahead, its reads of the
        fleet, this run's journal and its ``start``. A window that cannot be opened is broken (:meth:`fail`);
        returns whether it was opened."""
        try:
            self.set_ahead(args.get("drain_ahead"))
            self.window, resume = window_open.window(args, now, self.ahead is not None)
            self.drained_ahead.update(self.window.drained_ahead)  # a crashed run's, from Slurm or its journal
            self.set_refresh(args.get("refresh"), now)
            self.open_journal(args.get("journal"))
            if self.journal is not None:
                self.write(
                    "start",
                    run_id=resume["run_id"],
                    target=resume["target"],
                    resumed_from=resume["resumed_from"],
                    resumed=list(self.window.resumed),
                    in_service_out=list(self.window.unavailable),
                    settings=self.window.settings.as_dict(),
                    deadline=self.window.deadline,  # a re-run continuing this one keeps it
                    torn=self.journal.torn,  # bytes of a torn last line cut off before this entry
                    report=args.get("report"),  # the plan's part of the report, which is built from the journal
                )
        except ValueError as error:
            self.fail(str(error), now)
            return False
        return True

    def fail(self, why: str, now):
        """The window cannot be built (``why``): an empty one admits no host; each passes its slot saying why."""
        self.broken = why
        self.window = Window([], {}, now)

    def end(self):
        """The play ended: the journal's ``end``, and the journal closed."""
        if self.journal is None:
            return
        window = self.window
        self.write(
            "end",
            done=list(window.done),
            failed=list(window.failed),
            deferred=sorted(window.deferred),
            halted=window.halted,
            drained_ahead=sorted(self.drained_ahead),
        )
        self.journal.close()

    # Slots: admissions, each host's record, releases.

    def take_admitted(self, names, now):
        for name in names:
            self.holding.add(name)
            self.drained_ahead.discard(name)  # its drain ahead becomes its upgrade's drain
            self.admitted_at[name] = now
            node = self.window.nodes[name]
            state = self.progress("admitted", name, now)
            self.write("admit", node=name, canary=name in self.window.canaries, resume=node.resume, at=now, **state)

    def verdict(self, name: str) -> tuple:
        """Whether the host ``name``, waiting at its slot, passes its slot task now, and the record to hand it first
        (None: its record stands): admitted, or not admitted with the reason (the window broken, the host not in the
        plan, deferred, gone from the plan, the run halted). ``(False, None)``: it keeps waiting."""
        window = self.window
        if self.broken:
            return True, self.record(name, False, "the window cannot be built: %s" % self.broken)
        if name in self.holding:
            record = self.records.get(name)
            if not record or record.get("state") != "acquired" or not record.get("admitted"):
                return True, self.record(name, True, "admitted")
            return True, None
        if name not in window.nodes:
            return True, self.record(name, False, "not in the window's plan")
        if name in window.deferred:
            return True, self.record(name, False, "deferred: %s" % window.deferred[name])
        if name in window.gone:
            # out of service by someone else, or in a reservation not ours, since the plan: its status first
            status = "reserved" if name in window.reserved else "unavailable"
            return True, self.record(name, False, "%s: left alone: %s" % (status, window.gone[name]))
        if window.halted:
            return True, self.record(name, False, "the run halted before this node started")
        return False, None

    def record(self, name: str, admitted: bool, reason: str) -> dict:
        """The slot record of ``name`` now, kept as its latest."""
        now = time.time()
        arrived = self.arrived.get(name, now)
        node = self.window.nodes.get(name)
        record = {
            "state": "acquired",
            "admitted": admitted,
            "reason": reason,
            "arrived_at": arrived,
            "admitted_at": self.admitted_at.get(name, now) if admitted else None,
            "waited": round((self.admitted_at.get(name, now) if admitted else now) - arrived, 3),
            "in_flight": sorted(self.window.in_flight),
            "canary": name in self.window.canaries,
            "released_at": None,
            # Slurm's end of the node's running job when the window was built (None: idle or unknown)
            "job_end": node.job_end if node is not None else None,
            "max_job_wait": self.window.settings.max_job_wait,
            # every read of the fleet during the run so far: when, how long, why, what changed
            "refreshes": list(self.schedule.reads) if self.schedule is not None else [],
            # drained ahead of its slot now (a host passing not admitted is given back first)
            "drained_ahead": name in self.drained_ahead or name in self.not_given_back,
        }
        if name in self.not_given_back and not admitted:
            why = self.not_given_back[name]
            record["reason"] = "%s; still drained ahead: its give-back failed: %s" % (reason, why)
        self.records[name] = record
        return record

    def release(self, name: str, ok: bool, halt, deferred=False, node=None) -> dict:
        """The slot of ``name`` comes back (its release task ran); returns its record to hand it. ``node``, the
        node's record the release built, is journaled with it (``record``)."""
        self.finish(name, ok, halt, deferred)
        if self.schedule is not None:
            self.schedule.released(time.time())
        record = dict(self.records.get(name, {}))
        record.update(
            {
                "state": "released",
                "released_at": time.time(),
                "ok": ok,
                "deferred": deferred,
                "halted": self.window.halted,
            }
        )
        self.records[name] = record
        state = self.progress("back, upgraded" if ok and not deferred else "back, deferred" if ok else "failed", name)
        if isinstance(node, dict):
            state["record"] = node
        self.write(
            "release", node=name, ok=ok, deferred=deferred, halt=self.window.halted, slot=journaled(record), **state
        )
        self.write_halt(name, "a node failed" if not ok else "the node's release asked to halt")
        return record

    def left(self, name: str, why: str) -> dict:
        """The host ``name`` left the play while holding its slot: a failure, which halts; returns its record."""
        self.finish(name, False, True)
        record = dict(self.records.get(name, {}))
        record.update({"state": "released", "ok": False, "reason": why, "released_at": time.time(), "halted": True})
        self.records[name] = record
        self.write("release", node=name, ok=False, deferred=False, halt=True, why=why, slot=journaled(record))
        self.write_halt(name, why)
        return record

    def not_admitted(self, name: str, node, slot):
        """The slot task of ``name``, not admitted, came back with the node's record (``node``) and its ``slot``: both
        go in the journal, from which the report is built."""
        if isinstance(node, dict):
            self.write("not_admitted", node=name, record=node, slot=journaled(slot or {}))

    def finish(self, name: str, ok: bool, halt, deferred=False):
        self.holding.discard(name)
        if name in self.window.in_flight:
            self.window.finish(name, ok, halt, deferred=deferred)

    def progress(self, event: str, name: str, now=None) -> dict:
        """Where the run stands after an admission or release: said as one line, and returned for the journal."""
        state = window_preview.progress(self.window, time.time() if now is None else now)
        if self.say is not None:
            self.say("gpuops upgrade window: %s" % window_preview.progress_line(event, name, state))
        return {"progress": state}

    # Fresh state: the fleet read again during the run.

    def set_refresh(self, refresh, now):
        """Check the window's ``refresh`` (None: the window keeps the plan's view)."""
        if refresh in (None, {}):
            return
        if (
            not isinstance(refresh, dict)
            or not refresh.get("delegate_to")
            or not isinstance(refresh.get("names"), dict)
        ):
            raise ValueError(
                "refresh must be {delegate_to: the Slurm controller host (the Kubernetes API client), names: "
                "{inventory host: scheduler node name}, interval: seconds, options: options of the read's module, "
                "adapter: slurm (default) or kubernetes}, got %r" % (refresh,)
            )
        options = refresh.get("options") or {}
        if not isinstance(options, dict):
            raise ValueError("refresh.options must be a dict of the read's module options, got %r" % options)
        drain_adapter.fleet_reader(refresh)  # an adapter that reads no fleet is refused here
        self.schedule = fleet_refresh.RefreshSchedule(
            refresh.get("interval", upgrade_settings.DEFAULTS["refresh_interval"]), now
        )
        self.refresh = dict(refresh, options=options)

    def refresh_task(self) -> tuple[str, dict]:
        """The module and arguments of a read of the fleet (the drain adapter's: drain_adapter.fleet_read_task)."""
        return drain_adapter.fleet_read_task(self.refresh)

    def refreshed(self, data: dict):
        """A read came back (its result ``data``): the window takes what changed; the read is recorded either
        way. A read that failed, or whose answer the adapter cannot read, changes nothing."""
        now = time.time()
        if data.get("failed") or data.get("unreachable"):
            read = self.schedule.finished(now, False, error=data.get("msg") or "the read failed without a message")
            self.write("refresh", **read)
            return
        try:
            nodes = drain_adapter.fleet_read(self.refresh, data)
            observed, reasons = fleet_refresh.observations(nodes, self.refresh["names"])
            changes = self.window.observe(observed, now, reasons)
        except ValueError as error:
            self.write("refresh", **self.schedule.finished(now, False, error=str(error)))
            return
        read = self.schedule.finished(now, True, {key: value for key, value in changes.items() if value})
        self.write("refresh", **read)

    # Drain ahead: busy nodes next in line drained in Slurm without a slot.

    def set_ahead(self, ahead):
        """Check the window's ``drain_ahead`` (None: no node is drained ahead)."""
        if ahead in (None, {}):
            return
        if (
            not isinstance(ahead, dict)
            or not ahead.get("delegate_to")
            or not isinstance(ahead.get("names"), dict)
            or not ahead.get("run_id")
            or not isinstance(ahead.get("options") or {}, dict)
        ):
            raise ValueError(
                "drain_ahead must be {delegate_to: the Slurm controller host, names: {inventory host: Slurm node "
                "name}, run_id, reason_prefix, become, options: slurm_drain options}, got %r" % (ahead,)
            )
        self.ahead = dict(ahead, options=ahead.get("options") or {})

    def ahead_done(self, name: str, action: str, data: dict):
        """A drain ahead (``drain``) or a give-back (``resume``) came back: the window and the journal take it."""
        failed = bool(data.get("failed") or data.get("unreachable"))
        window = self.window
        if action == "drain":
            if failed or not data.get("ours"):
                why = data.get("msg") if failed else "drained by someone else: not touched"
                if name in window.drained_ahead:
                    window.drain_ahead_failed(name)
                self.write("drain_ahead", node=name, ok=False, why=why)
                return
            if name in self.holding:
                return  # admitted while its drain ran: that drain is its upgrade's now
            self.drained_ahead.add(name)
            self.write("drain_ahead", node=name, ok=True, job_end=window.nodes[name].job_end)
            return
        self.drained_ahead.discard(name)
        if failed:
            self.not_given_back[name] = data.get("msg") or "failed"
            self.write("undrain", node=name, ok=False, why=self.not_given_back[name])
        else:
            self.write("undrain", node=name, ok=True)

    # The journal: every decision on the controller's disk as it is taken; a re-run continues from it.

    def open_journal(self, journal):
        """Open this run's journal (``window_open.check_journal``), appending to it when it exists."""
        journal = window_open.check_journal(journal)
        if journal is None:
            return
        path = str(journal["path"])
        try:
            self.journal = run_journal.JournalWriter(path)
        except OSError as error:
            raise ValueError(
                "the journal %s cannot be written (%s): set gpuops_upgrade_journal_path" % (path, error)
            ) from error

    def write(self, event: str, **fields):
        if self.journal is None:
            return
        at = fields.pop("at", None)
        self.journal.append(run_journal.entry(event, time.time() if at is None else at, **fields))

    def write_halt(self, name: str, why: str):
        if self.window.halted and not self.halt_written:
            self.halt_written = True
            self.write("halt", node=name, why=why)

    def write_pass(self, name: str):
        record = self.records.get(name) or {}
        if name in self.passed or record.get("admitted") or name in self.window.deferred:
            return
        self.passed.add(name)
        self.write("pass", node=name, why=record.get("reason"))
