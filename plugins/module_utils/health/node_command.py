# Copyright: gpuops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpuops-gpu-health``: the GPU health check on the node itself, as NHC and Slurm run it. No ansible-core needed.

The role gpuops.cluster.gpu_healthcheck lays this package out under ``/usr/local/lib/gpuops-health`` (the same
``ansible_collections.gpuops.cluster.plugins.module_utils`` import paths as the module) and installs a launcher
in ``/usr/local/sbin`` that calls :func:`main`. The same readers (:class:`node_reader.NodeReader`) and the same
evaluator (:func:`health_checks.evaluate`) judge the node as ``gpuops.cluster.gpu_health`` does, plus:

- error rates and fatal Xid repeats against the node's own earlier samples (:mod:`error_rates`), kept with the
  kernel-log cursor ("since the last run") in ``/var/lib/gpuops-health/state.json`` (:mod:`health_state`);
- the node's last good NCCL bus bandwidth and DCGM results (:mod:`node_baseline`);
- the exit code and one line of :mod:`node_verdict`, ``--json`` for everything, the Prometheus textfile;
- ``--drain``: ``scontrol update nodename=<node> state=drain reason="gpuops-health: <the line>"``, unless a
  person (or another tool) drained the node already with a reason of their own, which is kept.

It fails closed (issue 25). slurmd runs it as root and ignores its exit code, so with ``--drain`` any outcome
other than "healthy" or "unhealthy and drained" drains the node with ``gpuops-health: check failed: <cause>``
(a configuration error, an internal error), unless someone else's drain is there already. Fatal kernel-log
findings stay open across runs until a drain by this command is confirmed in Slurm or the node reboots
(:mod:`open_findings`): a failed ``scontrol``, a run without ``--drain`` or an operator's drain never consume
them. A stored state that cannot be used is set aside (the run goes on from a fresh state, and the lost history
is a failed check: drained once with that cause when the node is otherwise healthy); a failed save or a lock
that cannot be opened is a note (:mod:`health_state`).

