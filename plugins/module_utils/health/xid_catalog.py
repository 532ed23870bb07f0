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
    RESTART_APP                 -> restart_application
    RESET_GPU                   -> reset_gpu
    RESTART_BM / RESTART_VM     -> reboot_node
    CONTACT_SUPPORT /
    CHECK_MECHANICALS           -> hardware_inspection
    WORKFLOW_XID_45             -> none (solo: restart Fabric Manager; else follow the other Xid)
    WORKFLOW_XID_48,
    WORKFLOW_NVLINK_ERR,
    WORKFLOW_NVLINK5_ERR        -> reset_gpu
    XID_154                     -> what the line says (GPU reset, node reboot, none)

``severity`` decides the check status: ``critical`` fails the node,
``warning`` warns (application faults such as 13 and 31 are warnings: the
job, not the node, is at fault), ``info`` passes. Azure's health checks fail
a node on 48 56 57 58 62 63 64 65 68 69 73 74 79 80 81 92 119 120
(the team reference page shared/reference/nvidia-stack-facts.md); where NVIDIA's bucket is
milder (68 69 80: RESTART_APP; 63 92: IGNORE) the action follows NVIDIA, and
63 and 92 warn rather than pass. A pending or failed row remap is judged
from nvidia-smi by the ``row_remap`` check, not from Xid 63/64 alone.
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
#
# Sources, row by row (checked 2026-12):
# * Codes 1-13: NVIDIA's catalog page itself (SOURCE above, Table 1 "Xids").
# * Every other row: NVIDIA's catalog spreadsheet (Xid-Catalog.xlsx, sheet "Xids", columns
#   "Description" and "Resolution Bucket (Immediate Action)"), as mirrored row by row in
#   leptonai/gpud components/accelerator/nvidia/xid/catalog_generated.go ("Code generated ...
#   Source: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html", generated
#   2025-10-29); NVIDIA/NVSentinel embeds the same spreadsheet unmodified
#   (health-monitors/syslog-health-monitor, Xid-Catalog.xlsx with its SHA-256).
# * The buckets of 46 48 54 62 63 64 74 79 95 109 110 119 120 136 140 142 143 151 155 156 158
#   are confirmed a second time by aws/eks-node-monitoring-agent (pkg/monitor dcgm
#   WellKnownXidCodes comment, "Resolution Bucket Reference (from NVIDIA XID Catalog)").
# * 56 57 58 61 65 73 81 are "Unused" on Ampere and later (bucket CONTACT_SUPPORT); their names
#   are the pre-Ampere meanings from https://docs.nvidia.com/deploy/xid-errors/index.html.
# * Codes the spreadsheet marks "Unused", 78 (UPDATE_SWFW), 159 (CHECK_UVM) and 162-172 (no
#   bucket in the spreadsheet yet) are left out on purpose: lookup() reports them as unknown
#   (warning), never drops them.
# Severity: RESTART_APP -> warning (the job is at fault); IGNORE -> info, except 63 and 92
# (warning: Azure's health checks fail a node on them, and a pending row remap is judged by
# the row_remap check from nvidia-smi); every other bucket -> critical.
# Workflow buckets: WORKFLOW_XID_45 (solo: restart Fabric Manager; with other Xids: follow
# them) -> none; WORKFLOW_XID_48 (solo: RESET_GPU; with 63/64: DRAIN_AND_RESET) -> reset_gpu;
# WORKFLOW_NVLINK_ERR (reset the GPU or reboot the node) -> reset_gpu; WORKFLOW_NVLINK5_ERR
# (144-150: the sheet "Xid 144-150 Decode" gives IGNORE, RESET_GPU or XID_154_EVAL per error
# status, which the kernel line alone does not carry) -> reset_gpu, the conservative reading;
# XID_154 -> the recovery action the line names (see _RECOVERY_154).
_APP = ("warning", "restart_application", "RESTART_APP")
_IGNORE = ("info", "none", "IGNORE")
_RESET = ("critical", "reset_gpu", "RESET_GPU")
_SUPPORT = ("critical", "hardware_inspection", "CONTACT_SUPPORT")
_NVLINK5 = ("critical", "reset_gpu", "WORKFLOW_NVLINK5_ERR")

