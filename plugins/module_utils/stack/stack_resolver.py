# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Turn an operator's NVIDIA stack request into exact, pinned packages for one host.

:func:`resolve` returns the resolved stack or raises :class:`StackViolations`
listing every problem; :func:`violations` returns that list (empty when the
request is valid). Both are deterministic: same request, host and date, same
answer. The rules are described in docs/compatibility-matrix.md.

Each part of the request is decided in the module named after it: :mod:`stack_request` (its shape),
:mod:`driver_resolution` (branch, release, kernel modules, Fabric Manager), :mod:`cuda_resolution` (CUDA,
NCCL), :mod:`dcgm_resolution`, ``image_cuda``, ``dcgm_exporter``, ``container_toolkit``; the packages and pins
of each component come from :mod:`component_packages`.
"""

from __future__ import annotations

import datetime
import difflib

from ansible_collections.gpuops.cluster.plugins.module_utils.stack import (
    container_toolkit,
    dcgm_exporter,
    image_cuda,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.component_packages import add_component, fill
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.cuda_resolution import resolve_cuda, resolve_nccl
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.dcgm_resolution import resolve_dcgm
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.driver_resolution import (
    branch_text,
    check_gpu_vs_driver,
    check_published,
    driver_request,
    eol_start,
    resolve_driver,
    resolve_fabricmanager,
    resolve_kernel_modules,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import cuda_dashed, parse_cuda
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import default_matrix
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_request import as_bool, check_request


class StackViolations(ValueError):
    """The request cannot be resolved; ``violations`` holds every ``{rule, message}``."""

    def __init__(self, violations):
        self.violations = list(violations)
        super().__init__(
            "%d problem(s) with the NVIDIA stack request:\n%s"
            % (len(self.violations), "\n".join("- [%s] %s" % (v["rule"], v["message"]) for v in self.violations))
        )


class _Resolution:
    def __init__(self):
        self.violations = []
        self.warnings = []

    def violate(self, rule, message):
        self.violations.append({"rule": rule, "message": message})

    def warn(self, message):
        self.warnings.append(message)


def _resolve(request, os, os_version, gpu, nvswitch=None, matrix=None, today=None):
    matrix = matrix if matrix is not None else default_matrix()
    today = today if today is not None else datetime.date.today()
    res = _Resolution()
    request = check_request(request, res)
    if request is None:
        return None, res

    osys = matrix.operating_system(os, os_version)
    if osys is None:
        res.violate(
            "os.unknown",
            "operating system %s %s is not in the compatibility matrix: supported are %s"
            % (os, os_version, "; ".join(matrix.operating_system_names())),
        )
    gpu_entry = matrix.gpu(gpu)
    if gpu_entry is None:
        close = difflib.get_close_matches(str(gpu), matrix.gpu_names(), n=1)
        res.violate(
            "gpu.unknown",
            "GPU %r is not in the compatibility matrix%s: give a short key (%s) or the product name nvidia-smi prints"
            % (gpu, " (did you mean '%s'?)" % close[0] if close else "", ", ".join(matrix.gpu_names())),
        )

    allow_compat = as_bool(request.get("allow_minor_version_compat", False), "allow_minor_version_compat", res)
    allow_eol = as_bool(request.get("allow_eol_branch", True), "allow_eol_branch", res)
    allow_unknown = as_bool(request.get("allow_unknown_release", False), "allow_unknown_release", res)

    branch = version = None
    if request.get("driver") not in (None, ""):
        branch, version = resolve_driver(matrix, request["driver"], res, bool(allow_unknown))
    branch_entry = matrix.branch(branch) if branch is not None else None
    if gpu_entry is not None and branch_entry is not None:
        check_gpu_vs_driver(gpu_entry, branch, version, res)
    if osys is not None and branch is not None and osys.get("min_branch") and branch < osys["min_branch"]:
        res.violate(
            "os.min_branch",
            "%s needs driver branch %s or newer: raise driver" % (osys["id"], branch_text(osys["min_branch"])),
        )

    if branch_entry is not None:
        if branch_entry["eol"] is not None and today >= eol_start(branch_entry["eol"]):
            message = "driver branch %s reached end of life in %s (%s branch)" % (
                branch_text(branch),
                branch_entry["eol"],
                branch_entry["kind"],
            )
            if allow_eol is False:
                res.violate("driver.eol", message + ": allow_eol_branch is false, choose a supported branch")
            else:
                res.warn(message + ": plan the move to a supported LTSB or production branch")
        elif branch_entry["kind"] == "feature":
            res.warn(
                "driver branch %s is a short-lived new feature branch: use an LTSB or production branch "
                "for production clusters" % branch_text(branch)
            )

    cuda = cuda_full = None
    if request.get("cuda") not in (None, "") and branch_entry is not None:
        cuda, cuda_full = resolve_cuda(
            matrix, request["cuda"], branch, version, bool(allow_compat), osys, res, gpu=gpu_entry
        )
    elif request.get("cuda") not in (None, ""):
        # No usable driver: still report a malformed or non-existent CUDA version.
        try:
            minor = "%d.%d" % parse_cuda(request["cuda"])[:2]
        except ValueError as exc:
            res.violate("cuda.malformed", "cuda: %s" % exc)
        else:
            if minor not in matrix.cuda_releases:
                res.violate(
                    "cuda.unknown",
                    "CUDA %s does not exist in the compatibility matrix: use one of %s"
                    % (minor, ", ".join(matrix.cuda_minors(parse_cuda(minor)[0]) or matrix.cuda_minors())),
                )

    if request.get("cuda") in (None, "") and request.get("nccl") not in (None, ""):
        res.violate(
            "nccl.needs_cuda",
            "nccl is set but cuda is not: NCCL packages are built for one CUDA, so the host needs cuda too; "
            "leave nccl out when the images carry CUDA and NCCL (name their CUDA in image_cuda)",
        )
        nccl = None
    else:
        nccl = resolve_nccl(matrix, request.get("nccl"), cuda, res) if cuda or request.get("nccl") else None
    allow_forward_compat = as_bool(request.get("allow_forward_compat", False), "allow_forward_compat", res)
    images, image_floors = image_cuda.check(
        matrix,
        request.get("image_cuda"),
        branch if branch_entry else None,
        version if branch_entry else None,
        gpu_entry,
        bool(allow_forward_compat),
        res,
    )
    dcgm = resolve_dcgm(matrix, request.get("dcgm"), branch if branch_entry else None, res, gpu=gpu_entry)
    exporter = dcgm_exporter.resolve(matrix.dcgm, request.get("dcgm_exporter"), dcgm, res)
    toolkit = container_toolkit.resolve(matrix.container_toolkit, request.get("container_toolkit"), version, res)
    kernel_modules = resolve_kernel_modules(gpu_entry, request.get("kernel_modules"), branch, res)
    if branch_entry is not None:
        check_published(matrix, osys, branch, kernel_modules, res)

    if nvswitch is None:
        has_nvswitch = bool(gpu_entry["nvswitch"]) if gpu_entry else False
    else:
        has_nvswitch = as_bool(nvswitch, "nvswitch", res)
    fabricmanager = resolve_fabricmanager(request.get("fabricmanager"), bool(has_nvswitch), gpu_entry, res)

    if res.violations:
        return None, res

    values = {
        "branch": str(branch),
        "driver": version,
        "os_major": osys["version"].split(".")[0],
        "cuda": cuda or "",
        "cuda_dashed": cuda_dashed(cuda) if cuda else "",
        "cuda_full": cuda_full or "",
        "nccl": nccl or "",
        "dcgm": dcgm["version"] if dcgm else "",
        "dcgm_cuda_major": str(dcgm["cuda_major"]) if dcgm else "",
        "dcgm_exporter": exporter["version"] if exporter else "",
        "container_toolkit": toolkit["version"] if toolkit else "",
    }
    packages = []
    pins = []
    driver_rule = add_component(matrix, "driver", "driver", osys, branch, kernel_modules, values, packages, pins, res)
    imex = bool(gpu_entry.get("imex", False))
    if fabricmanager:
        add_component(
            matrix, "fabricmanager", "fabricmanager", osys, branch, kernel_modules, values, packages, pins, res
        )
        if gpu_entry.get("nvlink5"):
            if gpu_entry.get("host_arch", "x86_64") == "arm64":
                res.warn(
                    "%s hosts are arm64: NVIDIA builds no libnvsdm for arm64, so none is installed" % gpu_entry["key"]
                )
            else:
                add_component(
                    matrix, "nvsdm", "fabricmanager", osys, branch, kernel_modules, values, packages, pins, res
                )
            res.warn(
                "%s is an NVLink5 system: it also needs nvlsm (NVLink subnet manager), whose version is not tied to "
                "the driver and is not in the compatibility matrix" % gpu_entry["key"]
            )
    if imex:
        add_component(matrix, "imex", "imex", osys, branch, kernel_modules, values, packages, pins, res)
    if cuda:
        add_component(matrix, "cuda", "cuda", osys, branch, kernel_modules, values, packages, pins, res)
    if nccl:
        add_component(matrix, "nccl", "nccl", osys, branch, kernel_modules, values, packages, pins, res)
    if dcgm:
        component = "dcgm%d" % dcgm["major"]
        rule = add_component(matrix, component, "dcgm", osys, branch, kernel_modules, values, packages, pins, res)
        if rule is not None:
            dcgm = {
                "major": dcgm["major"],
                "version": dcgm["version"],
                "package": fill(rule["packages"][-1]["name"], values),
                "cuda_major": dcgm["cuda_major"],
            }
            if dcgm["major"] == 4:
                res.warn("DCGM 4 replaces the legacy datacenter-gpu-manager (DCGM 3) package: remove it first")
    if exporter:
        label = dcgm_exporter.COMPONENT
        add_component(matrix, label, label, osys, branch, kernel_modules, values, packages, pins, res)
    if toolkit:
        add_component(
            matrix, "container_toolkit", "container_toolkit", osys, branch, kernel_modules, values, packages, pins, res
        )
    if res.violations:
        return None, res

    result = {
        "driver_branch": str(branch),
        "driver_version": version,
        "driver_request": driver_request(
            matrix, request["driver"], branch, gpu_entry, cuda, cuda_full, image_floors=image_floors
        ),
        "driver_kind": branch_entry["kind"],
        "driver_eol": branch_entry["eol"],
        "kernel_modules": kernel_modules,
        "cuda_version": cuda,
        "cuda_toolkit_version": cuda_full,
        "nccl_version": nccl,
        "image_cuda": images,
        "dcgm": dcgm,
        "dcgm_exporter": exporter,
        "container_toolkit": toolkit,
        "fabricmanager": bool(fabricmanager),
        "nvswitch": bool(has_nvswitch),
        "imex": imex,
        "gpu": {"key": gpu_entry["key"], "architecture": gpu_entry["architecture"]},
        "os_id": osys["id"],
        "os_family": osys["family"],
        "repo_dist": osys["repo_dist"],
        "package_manager": osys["package_manager"],
        "dnf_module": fill(driver_rule["dnf_module"], values) if driver_rule.get("dnf_module") else None,
        "packages": packages,
        "pins": pins,
        "warnings": res.warnings,
    }
    return result, res


def resolve(request, os, os_version, gpu, nvswitch=None, matrix=None, today=None):
    """Resolve a stack request for one host; raise :class:`StackViolations` listing every problem.

    ``request`` is the operator's ``gpuops_stack`` mapping; ``os`` / ``os_version``
    are Ansible's ``distribution`` / ``distribution_version``; ``gpu`` a short key or
    nvidia-smi product name; ``nvswitch`` overrides the GPU model's default when not None.
    """
    result, res = _resolve(request, os, os_version, gpu, nvswitch=nvswitch, matrix=matrix, today=today)
    if res.violations:
        raise StackViolations(res.violations)
    return result


def violations(request, os, os_version, gpu, nvswitch=None, matrix=None, today=None):
    """Every ``{rule, message}`` that keeps the request from resolving; empty when it is valid."""
    _result, res = _resolve(request, os, os_version, gpu, nvswitch=nvswitch, matrix=matrix, today=today)
    return res.violations
