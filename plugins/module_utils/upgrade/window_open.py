# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the rolling upgrade's one :class:`window.Window` is opened from the run's window value.

The value (:data:`window_slot.WINDOW_KEYS`: the survey's nodes, the window's settings, the journal, the drains ahead)
is made once by the plan (filter ``gpuops.cluster.upgrade_plan``). :func:`window` turns it into the Window: the nodes
as the journal of the run it continues left them (:func:`continued`), drain ahead off where nobody drains ahead, and
the deadline the continued run set. The strategy ``gpuops.cluster.upgrade_window`` opens its one Window, the one that
acts, with it (``run_state.RunState.open``); the plan previews the same Window with it (``window_preview.plan``), so
what a plan-only run prints is what the strategy starts from, a continued run included. Nothing here writes.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import run_journal, upgrade_settings
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade.window import Window


def journal_says(node, left: set, ahead: set):
    """``node`` marked as a previous run's journal left it: out of service (``resume``) when in ``left``, drained
    ahead when in ``ahead``. A node whose scheduler said where it is (``resume`` set, true or false:
    fleet_nodes.window_nodes) keeps the scheduler's word."""
    if not isinstance(node, dict) or node.get("done") or "resume" in node:
        return node
    if node.get("name") in left:
        return dict(node, resume=True)
    if node.get("name") in ahead:
        return dict(node, drained_ahead=True)
    return node


def check_journal(journal) -> dict | None:
    """The window's ``journal`` checked (None: the run keeps none). Raises ValueError saying what to set."""
    if journal in (None, {}):
        return None
    if not isinstance(journal, dict) or not journal.get("path"):
        raise ValueError(
            "journal must be {path: the journal file on the controller, run_id, target, resume: auto, none or "
            "the path of a previous journal}, got %r" % (journal,)
        )
    return journal


def continued(journal, nodes) -> tuple[list, dict]:
    """The window's nodes, those the run it continues left mid-upgrade marked to resume, and what it continues:
    ``{run_id, target, resumed_from, deadline}`` (``resumed_from`` the previous journal's path, None when none;
    ``deadline`` that run's when it was lost mid-way, else None). Reads the previous journal, writes nothing."""
    resume = {"run_id": None, "target": None, "resumed_from": None, "deadline": None}
    journal = check_journal(journal)
    if journal is None:
        return nodes, resume
    target = str(journal.get("target") or "")
    wanted = journal.get("resume") or upgrade_settings.DEFAULTS["resume_journal"]
    resume.update(run_id=journal.get("run_id"), target=target)
    previous = None
    if wanted == "auto":
        previous = run_journal.find_previous(str(journal["path"]), target)
    elif wanted != "none":
        previous = str(wanted)
    if previous is None:
        return nodes, resume
    try:
        replayed = run_journal.replay(run_journal.read(previous))
    except (OSError, ValueError) as error:
        raise ValueError(
            "the journal to resume from, %s, cannot be read (%s): name another one, or none, in "
            "gpuops_upgrade_resume_journal" % (previous, error)
        ) from None  # the message says why
    left = set(run_journal.to_resume(replayed))
    ahead = set(replayed["drained_ahead"]) - left
    resume["resumed_from"] = previous
    # a run lost mid-way (its journal has no end) is continued with its deadline; one that ended is not
    resume["deadline"] = replayed.get("deadline") if replayed.get("ended_at") is None else None
    return [journal_says(node, left, ahead) for node in nodes], resume


def window(value: dict, now, drains_ahead: bool) -> tuple[Window, dict]:
    """The run's Window from its window ``value`` (``nodes``, ``settings``, ``journal``), and what it continues
    (:func:`continued`). ``drains_ahead``: whether anyone drains ahead for this window (its ``drain_ahead`` is set);
    without, its ``drain_ahead`` setting is 0. Raises ValueError for a bad value."""
    nodes, resume = continued(value.get("journal"), value.get("nodes") or [])
    settings = value.get("settings") or {}
    if isinstance(settings, dict):
        if not drains_ahead and settings.get("drain_ahead"):
            settings = dict(settings, drain_ahead=0)  # nowhere to drain ahead: the window drains none
        if resume["deadline"] is not None:
            settings = dict(settings, deadline=resume["deadline"])  # the run it continues set it
    return Window(nodes, settings, now), resume
