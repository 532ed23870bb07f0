# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's GPU lines in gres.conf: one marked block the collection owns, every other line the operator's.

gres.conf holds more than GPUs (``Name=nic``, ``Name=mps``, ``Name=shard``, lines for other nodes with
``NodeName=``), so the collection writes only a block between two marker lines and keeps the rest as it is. A GPU
line outside the block that applies to this node (``Name=gpu`` or an ``AutoDetect=`` without a ``NodeName=`` of
other nodes) would give Slurm the GPUs twice or detect them another way: it is refused, named, before anything is
written. gres.conf(5): keys are case-insensitive, ``#`` starts a comment.
"""

from __future__ import annotations

import re

BEGIN = "# BEGIN gpuops.cluster: the GPUs of this node (written by gpuops.cluster.slurm_gres; do not edit)"
END = "# END gpuops.cluster"
# The block's first line: the node's Gres= for slurm.conf, so a later run knows whether the devices changed (with
# AutoDetect=nvml the file itself does not say).
GRES_PREFIX = "# slurm.conf for this node: Gres="
_GPU = re.compile(r"(?:^|\s)(?:name\s*=\s*gpu\b|autodetect\s*=)", re.IGNORECASE)
_NODENAME = re.compile(r"(?:^|\s)nodename\s*=\s*(\S+)", re.IGNORECASE)


class BlockError(ValueError):
    """The file cannot take the block as it is: the message names the line and what to do."""


def split(text):
    """``(before, block, after)``: the operator's lines around the block and the block's lines (markers left out)."""
    lines = (text or "").splitlines()
    if BEGIN not in lines:
        return lines, [], []
    start = lines.index(BEGIN)
    if END not in lines[start:]:
        raise BlockError("gres.conf has the line %r but no %r after it: restore or remove the block" % (BEGIN, END))
    end = start + lines[start:].index(END)
    return lines[:start], lines[start + 1 : end], lines[end + 1 :]


def _applies_here(line, node_names):
    match = _NODENAME.search(line)
    if not match:
        return True
    return any(name in node_names for name in _expand(match.group(1)))


def _expand(value):
    """The names of a NodeName= value, a Slurm hostlist kept simple: ``a,b`` and ``gpu[01-03,07]``."""
    names = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", value):
        match = re.match(r"^(.*)\[([^\]]*)\](.*)$", part)
        if not match:
            names.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for piece in ranges.split(","):
            low, _sep, high = piece.partition("-")
            width = len(low)
            for number in range(int(low), int(high or low) + 1):
                names.append("%s%0*d%s" % (prefix, width, number, suffix))
    return names


def conflicts(lines, node_names, pattern=None):
    """The operator's lines that give this node's GPUs to Slurm another way (outside the block); ``pattern``, another
    GRES's lines (role mps: ``Name=mps``)."""
    found = []
    for line in lines:
        code = line.split("#", 1)[0]
        if (pattern or _GPU).search(code) and _applies_here(code, node_names):
            found.append(line.strip())
    return found


def merged(text, gpu_lines, node_names):
    """The file with ``gpu_lines`` as its block (added at the end when absent); raises :class:`BlockError`."""
    before, _block, after = split(text)
    clash = conflicts(before + after, node_names)
    if clash:
        raise BlockError(
            "gres.conf already gives this node's GPUs to Slurm outside the block gpuops.cluster writes: %s; remove "
            "these lines (the block holds this node's GPU lines) or leave gres.conf to you (gpuops_slurm_gres: false)"
            % " | ".join(clash)
        )
    if before and before[-1].strip() and not after:
        before = [*before, ""]
    return "\n".join([*before, BEGIN, *gpu_lines, END, *after]) + "\n"


def recorded_gres(text):
    """The ``Gres=`` the block was written for (its first line), None without a block."""
    try:
        block = split(text)[1]
    except BlockError:
        return None
    for line in block:
        if line.startswith(GRES_PREFIX):
            return line[len(GRES_PREFIX) :]
    return None


def block(gres, gpu_lines):
    """The block's lines: the ``Gres=`` they give (a comment, read back by :func:`recorded_gres`), then the lines."""
    return [GRES_PREFIX + gres, *gpu_lines]
