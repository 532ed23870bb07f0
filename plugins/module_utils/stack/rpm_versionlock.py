# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dnf versionlock entries, ``rpm -q`` output and dnf module streams for the RHEL family.

Facts this module relies on (re-checked at the source,
rpm-software-management/dnf-plugins-core ``plugins/versionlock.py``):

- The lock list (``/etc/dnf/plugins/versionlock.list`` by default) holds one
  spec a line; ``#`` lines and blank lines are ignored; a leading ``!`` makes
  an exclude instead of a lock.
- ``dnf versionlock add`` writes ``name-epoch:version-release.*``
  (``pkgtup2spec``): the epoch is always written, ``0:`` included, and the
  arch is a glob.
- Locking a name excludes every other version of that name, so two lock lines
  for one name allow both versions: a name must have exactly one lock.

The module that uses this owns a marked block in the list and removes other
lock lines for the names it manages; lines about other packages are kept.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.stack import package_syntax

BLOCK_BEGIN = "# BEGIN managed by gpuops.cluster (NVIDIA stack versionlocks)"
BLOCK_END = "# END managed by gpuops.cluster"
RPM_QUERY_FORMAT = "%{NAME}\\t%{EPOCHNUM}\\t%{VERSION}\\t%{RELEASE}\\n"

_NAME_RE = package_syntax.NAME_RULES[package_syntax.DNF][0]  # rpm's name characters, one source
_PART_RE = re.compile(r"^[A-Za-z0-9._+~^]+$")
_NOT_INSTALLED_RE = re.compile(r"^package (\S+) is not installed$")
_MODULE_ROW_RE = re.compile(r"^(\S+)\s+(\S+?)((?:\s*\[[a-z]\])+)(?:\s|$)")


class VersionlockError(ValueError):
    """An input that cannot be turned into a correct versionlock entry or dnf command."""


def split_evr(evr: str) -> dict:
    """Split ``[epoch:]version[-release]`` into ``{epoch, version, release}`` (missing parts None)."""
    if not isinstance(evr, str) or not evr.strip():
        raise VersionlockError(f"{evr!r} is not an RPM version")
    epoch = None
    rest = evr.strip()
    if ":" in rest:
        epoch, rest = rest.split(":", 1)
        if not epoch.isdigit():
            raise VersionlockError(f"{evr!r}: the epoch must be a number")
    version, sep, release = rest.rpartition("-")
    if not sep:
        version, release = rest, None
    for part in (version, release):
        if part is not None and not _PART_RE.fullmatch(part):
            raise VersionlockError(f"{evr!r} is not an RPM [epoch:]version-release")
    return {"epoch": epoch, "version": version, "release": release}


