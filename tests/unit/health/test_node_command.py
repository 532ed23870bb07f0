"""gpuops-gpu-health, the node-side command: exit codes, one line, --json, timeouts, the stored cursor, Slurm drain.

Tools are answered by a stand-in for ``subprocess.run`` from the captured fixtures; the ``scontrol show node -o``
lines are reconstructed from Slurm 23.11's format (one line, ``Reason=<text> [<user>@<time>]``).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.health import node_command, node_verdict

from .conftest import FIXTURES
from .test_error_rates import H100, with_counts

SHOW_IDLE = (
    "NodeName=gpu-a01 Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUTot=224 State=IDLE ThreadsPerCore=2 "
    "Partitions=gpu BootTime=2024-03-12T08:58:11 CfgTRES=cpu=224,gres/gpu=8 CurrentWatts=0 AveWatts=0"
)
SHOW_ADMIN = (
    SHOW_IDLE.replace("State=IDLE", "State=IDLE+DRAIN") + " Reason=PSU swap, ticket 4711 [admin@2024-03-12T10:00:00]"
)


class Tools:
    """``subprocess.run`` of a node: answers by tool name, records every argv."""

    def __init__(self, smi=H100, show=SHOW_IDLE, log=None, hang=(), update_rc=0, fail=(), clock=None, takes=None):
        self.smi = smi
        self.show = show
        self.log = log or (FIXTURES / "kernel-log/clean-journal-short-iso.log").read_text(encoding="utf-8")
        self.hang = set(hang)
        self.update_rc = update_rc
        self.fail = set(fail)  # tools whose run raises an unexpected error (a defect, not a tool failure)
        self.clock = clock  # a FakeClock the tools move: takes[name] seconds each, the whole limit when hung
        self.takes = takes or {}
        self.calls = []
        self.timeouts = []

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        self.timeouts.append(kwargs.get("timeout"))
        assert kwargs["env"]["LC_ALL"] == "C"
        assert kwargs["stdin"] == subprocess.DEVNULL
        args = list(argv)
        assert os.path.basename(args[0]) == "timeout", "every tool runs under coreutils timeout: %s" % args
        limit = int(args[3])
        args = args[4:]
        name = os.path.basename(args[0])
        key = " ".join([name, *args[1:3]])
        if name in self.fail:
            raise RuntimeError("%s: unexpected" % name)
        if self.clock is not None:
            self.clock.now += limit if key in self.hang else self.takes.get(key, 0)
        if name in self.hang or key in self.hang:
            return subprocess.CompletedProcess(argv, 124, b"", b"")
        if name == "scontrol" and args[1] == "update":
            return subprocess.CompletedProcess(argv, self.update_rc, b"", b"slurm_update error: Unable to contact")
        answers = {
            "nvidia-smi": lambda: self.smi if args[1:] == ["-q", "-x"] else (
                FIXTURES / "nvlink/h100-8x-status-healthy.txt").read_text(encoding="utf-8"),
            "journalctl": lambda: self.log,
            "systemctl": lambda: "active\n",
            "scontrol": lambda: self.show if args[1] == "show" else "",
        }  # fmt: skip
        return subprocess.CompletedProcess(argv, 0, answers[name]().encode(), b"")


@pytest.fixture
def node(tmp_path):
    """A node root (boot id, /proc/stat), a tool directory on PATH, a config file and a state directory."""
    root = tmp_path / "root"
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("3f1c0b9e-0d4e-4a39-9f60-1d2c3b4a5e6f\n")
    (root / "proc/stat").write_text("btime 1710233891\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("nvidia-smi", "journalctl", "systemctl", "scontrol", "timeout"):
        (bin_dir / tool).write_text("#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    config = {
        "root": str(root),
        "state_dir": str(tmp_path / "state"),
        "infiniband_root": str(FIXTURES / "infiniband/healthy-8x-ndr"),
        "expected_gpu_count": 8,
        "kernel_log_source": "journalctl",
        "prometheus_textfile": str(tmp_path / "gpuops_gpu_health.prom"),
        "slurm_node_name": "gpu-a01",
    }
    (tmp_path / "gpu-health.json").write_text(json.dumps(config))
    return {"tmp": tmp_path, "config": str(tmp_path / "gpu-health.json"), "env": {"PATH": str(bin_dir)}}


def run(node, tools, *args):
    out, err = io.StringIO(), io.StringIO()
    code = node_command.main(["-c", node["config"], *args], environ=node["env"], runner=tools, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_a_healthy_node_exits_zero_silently_and_writes_the_textfile(node):
    tools = Tools()
    code, out, err = run(node, tools)
    assert (code, out, err) == (0, "", "")
    assert all(timeout is not None for timeout in tools.timeouts)
    assert [os.path.basename(c[4]) for c in tools.calls] == ["nvidia-smi", "journalctl", "nvidia-smi", "systemctl"]
    text = (node["tmp"] / "gpuops_gpu_health.prom").read_text()
    assert "gpuops_gpu_health_healthy 1" in text
    assert 'check="ecc_rate"' in text
    assert "gpuops_gpu_health_duration_seconds" in text


def test_unhealthy_prints_one_line_naming_gpu_check_and_action(node):
    code, out, _err = run(node, Tools(smi=with_counts(H100, 3, uncorrectable=12)))
    assert code == node_verdict.EXIT_UNHEALTHY
    assert out.splitlines() == [
        "GPU 3 (0000:5d:00.0) ecc_errors: 12 uncorrectable ECC errors since the driver loaded; action: drain and reset"
    ]


def test_json_carries_the_whole_verdict(node):
    code, out, _err = run(node, Tools(), "--json")
    payload = json.loads(out)
    assert code == 0
    assert payload["healthy"]
    assert payload["exit_code"] == 0
    assert payload["reason"] is None
    assert payload["window"] == {"kernel_log_since": "boot"}
    assert any("first run: baseline set" in note for note in payload["notes"])
    assert all(command.split()[0].endswith("timeout") for command in payload["commands"])


def test_the_second_run_reads_the_kernel_log_since_the_first_and_judges_rates(node):
    run(node, Tools())
    tools = Tools(smi=with_counts(H100, 3, correctable=25))
    code, out, _err = run(node, tools, "--json")
    payload = json.loads(out)
    journal = next(c for c in tools.calls if os.path.basename(c[4]) == "journalctl")
    assert "--since" in journal
    assert payload["window"]["kernel_log_since"] != "boot"
    assert code == 1
    assert payload["reason"].startswith("GPU 3 (0000:5d:00.0) ecc_rate: 25 correctable (single-bit) ECC errors in ")
    assert payload["reason"].endswith("; action: drain and inspect the hardware (RMA)")


def test_a_hung_tool_is_bounded_and_fails_closed(node):
    code, out, _err = run(node, Tools(hang=("journalctl",)))
    assert code == 1
    assert "xid: journalctl failed (rc=124)" in out


def test_drain_puts_the_reason_into_slurm(node):
    tools = Tools(smi=with_counts(H100, 3, uncorrectable=12))
    code, out, _err = run(node, tools, "--drain")
    update = [c[4:] for c in tools.calls if c[4:6] == [c[4], "update"]]
    assert code == 1
    assert update == [
        [
            update[0][0], "update", "nodename=gpu-a01", "state=drain",
            "reason=gpuops-health: " + out.strip(),
        ]
    ]  # fmt: skip


def test_drain_keeps_a_reason_someone_else_gave(node):
    tools = Tools(smi=with_counts(H100, 3, uncorrectable=12), show=SHOW_ADMIN)
    code, _out, err = run(node, tools, "--drain")
    assert code == 1
    assert not [c for c in tools.calls if "update" in c]
    assert "already drained or down with another reason: kept" in err


STAMP = " [root@2024-03-12T10:00:00]"


@pytest.mark.parametrize(
    ("show", "decision"),
    [
        (SHOW_IDLE, "drain"),
        (SHOW_ADMIN, "keep"),
        (SHOW_IDLE.replace("State=IDLE", "State=MIXED+DRAIN") + " Reason=gpuops-health: old" + STAMP,
         "drain"),
        (SHOW_IDLE.replace("State=IDLE", "State=IDLE+DRAIN") + " Reason=gpuops-health: GPU 3 x" + STAMP,
         "same"),
        (SHOW_IDLE.replace("State=IDLE", "State=DOWN*") + " Reason=Not responding [slurm@2024-03-12T10:00:00]", "keep"),
    ],
)  # fmt: skip
def test_drain_decision(show, decision):
    assert node_command.drain_decision(show, "gpuops-health: GPU 3 x", "gpuops-health") == decision


def test_configuration_errors_exit_two_with_one_line(node, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"levle": "quick"}))
    code, out, _err = run(dict(node, config=str(bad)), Tools())
    assert code == node_verdict.EXIT_CONFIG
    assert out.startswith("gpuops-gpu-health: configuration: ")
    assert "unknown key 'levle'" in out
    bad.write_text(json.dumps({"rate_thresholds": {"ecc_correctable_per_hour": -1}}))
    assert run(dict(node, config=str(bad)), Tools())[0] == node_verdict.EXIT_CONFIG
    # threshold values are checked against the table's types, not only their names
    bad.write_text(json.dumps({"thresholds": {"temperature_warn": "85", "nccl_busbw_gbps": 400, "retired_pages": -2}}))
    code, out, _err = run(dict(node, config=str(bad)), Tools())
    assert code == node_verdict.EXIT_CONFIG
    assert "retired_pages is -2: a limit is 0 or more; temperature_warn is '85', not an integer" in out
    bad.write_text(json.dumps({"thresholds": {"temperature_wran": 80}}))
    assert (
        "unknown temperature_wran (known: ecc_aggregate_uncorrectable" in run(dict(node, config=str(bad)), Tools())[1]
    )
    assert run(dict(node, config=str(tmp_path / "absent.json")), Tools())[0] == node_verdict.EXIT_CONFIG


def test_a_broken_state_file_starts_again_and_says_so(node):
    state = node["tmp"] / "state"
    state.mkdir()
    (state / "state.json").write_text("{not json")
    code, out, _err = run(node, Tools(), "--json")
    assert code == node_verdict.EXIT_ERROR
    assert any("unreadable" in note for note in json.loads(out)["notes"])
    assert json.loads(out)["check_failed"].startswith("check failed: stored state unusable (unreadable (")
    assert json.loads((state / "state.json").read_text())["version"] == 1


def test_a_run_holding_the_lock_leaves_the_state_alone(node):
    from ansible_collections.gpuops.cluster.plugins.module_utils.health import health_state

    holder = health_state.HealthState(str(node["tmp"] / "state"))
    assert holder.lock(0)
    try:
        config = node_command.load_config(node["config"], {"lock_wait": 0})
        host = node_command.LocalHost(node_command.reader_params(config), runner=Tools(), environ=node["env"])
        payload = node_command.run_once(config, host, 1000.0, health_state.HealthState(str(node["tmp"] / "state")))
    finally:
        holder.unlock()
    assert payload["healthy"]
    assert not payload["state_saved"]
    assert any("another run holds" in note for note in payload["notes"])


def test_the_role_installs_every_module_util_the_command_imports():
    import ast
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[3]
    listed = set(
        yaml.safe_load((root / "roles/gpu_healthcheck/vars/main.yml").read_text())["gpu_healthcheck_module_files"]
    )
    prefix = "ansible_collections.gpuops.cluster.plugins.module_utils."
    needed, todo = set(), ["health/node_command.py"]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        tree = ast.parse((root / "plugins/module_utils" / name).read_text())
        for node in ast.walk(tree):
            # from ...module_utils.health import x, and from ...module_utils import managed_file
            if isinstance(node, ast.ImportFrom) and ((node.module or "") + ".").startswith(prefix):
                base = node.module[len(prefix) :].replace(".", "/")
                for alias in node.names:
                    candidate = "%s%s.py" % (base + "/" if base else "", alias.name)
                    todo.append(candidate if (root / "plugins/module_utils" / candidate).is_file() else base + ".py")
    assert needed - listed == set()
    assert "health/__init__.py" in listed


# --- issue 25: fails closed, evidence kept until acted on, one time budget -----------------------------------
XID79 = "2024-03-12T10:00:00+0000 gpu-a01 kernel: NVRM: Xid (PCI:0000:5d:00): 79, pid=0, name=x, GPU has fallen off the bus.\n"  # noqa: E501
CLEAN = (FIXTURES / "kernel-log/clean-journal-short-iso.log").read_text(encoding="utf-8")


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def updates(tools):
    return [c[4:] for c in tools.calls if len(c) > 5 and c[5] == "update"]


def drain_reason(tools):
    found = updates(tools)
    assert len(found) == 1, tools.calls
    return found[0][-1].split("=", 1)[1]


def test_a_state_field_of_the_wrong_shape_is_set_aside_and_the_run_goes_on(node):
    """Only the version was checked: one field of the wrong shape raised inside the run (exit 3, no drain)."""
    state = node["tmp"] / "state"
    state.mkdir()
    (state / "state.json").write_text(json.dumps({"version": 1, "samples": [{"time": "yesterday"}], "xids": {}}))
    tools = Tools()
    code, out, _err = run(node, tools, "--json", "--drain")
    payload = json.loads(out)
    assert code == node_verdict.EXIT_ERROR  # the hardware is judged healthy; the node's history was lost
    assert payload["healthy"]
    assert payload["state_saved"]
    assert any("samples has the wrong shape; xids has the wrong shape: set aside as " in n for n in payload["notes"])
    assert drain_reason(tools).startswith(
        "gpuops-health: check failed: stored state unusable (samples has the wrong shape; xids has the wrong "
        "shape), set aside as "
    )
    aside = [name for name in os.listdir(state) if name.startswith("state.json.unreadable-")]
    assert len(aside) == 1
    assert json.loads((state / aside[0]).read_text())["samples"] == [{"time": "yesterday"}]  # kept for inspection
    assert json.loads((state / "state.json").read_text())["samples"][0]["time"] > 0
    assert run(node, Tools(), "--drain")[0] == 0  # once: the fresh state is good


def test_a_state_directory_that_cannot_be_written_is_a_note_not_a_failure(node, tmp_path):
    """A read-only /var or a full disk: opening the lock or saving raised (exit 3, the node stayed in service)."""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    code, out, _err = run(node, Tools(), "--json", "--state-dir", str(blocked / "state"))
    payload = json.loads(out)
    assert code == 0
    assert payload["healthy"]
    assert any("cannot open the lock in " in note for note in payload["notes"])
    tools = Tools(smi=with_counts(H100, 3, uncorrectable=12))
    code, out, _err = run(node, tools, "--drain", "--state-dir", str(blocked / "state"))
    assert code == 1
    assert drain_reason(tools).startswith("gpuops-health: GPU 3 (0000:5d:00.0) ecc_errors: 12 uncorrectable")


def test_a_failed_save_is_a_note(node, monkeypatch):
    from ansible_collections.gpuops.cluster.plugins.module_utils.health import health_state

    def full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(health_state.tempfile, "mkstemp", full)
    code, out, _err = run(node, Tools(), "--json")
    payload = json.loads(out)
    assert code == 0
    assert not payload["state_saved"]
    assert any("state not saved in " in n and "No space left on device" in n for n in payload["notes"])


def test_a_configuration_error_drains_with_check_failed(node, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"levle": "quick", "slurm_node_name": "gpu-a01"}))
    tools = Tools()
    code, out, _err = run(dict(node, config=str(bad)), tools, "--drain")
    assert code == node_verdict.EXIT_CONFIG
    reason = drain_reason(tools)
    assert reason.startswith("gpuops-health: check failed: configuration: ")
    assert "unknown key 'levle'" in reason
    assert "slurm: drained: gpuops-health: check failed" in out
    # someone else's drain stays
    tools = Tools(show=SHOW_ADMIN)
    assert run(dict(node, config=str(bad)), tools, "--drain")[0] == node_verdict.EXIT_CONFIG
    assert not updates(tools)
    # without --drain (an operator at the prompt): one line, nothing drained
    tools = Tools()
    assert run(dict(node, config=str(bad)), tools)[0] == node_verdict.EXIT_CONFIG
    assert not tools.calls


def test_an_internal_error_drains_with_check_failed(node):
    tools = Tools(fail=("journalctl",))
    code, out, _err = run(node, tools, "--drain")
    assert code == node_verdict.EXIT_ERROR
    assert drain_reason(tools) == "gpuops-health: check failed: internal error: RuntimeError: journalctl: unexpected"
    assert out.startswith("gpuops-gpu-health: internal error: RuntimeError")


def test_a_fatal_xid_stays_open_until_a_drain_is_confirmed(node):
    """The cursor moved before the drain: a failed scontrol update lost the Xid for every later run."""
    first = Tools(log=XID79, update_rc=1)
    code, _out, err = run(node, first, "--drain")
    assert code == 1
    assert "scontrol update failed" in err
    assert "xid: Xid 79" in drain_reason(first)
    second = Tools(log=CLEAN)  # the controller is back; the log since the last run has nothing new
    code, _out, _err = run(node, second, "--drain")
    journal = next(c for c in second.calls if os.path.basename(c[4]) == "journalctl")
    assert "--since" in journal
    assert code == 1
    assert "xid: Xid 79" in drain_reason(second)
    third = Tools(log=CLEAN)  # drained and confirmed: acted on
    assert run(node, third)[0] == 0


def test_a_run_without_drain_does_not_consume_the_evidence(node):
    assert run(node, Tools(log=XID79))[0] == 1  # an operator by hand
    slurm = Tools(log=CLEAN)
    assert run(node, slurm, "--drain")[0] == 1  # slurmd's next run
    assert "Xid 79" in drain_reason(slurm)


def test_someone_elses_drain_keeps_the_evidence_until_they_resume(node):
    kept = Tools(log=XID79, show=SHOW_ADMIN)
    assert run(node, kept, "--drain")[0] == 1
    assert not updates(kept)
    resumed = Tools(log=CLEAN)
    assert run(node, resumed, "--drain")[0] == 1
    assert "Xid 79" in drain_reason(resumed)


def test_a_reboot_closes_the_evidence(node):
    assert run(node, Tools(log=XID79))[0] == 1
    boot_id = node["tmp"] / "root/proc/sys/kernel/random/boot_id"
    boot_id.write_text("0b9e3f1c-0d4e-4a39-9f60-1d2c3b4a5e6f\n")
    assert run(node, Tools(log=CLEAN), "--drain")[0] == 0


def test_a_run_without_the_lock_reads_from_where_the_last_run_left(node):
    """It read the whole boot's log and drained again for an Xid handled hours ago."""
    from ansible_collections.gpuops.cluster.plugins.module_utils.health import health_state

    assert run(node, Tools(log=XID79), "--drain")[0] == 1  # drained, confirmed: acted on
    holder = health_state.HealthState(str(node["tmp"] / "state"))
    assert holder.lock(0)
    try:
        config = node_command.load_config(node["config"], {"lock_wait": 0})
        tools = Tools(log=XID79)  # journalctl answers the whole boot; the command must ask since the last run
        host = node_command.LocalHost(node_command.reader_params(config), runner=tools, environ=node["env"])
        payload = node_command.run_once(config, host, 2000.0, health_state.HealthState(str(node["tmp"] / "state")))
    finally:
        holder.unlock()
    journal = next(c for c in tools.calls if os.path.basename(c[4]) == "journalctl")
    assert "--since" in journal
    assert not payload["state_saved"]
    assert any("another run holds" in note and "nothing stored" in note for note in payload["notes"])


