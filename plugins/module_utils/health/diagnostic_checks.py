# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checks of the diagnostics run from ``level: standard``: ``dcgmi diag`` and nccl-tests' bus bandwidth.
Pure: takes ``dcgm_diag``'s and ``nccl_tests``' parsed output.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import thresholds
from ansible_collections.gpuops.cluster.plugins.module_utils.health.check_record import check


def dcgm_diag(dcgm, gpus):
    by_index = {gpu["index"]: gpu for gpu in gpus}
    parsed = dcgm["parsed"]
    if not parsed["results"]:
        return [
            check(
                "dcgm_diag",
                "fail",
                "dcgmi diag -r %s gave no results (%s): the DCGM host engine did not answer; start it "
                "(systemctl enable --now nvidia-dcgm) and run again" % (dcgm["level"], "; ".join(parsed["warnings"])),
            )
        ]
    if dcgm.get("rc") not in (None, 0) and not parsed["failed"]:
        return [
            check(
                "dcgm_diag",
                "fail",
                "dcgmi diag -r %s exited %s with no failed test: %s"
                % (dcgm["level"], dcgm["rc"], "; ".join(parsed["warnings"]) or "see dcgmi diag output"),
            )
        ]
    if not parsed["failed"]:
        return [
            check(
                "dcgm_diag",
                "pass",
                "dcgmi diag -r %s: %d results, none failed" % (dcgm["level"], len(parsed["results"])),
            )
        ]
    checks = []
    for failure in parsed["failed"]:
        gpu = by_index.get(failure["gpu_index"]) if isinstance(failure["gpu_index"], int) else None
        info = failure["info"]
        checks.append(
            check(
                "dcgm_diag",
                "fail",
                "dcgmi diag -r %s: %s failed %s" % (dcgm["level"], failure["test"], info),
                gpu,
                "reset_gpu",
            )
        )
    return checks


def nccl_busbw(nccl, gpus, minimum):
    parsed = nccl["parsed"]
    minimum = thresholds.nccl_busbw_minimum(gpus, minimum)
    busbw = parsed["busbw_gbps"]
    if busbw is None:
        return check(
            "nccl_busbw",
            "fail",
            "all_reduce_perf gave no bus bandwidth: %s" % ("; ".join(parsed["warnings"]) or "empty output"),
        )
    if parsed["wrong"]:
        return check(
            "nccl_busbw",
            "fail",
            "all_reduce_perf found %d wrong results" % parsed["wrong"],
            action="hardware_inspection",
        )
    if minimum is None:
        return check("nccl_busbw", "pass", "bus bandwidth %.1f GB/s (no threshold for this GPU model)" % busbw)
    if busbw < minimum:
        return check(
            "nccl_busbw",
            "fail",
            "bus bandwidth %.1f GB/s, expected >= %.1f" % (busbw, minimum),
            action="hardware_inspection",
        )
    return check("nccl_busbw", "pass", "bus bandwidth %.1f GB/s >= %.1f" % (busbw, minimum))
