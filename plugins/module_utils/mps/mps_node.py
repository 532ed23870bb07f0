# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What one node runs for its declared MPS: the control daemons, their settings, and Slurm's gres/mps lines.

Planned from the settings (``mps_settings.settings``) and one read of the node (``mig_state.node_state`` of
``nvidia-smi -q -x``), on the controller. Each daemon is an instance of the unit ``gpuops-mps@.service``:

- ``node`` (scheduler ``kubernetes`` or ``none``): one daemon for all MPS GPUs, started at boot, with
  ``CUDA_MPS_PIPE_DIRECTORY`` the pipe directory;
- one per MPS GPU, named by its index (scheduler ``slurm``): started by the Slurm Prolog for a job given gres/mps
  on that GPU and stopped when the last such job ends or a job is given the whole GPU (gres.shtml "MPS
  Management"; ``etc/prolog.example`` keys the daemon by ``CUDA_VISIBLE_DEVICES``), with a directory of its own
  under the pipe and log directories, as ``etc/prolog.example`` gives each GPU its own.

A daemon sees its GPUs through ``CUDA_VISIBLE_DEVICES`` set to their UUIDs (NVIDIA recommends UUIDs: indexes are
remapped by the MPS server, "Appendix: Environment Variables", CUDA_VISIBLE_DEVICES), so its clients see them as
devices 0, 1 ...; the default pinned memory limit is set for each of those (``set_default_device_pinned_mem_limit
<dev> <value>``, NVIDIA/k8s-device-plugin ``cmd/mps-control-daemon/mps/daemon.go`` sends one per device). Both
defaults are control commands sent after the daemon starts; NVIDIA: "The set value is lost if a quit command is
executed", so every start sends them again.

A GPU MPS would share that has MIG on now (current or pending) is refused: the declared layout is checked before
any host is contacted, this checks the node as it is.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.mig import gres_conf_block
from ansible_collections.gpuops.cluster.plugins.module_utils.mps.mps_settings import WHY_NOT_ON_MIG

NODE_INSTANCE = "node"
# The marked block of gres.conf the role writes (ansible.builtin.blockinfile's marker, {mark}: BEGIN or END).
GRES_MARKER = "# {mark} gpuops.cluster: the gres/mps of this node (role mps; do not edit)"
_MPS_LINE = re.compile(r"(?:^|\s)name\s*=\s*mps\b", re.IGNORECASE)
_COUNT = re.compile(r"(?:^|\s)count\s*=\s*(\d+)\b", re.IGNORECASE)
_AUTODETECT_NVML = re.compile(r"(?:^|\s)autodetect\s*=\s*nvml\b", re.IGNORECASE)
_TYPE_OR_CORES = re.compile(r"(?:^|\s)(?:type|cores)\s*=\s*\S", re.IGNORECASE)


class MpsNodeError(ValueError):
    """The node cannot take the declared MPS as it is; nothing is changed."""


def mps_gpus(settings, gpus):
    """The node's GPUs MPS shares, in index order; raises :class:`MpsNodeError` naming a missing or MIG GPU."""
    by_index = {gpu["index"]: gpu for gpu in gpus}
    wanted = sorted(by_index) if settings["devices"] == "all" else list(settings["devices"])
    missing = [index for index in wanted if index not in by_index]
    if missing:
        raise MpsNodeError(
            "gpuops_mps devices names GPU %s, which nvidia-smi does not list (GPUs %s): fix gpuops_mps devices"
            % (", ".join(str(i) for i in missing), ", ".join(str(i) for i in sorted(by_index)) or "none")
        )
    chosen = [by_index[index] for index in wanted]
    on_mig = [
        gpu["index"] for gpu in chosen if (gpu.get("mig") or {}).get("current") or (gpu.get("mig") or {}).get("pending")
    ]
    if on_mig:
        raise MpsNodeError(
            "GPU %s has MIG enabled (current or pending), and gpuops_mps shares it by MPS: %s (scheduler %s); give "
            "gpuops_mps devices only GPUs whose MIG is off, or disable MIG on them"
            % (", ".join(str(i) for i in on_mig), WHY_NOT_ON_MIG[settings["scheduler"]], settings["scheduler"])
        )
    if not chosen:
        raise MpsNodeError("nvidia-smi lists no GPU for gpuops_mps to share")
    return chosen


def control_commands(settings, device_count):
    """The control commands a daemon of ``device_count`` GPUs is sent after it starts, in order."""
    commands = []
    if settings.get("active_thread_percentage") is not None:
        commands.append("set_default_active_thread_percentage %d" % settings["active_thread_percentage"])
    if settings.get("pinned_device_memory_limit"):
        commands.extend(
            "set_default_device_pinned_mem_limit %d %s" % (device, settings["pinned_device_memory_limit"])
            for device in range(device_count)
        )
    return commands


def _daemon(settings, name, chosen, subdirectory):
    pipe = settings["pipe_directory"] + subdirectory
    return {
        "instance": name,
        "unit": "gpuops-mps@%s.service" % name,
        "gpus": [gpu["index"] for gpu in chosen],
        "visible_devices": ",".join(gpu["uuid"] for gpu in chosen),
        "pipe_directory": pipe,
        "log_directory": settings["log_directory"] + subdirectory,
        "commands": control_commands(settings, len(chosen)),
    }


def daemons(settings, chosen):
    """The control daemons of the node: one for the node, or one per GPU under Slurm."""
    if settings["scheduler"] == "slurm":
        return [_daemon(settings, str(gpu["index"]), [gpu], "/%d" % gpu["index"]) for gpu in chosen]
    return [_daemon(settings, NODE_INSTANCE, chosen, "")]


def gres_lines(settings, chosen):
    """gres.conf's gres/mps lines, one per MPS GPU by its device file (gres.conf(5): "each GPU would be identified
    by device file using the File parameter and Count would specify the number of entries"); none off Slurm."""
    if settings["scheduler"] != "slurm":
        return []
    lines = []
    for gpu in chosen:
        if gpu.get("minor") is None:
            raise MpsNodeError("GPU %d: nvidia-smi -q -x gave no minor number (its /dev/nvidia<minor>)" % gpu["index"])
        lines.append("Name=mps Count=%d File=/dev/nvidia%d" % (settings["slurm_count"], gpu["minor"]))
    return lines


def _split(text):
    """``(outside, block)``: gres.conf's lines outside the role's block, and the block's lines (markers left out)."""
    begin, end = GRES_MARKER.replace("{mark}", "BEGIN"), GRES_MARKER.replace("{mark}", "END")
    outside, block, inside = [], [], False
    for line in (text or "").splitlines():
        if line == begin:
            inside = True
        elif line == end and inside:
            inside = False
        elif inside:
            block.append(line)
        else:
            outside.append(line)
    return outside, block


def gres_conflicts(text, node_names):
    """The ``Name=mps`` lines of gres.conf outside the block that apply to this node (``NodeName=`` hostlists
    expanded, as slurm_gres reads the file): with the block's lines Slurm would count this node's MPS twice."""
    return gres_conf_block.conflicts(_split(text)[0], node_names, _MPS_LINE)


def gres_total(lines):
    """The gres/mps of slurm.conf's Gres= that gres.conf ``lines`` give (``mps:400``), "" for none."""
    counts = [int(match.group(1)) for match in (_COUNT.search(line) for line in lines) if match]
    return "mps:%d" % sum(counts) if counts else ""


def gres_change(text, lines):
    """``{changed, gres_before}``: whether the block of gres.conf ``text`` is not ``lines`` (its records, their
    counts or device files change), and the gres/mps the block gives now.

    gres.conf(5): "Drain a node before changing the count of records with File parameters (e.g. gpu, mps, shard)";
    a changed Count= or device file changes what slurmd reports too. So any change of the block's lines is one the
    node is drained for, and no other change of the role is (directories, defaults, hooks leave the block alone).
    """
    block = _split(text)[1]
    return {"changed": block != list(lines), "gres_before": gres_total(block)}


def subset_problem(gres_conf, node_names, chosen, gpus):
    """Why Slurm would not schedule gres/mps on only ``chosen`` of the node's ``gpus``, or None.

    Measured on Slurm 22.05.8 (gres.conf ``Name=gpu File=/dev/nvidia[0-3]``, gres/mps on nvidia2 and nvidia3 alone):
    slurmd gives the other GPUs a count of 0 (``src/plugins/gres/common/gres_c_s.c`` ``_merge_lists``), but
    slurmctld keeps per-GPU counts only where the gpu records have a ``Type=`` or ``Cores=`` (``src/common/gres.c``,
    24.11 ``src/interfaces/gres.c``: ``_get_tot_gres_cnt``, ``_node_config_validate``) and otherwise spreads the
    node's total evenly (``_sync_node_shared_to_sharing``): an mps:50 job landed on GPU 0, which has no MPS, with
    ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=0``. With ``Type=`` on the gpu line, or ``AutoDetect=nvml`` (which gives
    both), the job went to GPU 2 at 50 %%.
    """
    if len(chosen) == len(gpus):
        return None
    outside = _split(gres_conf)[0]
    if gres_conf_block.conflicts(outside, node_names, _AUTODETECT_NVML):
        return None
    records = gres_conf_block.conflicts(outside, node_names)
    untyped = [line for line in records if not _TYPE_OR_CORES.search(line.split("#", 1)[0])]
    if records and not untyped:
        return None
    return (
        "gpuops_mps devices shares GPU %s of the node's %d, but %s: Slurm then spreads the node's gres/mps evenly over "
        "all its GPUs and sends MPS jobs to GPUs without MPS (src/common/gres.c, _sync_node_shared_to_sharing). Give "
        "this node's Name=gpu lines in gres.conf a Type= (and slurm.conf's Gres= its type) or Cores=, or use "
        "AutoDetect=nvml, or share every GPU (devices: all)"
        % (
            ", ".join(str(gpu["index"]) for gpu in chosen),
            len(gpus),
            "its gres.conf has no Name=gpu line for it"
            if not records
            else "its Name=gpu line(s) have neither Type= nor Cores= (%s)" % " | ".join(untyped),
        )
    )


def slurm_mps_count(slurm_gres):
    """The gres/mps count of a node's Gres as Slurm's controller has it (``gpu:4,mps:400``, typed entries
    ``mps:l40s:200`` summed, socket bindings ignored): slurm.conf's, 0 where it gives none."""
    total = 0
    for entry in re.sub(r"\([^)]*\)", "", slurm_gres or "").split(","):
        parts = entry.strip().split(":")
        if parts[0] == "mps" and len(parts) > 1 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def slurm_check(slurm_gres, lines, changed, node_name):
    """Slurm's gres/mps for the node against the block's ``lines``: ``None`` where they agree or Slurm was not read
    (``slurm_gres`` None), else what slurm.conf must give the node.

    Raises :class:`MpsNodeError`, before anything is changed, where a change of the block would give the node fewer
    gres/mps than slurm.conf configures: slurmd then exits at its start, leaving the node down. Measured on Slurm
    22.05.8: ``fatal: _build_shared_list: multiple configurations with and without "File"``, as ``_merge_gres2``
    (``src/common/gres.c``; 24.11 ``src/interfaces/gres.c``) adds the shortfall as a record without ``File=`` and
    ``_build_shared_list`` (``src/plugins/gres/common/gres_c_s.c``, the same in 24.11) refuses the mix. A higher
    count in gres.conf is kept running, the excess ignored ("A line in gres.conf for GRES mps has 100 more configured
    than expected in slurm.conf. Ignoring extra GRES."). Slurm takes the count only from slurm.conf ("modify your
    slurm.conf and gres.conf files and restart daemons", ``doc/man/man1/scontrol.1``), so the order that keeps
    slurmd up is: a higher count in gres.conf first (this role), then slurm.conf; a lower one in slurm.conf first,
    then gres.conf.
    """
    if slurm_gres is None or not lines:
        return None
    have, want = slurm_mps_count(slurm_gres), int(gres_total(lines).partition(":")[2] or 0)
    if have == want:
        return None
    line = "NodeName=%s Gres=<its gpu>,mps:%d (and GresTypes with mps)" % (node_name, want)
    if changed and want < have:
        raise MpsNodeError(
            "slurm.conf gives %s mps:%d (Gres=%s), more than the mps:%d the declared gres/mps lines would give: "
            "slurmd exits at its start when gres.conf gives a node fewer gres/mps than slurm.conf (fatal: "
            '_build_shared_list: multiple configurations with and without "File"). Lower the node\'s count in the '
            "controller's slurm.conf first (%s), "
            "restart slurmctld and the node's slurmd, then run again" % (node_name, have, slurm_gres, want, line)
        )
    return (
        "slurm.conf gives the node mps:%d (Slurm's Gres=%s), the gres/mps lines in gres.conf give mps:%d: Slurm "
        "schedules its own count until slurm.conf says %s; change it on the controller, restart slurmctld and the "
        "node's slurmd, then run again (the node is in service)" % (have, slurm_gres or "(none)", want, line)
    )


def plan(settings, gpus, gres_conf="", node_names=(), slurm_gres=None):
    """``{daemons, gres_lines, gres, gpus, ...}`` for the node; ``gres`` is the gres/mps part of slurm.conf's Gres=,
    ``gres_changed`` whether the block of ``gres_conf`` changes (the node is drained for it), ``gres_before`` the
    gres/mps the block gives now, ``slurm_mismatch`` what slurm.conf must give the node where Slurm's gres/mps for
    it (``slurm_gres``, the node's Gres as ``slurm_fleet`` read it; None where not read) is not the block's.

    ``gres_conf``: the node's gres.conf (Slurm only), whose ``Name=mps`` lines for this node (``node_names``) outside
    the block are refused, naming them. A change that would give the node less gres/mps than slurm.conf does is
    refused (:func:`slurm_check`).
    """
    chosen = mps_gpus(settings, gpus)
    lines = gres_lines(settings, chosen)
    subset = subset_problem(gres_conf, node_names, chosen, gpus) if lines else None
    if subset:
        raise MpsNodeError(subset)
    clash = gres_conflicts(gres_conf, node_names) if lines else []
    if clash:
        raise MpsNodeError(
            "gres.conf already gives this node's gres/mps outside the block the role mps writes: %s; remove these "
            "lines (the block holds this node's gres/mps lines)" % " | ".join(clash)
        )
    change = gres_change(gres_conf, lines) if lines else {"changed": False, "gres_before": ""}
    node_name = node_names[0] if node_names else "<node>"
    mismatch = slurm_check(slurm_gres, lines, change["changed"], node_name)
    return {
        "scheduler": settings["scheduler"],
        "gpus": [gpu["index"] for gpu in chosen],
        "daemons": daemons(settings, chosen),
        "gres_lines": lines,
        "gres": gres_total(lines),
        "gres_changed": change["changed"],
        "gres_before": change["gres_before"],
        "gres_marker": GRES_MARKER,
        "slurm_mismatch": mismatch,
        "directories": sorted(
            {settings["pipe_directory"], settings["log_directory"]}
            | {d[key] for d in daemons(settings, chosen) for key in ("pipe_directory", "log_directory")}
        ),
    }
