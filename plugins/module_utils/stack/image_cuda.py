# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Can the host's driver run the CUDA its container images and wheels are built for?

Sites that ship CUDA and NCCL inside images (enroot, pyxis, Kubernetes) install only the driver on
the host; the stack request then names the images' CUDA in ``image_cuda`` (``["12.8", "13.0"]``, or
PyTorch's wheel tags ``cu128``, ``cu130``). For each, NVIDIA's rules, in order
(docs/compatibility-matrix.md, "CUDA in the images"):

1. the driver is at or above that CUDA's minimum driver (the release notes table): it runs;
2. else the driver is at or above the major's minor version compatibility floor
   (``cuda.minor_version_compat``: 12.x on 525.60.13, 13.x on R580): it runs, with a warning
   (no PTX JIT of PTX newer than the driver, some newer APIs return an error);
3. else only the forward-compatibility package ``cuda-compat-<major>-<minor>`` in the image runs it,
   which NVIDIA supports on data center GPUs (``gpus[].forward_compat``) and the operator must ask for
   (``allow_forward_compat: true``); otherwise it is refused, naming the driver it needs.

A CUDA major newer than the GPU architecture's ``cuda_major_max`` (CUDA 13 on Volta) is refused
whatever the driver: no driver or compatibility package brings a dropped architecture back.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import (
    compare_versions,
    cuda_dashed,
    driver_branch,
    parse_cuda,
    parse_driver,
)

# PyTorch's wheel and image tags: cu118, cu126, cu128, cu130 (the last digit is the minor).
_WHEEL_TAG_RE = re.compile(r"^cu(\d{1,2})(\d)$", re.IGNORECASE)

RUNS_BY_DRIVER = "driver"
RUNS_BY_MINOR_VERSION_COMPAT = "minor_version_compat"
RUNS_BY_FORWARD_COMPAT = "forward_compat"


def parse_image_cuda(value):
    """``"12.8"``, ``"12.8.1"`` or a wheel tag ``"cu128"`` -> the CUDA version text (``"12.8"``, ``"12.8.1"``).

    Raises ValueError with what to write instead.
    """
    if isinstance(value, str):
        match = _WHEEL_TAG_RE.match(value.strip())
        if match:
            return "%d.%d" % (int(match.group(1)), int(match.group(2)))
        if value.strip().lower().startswith("cu"):
            raise ValueError(
                'image_cuda %r is not a CUDA wheel tag: write cu<major><minor> such as "cu128" (CUDA 12.8) '
                'or the version itself such as "12.8"' % value.strip()
            )
    try:
        parse_cuda(value)
    except ValueError as exc:
        raise ValueError('image_cuda: %s, or a wheel tag such as "cu128"' % exc) from exc
    return value.strip()


def _branch_text(version):
    return "R%d" % driver_branch(version)


def _entries(value, res):
    """The request's ``image_cuda`` as a list (a single string is one image)."""
    if value in (None, ""):
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return list(value)
    res.violate(
        "image_cuda.malformed",
        'image_cuda must be a list of the CUDA versions the images are built for, such as ["12.8", "13.0"] '
        'or ["cu128", "cu130"], got %r' % (value,),
    )
    return []


