# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_stack's ``gpudirect_rdma`` part: make the node's nvidia-peermem match the GPUDirect RDMA path it has.

The path is decided by :func:`health.gpudirect_rdma.decide`, the one the health check judges by, on what the node
shows (sysfs and /proc only). Where no NVIDIA module is loaded yet (a first install), the flavour the stack installs
(``flavor``, the resolved ``kernel_modules``) stands in for the loaded one.

- ``peermem``: ``/etc/modules-load.d/nvidia-peermem.conf`` (the file and text of the kernel_tuning role's
  rdma_dropins, so the two never disagree), and ``modprobe nvidia-peermem`` now where the driver is loaded and
  nvidia-peermem is not (``load_now``; false for an image tree under ``root``). A failed load fails the part with
  modprobe's message and the fix: "Invalid argument" is a module built without, or against another, OFED than the
  one running.
- ``dmabuf`` or ``none`` (the setting none, or no HCA): nothing is loaded, and that file is removed where it holds
  exactly what this collection writes (an operator's own file is left alone). A loaded nvidia-peermem is not
  unloaded: RDMA applications may hold it; it goes at the next boot.
- No usable path (auto finding neither, or the path asked for cannot serve): nothing changes; the result says why
  (``status`` fail, ``detail`` with the fix) and the health check fails the node with the same words.

Rebuilding nvidia-peermem after an OFED change is not done here: the module is part of the driver's DKMS build
(``nvidia-peermem.Kbuild`` reads OFED's ``Module.symvers`` at build time), so the fix is the driver's DKMS rebuild,
which the load failure and the health check name.
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.cluster.plugins.module_utils import command_runner, managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import under
from ansible_collections.gpuops.cluster.plugins.module_utils.health import gpudirect_rdma
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import owned_files, rdma_dropins

DRIVER_MODULE = "/sys/module/nvidia"

MODULE_KWARGS = dict(
    argument_spec=dict(
        setting=dict(type="str", choices=list(gpudirect_rdma.SETTINGS), default=gpudirect_rdma.DEFAULT_SETTING),
        flavor=dict(type="str", choices=["open", "proprietary"]),
        load_now=dict(type="bool", default=True),
        root=dict(type="path", default="/"),
    ),
    supports_check_mode=True,
)


def plan(reading, setting, flavor=None):
    """``{decision, file: present|absent|keep, load: bool}`` for a reading (:func:`gpudirect_rdma.read`).

    ``flavor`` stands in for the loaded module's where none is loaded. ``load``: nvidia-peermem should be loaded now
    (the path is peermem, it is not loaded and the peer-memory symbols are not known to be missing).
    """
    if reading.get("flavor") is None and flavor:
        reading = dict(reading, flavor=flavor, driver_version="(installed, not loaded)")
    decision = gpudirect_rdma.decide(reading, setting)
    if decision["path"] == "peermem" and reading.get("peer_memory_symbols") is not False:
        return {"decision": decision, "file": "present", "load": not reading.get("peermem_loaded")}
    if decision["path"] in ("dmabuf", "none"):
        return {"decision": decision, "file": "absent", "load": False}
    return {"decision": decision, "file": "keep", "load": False}


def _remove_ours(module, path, diff):
    """Remove ``path`` where it holds exactly what this collection writes; True when it was (or would be)."""
    if managed_file.read_text(path) != rdma_dropins.render_peermem():
        return False
    return managed_file.remove(module, path, diff)


def _load(module, root, result):
    if not os.path.isdir(under(root, DRIVER_MODULE)):
        result["notes"].append("nvidia-peermem loads at the next boot (the NVIDIA driver is not loaded now)")
        return False
    if not module.check_mode:
        hint = (
            "Where it says 'Invalid argument' the module was built without, or against another, MLNX_OFED/DOCA-OFED "
            "than the one running: %s; or set %s: dmabuf where the node runs the open kernel modules on Linux 5.12 or "
            "later" % (gpudirect_rdma.PEERMEM_FIX, gpudirect_rdma.SETTING)
        )
        modprobe = module.get_bin_path("modprobe", required=True)
        command_runner.run_checked(module, [modprobe, "nvidia-peermem"], "load nvidia-peermem", hint=hint)
    return True


def run(module) -> dict:
    """The part's work: ``changed``, ``path`` (the GPUDirect RDMA path), ``status``, ``detail``, ``file``, ``loaded``,
    ``notes``."""
    params = module.params
    root = params["root"]
    planned = plan(gpudirect_rdma.read(root), params["setting"], params["flavor"])
    decision = planned["decision"]
    path = under(root, rdma_dropins.PEERMEM_PATH)
    diff = [] if module._diff else None
    result = dict(
        changed=False,
        path=decision["path"],
        setting=decision["setting"],
        status=decision["status"],
        detail=decision["detail"] + ("; fix: " + decision["fix"] if decision["fix"] else ""),
        file=path,
        loaded=False,
        notes=[],
    )
    if planned["file"] == "present":
        result["changed"] = owned_files.sync_file(module, path, rdma_dropins.render_peermem(), 0o644, diff)
    elif planned["file"] == "absent":
        result["changed"] = _remove_ours(module, path, diff)
    if planned["load"] and params["load_now"]:
        result["loaded"] = _load(module, root, result)
        result["changed"] = result["changed"] or result["loaded"]
    if diff is not None:
        result["diff"] = diff
    return result
