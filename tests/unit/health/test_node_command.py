"""gpuops-gpu-health, the node-side command: exit codes, one line, --json, timeouts, the stored cursor, Slurm drain.

Tools are answered by a stand-in for ``subprocess.run`` from the captured fixtures; the ``scontrol show node -o``
lines are reconstructed from Slurm 23.11's format (one line, ``Reason=<text> [<user>@<time>]``).
"""

from __future__ import annotations

import io
import json
import os
import subprocess

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

    def __init__(self, smi=H100, show=SHOW_IDLE, log=None, hang=()):
        self.smi = smi
        self.show = show
        self.log = log or (FIXTURES / "kernel-log/clean-journal-short-iso.log").read_text(encoding="utf-8")
        self.hang = set(hang)
        self.calls = []
        self.timeouts = []

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        self.timeouts.append(kwargs.get("timeout"))
        assert kwargs["env"]["LC_ALL"] == "C"
        assert kwargs["stdin"] == subprocess.DEVNULL
        args = list(argv)
        assert os.path.basename(args[0]) == "timeout", "every tool runs under coreutils timeout: %s" % args
        args = args[4:]
        name = os.path.basename(args[0])
        if name in self.hang:
            return subprocess.CompletedProcess(argv, 124, b"", b"")
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
    assert code == 0
    assert any("unreadable" in note for note in json.loads(out)["notes"])
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
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefix):
                base = node.module[len(prefix) :].replace(".", "/")
                for alias in node.names:
                    candidate = "%s/%s.py" % (base, alias.name)
                    todo.append(candidate if (root / "plugins/module_utils" / candidate).is_file() else base + ".py")
    assert needed - listed == set()
    assert "health/__init__.py" in listed
