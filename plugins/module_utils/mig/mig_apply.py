# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Turn a MIG plan (``mig_plan.plan``) into the ``nvidia-smi`` commands that carry it out, and compare layouts.

Per GPU the commands run in this order (the MIG user guide's rules: compute instances go before their GPU
instance, instances before MIG is turned off, a new mode takes effect at a GPU reset, bigger GPU instances
are created before smaller ones):

1. ``nvidia-smi mig -i N -dci -gi G`` then ``-dgi -gi G`` for each GPU instance the plan destroys;
2. ``nvidia-smi -i N -mig 1|0`` where the pending mode differs from the declared one;
3. ``nvidia-smi -i N -r`` where the current mode does (a reboot where the GPU cannot be reset);
4. ``nvidia-smi mig -i N -cci <ids> -gi G`` for the compute instances added to kept GPU instances;
5. ``nvidia-smi mig -i N -cgi <ids> -C`` for new GPU instances with their one default compute instance
   (consecutive ones in one call), and ``-cgi <id>`` then ``-cci <ids> -gi <new id>`` for the others: the new
   GPU instance's id is read from what ``-cgi`` prints.

Commands are argv lists without the ``nvidia-smi`` binary (the module puts the node's path first).
A layout is written as mig-parted writes ``mig-devices``: ``{"mig_enabled": true, "mig_devices":
{"1c.3g.40gb": 3, "2g.20gb": 1}}``, so a plan's before and after read like the declared config.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_layout, mig_plan

# "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)" (MIG user guide)
_CREATED_GI = re.compile(r"^Successfully created GPU instance ID\s+(\d+) on GPU\s+(\d+) using profile", re.M)


PROFILE_NUMBERS = ("id", "compute", "memory")


def profile_set_of(given):
    """``(profile set for mig_plan, problems)`` from a profile set as ``matrix/mig_profiles.yml`` writes it.

    ``profiles`` is a list of ``{name, id, compute, memory, placements}`` (the file's form) or a mapping of
    names to them (the loaded form). None gives None: the planner then places nothing beside kept instances.
    """
    if given is None:
        return None, []
    profiles = given.get("profiles") if isinstance(given, dict) else None
    if isinstance(profiles, dict):
        profiles = [dict(profile, name=name) for name, profile in profiles.items()]
    if not isinstance(profiles, list) or not profiles:
        return None, ["profile_set needs profiles, as matrix/mig_profiles.yml lists them for the GPU model"]
    found, problems = {}, []
    for profile in profiles:
        name = profile.get("name") if isinstance(profile, dict) else None
        numbers = isinstance(profile, dict) and all(
            isinstance(profile.get(key), int) and not isinstance(profile.get(key), bool) for key in PROFILE_NUMBERS
        )
        placements = isinstance(profile, dict) and isinstance(profile.get("placements"), list)
        if not name or mig_layout.parse_device(name) is None or not numbers or not placements:
            problems.append(
                "profile_set profile %r needs a MIG profile name, id, compute, memory (whole numbers) and placements"
                % (profile,)
            )
            continue
        found[name] = {key: profile[key] for key in (*PROFILE_NUMBERS, "placements")}
    return ({"profiles": found} if not problems else None), problems


def gpu_index(gpu):
    return str(gpu["index"])


def destroy_commands(gpu_plan):
    """Step 1: every destroyed GPU instance's compute instances, then the GPU instance."""
    commands = []
    index = gpu_index(gpu_plan)
    for item in gpu_plan["destroy"]:
        if item["compute_instances"]:
            commands.append(["mig", "-i", index, "-dci", "-gi", str(item["gpu_instance"])])
        commands.append(["mig", "-i", index, "-dgi", "-gi", str(item["gpu_instance"])])
    return commands


def mode_command(gpu_plan):
    """Step 2, or None."""
    if gpu_plan["set_mode"] is None:
        return None
    return ["-i", gpu_index(gpu_plan), "-mig", "1" if gpu_plan["set_mode"] else "0"]


def reset_command(gpu_plan):
    """Step 3, or None."""
    return ["-i", gpu_index(gpu_plan), "-r"] if gpu_plan["reset"] else None


def _profile_token(creation):
    return str(creation["profile_id"]) if creation.get("profile_id") is not None else creation["profile"]


def _ci_ids(compute_instances):
    return ",".join(str(ci["profile_id"]) for ci in compute_instances)


def grow_commands(gpu_plan):
    """Step 4: compute instances added to kept GPU instances."""
    index = gpu_index(gpu_plan)
    return [
        ["mig", "-i", index, "-cci", _ci_ids(item["compute_instances"]), "-gi", str(item["gpu_instance"])]
        for item in gpu_plan["grow"]
    ]


def create_batches(gpu_plan):
    """Step 5 as ``[(argv, compute instances or None)]``, in the plan's order (largest first).

    ``compute instances`` None: the ``-cgi ... -C`` call made them; otherwise the caller reads the new GPU
    instance's id from the output (:func:`created_gpu_instances`) and runs :func:`compute_command`.
    """
    index = gpu_index(gpu_plan)
    batches = []
    defaults = []
    for creation in gpu_plan["create"]:
        if creation["default_compute_instance"]:
            defaults.append(_profile_token(creation))
            continue
        if defaults:
            batches.append((["mig", "-i", index, "-cgi", ",".join(defaults), "-C"], None))
            defaults = []
        batches.append((["mig", "-i", index, "-cgi", _profile_token(creation)], creation["compute_instances"]))
    if defaults:
        batches.append((["mig", "-i", index, "-cgi", ",".join(defaults), "-C"], None))
    return batches


def compute_command(index, gpu_instance, compute_instances):
    return ["mig", "-i", str(index), "-cci", _ci_ids(compute_instances), "-gi", str(gpu_instance)]


def created_gpu_instances(text):
    """The GPU instance ids ``nvidia-smi mig -cgi`` says it created, in order."""
    return [int(match.group(1)) for match in _CREATED_GI.finditer(text or "")]


def describe(gpu_plan):
    """What the plan does to one GPU, in words: ``["destroy GPU instance 5 (2g.20gb)", "create 3g.40gb"]``."""
    words = []
    for item in gpu_plan["destroy"]:
        words.append("destroy GPU instance %d (%s)" % (item["gpu_instance"], item["profile"]))
    if gpu_plan["set_mode"] is not None:
        words.append("set MIG mode %s" % ("on" if gpu_plan["set_mode"] else "off"))
    if gpu_plan["reset"]:
        words.append("reset the GPU")
    for item in gpu_plan["grow"]:
        words.append(
            "add compute instances %s to GPU instance %d (%s)"
            % (_sizes(item["compute_instances"]), item["gpu_instance"], item["profile"])
        )
    for creation in gpu_plan["create"]:
        words.append("create %s (compute instances %s)" % (creation["profile"], _sizes(creation["compute_instances"])))
    return words


def _sizes(compute_instances):
    return "+".join("%dc" % ci["compute"] for ci in compute_instances)


def _device_name(gi_profile, compute):
    slices = mig_layout.parse_device(gi_profile)["slices"]
    return gi_profile if compute == slices else "%dc.%s" % (compute, gi_profile)


def _counted(names):
    return {name: names.count(name) for name in sorted(set(names))}


def current_layout(gpu):
    """A GPU's layout as read (``mig_state.node_state``): ``{mig_enabled, pending_mig, mig_devices}``."""
    names = [
        _device_name(gi["profile"], ci["compute"]) for gi in gpu["gpu_instances"] for ci in gi["compute_instances"]
    ]
    empty = [gi["profile"] + " (no compute instance)" for gi in gpu["gpu_instances"] if not gi["compute_instances"]]
    return {
        "mig_enabled": gpu["mig"].get("current"),
        "pending_mig": gpu["mig"].get("pending"),
        "mig_devices": _counted(names + empty),
    }


def declared_layout(entry, compute_instances=None):
    """The layout a config entry declares, with the device names as ``-lci`` prints them."""
    if not entry["mig-enabled"]:
        return {"mig_enabled": False, "pending_mig": False, "mig_devices": {}}
    names = [
        _device_name(gi["profile"], size)
        for gi in mig_layout.gpu_instances(entry.get("mig-devices") or {}, compute_instances)
        for size in gi["cis"]
    ]
    return {"mig_enabled": True, "pending_mig": True, "mig_devices": _counted(names)}


def gpu_key(gpu):
    return "GPU %d (%s)" % (gpu["index"], gpu["uuid"])


def current_layout_of(state):
    """Every GPU's :func:`current_layout`, keyed by :func:`gpu_key`."""
    return {gpu_key(gpu): current_layout(gpu) for gpu in state["gpus"]}


def layouts(state, entries, compute_instances=None):
    """``(before, after)``: each GPU's layout now, and once the plan is done (an untouched GPU as it is)."""
    before, after = {}, {}
    for gpu in state["gpus"]:
        key = gpu_key(gpu)
        before[key] = current_layout(gpu)
        entry = mig_plan.entry_for(entries, gpu["index"], gpu["device_id"])
        usable = entry is not None and gpu["mig"].get("current") is not None
        after[key] = declared_layout(entry, compute_instances) if usable else before[key]
    return before, after


def differences(state, expected, only=None):
    """One sentence per GPU whose layout read in ``state`` differs from ``expected`` (keyed by :func:`gpu_key`)."""
    found = []
    for gpu in state["gpus"]:
        key = gpu_key(gpu)
        if (only is not None and gpu["index"] not in only) or key not in expected:
            continue
        have = current_layout(gpu)
        if have != expected[key]:
            found.append("%s: declared %s, found %s" % (key, _words(expected[key]), _words(have)))
    return found


def pending_differences(state, expected, pending):
    """For GPUs waiting for a reboot (indexes ``pending``): one sentence each whose pending mode is not the declared."""
    found = []
    for gpu in state["gpus"]:
        key = gpu_key(gpu)
        if gpu["index"] in pending and gpu["mig"].get("pending") != expected[key]["mig_enabled"]:
            found.append(
                "%s: the MIG mode pending for the reboot is %s, not the declared %s"
                % (key, _on(gpu["mig"].get("pending")), _on(expected[key]["mig_enabled"]))
            )
    return found


def _on(flag):
    return "on" if flag else "off"


def _words(layout):
    if not layout["mig_enabled"]:
        return "MIG off" + (" (on pending)" if layout["pending_mig"] else "")
    devices = ", ".join("%s x%d" % (name, count) for name, count in layout["mig_devices"].items()) or "no instance"
    return "MIG on" + ("" if layout["pending_mig"] else " (off pending)") + ": " + devices
