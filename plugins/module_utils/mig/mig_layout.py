# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check a declared MIG layout against what the host's GPU model can hold, before any host is contacted.

``gpuops_mig`` is a mig-parted ``v1`` config as mig-parted reads it (``version: v1``,
``mig-configs: {<name>: [{devices, mig-enabled, mig-devices, device-filter}]}``), so an
operator's existing file works as it is; ``gpuops_mig_config`` names the config to apply,
as ``nvidia-mig-parted apply -c`` does. The structure follows mig-parted's own parser
(``api/spec/v1/spec.go``: required keys, no other keys, ``devices: all`` or indexes,
``mig-devices`` only when ``mig-enabled``). The selected config's entries that apply to
the host's model (no ``device-filter``, or one naming the model's PCI device ids) are then
checked against ``matrix/mig_profiles.yml``: known profiles, at most each profile's
instances, no more SM or memory slices than the model has, and a placement of every
GPU instance on the model's memory slices (``nvidia-smi mig -lgipp``).

:func:`gpu_instances` expands ``mig-devices`` into the GPU instances mig-parted creates
(``"1c.3g.20gb": 3`` is one 3g.20gb instance with three 1c compute instances) and
:func:`place` finds memory-slice starts for them; the planner reuses both.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.mig.mig_profiles import device_id, parse_device

SPEC_KEYS = ("version", "mig-configs")
ENTRY_KEYS = ("devices", "mig-enabled", "mig-devices", "device-filter")
VERSION = "v1"


def describe_set(profile_set, model=None):
    """``NVIDIA H100 80GB HBM3 (h100-80gb: 7 SM slices, 8 memory slices) holds 1g.10gb (id 19) x7, ...``."""
    holds = ", ".join(
        "%s (id %d) x%d" % (name, profile["id"], profile["max"]) for name, profile in profile_set["profiles"].items()
    )
    return "%s (%s: %d SM slices, %d memory slices) holds %s" % (
        model or profile_set["name"],
        profile_set["name"],
        profile_set["compute_slices"],
        profile_set["memory_slices"],
        holds,
    )


def _structure(spec):
    """Problems of the whole mig-parted file, as mig-parted would refuse it."""
    if not isinstance(spec, dict):
        return ["is not a mapping: give a mig-parted v1 config (version: v1, mig-configs: {...})"]
    problems = []
    if spec.get("version") != VERSION:
        problems.append("has version %r: mig-parted reads version: v1 only" % (spec.get("version"),))
    problems.extend(
        "has the unknown key %r: a v1 config holds version and mig-configs" % key
        for key in spec
        if key not in SPEC_KEYS
    )
    configs = spec.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        return [*problems, "needs mig-configs, a mapping of config names to lists of entries"]
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            problems.append("config %s needs at least one entry" % name)
            continue
        for number, entry in enumerate(entries):
            where = "config %s entry %d" % (name, number)
            problems.extend("%s: %s" % (where, problem) for problem in _entry_structure(entry))
    return problems


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _entry_structure(entry):
    if not isinstance(entry, dict):
        return ["is not a mapping of devices, mig-enabled, mig-devices and device-filter"]
    problems = [
        "has the unknown key %r (known: %s)" % (key, ", ".join(ENTRY_KEYS)) for key in entry if key not in ENTRY_KEYS
    ]
    problems.extend("needs %s" % key for key in ("devices", "mig-enabled") if key not in entry)
    devices = entry.get("devices")
    indexes = isinstance(devices, list) and all(_whole(i) and i >= 0 for i in devices)
    if "devices" in entry and devices != "all" and not indexes:
        problems.append("devices is %r: give all or a list of GPU indexes" % (devices,))
    enabled = entry.get("mig-enabled")
    if "mig-enabled" in entry and not isinstance(enabled, bool):
        problems.append("mig-enabled is %r: give true or false" % (enabled,))
    devices_map = entry.get("mig-devices")
    if enabled is True and devices_map is None:
        problems.append("enables MIG without mig-devices: give mig-devices ({} for none)")
    if enabled is False and devices_map:
        problems.append("disables MIG but lists mig-devices: remove them")
    if devices_map is not None:
        if not isinstance(devices_map, dict):
            problems.append("mig-devices is %r: give a mapping of MIG device names to counts" % (devices_map,))
        else:
            for name, count in devices_map.items():
                if parse_device(name) is None:
                    problems.append(
                        "mig-devices has %r: a MIG device is named like 1g.10gb, 1c.3g.40gb or 1g.10gb+me" % (name,)
                    )
                if not _whole(count) or count < 0:
                    problems.append("mig-devices %s has the count %r: give a whole number, 0 or more" % (name, count))
            if devices_map and all(_whole(c) and c == 0 for c in devices_map.values()):
                problems.append("mig-devices counts are all 0 (mig-parted refuses it): give {} for no devices")
    if "device-filter" in entry:
        filters = entry["device-filter"]
        filters = [filters] if isinstance(filters, str) else filters
        if not isinstance(filters, list) or any(device_id(item) is None for item in filters):
            problems.append("device-filter is %r: give PCI device ids such as 0x233010DE" % (entry["device-filter"],))
    return problems