def check(matrix, value, branch, version, gpu, allow_forward_compat, res):
    """Check every image CUDA of the request against the driver; return ``(images, floors)``.

    ``branch`` / ``version``: the driver branch (int) and the release the request resolves to on the
    controller (None when the driver did not resolve: only the images' own problems are reported).
    ``gpu``: the matrix's GPU entry or None. ``res`` collects violations and warnings.
    ``images``: ``[{version, requested, min_driver, runs_by}]``, one per image CUDA that passed.
    ``floors``: minimum drivers inside ``branch`` the node's release must meet (for ``driver_request``).
    """
    images, floors = [], []
    seen = set()
    for requested in _entries(value, res):
        try:
            text = parse_image_cuda(requested)
        except ValueError as exc:
            res.violate("image_cuda.malformed", str(exc))
            continue
        parts = parse_cuda(text)
        minor = "%d.%d" % parts[:2]
        named = "image CUDA %s%s" % (text, "" if str(requested).strip() == text else " (%s)" % str(requested).strip())
        if minor not in matrix.cuda_releases:
            res.violate(
                "image_cuda.unknown",
                "%s is not in the compatibility matrix: use one of %s, or add it to matrix/nvidia_stack.yml"
                % (named, ", ".join(matrix.cuda_minors(parts[0]) or matrix.cuda_minors())),
            )
            continue
        needed = matrix.cuda_min_driver(text)
        if needed is None:
            res.violate(
                "image_cuda.unknown",
                "%s is not a known update of CUDA %s: use one of %s"
                % (named, minor, ", ".join(u["version"] for u in matrix.cuda_releases[minor]["updates"])),
            )
            continue
        arch_max = matrix.cuda_major_max_for_gpu(gpu)
        if arch_max is not None and parts[0] > arch_max:
            newest = matrix.cuda_minors(arch_max)
            res.violate(
                "image_cuda.gpu_architecture",
                "%s cannot run on %s (%s): CUDA %d.0 dropped %s GPUs, no driver or forward-compatibility package "
                "brings them back: build the image for CUDA %s or older"
                % (
                    named,
                    gpu["key"],
                    gpu["architecture"],
                    arch_max + 1,
                    gpu["architecture"],
                    newest[-1] if newest else "%d.x" % arch_max,
                ),
            )
            continue
        if text in seen or version is None:
            seen.add(text)
            continue
        seen.add(text)
        image = {"version": text, "requested": str(requested).strip(), "min_driver": needed}
        compat_floor = matrix.cuda_compat.get(parts[0])
        if compare_versions(version, needed) >= 0:
            image["runs_by"] = RUNS_BY_DRIVER
            if driver_branch(needed) == branch:
                floors.append(needed)
        elif compat_floor is not None and compare_versions(version, compat_floor) >= 0:
            image["runs_by"] = RUNS_BY_MINOR_VERSION_COMPAT
            if driver_branch(compat_floor) == branch and len(parse_driver(compat_floor)) > 1:
                floors.append(compat_floor)
            res.warn(
                "%s needs driver %s or newer (%s+) for all its features; driver %s (R%d) runs it through CUDA minor "
                "version compatibility: no JIT of PTX newer than the driver, and APIs that need a newer driver "
                "return an error: raise driver to %s or newer for full support"
                % (named, needed, _branch_text(needed), version, branch, _branch_text(needed))
            )
        elif allow_forward_compat and gpu is not None and matrix.forward_compat_for_gpu(gpu):
            image["runs_by"] = RUNS_BY_FORWARD_COMPAT
            res.warn(
                "%s needs driver %s or newer (%s+); driver %s (R%d) runs it only through the forward-compatibility "
                "package (allow_forward_compat): the image must carry cuda-compat-%s and load it (NVIDIA's NGC "
                "images do); the host does not install it"
                % (named, needed, _branch_text(needed), version, branch, cuda_dashed(minor))
            )
        else:
            res.violate(
                "image_cuda.min_driver",
                "%s needs driver %s or newer (%s+)%s; the request resolves to R%d (%s): raise driver to %s or "
                "newer, build the image for %s%s"
                % (
                    named,
                    needed,
                    _branch_text(needed),
                    ", or %s with minor version compatibility" % _floor_text(compat_floor)
                    if compat_floor is not None and driver_branch(compat_floor) < driver_branch(needed)
                    else "",
                    branch,
                    version,
                    _branch_text(needed),
                    _older_cuda_text(matrix, version),
                    _forward_compat_hint(matrix, gpu, minor, allow_forward_compat),
                ),
            )
            continue
        images.append(image)
    return images, floors


def _older_cuda_text(matrix, version):
    """``CUDA 12.8 or older``: the newest CUDA the driver runs at its full minimum, for messages."""
    runs = [minor for minor in matrix.cuda_minors() if compare_versions(version, matrix.cuda_min_driver(minor)) >= 0]
    return "CUDA %s or older" % runs[-1] if runs else "an older CUDA"


def _floor_text(floor):
    return "%s+" % _branch_text(floor) if len(parse_driver(floor)) == 1 else "%s or newer" % floor


def _forward_compat_hint(matrix, gpu, minor, allow_forward_compat):
    package = "cuda-compat-%s" % cuda_dashed(minor)
    if gpu is None:
        return ""
    if not matrix.forward_compat_for_gpu(gpu):
        return (
            "; the forward-compatibility package (%s) is not an option: NVIDIA supports it on data center GPUs "
            "only, and the matrix does not mark %s as one (gpus[].forward_compat)" % (package, gpu["key"])
        )
    if allow_forward_compat:
        return ""
    return ", or set allow_forward_compat: true if the image carries %s (forward compatibility, data center GPUs)" % (
        package
    )