def test_one_time_budget_keeps_the_drain_inside_it(node):
    """A slow nvidia-smi -q -x then a hung nvlink -s: each within 40 s, together past slurmd's 60 s kill."""
    clock = FakeClock()
    slow = {"nvidia-smi -q -x": 8}
    tools = Tools(smi=with_counts(H100, 3, uncorrectable=12), clock=clock, takes=slow, hang=("nvidia-smi nvlink -s",))
    config = node_command.load_config(node["config"], {"slurm_drain": True})
    host = node_command.LocalHost(node_command.reader_params(config), runner=tools, environ=node["env"])
    start = clock()
    payload = node_command.run_once(config, host, 1000.0, None, drain_wanted=True, started=start, clock=clock)
    assert node_command.time_budget(config) == 45
    assert clock() - start <= 45
    assert payload["drain"]["done"], payload["drain"]
    assert "ecc_errors" in payload["reason"]
    nvlink = next(c for c in payload["checks"] if c["name"] == "nvlink" and c["status"] == "fail")
    assert "nvidia-smi nvlink -s failed (rc=124)" in nvlink["detail"]
    tool_limits = [int(c[3]) for c in tools.calls if os.path.basename(c[4]) != "scontrol"]
    assert tool_limits[0] == 15  # 45 s less the drain's 25 s and a kill grace
    assert max(tool_limits[1:]) < 15


