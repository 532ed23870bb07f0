# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse and order NVIDIA driver, CUDA, NCCL and package version strings.

Pure Python, no dependencies, runs on managed-node Python >= 3.9.

* NVIDIA driver versions: ``550.127.08``, ``570.26``, or a branch ``550`` (``R550``).
* CUDA versions: ``12.4`` (a minor release) or ``12.4.1`` (an update of it).
* NCCL versions: ``2.21.5``.
* Package versions as dpkg and rpm print them: ``1:4.1.1-1``,
  ``2.21.5-1+cuda12.4``, ``550.127.08-0ubuntu1``, ``3:550.127.08-1.el9``.

Every version string is ordered with the dpkg algorithm (epoch, then upstream
version, then revision; runs of digits compare as numbers, ``~`` sorts before
everything, even the end of the string). For the strings NVIDIA ships this
gives the same order as rpm, and it orders plain driver versions correctly
(``570.26 < 570.124.06``, ``550.127.08 == 550.127.8``).
"""

from __future__ import annotations

import re

__all__ = [
    "compare_versions",
    "cuda_dashed",
    "driver_branch",
    "format_version",
    "parse_cuda",
    "parse_driver",
    "parse_nccl",
    "parse_package_version",
    "version_matches",
]

_DRIVER_RE = re.compile(r"[Rr]?(\d{3,4})(?:\.(\d{1,3}))?(?:\.(\d{1,3}))?", re.ASCII)
_CUDA_RE = re.compile(r"(\d{1,2})\.(\d{1,2})(?:\.(\d{1,3}))?", re.ASCII)
_NCCL_RE = re.compile(r"(\d{1,2})\.(\d{1,3})\.(\d{1,3})", re.ASCII)
_EPOCH_RE = re.compile(r"\d+", re.ASCII)
_UPSTREAM_RE = re.compile(r"[0-9][A-Za-z0-9.+~_^-]*")
_REVISION_RE = re.compile(r"[A-Za-z0-9.+~_^]+")

OPERATORS = {
    "<": lambda c: c < 0,
    "lt": lambda c: c < 0,
    "<=": lambda c: c <= 0,
    "le": lambda c: c <= 0,
    "==": lambda c: c == 0,
    "=": lambda c: c == 0,
    "eq": lambda c: c == 0,
    "!=": lambda c: c != 0,
    "ne": lambda c: c != 0,
    ">=": lambda c: c >= 0,
    "ge": lambda c: c >= 0,
    ">": lambda c: c > 0,
    "gt": lambda c: c > 0,
}


def _text(value, what):
    if isinstance(value, bool) or value is None:
        raise ValueError("%s must be a version string, got %r" % (what, value))
    if isinstance(value, int):
        value = str(value)
    if isinstance(value, float):
        raise ValueError(
            '%s %r is a YAML float: quote it (write "%s") so trailing zeros are kept' % (what, value, value)
        )
    if not isinstance(value, str):
        raise ValueError("%s must be a version string, got %s %r" % (what, type(value).__name__, value))
    text = value.strip()
    if not text:
        raise ValueError("%s is empty: give a version such as the examples in the documentation" % what)
    return text


def parse_driver(value):
    """Parse an NVIDIA driver version or branch into a tuple of ints.

    ``"550"`` and ``"R550"`` give ``(550,)``; ``"570.26"`` gives ``(570, 26)``;
    ``"550.127.08"`` gives ``(550, 127, 8)``.
    """
    text = _text(value, "NVIDIA driver version")
    match = _DRIVER_RE.fullmatch(text)
    if not match:
        raise ValueError(
            'NVIDIA driver version %r is malformed: give a branch such as "550" '
            'or an exact release such as "550.127.08"' % (text,)
        )
    return tuple(int(part) for part in match.groups() if part is not None)


def driver_branch(value):
    """Return the branch (first component) of a driver version or branch as an int."""
    return parse_driver(value)[0]


def parse_cuda(value):
    """Parse a CUDA version ``MAJOR.MINOR`` or ``MAJOR.MINOR.UPDATE`` into a tuple of ints."""
    text = _text(value, "CUDA version")
    match = _CUDA_RE.fullmatch(text)
    if not match:
        raise ValueError(
            'CUDA version %r is malformed: give MAJOR.MINOR such as "12.4" '
            '(or an update such as "12.4.1"), quoted' % (text,)
        )
    return tuple(int(part) for part in match.groups() if part is not None)


def cuda_dashed(value):
    """``"12.4"`` -> ``"12-4"``, the form NVIDIA package names use (cuda-toolkit-12-4)."""
    major, minor = parse_cuda(value)[:2]
    return "%d-%d" % (major, minor)


def parse_nccl(value):
    """Parse an NCCL version ``MAJOR.MINOR.PATCH`` (such as ``2.21.5``) into a tuple of ints."""
    text = _text(value, "NCCL version")
    match = _NCCL_RE.fullmatch(text)
    if not match:
        raise ValueError('NCCL version %r is malformed: give MAJOR.MINOR.PATCH such as "2.21.5"' % (text,))
    return tuple(int(part) for part in match.groups())


def parse_package_version(value):
    """Split a dpkg/rpm style version into ``(epoch, upstream, revision)``.

    ``"1:4.1.1-1"`` -> ``(1, "4.1.1", "1")``; ``"550.127.08"`` -> ``(0, "550.127.08", "")``.
    The revision is what follows the last hyphen, as dpkg reads it.
    """
    text = _text(value, "package version")
    if any(ch.isspace() for ch in text):
        raise ValueError("package version %r contains whitespace" % (text,))
    epoch = 0
    rest = text
    if ":" in text:
        epoch_text, rest = text.split(":", 1)
        if not _EPOCH_RE.fullmatch(epoch_text):
            raise ValueError(
                "package version %r has a malformed epoch %r: the epoch is a number before the first colon, "
                'as in "1:4.1.1-1"' % (text, epoch_text)
            )
        epoch = int(epoch_text)
    upstream, revision = rest, ""
    if "-" in rest:
        upstream, revision = rest.rsplit("-", 1)
        if not _REVISION_RE.fullmatch(revision):
            raise ValueError("package version %r has an empty or malformed revision after the last '-'" % (text,))
    if not _UPSTREAM_RE.fullmatch(upstream) or ":" in upstream:
        raise ValueError(
            "package version %r is malformed: the upstream version must start with a digit and use only "
            "letters, digits and . + ~ _ ^ -" % (text,)
        )
    return epoch, upstream, revision


def _order(char):
    """dpkg's character weight: '~' below the end of string, letters below other symbols."""
    if char == "~":
        return -1
    if char.isdigit():
        return 0
    if not char:
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(left, right):
    """dpkg ``verrevcmp`` on one part (upstream or revision)."""
    i = j = 0
    while i < len(left) or j < len(right):
        first_diff = 0
        while (i < len(left) and not left[i].isdigit()) or (j < len(right) and not right[j].isdigit()):
            lc = _order(left[i]) if i < len(left) else 0
            rc = _order(right[j]) if j < len(right) else 0
            if lc != rc:
                return -1 if lc < rc else 1
            i += 1
            j += 1
        while i < len(left) and left[i] == "0":
            i += 1
        while j < len(right) and right[j] == "0":
            j += 1
        while i < len(left) and left[i].isdigit() and j < len(right) and right[j].isdigit():
            if not first_diff:
                first_diff = (left[i] > right[j]) - (left[i] < right[j])
            i += 1
            j += 1
        if i < len(left) and left[i].isdigit():
            return 1
        if j < len(right) and right[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def compare_versions(left, right):
    """Order two version strings: -1, 0 or 1, like dpkg --compare-versions.

    Accepts driver versions and branches, CUDA and NCCL versions and package
    versions with epoch and revision. Raises ValueError on malformed input.
    """
    l_epoch, l_up, l_rev = parse_package_version(left)
    r_epoch, r_up, r_rev = parse_package_version(right)
    if l_epoch != r_epoch:
        return -1 if l_epoch < r_epoch else 1
    result = _compare_part(l_up, r_up)
    if result:
        return result
    return _compare_part(l_rev, r_rev)


def version_matches(left, operator, right):
    """``True`` when ``left <operator> right`` holds; operator is one of < <= == != >= > (or lt, le, ...)."""
    if operator not in OPERATORS:
        raise ValueError(
            "unknown version operator %r: use one of %s" % (operator, ", ".join(sorted(OPERATORS, key=len)))
        )
    return OPERATORS[operator](compare_versions(left, right))


def format_version(parts):
    """Join a version tuple back into text (``(550, 54, 15)`` -> ``"550.54.15"``)."""
    return ".".join(str(part) for part in parts)
