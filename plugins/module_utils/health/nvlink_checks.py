# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVLink checks: each GPU's links against what its model (or the node's NVSwitches) says, and the links'
error counters. Pure: takes ``nvlink.parse_*``'s readings and nvidia-smi's GPUs.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import nvlink_counts
from ansible_collections.gpuops.cluster.plugins.module_utils.health.check_record import check

# What a failing platform check adds: the setting that describes a platform built that way.
NVLINK_NONE_HINT = "if this platform has no NVLink, set gpuops_health_expected_nvlinks: 0"
NVLINK_FEWER_HINT = "if this platform gives %d, set gpuops_health_expected_nvlinks: %d"


def _match_gpu(entry, gpus):
    """The nvidia-smi GPU an ``nvidia-smi nvlink`` block speaks of: by UUID, else by index."""
    for gpu in gpus:
        if entry.get("uuid") and gpu.get("uuid") == entry["uuid"]:
            return gpu
    if any(gpu.get("uuid") for gpu in gpus) and entry.get("uuid"):
        return {"index": entry["index"], "pci_bus_id": None}
    for gpu in gpus:
        if gpu["index"] == entry["index"]:
            return gpu
    return {"index": entry["index"], "pci_bus_id": None}


def links(status, gpus, nvswitch=None, override=None, expected_gpu_count=None):
    """Every GPU's links against what its model (or the node's NVSwitches) says it must have.

    Without any expectation (PCIe GPUs, unknown models on a node without NVSwitch, one GPU alone
    without NVSwitch) the GPUs are judged against each other only, and a node where no GPU lists a
    link passes (one GPU alone) or is a skip, as before. A failure the model's count decides names
    the setting of a platform without (or with fewer) links.
    """
    entries = {}
    for entry in status["gpus"]:
        gpu = _match_gpu(entry, gpus)
        entries[gpu["index"]] = (gpu, entry)
    for gpu in gpus:
        entries.setdefault(gpu["index"], (gpu, None))
    expected = nvlink_counts.node_expected_links(
        [
            dict(gpu, product_name=gpu.get("product_name") or (entry or {}).get("name"))
            for gpu, entry in entries.values()
        ],
        nvswitch,
        override,
        expected_gpu_count,
    )
    peers = max((len(entry["links"]) for entry in status["gpus"]), default=0)
    if peers == 0 and not any(want["links"] for want in expected.values()):
        if [want["reason"] for want in expected.values()] == [nvlink_counts.ONE_GPU]:
            gpu, _entry = next(iter(entries.values()))
            return [check("nvlink", "pass", nvlink_counts.ONE_GPU, gpu)]
        return [check("nvlink", "skip", "no NVLink links reported (PCIe GPUs, or NVLink absent)")]
    checks = []
    for index in sorted(entries):
        gpu, entry = entries[index]
        want = expected[index]
        links = entry["links"] if entry else []
        active = [link for link in links if link["active"]]
        inactive = [link["link"] for link in links if not link["active"]]
        needed = want["links"] if want["links"] > 0 else peers
        by_model = override is None and want["links"] > 0  # the model's count, not the operator's
        if entry is None and want["links"]:
            detail = "not listed by nvidia-smi nvlink -s (%s)" % want["reason"]
            if by_model:
                detail += ": %s" % NVLINK_NONE_HINT
        elif not links and (want["links"] or peers):
            said = "all links inactive" if entry and entry["all_inactive"] else "no NVLink link listed"
            why = want["reason"] if want["links"] else "peers have %d" % peers
            detail = "%s, %s: reset the GPU; if all GPUs show it, check nvidia-fabricmanager and reboot" % (said, why)
            if by_model:
                detail += "; %s" % NVLINK_NONE_HINT
        elif inactive:
            detail = "NVLink %s inactive of %d" % (", ".join(map(str, inactive)), len(links))
        elif needed and len(active) < needed:
            why = want["reason"] if want["links"] > 0 else "peers have %d" % peers
            detail = "%d NVLinks active, %s" % (len(active), why)
            if by_model:
                detail += ": %s" % (NVLINK_FEWER_HINT % (len(active), len(active)))
        elif not links:
            checks.append(check("nvlink", "pass", "no NVLink expected (%s)" % want["reason"], gpu))
            continue
        else:
            speeds = sorted({link["speed_gbps"] for link in links})
            checks.append(check("nvlink", "pass", "%d links active at %s GB/s" % (len(links), speeds), gpu))
            continue
        checks.append(check("nvlink", "fail", detail, gpu, "reset_gpu"))
    return checks


def error_counters(errors, gpus, limit):
    checks = []
    for entry in errors["gpus"]:
        if not entry["links"]:
            continue  # a GPU without NVLink (PCIe cards): nothing to judge
        gpu = _match_gpu(entry, gpus)
        high = [
            "link %d %s=%d" % (link["link"], name, value)
            for link in entry["links"]
            for name, value in sorted(link["counters"].items())
            if value > limit
        ]
        if high:
            checks.append(
                check("nvlink_errors", "warn", "NVLink error counters above %d: %s" % (limit, ", ".join(high)), gpu)
            )
        else:
            checks.append(check("nvlink_errors", "pass", "NVLink error counters at or below %d" % limit, gpu))
    return checks or [check("nvlink_errors", "skip", "no NVLink error counters reported")]
