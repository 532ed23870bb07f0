# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""PCIe Access Control Services (ACS) state of bridges, from ``lspci -D -vvv`` text.

ACS redirection (ReqRedir, CmpltRedir, SrcValid, UpstreamFwd) on a switch port sends peer-to-peer
traffic through the root complex, which breaks or slows GPUDirect P2P and RDMA between a GPU
and a NIC under the same switch.

The module's work is :data:`MODULE_KWARGS` and :func:`run` (see ``module_parts``), so it can
also run as a part of another module.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils import container_detection
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import run_checked

REDIRECT_FLAGS = ("SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd")
_HEAD = re.compile(r"^(?P<address>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<desc>.*)$")


def parse_lspci(text: str) -> list:
    """``[{'address', 'description', 'acs_ctl': {flag: bool}}]`` for every device that reports ACSCtl."""
    devices, current = [], None
    for line in text.splitlines():
        head = _HEAD.match(line)
        if head:
            current = {"address": head.group("address").lower(), "description": head.group("desc"), "acs_ctl": None}
            devices.append(current)
            continue
        stripped = line.strip()
        if current is not None and stripped.startswith("ACSCtl:"):
            flags = {}
            for token in stripped[len("ACSCtl:") :].split():
                if token[-1] in "+-":
                    flags[token[:-1]] = token[-1] == "+"
            current["acs_ctl"] = flags
    return [d for d in devices if d["acs_ctl"] is not None]


def enabled(devices: list) -> list:
    """Addresses of devices whose ACS redirects peer-to-peer traffic."""
    return [d["address"] for d in devices if any(d["acs_ctl"].get(flag) for flag in REDIRECT_FLAGS)]


def disable_argv(setpci: str, address: str) -> list:
    """The setpci argv that clears the ACS control register of one device (runtime only)."""
    return [setpci, "-s", address, "ECAP_ACS+0x6.w=0000"]


MODULE_KWARGS = dict(
    argument_spec=dict(
        state=dict(type="str", choices=["report", "disabled"], default="report"),
        devices=dict(type="list", elements="str", default=[]),
        apply_live=dict(type="str", choices=list(container_detection.APPLY_LIVE_CHOICES), default="auto"),
    ),
    supports_check_mode=True,
)


def run(module) -> dict:
    """The pcie_acs module's work on ``module`` (an AnsibleModule or a part): its result dict."""
    container = container_detection.detect(module, "/")
    result = dict(changed=False, devices=[], enabled=[], commands=[], not_applied_live=[], container=container)
    lspci = module.get_bin_path("lspci")
    if not lspci:
        module.warn("lspci not found: install pciutils to report PCIe ACS")
        return result
    out, _err = run_checked(module, [lspci, "-D", "-vvv"], "list the PCI devices", hint="check pciutils")
    devices = parse_lspci(out)
    result["devices"] = devices
    result["enabled"] = enabled(devices)
    if module.params["state"] == "report":
        return result
    targets = [a for a in result["enabled"] if not module.params["devices"] or a in module.params["devices"]]
    apply_live = module.params["apply_live"]
    if not targets:
        return result
    if apply_live == "never" or not container_detection.should_apply_live(apply_live, container):
        reason = "apply_live is never" if apply_live == "never" else f"in a container ({container})"
        result["not_applied_live"] = [dict(name=f"acs {a}", reason=reason) for a in targets]
        return result
    setpci = module.get_bin_path("setpci", required=True)
    result["commands"] = [disable_argv(setpci, a) for a in targets]
    result["changed"] = True
    if not module.check_mode:
        for address, argv in zip(targets, result["commands"]):
            run_checked(module, argv, f"disable ACS on {address}", hint="run as root")
    return result