One time budget bounds the run (``time_budget``, 45 s at level quick: slurmd kills HealthCheckProgram after
60 s): the lock wait and every tool take their share of it, a tool that would run past it is not run and its
check fails, and the drain's ``scontrol`` calls (``2 x slurm_timeout`` + 5 s) are kept out of the budget's end, so the
verdict and the drain happen before it runs out. Every tool runs under coreutils ``timeout`` and, as a second
bound, under ``subprocess``'s own timeout a few seconds later. The configuration is a JSON file
(``/etc/gpuops/gpu-health.json``, keys :data:`CONFIG_DEFAULTS`); the command line overrides it;
``--check-config`` checks it (with ``--drain``: that ``slurm_scontrol_path`` names an executable ``scontrol``,
since slurmd passes no ``PATH``) and exits 0 or 2.
"""

from __future__ import annotations

# gpuops-gpu-health runs on the node without Ansible (no AnsibleModule, so no run_command): its tools go
# through subprocess, as argv lists, in the C locale, each under a timeout.
# pylint: disable=ansible-bad-function
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

from ansible_collections.gpuops.cluster.plugins.module_utils.command_runner import KILL_AFTER
from ansible_collections.gpuops.cluster.plugins.module_utils.file_reader import read_value, under
from ansible_collections.gpuops.cluster.plugins.module_utils.health import (
    error_rates,
    gpudirect_rdma,
    health_checks,
    health_state,
    kernel_log,
    mig_health,
    node_baseline,
    node_history,
    node_verdict,
    open_findings,
    prometheus_textfile,
    thresholds,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.health.node_reader import (
    DIAG_TIMEOUTS,
    NCCL_TIMEOUT,
    NodeReader,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.local_host import LocalHost

PROG = "gpuops-gpu-health"
CONFIG_PATH = "/etc/gpuops/gpu-health.json"
LEVELS = ("quick", "standard", "extended")
# key: (default, type or tuple of choices)
CONFIG_DEFAULTS = {
    "level": ("quick", LEVELS),
    "command_timeout": (30, int),
    "diag_timeout": (None, int),
    "nvidia_smi_path": (None, str),
    "all_reduce_perf_path": (None, str),
    "kernel_log": (None, str),
    "kernel_log_source": ("auto", ("auto", "journalctl", "dmesg", "none")),
    "kernel_log_window": ("since_last_run", ("since_last_run", "boot")),
    "infiniband_root": (None, str),
    "expected_gpu_count": (None, int),
    "expected_gpu_model": (None, str),
    "expected_driver_version": (None, str),
    "expected_ib_ports": ([], list),
    "expected_ib_port_count": (None, int),
    "expected_ib_rate": (None, int),
    "expected_nvlinks": (None, int),
    "gpudirect_rdma": (gpudirect_rdma.DEFAULT_SETTING, gpudirect_rdma.SETTINGS),
    "expected_pcie_width": (None, int),
    "expected_pcie_gen": (None, int),
    "pcie_baseline": ({}, dict),
    "mig_profile_set": (None, dict),  # names the GPU instances in facts.gpus[].mig (gpu_health's option)
    "mig_declared": (None, dict),  # the declared MIG layout the mig_layout check compares with (gpu_health's option)
    "thresholds": ({}, dict),
    "rate_thresholds": ({}, dict),
    "baseline_max_regression": (node_baseline.MAX_REGRESSION, float),
    "fleet_nccl_busbw_gbps": (None, float),
    "skip_checks": ([], list),
    "state_dir": ("/var/lib/gpuops-health", str),
    "lock_wait": (10, int),
    "time_budget": (None, int),
    "prometheus_textfile": (None, str),
    "slurm_drain": (False, bool),
    "slurm_scontrol_path": (None, str),
    "slurm_node_name": (None, str),
    "slurm_timeout": (10, int),
    "slurm_reason_prefix": ("gpuops-health", str),
    "root": ("/", str),
}
EXTRA_CHECKS = node_history.CHECKS
BOOT_ID = "/proc/sys/kernel/random/boot_id"
_STATE = re.compile(r"\bState=(\S+)")
# slurmd kills HealthCheckProgram after 60 s (issue 25); the whole run at level quick stays well inside it.
QUICK_BUDGET = 45  # s
CHECK_FAILED = "check failed"
MAX_CAUSE = 200  # characters of a cause in a Slurm reason
_REASON = re.compile(r"\bReason=(.*?)(?: \[[^\]@]*@[^\]]*\])?(?= [A-Z][A-Za-z]*=|$)")


class ConfigError(Exception):
    """The configuration, the command line or a file it names is wrong (exit 2)."""


def load_config(path, overrides=None):
    """Defaults, then the JSON file at ``path`` (absent: defaults), then ``overrides``; checked key by key."""
    config = {key: value for key, (value, _kind) in CONFIG_DEFAULTS.items()}
    data = {}
    if path and os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError) as error:
            raise ConfigError("%s: %s" % (path, error)) from error
        if not isinstance(data, dict):
            raise ConfigError("%s: a JSON object is expected" % path)
    elif path and path != CONFIG_PATH:
        raise ConfigError("%s: no such file" % path)
    for source, values in ((path, data), ("command line", overrides or {})):
        for key, value in values.items():
            if key not in CONFIG_DEFAULTS:
                raise ConfigError("%s: unknown key %r (known: %s)" % (source, key, ", ".join(sorted(CONFIG_DEFAULTS))))
            config[key] = _checked(source, key, value)
    found = thresholds.problems(config["thresholds"])
    if found:
        raise ConfigError("thresholds: %s" % "; ".join(found))
    try:
        error_rates.thresholds(config["rate_thresholds"])
    except ValueError as error:
        raise ConfigError(str(error)) from error
    known = set(health_checks.CHECKS) | set(EXTRA_CHECKS)
    unknown = set(config["skip_checks"]) - known
    if unknown:
        raise ConfigError(
            "skip_checks: unknown %s (known: %s)" % (", ".join(sorted(unknown)), ", ".join(sorted(known)))
        )
    return config


def time_budget(config):
    """Seconds the whole run may take: ``time_budget``, else 45 s plus what the level's own long tools need
    (``dcgmi diag`` from standard, ``all_reduce_perf`` at extended; those levels are not slurmd's health check)."""
    if config["time_budget"]:
        return config["time_budget"]
    extra = 0
    if config["level"] in ("standard", "extended"):
        extra += config["diag_timeout"] or DIAG_TIMEOUTS["1" if config["level"] == "standard" else "2"]
    if config["level"] == "extended":
        extra += NCCL_TIMEOUT
    return QUICK_BUDGET + extra


def drain_reserve(config):
    """Seconds kept at the budget's end for a drain: ``scontrol show node`` then ``scontrol update``."""
    return 2 * config["slurm_timeout"] + KILL_AFTER


def _checked(source, key, value):
    default, kind = CONFIG_DEFAULTS[key]
    if value is None:
        return default  # null in the file: the default (the role writes every key it knows)
    if isinstance(kind, tuple):
        if value not in kind:
            raise ConfigError("%s: %s must be one of %s, not %r" % (source, key, ", ".join(kind), value))
        return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise ConfigError("%s: %s must be a %s, not %r" % (source, key, kind.__name__, value))
    return value


# --- Slurm ----------------------------------------------------------------------------------------


def slurm_node_name(config, environ):
    """The Slurm node name: the configured one, ``SLURMD_NODENAME`` (set for prologs), else ``hostname -s``."""
    return config.get("slurm_node_name") or environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def drain_decision(show_output, reason, prefix):
    """What to do with the node's current Slurm state (``scontrol show node -o`` output).

    ``drain`` (not drained, or drained by this command for another reason), ``same`` (drained with this
    reason already), ``keep`` (drained or down with someone else's reason: theirs stays).
    """
    state_match = _STATE.search(show_output or "")
    state = state_match.group(1).upper() if state_match else ""
    reason_match = _REASON.search(show_output or "")
    current = reason_match.group(1).strip() if reason_match else ""
    taken = "DRAIN" in state or state.startswith("DOWN") or "FAIL" in state
    if not taken or not current:
        return "drain"
    if current == reason or (len(current) > 40 and reason.startswith(current)):
        return "same"
    if current.startswith(prefix + ":"):
        return "drain"
    return "keep"


def drain_argv(scontrol, node, reason):
    return [scontrol, "update", "nodename=%s" % node, "state=drain", "reason=%s" % reason]


def drain(reader, host, config, line):
    """Drain this node in Slurm with ``line`` as the reason; returns ``{node, done, detail}``."""
    scontrol = config["slurm_scontrol_path"] or host.get_bin_path("scontrol")
    node = slurm_node_name(config, host.environ)
    if not scontrol:
        return {
            "node": node, "done": False,
            "detail": "scontrol not found (slurmd passes no PATH): set slurm_scontrol_path; the node was not drained",
        }  # fmt: skip
    reason = "%s: %s" % (config["slurm_reason_prefix"], line)
    timeout = config["slurm_timeout"]
    rc, out, err, timed_out = reader.run([scontrol, "show", "node", node, "-o"], timeout=timeout)
    if rc != 0:
        why = "timed out" if timed_out else "rc=%s %s" % (rc, (err or out).strip()[:200])
        return {"node": node, "done": False, "detail": "scontrol show node %s failed (%s): not drained" % (node, why)}
    decision = drain_decision(out, reason, config["slurm_reason_prefix"])
    if decision == "keep":
        return {"node": node, "done": False, "detail": "already drained or down with another reason: kept"}
    if decision == "same":
        return {"node": node, "done": True, "detail": "already drained with this reason"}
    rc, out, err, timed_out = reader.run(drain_argv(scontrol, node, reason), timeout=timeout)
    if rc != 0:
        why = "timed out" if timed_out else "rc=%s %s" % (rc, (err or out).strip()[:200])
        return {"node": node, "done": False, "detail": "scontrol update failed (%s)" % why}
    return {"node": node, "done": True, "detail": "drained: %s" % reason}


# --- one run --------------------------------------------------------------------------------------


def reader_params(config):
    """The parameters :class:`NodeReader` reads, from the command's configuration."""
    return {
        "level": config["level"],
        "nvidia_smi_path": config["nvidia_smi_path"],
        "nvidia_smi_xml": None,
        "kernel_log": config["kernel_log"],
        "kernel_log_source": config["kernel_log_source"],
        "nvlink_status": None,
        "nvlink_errors": None,
        "infiniband_root": config["infiniband_root"],
        "fabricmanager_state": None,
        "dcgm_diag_json": None,
        "nccl_output": None,
        "all_reduce_perf_path": config["all_reduce_perf_path"],
        "command_timeout": config["command_timeout"],
        "diag_timeout": config["diag_timeout"],
        "skip_checks": [name for name in config["skip_checks"] if name in health_checks.CHECKS],
    }


def evaluate_options(config):
    keys = (
        "expected_gpu_count", "expected_gpu_model", "expected_driver_version", "expected_ib_ports",
        "expected_ib_port_count", "expected_ib_rate", "expected_nvlinks", "expected_pcie_width", "expected_pcie_gen",
        "pcie_baseline", "thresholds", "skip_checks", "gpudirect_rdma", "mig_profile_set", "mig_declared",
    )  # fmt: skip
    return {key: config[key] for key in keys}


def run_once(config, host, now, state_store=None, lock_wait=None, drain_wanted=False, started=None,
             clock=time.monotonic):  # fmt: skip
    """Judge the node once, drain it when unhealthy and ``drain_wanted``, store what the next run needs.

    Returns the payload of ``--json`` (without the textfile). ``started``: the ``clock()`` value the run's time
    budget counts from (default now).
    """
    started = clock() if started is None else started
    deadline = started + time_budget(config)
    tools_deadline = deadline - (drain_reserve(config) if drain_wanted else 0)
    hostname = socket.gethostname()
    boot_id = read_value(under(config["root"], BOOT_ID))
    notes = []
    state, saved, locked = health_state.empty(hostname), False, False
    if state_store is not None:
        wait = config["lock_wait"] if lock_wait is None else lock_wait
        locked = state_store.lock(max(0, min(wait, (tools_deadline - clock()) / 3)))
        if locked:
            state, note = state_store.load(hostname)
        else:
            state, note = state_store.load(hostname, set_aside=False)
            notes.append("%s: judged from what the last run left, nothing stored" % state_store.lock_error)
        if note:
            notes.append(note)
    try:
        cursor = (state.get("cursor") or {}).get("time")
        since = None
        if config["kernel_log_window"] == "since_last_run" and cursor:
            since = kernel_log.parse_since(time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(cursor)))
        reader = NodeReader(host, root=config["root"], deadline=tools_deadline, clock=clock)
        inputs = reader.read_all(False, since)
        notes.extend(reader.notes)
        inputs["kernel"], reopened = open_findings.reopen(inputs["kernel"], state["open"], boot_id)
        if reopened:
            notes.append("%d fatal kernel-log finding(s) of earlier runs not acted on yet: judged again" % reopened)
        verdict = health_checks.evaluate(inputs, evaluate_options(config))
        history_options = {
            key: config[key]
            for key in ("rate_thresholds", "baseline_max_regression", "fleet_nccl_busbw_gbps", "skip_checks")
        }
        history_options["boot_id"] = boot_id
        verdict, stored, history_notes = node_history.judge(inputs, verdict, state, now, history_options)
        notes.extend(history_notes)
        reason = node_verdict.reason(verdict)
        # the node's own history was lost (its open findings, baselines, cursor): a failed check, once
        check_failed = None
        if verdict["healthy"] and locked and state_store.set_aside:
            check_failed = "%s: %s" % (CHECK_FAILED, state_store.set_aside)
        drained = None
        if (reason or check_failed) and drain_wanted:
            slurm = NodeReader(host, root=config["root"], deadline=deadline, clock=clock)
            drained = drain(slurm, host, config, reason or check_failed[:MAX_CAUSE])
            reader.commands.extend(slurm.commands)
            if not drained["done"]:
                notes.append("slurm: %s" % drained["detail"])
        acted_on = bool(drained and drained["done"])
        pending_remap = mig_health.pending_remap((inputs.get("smi") or {}).get("gpus") or [])
        stored["open"] = open_findings.still_open(inputs["kernel"], state["open"], boot_id, acted_on, pending_remap)
        if locked:
            problem = state_store.save(stored)
            saved = problem is None
            if problem:
                notes.append(problem)
    finally:
        if locked:
            state_store.unlock()
    return {
        "healthy": verdict["healthy"],
        "reason": reason,
        "level": config["level"],
        "host": hostname,
        "window": {"kernel_log_since": since.isoformat() if since else "boot"},
        "checks": verdict["checks"],
        "actions": verdict["actions"],
        "summary": verdict["summary"],
        "facts": verdict["facts"],
        "commands": reader.commands,
        "notes": notes,
        "state_saved": saved,
        "open_findings": len(stored["open"]),
        "check_failed": check_failed,
        "drain": drained,
        "verdict": verdict,
    }


