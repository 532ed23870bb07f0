# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The OS repositories NVIDIA's packages depend on, and which of them a node lacks.

NVIDIA's repository is not enough on two families (``../shared/reference/nvidia-stack-facts.md``,
"Checked against NVIDIA's package indexes and install scripts"):

* Debian: NVIDIA's Debian install instructions enable Debian's ``contrib`` component; the Debian
  packaging of the driver depends on packages of ``contrib`` (``nvidia-support``,
  ``nvidia-installer-cleanup``, ``glx-alternative-nvidia``). Ubuntu needs nothing more.
* RHEL, Rocky, Alma 8 and 9: ``kmod-nvidia-*-dkms`` needs ``dkms`` from EPEL ("nothing provides dkms
  needed by kmod-nvidia-latest-dkms"), and EPEL's packages need CRB (CodeReady Linux Builder;
  ``powertools`` on Rocky and Alma 8, ``codeready-builder-for-rhel-<major>-<arch>-rpms`` on RHEL; Fedora's
  EPEL page, as quoted in github.com/AlmaLinux/wiki/issues/232). Every RHEL driver rule of the matrix is a
  DKMS one. EPEL comes from ``epel-release``, at
  ``https://dl.fedoraproject.org/pub/epel/epel-release-latest-<major>.noarch.rpm`` (the URL Checkmk's RHEL
  install guide and the ansible-role-epel default give); CRB is enabled as EPEL's own ``crb`` script does
  (epel-release sources, mirrored at github.com/codacy-open-source-projects-scans/epel-release, file ``crb``):
  ``subscription-manager repos --enable <id>`` on RHEL, ``dnf config-manager --enable <id>`` elsewhere.

