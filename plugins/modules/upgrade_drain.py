#!/usr/bin/python
# Copyright: contributors to gpuops.cluster
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: upgrade_drain
short_description: Take a node out of service for a rolling upgrade and give it back, in Slurm or Kubernetes
version_added: 0.2.0
description:
  - One task for the drain adapter of a rolling upgrade, whatever the scheduler. It runs the scheduler's own modules,
    on the task's host (the delegate with C(delegate_to)), and returns one record in the shape of the upgrade's audit
    report.
  - "O(adapter=slurm): P(gpuops.cluster.slurm_drain#module). Delegate the task to a host where Slurm's client works,
    usually the controller."
  - "O(adapter=kubernetes): M(kubernetes.core.k8s_info) reads the Node (was it cordoned already?),
    M(kubernetes.core.k8s_drain) cordons and drains it (DaemonSet pods stay, emptyDir data is deleted) and, after the
    drain, M(kubernetes.core.k8s_info) lists the pods still on the node. Delegate the task to a host with API access
    and the C(kubernetes) Python library, usually C(localhost) with C(become: false)."
  - "Kubernetes keeps no owner of a cordon, so ours is marked on the Node with the annotation C(gpuops.cluster/cordon)
    (the reason prefix and the run; M(kubernetes.core.k8s), a merge patch), set before we cordon and removed when we
    uncordon. O(state=restored) uncordons only a cordon that carries our mark, whatever O(ours) says; a cordon without
    it is someone else's (cordoned before the run, or by someone else during it; an operator keeps a node we cordoned
    cordoned by removing the mark) and is left, with a warning. A cordon of ours left by a run that lost its
    controller carries the mark: O(state=drained) takes it as ours. C(kubectl cordon) of a node already cordoned
    changes nothing on the Node, so that one cannot be told from ours."
  - O(adapter=none) does nothing and returns the record of a node nobody drains.
  - "The ownership rule: a node drained (Slurm) or cordoned (Kubernetes) by someone else before the run stays that way.
    O(state=restored) gives back only a drain of ours; O(state=kept) never touches a drain of someone else."
  - A drain whose work does not leave in time is not a failure. The task returns RV(timed_out=true), the node stays
    out of service, and the playbook applies its policy. Failures of the modules underneath (C(scontrol) refused, the
    API unreachable, the Node unknown) fail the task with the module's message.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  adapter:
    description: How the node is taken out of service.
    type: str
    choices: [slurm, kubernetes, none]
    required: true
  state:
    description:
      - V(drained) takes the node out of service and waits, bounded by O(timeout), for its work to leave.
      - V(restored) gives the node back (Slurm resume, Kubernetes uncordon) when the drain was ours; a drain someone
        else had before is kept.
      - V(kept) leaves the node drained. With O(adapter=slurm) and a drain of ours the reason becomes O(reason); a node
        that is not drained any more (a failure before the drain, a Kubernetes drain that gave up and uncordoned) is
        drained (cordoned) again, as ours.
    type: str
    choices: [drained, restored, kept]
    required: true
  node:
    description:
      - The node's name in the scheduler (the Slurm NodeName, the Kubernetes Node name).
      - Default is the task's C(inventory_hostname) (the node's, also when the task is delegated).
    type: str
  run_id:
    description:
      - The run's id, written in the Slurm drain reason so that the drain is recognised as ours later, also by a
        re-run after an abort (letters, digits, dots, underscores, colons, dashes).
      - Required with O(adapter=slurm) and O(state=drained) or O(state=kept).
    type: str
  reason_prefix:
    description: The start of every Slurm drain reason of the upgrade; a reason starting with it and a run id is ours.
    type: str
    default: gpuops-upgrade
  reason:
    description:
      - The Slurm drain reason after the prefix and the run id.
      - With O(state=drained) the default is the one of P(gpuops.cluster.slurm_drain#module), C(upgrading the NVIDIA
        stack). With O(state=kept) the default is C(kept drained; see the report of run RUN_ID).
    type: str
  timeout:
    description:
      - Seconds to wait with O(state=drained) for the node's jobs (Slurm) or evicted pods (Kubernetes) to leave.
      - V(0) waits as little as the adapter allows (Kubernetes 1 second, C(k8s_drain) reads 0 as forever).
    type: int
    default: 3600
  poll_interval:
    description: Seconds between two looks at the node while waiting.
    type: int
    default: 10
  kubeconfig:
    description:
      - With O(adapter=kubernetes), the kubeconfig for the API server, a path on the host the task runs on or the
        configuration itself as a dictionary, passed to the kubernetes.core modules. Default is theirs
        (C(K8S_AUTH_KUBECONFIG), C(~/.kube/config)).
      - Never returned. Prefer a path; a dictionary may hold tokens.
    type: raw
  ours:
    description:
      - With O(state=restored) or O(state=kept), whether the drain was ours, as RV(ours) of the O(state=drained) task
        recorded it. V(false) leaves the node as it is without calling anything.
      - When omitted, the node's state decides. Slurm knows its drain by the reason, Kubernetes by our mark on the
        Node (C(gpuops.cluster/cordon)); a cordon without it is kept, with a warning.
      - Not with O(state=drained), which finds it out.
    type: bool
extends_documentation_fragment:
  - gpuops.cluster.attributes
  - ansible.builtin.action_common_attributes.flow
  - ansible.builtin.action_common_attributes.conn