def prometheus_text(verdict, now, duration):
    return prometheus_textfile.render_prometheus(verdict, now) + (
        "# HELP gpuops_gpu_health_duration_seconds How long the node-side health command took.\n"
        "# TYPE gpuops_gpu_health_duration_seconds gauge\n"
        "gpuops_gpu_health_duration_seconds %.3f\n" % duration
    )


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="GPU health check of this node (NHC convention: exit 0 healthy, 1 unhealthy with one line, "
        "2 configuration error, 3 the command failed).",
    )
    parser.add_argument("-c", "--config", default=CONFIG_PATH, help="JSON configuration (default %(default)s)")
    parser.add_argument("-l", "--level", choices=LEVELS, help="quick (seconds), standard (+dcgmi diag -r 1), extended")
    parser.add_argument("--json", action="store_true", help="print the whole verdict as JSON")
    parser.add_argument("--drain", action="store_true", help="drain this node in Slurm with the reason when unhealthy")
    parser.add_argument("--no-drain", action="store_true", help="never drain (overrides slurm_drain)")
    parser.add_argument("--since", choices=("last-run", "boot"), help="kernel log window (default: kernel_log_window)")
    parser.add_argument("--no-state", action="store_true", help="neither read nor write the stored state")
    parser.add_argument("--state-dir", help="stored state directory (default /var/lib/gpuops-health)")
    parser.add_argument("--nvidia-smi", dest="nvidia_smi_path", help="nvidia-smi to run")
    parser.add_argument("--kernel-log", help="read this file instead of journalctl/dmesg")
    parser.add_argument("--prometheus-textfile", help="node_exporter textfile to write")
    parser.add_argument("--time-budget", type=int, help="seconds the whole run may take (default: time_budget)")
    parser.add_argument(
        "--check-config", action="store_true",
        help="check the configuration (with --drain: that slurm_scontrol_path is an executable) and exit 0 or 2",
    )  # fmt: skip
    parser.add_argument("-v", "--verbose", action="store_true", help="also print warnings and notes when healthy")
    return parser.parse_args(argv)