:func:`parse_apt_policy` reads ``apt-cache policy`` (no package: the package files apt uses),
:func:`parse_apt_sources` the ``Signed-By`` of apt's source entries (one-line ``.list`` and deb822 ``.sources``),
:func:`parse_repo_files` the ``/etc/yum.repos.d/*.repo`` files (id and ``enabled``), and
:func:`missing` says what the node lacks for the resolved stack's OS (``os_id`` of the matrix:
``debian12``, ``rhel9``): each entry ``{id, kind, ...}`` the role adds or enables, or
``kind: absent`` when there is nothing to enable (the message says what to configure).

Pure Python, no dependencies, runs on managed-node Python >= 3.9.
"""

from __future__ import annotations

import configparser
import re

# Installed by Debian's debian-archive-keyring package (present in the lab's Debian 12 and 13 images).
DEBIAN_ARCHIVE_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# Repository ids that are CRB, as EPEL's own crb helper script (epel-release) finds them: crb (Rocky, Alma 9),
# powertools (8), codeready-builder-for-rhel-<major>-<arch>-rpms (RHEL); not their debug, source, EUS or cloud ones.
CRB_ID = re.compile(r"crb|powertools|codeready", re.I)
CRB_OTHER = re.compile(r"debug|source|eus|virt|rhui", re.I)
# Fedora's epel-release package (EPEL's repository file and key) for a RHEL major release, which the nvidia_stack
# role installs where nvidia_stack_epel_release_url names no mirror's copy (the source is cited above).
EPEL_RELEASE_URL = "https://dl.fedoraproject.org/pub/epel/epel-release-latest-%s.noarch.rpm"
# EPEL's signing key for that major release, which the role imports before it installs epel-release: dnf (and
# Ansible's dnf module) checks a package given by URL against the keys rpm holds, and a node without EPEL has none of
# EPEL's ("Failed to validate GPG signature for epel-release-..."). The URL where Fedora publishes it, as images that
# import it before installing EPEL use it (percona-server's ps-8.0 Dockerfile: RPM-GPG-KEY-EPEL-9).
EPEL_KEY_URL = "https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-%s"
# EPEL's main repository; not its testing, debug or source repositories.
EPEL_ID = re.compile(r"^epel(-\d+)?(-[a-z0-9_]+)?$", re.I)
EPEL_OTHER = re.compile(r"(testing|debug|source|next|cisco)", re.I)

# " 500 <url> <suite>/<component> <arch> Packages", or " 500 <url>  Packages" for a flat repository.
_PACKAGE_FILE = re.compile(r"^\s*-?\d+\s+(\S+)\s+(?:(\S+)\s+\S+\s+)?Packages\s*$")


class RepositoryReadError(ValueError):
    """Output or files that do not look like what the parser knows."""


def parse_apt_policy(text: str) -> list[dict]:
    """``apt-cache policy`` (no package) to ``[{url, suite, component, origin, codename}]``, one per package file.

    The package-file line gives the URL and ``suite/component`` (empty for a flat repository such as NVIDIA's);
    its ``release`` line gives ``o=`` (origin), ``n=`` (codename) and ``c=`` (component). ``/var/lib/dpkg/status``
    is not a repository and is left out. Only the ``Package files:`` section is read.
    """
    if "Package files:" not in text:
        raise RepositoryReadError("apt-cache policy printed no 'Package files:' section (run it in the C locale)")
    section = text.split("Package files:", 1)[1].split("Pinned packages:", 1)[0]
    entries: list[dict] = []
    for line in section.splitlines():
        found = _PACKAGE_FILE.match(line)
        if found:
            url, where = found.groups()
            suite, _sep, component = (where or "").partition("/")
            entries.append({"url": url, "suite": suite, "component": component, "origin": None, "codename": None})
            continue
        words = line.split(None, 1)
        if entries and len(words) == 2 and words[0] == "release":
            fields = dict(item.split("=", 1) for item in words[1].split(",") if "=" in item)
            entries[-1]["origin"] = fields.get("o") or None
            entries[-1]["codename"] = fields.get("n") or None
            entries[-1]["component"] = fields.get("c") or entries[-1]["component"]
    return entries


def _one_line_entries(text: str) -> list[dict]:
    entries = []
    for raw in text.splitlines():
        found = re.match(r"^(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)", raw.split("#", 1)[0].strip())
        if not found:
            continue
        options = dict(item.split("=", 1) for item in (found.group(2) or "").split() if "=" in item)
        entries.append(
            {"uris": [found.group(3)], "suites": [found.group(4)], "signed_by": options.get("signed-by") or None}
        )
    return entries


def _deb822_entries(text: str) -> list[dict]:
    entries = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        name = None
        for line in stanza.splitlines():
            if line.startswith("#"):
                continue
            if line[:1] in (" ", "\t") and name:
                fields[name] += "\n" + line  # a continuation line (an embedded key block)
                continue
            key, sep, value = line.partition(":")
            if sep:
                name = key.strip().lower()
                fields[name] = value.strip()
        if not fields.get("uris") or fields.get("enabled", "yes").lower() == "no":
            continue
        entries.append(
            {
                "uris": fields["uris"].split(),
                "suites": fields.get("suites", "").split(),
                "signed_by": fields.get("signed-by", "").strip() or None,
            }
        )
    return entries


def parse_apt_sources(texts) -> list[dict]:
    """``[{uris, suites, signed_by}]`` from ``(name, text)`` of apt's source files, in the order given.

    ``*.list`` (and ``sources.list``) are one-line entries, ``deb [signed-by=<value> ...] <uri> <suite> ...``;
    ``*.sources`` are deb822 stanzas with ``URIs``, ``Suites`` and ``Signed-By`` (a path, fingerprints, or an
    embedded key block kept as written); a stanza with ``Enabled: no`` is left out. ``signed_by`` is None where
    the entry sets none (apt then trusts its global keys).
    """
    entries: list[dict] = []
    for name, text in texts:
        entries.extend(_deb822_entries(text) if name.endswith(".sources") else _one_line_entries(text))
    return entries


def _signed_by(sources: list[dict], url: str, suite: str):
    """The ``Signed-By`` the node's own entries give ``url`` and ``suite``, or None where none sets one.

    apt refuses two entries for one URL and suite with different ``Signed-By`` values ("Conflicting values set
    for option Signed-By regarding source ..."), and accepts one that sets none beside one that sets it.
    """
    for entry in sources:
        urls = [uri.rstrip("/") for uri in entry["uris"]]
        if entry["signed_by"] and url.rstrip("/") in urls and suite in entry["suites"]:
            return entry["signed_by"]
    return None


def parse_repo_files(texts) -> dict[str, bool]:
    """``{repository id: enabled}`` from ``(name, text)`` of each ``.repo`` file (INI; ``enabled`` defaults to 1)."""
    repos: dict[str, bool] = {}
    for name, text in texts:
        parser = configparser.RawConfigParser(strict=False)
        try:
            parser.read_string(text, source=name)
        except configparser.Error as exc:
            raise RepositoryReadError("cannot read %s: %s" % (name, str(exc).splitlines()[0])) from exc
        for section in parser.sections():
            value = parser.get(section, "enabled", fallback="1").strip().lower()
            repos[section] = value in ("1", "yes", "true", "on")
    return repos


def _debian_contrib(entries: list[dict], keyring, sources: list[dict]) -> list[dict]:
    debian = [entry for entry in entries if entry["origin"] == "Debian"]
    if any(entry["component"] == "contrib" for entry in debian):
        return []
    # one entry per archive URL and Signed-By: the node's own for that URL and suite, else the Debian keyring
    suites: dict[tuple, list[str]] = {}
    for entry in debian:
        if entry["component"] == "main" and entry["suite"]:
            signed_by = _signed_by(sources, entry["url"], entry["suite"]) or keyring
            found = suites.setdefault((entry["url"], signed_by), [])
            if entry["suite"] not in found:
                found.append(entry["suite"])
    if not suites:
        return [
            {
                "id": "contrib",
                "kind": "absent",
                "why": "apt knows no Debian archive (origin Debian, component main) to add contrib to",
            }
        ]
    return [
        {
            "id": "contrib",
            "kind": "apt",
            "name": "gpuops-debian-contrib" + ("" if n == 0 else "-%d" % (n + 1)),
            "uris": [url],
            "suites": found,
            "components": ["contrib"],
            "signed_by": signed_by,
        }
        for n, ((url, signed_by), found) in enumerate(suites.items())
    ]


def _rhel(repos: dict[str, bool], major: str, arch: str) -> list[dict]:
    found = []
    epel = [rid for rid in repos if EPEL_ID.match(rid) and not EPEL_OTHER.search(rid)]
    if not any(repos[rid] for rid in epel):
        if epel:
            found.append({"id": "epel", "kind": "dnf_enable", "repo_id": sorted(epel)[0], "tool": "dnf"})
        else:
            found.append(
                {
                    "id": "epel",
                    "kind": "dnf_repo",
                    "name": "epel",
                    "major": major,
                    "arch": arch,
                    "release_url": EPEL_RELEASE_URL % major,
                    "key_url": EPEL_KEY_URL % major,
                }
            )
    crb = sorted(rid for rid in repos if CRB_ID.search(rid) and not CRB_OTHER.search(rid))
    if not any(repos[rid] for rid in crb):
        if crb:
            tool = "subscription-manager" if crb[0].lower().startswith("codeready-builder-for-rhel") else "dnf"
            found.append({"id": "crb", "kind": "dnf_enable", "repo_id": crb[0], "tool": tool})
        else:
            found.append(
                {
                    "id": "crb",
                    "kind": "absent",
                    "why": "no CRB repository is configured (crb, powertools or codeready-builder-for-rhel-%s-%s-rpms)"
                    % (major, arch),
                }
            )
    return found


def missing(
    os_id: str, apt_entries=None, repos=None, arch: str = "x86_64", keyring=None, apt_sources=None
) -> list[dict]:
    """What the node lacks of the OS repositories the stack of ``os_id`` needs; empty when nothing.

    ``apt_entries`` are :func:`parse_apt_policy`'s (apt nodes), ``repos`` :func:`parse_repo_files`'s (dnf
    nodes). Debian: ``contrib`` added beside each Debian archive the node uses, for the suites it uses
    (``kind: apt``, ``uris``, ``suites``, ``components``, ``signed_by``: the ``Signed-By`` the node's own entry for
    that archive and suite sets (``apt_sources``, :func:`parse_apt_sources`), so apt sees no conflict, a mirror
    signed with its own key included; where none sets one, ``keyring``, the Debian archive keyring when the node
    has it, else None for apt's trusted keys). RHEL family: EPEL (``kind: dnf_repo`` to add, or
    ``dnf_enable`` for a configured but disabled one) and CRB (``dnf_enable`` with the ``tool`` that enables it).
    ``kind: absent``: nothing on the node to enable (``why``).
    """
    os_id = str(os_id or "")
    if os_id.startswith("debian"):
        return _debian_contrib(apt_entries or [], keyring, apt_sources or [])
    found = re.match(r"^rhel(\d+)$", os_id)
    if found:
        return _rhel(repos or {}, found.group(1), arch)
    return []


def describe(entry: dict) -> str:
    """One missing repository in an operator's words."""
    if entry["id"] == "contrib":
        what = "Debian's contrib component"
    elif entry["id"] == "epel":
        what = "EPEL (dkms for kmod-nvidia-*-dkms)"
    else:
        what = "CRB (CodeReady Linux Builder / PowerTools, which EPEL's packages need)"
    if entry["kind"] == "absent":
        return "%s: %s" % (what, entry["why"])
    if entry["kind"] == "dnf_enable":
        return "%s: repository %s is disabled" % (what, entry["repo_id"])
    return "%s is not configured" % what
