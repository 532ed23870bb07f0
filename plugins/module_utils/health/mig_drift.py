# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a GPU's MIG layout, as read from ``nvidia-smi -q -x``, is the declared one: the ``mig_layout`` check. Pure.

The declared layout is ``gpuops_mig``'s selected config (``{"config": name, "entries": [...]}``, the filter
``gpuops.cluster.mig_declared``). The entry that applies to a GPU is found as ``gpu_mig`` finds it
(``mig_plan.entry_for``: the last entry whose ``devices`` and ``device-filter`` match the GPU's index and PCI device
id), and its ``mig-devices`` are expanded into GPU instances as mig-parted creates them (``mig_layout.gpu_instances``),
so the check and the module that applies the layout agree on what is declared.

Compared per GPU: the MIG mode (current, and pending: a mode set but not yet applied by a GPU reset) and the
multiset of GPU instance profiles. ``-q -x`` names no profile; :func:`mig_health.layout` names each instance from
the model's profile set where its readings fit one profile. An instance it cannot name leaves the layout
uncompared (a warning saying so), unless the instance count already differs or no assignment of its candidate
profiles gives the declared ones: then the layout differs and the check fails.
"""

from __future__ import annotations

from collections import Counter

from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_layout, mig_plan, mig_profiles


def _word(flag):
    return "on" if flag else "off"


def _counted(profiles):
    """``3x 1g.18gb + 1x 4g.71gb`` (largest count first, then by name); ``no GPU instance`` for none."""
    counts = Counter(profiles)
    if not counts:
        return "no GPU instance"
    return " + ".join("%dx %s" % (count, name) for name, count in sorted(counts.items(), key=lambda i: (-i[1], i[0])))


def declared_profiles(entry):
    """The GPU instance profiles (a list, largest first) ``entry``'s ``mig-devices`` creates."""
    if not entry.get("mig-enabled"):
        return []
    return [gi["profile"] for gi in mig_layout.gpu_instances(entry.get("mig-devices") or {})]


def _assignable(unnamed, wanted):
    """Whether each instance of ``unnamed`` (its candidate profiles) can take a different profile of ``wanted``."""
    if not unnamed:
        return not wanted
    first, rest = unnamed[0], unnamed[1:]
    for name in set(first) & set(wanted):
        left = list(wanted)
        left.remove(name)
        if _assignable(rest, left):
            return True
    return False


def _mode(index, want, mig):
    """``(status, detail, action)`` when the MIG mode decides the check (it differs, or there is no MIG), else None."""
    current, pending = mig["current"], mig["pending"]
    if current is None:
        if want:
            return "fail", "GPU %d: MIG declared on, the GPU has no MIG mode" % index, "none"
        return "pass", "GPU %d: MIG declared off, the GPU has no MIG mode" % index, "none"
    if current != want:
        detail = "GPU %d: MIG declared %s, mode is %s" % (index, _word(want), _word(current))
        if pending == want:
            return "fail", "%s (pending %s: reset the GPU or reboot)" % (detail, _word(pending)), "reset_gpu"
        return "fail", "%s: apply the layout (gpuops.cluster.gpu_mig)" % detail, "none"
    if pending is not None and pending != want:
        return (
            "fail",
            "GPU %d: MIG declared %s, mode is %s but pending %s: the next GPU reset turns it %s; apply the layout "
            "(gpuops.cluster.gpu_mig)" % (index, _word(want), _word(current), _word(pending), _word(pending)),
            "none",
        )
    return None


def _instances(index, wanted, mig):
    """``(status, detail, action)`` of the GPU instances against the declared profiles ``wanted``."""
    found = mig["gpu_instances"]
    named = [gi["profile"] for gi in found if gi["profile"]]
    unnamed = [gi for gi in found if not gi["profile"]]
    declared = "GPU %d: declared %s" % (index, _counted(wanted))
    if not unnamed:
        if Counter(named) == Counter(wanted):
            return "pass", "%s, found the same" % declared, "none"
        return "fail", "%s, found %s" % (declared, _counted(named)), "none"
    found_text = _counted(
        named + ["GI %s (%s MiB, profile not named)" % (gi["id"], gi["memory_mib"]) for gi in unnamed]
    )
    if len(found) != len(wanted):
        return "fail", "%s, found %s: the instance count differs" % (declared, found_text), "none"
    left = list((Counter(wanted) - Counter(named)).elements())
    if len(left) != len(unnamed) or not all(gi.get("profile_candidates") for gi in unnamed):
        if len(left) != len(unnamed):
            return "fail", "%s, found %s: the named profiles differ" % (declared, found_text), "none"
        why = "no profile set to name them by (mig_profile_set), or their memory was not read"
    elif not _assignable([gi["profile_candidates"] for gi in unnamed], left):
        detail = "%s, found %s: their memory and engines fit none of %s" % (declared, found_text, " + ".join(left))
        return "fail", detail, "none"
    else:
        why = "their memory and engines fit several profiles (%s)" % "; ".join(
            "GI %s: %s" % (gi["id"], " or ".join(gi["profile_candidates"])) for gi in unnamed
        )
    return "warn", "%s, found %s: cannot be compared, %s" % (declared, found_text, why), "none"


def judge(declared, gpu, mig):
    """``(status, detail, action)`` of the ``mig_layout`` check of ``gpu`` (an ``nvidia_smi_xml`` GPU) whose layout
    ``mig`` is :func:`mig_health.layout`'s, against ``declared`` (the filter ``mig_declared``'s value, or None)."""
    if not declared:
        return "skip", "no MIG layout declared (gpuops_mig)", "none"
    index = gpu["index"]
    device_id = mig_profiles.reported_device_id(gpu.get("pci_device_id"))
    entry = mig_plan.entry_for(declared.get("entries") or [], index, device_id)
    config = declared.get("config")
    if entry is None:
        return (
            "skip",
            "GPU %d: no entry of gpuops_mig config %s applies to it (devices, device-filter)"
            % (
                index,
                config,
            ),
            "none",
        )
    want = bool(entry.get("mig-enabled"))
    mode = _mode(index, want, mig)
    if mode is not None:
        return mode
    if not want:
        return "pass", "GPU %d: MIG declared off (config %s), mode is off" % (index, config), "none"
    return _instances(index, declared_profiles(entry), mig)
