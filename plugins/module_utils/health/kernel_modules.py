# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which installed kernels have the NVIDIA module, and which kernel the node boots next. Pure but for reads.

An unattended kernel upgrade whose DKMS build failed (no headers, a driver that does not build on the new
kernel) boots the node without a GPU driver. This reads, under ``root`` (``/`` on a node, a fake tree in tests):

- the installed kernels: ``/lib/modules/<kver>`` with a kernel image ``/boot/vmlinuz-<kver>`` (or ``vmlinux-``);
  a modules directory left behind by a removed kernel (DKMS builds keep it) has no image and is not a kernel;
- the NVIDIA module of each: a ``nvidia.ko`` (``.xz``, ``.zst``, ``.gz``; Debian's ``nvidia-current.ko``) that
  ``/lib/modules/<kver>/modules.dep`` lists and that is there. Every way the driver reaches a kernel puts it
  there: DKMS (``updates/dkms/``, or ``weak-updates/`` on RHEL, ``installed-weak``), Ubuntu's precompiled
  ``linux-modules-nvidia-*`` packages and RHEL's precompiled ``kmod-nvidia-*`` packages; ``modprobe`` loads only
  what ``modules.dep`` lists (without a ``modules.dep``, the tree is searched for the file);
- the DKMS driver modules (``/var/lib/dkms/nvidia*``, the default DKMS tree) and, where read,
  ``dkms status`` (:func:`parse_dkms_status`), which says why a kernel has none (built but not installed, not
  built, broken) and so which fix applies;
- the running kernel (``/proc/sys/kernel/osrelease``) and whether the module is loaded (``/sys/module/nvidia``).

The kernel the node boots next (:func:`next_boot_kernel`): ``grubby --default-kernel`` where the node has grubby
(the RHEL family, where the default entry is set by kernel-install and can be chosen by the operator), else the
newest installed kernel in version order, which is GRUB's first (default) entry as ``grub-mkconfig`` writes it on
Debian and Ubuntu (``GRUB_DEFAULT=0``). A ``GRUB_DEFAULT=saved`` or a pinned entry is not read: such a node's
operator chose a kernel and the newest one is still judged, so the check may fail where that node would boot an
older kernel with a module; it never passes a kernel the node boots without one because of it.

:func:`findings` judges one reading: the next-boot kernel without a module fails, any other installed kernel
without one warns, and nothing to check (no driver installed by DKMS or a package) skips. The module loaded in the
running kernel does not survive a reboot, so the running kernel is judged by its files like any other.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value, under

MODULES_DIR = "/lib/modules"
BOOT_DIR = "/boot"
DKMS_TREE = "/var/lib/dkms"
OSRELEASE = "/proc/sys/kernel/osrelease"
LOADED = ("/sys/module/nvidia", "/sys/module/nvidia_current")
KERNEL_IMAGES = ("vmlinuz-", "vmlinux-")
# DKMS module names of the NVIDIA driver: nvidia (NVIDIA's and Ubuntu's packages), nvidia-open (NVIDIA's RHEL
# open-module DKMS package), nvidia-srv (Ubuntu's -server branches), nvidia-current and nvidia-tesla-<branch>
# (Debian). Not nvidia-fs (GPUDirect Storage) or other modules built beside the driver. The last three as real
# `dkms status` lines print them, found with the code search: "nvidia-srv/535.309.01, 6.17.0-23-generic, x86_64:
# installed" (Ubuntu nvidia-dkms-535-server), "nvidia-tesla-470/470.256.02" and "nvidia-current/535.183.01"
# (Debian 12's nvidia-tesla-470-kernel-dkms and nvidia-kernel-dkms).
DRIVER_DKMS_NAME = re.compile(r"^nvidia(-open|-srv|-current|-tesla(-\d+)?)?$")
# The driver's module file: nvidia.ko, compressed or not; Debian renames it nvidia-current.ko.
DRIVER_KO = re.compile(r"(^|/)nvidia(-current|-tesla(-\d+)?)?\.ko(\.(xz|zst|gz))?$")
DKMS_STATES = ("added", "built", "installed", "installed-weak", "broken")
# dkms >= 2.8.6: "nvidia/580.95.05, 6.8.0-51-generic, x86_64: installed"; older, and every installed-weak
# line: "nvidia, 580.95.05, 6.8.0-51-generic, x86_64: installed"; "nvidia/580.95.05: added" (older
# "nvidia, 580.95.05: added"); "nvidia/580.95.05: broken" (dkms >= 3.1.3). Suffixes in parentheses, both
# spellings: "(original_module exists)" / "(Original modules exist)", "(WARNING! Diff between built and
# installed module!)" / "(Differences between built and installed modules)", "(WARNING! Missing some built
# modules!)" / "(Built modules are missing in the kernel modules folder)". dkms-project/dkms dkms.in do_status().
_DKMS_LINE = re.compile(
    r"^(?P<module>[^\s,/:]+)(?:/|, )(?P<version>[^\s,:]+)"
    r"(?:, (?P<kernel>[^\s,]+), (?P<arch>[^\s,:]+))?"
    r": (?P<state>installed-weak|installed|built|added|broken)"
    r"(?: from (?P<built_for>\S+))?"
    r"(?P<extra>(?:\s*\([^)]*\))*)\s*$"
)
_EXTRA = re.compile(r"\(([^)]*)\)")


def parse_dkms_status(text):
    """``dkms status`` output -> ``{entries: [{module, version, kernel, arch, state, built_for, notes}], warnings}``.

    ``kernel`` and ``arch`` are None for a module added but not built, or broken; ``built_for`` is the kernel an
    ``installed-weak`` module was built for (``kernel`` is the one it serves). Lines that are no status line
    (warnings dkms prints) are kept in ``warnings``.
    """
    entries, warnings = [], []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        match = _DKMS_LINE.match(line)
        if not match:
            warnings.append(line)
            continue
        entries.append(
            {
                "module": match.group("module"),
                "version": match.group("version"),
                "kernel": match.group("kernel"),
                "arch": match.group("arch"),
                "state": match.group("state"),
                "built_for": match.group("built_for"),
                "notes": [note.strip() for note in _EXTRA.findall(match.group("extra") or "")],
            }
        )
    return {"entries": entries, "warnings": warnings}


def is_driver_module(name):
    """Whether a DKMS module name is the NVIDIA driver's (``nvidia``, ``nvidia-open``, ``nvidia-srv`` ...)."""
    return bool(DRIVER_DKMS_NAME.match(name or ""))


def version_key(kver):
    """Sort key of a kernel release in version order (``sort -V``, GRUB's ``version_sort``): 6.8.0-100 > 6.8.0-51."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.findall(r"\d+|[^\d]+", kver)]


def installed_kernels(root="/"):
    """Releases with ``/lib/modules/<kver>`` and a kernel image in ``/boot``, oldest first."""
    try:
        names = os.listdir(under(root, MODULES_DIR))
    except OSError:
        return []
    kernels = [
        name
        for name in names
        if os.path.isdir(under(root, MODULES_DIR, name))
        and any(os.path.isfile(under(root, BOOT_DIR, image + name)) for image in KERNEL_IMAGES)
    ]
    return sorted(kernels, key=version_key)


def has_build_tree(root, kver):
    """Whether ``/lib/modules/<kver>/build`` (the kernel's headers, which its headers package links there) is a
    directory: what ``dkms build`` needs, and says is missing when it is not."""
    return os.path.isdir(under(root, MODULES_DIR, kver, "build"))


def module_files(root, kver):
    """The NVIDIA driver module files of kernel ``kver`` (paths relative to its modules directory).

    Those ``modules.dep`` lists and that exist; without a ``modules.dep``, those found in the tree.
    """
    base = under(root, MODULES_DIR, kver)
    dep = read_value(os.path.join(base, "modules.dep"))
    if dep is None:
        found = []
        for directory, _dirs, files in os.walk(base):
            found.extend(
                os.path.relpath(os.path.join(directory, name), base) for name in files if DRIVER_KO.search(name)
            )
        return sorted(found)
    listed = (line.split(":", 1)[0].strip() for line in dep.splitlines() if "nvidia" in line)  # cheap filter first
    return sorted({path for path in listed if DRIVER_KO.search(path) and os.path.exists(os.path.join(base, path))})


def dkms_driver_modules(root="/"):
    """The NVIDIA driver modules DKMS has (names under ``/var/lib/dkms``)."""
    try:
        return sorted(name for name in os.listdir(under(root, DKMS_TREE)) if is_driver_module(name))
    except OSError:
        return []


def running_kernel(root="/"):
    return read_value(under(root, OSRELEASE)) or None


def module_loaded(root="/"):
    return any(os.path.isdir(under(root, path)) for path in LOADED)


def next_boot_kernel(kernels, grubby_default=None):
    """``(kver, how)``: the kernel the node boots next among ``kernels`` and the rule that chose it.

    ``grubby_default``: what ``grubby --default-kernel`` printed (``/boot/vmlinuz-<kver>``), None without grubby.
    """
    if not kernels:
        return None, "no installed kernel"
    newest = max(kernels, key=version_key)
    if grubby_default is None:
        return newest, "the newest installed kernel, GRUB's default entry"
    printed = (grubby_default.strip().splitlines() or [""])[-1].strip()
    name = os.path.basename(printed)
    for image in KERNEL_IMAGES:
        if name.startswith(image):
            name = name[len(image) :]
    if name in kernels:
        return name, "grubby --default-kernel"
    return newest, "the newest installed kernel (grubby --default-kernel gave %r)" % (printed[:120] or "nothing")


def read(root="/"):
    """One reading of the node's files for :func:`findings`, the next-boot kernel by version order."""
    kernels = installed_kernels(root)
    return with_commands(
        {
            "kernels": [
                {"kernel": kver, "module_files": module_files(root, kver), "headers": has_build_tree(root, kver)}
                for kver in kernels
            ],
            "running": running_kernel(root),
            "loaded": module_loaded(root),
            "dkms_modules": dkms_driver_modules(root),
        }
    )


def with_commands(reading, grubby_default=None, dkms_status=None, dkms_error=None):
    """``reading`` with what the commands said: ``grubby_default``, ``grubby --default-kernel``'s output (None: no
    grubby); ``dkms_status``, ``dkms status``'s output (None: not run); ``dkms_error``, why it gave nothing."""
    boots, how = next_boot_kernel([entry["kernel"] for entry in reading["kernels"]], grubby_default)
    return dict(
        reading,
        next_boot=boots,
        next_boot_rule=how,
        dkms=parse_dkms_status(dkms_status) if dkms_status is not None else None,
        dkms_error=dkms_error,
    )


def needs_commands(reading):
    """Whether a reading has anything to check, so that ``grubby`` and ``dkms status`` are worth running."""
    return bool(reading["kernels"]) and (
        bool(reading["dkms_modules"]) or any(entry["module_files"] for entry in reading["kernels"])
    )


# --- the judgement --------------------------------------------------------------------------------


def _dkms_entries(reading, kver=None):
    entries = [entry for entry in (reading.get("dkms") or {}).get("entries", []) if is_driver_module(entry["module"])]
    if kver is None:
        return entries
    return [entry for entry in entries if entry["kernel"] in (None, kver)]


def _headers_of(reading, kver):
    """Whether the reading found kernel ``kver``'s build tree (False when it was not read: older readings)."""
    return any(entry.get("headers") for entry in reading["kernels"] if entry["kernel"] == kver)


def _fix(reading, kver):
    """Why kernel ``kver`` has no module, as far as DKMS tells, and the fix."""
    if not reading["dkms_modules"] and not _dkms_entries(reading):
        return (
            "install its precompiled NVIDIA module package (Ubuntu linux-modules-nvidia-<branch>-%s, "
            "RHEL kmod-nvidia for this kernel)" % kver
        )
    headers = "install its headers (linux-headers-%s, or kernel-devel-%s on RHEL)" % (kver, kver)
    autoinstall = "dkms autoinstall -k %s" % kver
    entries = _dkms_entries(reading, kver)
    built = [entry for entry in entries if entry["state"] == "built" and entry["kernel"] == kver]
    installed = [entry for entry in entries if entry["state"].startswith("installed") and entry["kernel"] == kver]
    broken = ["%s/%s" % (entry["module"], entry["version"]) for entry in entries if entry["state"] == "broken"]
    if built:
        fix = "DKMS built %s/%s for it but did not install it: run dkms install %s/%s -k %s" % (
            built[0]["module"], built[0]["version"], built[0]["module"], built[0]["version"], kver,
        )  # fmt: skip
    elif installed:
        fix = "dkms status says installed, but modules.dep lists no NVIDIA module: run depmod %s" % kver
    elif broken:
        fix = "DKMS module %s is broken (its source is missing): reinstall the driver's DKMS package, then run %s" % (
            ", ".join(broken),
            autoinstall,
        )
        broken = []
    elif reading.get("dkms") is not None and _headers_of(reading, kver):
        fix = (
            "DKMS did not build it although its headers are installed: run %s and read the build's make.log under "
            "/var/lib/dkms; a driver that does not build on this kernel needs another driver release, or remove the "
            "kernel" % autoinstall
        )
    elif reading.get("dkms") is not None:
        fix = "DKMS did not build it: %s, then run %s" % (headers, autoinstall)
    else:
        why = "" if reading.get("dkms_error") is None else " (dkms status %s)" % reading["dkms_error"]
        fix = "%s and run %s%s" % (headers, autoinstall, why)
    if broken:
        fix += "; DKMS module %s is broken (its source is missing): reinstall its package or dkms remove it" % (
            ", ".join(broken)
        )
    return fix


def _describe(reading, kver):
    words = []
    if kver == reading["next_boot"]:
        words.append("boots next")
    if kver == reading["running"]:
        words.append("running")
    return "%s (%s)" % (kver, ", ".join(words)) if words else kver


def _missing(reading, kver):
    """The finding of one kernel without a module: a failure for the kernel the node boots next, else a warning."""
    loaded = ""
    if kver == reading["running"] and reading["loaded"]:
        loaded = " (the module loaded now does not survive a reboot: its file is gone)"
    if kver == reading["next_boot"]:
        return (
            "fail",
            "kernel %s, which the node boots next (%s), has no NVIDIA module%s: %s; fix it before the node reboots, "
            "or it comes up without a GPU driver" % (kver, reading["next_boot_rule"], loaded, _fix(reading, kver)),
        )
    return (
        "warn",
        "installed kernel %s has no NVIDIA module%s: %s, or remove the kernel"
        % (_describe(reading, kver), loaded, _fix(reading, kver)),
    )


def findings(reading):
    """``[(status, detail)]`` of one reading: fail, warn, pass or skip, each detail naming the kernels."""
    kernels = reading["kernels"]
    has_module = [entry["kernel"] for entry in kernels if entry["module_files"]]
    if not reading["dkms_modules"] and not _dkms_entries(reading) and not has_module:
        detail = "no NVIDIA driver installed by DKMS or a kernel module package: nothing to check"
        if reading["loaded"]:
            detail += " (the loaded NVIDIA module comes from elsewhere, e.g. a driver container)"
        return [("skip", detail)]
    if not kernels:
        return [("skip", "no installed kernel found (no /lib/modules/<kver> with an image in /boot)")]
    results = []
    for entry in kernels:
        if not entry["module_files"]:
            results.append(_missing(reading, entry["kernel"]))
    if results:
        return sorted(results, key=lambda item: item[0] != "fail")
    return [
        (
            "pass",
            "NVIDIA module present for every installed kernel: %s; boots next by %s"
            % (", ".join(_describe(reading, entry["kernel"]) for entry in kernels), reading["next_boot_rule"]),
        )
    ]
