#!/usr/bin/python
# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: upgrade_slot
short_description: Take and give back a rolling upgrade's slot in the sliding window
version_added: 0.2.0
description:
  - Marks where a node of a rolling upgrade leaves service (O(state=acquired)) and where it is back or left out
    (O(state=released)). The play must run with the strategy C(gpuops.cluster.upgrade_window); the strategy holds each
    host at its O(state=acquired) task until the window admits it, and frees the slot when the host reaches its
    O(state=released) task. Without that strategy the task fails and says so.
  - The window is the play's, not the task's - the strategy builds it once, when the first host reaches this task, from
    the play variable C(gpuops_upgrade_window) (the fleet, the window's settings, the fresh-state reads, the journal,
    the drains ahead; see P(gpuops.cluster.upgrade_window#strategy)). The task takes no part of it.
  - The task itself changes nothing anywhere; it returns the strategy's record of the host's slot.
  - Runs on the controller (action plugin); it never connects to the node.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  state:
    description: V(acquired) waits for the slot, V(released) gives it back.
    type: str
    choices: [acquired, released]
    default: acquired
  node:
    description:
      - The node's start (C(host), C(adapter), C(decision_reason), C(before), C(target)) and, with O(state=released),
        the registered results of its steps, from which its record is built once (P(gpuops.cluster.upgrade_node#filter)
        says what it takes and what the record holds). It is returned as RV(node).
      - With O(state=released) the record says whether the node is back in service, whether the run halts and whether
        it was deferred (an upgraded node is back; a rolled-back one is back and halts; a deferred one is back and
        halts per C(on_drain_timeout); a failed one is left out of service and halts), in place of O(ok), O(halt) and
        O(deferred), which must then be left out.
      - With O(state=acquired) the record of a node the window did not admit is returned (its status from the slot's
        reason); an admitted node's record is built at its release.
    type: dict
  ok:
    description: With O(state=released), whether the node is back in service.
    type: bool
    default: false
  halt:
    description:
      - With O(state=released), whether nothing more may start. Default is the window's C(halt_on_failure) for a node
        that is not O(ok).
    type: bool
  deferred:
    description:
      - With O(state=released), the node's jobs outlasted its wait (C(max_job_wait)) and it is back in service, not
        upgraded. Needs O(ok=true); the window counts it neither upgraded nor out of service.
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.cluster.attributes
attributes:
  check_mode:
    support: full
    details: The slot is the same in check mode; the task changes nothing in any mode.
  diff_mode:
    support: none
notes:
  - A waiting host holds no fork. Keep C(forks) at least the window's C(max_unavailable).
seealso:
  - plugin: gpuops.cluster.upgrade_window
    plugin_type: strategy
"""

EXAMPLES = r"""
- name: Upgrade in a sliding window
  hosts: gpu_nodes
  strategy: gpuops.cluster.upgrade_window
  vars:
    gpuops_upgrade_window:
      nodes: "{{ hostvars['localhost'].gpuops_upgrade_window_nodes }}"
      settings: {max_unavailable: 4, per_domain: {rack: 1}, partition_floor: 0.85}
  tasks:
    - name: Wait for a slot in the window
      gpuops.cluster.upgrade_slot:
        state: acquired
      register: slot

    - name: End here when the window did not admit the node
      ansible.builtin.meta: end_host
      when: not slot.admitted

    # ... drain, upgrade, gate ...

    - name: Give the slot back
      gpuops.cluster.upgrade_slot:
        state: released
        ok: true

    # Or with the node's record built from its registered steps (roles/rolling_upgrade/tasks/main.yml), which says
    # whether the node is back and whether the run halts:
    - name: Give the slot back, the record saying how the node ends
      gpuops.cluster.upgrade_slot:
        state: released
        node: "{{ node_start | combine(node_steps) }}"
      register: released
"""

RETURN = r"""
node:
  description:
    - The node's record built from O(node) at this task's time (see P(gpuops.cluster.upgrade_node#filter)).
  returned: O(node) was given, with O(state=released) or for a node not admitted
  type: dict
admitted:
  description: With O(state=acquired), whether the node may leave service now.
  returned: state is acquired
  type: bool
slot:
  description:
    - The strategy's record of the node's slot. C(reason) says why a node was not admitted (the run halted, the node
      is blocked by a rule even with nothing in flight, it is deferred because its job does not end within
      C(max_job_wait), or it is not in the plan). C(job_end) is Slurm's end of its running job when the window was
      built (null when idle or unknown), C(max_job_wait) the window's wait.
  returned: always
  type: dict
  sample:
    state: released
    admitted: true
    reason: admitted
    arrived_at: 1796280000.1
    admitted_at: 1796280012.6
    released_at: 1796280101.9
    waited: 12.5
    in_flight: [gpu002]
    canary: false
    job_end: null
    max_job_wait: 3600
    ok: true
    deferred: false
    halted: false
"""
