# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verdict of ``gpuops.cluster.gpu_health`` judged against the state the node-side health command keeps.

:func:`judge_history` reads that state (read only: the command owns it) and lets :mod:`node_history` judge error
rates, Xid repeats and baselines.
"""

from __future__ import annotations

import time

from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value
from ansible_collections.gpuops.cluster.plugins.module_utils.health import health_state, node_history


def judge_history(module, inputs, verdict, offline):
    """The verdict with rates, repeats and baselines judged against the node-side command's state (read only)."""
    params = module.params
    state, note = health_state.HealthState(params["node_state"]).load(set_aside=False)  # the command owns it
    if note:
        module.warn("node_state: %s: error rates, Xid repeats and baselines not judged" % note)
        return verdict
    history_options = {
        "rate_thresholds": params["rate_thresholds"],
        "baseline_max_regression": params["baseline_max_regression"],
        "fleet_nccl_busbw_gbps": params["fleet_nccl_busbw_gbps"],
        "skip_checks": params["skip_checks"],
        "boot_id": None if offline else read_value("/proc/sys/kernel/random/boot_id"),
    }
    verdict, _stored, _notes = node_history.judge(inputs, verdict, state, time.time(), history_options)
    return verdict
