# Copyright (c) gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kernel lockstep: which kernel packages a DKMS node holds, which kernel ``gpuops_kernel`` moves it to, and
whether that kernel has the NVIDIA module. Pure: text and plain data in, plain data out.

An unattended kernel upgrade whose DKMS build failed boots the node without a GPU driver. Where the driver is
built by DKMS the kernel is held with the stack (``package_pin``'s ``kernel_hold``) and moved only on purpose
(the ``kernel_package`` module), its module verified before the node may reboot.

The kernel packages, from the distributions' own descriptions:

- Debian (Debian Kernel Handbook, ch. 3 "Debian kernel packages",
  https://kernel-team.pages.debian.net/kernel-handbook/ch-packaging.html): ``linux-image-<abiname>-<flavour>``
  (and ``-unsigned``), ``linux-headers-<abiname>-<flavour>`` with ``linux-headers-<abiname>-common``, and the
  metapackages ``linux-image-<flavour>`` / ``linux-headers-<flavour>`` (``linux-image-amd64``, "Linux for 64-bit
  PCs (meta-package)") that depend on the newest ABI.
- Ubuntu (https://wiki.ubuntu.com/Kernel/Dev/Meta-Pkgs): ``linux-<flavour>`` depends on
  ``linux-image-<flavour>`` and ``linux-headers-<flavour>``, which depend on ``linux-image-<ABI>-<flavour>``
  (with ``linux-modules-<ABI>-<flavour>``, ``linux-modules-extra-<ABI>-<flavour>``) and
  ``linux-headers-<ABI>-<flavour>``; HWE stacks add a suffix (``linux-generic-hwe-20.04``). Ubuntu's precompiled
  NVIDIA modules are ``linux-modules-nvidia-<branch>[-server][-open]-<ABI>-<flavour>`` under metas of the same
  prefix (source linux-restricted-modules, packages.ubuntu.com).
- RHEL 9 ("Managing, monitoring and updating the kernel", 1.3 "Linux kernel RPM package overview",
  docs.redhat.com): ``kernel`` is a metapackage of ``kernel-core``, ``kernel-modules-core`` (split from
  kernel-core in 5.14.0-269.el9) and ``kernel-modules``; ``kernel-modules-extra`` is optional; ``kernel-devel``
  builds modules against a kernel. ``kernel-headers`` is the userspace C interface (glibc builds against it) and
  boots nothing, so it is not locked; Debian's ``linux-libc-dev`` is its counterpart and is not held either.

Holding on apt: ``apt-mark hold`` on every installed kernel package (the ABI-named ones keep a same-ABI update
out, the metapackages keep a new ABI out). On dnf: a versionlock line per installed version of each kernel
package; two lines for one name let both versions in, so the installed kernels stay and no other comes
(rpm-software-management/dnf-plugins-core ``plugins/versionlock.py``).
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.health import kernel_modules
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import rpm_versionlock

LATEST = "latest"
# What gpuops_kernel may be: latest, or a kernel release as `uname -r` prints it (6.1.0-28-amd64,
# 6.8.0-51-generic, 6.12.69+deb13-amd64, 5.14.0-503.15.1.el9_5.x86_64) or its version without the flavour
# (6.1.0-28, 5.14.0-503.15.1.el9_5), which takes the running kernel's flavour (or architecture).
KERNEL_RELEASE_RE = re.compile(r"^\d+\.\d+(?:\.\d+)*(?:[-+.~_][A-Za-z0-9]+)*$")
APT_FAMILIES = ("linux-image-", "linux-headers-", "linux-modules-")
# Not kernels: the userspace headers and packages whose name only starts like a kernel package's.
APT_NOT_KERNEL = ("linux-libc-dev",)
APT_NOT_A_RELEASE = ("-unsigned", "-dbg", "-dbgsym")
RPM_KERNEL_NAMES = (
    "kernel",
    "kernel-core",
    "kernel-modules",
    "kernel-modules-core",
    "kernel-modules-extra",
    "kernel-devel",
)
# rpm -q --qf for the kernel packages: every installed version, one a line (kernels are install-only).
RPM_KERNEL_QUERY_FORMAT = "%{NAME}\\t%{EPOCHNUM}\\t%{VERSION}\\t%{RELEASE}\\t%{ARCH}\\n"
HOLDS_COMMENT = "# kernel holds (apt-mark, kernel lockstep):"
_NOT_INSTALLED_RE = re.compile(r"^package \S+ is not installed$")


class LockstepError(ValueError):
    """A request that cannot be planned; the text says what to change."""


# --- the request -------------------------------------------------------------------------------------------


def request_problem(value):
    """Why ``value`` is no gpuops_kernel (None: it is one): ``latest`` or a kernel release."""
    text = str(value).strip() if value is not None else ""
    if text == LATEST or KERNEL_RELEASE_RE.match(text):
        return None
    return (
        "set latest, or a kernel release as uname -r prints it (6.1.0-28-amd64, 6.8.0-51-generic, "
        "5.14.0-503.15.1.el9_5.x86_64) or its version without the flavour (6.1.0-28); unset it to leave the "
        "kernel where it is"
    )


def kernel_flavour(kver):
    """The flavour of a Debian/Ubuntu kernel release (``amd64``, ``cloud-amd64``, ``generic``): what follows the
    first ``-`` that is followed by a letter; None for a release without one (RHEL's)."""
    first = re.search(r"-[a-z]", kver or "")
    return kver[first.start() + 1 :] if first else None


# --- what to hold ------------------------------------------------------------------------------------------


def apt_kernel_holds(installed):
    """The installed kernel packages to hold, sorted: ``installed`` is ``{name: {installed, ...}}``
    (:func:`apt_pinning.parse_dpkg_query`).

    Every ``linux-image-*``, ``linux-headers-*`` and ``linux-modules-*`` package, and the top metapackage
    ``linux-<X>`` of an installed ``linux-image-<X>`` meta (Ubuntu's ``linux-generic``, ``linux-generic-hwe-20.04``).
    """
    names = {name for name, info in installed.items() if info and info.get("installed")}
    held = {name for name in names if name.startswith(APT_FAMILIES) and not name.startswith(APT_NOT_KERNEL)}
    for name in list(held):
        rest = name[len("linux-image-") :] if name.startswith("linux-image-") else None
        if rest and not rest[0].isdigit() and "linux-" + rest in names:
            held.add("linux-" + rest)
    return sorted(held)


def parse_rpm_kernels(text):
    """``rpm -q --qf RPM_KERNEL_QUERY_FORMAT NAMES`` -> ``[{name, evr, kver}]``, every installed version.

    ``kver`` is the kernel release the package belongs to (``5.14.0-503.15.1.el9_5.x86_64``); lines saying a
    name is not installed are skipped.
    """
    found = []
    for line in (text or "").splitlines():
        if not line.strip() or _NOT_INSTALLED_RE.match(line.strip()):
            continue
        parts = [part.strip() for part in line.split("\t")]
        if len(parts) != 5:
            raise LockstepError(f"unexpected rpm -q line {line!r}: expected name, epoch, version, release and arch")
        name, epoch, version, release, arch = parts
        epoch = "0" if epoch in ("", "(none)") else epoch
        found.append(
            {
                "name": name,
                "evr": f"{epoch}:{version}-{release}",
                "kver": f"{version}-{release}.{arch}",
            }
        )
    return found


def rpm_kernel_locks(packages):
    """Versionlock lines for every installed version of every kernel package, sorted."""
    try:
        return sorted({rpm_versionlock.lock_entry(package["name"], package["evr"]) for package in packages})
    except rpm_versionlock.VersionlockError as exc:
        raise LockstepError(f"cannot lock the kernel packages: {exc}") from exc


def holds_comment(names):
    """The preferences file's record of the kernel holds this collection made ('' without any)."""
    return f"{HOLDS_COMMENT} {' '.join(sorted(names))}\n" if names else ""


def recorded_holds(preferences_text):
    """The kernel holds :func:`holds_comment` recorded in a preferences file."""
    for line in (preferences_text or "").splitlines():
        if line.startswith(HOLDS_COMMENT):
            return sorted(line[len(HOLDS_COMMENT) :].split())
    return []


# --- where to move -----------------------------------------------------------------------------------------


def _with_flavour(version, running, available):
    """The release ``version`` names: itself where ``available`` has it, else with the running kernel's suffix."""
    if version in available:
        return version
    flavour = kernel_flavour(running)
    if flavour and kernel_flavour(version) is None:
        candidate = f"{version}-{flavour}"
        if candidate in available:
            return candidate
    return None


def apt_available_releases(pkgnames_text):
    """Kernel releases the index has a ``linux-image-<kver>`` for (``apt-cache pkgnames linux-``), newest last."""
    releases = set()
    for line in (pkgnames_text or "").splitlines():
        name = line.strip()
        if not name.startswith("linux-image-") or name.endswith(APT_NOT_A_RELEASE):
            continue
        kver = name[len("linux-image-") :]
        if KERNEL_RELEASE_RE.match(kver):
            releases.add(kver)
    return sorted(releases, key=kernel_modules.version_key)


def apt_meta(installed, running):
    """The installed ``linux-image-<flavour>`` metapackage that follows the running kernel's flavour, or None."""
    flavour = kernel_flavour(running)
    metas = sorted(
        name
        for name, info in installed.items()
        if info
        and info.get("installed")
        and name.startswith("linux-image-")
        and not name[len("linux-image-") :][:1].isdigit()
    )
    if flavour:
        for name in metas:
            if name == f"linux-image-{flavour}":
                return name
        for name in metas:
            if name.startswith(f"linux-image-{flavour}-"):
                return name
    return metas[0] if metas else None


def meta_release(show_text):
    """The kernel release a metapackage's candidate depends on (``apt-cache show --no-all-versions META``)."""
    for line in (show_text or "").splitlines():
        if line.startswith(("Depends:", "Pre-Depends:")):
            for item in line.split(":", 1)[1].split(","):
                name = item.strip().split(" ")[0].split("|")[0]
                kver = name[len("linux-image-") :] if name.startswith("linux-image-") else ""
                if kver[:1].isdigit() and not name.endswith(APT_NOT_A_RELEASE):
                    return kver
    return None


def apt_companions(installed, running, kver, names, dkms):
    """The packages kernel ``kver`` needs: those the running kernel has (``linux-image-<running>``,
    ``linux-modules-extra-<running>``, ``linux-modules-nvidia-580-open-<running>`` ...) named for ``kver``, where
    the index has them (``names``), with its headers where the driver is built by DKMS."""
    wanted = {f"linux-image-{kver}"}
    if dkms:
        wanted.add(f"linux-headers-{kver}")
    suffix = f"-{running}" if running else None
    for name, info in installed.items():
        if suffix and info and info.get("installed") and name.endswith(suffix) and name.startswith(APT_FAMILIES):
            candidate = name[: -len(suffix)] + f"-{kver}"
            if candidate in names:
                wanted.add(candidate)
    missing = sorted(
        name for name in wanted if name not in names and name.startswith(("linux-image-", "linux-headers-"))
    )
    if missing:
        raise LockstepError(
            f"the package index has no {', '.join(missing)}: run apt-get update, add the repository that "
            f"holds kernel {kver} and its headers, or choose a kernel it has"
        )
    return sorted(wanted)


def apt_target(request, running, installed, pkgnames_text, meta_show_text=None, dkms=True):
    """``{kver, packages}`` for gpuops_kernel ``request`` on an apt node.

    ``installed``: :func:`apt_pinning.parse_dpkg_query` of the kernel packages; ``pkgnames_text``:
    ``apt-cache pkgnames linux-``; ``meta_show_text``: ``apt-cache show --no-all-versions`` of
    :func:`apt_meta` (for ``latest``: the kernel the index offers the node's flavour, as apt's policy says).
    """
    names = {line.strip() for line in (pkgnames_text or "").splitlines() if line.strip()}
    available = apt_available_releases(pkgnames_text)
    if request == LATEST:
        kver = meta_release(meta_show_text)
        if kver is None:
            raise LockstepError(
                "cannot tell the newest kernel: no installed linux-image-<flavour> metapackage depends on one "
                f"(running {running}); set gpuops_kernel to a kernel release instead of latest"
            )
    else:
        kver = _with_flavour(request, running, available)
        if kver is None:
            newest = ", ".join(available[-5:]) or "none"
            raise LockstepError(
                f"gpuops_kernel {request}: the package index has no linux-image-{request}"
                f"{'' if kernel_flavour(request) else ' for flavour ' + str(kernel_flavour(running))}; "
                f"the newest it has: {newest}. Run apt-get update or set one of those"
            )
    return {"kver": kver, "packages": apt_companions(installed, running, kver, names, dkms)}


def rpm_available_releases(repoquery_text):
    """``dnf repoquery --qf '%{version}-%{release}.%{arch}' kernel-core`` -> releases, newest last."""
    releases = {line.strip() for line in (repoquery_text or "").splitlines() if KERNEL_RELEASE_RE.match(line.strip())}
    return sorted(releases, key=kernel_modules.version_key)


def rpm_target(request, running, installed, repoquery_text, dkms=True):
    """``{kver, packages}`` for gpuops_kernel ``request`` on a dnf node.

    ``installed``: :func:`parse_rpm_kernels`; ``repoquery_text``: every ``kernel-core`` the repositories hold
    (versionlock disabled for the query: it hides what it does not allow). The packages are those installed at
    the running kernel's version, at the target's (``kernel-core-5.14.0-503.15.1.el9_5``), with
    ``kernel-devel`` where the driver is built by DKMS.
    """
    arch = (running or "").rsplit(".", 1)[-1] if running and "." in running else None
    available = [kver for kver in rpm_available_releases(repoquery_text) if arch is None or kver.endswith("." + arch)]
    if request == LATEST:
        if not available:
            raise LockstepError("the repositories hold no kernel-core: check the BaseOS repository and dnf makecache")
        kver = available[-1]
    else:
        kver = request if request in available else (f"{request}.{arch}" if f"{request}.{arch}" in available else None)
        if kver is None:
            raise LockstepError(
                f"gpuops_kernel {request}: the repositories hold no kernel-core {request}; the newest they hold: "
                f"{', '.join(available[-5:]) or 'none'}. Run dnf makecache or set one of those"
            )
    version_release = kver.rsplit(".", 1)[0]
    names = {package["name"] for package in installed if package["kver"] == running} or {"kernel", "kernel-core"}
    if dkms:
        names.add("kernel-devel")
    names.add("kernel-core")
    return {"kver": kver, "packages": sorted(f"{name}-{version_release}" for name in names)}


def rpm_target_locks(target, installed):
    """Versionlock lines that let the target's packages in beside what is installed (added before the install)."""
    version_release = target["kver"].rsplit(".", 1)[0]
    epoch = next((package["evr"].split(":", 1)[0] for package in installed), "0")
    locks = set()
    for spec in target["packages"]:
        name = spec[: -len(version_release) - 1]
        locks.add(rpm_versionlock.lock_entry(name, f"{epoch}:{version_release}"))
    return sorted(locks)


def missing_packages(target, installed_names):
    """The target's packages not installed yet (apt: names; dnf: name-version-release specs)."""
    return [spec for spec in target["packages"] if spec not in installed_names]


# --- the verdict -------------------------------------------------------------------------------------------


def module_verdict(reading, kver):
    """``(ok, detail)``: whether kernel ``kver`` has the NVIDIA module, from :func:`kernel_modules.read`'s reading
    (with ``dkms status``); a missing one says why and the fix, as the health check would."""
    entry = next((item for item in reading["kernels"] if item["kernel"] == kver), None)
    if entry is None:
        return False, (
            f"kernel {kver} is not installed (no /lib/modules/{kver} with /boot/vmlinuz-{kver}); "
            "check the package installation output"
        )
    if entry["module_files"]:
        return True, f"kernel {kver} has the NVIDIA module: {', '.join(entry['module_files'])}"
    for status, detail in kernel_modules.findings(reading):
        if status in ("fail", "warn") and re.search(r"kernel %s\b" % re.escape(kver), detail):
            return False, detail
    return False, (
        f"kernel {kver} has no NVIDIA module and DKMS has no NVIDIA driver to build for it: install the driver's "
        "DKMS package (or the precompiled module package for this kernel)"
    )


def boot_verdict(reading, kver):
    """``(ok, detail)``: whether the node boots ``kver`` next (a newer installed kernel would be booted first)."""
    if reading["next_boot"] == kver:
        return True, f"the node boots {kver} next ({reading['next_boot_rule']})"
    return False, (
        f"the node would boot {reading['next_boot']} next ({reading['next_boot_rule']}), not {kver}: remove the "
        f"newer kernel, or set gpuops_kernel to {reading['next_boot']} or latest"
    )
