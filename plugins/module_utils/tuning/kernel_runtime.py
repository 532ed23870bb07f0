# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runtime kernel knobs outside sysctl: transparent hugepages, hugepages (total or per NUMA node), CPU governor.

Each knob is a sysfs file. Readers take a root path; :func:`plan` is pure and
returns the writes to make; :func:`render_tmpfiles` renders the systemd-tmpfiles
``w`` lines that re-apply the same writes at every boot. The three areas (thp,
hugepages, governor) can share one drop-in: :func:`area_of` and
:func:`changed_areas` say which of them a run changed.

``MODULE_KWARGS`` and :func:`run` are the module ``kernel_runtime`` itself (its ``AnsibleModule``
arguments and its work), so the same work can also run as a part of another module
(see ``module_parts``).
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils import container_detection, managed_file
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


def live_writes(writes, skip_reason, writable) -> dict:
    """Which planned sysfs ``writes`` (from :func:`plan`) are made live: the one decision of a run and of check mode.

    ``skip_reason`` is why no host-global knob may be written here (a container, a test root,
    ``apply_live: never``; from ``container_detection.skip_live_reason``) or None. ``writable(path)``
    says whether a path relative to the root can be written (a read-only /sys in a container refuses
    every write, ``apply_live: always`` or not). Returns ``{'apply': [write], 'skip': [{'name', 'reason'}]}``:
    check mode reports ``apply`` as what it would write, the run writes exactly those.
    """
    apply, skip = [], []
    for write in writes:
        if skip_reason:
            reason = skip_reason
        elif not writable(write["path"]):
            reason = f"/{write['path']} is read-only here"
        else:
            apply.append(write)
            continue
        entry = {"name": write["knob"], "reason": reason}
        if entry not in skip:
            skip.append(entry)
    return {"apply": apply, "skip": skip}


# ------------------------------------------------------------------ the module's work
MODULE_KWARGS = dict(
    argument_spec=dict(
        name=dict(type="str", default="gpuops-kernel-runtime"),
        thp_enabled=dict(type="str", choices=list(THP_ENABLED)),
        thp_defrag=dict(type="str", choices=list(THP_DEFRAG)),
        hugepages=dict(type="int"),
        hugepages_per_node=dict(type="dict"),
        hugepage_size_kb=dict(type="int", default=2048),
        governor=dict(type="str"),
        replaces=dict(type="list", elements="str", default=[]),
        persist=dict(type="bool", default=True),
        apply_live=dict(type="str", choices=list(container_detection.APPLY_LIVE_CHOICES), default="auto"),
        root=dict(type="path", default="/"),
    ),
    mutually_exclusive=[("hugepages", "hugepages_per_node")],
    supports_check_mode=True,
)


def run(module) -> dict:
    """What the module does on ``module`` (an ``AnsibleModule`` or a ``module_parts.Part``).

    Returns the module's result (``changed`` and ``diff`` included); errors go to ``module.fail_json``.
    """
    params = module.params
    root = params["root"]
    for name in [params["name"]] + params["replaces"]:
        if not name or "/" in name:
            module.fail_json(msg=f"name {name!r} must be a plain file name without .conf")
    if params["name"] in params["replaces"]:
        module.fail_json(msg=f"replaces lists {params['name']!r}, the drop-in this call writes; drop it from replaces")
    size = params["hugepage_size_kb"]
    current = {
        "thp": read_thp(root),
        "hugepages": read_hugepages(root, size),
        "governors": read_governors(root) if params["governor"] else {},
    }
    try:
        decided = plan(current, params)
    except (ValueError, TypeError) as exc:
        module.fail_json(msg=f"{exc}; fix the module arguments")
    container = container_detection.detect(module, root)
    path = os.path.join(root, "etc", "tmpfiles.d", params["name"] + ".conf")
    result = dict(
        changed=False,
        path=path,
        drift={f"/{w['path']}": dict(live=w["before"], desired=w["after"]) for w in decided["writes"]},
        applied_live=[],
        not_applied_live=list(decided["unavailable"]),
        file_changed=False,
        container=container,
    )
    before = managed_file.read_text(path)
    after = render_tmpfiles(decided["persist"]) if decided["persist"] else None
    removed = {}
    if params["persist"]:
        result["file_changed"] = before != after
        if result["file_changed"] and not module.check_mode:
            if after is None:
                os.unlink(path)
            else:
                managed_file.write_atomic(module, path, after, create_parent=True)
        for name in params["replaces"]:
            old = os.path.join(root, "etc", "tmpfiles.d", name + ".conf")
            text = managed_file.read_text(old)
            if is_managed(text):
                removed[old] = text
                if not module.check_mode:
                    os.unlink(old)
    result["removed"] = list(removed)
    reason = container_detection.skip_live_reason(module.params["apply_live"], root, container)
    decided_live = live_writes(decided["writes"], reason, lambda path: os.access(os.path.join(root, path), os.W_OK))
    for skipped in decided_live["skip"]:
        if skipped not in result["not_applied_live"]:
            result["not_applied_live"].append(skipped)
    for write in decided_live["apply"]:
        shown = f"/{write['path']}"
        if module.check_mode:
            result["applied_live"].append(shown)
            continue
        target = os.path.join(root, write["path"])
        try:
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(write["after"] + "\n")
        except OSError as exc:
            result["not_applied_live"].append(
                dict(name=write["knob"], reason=f"kernel refused the write: {exc.strerror}")
            )
            continue
        result["applied_live"].append(shown)
        now = parse_selected((managed_file.read_text(target) or "").strip())
        if write["knob"].startswith("hugepages") and now != write["after"]:
            result["not_applied_live"].append(
                dict(
                    name=write["knob"], reason=f"kernel allocated {now} of {write['after']} pages (memory fragmented?)"
                )
            )
    written = [w["path"] for w in decided["writes"] if f"/{w['path']}" in result["applied_live"]]
    result["changed_areas"] = changed_areas(
        before if result["file_changed"] else after, after, removed.values(), written
    )
    result["changed"] = result["file_changed"] or bool(result["applied_live"]) or bool(removed)
    if module._diff:
        result["diff"] = [
            dict(before=before or "", after=after or "", before_header=path, after_header=path),
            *(dict(before=text, after="", before_header=old, after_header=old) for old, text in removed.items()),
            dict(
                before="".join(f"/{w['path']}: {w['before']}\n" for w in decided_live["apply"]),
                after="".join(f"/{w['path']}: {w['after']}\n" for w in decided_live["apply"]),
                before_header="sysfs",
                after_header="sysfs",
            ),
        ]
    return result
