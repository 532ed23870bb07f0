# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""IRQ affinity for the PCI devices of GPU nodes (mlx5 NICs, NVIDIA GPUs).

Readers take a root path and read sysfs (``bus/pci/devices/<addr>/numa_node``,
``local_cpulist``, ``msi_irqs``, ``devices/system/node``) and ``/proc/interrupts``.
:func:`plan` is pure: it spreads each device's IRQs across the CPUs local to the
device's NUMA node, primary hardware threads first, skipping housekeeping CPUs,
and keeps a cursor per CPU set so devices sharing a node do not pile onto its
first core.
"""

from __future__ import annotations

import os
import re

_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
PERSIST_HEADER = (
    "# Managed by gpuops.cluster.irq_affinity: edits here are overwritten.\n"
    "# pci_address msi_index cpulist (msi_index counts the device's MSI IRQs in numeric order)\n"
)


# ---------------------------------------------------------------- cpulists
def parse_cpulist(text: str) -> list:
    """``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]``; an empty string is an empty list."""
    cpus = set()
    for raw in (text or "").strip().split(","):
        part = raw.strip()
        if not part:
            continue
        if "-" in part:
            span, _unused, stride = part.partition(":")
            low, high = (int(x) for x in span.split("-", 1))
            if high < low:
                raise ValueError(f"bad cpulist range {part!r}")
            cpus.update(range(low, high + 1, int(stride) if stride else 1))
        else:
            cpus.add(int(part))
    return sorted(cpus)


def format_cpulist(cpus) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    ordered = sorted(set(cpus))
    parts, start, prev = [], None, None
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = cpu
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


# ---------------------------------------------------------------- readers
def _read(path, default=None):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return default


def read_online_cpus(root: str) -> list:
    return parse_cpulist(_read(os.path.join(root, "sys", "devices", "system", "cpu", "online"), ""))


def read_nodes(root: str) -> dict:
    """``{node: [cpus]}`` from ``/sys/devices/system/node/node*/cpulist``; empty on a NUMA-less kernel."""
    base = os.path.join(root, "sys", "devices", "system", "node")
    nodes = {}
    try:
        names = os.listdir(base)
    except OSError:
        return nodes
    for name in names:
        if re.match(r"^node\d+$", name):
            nodes[int(name[4:])] = parse_cpulist(_read(os.path.join(base, name, "cpulist"), ""))
    return dict(sorted(nodes.items()))


def read_siblings(root: str, cpus) -> dict:
    """``{cpu: [thread siblings]}`` from the CPU topology; a CPU without topology is its own sibling."""
    base = os.path.join(root, "sys", "devices", "system", "cpu")
    result = {}
    for cpu in cpus:
        text = _read(os.path.join(base, f"cpu{cpu}", "topology", "thread_siblings_list"))
        result[cpu] = parse_cpulist(text) if text else [cpu]
    return result


def read_device(root: str, address: str) -> dict:
    """Read one PCI device: driver, numa_node (-1 when none), local_cpulist and MSI IRQs (numeric order)."""
    base = os.path.join(root, "sys", "bus", "pci", "devices", address)
    if not os.path.isdir(base):
        raise LookupError(f"PCI device {address} not found under {base}")
    numa = _read(os.path.join(base, "numa_node"), "-1")
    local = _read(os.path.join(base, "local_cpulist"), "")
    try:
        irqs = sorted(int(n) for n in os.listdir(os.path.join(base, "msi_irqs")) if n.isdigit())
    except OSError:
        irqs = []
    if not irqs:
        legacy = _read(os.path.join(base, "irq"), "0")
        irqs = [int(legacy)] if legacy.isdigit() and int(legacy) > 0 else []
    driver_link = os.path.join(base, "driver")
    driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None
    return {
        "address": address,
        "driver": driver,
        "numa_node": int(numa) if re.match(r"^-?\d+$", numa) else -1,
        "local_cpus": parse_cpulist(local),
        "irqs": irqs,
    }


def resolve_devices(root: str, names=(), drivers=()) -> list:
    """PCI addresses for device names (PCI address, net or infiniband name) and for every device of the drivers."""
    found = []
    for name in names:
        if _PCI_ADDRESS.match(name):
            address = name.lower()
        else:
            address = None
            for cls in ("net", "infiniband"):
                link = os.path.join(root, "sys", "class", cls, name, "device")
                if os.path.exists(link):
                    address = os.path.basename(os.path.realpath(link))
                    break
            if address is None:
                raise LookupError(f"device {name} is neither a PCI address nor under /sys/class/net or infiniband")
        if address not in found:
            found.append(address)
    for driver in drivers:
        base = os.path.join(root, "sys", "bus", "pci", "drivers", driver)
        try:
            entries = sorted(os.listdir(base))
        except OSError:
            continue
        for entry in entries:
            if _PCI_ADDRESS.match(entry) and entry not in found:
                found.append(entry)
    return found


def parse_interrupts(text: str) -> dict:
    """Parse /proc/interrupts: ``{irq: {'name': str, 'counts': [per cpu]}}`` for numbered IRQs."""
    lines = text.splitlines()
    if not lines:
        return {}
    ncpu = len(lines[0].split())
    result = {}
    for line in lines[1:]:
        head, sep, rest = line.partition(":")
        if not sep or not head.strip().isdigit():
            continue
        fields = rest.split()
        counts = [int(x) for x in fields[:ncpu] if x.isdigit()]
        tail = fields[len(counts) :]
        result[int(head.strip())] = {"name": tail[-1] if tail else "", "counts": counts}
    return result


def read_interrupts(root: str) -> dict:
    return parse_interrupts(_read(os.path.join(root, "proc", "interrupts"), ""))


def read_affinity(root: str, irqs) -> dict:
    """``{irq: [cpus]}`` from /proc/irq/N/smp_affinity_list; None for an IRQ that is gone."""
    result = {}
    for irq in irqs:
        text = _read(os.path.join(root, "proc", "irq", str(irq), "smp_affinity_list"))
        result[irq] = parse_cpulist(text) if text is not None else None
    return result


# ---------------------------------------------------------------- planner
def _ordered_candidates(cpus, siblings) -> list:
    """Primary hardware thread of every core first, then second threads, each in CPU order."""

    def rank(cpu):
        group = sorted(siblings.get(cpu, [cpu]))
        return (group.index(cpu) if cpu in group else 0, cpu)

    return sorted(cpus, key=rank)


def plan(devices, online, nodes=None, housekeeping=(), siblings=None) -> dict:
    """Plan one CPU per IRQ for each device.

    ``devices`` as from :func:`read_device`. Candidates are the CPUs of the device's NUMA node
    (or its local_cpulist, or every online CPU when the kernel has no NUMA), online, minus the
    housekeeping CPUs. When housekeeping leaves nothing local the device falls back to every
    online non-housekeeping CPU and says so in ``notes``.

    Returns ``{'irqs': {irq: [cpu]}, 'devices': [{address, numa_node, cpus, irqs, note}]}``.
    """
    nodes = nodes or {}
    siblings = siblings or {}
    online_set = set(online)
    spare = set(housekeeping)
    cursors = {}
    planned = {}
    summary = []
    for device in devices:
        note = None
        node = device.get("numa_node", -1)
        if node is not None and node >= 0 and nodes.get(node):
            local = set(nodes[node])
        elif device.get("local_cpus"):
            local = set(device["local_cpus"])
        else:
            local = set(online_set)
        candidates = sorted((local & online_set) - spare)
        if not candidates:
            candidates = sorted(online_set - spare)
            note = "no local CPU left after housekeeping; spread over all online CPUs"
        if not candidates:
            raise ValueError("housekeeping CPUs cover every online CPU: leave some CPUs for IRQs")
        ordered = _ordered_candidates(candidates, siblings)
        key = tuple(ordered)
        start = cursors.get(key, 0)
        for offset, irq in enumerate(device.get("irqs", [])):
            planned[irq] = [ordered[(start + offset) % len(ordered)]]
        cursors[key] = (start + len(device.get("irqs", []))) % len(ordered)
        summary.append(
            {
                "address": device["address"],
                "numa_node": node,
                "cpus": format_cpulist(candidates),
                "irqs": list(device.get("irqs", [])),
                "note": note,
            }
        )
    return {"irqs": dict(sorted(planned.items())), "devices": summary}


def changes(planned: dict, current: dict) -> dict:
    """IRQs whose current affinity differs from the plan: ``{irq: {'before': cpulist, 'after': cpulist}}``.

    IRQs that are gone (current None) are left out.
    """
    result = {}
    for irq, cpus in sorted(planned.items()):
        now = current.get(irq)
        if now is None:
            continue
        if sorted(now) != sorted(cpus):
            result[irq] = {"before": format_cpulist(now), "after": format_cpulist(cpus)}
    return result


def render_persist(devices, planned: dict) -> str:
    """The config the boot unit reads: one ``pci_address msi_index cpulist`` line per IRQ, stable across boots."""
    lines = []
    for device in sorted(devices, key=lambda d: d["address"]):
        for index, irq in enumerate(device.get("irqs", [])):
            if irq in planned:
                lines.append(f"{device['address']} {index} {format_cpulist(planned[irq])}")
    return PERSIST_HEADER + "\n".join(lines) + ("\n" if lines else "")


def edit_irqbalance_args(text: str, policy_script: str) -> str:
    """Ensure IRQBALANCE_ARGS in /etc/default/irqbalance (or /etc/sysconfig) holds ``--policyscript=<script>``.

    Other arguments are kept; an older ``--policyscript`` is replaced. A file without the
    variable gets it appended.
    """
    wanted = f"--policyscript={policy_script}"
    pattern = re.compile(r"^(\s*)(?:#\s*)?IRQBALANCE_ARGS=(.*)$")
    lines = text.splitlines(keepends=True)
    index = None
    for i, line in enumerate(lines):
        match = pattern.match(line.rstrip("\n"))
        if match and not line.lstrip().startswith("#"):
            index = i
    if index is None:
        prefix = text if not text or text.endswith("\n") else text + "\n"
        return prefix + f'IRQBALANCE_ARGS="{wanted}"\n'
    match = pattern.match(lines[index].rstrip("\n"))
    raw = match.group(2).strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        raw = raw[1:-1]
    args = [a for a in raw.split() if not a.startswith("--policyscript")]
    if wanted in raw.split() and len(args) == len(raw.split()) - 1:
        return text
    args.append(wanted)
    ending = "\n" if lines[index].endswith("\n") else ""
    lines[index] = f'{match.group(1)}IRQBALANCE_ARGS="{" ".join(args)}"{ending}'
    return "".join(lines)
