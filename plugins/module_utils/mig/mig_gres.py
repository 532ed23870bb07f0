# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What Slurm must be told of a node's GPUs and MIG devices: gres.conf lines and the node's ``Gres=``.

Slurm treats each MIG device as one GPU (SchedMD/slurm ``doc/html/gres.shtml``, "MIG Management"). Two ways:

- ``AutoDetect=nvml`` in gres.conf, where Slurm's NVML GPU plugin is installed (``gpu_nvml.so``; Debian and Ubuntu
  package it as ``slurm-wlm-nvml-plugin``): slurmd finds the MIG devices itself. ``AutoDetect=nvidia`` (24.11 on)
  "doesn't detect MIGs" (gres.shtml), so it is never chosen where MIG is on.
- Otherwise one line per device, as the NVML plugin would find it (``src/plugins/gpu/nvml/gpu_nvml.c``): a whole
  GPU is ``File=/dev/nvidia<minor>``; a MIG device is ``MultipleFiles=/dev/nvidia<minor>,`` then the capability
  device files of its GPU instance and of its compute instance, ``/dev/nvidia-caps/nvidia-cap<n>``, whose minors
  ``/proc/driver/nvidia-caps/mig-minors`` lists as ``gpu<gpu minor>/gi<GI id>/access <n>`` and
  ``gpu<gpu minor>/gi<GI id>/ci<CI id>/access <n>`` (``_nvml_get_mig_minor_numbers``). ``File`` and
  ``MultipleFiles`` are mutually exclusive (gres.conf(5)).

The ``Type`` of a MIG device is its name as ``nvidia-smi mig -lci`` prints it (``3g.20gb``, ``1c.3g.20gb``), with
``+`` (``1g.10gb+me``) written ``_`` since Slurm takes ``+`` elsewhere in a GRES request; a whole GPU's is the
operator's ``gpu_type`` or its product name in lower case, ``NVIDIA `` left out and spaces as ``_``
(``h100_80gb_hbm3``). ``Gres=`` for slurm.conf counts the devices by type (``gpu:3g.20gb:2,gpu:h100_80gb_hbm3:1``).
gres.conf(5): "Drain a node before changing the count of records with the MultipleFiles parameter ... Failure to do
so will result in any job using those GRES being aborted": the caller drains the node where the ``Gres=`` changes.
"""

from __future__ import annotations

import re

MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
AUTODETECT_NVML = "AutoDetect=nvml"
_MINOR_LINE = re.compile(r"^gpu(\d+)/gi(\d+)(?:/ci(\d+))?/access\s+(\d+)$")


class GresError(ValueError):
    """The node's devices cannot be named for Slurm (a capability minor is missing): nothing is written."""


def parse_mig_minors(text):
    """``{(gpu minor, GI id, CI id or None): capability minor}`` from ``/proc/driver/nvidia-caps/mig-minors``."""
    minors = {}
    for line in (text or "").splitlines():
        match = _MINOR_LINE.match(line.strip())
        if match:
            gpu, gi, ci, minor = match.groups()
            minors[(int(gpu), int(gi), None if ci is None else int(ci))] = int(minor)
    return minors


def gpu_type(product, override=None):
    """A whole GPU's GRES type: ``override``, else its product name (``NVIDIA H100 80GB HBM3``: h100_80gb_hbm3)."""
    if override:
        return override
    name = re.sub(r"^nvidia\s+", "", (product or "gpu").strip(), flags=re.IGNORECASE)
    return re.sub(r"\s+", "_", name).lower()


def mig_type(name):
    """A MIG device's GRES type from its ``-lci`` name (``1g.10gb+me``: ``1g.10gb_me``)."""
    return name.replace("+", "_")


def _cap(minors, key, what):
    if key not in minors:
        raise GresError(
            "%s lists no %s: the MIG device's capability file is unknown; is the layout applied and "
            "the driver loaded?" % (MIG_MINORS, what)
        )
    return "/dev/nvidia-caps/nvidia-cap%d" % minors[key]


def devices(gpus, mig_minors_text, whole_type=None):
    """``[{type, files}]``, one per GRES record, in GPU order then GI and CI id.

    ``gpus``: mig_state.node_state()'s GPUs (``minor``: ``<minor_number>`` of ``nvidia-smi -q -x``);
    ``mig_minors_text``: the mig-minors file. A GPU with MIG on and no instance gives none.
    """
    caps = parse_mig_minors(mig_minors_text)
    records = []
    for gpu in gpus:
        minor = gpu.get("minor")
        if minor is None:
            raise GresError("GPU %d: nvidia-smi -q -x gave no minor number" % gpu["index"])
        device = "/dev/nvidia%d" % minor
        if not (gpu.get("mig") or {}).get("current"):
            records.append({"type": gpu_type(gpu.get("product"), whole_type), "files": [device]})
            continue
        for gi in sorted(gpu["gpu_instances"], key=lambda item: item["id"]):
            for ci in sorted(gi["compute_instances"], key=lambda item: item["id"]):
                files = [
                    device,
                    _cap(caps, (minor, gi["id"], None), "gpu%d/gi%d/access" % (minor, gi["id"])),
                    _cap(caps, (minor, gi["id"], ci["id"]), "gpu%d/gi%d/ci%d/access" % (minor, gi["id"], ci["id"])),
                ]
                records.append({"type": mig_type(ci["profile"]), "files": files})
    return records


def gres_conf_lines(records, autodetect_nvml=False):
    """gres.conf lines for the node: ``AutoDetect=nvml`` alone where the NVML plugin finds the devices itself."""
    if autodetect_nvml:
        return [AUTODETECT_NVML]
    lines = []
    for record in records:
        key = "MultipleFiles" if len(record["files"]) > 1 else "File"
        lines.append("Name=gpu Type=%s %s=%s" % (record["type"], key, ",".join(record["files"])))
    return lines


def node_gres(records):
    """The node's ``Gres=`` for slurm.conf: ``gpu:<type>:<count>`` per type, sorted by type."""
    counts = {}
    for record in records:
        counts[record["type"]] = counts.get(record["type"], 0) + 1
    return ",".join("gpu:%s:%d" % (name, counts[name]) for name in sorted(counts))
