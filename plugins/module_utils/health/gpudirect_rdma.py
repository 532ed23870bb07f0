# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which GPUDirect RDMA path a node has: DMA-BUF, nvidia-peermem, or none needed. Pure but for reads.

GPUDirect RDMA lets an RDMA HCA (InfiniBand or RoCE) read and write GPU memory. The kernel side is one of two:

- **DMA-BUF**, from the Linux kernel. NVIDIA recommends it over nvidia-peermem. It needs the open kernel modules,
  CUDA 11.7 or later (the open modules exist from R515, whose CUDA is 11.7) and Linux 5.12 or later; MLNX_OFED or
  DOCA-OFED are optional (the distribution's RDMA drivers serve). Nothing is loaded for it. Source: NVIDIA GPU
  Operator docs, "GPUDirect RDMA and GPUDirect Storage", prerequisites table (NVIDIA/cloud-native-docs
  gpu-operator/gpu-operator-rdma.rst, 2026-08).
- **nvidia-peermem** (``nvidia-peermem.ko``, ``nvidia_peermem`` once loaded), shipped with the driver since R470. It
  registers GPU memory through the peer-memory API that MLNX_OFED/DOCA-OFED add to ``ib_core``
  (``ib_register_peer_memory_client``; Ubuntu kernels carried it too). It is built against what the build finds:
  ``nvidia-peermem.Kbuild`` takes OFED's headers and ``Module.symvers`` from ``/usr/src/ofa_kernel/...`` or
  ``/var/lib/dkms/mlnx-ofed-kernel``, and conftest ``ib_peer_memory_symbols`` defines
  ``NV_MLNX_IB_PEER_MEM_SYMBOLS_PRESENT`` only where the two symbols are found; without it ``nv_mem_client_init``
  returns ``-EINVAL``, so ``modprobe nvidia-peermem`` fails with "Invalid argument". A module built before OFED was
  installed, or against another OFED (symbol versions differ: "disagrees about version of symbol
  ib_register_peer_memory_client"), fails the same way until the driver's DKMS module is rebuilt. Source:
  NVIDIA/open-gpu-kernel-modules 595.45.04, ``kernel-open/nvidia-peermem/nvidia-peermem.{Kbuild,c}``,
  ``kernel-open/conftest.sh``; GPU Operator issue 2868.

What is read, under ``root`` (``/`` on a node, a fake tree in tests), files only:

- the HCAs: ``/sys/class/infiniband/<device>/ports/<port>/link_layer`` (``InfiniBand`` or ``Ethernet`` for RoCE);
- whether nvidia-peermem is loaded: ``/sys/module/nvidia_peermem`` (NCCL and UCX test
  ``/sys/module/nvidia_peermem/version`` the same way);
- whether the running kernel has the peer-memory symbols: ``ib_register_peer_memory_client`` in ``/proc/kallsyms``
  (names are listed to every reader; ``T ib_register_peer_memory_client [ib_core]`` where OFED's ib_core is
  loaded). ``/sys/kernel/mm/memory_peers`` is not used: it lists registered clients only, and recent OFED releases
  do not create it;
- the flavour of the loaded NVIDIA module: ``/proc/driver/nvidia/version``, "NVRM version: NVIDIA UNIX Open Kernel
  Module for x86_64 <version>" (open) or "NVRM version: NVIDIA UNIX x86_64 Kernel Module <version>" (proprietary),
  the ``NVRM_ID`` string of ``src/nvidia/Makefile`` (real captures in tests/fixtures/stack/proc_version_*.txt);
- the running kernel: ``/proc/sys/kernel/osrelease``.

:func:`decide` turns a reading and the operator's setting (``gpuops_gpudirect_rdma``: :data:`SETTINGS`) into the
path the node has and whether it is usable; :func:`findings` gives the health check's results.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value, under

SETTINGS = ("auto", "peermem", "dmabuf", "none")
DEFAULT_SETTING = "auto"
SETTING = "gpuops_gpudirect_rdma"
INFINIBAND_CLASS = "/sys/class/infiniband"
PEERMEM_MODULE = "/sys/module/nvidia_peermem"
KALLSYMS = "/proc/kallsyms"
DRIVER_VERSION = "/proc/driver/nvidia/version"
OSRELEASE = "/proc/sys/kernel/osrelease"
PEER_MEMORY_SYMBOL = "ib_register_peer_memory_client"
DMABUF_MIN_KERNEL = (5, 12)  # NVIDIA: "5.12 or higher" for DMA-BUF
_SYMBOL_LINE = re.compile(rb"\s" + PEER_MEMORY_SYMBOL.encode() + rb"(\s|$)", re.MULTILINE)
_NVRM = re.compile(r"^NVRM version:\s+NVIDIA UNIX\s+(?P<open>Open )?.*?Kernel Module.*?\s(?P<version>\d+(?:\.\d+)+)\s")
_KERNEL = re.compile(r"^(\d+)\.(\d+)")

# The rebuild: `dkms install --force` alone reinstalls the old build; `dkms build --force` builds again (dkms 3.x;
# dkms-project/dkms maybe_build_module); stack/peermem_build.py says why and names the module DKMS has.
DKMS_REBUILD = (
    "dkms build --force nvidia/<driver version> -k $(uname -r) && "
    "dkms install --force nvidia/<driver version> -k $(uname -r)"
)
PEERMEM_FIX = (
    "install MLNX_OFED or DOCA-OFED, then rebuild the driver's DKMS module so nvidia-peermem builds against OFED's "
    "symbols (%s), then modprobe nvidia-peermem" % DKMS_REBUILD
)


def _hcas(root):
    base = under(root, INFINIBAND_CLASS)
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        return []
    hcas = []
    for device in devices:
        try:
            ports = sorted(os.listdir(os.path.join(base, device, "ports")))
        except OSError:
            ports = []
        layers = sorted(
            {read_value(os.path.join(base, device, "ports", port, "link_layer")) or "unknown" for port in ports}
        )
        hcas.append({"device": device, "link_layers": layers})
    return hcas


def _peer_memory_symbols(root):
    """True/False: the peer-memory symbol is/is not in ``/proc/kallsyms``; None when it cannot be read."""
    try:
        with open(under(root, KALLSYMS), "rb") as handle:
            return bool(_SYMBOL_LINE.search(handle.read()))
    except OSError:
        return None


def parse_driver_version(text):
    """``/proc/driver/nvidia/version`` -> ``{flavor: open|proprietary, version}``; None without an NVRM line."""
    for line in (text or "").splitlines():
        match = _NVRM.match(line.strip() + " ")
        if match:
            return {"flavor": "open" if match.group("open") else "proprietary", "version": match.group("version")}
    return None


def kernel_version(release):
    """``6.8.0-45-generic`` -> ``(6, 8)``; None when it does not start with two numbers."""
    match = _KERNEL.match(release or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def read(root="/"):
    """What the node shows: ``{hcas, peermem_loaded, peer_memory_symbols, flavor, driver_version, kernel}``.

    ``peer_memory_symbols`` is None where ``/proc/kallsyms`` could not be read or the node has no HCA; ``flavor``
    and ``driver_version`` are None where no NVIDIA module is loaded; ``kernel`` is None where the release could not
    be read.
    """
    driver = parse_driver_version(read_value(under(root, DRIVER_VERSION))) or {}
    hcas = _hcas(root)
    return {
        "hcas": hcas,
        "peermem_loaded": os.path.isdir(under(root, PEERMEM_MODULE)),
        # /proc/kallsyms is megabytes: read only where an HCA makes the answer matter
        "peer_memory_symbols": _peer_memory_symbols(root) if hcas else None,
        "flavor": driver.get("flavor"),
        "driver_version": driver.get("version"),
        "kernel": read_value(under(root, OSRELEASE)),
    }


def dmabuf_blockers(reading):
    """Why DMA-BUF cannot serve this node (empty: it can), by NVIDIA's prerequisites."""
    blockers = []
    if reading.get("flavor") is None:
        blockers.append("no NVIDIA kernel module is loaded (%s absent), so its flavour is unknown" % DRIVER_VERSION)
    elif reading["flavor"] != "open":
        blockers.append("the loaded NVIDIA kernel module is the proprietary flavour; DMA-BUF needs the open modules")
    version = kernel_version(reading.get("kernel"))
    if version is None:
        blockers.append("the running kernel's release could not be read (%s)" % OSRELEASE)
    elif version < DMABUF_MIN_KERNEL:
        blockers.append("kernel %s is older than the 5.12 DMA-BUF needs" % reading["kernel"])
    return blockers


def _hca_text(hcas):
    return ", ".join("%s (%s)" % (hca["device"], "/".join(hca["link_layers"]) or "no ports") for hca in hcas)


def decide(reading, setting=DEFAULT_SETTING):
    """The path of the node and whether it is usable.

    ``{path: peermem|dmabuf|none|None, setting, status: pass|fail|skip, detail, fix}``. ``path`` is None where no
    path is usable (auto finding neither) or the reading cannot tell. A node without HCAs needs none, whatever the
    setting; ``none`` checks nothing. ``auto``: DMA-BUF where NVIDIA's prerequisites hold, else nvidia-peermem
    where the peer-memory symbols are there.
    """
    if setting not in SETTINGS:
        raise ValueError("%s must be one of %s, not %r" % (SETTING, ", ".join(SETTINGS), setting))
    result = {"path": None, "setting": setting, "status": "fail", "detail": "", "fix": None}
    hcas = reading.get("hcas") or []
    if not hcas:
        result.update(
            path="none", status="skip", detail="no RDMA HCA under %s: GPUDirect RDMA not needed" % INFINIBAND_CLASS
        )
        return result
    if setting == "none":
        result.update(
            path="none",
            status="skip",
            detail="%s is none: HCAs %s, no GPUDirect RDMA path asked for" % (SETTING, _hca_text(hcas)),
        )
        return result
    blockers = dmabuf_blockers(reading)
    symbols = reading.get("peer_memory_symbols")
    if setting == "dmabuf" or (setting == "auto" and not blockers):
        if blockers:
            result.update(
                path="dmabuf",
                detail="%s is dmabuf but DMA-BUF cannot serve: %s" % (SETTING, "; ".join(blockers)),
                fix="install the open kernel modules on Linux 5.12 or later, or set %s: peermem" % SETTING,
            )
            return result
        detail = "DMA-BUF (open kernel modules %s, kernel %s), HCAs %s" % (
            reading["driver_version"],
            reading["kernel"],
            _hca_text(hcas),
        )
        if reading.get("peermem_loaded"):
            detail += "; nvidia_peermem is loaded too, not needed"
        result.update(path="dmabuf", status="pass", detail=detail)
        return result
    if setting == "auto" and (reading.get("flavor") is None or kernel_version(reading.get("kernel")) is None):
        result.update(
            detail="the path cannot be chosen: %s" % "; ".join(blockers),
            fix="load the NVIDIA driver (the check judges a node whose driver runs), or set %s" % SETTING,
        )
        return result
    if setting == "auto" and symbols is not True:
        why = "; ".join(blockers)
        if symbols is None:
            result.update(
                detail="DMA-BUF cannot serve (%s) and %s could not be read to look for the peer-memory symbols"
                % (why, KALLSYMS),
                fix="run the check as root, or set %s" % SETTING,
            )
        else:
            result.update(
                detail="no GPUDirect RDMA path: DMA-BUF cannot serve (%s) and nvidia-peermem would fail to load with "
                "'Invalid argument' (no %s in %s: no MLNX_OFED/DOCA-OFED peer-memory API)"
                % (why, PEER_MEMORY_SYMBOL, KALLSYMS),
                fix="use the open kernel modules on Linux 5.12 or later (DMA-BUF), or " + PEERMEM_FIX,
            )
        return result
    # nvidia-peermem: asked for, or auto where DMA-BUF cannot serve and the peer-memory symbols are there
    result["path"] = "peermem"
    because = "" if setting == "peermem" else " (DMA-BUF cannot serve: %s)" % "; ".join(blockers)
    if reading.get("peermem_loaded"):
        result.update(status="pass", detail="nvidia-peermem loaded%s, HCAs %s" % (because, _hca_text(hcas)))
    elif symbols is False:
        result.update(
            detail="nvidia-peermem wanted%s but the peer-memory symbols are missing (no %s in %s): it fails to load "
            "with 'Invalid argument'" % (because, PEER_MEMORY_SYMBOL, KALLSYMS),
            fix=PEERMEM_FIX + "; or use DMA-BUF (open kernel modules, Linux 5.12 or later)",
        )
    else:
        result.update(
            detail="nvidia-peermem wanted%s but not loaded (%s absent)" % (because, PEERMEM_MODULE),
            fix="modprobe nvidia-peermem; if it fails with 'Invalid argument', the module was built without or "
            "against another OFED than the one running: rebuild the driver's DKMS module (%s); the nvidia_stack "
            "role rebuilds it where it finds the build stale" % DKMS_REBUILD,
        )
    return result


def findings(decision):
    """``[(status, detail)]`` of the ``gpudirect_rdma`` check for a :func:`decide` result, the fix in the detail."""
    detail = decision["detail"]
    if decision["fix"]:
        detail += "; fix: " + decision["fix"]
    return [(decision["status"], detail)]
