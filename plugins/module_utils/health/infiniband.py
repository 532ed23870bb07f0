# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read InfiniBand ports from ``/sys/class/infiniband/<device>/ports/<port>/``.

Files read per port (kernel ``drivers/infiniband/core/sysfs.c`` formats):
``state`` (``4: ACTIVE``), ``phys_state`` (``5: LinkUp``), ``rate``
(``400 Gb/sec (4X NDR)``), ``link_layer`` (``InfiniBand`` / ``Ethernet``) and
the error counters under ``counters/``. ``root`` is prefixed to every path so
tests can point the reader at a captured tree.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value

CLASS_DIR = os.path.join("sys", "class", "infiniband")
ERROR_COUNTERS = (
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
_CODED = re.compile(r"^\s*(\d+)\s*:\s*(.*?)\s*$")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")


def _coded(text):
    """``4: ACTIVE`` -> (4, 'ACTIVE'); unknown shapes keep the text."""
    if text is None:
        return None, None
    match = _CODED.match(text)
    if match:
        return int(match.group(1)), match.group(2)
    return None, text


def read_ports(root="/"):
    """``{ports: [{device, port, name, state, phys_state, rate, rate_gbps, link_layer, counters, ...}], warnings}``.

    ``name`` is ``<device>:<port>`` (``mlx5_0:1``). A missing class directory
    yields no ports and no warning (the node has no InfiniBand driver loaded).
    """
    base = os.path.join(root, CLASS_DIR)
    ports, warnings = [], []
    if not os.path.isdir(base):
        return {"ports": ports, "warnings": warnings}
    for device in sorted(os.listdir(base)):
        ports_dir = os.path.join(base, device, "ports")
        if not os.path.isdir(ports_dir):
            warnings.append("%s has no ports directory" % device)
            continue
        for port in sorted(os.listdir(ports_dir), key=lambda name: (len(name), name)):
            port_dir = os.path.join(ports_dir, port)
            state_code, state = _coded(read_value(os.path.join(port_dir, "state")))
            phys_code, phys_state = _coded(read_value(os.path.join(port_dir, "phys_state")))
            rate = read_value(os.path.join(port_dir, "rate"))
            rate_match = _RATE.match(rate or "")
            counters = {}
            for counter in ERROR_COUNTERS:
                value = read_value(os.path.join(port_dir, "counters", counter))
                if value is None:
                    continue
                try:
                    counters[counter] = int(value)
                except ValueError:
                    warnings.append("%s:%s counter %s reads %r" % (device, port, counter, value))
            if state is None:
                warnings.append("%s:%s has no readable state" % (device, port))
            ports.append(
                {
                    "device": device,
                    "port": int(port) if port.isdigit() else port,
                    "name": "%s:%s" % (device, port),
                    "state": state,
                    "state_code": state_code,
                    "phys_state": phys_state,
                    "phys_state_code": phys_code,
                    "rate": rate,
                    "rate_gbps": float(rate_match.group(1)) if rate_match else None,
                    "link_layer": read_value(os.path.join(port_dir, "link_layer")),
                    "counters": counters,
                }
            )
    return {"ports": ports, "warnings": warnings}
