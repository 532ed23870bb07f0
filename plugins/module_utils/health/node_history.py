# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One run judged against the node's stored history: error rates, fatal Xid repeats, baselines. Pure.

Shared by the node-side command (which stores the result, :mod:`node_command`) and the ``gpu_health`` module
(option ``node_state``: reads the command's state and stores nothing, so the upgrade gate can tell a regression
from a condition that was there before). :func:`judge` takes :func:`health_checks.evaluate`'s verdict and returns it
with the rate, repeat and baseline checks added and pre-existing failures marked, and the state to store.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    error_rates,
    node_baseline,
    node_verdict,
    open_findings,
)

CHECKS = error_rates.RATE_CHECKS + node_baseline.BASELINE_CHECKS


def judge(inputs, verdict, state, now, options=None):
    """``(verdict, state, notes)``.

    ``state``: what :mod:`health_state` loaded (``samples``, ``xids``, ``baseline``, ``cursor``). ``options``:
    ``rate_thresholds``, ``baseline_max_regression``, ``fleet_nccl_busbw_gbps``, ``skip_checks``, ``boot_id``.
    The returned state has the new samples, Xids and baseline; its cursor moves to ``now`` only when the kernel
    log was read.
    """
    options = options or {}
    notes = []
    gpus = (inputs.get("smi") or {}).get("gpus") or []
    limits = error_rates.thresholds(options.get("rate_thresholds"))
    sample = error_rates.take_sample(inputs, now, options.get("boot_id"))
    extra, rate_notes = error_rates.judge(state.get("samples"), sample, limits)
    notes.extend(rate_notes)
    xid_checks, xids = error_rates.judge_xids(
        state.get("xids"), error_rates.fatal_xids(open_findings.fresh(inputs.get("kernel")), now), now, gpus, limits
    )
    extra += xid_checks
    figures = node_baseline.figures(inputs)
    max_regression = options.get("baseline_max_regression")
    baseline_checks, baseline = node_baseline.judge(
        state.get("baseline") or {}, figures, verdict, now,
        max_regression=node_baseline.MAX_REGRESSION if max_regression is None else max_regression,
        fleet_busbw=options.get("fleet_nccl_busbw_gbps"),
    )  # fmt: skip
    extra += baseline_checks
    verdict = node_verdict.with_checks(verdict, extra, gpus, options.get("skip_checks") or ())
    verdict = node_baseline.mark_pre_existing(verdict, baseline)
    stored = dict(state)
    stored["cursor"] = {"time": now} if inputs.get("kernel") is not None else state.get("cursor")
    stored["samples"] = error_rates.keep_history(state.get("samples"), sample)
    stored["xids"] = xids
    stored["baseline"] = node_baseline.update(baseline, figures, verdict, now)
    return verdict, stored, notes
