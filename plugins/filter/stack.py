# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over the NVIDIA stack compatibility matrix.

Documentation for each filter lives in the sidecar YAML next to this file
(resolve_stack.yml, stack_violations.yml, cuda_min_driver.yml, nvidia_version_compare.yml, apt_preferences.yml,
apt_install_argv.yml).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import (
    apt_install_argv as apt_install,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import (
    apt_pinning,
    package_index,
    pin_plan,
    stack_resolver,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.nvidia_version import version_matches
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import (
    MatrixError,
    matrix_at,
)

PREFIX = "gpuops.cluster."


def _host_arguments(name, os, os_version, gpu, nvswitch, matrix_path):
    missing = [arg for arg, value in (("os", os), ("os_version", os_version), ("gpu", gpu)) if value in (None, "")]
    if missing:
        raise AnsibleFilterError(
            "%s%s: missing argument(s) %s, for example os=ansible_facts.distribution, "
            "os_version=ansible_facts.distribution_version, gpu=gpuops_gpu" % (PREFIX, name, ", ".join(missing))
        )
    try:
        matrix = matrix_at(matrix_path)
    except MatrixError as exc:
        raise AnsibleFilterError("%s%s: %s" % (PREFIX, name, exc)) from exc
    return {"os": os, "os_version": str(os_version), "gpu": gpu, "nvswitch": nvswitch, "matrix": matrix}


def resolve_stack(request, os=None, os_version=None, gpu=None, nvswitch=None, matrix_path=None):
    """Resolve the stack request for one host, or fail listing every violation."""
    arguments = _host_arguments("resolve_stack", os, os_version, gpu, nvswitch, matrix_path)
    try:
        return stack_resolver.resolve(request, **arguments)
    except stack_resolver.StackViolations as exc:
        raise AnsibleFilterError("%sresolve_stack: %s" % (PREFIX, exc)) from exc


def stack_violations(request, os=None, os_version=None, gpu=None, nvswitch=None, matrix_path=None):
    """Every violation of the stack request for one host, as a list of {rule, message}; empty when valid."""
    arguments = _host_arguments("stack_violations", os, os_version, gpu, nvswitch, matrix_path)
    return stack_resolver.violations(request, **arguments)


def cuda_min_driver(cuda, matrix_path=None):
    """Minimum Linux driver for CUDA X.Y (its GA release) or X.Y.Z (that update)."""
    try:
        matrix = matrix_at(matrix_path)
        minimum = matrix.cuda_min_driver(cuda)
    except (MatrixError, ValueError) as exc:
        raise AnsibleFilterError("%scuda_min_driver: %s" % (PREFIX, exc)) from exc
    if minimum is None:
        raise AnsibleFilterError(
            "%scuda_min_driver: CUDA %s is not in the compatibility matrix: use one of %s"
            % (PREFIX, cuda, ", ".join(matrix.cuda_minors()))
        )
    return minimum


def nvidia_version_compare(left, operator, right):
    """``left <operator> right`` for driver, CUDA, NCCL and dpkg/rpm package version strings."""
    try:
        return version_matches(left, operator, right)
    except ValueError as exc:
        raise AnsibleFilterError("%snvidia_version_compare: %s" % (PREFIX, exc)) from exc


def stack_at_release(resolved, index):
    """The resolved stack at the driver release a node's index read chose (``gpu_stack.index``).

    A branch request becomes an exact one: ``driver_version`` and ``driver_request.exact`` name the release,
    so every later read, the gate, the node's stack fact and a rollback to it mean that release, not the
    matrix's newest. Unchanged when the read chose no release.
    """
    if not isinstance(resolved, dict):
        raise AnsibleFilterError("gpuops.cluster.stack_at_release: expected a resolved stack, got %r" % (resolved,))
    release = (index or {}).get("driver_version")
    if not release:
        return resolved
    request = dict(resolved.get("driver_request") or {}, exact=release)
    return dict(resolved, driver_version=release, driver_request=request)


def stack_index_problems(hosts, hostvars, registered):
    """Index problems of every host in ``hosts`` whose read is registered as ``registered`` in ``hostvars``."""
    reads = {}
    for host in hosts:
        result = (hostvars.get(host) or {}).get(registered) or {}
        index = ((result.get("ansible_facts") or {}).get("gpu_stack") or {}).get("index")
        if index is not None:
            reads[host] = index
    return package_index.fleet_problems(reads)


def apt_preferences(index, priority=apt_pinning.MIN_PRIORITY):
    """The apt preferences pinning the exact versions a node's index read chose (``gpu_stack.index``), as the role
    writes them, for an apt run that must resolve the target's dependencies before the pins move (pre-staging)."""
    try:
        pins, _installed = pin_plan.request_pins("apt", (index or {}).get("pins"), (index or {}).get("packages"))
        return apt_pinning.render_preferences(pins, int(priority))
    except (apt_pinning.PinningError, pin_plan.PlanError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpuops.cluster.apt_preferences: %s" % exc) from exc


def apt_install_argv(specs, action, install_recommends=False, preferences_parts=None, also=(), remove=()):
    """The pin-free ``apt-get install`` argument list (check mode's simulation, pre-staging's download)."""
    try:
        return apt_install.apt_install_argv(
            specs or [],
            action,
            bool(install_recommends),
            preferences_parts or apt_install.NO_PREFERENCES,
            also or [],
            remove or [],
        )
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("%sapt_install_argv: %s" % (PREFIX, exc)) from exc


class FilterModule:
    """gpuops.cluster stack filters."""

    def filters(self):
        return {
            "resolve_stack": resolve_stack,
            "stack_violations": stack_violations,
            "cuda_min_driver": cuda_min_driver,
            "nvidia_version_compare": nvidia_version_compare,
            "stack_index_problems": stack_index_problems,
            "stack_at_release": stack_at_release,
            "apt_preferences": apt_preferences,
            "apt_install_argv": apt_install_argv,
        }
