# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""IRQ affinity for the PCI devices of GPU nodes (mlx5 NICs, NVIDIA GPUs).

Readers take a root path and read sysfs (``bus/pci/devices/<addr>/numa_node``,
``local_cpulist``, ``msi_irqs``, ``devices/system/node``) and ``/proc/interrupts``.
:func:`plan` is pure: it spreads each device's IRQs across the CPUs local to the
device's NUMA node, primary hardware threads first, skipping housekeeping CPUs,
and keeps a cursor per CPU set so devices sharing a node do not pile onto its
first core. :func:`render_boot_script` and :func:`render_boot_unit` render the
boot script (also the irqbalance policy script) and the systemd unit that re-apply
the persisted plan at boot.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value

_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
BOOT_UNIT = "gpuops-irq-affinity.service"
BOOT_UNIT_DIR = "/etc/systemd/system"
BOOT_WANTS_DIR = "/etc/systemd/system/multi-user.target.wants"
# The first line the role's templates carried ({{ ansible_managed }}): kept so nodes see no change.
BOOT_HEADER = "# Ansible managed"
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
def read_online_cpus(root: str) -> list:
    return parse_cpulist(read_value(os.path.join(root, "sys", "devices", "system", "cpu", "online"), ""))


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
            nodes[int(name[4:])] = parse_cpulist(read_value(os.path.join(base, name, "cpulist"), ""))
    return dict(sorted(nodes.items()))


def read_siblings(root: str, cpus) -> dict:
    """``{cpu: [thread siblings]}`` from the CPU topology; a CPU without topology is its own sibling."""
    base = os.path.join(root, "sys", "devices", "system", "cpu")
    result = {}
    for cpu in cpus:
        text = read_value(os.path.join(base, f"cpu{cpu}", "topology", "thread_siblings_list"))
        result[cpu] = parse_cpulist(text) if text else [cpu]
    return result


def read_device(root: str, address: str) -> dict:
    """Read one PCI device: driver, numa_node (-1 when none), local_cpulist and MSI IRQs (numeric order)."""
    base = os.path.join(root, "sys", "bus", "pci", "devices", address)
    if not os.path.isdir(base):
        raise LookupError(f"PCI device {address} not found under {base}")
    numa = read_value(os.path.join(base, "numa_node"), "-1")
    local = read_value(os.path.join(base, "local_cpulist"), "")
    try:
        irqs = sorted(int(n) for n in os.listdir(os.path.join(base, "msi_irqs")) if n.isdigit())
    except OSError:
        irqs = []
    if not irqs:
        legacy = read_value(os.path.join(base, "irq"), "0")
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
    return parse_interrupts(read_value(os.path.join(root, "proc", "interrupts"), ""))


def read_affinity(root: str, irqs) -> dict:
    """``{irq: [cpus]}`` from /proc/irq/N/smp_affinity_list; None for an IRQ that is gone."""
    result = {}
    for irq in irqs:
        text = read_value(os.path.join(root, "proc", "irq", str(irq), "smp_affinity_list"))
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


# ---------------------------------------------------------------- boot files
_BOOT_SCRIPT = """#!/bin/sh
@HEADER@
# Re-applies the IRQ affinity planned by gpuops.cluster.irq_affinity at boot.
# Reads "pci_address msi_index cpulist" lines from @CONF@: IRQ numbers change
# across boots, the device address and its queue index do not.
# Called by irqbalance as --policyscript with "SYSFS_PATH IRQ": bans the IRQs of the listed devices.
CONF=@CONF@

if [ "$#" -eq 2 ]; then
    device=$(basename "$1")
    if awk -v d="$device" '$1 == d { found = 1 } END { exit !found }' "$CONF" 2>/dev/null; then
        echo "ban=true"
    fi
    exit 0
fi

[ -r "$CONF" ] || exit 0
status=0
while read -r address index cpus; do
    case "$address" in ''|'#'*) continue ;; esac
    irq=$(ls "/sys/bus/pci/devices/$address/msi_irqs" 2>/dev/null | sort -n | sed -n "$((index + 1))p")
    if [ -z "$irq" ] && [ "$index" = 0 ]; then
        irq=$(cat "/sys/bus/pci/devices/$address/irq" 2>/dev/null)
    fi
    if [ -z "$irq" ] || [ "$irq" = 0 ]; then
        echo "gpuops-irq-affinity: $address queue $index not found" >&2
        continue
    fi
    if ! echo "$cpus" > "/proc/irq/$irq/smp_affinity_list"; then
        echo "gpuops-irq-affinity: irq $irq ($address queue $index) refused $cpus" >&2
        status=1
    fi
done < "$CONF"
exit "$status"
"""

_BOOT_UNIT = """@HEADER@
[Unit]
Description=Pin NIC and GPU IRQs to their NUMA node (gpuops.cluster.kernel_tuning)
After=systemd-modules-load.service irqbalance.service
ConditionPathExists=@CONF@
ConditionVirtualization=!container

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=@SCRIPT@

[Install]
WantedBy=multi-user.target
"""


def _no_space(what: str, path: str) -> str:
    if not path.startswith("/") or any(c.isspace() for c in path):
        raise ValueError(f"{what} {path!r} must be an absolute path without spaces")
    return path


def render_boot_script(persist_path: str) -> str:
    """The boot script (mode 0755) that re-applies the plan in ``persist_path``; also irqbalance's policy script."""
    return _BOOT_SCRIPT.replace("@HEADER@", BOOT_HEADER).replace("@CONF@", _no_space("persist_path", persist_path))


def render_boot_unit(script_path: str, persist_path: str) -> str:
    """The oneshot unit that runs ``script_path`` at boot when ``persist_path`` exists, outside containers."""
    return (
        _BOOT_UNIT.replace("@HEADER@", BOOT_HEADER)
        .replace("@CONF@", _no_space("persist_path", persist_path))
        .replace("@SCRIPT@", _no_space("policy_script", script_path))
    )


def boot_files(script_path: str, persist_path: str) -> list:
    """What the boot unit needs on the node, paths as on the node (not below a root), in install order:
    ``{'kind': 'script' or 'unit', 'path', 'mode', 'content'}`` for the files and
    ``{'kind': 'link', 'path', 'link'}`` for the multi-user.target.wants link that enables the unit."""
    unit = f"{BOOT_UNIT_DIR}/{BOOT_UNIT}"
    return [
        {"kind": "script", "path": script_path, "mode": 0o755, "content": render_boot_script(persist_path)},
        {"kind": "unit", "path": unit, "mode": 0o644, "content": render_boot_unit(script_path, persist_path)},
        {"kind": "link", "path": f"{BOOT_WANTS_DIR}/{BOOT_UNIT}", "link": unit},
    ]
