# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the health checks read a GPU with MIG on, and the MIG layout the verdict reports. Pure.

With MIG on, the driver reports a GPU's memory errors differently, and ``nvidia-smi -q -x`` with it:

- The GPU's **volatile** ECC counts read ``N/A``. Volatile errors are counted per MIG device, and only the
  uncorrectable SRAM ones (``<mig_device><ecc_error_count><volatile_count><sram_uncorrectable>``); the
  **aggregate** (lifetime) counts stay per GPU. NVML's ``nvmlDeviceGetMemoryErrorCounter``: "On MIG-enabled GPUs,
  per instance information can be queried using specific MIG device handles. Per instance information is
  currently only supported for non-DRAM uncorrectable volatile errors. Querying volatile errors using device
  handles is currently not supported" (nvml.h 13.3.29); a real ``nvidia-smi -q`` of an A100 with MIG on shows the
  GPU's volatile counts ``N/A`` and its aggregate ones as numbers (NVIDIA/nvidia-docker issue 1473).
- ``<remapped_rows>`` reads ``N/A``: ``nvmlDeviceGetRemappedRows`` returns ``NVML_ERROR_NOT_SUPPORTED`` "if MIG is
  enabled" (nvml.h 13.3.29). A row remap still shows in the kernel log: Xid 63 when one is recorded (it takes
  effect at the GPU's next reset) and Xid 64 when recording it failed, so the ``row_remap`` check reads those.
- The XML names no MIG profile: a ``<mig_device>`` has its GPU and compute instance ids, its compute instance's
  SMs, its GPU instance's shared engines and memory (``nvsmi_device_v12.dtd`` of nvidia-smi 535.261.03, kept in
  ``tests/fixtures/nvidia-smi/``). :func:`layout` names each GPU instance's profile from those readings against
  the GPU model's profile set (``matrix/mig_profiles.yml``, as ``gpu_mig`` takes it), when it is given.