def lock_entry(name: str, evr: str) -> str:
    """The versionlock spec for an exact package: ``name-epoch:version-release.*``."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise VersionlockError(f"{name!r} is not an RPM package name")
    parts = split_evr(evr)
    if parts["release"] is None:
        raise VersionlockError(
            f"{name} {evr}: a versionlock needs the release too (for example 3:550.127.08-1.el9); "
            "take the full version from the repository (dnf list --showduplicates NAME)"
        )
    epoch = parts["epoch"] or "0"
    return f"{name}-{epoch}:{parts['version']}-{parts['release']}.*"


def parse_lock_entry(entry: str) -> dict | None:
    """Parse one lock-list line into ``{name, epoch, version, release, exclude}``; None if it is no NEVRA.

    Handles what ``dnf versionlock`` writes (``name-E:V-R.*``) and the older
    ``name-V-R.arch`` form without an epoch.
    """
    spec = entry.strip()
    exclude = spec.startswith("!")
    spec = spec.lstrip("!")
    if not spec or spec.startswith("#"):
        return None
    # drop the arch: ".*" or a known arch suffix
    match = re.match(r"^(.*)\.(\*|x86_64|aarch64|noarch|i686|ppc64le|s390x|src)$", spec)
    if match:
        spec = match.group(1)
    name_version, sep, release = spec.rpartition("-")
    if not sep:
        return None
    name, sep, version = name_version.rpartition("-")
    if not sep or not name:
        return None
    epoch = None
    if ":" in version:
        epoch, version = version.split(":", 1)
    return {"name": name, "epoch": epoch, "version": version, "release": release, "exclude": exclude}


def parse_versionlock_list(text: str) -> dict:
    """Split a lock list into ``{managed: [specs], foreign: [lines]}``.

    ``managed``: specs inside the gpuops block. ``foreign``: every other line
    (comments included) in order, so rendering keeps what others wrote.
    """
    managed: list[str] = []
    foreign: list[str] = []
    inside = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == BLOCK_BEGIN:
            inside = True
            continue
        if stripped == BLOCK_END:
            inside = False
            continue
        if inside:
            if stripped and not stripped.startswith("#"):
                managed.append(stripped)
        else:
            foreign.append(line)
    return {"managed": managed, "foreign": foreign}


def desired_entries(packages: list[dict]) -> list[str]:
    """Sorted lock specs for ``[{name, version}]``; one version per name."""
    seen: dict[str, str] = {}
    for package in packages:
        name, version = package.get("name"), package.get("version")
        if name in seen and seen[name] != version:
            raise VersionlockError(f"{name} is requested at both {seen[name]} and {version}: request one version")
        seen[name] = version
    return sorted(lock_entry(name, version) for name, version in seen.items())


def render_versionlock_list(current_text: str, entries: list[str], owned_names: list[str] | None = None) -> str:
    """The lock list with the gpuops block set to ``entries`` (no block when empty).

    Lines outside the block that lock or exclude a name in ``entries`` or in
    ``owned_names`` are dropped: a second lock for one name would let both
    versions in.
    """
    parsed = parse_versionlock_list(current_text)
    names = {parse_lock_entry(entry)["name"] for entry in entries}
    names.update(owned_names or [])
    kept: list[str] = []
    for line in parsed["foreign"]:
        entry = parse_lock_entry(line)
        if entry is not None and entry["name"] in names:
            continue
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    lines = list(kept)
    if entries:
        if lines:
            lines.append("")
        lines.append(BLOCK_BEGIN)
        lines.extend(sorted(entries))
        lines.append(BLOCK_END)
    return ("\n".join(lines) + "\n") if lines else ""


def locked_versions(text: str) -> dict[str, str]:
    """``{name: "E:V-R"}`` for every lock (not exclude) line in a lock list, managed or not."""
    parsed = parse_versionlock_list(text)
    result: dict[str, str] = {}
    for line in parsed["managed"] + parsed["foreign"]:
        entry = parse_lock_entry(line)
        if entry is None or entry["exclude"]:
            continue
        evr = f"{entry['version']}-{entry['release']}"
        if entry["epoch"] is not None:
            evr = f"{entry['epoch']}:{evr}"
        result[entry["name"]] = evr
    return result


def parse_rpm_query(text: str) -> dict[str, dict]:
    """Parse ``rpm -q --qf RPM_QUERY_FORMAT NAMES`` output.

    Returns ``{name: {epoch, version, release, evr} | None}``; None for
    "package X is not installed". With several installed versions (kernel-like
    packages) the last line wins, which is rpm's newest-installed order.
    """
    result: dict[str, dict | None] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        missing = _NOT_INSTALLED_RE.match(line.strip())
        if missing:
            result[missing.group(1)] = None
            continue
        parts = line.split("\t")
        if len(parts) != 4:
            raise VersionlockError(f"unexpected rpm -q line {line!r}: expected name, epoch, version and release")
        name, epoch, version, release = (part.strip() for part in parts)
        if epoch in ("", "(none)"):
            epoch = "0"
        evr = f"{version}-{release}" if epoch == "0" else f"{epoch}:{version}-{release}"
        result[name] = {"epoch": epoch, "version": version, "release": release, "evr": evr}
    return result


def evr_matches(requested: str, installed: str | None) -> bool:
    """Whether an installed ``[E:]V-R`` satisfies a requested one; parts the request leaves out match anything."""
    if installed is None:
        return False
    want = split_evr(requested)
    have = split_evr(installed)
    if want["epoch"] is not None and want["epoch"] != (have["epoch"] or "0"):
        return False
    if want["version"] != have["version"]:
        return False
    return want["release"] is None or want["release"] == have["release"]


def parse_module_list(text: str) -> dict[str, str]:
    """``{module: enabled stream}`` from ``dnf module list`` output.

    A row is ``name  stream [flags]  profiles  summary``; the flags right after
    the stream (``[d]``, ``[e]``, ``[x]``, ``[i]``) say whether it is enabled.
    Header, repository and hint lines never match.
    """
    result: dict[str, str] = {}
    for line in text.splitlines():
        match = _MODULE_ROW_RE.match(line)
        if match and "[e]" in match.group(3) and match.group(1) not in ("Name", "Hint:"):
            result[match.group(1)] = match.group(2)
    return result


def plan_module_stream(stream_spec: str, enabled: dict[str, str]) -> list[list[str]]:
    """dnf argv lists that make ``module:stream`` the enabled stream (empty when it already is).

    No stream enabled: ``dnf -y module enable``. Another stream enabled:
    ``dnf -y module switch-to`` (dnf >= 4.4; it also syncs installed packages
    to the new stream, which an exact-version install then overrides).
    """
    module, sep, stream = stream_spec.partition(":")
    if (
        not sep
        or not module
        or not stream
        or not _NAME_RE.fullmatch(module)
        or not re.fullmatch(r"[\w.+-]+", stream, re.ASCII)
    ):
        raise VersionlockError(f"{stream_spec!r} is not a dnf module stream (for example nvidia-driver:550-dkms)")
    current = enabled.get(module)
    if current == stream:
        return []
    if current is None:
        return [["dnf", "-y", "module", "enable", stream_spec]]
    return [["dnf", "-y", "module", "switch-to", stream_spec]]


def plan_versionlock_commands(current: list[str], desired: list[str]) -> list[list[str]]:
    """The ``dnf versionlock`` argv lists that turn lock specs ``current`` into ``desired``.

    For operators who prefer the plugin's own commands to the file the module
    writes: one ``delete`` for every stale spec, one ``add --raw`` for the new
    ones (``--raw`` keeps the spec exactly as given instead of resolving it).
    """
    stale = sorted(set(current) - set(desired))
    new = sorted(set(desired) - set(current))
    commands: list[list[str]] = []
    if stale:
        commands.append(["dnf", "versionlock", "delete", *stale])
    if new:
        commands.append(["dnf", "versionlock", "add", "--raw", *new])
    return commands