def filters_of(entry):
    """The entry's device-filter as primary ids (``0x233010de``); empty: every device."""
    filters = entry.get("device-filter") or []
    filters = [filters] if isinstance(filters, str) else filters
    return {device_id(item) for item in filters}


def gpu_instances(mig_devices, compute_instances=None):
    """The GPU instances mig-parted creates for ``mig-devices``: ``[{"profile": "3g.20gb", "cis": [1, 1, 1]}]``.

    Like mig-parted's ``SetMigConfig``: devices largest first; a compute instance goes into the last GPU
    instance of the same profile while its SM slices fit, else into a new one. Raises ValueError for a
    compute instance size the GPU instance cannot hold (``compute_instances``: slices -> allowed sizes).
    """
    flat = []
    for name, count in (mig_devices or {}).items():
        parsed = parse_device(name)
        if parsed is None:
            raise ValueError("%r is no MIG device name" % (name,))
        allowed = (compute_instances or {}).get(parsed["slices"])
        if allowed is not None and parsed["compute"] not in allowed:
            raise ValueError(
                "%s: a %dg GPU instance holds compute instances of %s SM slices, not %d"
                % (name, parsed["slices"], "/".join(str(size) for size in allowed), parsed["compute"])
            )
        flat.extend([parsed] * int(count))
    flat.sort(key=lambda item: (-item["slices"], -item["compute"], item["gi"]))
    instances = []
    for item in flat:
        last = instances[-1] if instances else None
        if last and last["profile"] == item["gi"] and sum(last["cis"]) + item["compute"] <= item["slices"]:
            last["cis"].append(item["compute"])
        else:
            instances.append({"profile": item["gi"], "cis": [item["compute"]]})
    return instances


def place(profiles, profile_set, fixed=()):
    """Memory-slice starts for GPU instances of ``profiles`` (names), or None when they do not fit.

    ``fixed`` holds ``(profile name, start)`` of instances that stay where they are. Largest first, each at
    the first free start ``nvidia-smi mig -lgipp`` lists for its profile, backtracking on a dead end.
    """
    by_name = profile_set["profiles"]
    used = 0
    for name, start in fixed:
        mask = ((1 << by_name[name]["memory"]) - 1) << start
        if used & mask:
            return None
        used |= mask
    order = sorted(
        range(len(profiles)), key=lambda i: (-by_name[profiles[i]]["memory"], -by_name[profiles[i]]["compute"])
    )
    starts = [None] * len(profiles)

    def walk(position, taken):
        if position == len(order):
            return True
        index = order[position]
        profile = by_name[profiles[index]]
        for start in profile["placements"]:
            mask = ((1 << profile["memory"]) - 1) << start
            if not taken & mask:
                starts[index] = start
                if walk(position + 1, taken | mask):
                    return True
        return False

    return starts if walk(0, used) else None


def capacity_problems(instances, profile_set, model=None, fixed=()):
    """Why the GPU instances ``instances`` (names) cannot all exist on one GPU of ``profile_set`` (empty: they can).

    ``fixed``: ``(name, start)`` of instances that stay. Each problem ends with what the model can hold.
    """
    profiles = profile_set["profiles"]
    holds = describe_set(profile_set, model)
    unknown = sorted({name for name in instances if name not in profiles})
    if unknown:
        return ["%s: no such MIG profile; %s" % (", ".join(unknown), holds)]
    every = list(instances) + [name for name, _start in fixed]
    problems = []
    for name in sorted(set(every)):
        count = every.count(name)
        if count > profiles[name]["max"]:
            problems.append("%d x %s, at most %d fit; %s" % (count, name, profiles[name]["max"], holds))
    compute = sum(profiles[name]["compute"] for name in every)
    memory = sum(profiles[name]["memory"] for name in every)
    if compute > profile_set["compute_slices"]:
        problems.append("%d SM slices of %d; %s" % (compute, profile_set["compute_slices"], holds))
    if memory > profile_set["memory_slices"]:
        problems.append("%d memory slices of %d; %s" % (memory, profile_set["memory_slices"], holds))
    if not problems and place(list(instances), profile_set, fixed) is None:
        problems.append(
            "%s cannot be placed together on the %d memory slices (nvidia-smi mig -lgipp); %s"
            % (" + ".join(sorted(every)), profile_set["memory_slices"], holds)
        )
    return problems


