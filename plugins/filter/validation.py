"""Turn the validation play's per-host findings into one report."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def validation_report(findings):
    """Return ``{failed, hosts_failed, lines, text}`` from ``{host: {problems: [str], warnings: [str]}}``.

    Every problem of every host is listed, hosts in name order, so one run
    shows the operator everything to fix.
    """
    if not isinstance(findings, dict):
        kind = type(findings).__name__
        raise AnsibleFilterError(
            f"gpuops.cluster.validation_report: expected a mapping of host to findings, got {kind}"
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
        return {"validation_report": validation_report}
