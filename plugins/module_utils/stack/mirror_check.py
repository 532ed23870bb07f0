# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mirror check: what each repository of the fleet makes of the requested stack, before a rollout.

``playbooks/mirror_check.yml`` runs this in four steps, none of which changes a node:

1. :func:`repository_url` names the repository a host's stack comes from (the nvidia_stack role's rule:
   ``nvidia_stack_repo_url``, or ``<base>/<repo_dist>/<arch>/``).
2. :func:`plan` groups the hosts by operating system and repository and picks one node per group to read;
   each distinct resolved stack of a group is one check on that node (an H100 with Fabric Manager and an
   L40S without it ask the same repository different questions).
3. On the chosen node, ``gpuops.cluster.gpu_stack_facts`` with option ``index`` resolves the check (one
   ``apt-cache madison`` or ``dnf repoquery`` call, :func:`package_index.resolve`), and on apt nodes
   ``apt-cache policy`` lists the repositories apt has package lists for (:func:`parse_apt_policy_sources`).
   The group's first check also gives ``index.os_id``: the same read says which OS repositories NVIDIA's
   packages depend on the node lacks (``index.os_repositories.missing``, :mod:`os_repositories`).
4. :func:`report` turns every check and its reads into lines to print and the problems that fail the run.

The check asks for the newest release of a requested branch (what ``rolling_upgrade.yml`` and a first
install take), not the release the reading node runs; it says when the node runs another one.

