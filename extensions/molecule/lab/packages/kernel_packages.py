"""Stand-in Debian kernel packages and the NVIDIA module's DKMS source, staged for build_repo.py (lab only).

A lab node cannot boot a kernel, but Debian's real dkms (3.0.10, bookworm) can build a module for one: it needs
``/lib/modules/<kver>/build`` with an ``include`` directory (``_check_kernel_dir``) and runs the module's ``MAKE``
there. The packages below give it exactly that, with the maintainer scripts of the real packages, so that every
build, install and failure goes through dkms and dpkg as on a real node:

- ``linux-image-<kver>``: ``/boot/vmlinuz-<kver>`` (a text file: it cannot boot), ``/boot/config-<kver>`` (dkms's
  ``common.postinst`` finds the newest kernel by these), the ``modules.order``/``modules.builtin`` files depmod
  reads; its postinst runs ``depmod`` and then ``/etc/kernel/postinst.d`` (dkms's hook: ``dkms autoinstall`` for
  that kernel) with ``run-parts --exit-on-error``, its prerm ``/etc/kernel/prerm.d`` on removal, as Debian's
  ``linux`` source package writes them (``debian/templates/image.postinst.in``, ``image.prerm.in``; Debian Kernel
  Handbook ch. 3, https://kernel-team.pages.debian.net/kernel-handbook/ch-packaging.html).
- ``linux-headers-<kver>``: ``/usr/src/linux-headers-<kver>`` (``include/generated/utsrelease.h``, ``.config``)
  and the ``/lib/modules/<kver>/build`` link to it; its postinst runs ``/etc/kernel/header_postinst.d`` (dkms's
  hook again), as ``debian/templates/headers.postinst.in`` does. Headers made with ``build_fails`` carry
  ``gpuops-lab-build-fails``: the stand-in module's build stops on them, as the real driver's does on a kernel
  whose API it does not build against.
- the NVIDIA driver's DKMS source (``nvidia-kernel-open-dkms`` of NVIDIA's Debian 12 repository):
  ``/usr/src/nvidia-<driver>/`` with a ``dkms.conf`` in the form of NVIDIA's (open-gpu-kernel-modules
  ``kernel-open/dkms.conf``: ``PACKAGE_NAME`` nvidia, ``MAKE[0]`` ``'make' ... KERNEL_UNAME=${kernelver} modules``,
  ``BUILT_MODULE_NAME[0]`` nvidia, ``AUTOINSTALL`` yes) and the maintainer scripts dh_dkms writes
  (``/usr/lib/dkms/common.postinst NAME VERSION /usr/share/NAME-dkms "" $2`` on configure; ``dkms remove -m NAME
  -v VERSION --all`` before removal or upgrade). Its ``make`` compiles ``nvidia.ko``, an ELF object with a
  ``.modinfo`` section (license, version) and no code, with gcc, which dkms depends on; dkms installs it in
  ``/lib/modules/<kver>/updates/dkms/`` and runs depmod, so ``dkms status`` says
  ``nvidia/<driver>, <kver>, x86_64: installed`` and ``modules.dep`` lists ``updates/dkms/nvidia.ko``, as a captured
  ``dkms status`` of NVIDIA's ``nvidia-kernel-open-dkms`` 595.45.04-1 on Debian shows (``nvidia/595.45.04,
  6.19.6+deb14-amd64, x86_64: installed``, the file ``updates/dkms/nvidia.ko.xz``: the KoolDots project's
  "Triage Issues with NVIDIA on Linux", 2026.03.13).
  Where it differs from the real package: it does not depend on ``dkms`` (only the node that has dkms builds the
  module; the other lab nodes would otherwise install a compiler), so its postinst runs ``common.postinst`` only
  where dkms installed it, and its prerm ``dkms remove`` only where dkms is installed.
"""

from __future__ import annotations

import os
from pathlib import Path