def _overrides(args):
    overrides = {}
    for key in ("level", "nvidia_smi_path", "kernel_log", "prometheus_textfile", "time_budget"):
        if getattr(args, key):
            overrides[key] = getattr(args, key)
    if args.state_dir:
        overrides["state_dir"] = args.state_dir
    if args.drain:
        overrides["slurm_drain"] = True
    if args.no_drain:
        overrides["slurm_drain"] = False
    return overrides


def check_config(config):
    """Problems ``--check-config`` finds beyond :func:`load_config`'s: a drain needs a runnable ``scontrol``."""
    if not config["slurm_drain"]:
        return []
    path = config["slurm_scontrol_path"]
    if not path:
        return ["slurm_scontrol_path is not set: slurmd passes no PATH, so a drain needs scontrol's full path"]
    if not (os.path.isabs(path) and os.path.isfile(path) and os.access(path, os.X_OK)):
        return ["slurm_scontrol_path %s is not an executable file" % path]
    return []


def fallback_config(path, overrides):
    """What a failed run needs to drain: the defaults, the file's valid ``slurm_*`` and ``root`` values, the
    command line's; everything else is ignored (the configuration is what failed)."""
    config = {key: value for key, (value, _kind) in CONFIG_DEFAULTS.items()}
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError, TypeError):
        data = {}
    for values in (data if isinstance(data, dict) else {}, overrides):
        for key, value in values.items():
            if key in CONFIG_DEFAULTS and (key.startswith("slurm_") or key == "root"):
                try:
                    config[key] = _checked("fallback", key, value)
                except ConfigError:
                    continue
    return config


