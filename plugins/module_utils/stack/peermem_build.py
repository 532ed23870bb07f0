# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether nvidia-peermem on disk was built against the OFED installed, and how it is rebuilt. Pure.

What "rebuilt after an OFED change" means on a node, as decided here:

- nvidia-peermem is built with the driver's kernel modules. Its build takes MLNX_OFED/DOCA-OFED's headers and
  ``Module.symvers`` (``KBUILD_EXTRA_SYMBOLS``) from ``/usr/src/ofa_kernel[-dkms]/...`` or
  ``/var/lib/dkms/mlnx-ofed-kernel``, whichever exists when it is built (NVIDIA/open-gpu-kernel-modules
  ``kernel-open/nvidia-peermem/nvidia-peermem.Kbuild``). Built before OFED was installed, it has no peer-memory
  client and fails to load with "Invalid argument"; built against another OFED, the kernel refuses it:
  "disagrees about version of symbol ib_register_peer_memory_client" (GPU Operator issue 2868).
- The kernel decides that by symbol versions (CONFIG_MODVERSIONS, on in Debian, Ubuntu and RHEL kernels): every
  symbol a module imports carries the CRC it was built against (its ``__versions`` section), and the exporting
  module's CRC must equal it. So the same comparison, made on disk, says whether the nvidia-peermem that the
  next ``modprobe`` (or the next boot) loads fits the ``ib_core`` that loads with it, before anything fails:
  ``modprobe --show-modversions <nvidia-peermem.ko>`` lists what it imports, ``modprobe --show-exports
  <ib_core.ko>`` what OFED's ib_core exports, both as ``0x%08x<TAB>symbol`` lines (kmod ``tools/modprobe.c``,
  ``show_modversions`` and ``show_exports``). The files are the ones ``modinfo -k <kernel> -n`` names, the ones
  modprobe loads (depmod ranks ``updates/`` where DKMS and OFED install before the kernel's own).
  Real kmod 30 output: tests/fixtures/gpudirect/kmod30-*.
- With DKMS modules the fix is the driver's DKMS rebuild for that kernel: ``dkms build --force`` (dkms 3.x
  removes the old build of that kernel and builds again; ``dkms install --force`` alone reinstalls the old build)
  then ``dkms install --force``, which installs the new files and runs depmod (dkms-project/dkms
  ``maybe_build_module``, ``maybe_install_module``). The installed module stays in place until the new one is
  built, so a failed build leaves the node as it was. dkms 2.x refuses ``build`` of a built module; its failure
  says so and the fix names ``dkms remove`` then ``dkms install``.
- With precompiled modules (Ubuntu's ``linux-modules-nvidia-*``, NVIDIA's precompiled kmod packages) there is
  nothing to rebuild on the node: the verdict names the module package, and the node is left as it is.

Nothing is judged where it cannot be: a module without symbol versions (a kernel built without CONFIG_MODVERSIONS;
modprobe then fails with "could not get modversions") reads as ``unknown``, never as current.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.health import gpudirect_rdma, kernel_modules

PEERMEM = "nvidia-peermem"
IB_CORE = "ib_core"
SYMBOL = gpudirect_rdma.PEER_MEMORY_SYMBOL
STATES = ("current", "stale", "no_ofed", "unknown")
_CRC_LINE = re.compile(r"^0x(?P<crc>[0-9a-fA-F]+)\t(?P<symbol>\S+)$")


def parse_crcs(text):
    """``modprobe --show-modversions`` / ``--show-exports`` output -> ``{symbol: crc}``.

    Raises ValueError on a line of another shape (the output is then not understood, and nothing is judged by it).
    """
    crcs = {}
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        match = _CRC_LINE.match(line.rstrip("\r"))
        if not match:
            raise ValueError("not a '0x<crc><TAB><symbol>' line of modprobe: %r" % line)
        crcs[match.group("symbol")] = int(match.group("crc"), 16)
    return crcs


def verdict(imports, exports, peermem_path="nvidia-peermem.ko", ib_core_path="ib_core.ko"):
    """``{state, detail}`` for nvidia-peermem's imports against ib_core's exports (:func:`parse_crcs` results).

    ``state``: ``current`` (every symbol it takes from ib_core has ib_core's CRC), ``stale`` (built without the
    peer-memory symbols while ib_core has them, or against another OFED), ``no_ofed`` (ib_core exports no
    peer-memory API: a rebuild cannot help, OFED is missing), ``unknown`` (nvidia-peermem carries no symbol
    versions). ``imports`` None: the module has no symbol versions.
    """
    if SYMBOL not in exports:
        return {
            "state": "no_ofed",
            "detail": "%s exports no %s: it is not MLNX_OFED/DOCA-OFED's ib_core" % (ib_core_path, SYMBOL),
        }
    if not imports:
        return {
            "state": "unknown",
            "detail": "%s carries no symbol versions (kernel without CONFIG_MODVERSIONS?): whether it fits %s "
            "cannot be told before it loads" % (peermem_path, ib_core_path),
        }
    if SYMBOL not in imports:
        return {
            "state": "stale",
            "detail": "%s was built without the OFED peer-memory symbols (before MLNX_OFED/DOCA-OFED was installed), "
            "while %s has them: it fails to load with 'Invalid argument'" % (peermem_path, ib_core_path),
        }
    differ = sorted(name for name in imports if name in exports and imports[name] != exports[name])
    if differ:
        return {
            "state": "stale",
            "detail": "%s was built against another OFED than the one installed: %s"
            % (
                peermem_path,
                ", ".join(
                    "%s 0x%08x in the module, 0x%08x in %s" % (name, imports[name], exports[name], ib_core_path)
                    for name in differ
                ),
            ),
        }
    return {"state": "current", "detail": "%s fits the installed OFED's %s" % (peermem_path, ib_core_path)}


def dkms_owner(status_text, kernel):
    """The DKMS ``(module, version)`` that installed the NVIDIA driver for ``kernel``, from ``dkms status``.

    None where DKMS installed none for it (precompiled modules). Raises ValueError where two driver modules are
    installed for that kernel (which one built nvidia-peermem cannot be told).
    """
    owners = sorted(
        {
            (entry["module"], entry["version"])
            for entry in kernel_modules.parse_dkms_status(status_text)["entries"]
            if kernel_modules.is_driver_module(entry["module"])
            and entry["kernel"] == kernel
            and entry["state"] == "installed"
        }
    )
    if len(owners) > 1:
        raise ValueError(
            "dkms status lists more than one NVIDIA driver module installed for %s (%s): remove all but one"
            % (kernel, ", ".join("%s/%s" % owner for owner in owners))
        )
    return owners[0] if owners else None


def rebuild_argv(dkms, owner, kernel):
    """The commands that rebuild and reinstall the driver's DKMS module ``owner`` for ``kernel``, in order."""
    name = "%s/%s" % owner
    return [[dkms, "build", "--force", name, "-k", kernel], [dkms, "install", "--force", name, "-k", kernel]]


def rebuild_fix(owner, kernel):
    """What an operator runs by hand (the message of a failure, the health check's fix)."""
    name = "%s/%s" % owner if owner else "nvidia/<driver version>"
    return (
        f"rebuild the driver's DKMS module against the installed OFED: dkms build --force {name} -k {kernel} && "
        f"dkms install --force {name} -k {kernel} "
        f"(dkms 2.x: dkms remove {name} -k {kernel} && dkms install {name} -k {kernel})"
    )
