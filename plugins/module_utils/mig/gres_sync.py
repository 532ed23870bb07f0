# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's gres.conf block from its devices: the one flow of ``gpuops.cluster.slurm_gres`` and of the boot command.

The module (run by the role ``mig_layout`` after the layout is applied) and ``gpuops-mig-apply`` (at boot, after the
boot unit restored the layout and before slurmd starts) compute the block the same way, so that the file the role
wrote and the file the boot writes agree: :func:`plan` takes the node's GPUs (``mig_state.node_state()``), the text of
``/proc/driver/nvidia-caps/mig-minors`` and the file as it is, and returns the file as it must be.

:func:`slurm_gres_differs` compares the ``Gres=`` the block records with the node's gres as Slurm's controller has it
(``scontrol show nodes --json``): slurm.conf's ``NodeName ... Gres=`` is the controller's, and a file-backed GRES count
cannot be changed with ``scontrol update`` ("Modification of GRES count associated with specific files (e.g. GPUs)
is not allowed other than to set their count on a node to zero. In order to change the GRES count to another value,
modify your slurm.conf and gres.conf files and restart daemons", SchedMD/slurm doc/man/man1/scontrol.1, NodeName
Gres=). A node that reports fewer than slurm.conf configures is drained by slurmctld ("gpu count reported lower than
configured"), one that reports more has the excess ignored (src/interfaces/gres.c ``_node_config_validate``).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils.mig import gres_conf_block, mig_gres

NVML_PLUGIN = "gpu_nvml.so"
# Where Slurm's plugins are installed: Debian and Ubuntu (multiarch), RHEL, a source install.
PLUGIN_DIRS = (
    "/usr/lib/x86_64-linux-gnu/slurm-wlm",
    "/usr/lib/aarch64-linux-gnu/slurm-wlm",
    "/usr/lib64/slurm",
    "/usr/lib/slurm",
    "/usr/local/lib/slurm",
)
GRES_CONF = "/etc/slurm/gres.conf"
NVML_MODES = ("auto", "always", "never")


def nvml_installed(mode, plugin_dirs, exists=os.path.exists):
    """Whether the block is ``AutoDetect=nvml``: ``mode`` auto looks for ``gpu_nvml.so`` in ``plugin_dirs``."""
    if mode != "auto":
        return mode == "always"
    return any(exists(os.path.join(directory, NVML_PLUGIN)) for directory in plugin_dirs)


def any_mig(gpus):
    """Whether a GPU has MIG on (then the mig-minors file is read)."""
    return any((gpu.get("mig") or {}).get("current") for gpu in gpus)


def plan(gpus, minors_text, nvml, gpu_type, before, node_names):
    """``{lines, gres, nvml, after, changed, gres_changed}``: the file ``before`` with the node's block.

    Raises ``mig_gres.GresError`` (a device cannot be named) or ``gres_conf_block.BlockError`` (the file holds a GPU
    line of this node outside the block, or a torn block): nothing is to be written then.
    """
    records = mig_gres.devices(gpus, minors_text, gpu_type)
    gres = mig_gres.node_gres(records)
    lines = gres_conf_block.block(gres, mig_gres.gres_conf_lines(records, autodetect_nvml=nvml))
    after = gres_conf_block.merged(before, lines, node_names)
    return {
        "lines": lines,
        "gres": gres,
        "nvml": nvml,
        "after": after,
        "changed": after != before,
        "gres_changed": gres_conf_block.recorded_gres(before) != gres,
    }


def _gpu_counts(gres):
    """``{type or None: count}`` of the ``gpu`` entries of a Gres string (``gpu:3g.40gb:2(S:0),gpu:h100:1``)."""
    counts = {}
    text = re.sub(r"\([^)]*\)", "", gres or "")
    if text.strip() in ("", "(null)", "N/A"):
        return counts
    for entry in text.split(","):
        parts = entry.strip().split(":")
        if parts[0] != "gpu":
            continue
        count = int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
        kind = parts[1] if len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()) else None
        counts[kind] = counts.get(kind, 0) + count
    return counts


def slurm_gres_differs(slurm_gres, wanted):
    """None when Slurm's gres of the node gives the GPUs ``wanted`` (the block's ``Gres=``), else what differs.

    Typed entries must match type by type. An untyped ``gpu:N`` in Slurm (slurm.conf without types, gres.conf with
    them: gres.c accepts it) matches when N is the number of devices.
    """
    have, want = _gpu_counts(slurm_gres), _gpu_counts(wanted)
    if have == want:
        return None
    if set(have) == {None} and have[None] == sum(want.values()):
        return None
    return "Slurm has Gres=%s for the node, the layout gives Gres=%s" % (slurm_gres or "(none)", wanted or "(none)")
