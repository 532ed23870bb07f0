# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read one value from a node's /sys, /proc or /etc, under a root a test can move.

Every reader of the collection takes a ``root`` (``/`` on a node, a fake tree in
tests) and reads through ``read_value``: the file's text without surrounding
whitespace, undecodable bytes replaced, or ``default`` when it cannot be read
(absent, a directory, no permission: a kernel without that knob).
"""

from __future__ import annotations

import os


def under(root, *parts):
    """A path of the node inside ``root``: ``under('/tmp/r', 'sys', 'class')`` or ``under(root, '/etc/x')``."""
    return os.path.join(root, *(str(part).lstrip("/") for part in parts))


def read_value(path, default=None):
    """The stripped text of ``path``, or ``default`` when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return default
