#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kernel_package
short_description: Move a node to a chosen kernel and verify its NVIDIA module before it may reboot into it
version_added: 0.3.0
description:
  - Resolves O(kernel) (a kernel release, or V(latest)) from the node's package index, installs that kernel with the
    packages the running kernel has beside it (its modules, C(linux-modules-extra), Ubuntu's precompiled
    C(linux-modules-nvidia-*)) and, with O(dkms), its headers (C(linux-headers-<kver>), C(kernel-devel)).
  - Then checks that the NVIDIA module exists for that kernel (listed in its C(modules.dep), the health check's
    reading); where it does not and the driver is built by DKMS, runs C(dkms autoinstall -k <kver>) and checks again.
    A kernel still without the module fails the module, naming the kernel and the fix, before anything reboots.
  - Checks that the node boots that kernel next (C(grubby --set-default) where the node has grubby; on Debian and
    Ubuntu GRUB boots the newest installed kernel, so a newer one than the target fails the module).
  - The module reboots nothing; RV(reboot) says whether the node must reboot into the kernel.
  - With O(hold) on dnf, versionlock lines for the target's packages are added to the managed block before the install
    (installed kernels stay locked; M(gpuops.cluster.package_pin) with O(gpuops.cluster.package_pin#module:kernel_hold)
    keeps them). On apt the target's packages are new names, which the kernel holds do not block; the next
    M(gpuops.cluster.package_pin) run holds them.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  kernel:
    description: V(latest) (the kernel the node's flavour metapackage, or the newest C(kernel-core), has in the index),
      or a kernel release as C(uname -r) prints it, or its version without the flavour (the running kernel's is added).
    type: str
    required: true
  package_manager:
    description: The node's package manager family.
    type: str
    choices: [apt, dnf]
    required: true
  dkms:
    description: The NVIDIA driver is built by DKMS; install the kernel's headers and build it with C(dkms autoinstall).
    type: bool
    default: true
  hold:
    description: Kernel packages are held with the stack (dnf - lock the target's packages before installing them).
    type: bool
    default: true
  versionlock_path:
    description: The dnf versionlock list.
    type: path
    default: /etc/dnf/plugins/versionlock.list
  build_timeout:
    description: Seconds the install (whose DKMS hooks build the module) and C(dkms autoinstall) may each take.
    type: int
    default: 1800
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
    details: Resolves the kernel and reports the packages it would install; the module check happens in the real run.
  diff_mode:
    support: full
    details: The installed kernels before and after.
notes:
  - An C(apt-get install) that would change a held package fails rather than override the hold.
seealso:
  - module: gpuops.cluster.package_pin
  - module: gpuops.cluster.gpu_health
"""

EXAMPLES = r"""
- name: Move the node to the newest kernel of its flavour, module verified
  gpuops.cluster.kernel_package:
    kernel: latest
    package_manager: apt
  register: moved

- name: Move a Rocky 9 node to one kernel
  gpuops.cluster.kernel_package:
    kernel: 5.14.0-503.15.1.el9_5
    package_manager: dnf
"""

RETURN = r"""
kernel:
  description: The kernel release the node was moved to (or would be, in check mode).
  returned: always
  type: str
  sample: 6.1.0-28-amd64
installed:
  description: The packages this run installed; in check mode, those it would.
  returned: always
  type: list
  elements: str
  sample: ["linux-headers-6.1.0-28-amd64", "linux-image-6.1.0-28-amd64"]
verified:
  description: What the check of the NVIDIA module for the kernel found (empty in check mode when packages would move).
  returned: always
  type: str
  sample: "kernel 6.1.0-28-amd64 has the NVIDIA module: updates/dkms/nvidia.ko.xz"
built:
  description: Whether this run ran C(dkms autoinstall) for the kernel.
  returned: always
  type: bool
reboot:
  description: Whether the node must reboot to run the kernel (it runs another one).
  returned: always
  type: bool
running:
  description: The running kernel.
  returned: always
  type: str
  sample: 6.1.0-18-amd64
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils import managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import (
    run_bounded,
    run_checked,
    use_c_locale,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.health import kernel_modules
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import (
    installed_packages,
    kernel_lockstep,
    rpm_versionlock,
)

ROOT = "/"  # the node's root, read as the health check reads it (a fake tree in the unit tests)
HINT = "check the repositories the node uses (apt-get update / dnf makecache) and run again"
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}


def resolve(module, manager, installed, running):
    """``{kver, packages}``: the target from the node's index."""
    params = module.params
    if manager == "apt":
        apt_cache = module.get_bin_path("apt-cache", required=True)
        names, _err = run_checked(module, [apt_cache, "pkgnames", "linux-"], "list the kernel packages", HINT)
        meta_text = None
        meta = kernel_lockstep.apt_meta(installed, running)
        if params["kernel"] == kernel_lockstep.LATEST and meta:
            meta_text, _err = run_checked(
                module, [apt_cache, "show", "--no-all-versions", meta], f"read {meta} in the index", HINT
            )
        return kernel_lockstep.apt_target(params["kernel"], running, installed, names, meta_text, params["dkms"])
    dnf = module.get_bin_path("dnf", required=True)
    argv = [dnf, "-q", "repoquery", "--showduplicates", "--disableplugin=versionlock"]
    argv += ["--qf", "%{version}-%{release}.%{arch}\\n"]  # dnf 4 ignores the trailing newline, dnf 5 needs it
    out, _err = run_checked(module, [*argv, "kernel-core"], "list the kernels the repositories hold", HINT)
    return kernel_lockstep.rpm_target(params["kernel"], running, installed, out, params["dkms"])


def installed_specs(manager, installed):
    if manager == "apt":
        return {name for name, info in installed.items() if info and info.get("installed")}
    return {f"{package['name']}-{package['kver'].rsplit('.', 1)[0]}" for package in installed}


def lock_target(module, target, installed):
    """dnf with holds: add the target's versionlock lines to the managed block before the install."""
    path = module.params["versionlock_path"]
    before = managed_file.read_text(path) or ""
    managed = rpm_versionlock.parse_versionlock_list(before)["managed"]
    wanted = sorted(set(managed) | set(kernel_lockstep.rpm_target_locks(target, installed)))
    if wanted != sorted(managed):
        after = rpm_versionlock.render_versionlock_list(before, wanted)
        managed_file.write_atomic(module, path, after)
        module.set_mode_if_different(path, "0644", False)


def install(module, manager, packages):
    """Install ``packages``; None, or what failed (apt-get/dnf and its last words), judged after the module check:
    a DKMS build that fails in the kernel's install hooks fails the install too (dpkg leaves the kernel
    half-configured), and the module check says why and what to do."""
    seconds = module.params["build_timeout"]
    if manager == "apt":
        argv = [module.get_bin_path("apt-get", required=True), "install", "-y", "-o", "Dpkg::Options::=--force-confold"]
        rc, out, err = run_bounded(
            module, [*argv, *packages], "install the kernel", seconds, HINT, environ_update=APT_ENV
        )
    else:
        argv = [module.get_bin_path("dnf", required=True), "-y", "install"]
        rc, out, err = run_bounded(module, [*argv, *packages], "install the kernel", seconds, HINT)
    if rc == 0:
        return None
    lines = [line.strip() for line in (err or "").splitlines() + (out or "").splitlines() if line.strip()]
    said = [line for line in lines if line.startswith(("E:", "Error", "dpkg: error"))] or lines
    return "%s exited %d: %s" % (os.path.basename(argv[0]), rc, " | ".join(said[-3:])[:600])


def reading_of(module):
    """The health check's reading of the kernels, with ``dkms status`` and ``grubby --default-kernel``."""
    reading = kernel_modules.read(ROOT)
    dkms = module.get_bin_path("dkms")
    grubby = module.get_bin_path("grubby")
    status = error = default = None
    if dkms:
        rc, status, err = run_bounded(module, [dkms, "status"], "read dkms status")
        if rc != 0:
            status, error = None, f"exited {rc}: {(err or '').strip()[:200]}"
    if grubby:
        rc, out, _err = run_bounded(module, [grubby, "--default-kernel"], "read the default kernel")
        default = out if rc == 0 else None
    return kernel_modules.with_commands(reading, default, status, error)


def verify(module, kver, built, failed_install=None, packages=()):
    """Fail before any reboot when ``kver`` has no NVIDIA module or is not the kernel the node boots next, or
    its install failed (``failed_install``, what :func:`install` said)."""
    reading = reading_of(module)
    ok, detail = kernel_lockstep.module_verdict(reading, kver)
    if not ok and module.params["dkms"] and module.get_bin_path("dkms"):
        argv = [module.get_bin_path("dkms"), "autoinstall", "-k", kver]
        rc, out, err = run_bounded(module, argv, f"build the NVIDIA module for {kver}", module.params["build_timeout"])
        built = True
        reading = reading_of(module)
        ok, detail = kernel_lockstep.module_verdict(reading, kver)
        if not ok:
            detail += f" (dkms autoinstall -k {kver} exited {rc}: {(err or out).strip()[-300:]})"
    half = ""
    if failed_install:
        remove = "apt-get purge" if module.params["package_manager"] == "apt" else "dnf remove"
        half = (
            f" The install of {kver} failed ({failed_install}): it is half-installed; remove it "
            f"({remove} {' '.join(packages)}) if the module cannot be fixed."
        )
    if not ok:
        module.fail_json(
            msg=f"gpuops_kernel: {detail}. The node was not rebooted and still runs {reading['running']}; fix the "
            f"module for {kver} and run again, or unset gpuops_kernel.{half}",
            kernel=kver,
            built=built,
        )
    if failed_install:
        module.fail_json(msg=f"could not install kernel {kver}: {failed_install}. {HINT}", kernel=kver, built=built)
    booted, boot_detail = kernel_lockstep.boot_verdict(reading, kver)
    grubby = module.get_bin_path("grubby")
    if not booted and grubby:
        run_checked(module, [grubby, "--set-default", f"/boot/vmlinuz-{kver}"], "make it the default kernel", HINT)
        booted, boot_detail = kernel_lockstep.boot_verdict(reading_of(module), kver)
    if not booted:
        module.fail_json(msg=f"gpuops_kernel: {boot_detail}. The node was not rebooted", kernel=kver)
    return detail, built


def main():
    module = AnsibleModule(
        argument_spec={
            "kernel": {"type": "str", "required": True},
            "package_manager": {"type": "str", "required": True, "choices": ["apt", "dnf"]},
            "dkms": {"type": "bool", "default": True},
            "hold": {"type": "bool", "default": True},
            "versionlock_path": {"type": "path", "default": "/etc/dnf/plugins/versionlock.list"},
            "build_timeout": {"type": "int", "default": 1800},
        },
        supports_check_mode=True,
    )
    use_c_locale(module)
    params = module.params
    problem = kernel_lockstep.request_problem(params["kernel"])
    if problem:
        module.fail_json(msg=f"kernel {params['kernel']!r}: {problem}")
    manager = params["package_manager"]
    running = kernel_modules.running_kernel(ROOT) or os.uname().release
    installed = installed_packages.query_kernels(module, manager)
    try:
        target = resolve(module, manager, installed, running)
    except kernel_lockstep.LockstepError as exc:
        module.fail_json(msg=str(exc), running=running)
    kver = target["kver"]
    missing = kernel_lockstep.missing_packages(target, installed_specs(manager, installed))
    before = kernel_modules.installed_kernels(ROOT)
    result = {"kernel": kver, "installed": missing, "running": running, "built": False, "verified": ""}
    if module.check_mode:
        result.update(changed=bool(missing), reboot=running != kver)
        if not missing:
            result["verified"] = kernel_lockstep.module_verdict(reading_of(module), kver)[1]
    else:
        failed_install = None
        if missing:
            if manager == "dnf" and params["hold"]:
                lock_target(module, target, installed)
            failed_install = install(module, manager, missing)
        result["verified"], result["built"] = verify(module, kver, False, failed_install, missing)
        result.update(changed=bool(missing) or result["built"], reboot=running != kver)
    if module._diff:
        after = sorted(set(before) | {kver}, key=kernel_modules.version_key) if missing else before
        if missing and not module.check_mode:
            after = kernel_modules.installed_kernels(ROOT)
        result["diff"] = {
            "before_header": "installed kernels",
            "after_header": "installed kernels",
            "before": "".join(f"{name}\n" for name in before),
            "after": "".join(f"{name}\n" for name in after),
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
