# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runtime kernel knobs outside sysctl: transparent hugepages, hugepages (total or per NUMA node), CPU governor.

Each knob is a sysfs file. Readers take a root path; :func:`plan` is pure and
returns the writes to make; :func:`render_tmpfiles` renders the systemd-tmpfiles
``w`` lines that re-apply the same writes at every boot. The three areas (thp,
hugepages, governor) can share one drop-in: :func:`area_of` and
:func:`changed_areas` say which of them a run changed.
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value

THP_DIR = "sys/kernel/mm/transparent_hugepage"
THP_ENABLED = ("always", "madvise", "never")
THP_DEFRAG = ("always", "defer", "defer+madvise", "madvise", "never")
TMPFILES_HEADER = (
    "# Managed by gpuops.cluster.kernel_runtime: edits here are overwritten.\n"
    "# systemd-tmpfiles writes these sysfs values at every boot.\n"
)
AREAS = ("thp", "hugepages", "governor")


def parse_selected(text):
    """``"always [madvise] never"`` -> ``"madvise"``; a plain value is returned as is; None stays None."""
    if text is None:
        return None
    match = re.search(r"\[([^\]]+)\]", text)
    return match.group(1) if match else text.strip()


def read_thp(root: str) -> dict:
    base = os.path.join(root, THP_DIR)
    return {
        "enabled": parse_selected(read_value(os.path.join(base, "enabled"))),
        "defrag": parse_selected(read_value(os.path.join(base, "defrag"))),
    }


def hugepages_path(node, size_kb: int) -> str:
    """Relative sysfs path of nr_hugepages for the whole system (node None) or one NUMA node."""
    if node is None:
        return f"sys/kernel/mm/hugepages/hugepages-{size_kb}kB/nr_hugepages"
    return f"sys/devices/system/node/node{node}/hugepages/hugepages-{size_kb}kB/nr_hugepages"


def read_hugepages(root: str, size_kb: int) -> dict:
    """``{'total': n, 'nodes': {node: n}}`` for one page size; None where the kernel lacks the file."""
    total = read_value(os.path.join(root, hugepages_path(None, size_kb)))
    nodes = {}
    for path in sorted(glob.glob(os.path.join(root, "sys/devices/system/node/node*"))):
        name = os.path.basename(path)
        if re.match(r"^node\d+$", name):
            value = read_value(os.path.join(root, hugepages_path(int(name[4:]), size_kb)))
            nodes[int(name[4:])] = int(value) if value is not None else None
    return {"total": int(total) if total is not None else None, "nodes": dict(sorted(nodes.items()))}


def read_governors(root: str) -> dict:
    """``{cpu: {'governor': str, 'available': [..]}}`` for CPUs with cpufreq; empty when there is none."""
    result = {}
    for path in glob.glob(os.path.join(root, "sys/devices/system/cpu/cpu*/cpufreq")):
        name = os.path.basename(os.path.dirname(path))
        if not re.match(r"^cpu\d+$", name):
            continue
        governor = read_value(os.path.join(path, "scaling_governor"))
        available = (read_value(os.path.join(path, "scaling_available_governors")) or "").split()
        if governor is not None:
            result[int(name[3:])] = {"governor": governor, "available": available}
    return dict(sorted(result.items()))


