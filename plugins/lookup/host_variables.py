# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: host_variables
author: gpuops.cluster maintainers (@gpuops)
version_added: 0.2.0
short_description: The collection's variables of the current host, as the task sees them, for validation
description:
  - Returns one mapping with C(names) (every variable name the task sees), C(variables) (the templated value of each
    variable with a prefix the collection manages, C(gpuops_) or a role's name) and C(unreadable) (why a value
    could not be templated).
  - Values are read with the task's variables, so play and C(import_playbook) vars count as they do for the
    roles; a value whose template fails is reported, not raised, so one bad value never hides the others.
  - The input of the filter gpuops.cluster.validation_findings in C(playbooks/validate.yml).
options: {}
"""

EXAMPLES = r"""
- name: One host's problems
  ansible.builtin.set_fact:
    findings: "{{ lookup('gpuops.cluster.host_variables') | gpuops.cluster.validation_findings(checks=['stack']) }}"
"""

RETURN = r"""
_raw:
  description: One mapping.
  type: list
  elements: dict
  contains:
    names:
      description: Every variable name the task sees, sorted.
      type: list
      elements: str
    variables:
      description: The templated values of the managed variables.
      type: dict
    unreadable:
      description: Per managed variable whose template failed, the first line of the error.
      type: dict
"""

from ansible.plugins.lookup import LookupBase
from ansible_collections.gpuops.cluster.plugins.module_utils import variable_registry
from ansible_collections.gpuops.cluster.plugins.module_utils.variable_values import plain
from jinja2 import Undefined


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        prefixes = tuple(variable_registry.load_known_variables())
        values, unreadable = {}, {}
        for name in sorted(variables):
            if not name.startswith(prefixes):
                continue
            try:
                value = self._templar.template(variables[name])
                if isinstance(value, Undefined):  # a failed template handed on as an undefined marker
                    value._fail_with_undefined_error()
                values[name] = plain(value)
            except Exception as exc:  # any templating error is the variable's problem, reported by validation
                unreadable[name] = str(getattr(exc, "message", None) or exc).strip().splitlines()[0]
        return [{"names": sorted(variables), "variables": values, "unreadable": unreadable}]
