# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DCGM Exporter as a stack component: the exporter release paired with the resolved DCGM.

NVIDIA tags every exporter release ``<DCGM>-<exporter>`` (``4.5.3-4.8.2``: DCGM 4.5.3, exporter 4.8.2) and says
to run it with the DCGM it is paired with; the deb/rpm ``datacenter-gpu-manager-exporter`` carries the exporter's
version alone (``4.8.2-1``). The matrix records the pairing on each ``dcgm`` entry (``exporter``, with its
source), the resolver fills ``{dcgm_exporter}`` in the packaging rule, and the node's package index gives the exact
version, pinned and held with the rest of the stack (package_index.py, pin_plan.py).

``gpuops_stack.dcgm_exporter``: ``auto`` (default: installed where the stack has DCGM and the matrix pairs an
exporter release with it), ``true`` (required: a stack without DCGM, or with a DCGM the matrix pairs no exporter
with, is refused) or ``false`` (left out).
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import parse_nccl

COMPONENT = "dcgm_exporter"
PACKAGE = "datacenter-gpu-manager-exporter"
# The packaged unit (NVIDIA/dcgm-exporter packaging/config-files/systemd/nvidia-dcgm-exporter.service).
SERVICE = "nvidia-dcgm-exporter"
CHOICES = ("auto", "true", "false")
# Keys a matrix dcgm entry may carry for its exporter.
DCGM_ENTRY_KEYS = ("exporter", "exporter_source")


def release_problems(entry):
    """What is wrong with a matrix dcgm entry's ``exporter`` (an ``X.Y.Z`` release), as messages."""
    if "exporter" not in entry:
        return []
    value = entry["exporter"]
    try:
        parse_nccl(value)
    except (TypeError, ValueError):
        return ['exporter must be an exporter release such as "4.8.2", got %r' % (value,)]
    if "exporter_source" not in entry:
        return ["exporter %s needs an exporter_source (the tag or listing that pairs it with DCGM)" % value]
    return []


def _choice(value):
    if value is None or value == "":
        return "auto"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value).strip().lower()
    return {"yes": "true", "on": "true", "no": "false", "off": "false"}.get(text, text)


def resolve(dcgm_entries, request_value, dcgm, res):
    """The exporter for the resolved ``dcgm`` (``{major, version, ...}`` or None): ``{version, dcgm, package,
    service}`` or None; problems go to ``res`` (``violate(rule, message)``, ``warn(message)``)."""
    choice = _choice(request_value)
    if choice not in CHOICES:
        res.violate(
            "dcgm_exporter.malformed",
            "dcgm_exporter must be auto, true or false, got %r" % (request_value,),
        )
        return None
    if choice == "false":
        return None
    if dcgm is None:
        if choice == "true":
            res.violate(
                "dcgm_exporter.needs_dcgm",
                'dcgm_exporter: true needs DCGM in the stack: set dcgm (for example dcgm: "4"), or set '
                "dcgm_exporter: auto or false",
            )
        return None
    entry = next((item for item in dcgm_entries if item["version"] == dcgm["version"]), {})
    exporter = entry.get("exporter")
    if not exporter:
        paired = [item["version"] for item in dcgm_entries if item.get("exporter")]
        message = "the compatibility matrix pairs no DCGM Exporter release with DCGM %s" % dcgm["version"]
        if choice == "true":
            res.violate(
                "dcgm_exporter.unpaired",
                "%s: use a DCGM release that has one (%s), or set dcgm_exporter: false"
                % (message, ", ".join(paired) or "none known"),
            )
        else:
            res.warn(
                "%s: the exporter is left out; add the pair to matrix/nvidia_stack.yml once NVIDIA publishes it"
                % message
            )
        return None
    return {"version": exporter, "dcgm": dcgm["version"], "package": PACKAGE, "service": SERVICE}
