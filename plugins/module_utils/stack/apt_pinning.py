# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Apt pinning for the NVIDIA stack: preferences, holds and the unattended-upgrades blacklist.

Everything here is text in, plain data out, so the ``package_pin`` and
``gpu_stack_facts`` modules stay thin and these rules are tested on fixtures.

Facts this module relies on (re-checked at the source):

- apt_preferences(5): a stanza is ``Package:`` (space separated names, globs
  allowed), ``Pin: version <version>`` and ``Pin-Priority:``; stanzas are
  separated by blank lines; a priority >= 1000 makes apt keep (or downgrade to)
  that version, so an ``apt-get upgrade`` cannot move a pinned package.
- unattended-upgrades matches every ``Unattended-Upgrade::Package-Blacklist``
  entry with Python ``re.match(entry, package_name)`` (mvo5/unattended-upgrades,
  ``is_pkgname_in_blacklist``): entries are regular expressions anchored at the
  start only, so an exact name needs a trailing ``$`` and ``.``/``+`` need a
  backslash. apt configuration lists from several files are appended, so a
  drop-in adds to ``50unattended-upgrades`` rather than replacing it.
- ``dpkg-query -W -f='${Package}\\t${Version}\\t${Status}\\n'``: ``${Status}`` is
  ``<want> <error-flag> <state>``; want ``hold`` is a hold, state ``installed``
  is an installed package.
