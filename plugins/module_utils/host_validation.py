# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the validation play finds wrong with one host, before any host is changed.

One host's findings are every problem the operator must fix, each a sentence that
names the variable and what to set:

* variable names: a managed-prefix name that no registry or argument spec knows
  (``variable_registry``);
* variable values: type, choices, range and format (``variable_values``);
* with the ``stack`` check: the host's distribution could be read, ``gpuops_stack``
  and ``gpuops_gpu`` are set, the matrix loads, and the stack resolves;
* with the ``upgrade`` check: the rolling upgrade's settings (``upgrade_settings``),
  and the rollback target ``gpuops_upgrade_previous_stack`` resolves for the host;
* whenever ``gpuops_mig`` or ``gpuops_mig_config`` is set: the MIG layout fits the host's
  GPU model (``mig.mig_layout``, against ``matrix/mig_profiles.yml``);
* whenever ``gpuops_mps`` is set: its settings, and no MPS on a GPU the MIG layout enables MIG on
  (``mps.mps_settings``).

A check that cannot run (no matrix, no GPU model) becomes a problem of its own, so
one host's missing value never hides another host's problems.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils import variable_registry, variable_values
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_layout, mig_profiles
from ansible_collections.gpuops.cluster.plugins.module_utils.mps import mps_settings
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import stack_resolver
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import (
    MatrixError,
    matrix_at,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import upgrade_settings

CHECKS = ("stack", "upgrade")
UPGRADE_PREFIX = "gpuops_upgrade_"


def _stack(values, os_name, os_version, read_error, checks, today):
    """``(problems, warnings, resolved)`` of the stack request and, for an upgrade, its rollback target."""
    if read_error:
        return (
            [
                "its distribution could not be read (%s): fix the connection to the host, or name it in the "
                "inventory with gpuops_os and gpuops_os_version" % read_error
            ],
            [],
            None,
        )
    missing = []
    if values.get("gpuops_stack") is None:
        missing.append(
            'gpuops_stack is not set: set the NVIDIA stack for this host, e.g. gpuops_stack: {driver: "580", '
            'cuda: "13.0"} in group_vars (docs/compatibility-matrix.md)'
        )
    if values.get("gpuops_gpu") in (None, ""):
        missing.append(
            "gpuops_gpu is not set: set the host's GPU model, a short key of the matrix such as h100-sxm "
            "or the product name nvidia-smi prints"
        )
    if os_name in (None, "") or os_version in (None, ""):
        missing.append("its distribution is unknown: set gpuops_os and gpuops_os_version")
    if missing:
        return missing, [], None
    try:
        matrix = matrix_at(values.get("gpuops_matrix_path"))
    except MatrixError as exc:
        return ["gpuops_matrix_path: %s" % " ".join(line.strip() for line in str(exc).splitlines())], [], None
    host = {
        "os": os_name,
        "os_version": str(os_version),
        "gpu": values["gpuops_gpu"],
        "nvswitch": values.get("gpuops_nvswitch"),
        "matrix": matrix,
        "today": today,
    }
    problems, warnings, resolved = [], [], None
    try:
        resolved = stack_resolver.resolve(values["gpuops_stack"], **host)
        warnings = list(resolved["warnings"])
    except stack_resolver.StackViolations as exc:
        problems.extend(violation["message"] for violation in exc.violations)
    previous = values.get("gpuops_upgrade_previous_stack")
    if "upgrade" in checks and previous is not None:
        problems.extend(
            "gpuops_upgrade_previous_stack (the rollback target) does not resolve: %s" % violation["message"]
            for violation in stack_resolver.violations(previous, **host)
        )
    return problems, warnings, resolved


def _mig(values, checks):
    """Problems of the declared MIG layout (``gpuops_mig``/``gpuops_mig_config``) for the host's GPU model."""
    spec, config = values.get("gpuops_mig"), values.get("gpuops_mig_config")
    if spec is None and config is None:
        return []
    if spec is not None and not isinstance(spec, dict):
        return []  # variable_values names the wrong type
    try:
        matrix = matrix_at(values.get("gpuops_matrix_path"))
        profiles = mig_profiles.default_profiles()
    except (MatrixError, mig_profiles.MigProfilesError) as exc:
        return ["gpuops_mig cannot be checked: %s" % " ".join(line.strip() for line in str(exc).splitlines())]
    gpu = values.get("gpuops_gpu")
    return mig_layout.problems(spec, config, gpu, matrix, profiles, report_unknown_gpu="stack" not in checks)


def _model_device_ids(values):
    """The PCI device ids of the host's GPU model (``0x233010de``), or None where they cannot be known."""
    try:
        entry = matrix_at(values.get("gpuops_matrix_path")).gpu(values.get("gpuops_gpu"))
        if entry is None:
            return None
        chosen = mig_profiles.default_profiles().model(entry["key"], product=values["gpuops_gpu"]).get("set")
    except (MatrixError, mig_profiles.MigProfilesError, TypeError, ValueError):
        return None
    return chosen["device_ids"] if chosen else None


def _mps(values):
    """Problems of the declared MPS (``gpuops_mps``), the MIG layout the host declares included."""
    spec = values.get("gpuops_mps")
    if spec is None or not isinstance(spec, dict):
        return []  # variable_values names the wrong type
    mig_spec, mig_config = values.get("gpuops_mig"), values.get("gpuops_mig_config")
    device_ids = _model_device_ids(values) if mig_spec is not None else None
    return mps_settings.problems(spec, values.get("gpuops_upgrade_drain"), mig_spec, mig_config, device_ids)


def findings(
    values: dict,
    names=(),
    checks=(),
    os_name=None,
    os_version=None,
    read_error=None,
    unreadable=None,
    run_values=None,
    groups=None,
    fleet=(),
    known=None,
    specs=None,
    today=None,
) -> dict:
    """Return ``{problems, warnings, resolved}`` for one host.

    ``values`` holds the host's values of the collection's variables (plain data), ``names``
    every variable name the host defines (for typos), ``checks`` a subset of :data:`CHECKS`,
    ``os_name``/``os_version`` its distribution, ``read_error`` why it could not be read,
    ``unreadable`` ``{name: why}`` for values that could not be templated, ``run_values`` the
    controller's values (run settings of the upgrade), ``groups`` the inventory's groups
    and ``fleet`` the hosts of this run. ``known`` and ``specs`` default to the shipped registry.
    """
    unknown_checks = [check for check in checks if check not in CHECKS]
    if unknown_checks:
        raise ValueError("unknown check(s) %s: use %s" % (", ".join(unknown_checks), ", ".join(CHECKS)))
    known = known if known is not None else variable_registry.load_known_variables()
    specs = specs if specs is not None else variable_registry.load_specs()
    problems = [variable_registry.describe(typo) for typo in variable_registry.unknown_variables(names, known)]
    problems.extend(
        "%s cannot be read: %s; fix its value or the variables it refers to" % (name, why)
        for name, why in sorted((unreadable or {}).items())
    )
    problems.extend(variable_values.problems(values, specs))
    problems.extend(_mig(values, checks))
    problems.extend(_mps(values))
    warnings, resolved = [], None
    if "stack" in checks:
        stack_problems, warnings, resolved = _stack(values, os_name, os_version, read_error, checks, today)
        problems.extend(stack_problems)
    if "upgrade" in checks:
        settings = {
            name[len(UPGRADE_PREFIX) :]: value for name, value in values.items() if name.startswith(UPGRADE_PREFIX)
        }
        run_settings = {name: (run_values or {}).get(UPGRADE_PREFIX + name) for name in upgrade_settings.RUN_SETTINGS}
        inventory_hosts = sorted(set().union(*(groups or {}).values())) if groups else []
        problems.extend(
            upgrade_settings.problems(settings, run_settings, inventory_hosts, groups=groups or {}, fleet=fleet)
        )
    return {"problems": problems, "warnings": warnings, "resolved": resolved}
