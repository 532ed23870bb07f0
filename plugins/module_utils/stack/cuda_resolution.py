# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CUDA toolkit and NCCL of a stack request, against the driver branch, the GPU and the OS. Each problem is
a violation of the resolution (:mod:`stack_resolver`).
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.stack.driver_resolution import branch_text
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import (
    compare_versions,
    parse_cuda,
    parse_nccl,
)


def resolve_cuda(matrix, text, branch, version, allow_compat, osys, res, gpu=None):
    """Return (cuda_minor 'X.Y', cuda_full 'X.Y.Z') or (None, None).

    A CUDA major newer than the GPU architecture's ``cuda_major_max`` is refused whatever the driver
    (CUDA 13.0 dropped Maxwell, Pascal and Volta: no driver or compatibility package brings it back).
    """
    try:
        parts = parse_cuda(text)
    except ValueError as exc:
        res.violate("cuda.malformed", "cuda: %s" % exc)
        return None, None
    minor = "%d.%d" % parts[:2]
    entry = matrix.cuda_releases.get(minor)
    if entry is None:
        same_major = matrix.cuda_minors(parts[0])
        res.violate(
            "cuda.unknown",
            "CUDA %s does not exist in the compatibility matrix: use one of %s"
            % (minor, ", ".join(same_major or matrix.cuda_minors())),
        )
        return None, None
    arch_max = matrix.cuda_major_max_for_gpu(gpu)
    if arch_max is not None and parts[0] > arch_max:
        newest = matrix.cuda_minors(arch_max)
        res.violate(
            "cuda.gpu_architecture",
            'CUDA %d.0 dropped %s GPUs (%s), the request asks for CUDA %s: use cuda "%s" or older'
            % (arch_max + 1, gpu["architecture"], gpu["key"], minor, newest[-1] if newest else "%d.x" % arch_max),
        )
        return None, None
    updates = entry["updates"]
    if len(parts) == 3:
        chosen = [u for u in updates if parse_cuda(u["version"]) == parts]
        if not chosen:
            res.violate(
                "cuda.unknown",
                "CUDA %s is not a known update of CUDA %s: use one of %s"
                % (str(text).strip(), minor, ", ".join(u["version"] for u in updates)),
            )
            return None, None
        candidates = chosen
    else:
        candidates = updates
    if osys is not None and osys.get("min_cuda") and compare_versions(minor, osys["min_cuda"]) < 0:
        res.violate(
            "cuda.os",
            "NVIDIA's %s repository starts at CUDA %s, the request asks for %s: raise cuda"
            % (osys["repo_dist"], osys["min_cuda"], minor),
        )
    if version is None:
        return minor, candidates[-1]["version"]
    satisfied = [u for u in candidates if compare_versions(version, u["min_driver"]) >= 0]
    if satisfied:
        return minor, satisfied[-1]["version"]
    needed = candidates[0]["min_driver"]
    floor = matrix.cuda_compat.get(parts[0])
    if allow_compat and floor is not None and compare_versions(version, floor) >= 0:
        res.warn(
            "CUDA %s needs driver %s, driver %s runs it only through CUDA minor version compatibility "
            "(allow_minor_version_compat): PTX JIT of newer PTX and some APIs are unavailable"
            % (candidates[-1]["version"], candidates[-1]["min_driver"], version)
        )
        return minor, candidates[-1]["version"]
    branch_entry = matrix.branch(branch)
    if allow_compat and floor is not None:
        res.violate(
            "cuda.min_driver",
            "CUDA %d.x needs driver %s or newer even with minor version compatibility; driver %s (%s supports CUDA "
            "up to %d.x): raise driver or lower cuda"
            % (parts[0], floor, version, branch_text(branch), branch_entry["cuda_major_max"]),
        )
    else:
        hint = ""
        if floor is not None and compare_versions(version, floor) >= 0:
            hint = ", or set allow_minor_version_compat: true to run it on the %s floor %s" % (
                minor.split(".", maxsplit=1)[0] + ".x",
                floor,
            )
        res.violate(
            "cuda.min_driver",
            "CUDA %s needs driver %s or newer, the request resolves to driver %s: raise driver, lower cuda%s"
            % (candidates[0]["version"], needed, version, hint),
        )
    return None, None


def resolve_nccl(matrix, text, cuda, res):
    if text in (None, ""):
        if cuda is None:
            return None
        built = matrix.nccl_for_cuda(cuda)
        if not built:
            res.warn(
                "the compatibility matrix knows no NCCL build for CUDA %s: NCCL is left out; add one to "
                "matrix/nvidia_stack.yml or set nccl explicitly once it is there" % cuda
            )
            return None
        return built[-1]
    try:
        parse_nccl(text)
    except ValueError as exc:
        res.violate("nccl.malformed", "nccl: %s" % exc)
        return None
    version = str(text).strip()
    entry = matrix.nccl.get(version)
    if entry is None:
        res.violate(
            "nccl.unknown",
            "NCCL %s is not in the compatibility matrix: use one of %s" % (version, ", ".join(matrix.nccl)),
        )
        return None
    if cuda is not None and cuda not in entry["cuda"]:
        built = matrix.nccl_for_cuda(cuda)
        res.violate(
            "nccl.cuda_build",
            "NCCL %s is built for CUDA %s, not for CUDA %s: %s"
            % (
                version,
                ", ".join(entry["cuda"]),
                cuda,
                "use nccl %s or leave nccl unset" % " or ".join(built)
                if built
                else "no NCCL in the matrix is built for it",
            ),
        )
        return None
    return version
