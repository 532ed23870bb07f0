"""Build fake /sys and /proc trees from the topology descriptions in tests/fixtures/sysfs/*.yml.

The trees are built into a temporary directory at test time rather than committed: real sysfs
names hold colons and directory symlinks, which ansible-test sanity forbids in a collection.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sysfs"
TOPOLOGIES = ("two_socket", "one_socket", "numa_less")

# Twenty sysctls with their values on a fresh kernel (the training profile changes most of them).
LIVE_SYSCTLS = {
    "kernel.numa_balancing": "1",
    "kernel.sched_autogroup_enabled": "1",
    "kernel.shmmax": "18446744073692774399",
    "vm.swappiness": "60",
    "vm.max_map_count": "65530",
    "vm.dirty_ratio": "20",
    "vm.dirty_background_ratio": "10",
    "vm.zone_reclaim_mode": "0",
    "vm.nr_hugepages": "0",
    "vm.min_free_kbytes": "67584",
    "net.core.rmem_max": "212992",
    "net.core.wmem_max": "212992",
    "net.core.rmem_default": "212992",
    "net.core.wmem_default": "212992",
    "net.core.netdev_max_backlog": "1000",
    "net.core.somaxconn": "4096",
    "net.ipv4.tcp_rmem": "4096\t131072\t6291456",
    "net.ipv4.tcp_wmem": "4096\t16384\t4194304",
    "net.ipv4.tcp_timestamps": "1",
    "net.ipv4.tcp_sack": "1",
    "fs.file-max": "9223372036854775807",
}


def cpulist(cpus) -> str:
    cpus = sorted(cpus)
    parts, start, prev = [], None, None
    for cpu in cpus:
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


def expand(text: str) -> list:
    cpus = []
    for part in text.split(","):
        low, _unused, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def load(name: str) -> dict:
    return yaml.safe_load((FIXTURES / f"{name}.yml").read_text())


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _link(root: Path, rel: str, target: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def _label(device: dict, index: int) -> str:
    if device["driver"] == "mlx5_core":
        kind = "mlx5_async0" if index == 0 else f"mlx5_comp{index - 1}"
        return f"{kind}@pci:{device['address']}"
    return device["driver"]


def build(name: str, root: Path) -> dict:
    """Build topology ``name`` under ``root``; return the spec with ``irqs`` per device address added."""
    spec = load(name)
    ncpu = spec["cpus"]
    nodes = {int(k): expand(v) for k, v in (spec.get("nodes") or {}).items()}
    stride = spec.get("sibling_stride")
    _write(root, "sys/devices/system/cpu/online", f"0-{ncpu - 1}")
    for cpu in range(ncpu):
        if stride:
            siblings = [cpu % stride, cpu % stride + stride]
            _write(root, f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list", cpulist(siblings))
        if spec.get("cpufreq"):
            base = f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
            _write(root, f"{base}/scaling_governor", "powersave" if cpu % 2 else "performance")
            _write(root, f"{base}/scaling_available_governors", "performance powersave")
    for node, cpus in nodes.items():
        _write(root, f"sys/devices/system/node/node{node}/cpulist", cpulist(cpus))
        _write(root, f"sys/devices/system/node/node{node}/hugepages/hugepages-2048kB/nr_hugepages", "0")
    _write(root, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "0")
    _write(root, "sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never")
    _write(root, "sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never")
    lines = ["     " + "".join(f"{'CPU' + str(c):>11}" for c in range(ncpu))]
    irq = 100
    spec["irqs"] = {}
    for device in spec["devices"]:
        address = device["address"]
        base = f"sys/bus/pci/devices/{address}"
        _write(root, f"{base}/numa_node", str(device["node"]))
        local = nodes.get(device["node"]) or range(ncpu)
        _write(root, f"{base}/local_cpulist", cpulist(local))
        _link(root, f"{base}/driver", f"../../drivers/{device['driver']}")
        _link(root, f"sys/bus/pci/drivers/{device['driver']}/{address}", f"../../devices/{address}")
        for cls in ("infiniband", "net"):
            if device.get(cls):
                _link(root, f"sys/class/{cls}/{device[cls]}/device", f"../../../bus/pci/devices/{address}")
        numbers = []
        if device.get("legacy_irq"):
            _write(root, f"{base}/irq", str(device["legacy_irq"]))
            numbers.append(device["legacy_irq"])
        for _unused in range(device["irqs"]):
            _write(root, f"{base}/msi_irqs/{irq}", "msix")
            numbers.append(irq)
            irq += 1
        spec["irqs"][address] = numbers
        for index, number in enumerate(numbers):
            _write(root, f"proc/irq/{number}/smp_affinity_list", f"0-{ncpu - 1}")
            counts = "".join(f"{(number * 7 + c) % 97:11d}" for c in range(ncpu))
            lines.append(f"{number:4d}:{counts}  IR-PCI-MSIX-{address} {index}-edge      {_label(device, index)}")
    lines.append("NMI:" + "".join(f"{0:11d}" for _unused in range(ncpu)) + "   Non-maskable interrupts")
    _write(root, "proc/interrupts", "\n".join(lines))
    _write(root, "proc/cmdline", "BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-amd64 root=UUID=1234 ro quiet")
    for key, value in LIVE_SYSCTLS.items():
        _write(root, "proc/sys/" + key.replace(".", "/"), value)
    return spec
