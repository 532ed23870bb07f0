# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Turn an operator's NVIDIA stack request into exact, pinned packages for one host.

:func:`resolve` returns the resolved stack or raises :class:`StackViolations`
listing every problem; :func:`violations` returns that list (empty when the
request is valid). Both are deterministic: same request, host and date, same
answer. The rules are described in docs/compatibility-matrix.md.
"""

from __future__ import annotations

import datetime
import difflib

from ansible_collections.gpuops.cluster.plugins.module_utils.stack import (
    container_toolkit,
    dcgm_exporter,
    image_cuda,
    package_syntax,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import (
    compare_versions,
    cuda_dashed,
    driver_branch,
    parse_cuda,
    parse_driver,
    parse_nccl,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import default_matrix

REQUEST_KEYS = (
    "driver",
    "cuda",
    "nccl",
    "dcgm",
    "dcgm_exporter",
    "kernel_modules",
    "fabricmanager",
    "allow_minor_version_compat",
    "allow_eol_branch",
    "allow_unknown_release",
    "image_cuda",
    "allow_forward_compat",
    "container_toolkit",
)
# CUDA and NCCL on the host are optional: sites that ship them in container images install the driver,
# Fabric Manager and DCGM only, and name the images' CUDA in image_cuda (image_cuda.py).
REQUIRED_KEYS = ("driver",)
KERNEL_MODULE_CHOICES = ("auto", "open", "proprietary")
# NVIDIA made the open kernel modules the default in R560 (open_modules_transition source).
OPEN_DEFAULT_FROM_BRANCH = 560


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


def _kind(value):
    """What an operator wrote, in YAML words (never a Python class name)."""
    if isinstance(value, str):
        return "the string %r" % str.__str__(value)
    if isinstance(value, (list, tuple)):
        return "a list"
    return "%r" % (value,) if isinstance(value, (bool, int, float)) else "a value of another kind"


def _branch_text(number):
    return "R%d" % number


def _as_bool(value, name, res):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return value.strip().lower() in ("true", "yes", "on", "1")
    res.violate("request.malformed", "%s must be true or false, got %r" % (name, value))
    return None


def _eol_start(eol):
    year, month = eol.split("-")
    return datetime.date(int(year), int(month), 1)


def _check_request(request, res):
    if request is None:
        request = {}
    if not isinstance(request, dict):
        res.violate(
            "request.malformed",
            'the stack request must be a mapping such as {driver: "550", cuda: "12.4"}, got %s' % _kind(request),
        )
        return None
    for key in sorted(request, key=str):
        if key not in REQUEST_KEYS:
            close = difflib.get_close_matches(str(key), REQUEST_KEYS, n=1)
            hint = ": did you mean '%s'?" % close[0] if close else ""
            res.violate(
                "request.unknown_key",
                "unknown key '%s' in the stack request%s (known keys: %s)" % (key, hint, ", ".join(REQUEST_KEYS)),
            )
    for key in REQUIRED_KEYS:
        if request.get(key) in (None, ""):
            res.violate(
                "request.missing_key",
                'the stack request needs \'%s\' (for example driver: "580", with cuda: "13.0" for the toolkit on '
                'the host, or image_cuda: ["12.8", "13.0"] for CUDA in container images)' % key,
            )
    return request


def _resolve_driver(matrix, text, res, allow_unknown=False):
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
            "matrix/nvidia_stack.yml" % (_branch_text(branch), ", ".join(_branch_text(b) for b in known)),
        )
        return None, None
    releases = matrix.releases(branch)
    if len(parts) == 1:
        if not releases:
            res.violate(
                "driver.no_release",
                'the matrix knows no release of %s yet: give an exact version such as driver: "%d.x.y", '
                "or add the release to matrix/nvidia_stack.yml" % (_branch_text(branch), branch),
            )
            return branch, None
        return branch, releases[-1]
    version = str(text).strip().lstrip("Rr")
    if not any(compare_versions(version, known_release) == 0 for known_release in releases):
        message = "driver %s is not a release the compatibility matrix knows for %s (known: %s)" % (
            version,
            _branch_text(branch),
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


def _check_gpu_vs_driver(gpu, branch, version, res):
    if gpu["min_branch"] > branch:
        res.violate(
            "gpu.min_branch",
            "%s needs driver branch %s or newer, the request asks for %s: raise driver"
            % (gpu["key"], _branch_text(gpu["min_branch"]), _branch_text(branch)),
        )
    if gpu["last_branch"] is not None and branch > gpu["last_branch"]:
        res.violate(
            "gpu.last_branch",
            '%s (%s) is not supported after %s, the request asks for %s: use driver "%d" or older'
            % (
                gpu["key"],
                gpu["architecture"],
                _branch_text(gpu["last_branch"]),
                _branch_text(branch),
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


def _resolve_cuda(matrix, text, branch, version, allow_compat, osys, res, gpu=None):
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
            % (parts[0], floor, version, _branch_text(branch), branch_entry["cuda_major_max"]),
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


def _resolve_nccl(matrix, text, cuda, res):
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
    text = "CUDA %d drivers (%s" % (cuda_major, _branch_text(branch))
    if gpu:
        text += " on %s" % gpu["architecture"]
    return text + ")"


def _resolve_dcgm(matrix, text, branch, res, gpu=None):
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


def _resolve_kernel_modules(gpu, request_value, branch, res):
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


def _check_published(matrix, osys, branch, kernel_modules, res):
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
            _branch_text(branch),
            osys["id"],
            " (only the %s ones)" % other if exists else "",
            "set kernel_modules: %s or auto" % other if exists else "choose another branch",
            ', or driver: "%s" or older for the %s modules' % (older[0], kernel_modules) if older else "",
        ),
    )


def _resolve_fabricmanager(request_value, nvswitch, gpu, res):
    value = "auto" if request_value in (None, "") else request_value
    if isinstance(value, str) and value.strip().lower() == "auto":
        return nvswitch
    wanted = _as_bool(value, "fabricmanager (auto, true or false)", res)
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


def _fill(template, values):
    return template.format(**values)


def _package_syntax(component, osys, names, version, res, glob=False):
    """A violation for each name or version, filled in from the matrix, that the OS's package manager cannot take."""
    manager = osys.get("package_manager")
    if manager not in (package_syntax.APT, package_syntax.DNF):
        return
    problems = [package_syntax.name_problem(name, manager, glob=glob) for name in names]
    problems.append(package_syntax.version_problem(version, manager, pattern=True))
    for problem in filter(None, problems):
        res.violate(
            "matrix.package_syntax",
            "the compatibility matrix's %s packaging for %s gives a package that %s cannot install: %s; fix the "
            "packaging rule in the matrix (gpuops_matrix_path, or matrix/nvidia_stack.yml)"
            % (component, osys["id"], manager, problem),
        )


