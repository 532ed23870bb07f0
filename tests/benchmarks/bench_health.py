"""Figures of the GPU health engine (a plain script, not a test).

    .venv/bin/python tests/benchmarks/bench_health.py

Prints: parse time of an 8-GPU ``nvidia-smi -q -x`` (goal <= 20 ms), kernel
log parse time, evaluator time, the module's end-to-end wall time in offline
mode (``ansible localhost -m gpuops.cluster.gpu_health``), and the external
commands of one live run per level (run_command mocked, fixtures answer), with
whether each ran in the C locale.

``nvidia-smi`` invocations of one live run (any GPU count; issue 18 checked them
against the XML and left them as they were):

    level      nvidia-smi calls   which
    quick      2                  -q -x, nvlink -s
    standard   3                  -q -x, nvlink -s, nvlink -e
    extended   3                  -q -x, nvlink -s, nvlink -e

Everything per GPU comes from the one ``-q -x``. NVLink link state and error
counters stay separate ``nvidia-smi nvlink -s``/``-e`` calls: ``nvidia-smi -q -x``
(nvsmi_device_v11/v12 DTD) has no per-link element, only ``<fabric>`` (see
plugins/module_utils/health/node_reader.py). The script prints each level's count
against these figures.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".collections"))
FIXTURES = ROOT / "tests" / "fixtures"

import contextlib

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    health_checks,
    kernel_log,
    nvidia_smi_xml,
    nvlink,
    prometheus_textfile,
)
from ansible_collections.gpuops.cluster.plugins.modules import gpu_health as module

SMI_CALLS = {"quick": 2, "standard": 3, "extended": 3}  # the figures of the docstring


def timed(function, repeat=50):
    samples = []
    for _unused in range(repeat):
        start = time.perf_counter()
        function()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), max(samples)


def report(name, median, worst, goal=None):
    verdict = "" if goal is None else ("  (goal <= %g ms: %s)" % (goal, "met" if median <= goal else "MISSED"))
    print("%-44s median %8.2f ms   max %8.2f ms%s" % (name, median, worst, verdict))


def live_commands(level, xml="h100-sxm-8x-healthy.xml"):
    answers = {
        ("-q", "-x"): (FIXTURES / "nvidia-smi" / xml).read_text(),
        ("nvlink", "-s"): (FIXTURES / "nvlink/h100-8x-status-healthy.txt").read_text(),
        ("nvlink", "-e"): (FIXTURES / "nvlink/h100-8x-errors-clean.txt").read_text(),
    }
    calls = []
    locales = []

    def run_command(self, args, environ_update=None, **kwargs):
        env = dict(getattr(self, "run_command_environ_update", None) or {}, **(environ_update or {}))
        locales.append(env.get("LC_ALL") == "C")
        if os.path.basename(args[0]) == "timeout":  # every tool runs under coreutils timeout -k 5 <seconds>
            args = args[4:]
        calls.append(list(args))
        name = os.path.basename(args[0])
        if name == "nvidia-smi":
            return 0, answers[tuple(args[1:])], ""
        if name == "journalctl":
            return 0, (FIXTURES / "kernel-log/clean-journal-short-iso.log").read_text(), ""
        if name == "systemctl":
            return 0, "active\n", ""
        if name == "dcgmi":
            return 0, (FIXTURES / "dcgm/dcgmi-diag-r1-pass.json").read_text(), ""
        if name == "all_reduce_perf":
            return 0, (FIXTURES / "nccl-tests/all_reduce_perf-h100-8x.txt").read_text(), ""
        raise AssertionError(args)

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return "/usr/bin/" + name

    def exit_json(self, **kwargs):
        raise SystemExit(0)

    with (
        mock.patch.object(basic.AnsibleModule, "run_command", run_command),
        mock.patch.object(basic.AnsibleModule, "get_bin_path", get_bin_path),
        mock.patch.object(basic.AnsibleModule, "exit_json", exit_json),
        patch_module_args({"level": level, "infiniband_root": str(FIXTURES / "infiniband/healthy-8x-ndr")}),
        contextlib.suppress(SystemExit),
    ):
        module.main()
    return calls, all(locales)


def main():
    xml = (FIXTURES / "nvidia-smi/h100-sxm-8x-healthy.xml").read_text()
    log = (FIXTURES / "kernel-log/xid-journal-short-iso.log").read_text()
    print("nvidia-smi -q -x fixture: %d GPUs, %d bytes" % (len(nvidia_smi_xml.parse(xml)["gpus"]), len(xml)))
    report("parse 8-GPU nvidia-smi -q -x", *timed(lambda: nvidia_smi_xml.parse(xml)), goal=20)
    report("parse kernel log (%d lines)" % len(log.splitlines()), *timed(lambda: kernel_log.parse(log)))
    inputs = {
        "smi": nvidia_smi_xml.parse(xml),
        "kernel": kernel_log.parse(log),
        "nvlink_status": nvlink.parse_status((FIXTURES / "nvlink/h100-8x-status-healthy.txt").read_text()),
    }
    report(
        "evaluate (8 GPUs, 9 events, NVLink)", *timed(lambda: health_checks.evaluate(inputs, {"expected_gpu_count": 8}))
    )
    result = health_checks.evaluate(inputs)
    report("render Prometheus textfile", *timed(lambda: prometheus_textfile.render_prometheus(result, 0)))

    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"), ANSIBLE_LOCALHOST_WARNING="false")
    argv = [
        str(ROOT / ".venv/bin/ansible"), "localhost", "-m", "gpuops.cluster.gpu_health", "-a",
        "nvidia_smi_xml=%s kernel_log=%s expected_gpu_count=8"
        % (FIXTURES / "nvidia-smi/h100-sxm-8x-healthy.xml", FIXTURES / "kernel-log/xid-journal-short-iso.log"),
    ]  # fmt: skip
    walls = []
    for _unused in range(5):
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        walls.append((time.perf_counter() - start) * 1000)
        if done.returncode != 0:
            print(done.stdout, done.stderr)
            raise SystemExit("the module run failed")
    report("module end to end, offline (ansible localhost)", statistics.median(walls), max(walls))

    for level in ("quick", "standard", "extended"):
        calls, c_locale = live_commands(level)
        smi_calls = [c for c in calls if os.path.basename(c[0]) == "nvidia-smi"]
        figure = "as expected" if len(smi_calls) == SMI_CALLS[level] else "EXPECTED %d" % SMI_CALLS[level]
        print(
            "live %-9s %d external commands (%d nvidia-smi, %s, %d of them -q -x; C locale: %s): %s"
            % (level, len(calls), len(smi_calls), figure, sum(c[1:] == ["-q", "-x"] for c in smi_calls),
               "yes" if c_locale else "NO", ", ".join(" ".join([os.path.basename(c[0]), *c[1:]]) for c in calls))
        )  # fmt: skip


if __name__ == "__main__":
    main()
