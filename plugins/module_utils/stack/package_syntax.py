# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a package name and a package version may be, for apt (Debian policy) and for dnf (rpm).

Every check reads the whole text (``re.fullmatch``): a name or a version that ends in a newline is refused,
where a ``$``-anchored match passes it, and an apt preferences file written with it ends its stanza early
(every apt command then exits 100).

* Debian policy 5.6.1, ``Package``: at least two characters, lowercase letters, digits and ``+ - .``,
  starting with a letter or a digit.
* Debian policy 5.6.12, ``Version``: ``[epoch:]upstream_version[-debian_revision]``; the epoch is a number,
  the upstream version starts with a digit and holds letters, digits and ``. + ~ -`` (a hyphen only where a
  revision follows), the revision letters, digits and ``+ . ~``.
* rpm: a name of letters, digits and ``- . _ +`` (no whitespace); ``[epoch:]version[-release]``, the epoch a
  number, version and release letters, digits and ``. _ + ~ ^`` (rpm's own set, without its macro characters).

A version *pattern* (what the matrix gives before the node's index names the exact version, such as
``2.21.5-*+cuda12.4``) may also hold ``*``.
"""

from __future__ import annotations

import re

APT = "apt"
DNF = "dnf"

_DEBIAN_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]+")
_DEBIAN_VERSION = re.compile(r"(?:[0-9]+:)?[0-9](?:[A-Za-z0-9.+~-]*[A-Za-z0-9.+~])?")
_DEBIAN_VERSION_PATTERN = re.compile(r"(?:[0-9]+:)?[0-9*](?:[A-Za-z0-9.+~*-]*[A-Za-z0-9.+~*])?")
_RPM_NAME = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9._+-]*")
_RPM_VERSION = re.compile(r"(?:[0-9]+:)?[A-Za-z0-9._+~^]+(?:-[A-Za-z0-9._+~^]+)?")
_RPM_VERSION_PATTERN = re.compile(r"(?:[0-9]+:)?[A-Za-z0-9._+~^*]+(?:-[A-Za-z0-9._+~^*]+)?")

NAME_RULES = {
    APT: (
        _DEBIAN_NAME,
        "a Debian package name: at least 2 characters, lowercase letters, digits and + - ., "
        "starting with a letter or a digit",
    ),
    DNF: (_RPM_NAME, "an RPM package name: letters, digits and - . _ +, no whitespace"),
}
VERSION_RULES = {
    APT: (
        _DEBIAN_VERSION,
        _DEBIAN_VERSION_PATTERN,
        "a Debian version [epoch:]upstream[-revision]: a number and a colon for the epoch, an upstream version "
        "starting with a digit, then letters, digits and . + ~ - only, no whitespace (for example 580.126.09-1)",
    ),
    DNF: (
        _RPM_VERSION,
        _RPM_VERSION_PATTERN,
        "an RPM version [epoch:]version[-release]: letters, digits and . _ + ~ ^ only, no whitespace "
        "(for example 3:580.126.09-1.el9)",
    ),
}


def _manager(manager):
    if manager not in (APT, DNF):
        raise ValueError("package manager %r: expected apt or dnf" % (manager,))
    return manager


def name_problem(name, manager, glob=False) -> str | None:
    """Why ``name`` is not a package name for ``manager`` (``apt`` or ``dnf``), or None; ``glob`` also allows
    ``*`` and ``?`` (each standing for a name's character)."""
    pattern, rule = NAME_RULES[_manager(manager)]
    text = name.replace("*", "a").replace("?", "a") if glob and isinstance(name, str) else name
    if isinstance(text, str) and pattern.fullmatch(text):
        return None
    return "%r is not %s%s" % (name, rule, " (* and ? allowed)" if glob else "")


def version_problem(version, manager, pattern=False) -> str | None:
    """Why ``version`` is not a package version for ``manager``, or None; ``pattern`` also allows ``*``."""
    exact, wildcard, rule = VERSION_RULES[_manager(manager)]
    if isinstance(version, str) and (wildcard if pattern else exact).fullmatch(version):
        return None
    return "%r is not %s%s" % (version, rule, " (* allowed)" if pattern else "")