def _add_component(matrix, component, label, osys, branch, kernel_modules, values, packages, pins, res):
    rule = matrix.packaging_rule(component, osys["flavor"], branch, kernel_modules)
    if rule is None:
        res.violate(
            "matrix.no_packaging",
            "the compatibility matrix has no %s packaging for %s %s with %s kernel modules: add a packaging rule "
            "to matrix/nvidia_stack.yml" % (component, osys["id"], _branch_text(branch), kernel_modules),
        )
        return None
    for package in rule["packages"]:
        name = _fill(package["name"], values)
        version = _fill(package["version"], values)
        _package_syntax(component, osys, [name], version, res)
        packages.append(
            {
                "component": label,
                "name": name,
                "version": version,
                "follows_driver": "{driver}" in package["version"],
            }
        )
    for pin in rule["pins"]:
        names = [_fill(name, values) for name in pin["names"]]
        _package_syntax(component, osys, names, _fill(pin["version"], values), res, glob=True)
        pins.append(
            {
                "component": label,
                "names": [_fill(name, values) for name in pin["names"]],
                "version": _fill(pin["version"], values),
                "follows_driver": "{driver}" in pin["version"],
            }
        )
    return rule


def _driver_request(matrix, text, branch, gpu, cuda, cuda_full, image_floors=()):
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


