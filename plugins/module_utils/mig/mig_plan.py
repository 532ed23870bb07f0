# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plan the smallest change from a node's MIG state (``mig_state.node_state``) to the declared layout.

Per GPU, the entry of the selected mig-parted config that applies is the last one whose
``devices`` and ``device-filter`` match it (mig-parted walks the entries in order and applies
each match, so a later entry wins). A GPU no entry matches is left untouched. For the others:

* **mode**: ``-mig 1``/``-mig 0`` where the pending mode differs from the declared one, and a GPU
  reset (a reboot where the GPU cannot be reset) where the current mode does. Instances are
  destroyed before MIG is turned off; none exist after a reset that turns it on.
* **instances** (MIG on and staying on): a current GPU instance whose profile and compute
  instances the layout asks for is kept; one whose profile matches and whose compute instances
  are a part of the asked ones is kept and gets the missing compute instances (when it has none
  yet, or only 1-slice ones are missing, which always find a place); every other is
  destroyed (its compute instances first) and the missing ones are created, largest first (the
  MIG user guide: 3g.20gb must be created before smaller ones). When the new instances find no
  placement beside the kept ones (fragmentation), everything is destroyed and recreated, as
  mig-parted does.

A GPU is refused, with its processes named, when the plan would reset it with any process on
it, or destroy a GPU instance a process runs in (``nvidia-smi -q -x`` ``<processes>``); it is
never reset under a job. Compute instance profile ids follow NVML's enum
(``NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE`` 0, 2 slices 1, 3 slices 2, 4 slices 3, 7 slices 4),
as ``nvidia-smi mig -lcip`` lists them (1c 0, 2c 1, 3g 2 in a 3g.20gb instance).
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_layout

COMPUTE_PROFILE_IDS = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


def entry_for(entries, index, device_id):
    """The config entry that applies to GPU ``index`` of PCI ``device_id`` (the last match), or None."""
    chosen = None
    for entry in entries:
        filters = mig_layout.filters_of(entry)
        if filters and device_id not in filters:
            continue
        devices = entry.get("devices")
        if devices == "all" or (isinstance(devices, list) and index in devices):
            chosen = entry
    return chosen


def _signature(gi):
    return gi["profile"], sorted((ci["compute"] for ci in gi["compute_instances"]), reverse=True)


def _match(current, wanted):
    """``(kept, grown, destroy, create)``: GIs kept as they are, kept with compute instances added, and the rest."""
    remaining = list(current)
    kept, grown, create = [], [], []
    for want in wanted:
        exact = next(
            (gi for gi in remaining if _signature(gi) == (want["profile"], sorted(want["cis"], reverse=True))), None
        )
        if exact is not None:
            remaining.remove(exact)
            kept.append(exact)
        else:
            create.append(want)
    still = []
    for want in create:
        part = None
        for gi in remaining:
            have = sorted(ci["compute"] for ci in gi["compute_instances"])
            missing = list(want["cis"])
            if gi["profile"] != want["profile"] or any(missing.count(size) < have.count(size) for size in set(have)):
                continue
            for size in have:
                missing.remove(size)
            if have and any(size > 1 for size in missing):
                continue  # a wider compute instance may find no placement beside the ones there: rebuild the GI
            part = (gi, missing)
            break
        if part is None:
            still.append(want)
        else:
            remaining.remove(part[0])
            grown.append(
                {"gpu_instance": part[0]["id"], "profile": part[0]["profile"], "add": sorted(part[1], reverse=True)}
            )
    return kept, grown, remaining, still


def _largest_first(profile_set, name):
    profile = (profile_set or {}).get("profiles", {}).get(name)
    return (-profile["memory"], -profile["compute"]) if profile else (0, 0)


def _compute_instances(sizes):
    return [{"compute": size, "profile_id": COMPUTE_PROFILE_IDS[size]} for size in sorted(sizes, reverse=True)]


def _creations(wanted, profile_set):
    """GPU instances to create, largest first, each with its compute instances."""
    known = (profile_set or {}).get("profiles", {})
    return [
        {
            "profile": gi["profile"],
            "profile_id": known.get(gi["profile"], {}).get("id"),
            "compute_instances": _compute_instances(gi["cis"]),
            # one compute instance of the whole GPU instance: the default one (`-cgi <profile> -C`)
            "default_compute_instance": gi["cis"] == [mig_layout.parse_device(gi["profile"])["slices"]],
        }
        for gi in sorted(wanted, key=lambda gi: _largest_first(profile_set, gi["profile"]))
    ]


