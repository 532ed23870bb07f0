# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: upgrade_settings
author: gpuops.cluster maintainers (@gpuops)
version_added: 0.2.0
short_description: The rolling upgrade's gpuops_upgrade_* settings with their defaults, in one mapping
description:
  - Returns one mapping with C(<name>) for each setting C(gpuops_upgrade_<name>) that has a default - the variable's
    value when the task sees it set (not null), else the default.
  - A value set is converted to the type C(playbooks/vars/gpuops_variables.yml) declares for it, as the validation play
    checks it; C(-e gpuops_upgrade_plan_only=true) (a string on the command line) is the bool V(true).
  - The defaults are written once, in C(plugins/module_utils/upgrade/upgrade_settings.py) (the window's are the
    planner's, C(window_input.py)); C(playbooks/vars/gpuops_variables.yml) documents each under C(default). The role
    gpuops.cluster.rolling_upgrade reads its settings from this lookup only. Only these variables are templated.
  - "The settings: C(drain), C(drain_poll_interval), C(on_drain_timeout), C(on_failure), C(gate_level),
    C(canary_gate_level), C(canary_soak_seconds), C(reason_prefix), C(kubernetes_delegate), C(stop_services),
    C(domains), C(max_unavailable), C(per_domain), C(partition_floor), C(barrier), C(max_job_wait), C(drain_ahead),
    C(plan_only), C(canary_group), C(refresh_interval), C(maintenance_reservation), C(resume_journal)."
"""

EXAMPLES = r"""
- name: Say how long a node's upgrade may wait for its jobs in this run
  ansible.builtin.debug:
    msg: "{{ lookup('gpuops.cluster.upgrade_settings').max_job_wait }} s"
"""

RETURN = r"""
_raw:
  description: One mapping, each setting's value by its name without the gpuops_upgrade_ prefix.
  type: list
  elements: dict
"""

import functools

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpuops.cluster.plugins.module_utils import variable_registry
from ansible_collections.gpuops.cluster.plugins.module_utils.upgrade import upgrade_settings
from ansible_collections.gpuops.cluster.plugins.module_utils.variable_values import plain


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if terms or kwargs:
            raise AnsibleLookupError(
                "gpuops.cluster.upgrade_settings takes no terms and no options, got %r %s" % (terms, sorted(kwargs))
            )
        variables = variables or {}
        wanted = {upgrade_settings.PREFIX + name for name in upgrade_settings.DEFAULTS}
        values = {name: plain(self._templar.template(variables[name])) for name in wanted if name in variables}
        return [upgrade_settings.settings(values, registry_types())]


@functools.lru_cache(maxsize=1)
def registry_types() -> dict:
    """Each gpuops_upgrade_* variable's type in the registry (read once per controller process)."""
    specs = variable_registry.load_specs()
    return {name: spec.get("type") for name, spec in specs.items() if name.startswith(upgrade_settings.PREFIX)}
