# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: health_options
author: gpuops.cluster maintainers (@gpuops)
version_added: 0.2.0
short_description: The operator's gpuops_health_* settings as gpuops.cluster.gpu_health options, from one table
description:
  - Returns one mapping with C(<option>) for each variable C(gpuops_health_<option>) the task sees set (not null), for
    the options an operator sets for the fleet, a group or a host - C(expected_gpu_count), C(expected_gpu_model),
    C(expected_driver_version), C(expected_ib_ports), C(expected_ib_port_count), C(expected_ib_rate),
    C(expected_nvlinks), C(expected_pcie_width), C(expected_pcie_gen), C(pcie_baseline) (what the platform gives),
    C(thresholds), C(skip_checks), C(since), C(prometheus_textfile), C(nvidia_smi_path), C(kernel_log),
    C(infiniband_root), C(settle_timeout).
  - An option whose variable is unset takes the variable's default where it has one other than the module's -
    C(settle_timeout) V(300), documented in C(playbooks/vars/gpuops_variables.yml) - unless O(exclude) names it.
  - C(playbooks/health_check.yml), the rolling upgrade's survey and gate, and the node-side command's configuration
    (role gpuops.cluster.gpu_healthcheck) take their options from it, so each setting reaches all of them. Only these
    variables are templated.
  - Fails when O(exclude) names something that is not one of these options.
options:
  exclude:
    description: Options the caller sets itself or does not take.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Check every node with the operator's settings
  module_defaults:
    gpuops.cluster.gpu_health: "{{ lookup('gpuops.cluster.health_options') }}"
  gpuops.cluster.gpu_health:
    level: standard
"""

RETURN = r"""
_raw:
  description: One mapping, the gpu_health options set, by option name.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpuops.cluster.plugins.module_utils.health import health_options
from ansible_collections.gpuops.cluster.plugins.module_utils.variable_values import plain


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        unknown = sorted(set(kwargs) - {"exclude"})
        if terms or unknown:
            raise AnsibleLookupError(
                "gpuops.cluster.health_options takes no terms and only exclude, got %r %s" % (terms, unknown)
            )
        variables = variables or {}
        wanted = {health_options.variable(option) for option in health_options.OPTIONS}
        values = {name: plain(self._templar.template(variables[name])) for name in wanted if name in variables}
        try:
            return [health_options.health_options(values, kwargs.get("exclude") or [])]
        except ValueError as exc:
            raise AnsibleLookupError("gpuops.cluster.health_options: %s" % exc) from exc