def _destructions(gpu_instances):
    return [
        {
            "gpu_instance": gi["id"],
            "profile": gi["profile"],
            "compute_instances": sorted(ci["id"] for ci in gi["compute_instances"]),
        }
        for gi in gpu_instances
    ]


def _processes_named(processes):
    return ", ".join("%s (pid %s)" % (process.get("name") or "?", process.get("pid")) for process in processes)


def plan_gpu(gpu, entry, profile_set, compute_instances=None):
    """The plan of one GPU (see :func:`plan`)."""
    result = {
        "index": gpu["index"],
        "uuid": gpu["uuid"],
        "untouched": entry is None,
        "set_mode": None,
        "reset": False,
        "destroy": [],
        "grow": [],
        "create": [],
        "refused": None,
    }
    if entry is None:
        return result
    want = bool(entry["mig-enabled"])
    current, pending = gpu["mig"].get("current"), gpu["mig"].get("pending")
    if current is None:
        if want:
            result["refused"] = "GPU %d (%s) has no MIG mode; the layout enables MIG on it" % (
                gpu["index"],
                gpu["product"],
            )
        result["untouched"] = True
        return result
    if pending != want:
        result["set_mode"] = want
    result["reset"] = current != want
    existing = gpu["gpu_instances"]
    if not want:
        result["destroy"] = _destructions(existing) if current else []
    else:
        wanted = mig_layout.gpu_instances(entry.get("mig-devices") or {}, compute_instances)
        if not current:
            result["create"] = _creations(wanted, profile_set)
        else:
            kept, grown, destroy, create = _match(existing, wanted)
            grown_ids = {g["gpu_instance"] for g in grown}
            fixed = [(gi["profile"], gi["start"]) for gi in existing if gi in kept or gi["id"] in grown_ids]
            known = (profile_set or {}).get("profiles", {})
            placeable = all(gi["profile"] in known for gi in create) and all(name in known for name, _s in fixed)
            if create and (
                not placeable or mig_layout.place([gi["profile"] for gi in create], profile_set, fixed) is None
            ):
                destroy, grown, create = list(existing), [], wanted  # fragmented: start over, as mig-parted does
            result["destroy"] = _destructions(destroy)
            result["grow"] = [
                {
                    "gpu_instance": g["gpu_instance"],
                    "profile": g["profile"],
                    "compute_instances": _compute_instances(g["add"]),
                }
                for g in grown
            ]
            result["create"] = _creations(create, profile_set)
    destroyed = {item["gpu_instance"] for item in result["destroy"]}
    processes = gpu.get("processes") or []
    if result["reset"] and processes:
        result["refused"] = "GPU %d (%s) needs a reset for the MIG mode change and runs %s" % (
            gpu["index"],
            gpu["product"],
            _processes_named(processes),
        )
    else:
        blocking = [p for p in processes if p.get("gpu_instance_id") in destroyed]
        if blocking:
            result["refused"] = "GPU %d (%s): GPU instance(s) %s to be destroyed run %s" % (
                gpu["index"],
                gpu["product"],
                ", ".join(str(i) for i in sorted(destroyed)),
                _processes_named(blocking),
            )
    changes = result["destroy"] or result["grow"] or result["create"]
    result["untouched"] = result["set_mode"] is None and not result["reset"] and not changes
    return result


def plan(state, entries, profile_set, compute_instances=None):
    """The smallest change from ``state`` (``mig_state.node_state``) to the config ``entries`` (the selected list).

    ``profile_set`` is the node's GPU model's set (``mig_profiles``), used to order creations and to
    place new instances beside kept ones. Returns ``{gpus: [per-GPU plan], changed, reset, refused, untouched}``:
    ``reset`` lists the GPUs that need a GPU reset (a reboot where none is possible), ``refused`` one sentence
    per GPU that must not be changed now, naming its processes; ``untouched`` the GPUs left as they are.
    """
    gpus = [
        plan_gpu(gpu, entry_for(entries, gpu["index"], gpu["device_id"]), profile_set, compute_instances)
        for gpu in state["gpus"]
    ]
    return {
        "gpus": gpus,
        "changed": any(not gpu["untouched"] for gpu in gpus),
        "reset": [gpu["index"] for gpu in gpus if gpu["reset"]],
        "refused": [gpu["refused"] for gpu in gpus if gpu["refused"]],
        "untouched": [gpu["index"] for gpu in gpus if gpu["untouched"]],
    }