The OS repositories (Debian's ``contrib``; EPEL and CRB on the RHEL family), as an operator with an
air-gapped mirror needs them, once per group (on its first check; the reading node stands for the group,
as for NVIDIA's repository):

* ``kind`` ``apt``, ``dnf_repo`` or ``dnf_enable``: site.yml's nvidia_stack role adds or enables it by itself
  (``nvidia_stack_os_repositories_enabled``, true by default), so it is a note, not a problem: what site.yml
  adds (beside which Debian archive; which epel-release package, the reading node's
  ``nvidia_stack_epel_release_url`` or else Fedora's, which an air-gapped node cannot reach; which repository
  it enables) and that the mirror must carry it (the check configures nothing, so it cannot see whether the
  mirror does).
* The same where hosts of the group set ``nvidia_stack_os_repositories_enabled: false``: a problem, since
  site.yml refuses those hosts; it names them, what to configure or enable on them, and the setting. The
  group's other hosts get the note.
* ``kind`` ``absent``: a problem, since there is nothing on the node to enable: configure the mirror's
  repository on the group's nodes.

A read that failed is already a problem; a read without ``os_repositories`` (a check that did not ask, or an
older gpu_stack_facts) adds nothing.
"""

from __future__ import annotations

import json

from ansible_collections.gpuops.cluster.plugins.module_utils.stack import os_repositories, package_index
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import compare_versions

# The parts of a resolved stack (stack_resolver.resolve) that decide what a repository is asked.
STACK_KEYS = ("packages", "pins", "driver_request", "kernel_modules", "fabricmanager")
# An OS repository (os_repositories.missing's id) in a note, and what a node needs where site.yml cannot add it.
OS_REPOSITORY_NAMES = {"contrib": "Debian's contrib component", "epel": "EPEL", "crb": "CRB"}
OS_REPOSITORY_CONFIGURE = {
    "contrib": "the mirror's Debian archive with the components main and contrib",
    "epel": "the mirror's EPEL repository",
    "crb": "the mirror's CRB repository",
}
# How the role enables a configured but disabled repository (os_repositories.missing's ``tool``).
ENABLE_COMMANDS = {"dnf": "dnf config-manager --enable", "subscription-manager": "subscription-manager repos --enable"}


def _norm(url):
    return (url or "").strip().rstrip("/")


def repository_url(stack, repo_url="", base_url="", arch=""):
    """The NVIDIA repository a host's stack is installed from, as the nvidia_stack role configures it."""
    if repo_url:
        return repo_url
    if not (base_url and arch and (stack or {}).get("repo_dist")):
        raise ValueError("repository_url: give repo_url, or base_url, arch and a resolved stack with repo_dist")
    return "%s/%s/%s/" % (base_url.rstrip("/"), stack["repo_dist"], arch)


def parse_apt_policy_sources(text):
    """The repository URLs in ``apt-cache policy`` (no package names), in apt's order, without the dpkg status.

    A line such as `` 500 http://host/compute/cuda/repos/ubuntu2204/x86_64  Packages`` (flat repository) or
    `` 500 http://deb.debian.org/debian bookworm/main amd64 Packages`` gives its URL
    (:func:`os_repositories.parse_apt_policy`); no ``Package files:`` section, no URL.
    """
    if not text or "Package files:" not in text:
        return []
    return list(dict.fromkeys(entry["url"] for entry in os_repositories.parse_apt_policy(text)))


def _stack_key(stack):
    return json.dumps({key: stack.get(key) for key in STACK_KEYS}, sort_keys=True)


def _label(stack):
    request = stack.get("driver_request") or {}
    if request.get("exact"):
        driver = "driver %s" % request["exact"]
    elif request.get("branch"):
        driver = "driver R%s (newest release of the branch)" % request["branch"]
    else:
        driver = "driver %s" % stack.get("driver_version")
    parts = [driver, "%s modules" % stack.get("kernel_modules")]
    if stack.get("cuda_toolkit_version"):
        parts.append("CUDA %s" % stack["cuda_toolkit_version"])
    if stack.get("nccl_version"):
        parts.append("NCCL %s" % stack["nccl_version"])
    if stack.get("dcgm"):
        parts.append("DCGM %s" % stack["dcgm"].get("version"))
    parts.append("Fabric Manager" if stack.get("fabricmanager") else "no Fabric Manager")
    return ", ".join(parts)


def plan(targets):
    """The checks to run: ``targets`` maps a host to ``{stack, repository, os_repositories_enabled,
    epel_release_url}`` (stack: its resolved stack; the last two the host's nvidia_stack_os_repositories_enabled,
    true when absent, and nvidia_stack_epel_release_url, empty when absent).

    Returns a list of checks, one per (operating system, repository, distinct stack), sorted by group, each
    ``{number, group, os_id, package_manager, repository, node, group_hosts, hosts, label, matrix_release,
    kernel_modules, fabricmanager, request, index, os_repositories_disabled, epel_release_url}`` (``number``: its
    place in the list): ``node`` is the first host (by name) of the group and reads every check of its group;
    ``hosts`` are the hosts that asked for this stack; ``request`` and ``index`` are gpu_stack_facts' ``requested``
    and ``index`` options (the newest release of a requested branch, ``upgrade: true``; the group's first check
    also ``os_id``, so its read says which OS repositories the node lacks); ``os_repositories_disabled`` are the
    group's hosts with nvidia_stack_os_repositories_enabled false, ``epel_release_url`` the node's.
    """
    groups = {}
    for host in sorted(targets):
        target = targets[host] or {}
        stack = target.get("stack") or {}
        if not stack.get("packages"):
            continue
        key = (stack.get("os_id"), stack.get("package_manager"), _norm(target.get("repository")))
        group = groups.setdefault(
            key, {"repository": target.get("repository"), "hosts": [], "stacks": {}, "disabled": [], "epel": None}
        )
        group["hosts"].append(host)
        if target.get("os_repositories_enabled", True) is False:
            group["disabled"].append(host)
        if len(group["hosts"]) == 1:
            group["epel"] = target.get("epel_release_url") or ""
        group["stacks"].setdefault(_stack_key(stack), {"stack": stack, "hosts": []})["hosts"].append(host)
    checks = []
    for (os_id, manager, _url), group in sorted(groups.items(), key=lambda item: tuple(str(p) for p in item[0])):
        for n, entry in enumerate(sorted(group["stacks"].values(), key=lambda e: e["hosts"][0])):
            stack = entry["stack"]
            index = {"driver": dict(stack.get("driver_request") or {}, upgrade=True), "pins": stack.get("pins") or []}
            if n == 0 and os_id:
                index["os_id"] = os_id  # one read of the OS repositories per group
            checks.append(
                {
                    "number": len(checks),
                    "group": "%s %s" % (os_id, group["repository"]),
                    "os_id": os_id,
                    "package_manager": manager,
                    "repository": group["repository"],
                    "node": group["hosts"][0],
                    "group_hosts": group["hosts"],
                    "hosts": entry["hosts"],
                    "label": _label(stack),
                    "matrix_release": stack.get("driver_version"),
                    "kernel_modules": stack.get("kernel_modules"),
                    "fabricmanager": bool(stack.get("fabricmanager")),
                    "request": stack["packages"],
                    "index": index,
                    "os_repositories_disabled": group["disabled"],
                    "epel_release_url": group["epel"],
                }
            )
    return checks


def _installed_driver(check, packages):
    for item in check["request"]:
        if item.get("follows_driver"):
            installed = ((packages or {}).get(item["name"]) or {}).get("installed")
            if installed:
                return installed
    return None


def _os_repository_note(entry, epel_release_url):
    """What site.yml adds or enables for one entry of ``os_repositories.missing``, and what the mirror must carry."""
    name = OS_REPOSITORY_NAMES.get(entry["id"], entry["id"])
    if entry["kind"] == "apt":
        return "site.yml adds %s beside %s (%s): the mirror must carry %s" % (
            name,
            ", ".join(entry.get("uris") or []),
            ", ".join(entry.get("suites") or []),
            ", ".join(entry.get("components") or ["contrib"]),
        )
    if entry["kind"] == "dnf_repo":
        major = entry.get("major")
        if epel_release_url:
            return (
                "site.yml adds EPEL (dkms for kmod-nvidia-*-dkms) with the epel-release package from %s "
                "(nvidia_stack_epel_release_url): the mirror must carry EPEL %s, and the package's repository file "
                "must point to it" % (epel_release_url, major)
            )
        return (
            "site.yml adds EPEL (dkms for kmod-nvidia-*-dkms) with Fedora's epel-release package (%s): an air-gapped "
            "node needs nvidia_stack_epel_release_url set to the mirror's copy, whose repository file points to the "
            "mirror, and the mirror must carry EPEL %s" % (entry["release_url"], major)
        )
    command = ENABLE_COMMANDS.get(entry.get("tool"), ENABLE_COMMANDS["dnf"])
    return "site.yml enables the disabled repository %s (%s) with '%s %s': the mirror it points to must carry it" % (
        entry.get("repo_id"),
        name,
        command,
        entry.get("repo_id"),
    )


def os_repository_findings(check, os_repositories_read):
    """``(notes, problems)`` for a read's ``index.os_repositories`` (gpu_stack_facts), as this module's docstring
    decides; None (the check did not ask, or an older module) gives nothing."""
    notes, problems = [], []
    disabled = list(check.get("os_repositories_disabled") or [])
    enabled = [host for host in check.get("group_hosts") or [] if host not in disabled]
    for entry in (os_repositories_read or {}).get("missing") or []:
        message = entry.get("message") or os_repositories.describe(entry)
        configure = OS_REPOSITORY_CONFIGURE.get(entry["id"], "it")
        if entry["kind"] == "absent":
            problems.append(
                "%s lacks what NVIDIA's packages depend on, and site.yml cannot add it (%s): configure %s on the "
                "group's nodes and check again" % (check["node"], message, configure)
            )
            continue
        if disabled:
            if entry["kind"] == "dnf_enable":
                fix = "enable %s" % entry["repo_id"]
            elif entry["kind"] == "apt":
                fix = "add the component contrib to the entries of %s" % ", ".join(entry.get("uris") or [])
            else:
                fix = "configure %s" % configure
            problems.append(
                "%s lacks what NVIDIA's packages depend on (%s), and site.yml will not add it: "
                "nvidia_stack_os_repositories_enabled is false for %s; %s on those nodes, or set "
                "nvidia_stack_os_repositories_enabled: true" % (check["node"], message, ", ".join(disabled), fix)
            )
        if enabled:
            note = _os_repository_note(entry, check.get("epel_release_url"))
            notes.append(("for %s: %s" % (", ".join(enabled), note)) if disabled else note)
    return notes, problems


def finding(check, read, sources):
    """What one check found.

    ``read`` is the node's ``gpu_stack`` fact from gpu_stack_facts (with ``index``), or a failure message
    (str) when the read failed; ``sources`` the node's :func:`parse_apt_policy_sources` list, or None where
    it was not read (dnf nodes: a repository that is not configured shows as packages the index lacks).
    The OS repositories the read reports (``index.os_repositories``) add notes and problems as this module's
    docstring says (:func:`os_repository_findings`).
    Returns ``{check, driver_version, packages, repositories, problems, notes}``.
    """
    result = {"check": check, "driver_version": None, "packages": [], "repositories": [], "problems": [], "notes": []}
    repository = _norm(check["repository"])
    if sources is not None and repository not in [_norm(url) for url in sources]:
        result["problems"].append(
            "the repository %s is not in %s's package lists (apt-cache policy lists %s): it is not configured "
            "there, or apt-get update has not run since it was; the mirror check configures nothing: run site.yml "
            "(or configure the repository) and check again"
            % (check["repository"], check["node"], ", ".join(sources) or "no repository")
        )
    if isinstance(read, str) or not isinstance(read, dict):
        result["problems"].append("%s could not read its package index: %s" % (check["node"], read or "no result"))
        return result
    index = read.get("index") or {}
    result["driver_version"] = index.get("driver_version")
    result["packages"] = [item["spec"] for item in index.get("packages") or []]
    result["repositories"] = list(index.get("repositories") or [])
    if result["problems"] and index.get("problems"):
        # the repository is not there: what the index lacks follows from it
        result["problems"][0] += " (the node's index lacks %d of the requested packages)" % len(index["problems"])
    else:
        result["problems"].extend(index.get("problems") or [])
    chosen, listed = result["driver_version"], check.get("matrix_release")
    if chosen and listed and not index.get("problems"):
        try:
            if compare_versions(chosen, listed) > 0:
                result["notes"].append(
                    "driver %s is newer than any release the matrix lists for the branch (newest listed: %s)"
                    % (chosen, listed)
                )
        except ValueError:
            pass
    # apt names a repository by its URL; dnf by its id, which says nothing about the URL
    others = [url for url in result["repositories"] if _norm(url) != repository]
    if others and check.get("package_manager") == "apt":
        result["notes"].append(
            "versions also come from %s, not only from %s: check that apt prefers the NVIDIA repository"
            % (", ".join(others), check["repository"])
        )
    running = _installed_driver(check, read.get("packages"))
    if running and chosen and not package_index.matches(chosen, running):
        result["notes"].append(
            "%s runs %s: site.yml keeps a running release of the branch, rolling_upgrade.yml moves to %s"
            % (check["node"], running, chosen)
        )
    notes, problems = os_repository_findings(check, index.get("os_repositories"))
    result["notes"].extend(notes)
    result["problems"].extend(problems)
    return result


def report(checks, reads, sources):
    """Lines to print and problems that fail the mirror check.

    ``reads`` maps a check's ``number`` to what :func:`finding` takes as ``read``; ``sources`` maps a node
    to its ``apt-cache policy`` text (absent: not read). Returns ``{lines, problems, failed, findings}``;
    ``problems`` has one line per check that found any.
    """
    lines, problems, findings = [], [], []
    last_group = None
    for check in checks:
        text = sources.get(check["node"])
        urls = parse_apt_policy_sources(text) if text is not None else None
        found = finding(check, reads.get(check["number"]), urls)
        findings.append(found)
        if check["group"] != last_group:
            last_group = check["group"]
            lines.append(
                "%s (read on %s; hosts: %s)" % (check["group"], check["node"], ", ".join(check["group_hosts"]))
            )
        lines.append("  %s, for %s:" % (check["label"], ", ".join(check["hosts"])))
        if found["driver_version"] and not found["problems"]:
            lines.append("    driver release %s" % found["driver_version"])
        lines.extend("    %s" % spec for spec in found["packages"])
        if found["repositories"]:
            lines.append("    from %s" % ", ".join(found["repositories"]))
        lines.extend("    note: %s" % note for note in found["notes"])
        lines.extend("    MISSING: %s" % problem for problem in found["problems"])
        if found["problems"]:
            problems.append("%s, %s: %s" % (check["group"], check["label"], "; ".join(found["problems"])))
    return {"lines": lines, "problems": problems, "failed": bool(problems), "findings": findings}