Where the reading a check needs cannot be had, the finding says so and does not pass.
"""

from __future__ import annotations

import math

from ansible_collections.gpuops.cluster.plugins.module_utils.health import xid_catalog
from ansible_collections.gpuops.cluster.plugins.module_utils.health.nvidia_smi_xml import normalize_bus_id

ROW_REMAP_XIDS = (63, 64)  # recorded (pending until the GPU's next reset), recording failed


def mig_on(gpu):
    return (gpu.get("mig_mode") or {}).get("current") is True


_RANK = {"skip": 0, "pass": 1, "warn": 2, "fail": 3}


def _verdict(findings, ok):
    """``(status, detail, action)`` of ``findings`` (``(status, detail, action)`` each): the worst status, every
    detail, the strongest action; a pass saying ``ok`` when there is none."""
    if not findings:
        return "pass", ok, "none"
    status = max((finding[0] for finding in findings), key=_RANK.get)
    return status, "; ".join(finding[1] for finding in findings), xid_catalog.strongest(f[2] for f in findings)


def _word(flag):
    return "enabled" if flag else "disabled"


def _device_name(device):
    return "GI %s/CI %s" % (device.get("gpu_instance_id"), device.get("compute_instance_id"))


# --- the layout ------------------------------------------------------------------------------------


def _profiles(profile_set):
    """``[{name, compute, memory}]`` of a profile set (the file's list form or the loaded mapping); [] for None."""
    profiles = (profile_set or {}).get("profiles") if isinstance(profile_set, dict) else None
    if isinstance(profiles, dict):
        profiles = [dict(profile, name=name) for name, profile in profiles.items()]
    return [
        profile
        for profile in profiles or []
        if isinstance(profile, dict)
        and profile.get("name")
        and isinstance(profile.get("compute"), int)
        and isinstance(profile.get("memory"), int)
    ]


def profile_candidates(instance, gpu_memory_mib, profile_set):
    """The profiles of ``profile_set`` a GPU instance read from ``-q -x`` can be (best first; [] when none fits).

    The memory slices are those whose share of the GPU's memory is nearest the instance's memory (a 1g.18gb of an
    H200 has 16 GiB of 140); among profiles of as many memory slices, the compute slices are the instance's copy
    engines (one per slice: 2 on an A100 2g.20gb, 3 on an H100 3g.40gb, 7 on an A100 7g.40gb in real captures)
    and a media extension (``+me``) has an OFA engine.
    """
    profiles = _profiles(profile_set)
    memory = instance.get("memory_mib")
    if not profiles or not memory or not gpu_memory_mib:
        return []
    slices = max(profile["memory"] for profile in profiles)

    def distance(profile):
        return abs(math.log(memory / (gpu_memory_mib * profile["memory"] / slices)))

    nearest = min(distance(profile) for profile in profiles)
    found = [profile for profile in profiles if math.isclose(distance(profile), nearest)]
    engines, ofa = instance.get("copy_engines"), instance.get("ofa")
    if len(found) > 1 and engines is not None:
        found = [profile for profile in found if profile["compute"] == engines] or found
    if len(found) > 1 and ofa is not None:
        found = [profile for profile in found if ("+me" in profile["name"]) == (ofa > 0)] or found
    return [profile["name"] for profile in found]


def _gpu_instances(gpu, profile_set):
    instances = {}
    for device in gpu.get("mig_device_readings") or []:
        instance = instances.setdefault(
            device.get("gpu_instance_id"),
            {
                "id": device.get("gpu_instance_id"),
                "profile": None,
                "compute_instances": [],
                "memory_mib": device.get("memory_total_mib"),
                "multiprocessors": 0,
                "copy_engines": device.get("copy_engines"),
                "ofa": device.get("ofa"),
            },
        )
        instance["compute_instances"].append(device.get("compute_instance_id"))
        instance["multiprocessors"] += device.get("multiprocessors") or 0
    found = []
    for key in sorted(instances, key=lambda gi: (gi is None, gi)):
        instance = instances[key]
        candidates = profile_candidates(instance, gpu.get("memory_total_mib"), profile_set)
        if len(candidates) == 1:
            instance["profile"] = candidates[0]
        elif candidates:
            instance["profile_candidates"] = candidates
        found.append(instance)
    return found


def layout(gpu, profile_set=None):
    """``{current, pending, gpu_instances}`` of one GPU, from its ``-q -x`` reading.

    ``current``/``pending``: the MIG mode (None where the GPU has no MIG). ``gpu_instances``: one per GPU instance
    (``id``, ``profile`` or None, ``profile_candidates`` when the readings fit several, ``compute_instances`` (ids),
    ``memory_mib``, ``multiprocessors`` (its compute instances' SMs), ``copy_engines``, ``ofa``).
    """
    mode = gpu.get("mig_mode") or {}
    instances = _gpu_instances(gpu, profile_set) if mig_on(gpu) else []
    return {"current": mode.get("current"), "pending": mode.get("pending"), "gpu_instances": instances}


def describe(mig):
    """``3g.71gb (GI 1), 2 x 1g.18gb (GI 9, 10)``; an unnamed instance by its id and memory."""
    groups = {}
    for instance in mig["gpu_instances"]:
        name = instance["profile"] or "%s MiB" % instance["memory_mib"]
        groups.setdefault(name, []).append(str(instance["id"]))
    return ", ".join(
        "%s%s (GI %s)" % ("%d x " % len(ids) if len(ids) > 1 else "", name, ", ".join(ids))
        for name, ids in groups.items()
    )


# --- the checks -------------------------------------------------------------------------------------


def mode_finding(gpu, mig):
    """``(status, detail, action)`` of the ``mig_mode`` check, with the GPU's instances."""
    if mig["current"] is None:
        return "skip", "MIG not supported", "none"
    if mig["pending"] is not None and mig["pending"] != mig["current"]:
        detail = "MIG %s, %s pending: reset the GPU to apply" % (_word(mig["current"]), _word(mig["pending"]))
        return "warn", detail, "reset_gpu"
    if not mig["current"]:
        return "pass", "MIG disabled", "none"
    if not mig["gpu_instances"]:
        return (
            "warn",
            "MIG enabled with no GPU instance: no job can use this GPU; the instances do not survive a reboot or "
            "a driver reload, apply the layout again (gpuops.cluster.gpu_mig)",
            "none",
        )
    return "pass", "MIG enabled: %s" % describe(mig), "none"


def ecc_errors(gpu, limits):
    """``(status, detail, action)`` of the ``ecc_errors`` check of a GPU with MIG on whose volatile counts read N/A,
    else None (the per-GPU counts are judged as without MIG).

    The volatile count is the MIG devices' uncorrectable SRAM errors, summed (each device's own count named);
    the aggregate counts are the GPU's, as without MIG. A MIG device whose count is unreadable, or a GPU with
    no MIG device to count on, is a warning saying so, never a pass.
    """
    volatile = (gpu.get("ecc_errors") or {}).get("volatile") or {}
    if not mig_on(gpu) or volatile.get("uncorrectable") is not None:
        return None
    errors = gpu.get("ecc_errors") or {}
    aggregate = errors.get("aggregate") or {}
    devices = gpu.get("mig_device_readings") or []
    findings = []
    counted = [device for device in devices if device.get("volatile_sram_uncorrectable") is not None]
    unread = [_device_name(device) for device in devices if device.get("volatile_sram_uncorrectable") is None]
    if not devices:
        findings.append(
            ("warn", "volatile ECC counts not readable: with MIG on the driver counts them per MIG device, and "
             "this GPU has none", "none")
        )  # fmt: skip
    if unread:
        findings.append(("warn", "volatile ECC count not readable on MIG device %s" % ", ".join(unread), "none"))
    total = sum(device["volatile_sram_uncorrectable"] for device in counted)
    if total > limits["ecc_volatile_uncorrectable"]:
        where = ", ".join(
            "%s: %d" % (_device_name(device), device["volatile_sram_uncorrectable"])
            for device in counted
            if device["volatile_sram_uncorrectable"]
        )
        findings.append(
            ("fail", "%d uncorrectable SRAM ECC errors since the driver loaded (MIG devices %s)" % (total, where),
             "reset_gpu")
        )  # fmt: skip
    if aggregate.get("uncorrectable") is None:
        findings.append(("warn", "aggregate ECC counts not readable", "none"))
    elif aggregate["uncorrectable"] > limits["ecc_aggregate_uncorrectable"]:
        findings.append(
            ("warn", "%d uncorrectable ECC errors over the GPU's life" % aggregate["uncorrectable"], "none")
        )
    if errors.get("sram_threshold_exceeded"):
        findings.append(("fail", "SRAM uncorrectable error threshold exceeded", "hardware_inspection"))
    ok = (
        "no uncorrectable ECC errors on its %d MIG devices since the driver loaded (SRAM: with MIG on the driver "
        "counts no volatile DRAM or correctable errors) nor over the GPU's life" % len(counted)
    )
    return _verdict(findings, ok)


def _row_remap_events(gpu, kernel):
    found = {}
    for event in kernel.get("events") or []:
        if event.get("kind") != "xid" or event.get("code") not in ROW_REMAP_XIDS:
            continue
        if normalize_bus_id(event.get("pci_bus_id")) == gpu.get("pci_key"):
            found[event["code"]] = found.get(event["code"], 0) + 1
    return found


def pending_remap(gpus):
    """Whether a kernel event is an Xid 63 of one of ``gpus`` with MIG on and remapped rows unreported: the remap it
    recorded may still be pending and nothing else says so, so the node command keeps it open like a fatal finding
    (``open_findings.still_open``) until a drain is confirmed or the node reboots, rather than seeing it once."""
    keys = {gpu.get("pci_key") for gpu in gpus if mig_on(gpu) and gpu.get("remapped_rows") is None}

    def kept(event):
        return (
            event.get("kind") == "xid" and event.get("code") == 63 and normalize_bus_id(event.get("pci_bus_id")) in keys
        )

    return kept


def row_remap(gpu, kernel, kernel_failed=None, kernel_unavailable=None):
    """``(status, detail, action)`` of the ``row_remap`` check of a GPU with MIG on whose remapped rows read N/A, else
    None. Judged from the kernel log's Xid 63 (a remap recorded, applied at the GPU's next reset: pending) and
    Xid 64 (recording it failed) for this GPU; without the kernel log, the check fails when the log could not be
    read (``kernel_failed``) and is skipped, saying why, when it was not read (``kernel_unavailable``).
    """
    if not mig_on(gpu) or gpu.get("remapped_rows") is not None:
        return None
    why = "with MIG on the driver does not report remapped rows"
    if kernel is None:
        if kernel_failed:
            return "fail", "%s, and the kernel log (Xid 63/64) could not be read: %s" % (why, kernel_failed), "none"
        reason = kernel_unavailable or "not read"
        return "skip", "%s, and the kernel log (Xid 63/64) was not read: %s" % (why, reason), "none"
    events = _row_remap_events(gpu, kernel)
    findings = []
    if events.get(64):
        action = xid_catalog.lookup(64)["action"]
        findings.append(("fail", "recording a row remap failed (Xid 64 x%d in the kernel log; %s)" % (events[64], why),
                         action))  # fmt: skip
    if events.get(63):
        findings.append(
            ("fail", "a row remap was recorded (Xid 63 x%d in the kernel log) and applies at the GPU's next reset; "
             "%s, so it may still be pending: reset the GPU" % (events[63], why), "reset_gpu")
        )  # fmt: skip
    return _verdict(findings, "no Xid 63 or 64 for this GPU in the kernel log (%s, so the log is read instead)" % why)
