# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the mirror check (playbooks/mirror_check.yml) over module_utils/stack/mirror_check.py.

Documentation for each filter lives in the sidecar YAML next to this file
(mirror_repository_url.yml, mirror_check_plan.yml, mirror_check_report.yml).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpuops.cluster.plugins.module_utils.stack import mirror_check

PREFIX = "gpuops.cluster."
# The role's defaults are the one source of the repository's base URL and architecture, and of the OS
# repository settings a host does not set.
ROLE_DEFAULTS = Path(__file__).resolve().parents[2] / "roles" / "nvidia_stack" / "defaults" / "main.yml"
OS_REPOSITORIES_ENABLED = "nvidia_stack_os_repositories_enabled"
EPEL_RELEASE_URL = "nvidia_stack_epel_release_url"


def _role_default(name, filter_name="mirror_repository_url"):
    try:
        return (yaml.safe_load(ROLE_DEFAULTS.read_text(encoding="utf-8")) or {})[name]
    except (OSError, KeyError, yaml.YAMLError) as exc:
        raise AnsibleFilterError(
            "%s%s: cannot read %s from %s: %s" % (PREFIX, filter_name, name, ROLE_DEFAULTS, exc)
        ) from exc


def mirror_repository_url(stack, repo_url=None, base_url=None, arch=None):
    """The NVIDIA repository the nvidia_stack role installs ``stack`` from (None: the role's default)."""
    if base_url is None:
        base_url = _role_default("nvidia_stack_repo_base_url")
    if arch is None:
        arch = _role_default("nvidia_stack_repo_arch")
    try:
        return mirror_check.repository_url(stack, repo_url or "", base_url, arch)
    except ValueError as exc:
        raise AnsibleFilterError("%smirror_repository_url: %s" % (PREFIX, exc)) from exc


def mirror_check_plan(hosts, hostvars, stack="gpuops_resolved_stack", repository="mirror_check_repository"):
    """One check per operating system, repository and distinct stack, each read on one node of its group.

    Each host's nvidia_stack_os_repositories_enabled and nvidia_stack_epel_release_url (the role's defaults where
    it sets none) say what site.yml would do about the OS repositories the node lacks.
    """
    enabled_default = _role_default(OS_REPOSITORIES_ENABLED, "mirror_check_plan")
    epel_default = _role_default(EPEL_RELEASE_URL, "mirror_check_plan")
    targets = {}
    for host in hosts:
        values = hostvars.get(host) or {}
        if values.get(stack):
            try:
                enabled = boolean(values.get(OS_REPOSITORIES_ENABLED, enabled_default), strict=True)
            except TypeError as exc:
                raise AnsibleFilterError(
                    "%smirror_check_plan: %s of %s is not a boolean: %s" % (PREFIX, OS_REPOSITORIES_ENABLED, host, exc)
                ) from exc
            targets[host] = {
                "stack": values.get(stack),
                "repository": values.get(repository),
                "os_repositories_enabled": enabled,
                "epel_release_url": values.get(EPEL_RELEASE_URL, epel_default) or "",
            }
    if not targets:
        raise AnsibleFilterError("%smirror_check_plan: no host has %s: run the validation play first" % (PREFIX, stack))
    return mirror_check.plan(targets)


def _read(result):
    """A looped gpu_stack_facts result -> its gpu_stack fact, or why there is none."""
    if result.get("unreachable"):
        return "unreachable: %s" % result.get("msg", "")
    gpu_stack = (result.get("ansible_facts") or {}).get("gpu_stack")
    if gpu_stack is None:
        return result.get("msg") or "gpu_stack_facts returned no gpu_stack"
    return gpu_stack


def mirror_check_report(checks, hostvars, reads="mirror_check_reads", sources="mirror_check_sources"):
    """What each check found: lines to print, the problems that fail the run, per-check findings."""
    by_number = {}
    texts = {}
    for node in sorted({check["node"] for check in checks}):
        values = hostvars.get(node) or {}
        for result in (values.get(reads) or {}).get("results") or []:
            number = (result.get("item") or {}).get("number")
            if number is not None and not result.get("skipped"):
                by_number[number] = _read(result)
        source = values.get(sources) or {}
        if source and not source.get("skipped") and "stdout" in source:
            texts[node] = source["stdout"]
    return mirror_check.report(checks, by_number, texts)


class FilterModule:
    """gpuops.cluster mirror check filters."""

    def filters(self):
        return {
            "mirror_repository_url": mirror_repository_url,
            "mirror_check_plan": mirror_check_plan,
            "mirror_check_report": mirror_check_report,
        }