def test_a_tool_left_without_time_is_not_run_and_its_check_fails(node):
    clock = FakeClock()
    tools = Tools(clock=clock, takes={"nvidia-smi -q -x": 40})
    config = node_command.load_config(node["config"], {})
    host = node_command.LocalHost(node_command.reader_params(config), runner=tools, environ=node["env"])
    payload = node_command.run_once(config, host, 1000.0, None, started=clock(), clock=clock)
    assert not payload["healthy"]
    assert any(c.startswith("not run (the run's time budget was spent): ") for c in payload["commands"])
    assert [c for c in payload["checks"] if c["status"] == "fail" and "time budget" in c["detail"]]


def test_check_config_refuses_a_drain_without_scontrol(node, tmp_path):
    """slurmd passes no PATH: a configuration that drains must name scontrol."""
    config = json.loads(Path(node["config"]).read_text())
    path = tmp_path / "checked.json"
    path.write_text(json.dumps(config))
    out = io.StringIO()
    code = node_command.main(["-c", str(path), "--check-config", "--drain"], environ={}, runner=Tools(), out=out)
    assert code == node_verdict.EXIT_CONFIG
    assert "slurm_scontrol_path is not set: slurmd passes no PATH" in out.getvalue()
    config["slurm_scontrol_path"] = node["env"]["PATH"] + "/scontrol"
    path.write_text(json.dumps(config))
    out = io.StringIO()
    assert node_command.main(["-c", str(path), "--check-config", "--drain"], environ={}, runner=Tools(), out=out) == 0
    config["levle"] = "quick"
    path.write_text(json.dumps(config))
    assert node_command.main(["-c", str(path), "--check-config"], environ={}, runner=Tools(), out=io.StringIO()) == 2
