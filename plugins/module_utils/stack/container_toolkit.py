# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA Container Toolkit as a stack component: which release a request resolves to.

``gpuops_stack.container_toolkit`` takes:

- ``auto``: the newest release of the matrix, installed on a node where a container runtime
  (containerd, Docker, CRI-O or enroot, :data:`RUNTIME_BINARIES`) is present; a node without one gets no toolkit.
- ``true``: the newest release, on every node; ``false`` (the default, :data:`DEFAULT`): no toolkit.
- a release (``"1.18.2"``): that release, on every node.

The four packages (nvidia-container-toolkit, -base, libnvidia-container-tools, libnvidia-container1) move at one
version: since 1.18.0 nvidia-container-toolkit depends on the other two at exactly its own version (NVIDIA/
nvidia-container-toolkit packaging/debian/control, packaging/rpm/SPECS/nvidia-container-toolkit.spec), so the
matrix lists releases from 1.18.0 (``container_toolkit:``) and one packaging rule pins the four.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import (
    compare_versions,
    parse_driver,
)

# The keys of a matrix entry in ``container_toolkit:`` (required, optional).
RELEASE_KEYS = ("version", "source")
OPTIONAL_KEYS = ("min_driver", "min_driver_source")
AUTO = "auto"
# Unset means no toolkit until the nvidia_stack role configures the runtimes for it (docs/container-toolkit.md).
DEFAULT = "false"
# Where the nvidia_stack role looks for a container runtime (gpu_stack_facts, option container_toolkit_auto):
# the binaries Debian/Ubuntu (containerd, docker.io: /usr/sbin/dockerd, cri-o) and Docker's/NVIDIA's packages
# (containerd.io, docker-ce: /usr/bin/dockerd, enroot) install.
RUNTIME_BINARIES = {
    name: tuple("%s/%s" % (directory, binary) for directory in ("/usr/bin", "/usr/sbin", "/usr/local/bin"))
    for name, binary in (("containerd", "containerd"), ("docker", "dockerd"), ("crio", "crio"), ("enroot", "enroot"))
}
_RELEASE_RE = re.compile(r"\d+\.\d+\.\d+", re.ASCII)
_TRUE = ("true", "yes", "on")
_FALSE = ("false", "no", "off")


def release_problems(entry):
    """What is wrong with one ``container_toolkit:`` entry of the matrix (its keys are checked by the caller)."""
    problems = []
    if not (isinstance(entry.get("version"), str) and _RELEASE_RE.fullmatch(entry["version"])):
        problems.append(
            'version must be a quoted release MAJOR.MINOR.PATCH such as "1.18.2", got %r' % (entry.get("version"),)
        )
    if "min_driver" in entry:
        try:
            if len(parse_driver(entry["min_driver"])) < 2:
                raise ValueError("a driver release, not a branch")
        except ValueError as exc:
            problems.append("min_driver %r: %s" % (entry["min_driver"], exc))
    return problems


def present_runtimes(exists):
    """The container runtimes present on a node, ``exists`` telling whether a path exists (os.path.exists)."""
    return sorted(name for name, paths in RUNTIME_BINARIES.items() if any(exists(path) for path in paths))


def resolve(releases, value, driver_version, res):
    """``{version, mode}`` for the request's ``container_toolkit`` value, or None (no toolkit or a violation).

    ``releases``: the matrix's ``container_toolkit`` entries, oldest first; ``driver_version``: the resolved
    driver (branch or release text), checked against a release's ``min_driver``; ``res`` collects violations.
    ``mode`` is ``auto`` (only where a container runtime is present) or ``always``.
    """
    if value is None or value == "":
        value = DEFAULT
    text = ("true" if value else "false") if isinstance(value, bool) else str(value).strip().lower()
    if text in _FALSE:
        return None
    if not releases:
        if text == AUTO:
            return None
        res.violate(
            "container_toolkit.unknown",
            "the compatibility matrix lists no NVIDIA Container Toolkit release: add one to container_toolkit "
            "in matrix/nvidia_stack.yml, or set container_toolkit: false",
        )
        return None
    known = [entry["version"] for entry in releases]
    if text in _TRUE or text == AUTO:
        chosen = releases[-1]
    else:
        if not _RELEASE_RE.fullmatch(text):
            res.violate(
                "container_toolkit.malformed",
                "container_toolkit must be auto, true, false or a release such as %r, got %r" % (known[-1], value),
            )
            return None
        chosen = next((entry for entry in releases if entry["version"] == text), None)
        if chosen is None:
            res.violate(
                "container_toolkit.unknown",
                "NVIDIA Container Toolkit %s is not in the compatibility matrix: use one of %s (releases before "
                "1.18.0 are not listed: their packages do not move together)" % (text, ", ".join(known)),
            )
            return None
    minimum = chosen.get("min_driver")
    exact_driver = bool(driver_version) and len(parse_driver(driver_version)) > 1
    if minimum and exact_driver and compare_versions(driver_version, minimum) < 0:
        res.violate(
            "container_toolkit.min_driver",
            "NVIDIA Container Toolkit %s needs driver %s or newer, the stack has %s: raise driver or choose "
            "an older container_toolkit" % (chosen["version"], minimum, driver_version),
        )
        return None
    return {"version": chosen["version"], "mode": AUTO if text == AUTO else "always"}


def for_node(packages, pins, mode, runtimes):
    """The requested packages and pins without the toolkit's when ``mode`` is auto and ``runtimes`` is empty."""
    if mode != AUTO or runtimes:
        return packages, pins
    return (
        [item for item in packages if item.get("component") != "container_toolkit"],
        [item for item in pins if item.get("component") != "container_toolkit"],
    )
