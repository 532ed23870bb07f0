# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an Xid (GPU) or SXid (NVSwitch) code means and what to do about it.

Source of the Xid table: NVIDIA, "Analyzing Xid Errors with the Xid Catalog",
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (Ampere and
later; the catalog spreadsheet linked there) and "Xid Errors"
https://docs.nvidia.com/deploy/xid-errors/index.html (names of older codes).
Each row keeps NVIDIA's "Resolution Bucket (Immediate Action)" in ``bucket``;
``action`` is that bucket in this collection's five words:

    IGNORE                      -> none
    RESTART_APP / CHECK_APP     -> restart_application
    RESET_GPU                   -> reset_gpu
    RESTART_BM / RESTART_VM     -> reboot_node
    CONTACT_SUPPORT /
    CHECK_MECHANICALS           -> hardware_inspection

``severity`` decides the check status: ``critical`` fails the node,
``warning`` warns (application faults such as 13 and 31 are warnings: the
job, not the node, is at fault), ``info`` passes. Cross-checked against the
node-failing list of Azure's health checks (48 56 57 58 62 63 64 65 68 69 73
74 79 80 81 92 119 120), recorded in /work/shared/reference/nvidia-stack-facts.md.
When NVIDIA revises the catalog, update the row and its bucket together.

SXid codes are not tabulated: the NVSwitch driver prints the severity in the
line itself (``Fatal`` / ``Non-fatal``), which is what the Fabric Manager
User Guide tells operators to act on (fatal: the NVSwitch and the GPUs on it
need a reset, which on HGX means rebooting the node).
"""

from __future__ import annotations

import re

ACTIONS = ("none", "restart_application", "reset_gpu", "reboot_node", "hardware_inspection")
_RANK = {action: rank for rank, action in enumerate(ACTIONS)}

SOURCE = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

# code: (name, severity, action, NVIDIA immediate-action bucket)
XID_CATALOG = {
    8: ("GPU stopped processing (channel idle timeout)", "warning", "restart_application", "RESTART_APP"),
    11: ("Invalid or corrupted push buffer stream", "warning", "restart_application", "RESTART_APP"),
    13: ("Graphics Engine Exception", "warning", "restart_application", "RESTART_APP"),
    31: ("GPU memory page fault (MMU fault)", "warning", "restart_application", "RESTART_APP"),
    32: ("Invalid or corrupted push buffer stream (PBDMA)", "warning", "restart_application", "RESTART_APP"),
    38: ("Driver firmware error", "critical", "reset_gpu", "RESET_GPU"),
    43: ("GPU stopped processing (user channel reset)", "warning", "restart_application", "RESTART_APP"),
    45: ("Preemptive cleanup, due to previous errors", "info", "none", "IGNORE"),
    48: ("Double Bit ECC Error (DBE)", "critical", "reset_gpu", "RESET_GPU"),
    56: ("Display Engine error", "critical", "hardware_inspection", "CONTACT_SUPPORT"),
    57: ("Error programming video memory interface", "critical", "hardware_inspection", "CONTACT_SUPPORT"),
    58: ("Unstable video memory interface detected", "critical", "hardware_inspection", "CONTACT_SUPPORT"),
    61: ("Internal micro-controller breakpoint/warning", "critical", "reset_gpu", "RESET_GPU"),
    62: ("Internal micro-controller halt", "critical", "reset_gpu", "RESET_GPU"),
    63: ("ECC page retirement or row remapping recording event", "critical", "reset_gpu", "RESET_GPU"),
    64: ("ECC page retirement or row remapper recording failure", "critical", "hardware_inspection", "CONTACT_SUPPORT"),
    65: ("Video processor exception", "critical", "reset_gpu", "RESET_GPU"),
    68: ("NVDEC0 Exception (video processor exception)", "critical", "reset_gpu", "RESET_GPU"),
    69: ("Graphics Engine class error", "critical", "reset_gpu", "RESET_GPU"),
    73: ("NVENC2 Error", "critical", "reset_gpu", "RESET_GPU"),
    74: ("NVLink Error", "critical", "reset_gpu", "RESET_GPU"),
    79: ("GPU has fallen off the bus", "critical", "reboot_node", "RESTART_BM"),
    80: ("Corrupted data sent to GPU", "critical", "reset_gpu", "RESET_GPU"),
    81: ("VGA Subsystem Error", "critical", "reset_gpu", "RESET_GPU"),
    92: ("High single-bit ECC error rate", "critical", "hardware_inspection", "CONTACT_SUPPORT"),
    94: ("Contained ECC error", "warning", "restart_application", "RESTART_APP"),
    95: ("Uncontained ECC error", "critical", "reset_gpu", "RESET_GPU"),
    109: ("Context Switch Timeout Error", "warning", "restart_application", "RESTART_APP"),
    110: ("Security Fault Error", "critical", "reset_gpu", "RESET_GPU"),
    119: ("GSP RPC Timeout", "critical", "reset_gpu", "RESET_GPU"),
    120: ("GSP Error", "critical", "reset_gpu", "RESET_GPU"),
    121: ("C2C Link corrected error", "warning", "none", "IGNORE"),
    140: ("Unrecovered ECC Error", "critical", "reset_gpu", "RESET_GPU"),
    143: ("GPU Initialization Failure", "critical", "reset_gpu", "RESET_GPU"),
    144: ("NVLink: SAW Error", "critical", "reset_gpu", "RESET_GPU"),
    145: ("NVLink: RLW Error", "critical", "reset_gpu", "RESET_GPU"),
    146: ("NVLink: TLW Error", "critical", "reset_gpu", "RESET_GPU"),
    147: ("NVLink: TREX Error", "critical", "reset_gpu", "RESET_GPU"),
    148: ("NVLink: NVLPW_CTRL Error", "critical", "reset_gpu", "RESET_GPU"),
    149: ("NVLink: NETIR Error", "critical", "reset_gpu", "RESET_GPU"),
    150: ("NVLink: MSE Error", "critical", "reset_gpu", "RESET_GPU"),
    154: ("GPU recovery action changed", "critical", "reset_gpu", "XID_154_EVAL"),
}

# Xid 154 names the recovery the driver now requires; its text decides the action.
_RECOVERY_154 = (
    ("node reboot required", "reboot_node"),
    ("drain and reset", "reset_gpu"),
    ("gpu reset required", "reset_gpu"),
    ("drain p2p", "reset_gpu"),
)
_RECOVERY_TO = re.compile(r"\bto\s+0x[0-9a-f]+\s*\(([^)]*)\)", re.IGNORECASE)


def strongest(actions):
    """The strongest of ``actions`` (``none`` when empty)."""
    best = "none"
    for action in actions:
        if _RANK.get(action, 0) > _RANK[best]:
            best = action
    return best


def lookup(code, text=""):
    """Describe Xid ``code``; ``text`` (the rest of the kernel line) refines Xid 154.

    Returns ``{code, name, severity, action, bucket, known, application_fault, source}``.
    An unknown code is returned with ``known: False`` and severity ``warning``:
    reported, never dropped.
    """
    entry = XID_CATALOG.get(code)
    if entry is None:
        return {
            "code": code,
            "name": "unknown Xid %d (not in the catalog of this collection)" % code,
            "severity": "warning",
            "action": "none",
            "bucket": None,
            "known": False,
            "application_fault": False,
            "source": SOURCE,
        }
    name, severity, action, bucket = entry
    if code == 154:
        match = _RECOVERY_TO.search(text or "")
        target = (match.group(1) if match else text or "").lower()
        action = next((act for words, act in _RECOVERY_154 if words in target), "none")
        if action == "none":
            severity = "info"
    return {
        "code": code,
        "name": name,
        "severity": severity,
        "action": action,
        "bucket": bucket,
        "known": True,
        "application_fault": bucket == "RESTART_APP",
        "source": SOURCE,
    }


def lookup_sxid(code, text=""):
    """Describe NVSwitch SXid ``code`` from the severity printed in its line."""
    lowered = (text or "").strip().lower()
    if lowered.startswith("fatal"):
        severity, action = "critical", "reboot_node"
    elif lowered.startswith("non-fatal"):
        severity, action = "warning", "none"
    else:
        severity, action = "warning", "none"
    return {
        "code": code,
        "name": "NVSwitch SXid %d" % code,
        "severity": severity,
        "action": action,
        "bucket": None,
        "known": lowered.startswith(("fatal", "non-fatal")),
        "application_fault": False,
        "source": "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html",
    }
