# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""PCIe Access Control Services (ACS) state of bridges, from ``lspci -D -vvv`` text.

ACS redirection (ReqRedir, CmpltRedir, SrcValid, UpstreamFwd) on a switch port sends peer-to-peer
traffic through the root complex, which breaks or slows GPUDirect P2P and RDMA between a GPU
and a NIC under the same switch.
"""

from __future__ import annotations

import re

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
