# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The InfiniBand checks: each port's state, rate and error counters, and the count of ports up. Pure: takes
``infiniband.read_ports``' reading.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health.check_record import Finding, check


def port_count(ib, expected_count, expected_rate):
    """The node must have ``expected_count`` InfiniBand ports up (Active, LinkUp, at the rate): fails short of it."""
    ports = [port for port in ib["ports"] if (port.get("link_layer") or "InfiniBand").lower() == "infiniband"]
    up = [
        port["name"]
        for port in ports
        if (port["state"] or "").upper() == "ACTIVE"
        and (port["phys_state"] or "").lower() == "linkup"
        and (not expected_rate or (port["rate_gbps"] or 0) >= expected_rate)
    ]
    down = sorted(port["name"] for port in ports if port["name"] not in up)
    if len(up) < expected_count:
        return check(
            "infiniband",
            "fail",
            "%d of %d expected InfiniBand ports up%s (down: %s): check cables, the switch port and the HCA"
            % (len(up), expected_count, " at %d Gb/s" % expected_rate if expected_rate else "", ", ".join(down) or "-"),
            action="hardware_inspection",
        )
    return check("infiniband", "pass", "%d InfiniBand ports up, %d expected" % (len(up), expected_count))


def ports(ib, expected_ports, expected_rate, limit):
    ports = {port["name"]: port for port in ib["ports"]}
    by_device = {}
    for port in ib["ports"]:
        by_device.setdefault(port["device"], []).append(port)
    if expected_ports:
        wanted = []
        for name in expected_ports:
            if ":" in name:
                wanted.append((name, ports.get(name)))
            else:
                wanted.extend([(port["name"], port) for port in by_device.get(name, [])] or [(name + ":1", None)])
        strict = True
    else:
        if not ib["ports"]:
            return [check("infiniband", "skip", "no InfiniBand ports found")]
        wanted = [(port["name"], port) for port in ib["ports"]]
        strict = False
    checks = []
    for name, port in wanted:
        if port is None:
            checks.append(
                check(
                    "infiniband",
                    "fail",
                    "expected port %s not found" % name,
                    action="hardware_inspection",
                    pci_bus_id=None,
                )
            )
            continue
        finding = Finding()
        bad = "fail" if strict else "warn"
        if (port["state"] or "").upper() != "ACTIVE":
            finding.add(bad, "%s state %s" % (name, port["state"]), "hardware_inspection")
        if (port["phys_state"] or "").lower() != "linkup":
            finding.add(bad, "%s phys_state %s" % (name, port["phys_state"]), "hardware_inspection")
        if expected_rate and (port["rate_gbps"] or 0) < expected_rate:
            finding.add(
                bad, "%s rate %s, expected %s Gb/s" % (name, port["rate"], expected_rate), "hardware_inspection"
            )
        high = ["%s=%d" % (counter, value) for counter, value in sorted(port["counters"].items()) if value > limit]
        if high:
            finding.add("warn", "%s error counters above %d: %s" % (name, limit, ", ".join(high)))
        checks.append(
            finding.result("infiniband", None, "%s %s %s %s" % (name, port["state"], port["phys_state"], port["rate"]))
        )
    return checks