def plan(current: dict, desired: dict) -> dict:
    """Decide the sysfs writes.

    ``current`` holds ``thp`` (from :func:`read_thp`), ``hugepages`` (from :func:`read_hugepages`)
    and ``governors`` (from :func:`read_governors`). ``desired`` may hold ``thp_enabled``,
    ``thp_defrag``, ``hugepages`` (total), ``hugepages_per_node`` ({node: n}),
    ``hugepage_size_kb`` and ``governor``; None or a missing key leaves that knob alone.

    Returns ``{'writes': [{'path', 'before', 'after', 'knob'}], 'persist': [(glob_path, value)],
    'unavailable': [{'name', 'reason'}]}``; paths are relative to the root.
    """
    writes, persist, unavailable = [], [], []
    size = int(desired.get("hugepage_size_kb") or 2048)

    def want(knob, path, before, after):
        persist.append((path, str(after)))
        if before is None:
            unavailable.append({"name": knob, "reason": f"/{path} does not exist on this kernel"})
        elif str(before) != str(after):
            writes.append({"knob": knob, "path": path, "before": str(before), "after": str(after)})

    for knob, choices in (("enabled", THP_ENABLED), ("defrag", THP_DEFRAG)):
        value = desired.get(f"thp_{knob}")
        if value is None:
            continue
        if value not in choices:
            raise ValueError(f"thp_{knob} must be one of {', '.join(choices)}, not {value!r}")
        want(f"thp_{knob}", f"{THP_DIR}/{knob}", current["thp"].get(knob), value)

    per_node = desired.get("hugepages_per_node") or {}
    if per_node and desired.get("hugepages") is not None:
        raise ValueError("give hugepages (total) or hugepages_per_node, not both")
    if desired.get("hugepages") is not None:
        want("hugepages", hugepages_path(None, size), current["hugepages"]["total"], int(desired["hugepages"]))
    for node in sorted(per_node, key=int):
        nodes = current["hugepages"]["nodes"]
        before = nodes.get(int(node))
        if int(node) not in nodes:
            unavailable.append({"name": f"hugepages node{node}", "reason": f"NUMA node {node} does not exist"})
            continue
        want(f"hugepages node{node}", hugepages_path(int(node), size), before, int(per_node[node]))

    governor = desired.get("governor")
    if governor:
        cpus = current["governors"]
        if not cpus:
            unavailable.append({"name": "governor", "reason": "no cpufreq on this machine (a VM or a driver missing)"})
        else:
            missing = sorted(c for c, v in cpus.items() if v["available"] and governor not in v["available"])
            if missing:
                choices = " ".join(cpus[missing[0]]["available"])
                raise ValueError(f"governor {governor} is not available on CPUs {missing}; pick one of: {choices}")
            persist.append(("sys/devices/system/cpu/cpu*/cpufreq/scaling_governor", governor))
            for cpu, value in cpus.items():
                if value["governor"] != governor:
                    path = f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"
                    writes.append({"knob": "governor", "path": path, "before": value["governor"], "after": governor})
    return {"writes": writes, "persist": persist, "unavailable": unavailable}


def render_tmpfiles(persist) -> str:
    """systemd-tmpfiles lines (``w /sys/... - - - - value``) in the given order; ``w`` accepts globs."""
    lines = [f"w /{path} - - - - {value}" for path, value in persist]
    return TMPFILES_HEADER + "\n".join(lines) + ("\n" if lines else "")


def is_managed(text) -> bool:
    """Whether a tmpfiles.d drop-in was written by this module (its header), so it may be replaced."""
    return bool(text) and text.startswith(TMPFILES_HEADER.splitlines()[0])


def area_of(path: str) -> str:
    """The area of a sysfs path (leading slash or not): thp, hugepages, governor, or other."""
    path = path.lstrip("/")
    if path.startswith(THP_DIR + "/"):
        return "thp"
    if path.endswith("/cpufreq/scaling_governor"):
        return "governor"
    if "/hugepages/" in path:
        return "hugepages"
    return "other"


def persisted_by_area(text) -> dict:
    """``{area: sorted 'w' lines}`` of a tmpfiles.d drop-in's text (None or '' is empty)."""
    result = {}
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "w":
            result.setdefault(area_of(fields[1]), []).append(" ".join(fields))
    return {area: sorted(lines) for area, lines in result.items()}


def changed_areas(before, after, removed=(), written=()) -> list:
    """Areas whose persisted lines differ between ``before`` and ``after`` (texts of one drop-in), that
    had lines in a ``removed`` drop-in (texts), or that had a sysfs path in ``written``; in AREAS order."""
    old, new = persisted_by_area(before), persisted_by_area(after)
    areas = {area for area in set(old) | set(new) if old.get(area) != new.get(area)}
    for text in removed:
        areas.update(persisted_by_area(text))
    areas.update(area_of(path) for path in written)
    return [area for area in AREAS if area in areas] + sorted(areas - set(AREAS))
