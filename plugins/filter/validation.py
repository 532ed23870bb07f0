"""The validation play's filters: one host's findings, and the report of every host's.

Documentation for each filter lives in the sidecar YAML next to this file
(validation_findings.yml, validation_report.yml).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.module_utils import host_validation
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import upgrade_settings
from ansible_collections.gpuops.cluster.plugins.module_utils.variable_values import plain

PREFIX = "gpuops.cluster."


def validation_findings(
    host,
    checks=(),
    os=None,
    os_version=None,
    read=None,
    run=None,
    groups=None,
    fleet=(),
    forks=None,
    domains=None,
    this_host=None,
):
    """Every problem of one host: variable names and values, and the checks asked for (stack, upgrade).

    ``host`` is what the lookup gpuops.cluster.host_variables returns: ``{names, variables, unreadable}``.
    With the ``upgrade`` check, the run's own problems (``forks`` against the window, ``per_domain``
    against ``domains``, each host's gpuops_upgrade_domains) are listed once, under the first host of
    ``fleet`` by name (``this_host`` is the host these findings are for).
    """
    try:
        if not isinstance(host, dict) or "variables" not in host:
            raise TypeError("input must be lookup('gpuops.cluster.host_variables'): {names, variables, unreadable}")
        read = read or {}
        read_error = None
        if read.get("unreachable") or read.get("failed"):
            read_error = str(read.get("msg") or "unreachable").strip().splitlines()[0]
        run_values = {}
        for name in host_validation.upgrade_settings.RUN_SETTINGS:
            key = host_validation.UPGRADE_PREFIX + name
            if run is not None and key in run:
                run_values[key] = plain(run[key])
        found = host_validation.findings(
            dict(host["variables"]),
            names=list(host.get("names") or ()),
            checks=list(checks or ()),
            os_name=plain(os),
            os_version=plain(os_version),
            read_error=read_error,
            unreadable=dict(host.get("unreadable") or {}),
            run_values=run_values,
            groups={group: list(members) for group, members in (groups or {}).items()},
            fleet=list(fleet or ()),
        )
        if "upgrade" in (checks or ()) and fleet and this_host is not None and this_host == min(fleet):
            run = run or {}
            found["problems"].extend(
                upgrade_settings.run_problems(
                    plain(run.get(host_validation.UPGRADE_PREFIX + "max_unavailable")),
                    len(fleet),
                    forks=plain(forks),
                    per_domain=plain(run.get(host_validation.UPGRADE_PREFIX + "per_domain")),
                    domains_by_host=plain(domains or {}),
                )
            )
        return found
    except (OSError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("%svalidation_findings: %s" % (PREFIX, exc)) from exc


def validation_report(findings):
    """Return ``{failed, hosts_failed, lines, text}`` from ``{host: {problems: [str], warnings: [str]}}``.

    Every problem of every host is listed, hosts in name order, so one run
    shows the operator everything to fix.
    """
    if not isinstance(findings, dict):
        raise AnsibleFilterError(
            "gpuops.cluster.validation_report: expected a mapping of host to findings (as validation_findings returns)"
        )
    lines = []
    warnings = []
    hosts_failed = []
    for host in sorted(findings):
        entry = findings[host] or {}
        problems = list(entry.get("problems") or [])
        if problems:
            hosts_failed.append(host)
            lines.extend(f"{host}: {problem}" for problem in problems)
        warnings.extend(f"{host}: {warning}" for warning in entry.get("warnings") or [])
    if hosts_failed:
        header = (
            f"gpuops.cluster validation failed on {len(hosts_failed)} of {len(findings)} host(s);"
            " nothing was changed. Fix:"
        )
    else:
        header = f"gpuops.cluster validation passed on {len(findings)} host(s)."
    return {
        "failed": bool(hosts_failed),
        "hosts_failed": hosts_failed,
        "lines": lines,
        "warnings": warnings,
        "text": "\n".join([header, *(f"  - {line}" for line in lines)]),
    }


class FilterModule:
    """gpuops.cluster validation filters."""

    def filters(self):
        return {"validation_findings": validation_findings, "validation_report": validation_report}