# The stand-in module's source: a .modinfo section and nothing else (modinfo reads it; depmod lists the file).
MODULE_SOURCE = """/* gpuops lab stand-in of the NVIDIA kernel module: its modinfo, no code (cannot be loaded). */
__attribute__((section(".modinfo"), used))
static const char gpuops_lab_modinfo[] =
    "license=NVIDIA\\0version={driver}\\0description=NVIDIA kernel module (gpuops lab stand-in)\\0";
"""

# NVIDIA's kernel-open/dkms.conf form; dkms reads ${kernelver} and ${kernel_source_dir} when it sources the file.
DKMS_CONF = """# gpuops lab stand-in of the NVIDIA driver's DKMS source (lab only; see
# extensions/molecule/lab/packages/kernel_packages.py)
PACKAGE_NAME="nvidia"
PACKAGE_VERSION="{driver}"
AUTOINSTALL="yes"
MAKE[0]="'make' KERNEL_UNAME=${{kernelver}} SYSSRC=${{kernel_source_dir}} modules"
CLEAN="'make' clean"
BUILT_MODULE_NAME[0]="nvidia"
DEST_MODULE_LOCATION[0]="/updates/dkms"
STRIP[0]="no"
"""

# SYSSRC: the kernel's headers (NVIDIA's Kbuild variable of that name). The build stops where the headers say so.
MAKEFILE = """# gpuops lab stand-in of the NVIDIA module build: nvidia.ko from nvidia-stand-in.c (lab only)
SYSSRC ?= /lib/modules/$(KERNEL_UNAME)/build

modules:
\t@test -d "$(SYSSRC)/include" || {{ echo "no kernel headers in $(SYSSRC)" >&2; exit 1; }}
\t@if [ -f "$(SYSSRC)/gpuops-lab-build-fails" ]; then cat "$(SYSSRC)/gpuops-lab-build-fails" >&2; exit 2; fi
\tgcc -c -o nvidia.ko nvidia-stand-in.c

clean:
\trm -f nvidia.ko
"""

DKMS_POSTINST = """#!/bin/sh
# The postinst dh_dkms writes (dkms 3.0.10 on Debian 12), run only where dkms is installed (the stand-in does not
# depend on it).
set -e
DKMS_NAME=nvidia
DKMS_PACKAGE_NAME=$DKMS_NAME-dkms
DKMS_VERSION={driver}
case "$1" in
    configure)
        if [ -f /usr/lib/dkms/common.postinst ]; then
            /usr/lib/dkms/common.postinst $DKMS_NAME $DKMS_VERSION /usr/share/$DKMS_PACKAGE_NAME "" $2
        fi
        ;;
esac
exit 0
"""

DKMS_PRERM = """#!/bin/sh
# The prerm dh_dkms writes, run only where dkms is installed.
set -e
DKMS_NAME=nvidia
DKMS_VERSION={driver}
case "$1" in
    remove|upgrade|deconfigure)
        if command -v dkms >/dev/null && [ "$(dkms status -m $DKMS_NAME -v $DKMS_VERSION)" ]; then
            dkms remove -m $DKMS_NAME -v $DKMS_VERSION --all
        fi
        ;;
esac
exit 0
"""

IMAGE_POSTINST = """#!/bin/sh -e
# Debian's linux-image postinst (debian/templates/image.postinst.in), without linux-update-symlinks.
version={kver}
image_path=/boot/vmlinuz-$version
if [ "$1" != configure ]; then
    exit 0
fi
depmod $version
if [ -d /etc/kernel/postinst.d ]; then
    DEB_MAINT_PARAMS="$*" run-parts --report --exit-on-error --arg=$version \\
        --arg=$image_path /etc/kernel/postinst.d
fi
exit 0
"""

