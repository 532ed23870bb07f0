# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The packages and pins of one component of a resolved stack, filled in from the matrix's packaging rule,
each checked against what the OS's package manager can take.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.stack import package_syntax
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.driver_resolution import branch_text


def fill(template, values):
    return template.format(**values)


def _syntax_violations(component, osys, names, version, res, glob=False):
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


def add_component(matrix, component, label, osys, branch, kernel_modules, values, packages, pins, res):
    rule = matrix.packaging_rule(component, osys["flavor"], branch, kernel_modules)
    if rule is None:
        res.violate(
            "matrix.no_packaging",
            "the compatibility matrix has no %s packaging for %s %s with %s kernel modules: add a packaging rule "
            "to matrix/nvidia_stack.yml" % (component, osys["id"], branch_text(branch), kernel_modules),
        )
        return None
    for package in rule["packages"]:
        name = fill(package["name"], values)
        version = fill(package["version"], values)
        _syntax_violations(component, osys, [name], version, res)
        packages.append(
            {
                "component": label,
                "name": name,
                "version": version,
                "follows_driver": "{driver}" in package["version"],
            }
        )
    for pin in rule["pins"]:
        names = [fill(name, values) for name in pin["names"]]
        _syntax_violations(component, osys, names, fill(pin["version"], values), res, glob=True)
        pins.append(
            {
                "component": label,
                "names": [fill(name, values) for name in pin["names"]],
                "version": fill(pin["version"], values),
                "follows_driver": "{driver}" in pin["version"],
            }
        )
    return rule