attributes:
  check_mode:
    support: full
    details:
      - Slurm runs P(gpuops.cluster.slurm_drain#module) in check mode (no C(scontrol), no wait).
      - Kubernetes reads the Node and runs C(k8s_drain) in check mode (nothing evicted, no pods read back). With a
        C(kubernetes.core) whose C(k8s_drain) has no check mode, the action is the one the Node read implies.
  diff_mode:
    support: none
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  become:
    support: full
    details: Applies to the modules run. Slurm usually needs it on the controller; Kubernetes runs without it.
  connection:
    support: full
  delegation:
    support: full
    details: The modules run on the delegate. Delegate Slurm to the controller and Kubernetes to a host with API access.
notes:
  - "Kubernetes: the drain does not force-delete pods no controller owns, and honours PodDisruptionBudgets. Such pods
    make the drain time out (RV(timed_out=true)) and are named in RV(blocking_pods)."
  - "Kubernetes: a drain times out when C(k8s_drain) says so or when pods that a drain must evict are still on the node
    afterwards (DaemonSet, static and finished pods do not count)."
  - Requires the C(kubernetes.core) collection and the C(kubernetes) Python library on the delegate for
    O(adapter=kubernetes).
seealso:
  - module: gpuops.cluster.slurm_drain
  - module: kubernetes.core.k8s_drain
  - module: kubernetes.core.k8s_info
  - module: kubernetes.core.k8s
"""

EXAMPLES = r"""
- name: Drain the node in Slurm and wait up to an hour for its jobs
  gpuops.cluster.upgrade_drain:
    adapter: slurm
    state: drained
    node: "{{ gpuops_upgrade_slurm_node_name | default(inventory_hostname) }}"
    run_id: "{{ gpuops_upgrade_run }}"
    timeout: 3600
  delegate_to: "{{ gpuops_upgrade_slurm_controller }}"
  register: gpuops_upgrade_drain_result

- name: Cordon and drain the Kubernetes node from the controller
  gpuops.cluster.upgrade_drain:
    adapter: kubernetes
    state: drained
    node: "{{ gpuops_upgrade_kubernetes_node_name | default(inventory_hostname) }}"
    kubeconfig: /etc/gpuops/upgrade.kubeconfig
    timeout: 1800
  delegate_to: localhost
  become: false
  register: gpuops_upgrade_drain_result

- name: Give the node back when the drain was ours
  gpuops.cluster.upgrade_drain:
    adapter: slurm
    state: restored
    ours: "{{ gpuops_upgrade_drain_result.ours }}"
  delegate_to: "{{ gpuops_upgrade_slurm_controller }}"

- name: Keep a failed node drained with a reason naming the run
  gpuops.cluster.upgrade_drain:
    adapter: slurm
    state: kept
    run_id: "{{ gpuops_upgrade_run }}"
    reason: "failed; see the report of run {{ gpuops_upgrade_run }}"
    ours: "{{ gpuops_upgrade_drain_result.ours | default(omit) }}"
  delegate_to: "{{ gpuops_upgrade_slurm_controller }}"
"""

RETURN = r"""
started_at:
  description: When the task began, epoch seconds on the controller's clock (the rolling upgrade times the drain by it).
  returned: when the request was valid
  type: float
  sample: 1796280012.6
ended_at:
  description: When the task ended, epoch seconds on the controller's clock.
  returned: when the request was valid
  type: float
  sample: 1796280101.9
adapter:
  description: The adapter.
  returned: always
  type: str
  sample: slurm
state:
  description: The requested state.
  returned: always
  type: str
  sample: drained
node:
  description: The node's name in the scheduler.
  returned: always
  type: str
  sample: gpu-a01
action:
  description:
    - What was done (or, in check mode, would be done). Slurm says V(drain), V(update_reason), V(resume) or V(none).
      Kubernetes says V(drain), V(cordon), V(uncordon) or V(none).
  returned: always
  type: str
  sample: drain
ours:
  description:
    - Whether the node's drain is ours, so that the upgrade may give the node back. It is null when a Kubernetes cordon
      was found with O(ours) omitted (its owner is unknown).
  returned: always
  type: bool
  sample: true
pre_existing:
  description: Whether someone else had drained (cordoned) the node; it is left as it is.
  returned: always
  type: bool
  sample: false
timed_out:
  description: With O(state=drained), whether work was still on the node after O(timeout). The node stays drained.
  returned: always
  type: bool
  sample: false
reason:
  description:
    - Slurm, the node's drain reason afterwards. Kubernetes, what C(k8s_drain) said about the drain, or why it timed
      out.
  returned: always
  type: str
  sample: "gpuops-upgrade[20261202T101500-ab12]: upgrading the NVIDIA stack"
waited:
  description: Seconds spent waiting for the work to leave (Slurm as measured by the module, Kubernetes the drain's).
  returned: always
  type: float
  sample: 42.0
blocking_pods:
  description:
    - Kubernetes, the pods (C(namespace/name)) that a drain must evict and that were still on the node when it timed
      out. Empty otherwise.
  returned: always
  type: list
  elements: str
  sample: [research/llm-train-7f9c6d-0]
changed:
  description: Whether the node's state changed (would change, in check mode).
  returned: always
  type: bool
  sample: true
msg:
  description: One line on what was done; with a failure, what failed and what the module said.
  returned: always
  type: str
  sample: "slurm node gpu-a01: drain (ours)"
module:
  description: The module that failed.
  returned: failure
  type: str
  sample: gpuops.cluster.slurm_drain
"""