def drain_failed_check(config, environ, runner, cause):
    """Drain the node because the check itself failed (``<prefix>: check failed: <cause>``), within a bound."""
    host = LocalHost(reader_params(config), runner=runner, environ=environ, error=ConfigError)
    reader = NodeReader(host, root=config["root"], deadline=time.monotonic() + drain_reserve(config) + KILL_AFTER)
    return drain(reader, host, config, "%s: %s" % (CHECK_FAILED, cause[:MAX_CAUSE]))


def main(argv=None, environ=None, runner=subprocess.run, out=None, err=None):
    """The command. Returns the exit code; prints one line when unhealthy (everything with ``--json``)."""
    out = out or sys.stdout
    err = err or sys.stderr
    started = time.monotonic()
    now = time.time()
    argv = sys.argv[1:] if argv is None else argv
    environ = dict(os.environ if environ is None else environ)
    try:
        args = parse_args(argv)
    except SystemExit as stop:
        if stop.code in (0, None):
            return node_verdict.EXIT_HEALTHY
        return _failed(
            fallback_config(CONFIG_PATH, {}), "--drain" in argv and "--no-drain" not in argv, environ, runner, out,
            "command line: %s" % " ".join(argv), node_verdict.EXIT_CONFIG,
        )  # fmt: skip
    overrides = _overrides(args)
    try:
        config = load_config(args.config, overrides)
    except ConfigError as error:
        fallback = fallback_config(args.config, overrides)
        wanted = (args.drain or fallback["slurm_drain"]) and not args.no_drain and not args.check_config
        return _failed(fallback, wanted, environ, runner, out, "configuration: %s" % error, node_verdict.EXIT_CONFIG)
    if args.check_config:
        found = check_config(config)
        for problem in found:
            out.write("%s: configuration: %s\n" % (PROG, problem))
        if not found:
            out.write("%s: configuration %s is valid\n" % (PROG, args.config))
        return node_verdict.EXIT_CONFIG if found else node_verdict.EXIT_HEALTHY
    if args.since is not None:
        config["kernel_log_window"] = "boot" if args.since == "boot" else "since_last_run"
    try:
        host = LocalHost(reader_params(config), runner=runner, environ=environ, error=ConfigError)
        store = None if args.no_state else health_state.HealthState(config["state_dir"])
        payload = run_once(config, host, now, store, drain_wanted=config["slurm_drain"], started=started)
    except Exception as error:  # pylint: disable=broad-exception-caught  # fails closed: drains, one line
        cause = "internal error: %s: %s" % (type(error).__name__, error)
        return _failed(config, config["slurm_drain"], environ, runner, out, cause, node_verdict.EXIT_ERROR)
    verdict = payload.pop("verdict")
    duration = time.monotonic() - started
    if config["prometheus_textfile"]:
        try:
            health_state.write_text_atomic(config["prometheus_textfile"], prometheus_text(verdict, now, duration))
        except OSError as error:
            payload["notes"].append("Prometheus textfile %s not written: %s" % (config["prometheus_textfile"], error))
    code = node_verdict.EXIT_ERROR if payload["check_failed"] else node_verdict.exit_code(verdict)
    payload["exit_code"] = code
    payload["duration_s"] = round(time.monotonic() - started, 3)
    if args.json:
        out.write(json.dumps(payload, indent=2, sort_keys=True) + "\n")
        return code
    if payload["reason"] or payload["check_failed"]:
        out.write((payload["reason"] or "%s: %s" % (PROG, payload["check_failed"])) + "\n")
    if args.verbose:
        for check in payload["checks"]:
            if check["status"] == "warn":
                err.write("warn: %s\n" % node_verdict.describe(check))
        for note in payload["notes"]:
            err.write("note: %s\n" % note)
    elif payload["notes"] and not payload["healthy"]:
        err.write("".join("note: %s\n" % note for note in payload["notes"]))
    return code


def _failed(config, wanted, environ, runner, out, cause, code):
    """The check itself failed: one line, and with ``--drain`` the node drained saying so."""
    out.write("%s: %s\n" % (PROG, cause))
    if wanted:
        try:
            result = drain_failed_check(config, environ, runner, cause)
        except Exception as error:  # pylint: disable=broad-exception-caught  # the line above is already out
            result = {"done": False, "detail": "%s: %s" % (type(error).__name__, error)}
        out.write("%s: slurm: %s\n" % (PROG, result["detail"]))
    return code
