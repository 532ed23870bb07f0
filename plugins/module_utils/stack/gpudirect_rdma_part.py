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

Rebuilt after an OFED change (``rebuild``, on the node itself only): on the peermem path, the nvidia-peermem that
modprobe would load for the running kernel is compared with OFED's ib_core by symbol versions
(:mod:`stack.peermem_build`, which says why this is the test). Built without the peer-memory symbols or against
another OFED, the driver's DKMS module is rebuilt and reinstalled for that kernel (check mode predicts it), then
loaded where it is not; a loaded one is replaced on disk and the new one loads at the next boot. Precompiled
modules are not rebuilt: the result names the package. A failed load names the rebuild.
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.cluster.plugins.module_utils import command_runner, managed_file
from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import under
from ansible_collections.gpuops.cluster.plugins.module_utils.health import gpudirect_rdma
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import peermem_build
from ansible_collections.gpuops.cluster.plugins.module_utils.tuning import owned_files, rdma_dropins

DRIVER_MODULE = "/sys/module/nvidia"
REBUILD_LIMIT = 1800  # a DKMS build of the driver's modules takes minutes

MODULE_KWARGS = dict(
    argument_spec=dict(
        setting=dict(type="str", choices=list(gpudirect_rdma.SETTINGS), default=gpudirect_rdma.DEFAULT_SETTING),
        flavor=dict(type="str", choices=["open", "proprietary"]),
        load_now=dict(type="bool", default=True),
        rebuild=dict(type="bool", default=True),
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


def _on_node(root):
    """Whether the part acts on the node's own kernel modules (modinfo and dkms see the node, not an image tree)."""
    return root == "/"


def _module_file(module, kernel, name):
    """The file modprobe loads for ``name`` on ``kernel`` (``modinfo -k -n``); None where there is none."""
    modinfo = module.get_bin_path("modinfo", required=True)
    rc, out, _err = command_runner.run_bounded(module, [modinfo, "-k", kernel, "-n", name], "find %s" % name)
    return command_runner.first_line(out) if rc == 0 and out.strip() else None


def _crcs(module, option, path):
    """``{symbol: crc}`` of ``modprobe <option> <path>``; None where the module carries no symbol versions."""
    modprobe = module.get_bin_path("modprobe", required=True)
    rc, out, err = command_runner.run_bounded(module, [modprobe, option, path], "read the symbol versions of " + path)
    if rc != 0:
        if "could not get modversions" in err:
            return None
        module.fail_json(
            msg="could not read the symbol versions of %s: modprobe %s exited %d: %s"
            % (path, option, rc, command_runner.first_line(err, out)),
            rc=rc,
            stderr=err,
        )
    try:
        return peermem_build.parse_crcs(out)
    except ValueError as error:
        module.fail_json(msg="could not read the symbol versions of %s: %s" % (path, error))


def build_state(module, kernel):
    """``{state, detail}`` (:func:`peermem_build.verdict`) of the nvidia-peermem modprobe loads on ``kernel``."""
    peermem = _module_file(module, kernel, peermem_build.PEERMEM)
    if peermem is None:
        return {"state": "unknown", "detail": "modinfo finds no %s for kernel %s" % (peermem_build.PEERMEM, kernel)}
    ib_core = _module_file(module, kernel, peermem_build.IB_CORE)
    if ib_core is None:
        return {"state": "no_ofed", "detail": "modinfo finds no %s for kernel %s" % (peermem_build.IB_CORE, kernel)}
    exports = _crcs(module, "--show-exports", ib_core) or {}
    return peermem_build.verdict(_crcs(module, "--show-modversions", peermem), exports, peermem, ib_core)


def _rebuild(module, kernel, build, result):
    """Rebuild the driver's DKMS module for ``kernel`` where ``build`` is stale; True when it was (or would be)."""
    dkms = module.get_bin_path("dkms")
    owner = None
    if dkms:
        out, _err = command_runner.run_checked(module, [dkms, "status"], "list the DKMS modules (dkms status)")
        try:
            owner = peermem_build.dkms_owner(out, kernel)
        except ValueError as error:
            module.fail_json(msg="could not rebuild nvidia-peermem: %s" % error)
    if owner is None:
        result["notes"].append(
            "%s; the NVIDIA modules of kernel %s are not DKMS-built, so nothing is rebuilt: install the module "
            "package built for this OFED, or use DMA-BUF" % (build["detail"], kernel)
        )
        return False
    result["notes"].append("%s: rebuilding %s/%s for kernel %s" % (build["detail"], owner[0], owner[1], kernel))
    if not module.check_mode:
        for argv in peermem_build.rebuild_argv(dkms, owner, kernel):
            command_runner.run_checked(
                module,
                argv,
                "rebuild nvidia-peermem against the installed OFED (%s)" % " ".join(argv[1:3]),
                hint=peermem_build.rebuild_fix(owner, kernel),
                seconds=REBUILD_LIMIT,
            )
    return True


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
        if result.get("build") and result["build"]["state"] != "current":
            hint = "Its build: %s. %s" % (result["build"]["detail"], hint)
        modprobe = module.get_bin_path("modprobe", required=True)
        command_runner.run_checked(module, [modprobe, "nvidia-peermem"], "load nvidia-peermem", hint=hint)
    return True


def run(module) -> dict:
    """The part's work: ``changed``, ``path`` (the GPUDirect RDMA path), ``status``, ``detail``, ``file``, ``loaded``,
    ``notes``."""
    params = module.params
    root = params["root"]
    reading = gpudirect_rdma.read(root)
    planned = plan(reading, params["setting"], params["flavor"])
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
        rebuilt=False,
        build=None,
        notes=[],
    )
    if planned["file"] == "present":
        result["changed"] = owned_files.sync_file(module, path, rdma_dropins.render_peermem(), 0o644, diff)
    elif planned["file"] == "absent":
        result["changed"] = _remove_ours(module, path, diff)
    # rebuilt after an OFED change: on the node itself (an image tree under root has no modules of its own to run)
    if planned["file"] == "present" and params["rebuild"] and _on_node(root) and reading.get("kernel"):
        build = build_state(module, reading["kernel"])
        result["build"] = build
        if build["state"] == "stale" and _rebuild(module, reading["kernel"], build, result):
            result["changed"] = result["rebuilt"] = True
            if reading.get("peermem_loaded"):
                result["notes"].append("the rebuilt nvidia-peermem loads at the next boot (the loaded one stays)")
    if planned["load"] and params["load_now"]:
        result["loaded"] = _load(module, root, result)
        result["changed"] = result["changed"] or result["loaded"]
    if diff is not None:
        result["diff"] = diff
    return result