XID_CATALOG = {
    8: ("GPU stopped processing", *_APP),
    11: ("Invalid or corrupted push buffer stream", *_APP),
    13: ("Graphics Engine Exception", *_APP),
    25: ("Invalid or illegal push buffer stream", *_APP),
    31: ("GPU memory page fault", *_APP),
    32: ("Invalid or corrupted push buffer stream (PBDMA)", *_APP),
    37: ("Driver firmware error (unimplemented firmware method)", *_IGNORE),
    38: ("Driver firmware error (firmware watchdog timeout)", *_IGNORE),
    39: ("Copy Engine Exception (CE0)", *_APP),
    40: ("Copy Engine Exception (CE1)", *_APP),
    41: ("Copy Engine Exception (CE2)", *_APP),
    43: ("GPU stopped processing (reset channel verification error)", *_IGNORE),
    44: ("Graphics Engine fault during context switch", *_IGNORE),
    45: ("Preemptive cleanup, due to previous errors", "info", "none", "WORKFLOW_XID_45"),
    46: ("GPU stopped processing (GPU timeout)", *_RESET),
    48: ("Double Bit ECC Error (DBE)", "critical", "reset_gpu", "WORKFLOW_XID_48"),
    54: ("Auxiliary power is not connected to the GPU board", "critical", "hardware_inspection", "CHECK_MECHANICALS"),
    56: ("Display Engine error (unused on Ampere and later)", *_SUPPORT),
    57: ("Error programming video memory interface (unused on Ampere and later)", *_SUPPORT),
    58: ("Unstable video memory interface detected (unused on Ampere and later)", *_SUPPORT),
    60: ("Video processor exception (SEC2)", *_APP),
    61: ("Internal micro-controller breakpoint/warning (unused on Ampere and later)", *_SUPPORT),
    62: ("Internal micro-controller halt", *_RESET),
    63: ("GPU memory remapping event (ECC page retirement or row remapping recorded)", "warning", "none", "IGNORE"),
    64: ("GPU memory remapping failure (ECC page retirement or row remapper recording failure)", *_RESET),
    65: ("Video processor exception (NVENC1; unused on Ampere and later)", *_SUPPORT),
    66: ("Illegal access by driver (register access violation)", *_IGNORE),
    67: ("Illegal access by driver (verification violation)", *_IGNORE),
    68: ("NVDEC0 Exception", *_APP),
    69: ("Graphics Engine class error", *_APP),
    70: ("CE3: Unknown Error", *_APP),
    71: ("CE4: Unknown Error", *_APP),
    72: ("CE5: Unknown Error", *_APP),
    73: ("NVENC2 Error (unused on Ampere and later)", *_SUPPORT),
    74: ("NVLink Error", "critical", "reset_gpu", "WORKFLOW_NVLINK_ERR"),
    75: ("CE6: Unknown Error", *_APP),
    76: ("CE7: Unknown Error", *_APP),
    77: ("CE8: Unknown Error", *_APP),
    79: ("GPU has fallen off the bus", "critical", "reboot_node", "RESTART_BM"),
    80: ("Corrupted data sent to GPU", *_APP),
    81: ("VGA Subsystem Error (unused on Ampere and later)", *_SUPPORT),
    82: ("NVJPG0 Error", *_APP),
    83: ("NVDEC1 Error", *_APP),
    84: ("NVDEC2 Error", *_APP),
    85: ("CE9: Unknown Error", *_APP),
    86: ("OFA Exception", *_APP),
    88: ("NVDEC3 Error", *_APP),
    89: ("NVDEC4 Error", *_APP),
    92: ("High single-bit ECC error rate", "warning", "none", "IGNORE"),
    93: ("Non-fatal violation of provisioned InfoROM wear limit", *_IGNORE),
    94: ("Contained memory (ECC) error", *_APP),
    95: ("Uncontained memory (ECC) error", *_RESET),
    96: ("NVDEC5 Error", *_APP),
    97: ("NVDEC6 Error", *_APP),
    98: ("NVDEC7 Error", *_APP),
    99: ("NVJPG1 Error", *_APP),
    100: ("NVJPG2 Error", *_APP),
    101: ("NVJPG3 Error", *_APP),
    102: ("NVJPG4 Error", *_APP),
    103: ("NVJPG5 Error", *_APP),
    104: ("NVJPG6 Error", *_APP),
    105: ("NVJPG7 Error", *_APP),
    106: ("SMBPBI Test Message", *_IGNORE),
    107: ("SMBPBI Test Message Silent", *_IGNORE),
    109: ("Context Switch Timeout Error", *_RESET),
    110: ("Security Fault Error", *_RESET),
    119: ("GSP RPC Timeout", *_RESET),
    120: ("GSP Error", *_RESET),
    121: ("C2C Error", *_IGNORE),
    126: ("CE10: Unknown Error", *_APP),
    127: ("CE11: Unknown Error", *_APP),
    128: ("CE12: Unknown Error", *_APP),
    129: ("CE13: Unknown Error", *_APP),
    130: ("CE14: Unknown Error", *_APP),
    131: ("CE15: Unknown Error", *_APP),
    132: ("CE16: Unknown Error", *_APP),
    133: ("CE17: Unknown Error", *_APP),
    134: ("CE18: Unknown Error", *_APP),
    135: ("CE19: Unknown Error", *_APP),
    136: ("NVLink link training failed", *_RESET),
    137: ("NVLink Privilege Error", *_IGNORE),
    139: ("OFA1 Error", *_APP),
    140: ("ECC Unrecovered Error", *_RESET),
    141: ("CUDA Fast Path Error", *_IGNORE),
    142: ("NVENC3 Error", *_SUPPORT),
    143: ("GPU Initialization Error", *_RESET),
    144: ("NVLink: SAW Error", *_NVLINK5),
    145: ("NVLink: RLW Error", *_NVLINK5),
    146: ("NVLink: TLW Error", *_NVLINK5),
    147: ("NVLink: TREX Error", *_NVLINK5),
    148: ("NVLink: NVLPW_CTRL Error", *_NVLINK5),
    149: ("NVLink: NETIR Error", *_NVLINK5),
    150: ("NVLink: MSE Error", *_NVLINK5),
    151: ("Key rotation Error", "critical", "reboot_node", "RESTART_VM"),
    152: ("DLA SMMU Error", *_IGNORE),
    153: ("DLA timeout Error", *_IGNORE),
    154: ("GPU Recovery Action Changed", "critical", "reset_gpu", "XID_154"),
    155: ("NVLink: SW Defined Error", *_RESET),
    156: ("Resource Retirement Event", *_RESET),
    157: ("Resource Retirement Failure", *_IGNORE),
    158: ("GPU Fatal Timeout", *_RESET),
    160: ("Channel Retirement Event", *_IGNORE),
    161: ("Channel Retirement Failure", *_IGNORE),
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