def _resolve(request, os, os_version, gpu, nvswitch=None, matrix=None, today=None):
    matrix = matrix if matrix is not None else default_matrix()
    today = today if today is not None else datetime.date.today()
    res = _Resolution()
    request = _check_request(request, res)
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

    allow_compat = _as_bool(request.get("allow_minor_version_compat", False), "allow_minor_version_compat", res)
    allow_eol = _as_bool(request.get("allow_eol_branch", True), "allow_eol_branch", res)
    allow_unknown = _as_bool(request.get("allow_unknown_release", False), "allow_unknown_release", res)

    branch = version = None
    if request.get("driver") not in (None, ""):
        branch, version = _resolve_driver(matrix, request["driver"], res, bool(allow_unknown))
    branch_entry = matrix.branch(branch) if branch is not None else None
    if gpu_entry is not None and branch_entry is not None:
        _check_gpu_vs_driver(gpu_entry, branch, version, res)
    if osys is not None and branch is not None and osys.get("min_branch") and branch < osys["min_branch"]:
        res.violate(
            "os.min_branch",
            "%s needs driver branch %s or newer: raise driver" % (osys["id"], _branch_text(osys["min_branch"])),
        )

    if branch_entry is not None:
        if branch_entry["eol"] is not None and today >= _eol_start(branch_entry["eol"]):
            message = "driver branch %s reached end of life in %s (%s branch)" % (
                _branch_text(branch),
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
                "for production clusters" % _branch_text(branch)
            )

    cuda = cuda_full = None
    if request.get("cuda") not in (None, "") and branch_entry is not None:
        cuda, cuda_full = _resolve_cuda(
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
        nccl = _resolve_nccl(matrix, request.get("nccl"), cuda, res) if cuda or request.get("nccl") else None
    allow_forward_compat = _as_bool(request.get("allow_forward_compat", False), "allow_forward_compat", res)
    images, image_floors = image_cuda.check(
        matrix,
        request.get("image_cuda"),
        branch if branch_entry else None,
        version if branch_entry else None,
        gpu_entry,
        bool(allow_forward_compat),
        res,
    )
    dcgm = _resolve_dcgm(matrix, request.get("dcgm"), branch if branch_entry else None, res, gpu=gpu_entry)
    exporter = dcgm_exporter.resolve(matrix.dcgm, request.get("dcgm_exporter"), dcgm, res)
    toolkit = container_toolkit.resolve(matrix.container_toolkit, request.get("container_toolkit"), version, res)
    kernel_modules = _resolve_kernel_modules(gpu_entry, request.get("kernel_modules"), branch, res)
    if branch_entry is not None:
        _check_published(matrix, osys, branch, kernel_modules, res)

    if nvswitch is None:
        has_nvswitch = bool(gpu_entry["nvswitch"]) if gpu_entry else False
    else:
        has_nvswitch = _as_bool(nvswitch, "nvswitch", res)
    fabricmanager = _resolve_fabricmanager(request.get("fabricmanager"), bool(has_nvswitch), gpu_entry, res)

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
    driver_rule = _add_component(matrix, "driver", "driver", osys, branch, kernel_modules, values, packages, pins, res)
    imex = bool(gpu_entry.get("imex", False))
    if fabricmanager:
        _add_component(
            matrix, "fabricmanager", "fabricmanager", osys, branch, kernel_modules, values, packages, pins, res
        )
        if gpu_entry.get("nvlink5"):
            if gpu_entry.get("host_arch", "x86_64") == "arm64":
                res.warn(
                    "%s hosts are arm64: NVIDIA builds no libnvsdm for arm64, so none is installed" % gpu_entry["key"]
                )
            else:
                _add_component(
                    matrix, "nvsdm", "fabricmanager", osys, branch, kernel_modules, values, packages, pins, res
                )
            res.warn(
                "%s is an NVLink5 system: it also needs nvlsm (NVLink subnet manager), whose version is not tied to "
                "the driver and is not in the compatibility matrix" % gpu_entry["key"]
            )
    if imex:
        _add_component(matrix, "imex", "imex", osys, branch, kernel_modules, values, packages, pins, res)
    if cuda:
        _add_component(matrix, "cuda", "cuda", osys, branch, kernel_modules, values, packages, pins, res)
    if nccl:
        _add_component(matrix, "nccl", "nccl", osys, branch, kernel_modules, values, packages, pins, res)
    if dcgm:
        component = "dcgm%d" % dcgm["major"]
        rule = _add_component(matrix, component, "dcgm", osys, branch, kernel_modules, values, packages, pins, res)
        if rule is not None:
            dcgm = {
                "major": dcgm["major"],
                "version": dcgm["version"],
                "package": _fill(rule["packages"][-1]["name"], values),
                "cuda_major": dcgm["cuda_major"],
            }
            if dcgm["major"] == 4:
                res.warn("DCGM 4 replaces the legacy datacenter-gpu-manager (DCGM 3) package: remove it first")
    if exporter:
        label = dcgm_exporter.COMPONENT
        _add_component(matrix, label, label, osys, branch, kernel_modules, values, packages, pins, res)
    if toolkit:
        _add_component(
            matrix, "container_toolkit", "container_toolkit", osys, branch, kernel_modules, values, packages, pins, res
        )
    if res.violations:
        return None, res

    result = {
        "driver_branch": str(branch),
        "driver_version": version,
        "driver_request": _driver_request(
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
        "dnf_module": _fill(driver_rule["dnf_module"], values) if driver_rule.get("dnf_module") else None,
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