"""

from __future__ import annotations

import fnmatch
import re

MANAGED_HEADER = "managed by gpuops.cluster"
MIN_PRIORITY = 1001
BLACKLIST_KEY = "Unattended-Upgrade::Package-Blacklist"

# A Debian package name (policy 5.6.1) or an apt glob over one.
_NAME_RE = re.compile(r"^[a-z0-9*?][a-z0-9.+*?-]*$")
# A Debian version: optional epoch, no whitespace.
_VERSION_RE = re.compile(r"^[0-9A-Za-z.+~:*-]+$")
_REGEX_SPECIAL = set(".^$+?*()[]{}|\\")
# A glob of the stack's pins that would also match another product's packages leaves them out of the
# unattended-upgrades entry: the driver's libnvidia-* (its libraries on Debian) is not libnvidia-container1 and
# libnvidia-container-tools, the NVIDIA Container Toolkit's (NVIDIA/libnvidia-container), pinned and blacklisted by
# their own exact names only where the stack has the toolkit (gpuops_stack.container_toolkit).
GLOB_LEAVES_OUT = {"libnvidia-": "container"}


class PinningError(ValueError):
    """An input that cannot be turned into a correct apt configuration."""


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise PinningError(f"{name!r} is not a Debian package name or glob (lowercase letters, digits, '.+-', '*?')")
    return name


def _check_version(version: str, what: str) -> str:
    if not isinstance(version, str) or not _VERSION_RE.fullmatch(version):
        raise PinningError(f"{what}: {version!r} is not an exact Debian version (for example 550.127.08-1)")
    return version


def normalize_pins(pins: list[dict] | None = None, packages: list[dict] | None = None) -> list[dict]:
    """Merge explicit ``pins`` and single ``packages`` into sorted ``{component, names, version}`` pins.

    ``packages`` entries (``{name, version[, component]}``) become one pin each
    unless a pin already names them. Names are checked, de-duplicated and
    sorted so the rendered file never depends on input order. A name pinned to
    two different versions is an error, not a silent choice.
    """
    merged: dict[tuple[str, str], set[str]] = {}
    version_of: dict[str, str] = {}

    def add(component: str, names: list[str], version: str) -> None:
        _check_version(version, f"pin for {', '.join(names) or component}")
        for name in names:
            _check_name(name)
            previous = version_of.get(name)
            if previous is not None and previous != version:
                raise PinningError(f"{name} is pinned to both {previous} and {version}: request one version")
            version_of[name] = version
        merged.setdefault((component, version), set()).update(names)

    for pin in pins or []:
        names = list(pin.get("names") or [])
        if not names:
            raise PinningError(f"pin {pin!r} has no names")
        add(str(pin.get("component") or ""), names, pin.get("version"))
    for package in packages or []:
        name = package.get("name")
        if name in version_of and version_of[name] == package.get("version"):
            continue
        add(str(package.get("component") or ""), [name], package.get("version"))

    result = [
        {"component": component, "names": sorted(names), "version": version}
        for (component, version), names in merged.items()
    ]
    return sorted(result, key=lambda pin: (pin["component"], pin["names"], pin["version"]))


def render_preferences(pins: list[dict], priority: int = MIN_PRIORITY) -> str:
    """Render an apt preferences file: a header, then one stanza per pin (deterministic)."""
    if not isinstance(priority, int) or isinstance(priority, bool) or priority < MIN_PRIORITY:
        raise PinningError(
            f"Pin-Priority {priority!r} is too low: use {MIN_PRIORITY} or more so apt keeps the exact version"
        )
    lines = [
        f"# {MANAGED_HEADER}: exact versions of the NVIDIA stack.",
        "# Changes here are overwritten; change the requested stack instead.",
    ]
    for pin in normalize_pins(pins):
        lines.append("")
        if pin["component"]:
            lines.append(f"# component: {pin['component']}")
        lines.append("Package: " + " ".join(pin["names"]))
        lines.append(f"Pin: version {pin['version']}")
        lines.append(f"Pin-Priority: {priority}")
    return "\n".join(lines) + "\n"


def parse_preferences(text: str) -> list[dict]:
    """Parse an apt preferences file into ``{component, names, version, priority}`` stanzas.

    Stanzas that pin something other than a version (``release``, ``origin``)
    are returned with ``version`` None so callers can tell them apart.
    """
    stanzas: list[dict] = []
    current: dict = {}
    component = ""

    def flush() -> None:
        nonlocal current, component
        if "names" in current:
            current.setdefault("version", None)
            current.setdefault("priority", None)
            current["component"] = component
            stanzas.append(current)
        current = {}
        component = ""

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            flush()
            continue
        if line.startswith("#"):
            match = re.match(r"#\s*component:\s*(\S+)", line)
            if match:
                component = match.group(1)
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        value = value.strip()
        if key == "package":
            current["names"] = value.split()
        elif key == "pin":
            kind, _sep, rest = value.partition(" ")
            current["version"] = rest.strip() if kind == "version" else None
        elif key == "pin-priority":
            try:
                current["priority"] = int(value)
            except ValueError:
                current["priority"] = None
    flush()
    return stanzas


def pinned_versions(stanzas: list[dict]) -> dict[str, str]:
    """Map every exact name or glob in version-pin stanzas to its pinned version."""
    result: dict[str, str] = {}
    for stanza in stanzas:
        if stanza.get("version") is None:
            continue
        for name in stanza["names"]:
            result[name] = stanza["version"]
    return result


def pin_for(name: str, pinned: dict[str, str]) -> str | None:
    """The version pinned for ``name``: an exact entry first, else the first matching glob."""
    if name in pinned:
        return pinned[name]
    for pattern in sorted(pinned):
        if any(ch in pattern for ch in "*?") and fnmatch.fnmatchcase(name, pattern):
            return pinned[pattern]
    return None


def blacklist_entry(name: str) -> str:
    """The unattended-upgrades regex matching exactly ``name`` (an apt glob becomes ``.*``/``.``)."""
    _check_name(name)
    out = []
    prefix = name.split("*", 1)[0] if "*" in name else None
    for ch in name:
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch in _REGEX_SPECIAL:
            out.append("\\" + ch)
        else:
            out.append(ch)
        if prefix is not None and prefix in GLOB_LEAVES_OUT and len(out) == len(prefix):
            out.append("(?!%s)" % GLOB_LEAVES_OUT[prefix])
    return "".join(out) + "$"


def render_unattended_blacklist(names: list[str], patterns: list[str] | None = None) -> str:
    """Render the unattended-upgrades drop-in that blacklists ``names`` exactly plus extra ``patterns``.

    ``patterns`` are regular expressions used as given (for example ``nvidia-``
    for every package whose name starts with it); each must compile.
    """
    entries = {blacklist_entry(name) for name in names}
    for pattern in patterns or []:
        if not pattern or '"' in pattern or any(ch.isspace() for ch in pattern):
            raise PinningError(f"blacklist pattern {pattern!r} must be a non-empty regex without quotes or spaces")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise PinningError(f"blacklist pattern {pattern!r} is not a valid regular expression: {exc}") from exc
        entries.add(pattern)
    lines = [
        f"// {MANAGED_HEADER}: keep unattended-upgrades away from the pinned NVIDIA stack.",
        "// Entries are Python regular expressions matched at the start of the package name.",
        BLACKLIST_KEY + " {",
    ]
    lines.extend(f'    "{entry}";' for entry in sorted(entries))
    lines.append("};")
    return "\n".join(lines) + "\n"


def parse_unattended_blacklist(text: str) -> list[str]:
    """Entries of every ``Unattended-Upgrade::Package-Blacklist`` block in an apt.conf text."""
    without_comments = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    without_comments = "\n".join(re.sub(r"(^|\s)//.*$", "", line) for line in without_comments.splitlines())
    entries: list[str] = []
    for block in re.finditer(re.escape(BLACKLIST_KEY) + r"\s*\{(.*?)\}\s*;", without_comments, flags=re.S):
        entries.extend(re.findall(r'"([^"]*)"\s*;', block.group(1)))
    return entries


def blacklist_covers(name: str, entries: list[str]) -> bool:
    """Whether unattended-upgrades would skip ``name`` given blacklist ``entries`` (its own ``re.match``)."""
    for entry in entries:
        try:
            if re.match(entry, name):
                return True
        except re.error:
            continue
    return False


def parse_dpkg_query(text: str) -> dict[str, dict]:
    """Parse ``dpkg-query -W -f='${Package}\\t${Version}\\t${Status}\\n'`` output.

    Returns ``{name: {version, installed, held, status}}``; ``version`` is None
    unless the package is installed. dpkg-query prints one line per
    architecture of a multi-arch package: an installed line wins.
    """
    result: dict[str, dict] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise PinningError(f"unexpected dpkg-query line {line!r}: expected name, version and status")
        name, version, status = (part.strip() for part in parts)
        words = status.split()
        want = words[0] if words else ""
        state = words[-1] if words else ""
        installed = state == "installed"
        entry = {
            "version": version if installed and version else None,
            "installed": installed,
            "held": want == "hold",
            "status": status,
        }
        if name in result and result[name]["installed"] and not installed:
            continue
        result[name] = entry
    return result


def parse_showhold(text: str) -> set[str]:
    """Package names from ``apt-mark showhold`` (one a line; a ``:arch`` suffix is dropped)."""
    return {line.strip().split(":", 1)[0] for line in text.splitlines() if line.strip()}


def managed_names(pins: list[dict]) -> list[str]:
    """Exact (non-glob) names in ``pins``: the ones apt-mark can hold."""
    return sorted({name for pin in pins for name in pin["names"] if not any(ch in name for ch in "*?")})


def plan_holds(desired: list[str], held: set[str], owned: list[str], hold: bool) -> dict[str, list[str]]:
    """Which names to ``apt-mark hold`` and ``unhold``, each one sorted list for one call.

    ``desired``: exact names the request pins. ``owned``: names and globs this
    collection pinned before or pins now (the old preferences file plus the
    request), so a package dropped from the stack, or every package when
    ``hold`` is false, loses its hold. Holds on packages we do not own are
    never touched.
    """
    held = set(held)
    desired_set = set(desired) if hold else set()

    def is_owned(name: str) -> bool:
        return any(name == pattern or fnmatch.fnmatchcase(name, pattern) for pattern in owned)

    to_hold = sorted(desired_set - held)
    to_unhold = sorted(name for name in held if name not in desired_set and is_owned(name))
    return {"hold": to_hold, "unhold": to_unhold}
