# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DCGM of a stack request: the major and release, and the ``-cuda<N>`` package the driver branch and the
GPU take. Each problem is a violation of the resolution (:mod:`stack_resolver`).
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.stack.driver_resolution import branch_text
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import (
    parse_nccl,
)


def _dcgm_cuda_major(matrix, branch, gpu):
    """The ``-cuda<N>`` DCGM 4 package for this driver branch and GPU: the branch's CUDA major, lowered to the GPU
    architecture's ``dcgm_cuda_major_max`` (Volta on R580 takes ``-cuda12``). None without a usable branch."""
    entry = matrix.branch(branch) if branch is not None else None
    if entry is None:
        return None
    cuda_major = entry["cuda_major_max"]
    arch_max = matrix.dcgm_cuda_major_max_for_gpu(gpu)
    return min(cuda_major, arch_max) if arch_max is not None else cuda_major


def _dcgm_target(branch, cuda_major, gpu):
    """Words for what the DCGM package must be built for, for messages."""
    text = "CUDA %d drivers (%s" % (cuda_major, branch_text(branch))
    if gpu:
        text += " on %s" % gpu["architecture"]
    return text + ")"


def resolve_dcgm(matrix, text, branch, res, gpu=None):
    if text in (None, ""):
        return None
    text = str(text).strip()
    cuda_major = _dcgm_cuda_major(matrix, branch, gpu)
    if text.isdigit():
        major = int(text)
        releases = matrix.dcgm_releases(major)
        if not releases:
            res.violate("dcgm.unknown", 'DCGM %s is not in the compatibility matrix: use dcgm: "3" or "4"' % text)
            return None
        if cuda_major is None:
            return None
        fitting = [r for r in releases if cuda_major in r["cuda_majors"]]
        if not fitting:
            res.violate(
                "dcgm.cuda_major",
                'no DCGM %d release in the matrix has a package for %s: use dcgm: "4"'
                % (major, _dcgm_target(branch, cuda_major, gpu)),
            )
            return None
        chosen = fitting[-1]
    else:
        try:
            parse_nccl(text)
        except ValueError:
            res.violate(
                "dcgm.malformed",
                'dcgm must be a major ("4") or an exact release ("4.1.1"), got %r' % text,
            )
            return None
        found = [r for r in matrix.dcgm if r["version"] == text]
        if not found:
            res.violate(
                "dcgm.unknown",
                "DCGM %s is not in the compatibility matrix: use one of %s"
                % (text, ", ".join(r["version"] for r in matrix.dcgm)),
            )
            return None
        chosen = found[0]
        if cuda_major is None:
            return None
        if cuda_major not in chosen["cuda_majors"]:
            newer = [r["version"] for r in matrix.dcgm_releases(4) if cuda_major in r["cuda_majors"]]
            res.violate(
                "dcgm.cuda_major",
                "DCGM %s has no package for %s: use %s"
                % (
                    text,
                    _dcgm_target(branch, cuda_major, gpu),
                    'dcgm: "%s"' % newer[-1] if newer else "an older driver branch",
                ),
            )
            return None
    return {"major": chosen["major"], "version": chosen["version"], "cuda_major": cuda_major}