IMAGE_PRERM = """#!/bin/sh -e
# Debian's linux-image prerm (debian/templates/image.prerm.in).
version={kver}
image_path=/boot/vmlinuz-$version
if [ "$1" != remove ]; then
    exit 0
fi
if [ -d /etc/kernel/prerm.d ]; then
    DEB_MAINT_PARAMS="$*" run-parts --report --exit-on-error --arg=$version \\
        --arg=$image_path /etc/kernel/prerm.d
fi
exit 0
"""

IMAGE_POSTRM = """#!/bin/sh -e
# Debian's linux-image postrm (debian/templates/image.postrm.in): depmod's files go with the kernel.
version={kver}
if [ "$1" = remove ] || [ "$1" = purge ]; then
    rm -f /lib/modules/$version/modules.*
fi
exit 0
"""

HEADERS_POSTINST = """#!/bin/sh -e
# Debian's linux-headers postinst (debian/templates/headers.postinst.in).
version={kver}
if [ "$1" != configure ]; then
    exit 0
fi
if [ -d /etc/kernel/header_postinst.d ]; then
    DEB_MAINT_PARAMS="$*" run-parts --report --exit-on-error --arg=$version \\
        /etc/kernel/header_postinst.d
fi
exit 0
"""

BUILD_FAILS = (
    "nvidia/nv.c: error: the NVIDIA driver does not build against the headers of {kver} "
    "(gpuops lab stand-in of a kernel API change)\n"
)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def stage_dkms_source(staging: Path, driver: str) -> None:
    """The NVIDIA driver's DKMS source at ``/usr/src/nvidia-<driver>`` and dh_dkms's maintainer scripts."""
    source = staging / "usr" / "src" / f"nvidia-{driver}"
    _write(source / "dkms.conf", DKMS_CONF.format(driver=driver))
    _write(source / "Makefile", MAKEFILE.format())
    _write(source / "nvidia-stand-in.c", MODULE_SOURCE.format(driver=driver))
    _write(staging / "DEBIAN" / "postinst", DKMS_POSTINST.format(driver=driver), 0o755)
    _write(staging / "DEBIAN" / "prerm", DKMS_PRERM.format(driver=driver), 0o755)


def stage_image(staging: Path, kver: str) -> None:
    """``linux-image-<kver>``: the files the lab's checks and dkms read, Debian's maintainer scripts."""
    _write(staging / "boot" / f"vmlinuz-{kver}", f"gpuops lab stand-in of the kernel image {kver} (cannot boot)\n")
    _write(staging / "boot" / f"config-{kver}", "CONFIG_MODULES=y\n")
    for name in ("modules.order", "modules.builtin", "modules.builtin.modinfo"):
        _write(staging / "lib" / "modules" / kver / name, "")
    _write(staging / "DEBIAN" / "postinst", IMAGE_POSTINST.format(kver=kver), 0o755)
    _write(staging / "DEBIAN" / "prerm", IMAGE_PRERM.format(kver=kver), 0o755)
    _write(staging / "DEBIAN" / "postrm", IMAGE_POSTRM.format(kver=kver), 0o755)


def stage_headers(staging: Path, kver: str, build_fails: bool = False) -> None:
    """``linux-headers-<kver>``: the headers directory, ``/lib/modules/<kver>/build`` linked to it, and Debian's
    postinst; with ``build_fails``, the mark on which the stand-in module's build stops."""
    headers = staging / "usr" / "src" / f"linux-headers-{kver}"
    _write(headers / "include" / "generated" / "utsrelease.h", f'#define UTS_RELEASE "{kver}"\n')
    _write(headers / ".config", "CONFIG_MODULES=y\n")
    if build_fails:
        _write(headers / "gpuops-lab-build-fails", BUILD_FAILS.format(kver=kver))
    modules = staging / "lib" / "modules" / kver
    modules.mkdir(parents=True, exist_ok=True)
    os.symlink(f"/usr/src/linux-headers-{kver}", modules / "build")
    _write(staging / "DEBIAN" / "postinst", HEADERS_POSTINST.format(kver=kver), 0o755)
