# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Exact package versions from the node's package index.

The compatibility matrix decides what is compatible and gives upstream
versions (``580.126.09``, ``12.8.1``, ``4.5.2``); the repository the node uses
decides the exact version strings (``580.126.09-1ubuntu1``,
``3:580.126.09-1.el9``, ``1:4.5.2-1``), because NVIDIA changes revisions
between releases of one branch and mirrors lag or lead NVIDIA.

* :func:`parse_apt_madison` reads one ``apt-cache madison <names>`` call,
  :func:`parse_dnf_repoquery` one ``dnf repoquery --showduplicates`` call with
  :data:`DNF_QUERY_FORMAT`; both give ``{name: [{version, source}]}``.
* :func:`matches` says whether an index version is the one a requested
  version names.
* :func:`resolve` picks, for one node, the exact version of every requested
  package: a driver branch resolves to the newest release for which the driver
  and every companion tied to it (Fabric Manager, nscq, nvsdm, IMEX) exist,
  or to the release the node already runs.

Pure Python, no dependencies, runs on managed-node Python >= 3.9.
"""

from __future__ import annotations

import fnmatch

from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import (
    compare_versions,
    driver_branch,
    parse_package_version,
)

# dnf 4 ends each record itself and ignores a trailing "\n" in the format; dnf 5 needs it.
DNF_QUERY_FORMAT = "%{name} %{epoch}:%{version}-%{release} %{repoid}\\n"
# dnf 4 hides the packages of a module stream that is not enabled (modular filtering; dnf-plugins-core's repoquery
# has --disable-modular-filtering to list them): NVIDIA's RHEL 8/9 driver packages are modular, so a node whose
# stream is not enabled yet (a first install, a branch change) would find none. The role enables the resolved
# stream before it installs. dnf 5 (RHEL 10, no NVIDIA streams) has no such option.
DNF4_SHOW_MODULAR = "--disable-modular-filtering"
# How many index versions a refusal lists.
SHOWN_VERSIONS = 5


class PackageIndexError(ValueError):
    """Index output that does not look like what the parser knows."""


def dnf_repoquery_argv(dnf, names, dnf5=False):
    """The one ``dnf repoquery`` call that lists every version of ``names`` in the node's repositories, the
    packages of every module stream included on dnf 4 (``dnf``: the binary; ``dnf5``: it is dnf 5)."""
    modular = [] if dnf5 else [DNF4_SHOW_MODULAR]
    return [dnf, "repoquery", "-q", "--showduplicates", *modular, "--qf", DNF_QUERY_FORMAT, *names]


def parse_apt_madison(text):
    """``apt-cache madison`` lines (``name | version | source``) into ``{name: [{version, source}]}``.

    Source lines (``Sources``) are skipped; a version listed by several
    repositories is kept once, with the first source apt printed.
    """
    index = {}
    for raw in (text or "").splitlines():
        if not raw.strip():
            continue
        fields = [field.strip() for field in raw.split("|")]
        if len(fields) != 3 or not fields[0] or not fields[1]:
            raise PackageIndexError("unexpected apt-cache madison line %r" % raw.strip())
        name, version, source = fields
        if source.endswith(" Sources"):
            continue
        _add(index, name, version, source[: -len(" Packages")].strip() if source.endswith(" Packages") else source)
    return index


def parse_dnf_repoquery(text):
    """``dnf repoquery --showduplicates --qf DNF_QUERY_FORMAT`` into ``{name: [{version, source}]}``.

    An epoch of 0 is dropped (``0:12.8.1-1`` is ``12.8.1-1``), as rpm prints it.
    Lines that are not three fields (dnf's metadata messages) are ignored.
    """
    index = {}
    for raw in (text or "").splitlines():
        fields = raw.split()
        if len(fields) != 3 or ":" not in fields[1]:
            continue
        name, version, repoid = fields
        epoch, _sep, rest = version.partition(":")
        if epoch in ("0", "(none)", ""):
            version = rest
        _add(index, name, version, repoid)
    return index


def _add(index, name, version, source):
    entries = index.setdefault(name, [])
    if not any(entry["version"] == version for entry in entries):
        entries.append({"version": version, "source": source})


def upstream(version):
    """The upstream part of a package version: ``1:4.5.2-1`` -> ``4.5.2``."""
    return parse_package_version(version)[1]


def matches(requested, available):
    """Whether the index version ``available`` is the one ``requested`` names.

    * An upstream version (no ``-``) matches every epoch and revision of it:
      ``580.126.09`` matches ``580.126.09-1ubuntu1``, ``580.126.09-0ubuntu1``
      and ``3:580.126.09-1.el9``; ``4.1.1`` matches ``1:4.1.1``.
    * A pattern with ``*`` matches the version with or without its epoch:
      ``2.27.7-*+cuda12.9`` matches ``2.27.7-1+cuda12.9``.
    * Anything else must be the same version (an epoch it leaves out is not
      compared).
    """
    try:
        _epoch, up, revision = parse_package_version(available)
    except ValueError:
        return False
    without_epoch = "%s-%s" % (up, revision) if revision else up
    if "*" in requested:
        return fnmatch.fnmatchcase(without_epoch, requested) or fnmatch.fnmatchcase(available, requested)
    if "-" not in requested and ":" not in requested:
        return compare_versions(up, requested) == 0
    if ":" not in requested:
        return compare_versions(without_epoch, requested) == 0
    return compare_versions(available, requested) == 0


def _newest_first(versions):
    ordered = list(versions)
    for i in range(1, len(ordered)):
        j = i
        while j > 0 and compare_versions(ordered[j - 1], ordered[j]) < 0:
            ordered[j - 1], ordered[j] = ordered[j], ordered[j - 1]
            j -= 1
    return ordered


def holds_text(entries):
    """``580.173.02-1ubuntu1, 580.159.04-1ubuntu1`` (newest first), or ``no version``."""
    versions = _newest_first(entry["version"] for entry in entries)
    if not versions:
        return "no version"
    shown = ", ".join(versions[:SHOWN_VERSIONS])
    return shown + (" and %d older" % (len(versions) - SHOWN_VERSIONS) if len(versions) > SHOWN_VERSIONS else "")


def _best(requested, entries):
    found = [entry for entry in entries if matches(requested, entry["version"])]
    if not found:
        return None
    newest = _newest_first(entry["version"] for entry in found)[0]
    return next(entry for entry in found if entry["version"] == newest)


def _branch_releases(entries, branch):
    releases = set()
    for entry in entries:
        try:
            up = upstream(entry["version"])
            if driver_branch(up) == branch:
                releases.add(up)
        except ValueError:
            continue
    return releases


def _driver_choice(driver, tied, index, installed):
    """Return ``(release, kept, newer, problems)`` for the packages tied to the driver version."""
    branch = int(driver["branch"])
    exact = driver.get("exact")
    floor = driver.get("floor")
    skip = set(driver.get("skip") or [])
    per_package = {item["name"]: _branch_releases(index.get(item["name"], []), branch) for item in tied}
    common = set.intersection(*per_package.values()) if per_package else set()

    def allowed(release):
        if any(compare_versions(release, bad) == 0 for bad in skip):
            return False
        return floor is None or compare_versions(release, floor) >= 0

    candidates = _newest_first(release for release in common if allowed(release))
    if exact:
        lacking = [item for item in tied if not any(matches(exact, e["version"]) for e in index.get(item["name"], []))]
        if lacking:
            return None, False, None, [_lacks(item["name"], exact, index) for item in lacking]
        return exact, False, None, []
    current = _installed_release(tied, installed, branch)
    newest = candidates[0] if candidates else None
    if current and allowed(current) and not driver.get("upgrade"):
        reachable = all(
            (installed.get(item["name"]) and matches(current, installed[item["name"]]))
            or any(matches(current, e["version"]) for e in index.get(item["name"], []))
            for item in tied
        )
        if reachable:
            newer = newest if newest and compare_versions(newest, current) > 0 else None
            return current, True, newer, []
    if newest:
        return newest, False, None, []
    return None, False, None, _no_common_release(tied, per_package, index, branch, floor, skip)


def _installed_release(tied, installed, branch):
    """The driver release the node runs, read from the first tied package installed in the branch."""
    for item in tied:
        version = installed.get(item["name"])
        if version:
            try:
                up = upstream(version)
                if driver_branch(up) == branch:
                    return up
            except ValueError:
                continue
    return None


def _lacks(name, wanted, index):
    return "%s %s: the repository holds %s" % (name, wanted, holds_text(index.get(name, [])))


def _no_common_release(tied, per_package, index, branch, floor, skip):
    primary = tied[0]["name"]
    releases = _newest_first(per_package.get(primary) or [])
    if not releases:
        return [
            "%s: the repository holds no R%d release (it holds %s)"
            % (primary, branch, holds_text(index.get(primary, [])))
        ]
    newest = releases[0]
    lacking = [item["name"] for item in tied if newest not in per_package[item["name"]]]
    if lacking:
        return [_lacks(name, newest, index) for name in lacking]
    reasons = []
    if floor:
        reasons.append("the stack needs %s or newer" % floor)
    if skip:
        reasons.append("the matrix skips %s" % ", ".join(sorted(skip)))
    return [
        "%s: no R%d release in the repository is allowed (%s); the repository holds %s"
        % (primary, branch, "; ".join(reasons) or "no release qualifies", holds_text(index.get(primary, [])))
    ]


def resolve(requested, pins, driver, index, installed, package_manager="apt"):
    """Exact versions for one node.

    ``requested`` and ``pins`` are the resolved stack's lists; an entry whose
    ``follows_driver`` is true carries the driver's version. ``driver`` is the
    resolved stack's ``driver_request`` (``branch``, ``exact``, ``floor``,
    ``skip``, ``upgrade``). ``index`` is :func:`parse_apt_madison` or
    :func:`parse_dnf_repoquery` output; ``installed`` maps names to the
    installed version (or None).

    Returns ``{packages, pins, driver_version, branch_request, kept_installed,
    newer_available, repositories, problems}`` (``branch_request``: the branch
    when the driver was requested as a branch, else None); ``problems`` lists, one line a package, what was
    looked for and what the repository holds. With problems the package and
    pin lists are empty.
    """
    tied = [item for item in requested if item.get("follows_driver")]
    branch_request = str(driver["branch"]) if driver and driver.get("branch") and not driver.get("exact") else None
    release, kept, newer, problems = (None, False, None, [])
    if tied and driver and driver.get("branch"):
        release, kept, newer, problems = _driver_choice(driver, tied, index, installed)
    packages = []
    exact_of = {}
    sources = set()
    for item in requested:
        wanted = release if item.get("follows_driver") and release else item["version"]
        entries = index.get(item["name"], [])
        have = installed.get(item["name"])
        if kept and item.get("follows_driver") and have and matches(wanted, have):
            chosen = {"version": have, "source": None}
        else:
            chosen = _best(wanted, entries)
        if chosen is None:
            if not (item.get("follows_driver") and problems):
                problems.append(_lacks(item["name"], wanted, index))
            continue
        if chosen["source"]:
            sources.add(chosen["source"])
        exact_of[item["name"]] = chosen["version"]
        packages.append(
            dict(item, version=chosen["version"], spec=_spec(item["name"], chosen["version"], package_manager))
        )
    if problems:
        return {
            "packages": [],
            "pins": [],
            "driver_version": release,
            "branch_request": branch_request,
            "kept_installed": kept,
            "newer_available": newer,
            "repositories": sorted(sources),
            "problems": problems,
        }
    exact_pins = []
    for pin in pins:
        wanted = release if pin.get("follows_driver") and release else pin["version"]
        same = [
            exact_of[item["name"]]
            for item in requested
            if item.get("component") == pin.get("component")
            and item["name"] in exact_of
            and matches(wanted, exact_of[item["name"]])
        ]
        exact_pins.append(dict(pin, version=same[0] if same else wanted))
    return {
        "packages": packages,
        "pins": exact_pins,
        "driver_version": release,
        "branch_request": branch_request,
        "kept_installed": kept,
        "newer_available": newer,
        "repositories": sorted(sources),
        "problems": [],
    }


def _spec(name, version, package_manager):
    return "%s=%s" % (name, version) if package_manager == "apt" else "%s-%s" % (name, version)


def fleet_problems(reads):
    """What stops a run before any node changes, from every node's index result.

    ``reads`` maps a host name to its ``gpu_stack.index`` (hosts without one are
    left out). Returns ``host: problem`` lines, then one line for each set of
    nodes that ask for the same branch from the same repositories and would
    install different driver releases (nodes that keep the release they run,
    and exact requests, are not counted): one run gives every node of one
    repository the same exact versions.
    """
    lines = []
    chosen = {}
    for host in sorted(reads):
        index = reads[host]
        lines.extend("%s: %s" % (host, problem) for problem in index.get("problems") or [])
        if index.get("problems") or index.get("kept_installed") or not index.get("branch_request"):
            continue
        key = (index["branch_request"], tuple(index.get("repositories") or []))
        chosen.setdefault(key, {}).setdefault(index["driver_version"], []).append(host)
    for (branch, repositories), releases in sorted(chosen.items()):
        if len(releases) > 1:
            lines.append(
                "nodes asking for R%s from %s would get different driver releases (%s): their package lists "
                "differ; run apt-get update (dnf makecache) on them or point them at one mirror"
                % (
                    branch,
                    ", ".join(repositories) or "the same repositories",
                    "; ".join("%s on %s" % (release, ", ".join(hosts)) for release, hosts in sorted(releases.items())),
                )
            )
    return lines
