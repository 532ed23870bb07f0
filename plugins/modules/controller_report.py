#!/usr/bin/python
# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: controller_report
short_description: Write a run's JSON report on the controller
version_added: 0.2.0
description:
  - Writes O(data) as indented JSON with sorted keys to O(path) on the controller, atomically. Changed only when the
    text or the mode differs.
  - Runs in the controller's process (action plugin); it never connects to a host and starts no Python module, where
    C(ansible.builtin.copy) on localhost starts two.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  path:
    description: The report file on the controller. Its directory must exist.
    type: path
    required: true
  data:
    description: What the report holds; anything JSON can represent.
    type: raw
    required: true
  mode:
    description: The file's mode, an octal string. World-writable modes are refused.
    type: str
    default: "0644"
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Write the JSON report on the controller
  gpuops.cluster.controller_report:
    path: "{{ playbook_dir }}/gpuops-health-report.json"
    data: "{{ {'nodes': nodes, 'unhealthy': unhealthy} }}"
"""

RETURN = r"""
path:
  description: The absolute path written.
  returned: success
  type: str
  sample: /home/ops/gpuops-health-report.json
"""
