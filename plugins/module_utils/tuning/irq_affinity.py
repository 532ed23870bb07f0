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

from ansible_collections.gpuops.cluster.plugins.module_utils import container_detection, managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import run_bounded, run_checked
from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import owned_files

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


# ---------------------------------------------------------------- the module's work
# What gpuops.cluster.irq_affinity passes to AnsibleModule; run() is its work, also runnable as a part
# (module_utils/module_parts.py).
MODULE_KWARGS = dict(
    argument_spec=dict(
        devices=dict(type="list", elements="str", default=[]),
        drivers=dict(type="list", elements="str", default=[]),
        housekeeping_cpus=dict(type="str", default=""),
        irqbalance=dict(type="str", choices=["leave", "stop", "ban"], default="leave"),
        irqbalance_config=dict(type="path"),
        policy_script=dict(type="path", default="/usr/local/sbin/gpuops-irq-affinity"),
        boot_unit=dict(type="bool", default=False),
        persist=dict(type="bool", default=True),
        persist_path=dict(type="path", default="/etc/gpuops/irq-affinity.conf"),
        apply_live=dict(type="str", choices=list(container_detection.APPLY_LIVE_CHOICES), default="auto"),
        root=dict(type="path", default="/"),
    ),
    supports_check_mode=True,
)


def _systemctl(module, root, *args):
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return None, None
    argv = [systemctl]
    if not container_detection.is_running_system(root):
        argv.append(f"--root={root}")
    argv.extend(args)
    rc, out, _err = run_bounded(module, argv, "ask systemctl about irqbalance", hint="check systemd on the node")
    return rc, out.strip()


def _run(module, argv, what):
    run_checked(module, argv, what, hint="check the irqbalance unit and rerun")


def _irqbalance(module, root, result):
    policy = module.params["irqbalance"]
    state = dict(action="none", commands=[])
    result["irqbalance"] = state
    if policy == "leave":
        return False
    live_root = container_detection.is_running_system(root)
    systemctl = module.get_bin_path("systemctl")
    if policy == "stop":
        if not systemctl:
            result["not_applied_live"].append(dict(name="irqbalance", reason="systemctl not found"))
            return False
        _rc, enabled = _systemctl(module, root, "is-enabled", "irqbalance.service")
        active = "inactive"
        if live_root:
            _rc, active = _systemctl(module, root, "is-active", "irqbalance.service")
        if enabled not in ("enabled", "enabled-runtime", "static", "alias") and active not in ("active", "activating"):
            return False
        argv = [systemctl] + ([] if live_root else [f"--root={root}"]) + ["disable"]
        argv += ["--now"] if live_root else []
        argv.append("irqbalance.service")
        state.update(action="disabled", commands=[argv])
        if not module.check_mode:
            _run(module, argv, "disable irqbalance")
        return True
    config = module.params["irqbalance_config"]
    if not config:
        config = "/etc/default/irqbalance"
        if not os.path.exists(managed_file.under(root, config)) and os.path.exists(
            managed_file.under(root, "/etc/sysconfig/irqbalance")
        ):
            config = "/etc/sysconfig/irqbalance"
    path = managed_file.under(root, config)
    before = managed_file.read_text(path, "")
    after = edit_irqbalance_args(before, module.params["policy_script"])
    state["config"] = path
    if before == after:
        return False
    state["action"] = "configured"
    if module._diff:
        result["diff"].append(dict(before=before, after=after, before_header=path, after_header=path))
    if not module.check_mode:
        managed_file.write_atomic(module, path, after, create_parent=True)
    if systemctl and live_root:
        _rc, active = _systemctl(module, root, "is-active", "irqbalance.service")
        if active == "active":
            argv = [systemctl, "restart", "irqbalance.service"]
            state.update(action="restarted", commands=[argv])
            if not module.check_mode:
                _run(module, argv, "restart irqbalance")
    return True


def run(module) -> dict:
    """Everything gpuops.cluster.irq_affinity does after ``AnsibleModule`` and ``use_c_locale``: the result."""
    params = module.params
    root = params["root"]
    try:
        boot = boot_files(params["policy_script"], params["persist_path"]) if params["boot_unit"] else []
    except ValueError as exc:
        module.fail_json(msg=f"{exc}; the boot unit runs it as is")
    try:
        housekeeping = parse_cpulist(params["housekeeping_cpus"])
        addresses = resolve_devices(root, params["devices"], params["drivers"])
        devices = [read_device(root, a) for a in addresses]
    except (LookupError, ValueError) as exc:
        module.fail_json(msg=f"{exc}; check the devices and drivers options against lspci and /sys/class")
    online = read_online_cpus(root)
    if not online:
        module.fail_json(msg=f"no online CPUs under {root}/sys/devices/system/cpu/online; is root right?")
    try:
        planned = plan(devices, online, read_nodes(root), housekeeping, read_siblings(root, online))
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    current = read_affinity(root, planned["irqs"])
    diffs = changes(planned["irqs"], current)
    container = container_detection.detect(module, root)
    persist_path = managed_file.under(root, params["persist_path"])
    result = dict(
        changed=False,
        devices=planned["devices"],
        plan={str(k): format_cpulist(v) for k, v in planned["irqs"].items()},
        changes={str(k): v for k, v in diffs.items()},
        applied_live=[],
        not_applied_live=[],
        persist_path=persist_path,
        boot_files=[],
        changed_unit=False,
        container=container,
        diff=[],
    )
    changed = False
    for item in boot:
        path = managed_file.under(root, item["path"])
        if item["kind"] == "link":
            done = owned_files.sync_link(module, path, item["link"], result["diff"])
        else:
            done = owned_files.sync_file(module, path, item["content"], item["mode"], result["diff"])
        if done:
            changed = True
            result["boot_files"].append(path)
            result["changed_unit"] = result["changed_unit"] or item["kind"] == "unit"
    if params["persist"]:
        before = managed_file.read_text(persist_path, "")
        after = render_persist(devices, planned["irqs"])
        if before != after:
            changed = True
            result["diff"].append(
                dict(before=before, after=after, before_header=persist_path, after_header=persist_path)
            )
            if not module.check_mode:
                managed_file.write_atomic(module, persist_path, after, create_parent=True)
    reason = container_detection.skip_live_reason(module.params["apply_live"], root, container)
    for irq, change in diffs.items():
        if reason:
            result["not_applied_live"].append(dict(name=f"irq {irq}", reason=reason))
            continue
        if module.check_mode:
            result["applied_live"].append(str(irq))
            continue
        target = managed_file.under(root, f"/proc/irq/{irq}/smp_affinity_list")
        try:
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(change["after"] + "\n")
        except OSError as exc:
            result["not_applied_live"].append(
                dict(name=f"irq {irq}", reason=f"kernel refused the write: {exc.strerror}")
            )
            continue
        result["applied_live"].append(str(irq))
    changed = bool(result["applied_live"]) or changed
    changed = _irqbalance(module, root, result) or changed
    if module._diff and diffs:
        result["diff"].append(
            dict(
                before="".join(f"irq {k}: {v['before']}\n" for k, v in diffs.items()),
                after="".join(f"irq {k}: {v['after']}\n" for k, v in diffs.items()),
                before_header="/proc/irq/*/smp_affinity_list",
                after_header="/proc/irq/*/smp_affinity_list",
            )
        )
    if not module._diff:
        del result["diff"]
    result["changed"] = changed
    return result
