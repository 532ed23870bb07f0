# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What ``package_pin`` writes, holds, unholds and runs: pure decisions on plain data.

The module reads the node (the apt preferences file, the unattended-upgrades
drop-in, ``apt-mark showhold``, the versionlock list, ``dnf module list``),
hands what it read to :func:`apt_plan` or :func:`dnf_plan`, and carries out
the returned plan. Nothing here opens a file or runs a command.

A plan is ``{files, stream_commands, hold_commands, held, unheld, holds_diff}``:
``files`` lists ``{path, before, after, changed}`` (``after`` None removes the
file), the command lists are argv lists in the order they run (module streams
first, holds last, files in between).

Every refusal is a :class:`PlanError` whose text is the module's message.
"""

from __future__ import annotations

import fnmatch

from ansible_collections.gpuops.cluster.plugins.module_utils.stack import apt_pinning, kernel_lockstep, rpm_versionlock

_GLOB_CHARS = "*?[]"


class PlanError(ValueError):
    """A request that cannot be planned; the text says what to change."""


def file_change(path, before, after):
    """One file of the plan: its text before and after (None: absent), and whether it changes."""
    return {"path": path, "before": before, "after": after, "changed": before != after}


def diff_entry(header, before, after):
    """An Ansible diff entry; an absent file is empty text."""
    return {
        "before_header": header,
        "after_header": header,
        "before": before if before is not None else "",
        "after": after if after is not None else "",
    }


def holds_text(names):
    """Names one a line, sorted (the text the holds diff shows)."""
    return "".join(f"{name}\n" for name in sorted(names))


def dnf_companions(pins, packages, installed_rpms):
    """Installed packages a pin names (by name or glob) at the pin's version that ``packages`` does not list:
    ``[{component, names: [name], version: installed E:V-R}]``.

    A module stream does not hold them: it offers every release of its branch, so a dependency that carries the
    driver's version (``nvidia-kmod-common``, which ``kmod-nvidia-*-dkms`` requires at its own version) and is not
    locked is an upgrade candidate while the packages that need it are locked. On RHEL (dnf.conf ``best=True``)
    ``dnf upgrade`` then fails ("cannot install the best update candidate"), seen on the lab's dnf node.
    ``installed_rpms`` is :func:`rpm_versionlock.parse_rpm_query`'s ``{name: {evr, ...}}``.
    """
    named = {package["name"] for package in packages}
    found = []
    for name, info in sorted((installed_rpms or {}).items()):
        if info is None or name in named:
            continue
        for pin in pins:
            try:
                same = rpm_versionlock.evr_matches(pin["version"], info["evr"])
            except rpm_versionlock.VersionlockError:  # a version glob (NCCL's <nccl>-*+cuda<X.Y>): no exact lock
                same = False
            if same and any(fnmatch.fnmatchcase(name, pattern) for pattern in pin["names"]):
                found.append({"component": pin.get("component") or "package", "names": [name], "version": info["evr"]})
                break
    return found


def request_pins(manager, pins, packages, installed_rpms=None):
    """The pins to write or lock and the exact package names to hold: ``(pins, installed)``.

    Holds and locks go on the packages the stack installs (``packages``); ``pins``
    may also name packages that are not installed (``apt-mark hold`` fails on
    those), or globs. On dnf with ``packages`` the locks are those packages and
    the installed ones ``pins`` name at their version (:func:`dnf_companions`,
    from ``installed_rpms``), since versionlock takes exact RPM names.
    """
    packages = packages or []
    installed = sorted({package["name"] for package in packages})
    if manager == "dnf" and installed:
        exact = [
            {
                "component": package.get("component") or "package",
                "names": [package["name"]],
                "version": package["version"],
            }
            for package in packages
        ]
        return exact + dnf_companions(pins or [], packages, installed_rpms), installed
    try:
        return apt_pinning.normalize_pins(pins, packages), installed
    except apt_pinning.PinningError as exc:
        raise PlanError(f"cannot pin the requested stack: {exc}") from exc


def _kept_if_foreign(text):
    """A file this collection did not write is kept as it is; ours goes (None)."""
    return text if text and apt_pinning.MANAGED_HEADER not in text else None


def apt_owned_names(pins, pref_before):
    """Names and globs this collection pins now or pinned before (the current preferences file, if ours)."""
    owned = {name for pin in pins for name in pin["names"]}
    if pref_before and apt_pinning.MANAGED_HEADER in pref_before:
        for stanza in apt_pinning.parse_preferences(pref_before):
            if stanza.get("version") is not None:
                owned.update(stanza["names"])
    return owned


def apt_files(request, pins, pref_before, uu_before, kernel_holds=()):
    """``(preferences after, unattended-upgrades drop-in after)`` for ``request``; None removes the file.

    ``request`` holds the module options ``state``, ``priority``, ``unattended_upgrades`` and
    ``unattended_upgrades_patterns``. ``kernel_holds`` (the kernel packages held with the stack) are recorded
    in the preferences file, so that a later run knows which kernel holds are the collection's to release.
    """
    state = request["state"]
    try:
        if state == "present":
            pref_after = apt_pinning.render_preferences(pins, request["priority"])
            if kernel_holds and request["hold"]:
                pref_after += "\n" + kernel_lockstep.holds_comment(kernel_holds)
            names = [name for pin in pins for name in pin["names"]]
            if request["unattended_upgrades"]:
                uu_after = apt_pinning.render_unattended_blacklist(names, request["unattended_upgrades_patterns"])
            else:
                uu_after = _kept_if_foreign(uu_before)
        elif state == "released":
            pref_after, uu_after = pref_before, uu_before
        else:
            pref_after, uu_after = _kept_if_foreign(pref_before), _kept_if_foreign(uu_before)
    except apt_pinning.PinningError as exc:
        raise PlanError(f"cannot pin the requested stack: {exc}") from exc
    return pref_after, uu_after


def apt_holds(request, pins, installed, held, owned, apt_mark="apt-mark", kernel_holds=()):
    """The ``apt-mark hold``/``unhold`` calls (one each, only for names that change) and the holds diff.

    Every exact pin name is pinned in the preferences file; only the names in
    ``installed`` (the packages option), when given, are held, and the kernel
    packages in ``kernel_holds``. ``held`` is what ``apt-mark showhold`` listed;
    holds on names not in ``owned`` are never touched.
    """
    keep_holds = request["state"] == "present" and request["hold"]
    to_hold = [name for name in apt_pinning.managed_names(pins) if not installed or name in installed]
    to_hold += list(kernel_holds)
    plan = apt_pinning.plan_holds(to_hold, held, sorted(owned), keep_holds)
    commands = []
    if plan["hold"]:
        commands.append([apt_mark, "hold", *plan["hold"]])
    if plan["unhold"]:
        commands.append([apt_mark, "unhold", *plan["unhold"]])
    holds_before = {name for name in held if any(name == p or fnmatch.fnmatchcase(name, p) for p in owned)}
    holds_after = (holds_before | set(plan["hold"])) - set(plan["unhold"])
    return {
        "hold_commands": commands,
        "held": plan["hold"],
        "unheld": plan["unhold"],
        "holds_diff": diff_entry("holds", holds_text(holds_before), holds_text(holds_after)),
    }


def apt_plan(request, pins, installed, pref_before, uu_before, held, apt_mark="apt-mark", kernel_holds=()):
    """The whole apt plan from what was read: the two files and the holds.

    ``request`` holds the module options ``state``, ``priority``, ``hold``, ``preferences_path``,
    ``unattended_upgrades``, ``unattended_upgrades_path`` and ``unattended_upgrades_patterns``.
    ``kernel_holds``: the installed kernel packages to hold with the stack (kernel lockstep); the kernel holds
    an earlier run recorded and this one does not make are released.
    """
    kernel_holds = sorted(kernel_holds or ()) if request["state"] == "present" else []
    pref_after, uu_after = apt_files(request, pins, pref_before, uu_before, kernel_holds)
    owned = apt_owned_names(pins, pref_before) | set(kernel_holds) | set(kernel_lockstep.recorded_holds(pref_before))
    holds = apt_holds(request, pins, installed, held, owned, apt_mark, kernel_holds)
    return dict(
        holds,
        files=[
            file_change(request["preferences_path"], pref_before, pref_after),
            file_change(request["unattended_upgrades_path"], uu_before, uu_after),
        ],
        stream_commands=[],
    )


def dnf_lock_packages(pins):
    """``[{name, version}]`` to lock; versionlock needs exact names, so a glob is refused."""
    packages = []
    for pin in pins:
        for name in pin["names"]:
            if any(ch in name for ch in _GLOB_CHARS):
                raise PlanError(f"dnf versionlock needs exact package names, not the glob {name!r}")
            packages.append({"name": name, "version": pin["version"]})
    return packages


def dnf_stream_commands(stream, enabled, dnf="dnf"):
    """argv lists that make ``stream`` (``module:stream``) enabled, given ``{module: enabled stream}``."""
    try:
        planned = rpm_versionlock.plan_module_stream(stream, enabled)
    except rpm_versionlock.VersionlockError as exc:
        raise PlanError(str(exc)) from exc
    return [[dnf, *argv[1:]] for argv in planned]


def dnf_plan(request, pins, before, stream_commands=(), kernel_locks=()):
    """The whole dnf plan from what was read: the versionlock list, the stream commands and the lock changes.

    ``before`` is the current lock list (None: absent); ``request`` holds the module options ``state``,
    ``hold`` and ``versionlock_path``. ``kernel_locks``: versionlock lines for every installed version of the
    kernel packages (kernel lockstep), kept in the same managed block; several lines for one kernel name are
    meant (every installed kernel stays allowed, no other comes in).
    """
    packages = dnf_lock_packages(pins)
    try:
        wanted = rpm_versionlock.desired_entries(packages)
    except rpm_versionlock.VersionlockError as exc:
        raise PlanError(f"cannot lock the requested stack: {exc}") from exc
    current = before or ""
    old_entries = rpm_versionlock.parse_versionlock_list(current)["managed"]
    old_names = {entry["name"] for entry in map(rpm_versionlock.parse_lock_entry, old_entries) if entry}
    owned = sorted(old_names | {package["name"] for package in packages})
    entries = sorted(set(wanted) | set(kernel_locks)) if request["state"] == "present" and request["hold"] else []
    after = rpm_versionlock.render_versionlock_list(current, entries, owned)
    if before is None and not after:
        after = None

    new_names = {entry["name"] for entry in map(rpm_versionlock.parse_lock_entry, entries) if entry}
    changed_old = {e for e in old_entries if e not in entries}
    changed_new = {e for e in entries if e not in old_entries}
    return {
        "files": [file_change(request["versionlock_path"], before, after)],
        "stream_commands": list(stream_commands),
        "hold_commands": [],
        "held": sorted({rpm_versionlock.parse_lock_entry(e)["name"] for e in changed_new}),
        "unheld": sorted({rpm_versionlock.parse_lock_entry(e)["name"] for e in changed_old} - new_names),
        "holds_diff": diff_entry("versionlocks", holds_text(old_entries), holds_text(entries)),
    }


def changes(plan):
    """``(changed files, commands, changed)``: what the module must do for ``plan``."""
    changed_files = [change for change in plan["files"] if change["changed"]]
    commands = plan["stream_commands"] + plan["hold_commands"]
    return changed_files, commands, bool(changed_files or commands)


def result(manager, pins, plan, diff=False):
    """The module's return values for ``plan`` (the same in check mode: what it would do)."""
    changed_files, commands, changed = changes(plan)
    returned = {
        "changed": changed,
        "package_manager": manager,
        "pins": pins,
        "held": plan["held"],
        "unheld": plan["unheld"],
        "files": [change["path"] for change in changed_files],
        "commands": commands,
    }
    if diff:
        returned["diff"] = [diff_entry(change["path"], change["before"], change["after"]) for change in plan["files"]]
        returned["diff"].append(plan["holds_diff"])
    return returned
