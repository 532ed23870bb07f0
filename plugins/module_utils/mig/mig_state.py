# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a node's MIG state: one ``nvidia-smi -q -x`` and the ``nvidia-smi mig -lgi`` / ``-lci`` listings.

``-q -x`` gives each GPU's ``<mig_mode>`` (``current_mig``/``pending_mig``: Enabled,
Disabled, or N/A on a GPU without MIG), its PCI device id and its ``<processes>``
(with ``gpu_instance_id``/``compute_instance_id`` under MIG); the health check's parser
(``health.nvidia_smi_xml``) reads them. The listings are tables (see
``tests/fixtures/mig/README.md`` for the real captures they are tested on)::

    |   0  MIG 3g.20gb          9        1          0:4     |      -lgi: GPU, name, profile id, GI id, placement
    |   0      1       MIG 1c.3g.20gb       0         0          0:1     |   -lci: GPU, GI id, name, profile id, CI id
                                                                            (older drivers print no placement)

``No MIG-enabled devices found.`` and ``No GPU instances found: Not Found`` are empty
listings. A line that looks like a row but does not parse is reported, never skipped.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.health import nvidia_smi_xml
from ansible_collections.gpuops.cluster.plugins.module_utils.mig.mig_profiles import parse_device, reported_device_id

_GI_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|$")
_CI_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)(?:\s+(\d+):(\d+))?\s*\|$")
_EMPTY = re.compile(r"^No (MIG-enabled devices|GPU instances|compute instances) found", re.IGNORECASE)


class MigStateError(ValueError):
    """A listing that cannot be read: the state is unknown, so nothing may be planned from it."""


def _rows(text, pattern, what):
    rows = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("+") or _EMPTY.match(line):
            continue
        match = pattern.match(line)
        if match:
            rows.append(match.groups())
        elif line.startswith("|") and " MIG " in line:
            raise MigStateError("%s: cannot read the row %r" % (what, line))
        elif not line.startswith("|"):
            raise MigStateError("%s: unexpected output %r" % (what, line))
    return rows


def parse_gpu_instances(text):
    """``nvidia-smi mig -lgi`` as ``[{gpu, id, profile, profile_id, start, size}]``."""
    return [
        {
            "gpu": int(gpu),
            "id": int(gi),
            "profile": name,
            "profile_id": int(profile_id),
            "start": int(start),
            "size": int(size),
        }
        for gpu, name, profile_id, gi, start, size in _rows(text, _GI_ROW, "nvidia-smi mig -lgi")
    ]


def parse_compute_instances(text):
    """``nvidia-smi mig -lci`` as ``[{gpu, gpu_instance, id, profile, profile_id, compute, start, size}]``.

    ``compute`` is the compute instance's SM slices, from its name (``1c.3g.20gb``: 1, ``3g.20gb``: 3).
    """
    found = []
    for gpu, gi, name, profile_id, ci, start, size in _rows(text, _CI_ROW, "nvidia-smi mig -lci"):
        parsed = parse_device(name)
        if parsed is None:
            raise MigStateError("nvidia-smi mig -lci: %r is no MIG device name" % name)
        found.append(
            {
                "gpu": int(gpu),
                "gpu_instance": int(gi),
                "id": int(ci),
                "profile": name,
                "profile_id": int(profile_id),
                "compute": parsed["compute"],
                "start": int(start) if start is not None else None,
                "size": int(size) if size is not None else None,
            }
        )
    return found


def node_state(query_xml, lgi_text="", lci_text=""):
    """Each GPU's MIG state: ``{gpus: [...], warnings: [...]}``.

    A GPU: ``index``, ``minor``, ``uuid``, ``bus_id``, ``product``, ``device_id`` (``0x233010de``), ``mig``
    (``{"current": True|False|None, "pending": ...}``, None: no MIG), ``gpu_instances`` (each with its
    ``compute_instances``) and ``processes``. Raises :class:`MigStateError` when ``-q -x`` lists no GPU
    or a listing cannot be read: a state that could not be read is never planned from.
    """
    parsed = nvidia_smi_xml.parse(query_xml)
    if not parsed["gpus"]:
        raise MigStateError("nvidia-smi -q -x lists no GPU: %s" % "; ".join(parsed["warnings"]))
    instances = parse_gpu_instances(lgi_text)
    computes = parse_compute_instances(lci_text)
    gpus = []
    for gpu in parsed["gpus"]:
        device = gpu.get("pci_device_id")
        mine = [dict(gi, compute_instances=[]) for gi in instances if gi["gpu"] == gpu["index"]]
        by_id = {gi["id"]: gi for gi in mine}
        for ci in computes:
            if ci["gpu"] != gpu["index"]:
                continue
            if ci["gpu_instance"] not in by_id:
                raise MigStateError(
                    "nvidia-smi mig -lci lists compute instance %d of GPU %d in GPU instance %d, unknown to -lgi"
                    % (ci["id"], ci["gpu"], ci["gpu_instance"])
                )
            by_id[ci["gpu_instance"]]["compute_instances"].append(ci)
        gpus.append(
            {
                "index": gpu["index"],
                "minor": gpu.get("minor_number"),  # /dev/nvidia<minor>, and the gpu<minor> of mig-minors
                "uuid": gpu["uuid"],
                "bus_id": gpu["pci_bus_id"],
                "product": gpu["product_name"],
                "device_id": reported_device_id(device),
                "mig": dict(gpu["mig_mode"]),
                "gpu_instances": sorted(mine, key=lambda gi: gi["start"]),
                "processes": list(gpu.get("processes") or []),
            }
        )
    known = {gpu["index"] for gpu in gpus}
    stray = sorted({gi["gpu"] for gi in instances} - known)
    if stray:
        raise MigStateError("nvidia-smi mig -lgi lists GPU(s) %s, which -q -x does not" % stray)
    return {"gpus": gpus, "warnings": list(parsed["warnings"])}