def _model(gpu, matrix, profiles, report_unknown_gpu):
    """``(profiles.model(...) result, problem)`` for ``gpuops_gpu``."""
    if gpu in (None, ""):
        return (
            None,
            "gpuops_mig is set but gpuops_gpu is not: set the host's GPU model, the MIG layout is checked against it",
        )
    entry = matrix.gpu(gpu)
    if entry is None:
        if not report_unknown_gpu:
            return None, None  # the stack check names the unknown gpuops_gpu
        return None, "gpuops_gpu %r is no GPU of the compatibility matrix: the MIG layout cannot be checked" % (gpu,)
    return profiles.model(entry["key"], product=gpu), None


def selection_problems(spec, config, names=("gpuops_mig", "gpuops_mig_config")):
    """Problems of the file ``spec`` as mig-parted would refuse it, and of the selected ``config``, whatever the GPU.

    ``names``: what the two are called in the messages (the variables, or a module's options).
    """
    found = ["%s %s" % (names[0], problem) for problem in _structure(spec)]
    if found:
        return found
    configs = spec["mig-configs"]
    if config in (None, ""):
        return ["%s is not set: name the config of %s to apply (%s)" % (names[1], names[0], ", ".join(sorted(configs)))]
    if config not in configs:
        return [
            "%s is %r, which %s does not hold: set one of %s" % (names[1], config, names[0], ", ".join(sorted(configs)))
        ]
    return []


def problems(spec, config, gpu, matrix, profiles, report_unknown_gpu=True):
    """Every problem of ``gpuops_mig`` (``spec``) and ``gpuops_mig_config`` (``config``) for a host of ``gpu``.

    ``matrix`` is the stack matrix (resolves ``gpu``), ``profiles`` the loaded ``mig_profiles.yml``;
    ``report_unknown_gpu`` false leaves a ``gpu`` the matrix does not know to the stack check, which names it.
    Each problem is one sentence naming the variable, the GPU model and what it can hold.
    """
    if spec is None:
        return (
            ["gpuops_mig_config is set but gpuops_mig is not: set gpuops_mig to the mig-parted config"]
            if config
            else []
        )
    found = selection_problems(spec, config)
    if found:
        return found
    configs = spec["mig-configs"]
    model, problem = _model(gpu, matrix, profiles, report_unknown_gpu)
    if problem:
        return [problem]
    if model is None:
        return []
    profile_set = model["set"]
    name = "%s (gpuops_gpu %r)" % (model["key"], gpu)
    if model["mig"] == "ambiguous" and any(entry["mig-enabled"] for entry in configs[config]):
        return [
            "gpuops_mig config %s enables MIG, and gpuops_gpu %r names GPUs of different MIG profiles (%s): set "
            "gpuops_gpu to the product name nvidia-smi prints" % (config, gpu, ", ".join(model["products"]))
        ]
    applying = []
    for number, entry in enumerate(configs[config]):
        filters = filters_of(entry)
        if filters and (profile_set is None or not filters & profile_set["device_ids"]):
            continue
        applying.append((number, entry))
    if not applying:
        return ["gpuops_mig config %s has no entry for %s: its device-filters name other GPUs" % (config, name)]
    found = []
    for number, entry in applying:
        where = "gpuops_mig config %s entry %d" % (config, number)
        if not entry["mig-enabled"]:
            continue
        if model["mig"] == "no":
            found.append(
                "%s enables MIG on %s, which has no MIG: set mig-enabled: false or unset gpuops_mig for this host"
                % (where, name)
            )
            continue
        if model["mig"] == "unlisted":
            found.append(
                "%s enables MIG on %s, whose MIG profiles matrix/mig_profiles.yml does not record yet: add them from "
                "NVIDIA's MIG user guide, or unset gpuops_mig for this host" % (where, name)
            )
            continue
        try:
            instances = gpu_instances(entry["mig-devices"], profiles.compute_instances)
        except ValueError as exc:
            found.append("%s on %s: %s" % (where, name, exc))
            continue
        found.extend(
            "%s on %s: %s" % (where, name, problem)
            for problem in capacity_problems([gi["profile"] for gi in instances], profile_set, model["key"])
        )
    return found
