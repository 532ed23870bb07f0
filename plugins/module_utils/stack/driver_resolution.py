# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver of a stack request: the branch and release, the GPU's supported branches, the kernel modules'
flavour, whether NVIDIA publishes it, Fabric Manager, and what the node's package index must hold
(:func:`driver_request`). Each problem is a violation of the resolution (:mod:`stack_resolver`).
"""

from __future__ import annotations

import datetime

from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import (
    compare_versions,
    driver_branch,
    parse_driver,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_request import as_bool

KERNEL_MODULE_CHOICES = ("auto", "open", "proprietary")
# NVIDIA made the open kernel modules the default in R560 (open_modules_transition source).
OPEN_DEFAULT_FROM_BRANCH = 560


def branch_text(number):
    return "R%d" % number


def eol_start(eol):
    year, month = eol.split("-")
    return datetime.date(int(year), int(month), 1)


def resolve_driver(matrix, text, res, allow_unknown=False):
    """Return (branch_number, exact_version) or (None, None)."""
    try:
        parts = parse_driver(text)
    except ValueError as exc:
        res.violate("driver.malformed", "driver: %s" % exc)
        return None, None
    branch = parts[0]
    entry = matrix.branch(branch)
    known = sorted(matrix.branches)
    if entry is None:
        res.violate(
            "driver.unknown_branch",
            "driver branch %s is not in the compatibility matrix: use one of %s, or add the branch to "
            "matrix/nvidia_stack.yml" % (branch_text(branch), ", ".join(branch_text(b) for b in known)),
        )
        return None, None
    releases = matrix.releases(branch)
    if len(parts) == 1:
        if not releases:
            res.violate(
                "driver.no_release",
                'the matrix knows no release of %s yet: give an exact version such as driver: "%d.x.y", '
                "or add the release to matrix/nvidia_stack.yml" % (branch_text(branch), branch),
            )
            return branch, None
        return branch, releases[-1]
    version = str(text).strip().lstrip("Rr")
    if not any(compare_versions(version, known_release) == 0 for known_release in releases):
        message = "driver %s is not a release the compatibility matrix knows for %s (known: %s)" % (
            version,
            branch_text(branch),
            ", ".join(releases) or "none",
        )
        if allow_unknown:
            res.warn(message + "; it is used as given: add it to matrix/nvidia_stack.yml once verified")
        else:
            res.violate(
                "driver.unknown_release",
                message + ": use a known release or the branch alone, add the release to matrix/nvidia_stack.yml, "
                "or set allow_unknown_release: true in the stack request to install it as given",
            )
    return branch, version


def check_gpu_vs_driver(gpu, branch, version, res):
    if gpu["min_branch"] > branch:
        res.violate(
            "gpu.min_branch",
            "%s needs driver branch %s or newer, the request asks for %s: raise driver"
            % (gpu["key"], branch_text(gpu["min_branch"]), branch_text(branch)),
        )
    if gpu["last_branch"] is not None and branch > gpu["last_branch"]:
        res.violate(
            "gpu.last_branch",
            '%s (%s) is not supported after %s, the request asks for %s: use driver "%d" or older'
            % (
                gpu["key"],
                gpu["architecture"],
                branch_text(gpu["last_branch"]),
                branch_text(branch),
                gpu["last_branch"],
            ),
        )
    if (
        version is not None
        and gpu.get("min_driver")
        and branch == gpu["min_branch"]
        and compare_versions(version, gpu["min_driver"]) < 0
    ):
        res.violate(
            "gpu.min_driver",
            "%s needs driver %s or newer, the request resolves to %s: give a newer release"
            % (gpu["key"], gpu["min_driver"], version),
        )


def resolve_kernel_modules(gpu, request_value, branch, res):
    value = "auto" if request_value in (None, "") else str(request_value).strip().lower()
    if value not in KERNEL_MODULE_CHOICES:
        res.violate(
            "kernel_modules.malformed",
            "kernel_modules must be one of %s, got %r" % (", ".join(KERNEL_MODULE_CHOICES), request_value),
        )
        return None
    support = gpu["open_modules"] if gpu else None
    if support == "required":
        if value == "proprietary":
            res.violate(
                "kernel_modules.open_required",
                "%s (%s) requires the open kernel modules: set kernel_modules: open or auto"
                % (gpu["key"], gpu["architecture"]),
            )
            return None
        return "open"
    if support == "unsupported":
        if value == "open":
            res.violate(
                "kernel_modules.open_unsupported",
                "%s (%s) is not supported by the open kernel modules: set kernel_modules: proprietary or auto"
                % (gpu["key"], gpu["architecture"]),
            )
            return None
        return "proprietary"
    if value != "auto":
        return value
    if branch is None:
        return None
    return "open" if branch >= OPEN_DEFAULT_FROM_BRANCH else "proprietary"


def _published_branches(matrix, flavor, kernel_modules, below):
    """Branches below ``below`` whose driver packaging for ``kernel_modules`` NVIDIA publishes, newest first."""
    found = []
    for number in sorted(matrix.branches, reverse=True):
        rule = matrix.packaging_rule("driver", flavor, number, kernel_modules) if number < below else None
        if rule is not None and rule.get("published", True):
            found.append(number)
    return found


def check_published(matrix, osys, branch, kernel_modules, res):
    """A violation when NVIDIA publishes no driver packaging with these kernel modules for the branch on this OS
    (the matrix's rule says ``published: false``), naming the flavour that exists."""
    if osys is None or branch is None or kernel_modules not in ("open", "proprietary"):
        return
    rule = matrix.packaging_rule("driver", osys["flavor"], branch, kernel_modules)
    if rule is None or rule.get("published", True):
        return
    other = "open" if kernel_modules == "proprietary" else "proprietary"
    other_rule = matrix.packaging_rule("driver", osys["flavor"], branch, other)
    exists = other_rule is not None and other_rule.get("published", True)
    older = _published_branches(matrix, osys["flavor"], kernel_modules, branch)
    res.violate(
        "kernel_modules.not_published",
        "NVIDIA publishes no %s kernel modules for driver branch %s on %s%s: %s%s"
        % (
            kernel_modules,
            branch_text(branch),
            osys["id"],
            " (only the %s ones)" % other if exists else "",
            "set kernel_modules: %s or auto" % other if exists else "choose another branch",
            ', or driver: "%s" or older for the %s modules' % (older[0], kernel_modules) if older else "",
        ),
    )


def resolve_fabricmanager(request_value, nvswitch, gpu, res):
    value = "auto" if request_value in (None, "") else request_value
    if isinstance(value, str) and value.strip().lower() == "auto":
        return nvswitch
    wanted = as_bool(value, "fabricmanager (auto, true or false)", res)
    if wanted is None:
        return None
    if nvswitch and not wanted:
        res.violate(
            "fabricmanager.required",
            "this host has NVSwitch (%s): without Fabric Manager CUDA fails with error 802; set fabricmanager: auto"
            % (gpu["key"] if gpu else "nvswitch=true"),
        )
    if wanted and not nvswitch:
        res.violate(
            "fabricmanager.no_nvswitch",
            "fabricmanager: true on a host without NVSwitch: Fabric Manager does not start there; set "
            "fabricmanager: auto, or pass nvswitch=true if the host has NVSwitch",
        )
    return wanted


def driver_request(matrix, text, branch, gpu, cuda, cuda_full, image_floors=()):
    """What the node's package index must hold for the driver: the branch, the exact release when one was
    named, the oldest release the GPU, the host's CUDA update (none without CUDA on the host) and the images'
    CUDA (``image_floors``, minimums inside the branch) allow (``floor``), and the releases the matrix skips.

    The node picks the exact release (package_index.resolve): the newest its repository holds for which every
    companion exists, or the one it already runs.
    """
    exact = str(text).strip().lstrip("Rr") if len(parse_driver(text)) > 1 else None
    floors = []
    if gpu.get("min_driver") and driver_branch(gpu["min_driver"]) == branch:
        floors.append(gpu["min_driver"])
    if cuda is not None:
        update = next((u for u in matrix.cuda_releases[cuda]["updates"] if u["version"] == cuda_full), None)
        if update and driver_branch(update["min_driver"]) == branch:
            floors.append(update["min_driver"])
    floors.extend(image_floors)
    floor = None
    for value in floors:
        if floor is None or compare_versions(value, floor) > 0:
            floor = value
    return {
        "branch": str(branch),
        "exact": exact,
        "floor": floor,
        "skip": matrix.known_bad(branch),
        "upgrade": False,
    }
