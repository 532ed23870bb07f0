"""roles/mps on a node that runs slurmd (issue 29 item 5): a change of the gres/mps lines drains the node first and
resumes it after, as roles/mig_layout does for a MIG layout (the shared steps of roles/slurm_hold).

On a stand-in node through ansible-playbook, with the stand-ins of test_mig_layout_slurm: nvidia-smi is the lab's
simulator (2 H100 SXM, MIG off); scontrol, sinfo and squeue the stand-in Slurm of test_upgrade_window (one state
file; drains and resumes change it, jobs end when it says). slurmd is installed and not running (no systemd here):
the restart is not run, the rest is.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import yaml

from tests.integration.playbook_run import run_playbook
from tests.integration.test_upgrade_window import stateful_slurm
from tests.unit.mig.test_gpu_mig_module import SIM, Lab

pytestmark = pytest.mark.integration

PLAYBOOK = "tests/integration/playbooks/mps_slurm.yml"
DRAIN = "Drain the node in Slurm before the change, and wait for its jobs"
BEGIN = "# BEGIN gpuops.cluster: the gres/mps of this node (role mps; do not edit)"
OPERATORS = "# the operator's lines, kept\nName=gpu File=/dev/nvidia[0-1]\n"
MISMATCH = "Fail where slurm.conf does not give the node the block's gres/mps"


class Node:
    """The stand-in node: its lab GPUs, its gres.conf and the stand-in Slurm's state."""

    def __init__(self, tmp_path, monkeypatch, slurm_node, jobs=(), **role_vars):
        self.tmp = tmp_path
        root = tmp_path / "node"
        root.mkdir()
        Lab(root)
        tools = tmp_path / "bin"
        tools.mkdir()
        (tools / "nvidia-smi").symlink_to(SIM)
        # slurmd installed, not running (no systemd here): what tasks/plan.yml reads with systemctl show
        systemctl = tools / "systemctl"
        systemctl.write_text("#!/bin/sh\necho LoadState=loaded\necho ActiveState=inactive\n")
        systemctl.chmod(0o755)
        _paths, self.state = stateful_slurm(tmp_path, {"gpu07": slurm_node}, list(jobs))
        monkeypatch.setenv("PATH", "%s:%s:%s" % (tools, self.state.parent, os.environ["PATH"]))
        monkeypatch.setenv("GPUOPS_LAB_ROOT", str(root))
        self.conf = root / "etc/slurm/gres.conf"
        self.conf.parent.mkdir(parents=True)
        self.conf.write_text(OPERATORS)
        (self.conf.parent / "slurm.conf").write_text("# the node's slurm.conf (configless nodes have none)\n")
        self.inventory = tmp_path / "inventory.yml"
        self.vars = {
            "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "gpuops_mps": {"scheduler": "slurm", "slurm_count": 100},
            "mps_nvidia_smi_path": str(tools / "nvidia-smi"),
            "mps_slurm_gres_conf": str(self.conf),
            "mps_resume_wait": 5,
            "mps_drain_poll_interval": 1,
            **role_vars,
        }
        self.runs = 0
        self.systemctl = str(systemctl)  # a role var (vars/main.yml): given as an extra var

    def declare(self, **mps):
        self.vars["gpuops_mps"] = {**self.vars["gpuops_mps"], **mps}

    def run(self, check=False):
        self.inventory.write_text(
            yaml.safe_dump(
                {"all": {"hosts": {"gpu07": {}}, "children": {"node": {"hosts": {"gpu07": {}}}}, "vars": self.vars}}
            )
        )
        self.runs += 1
        return run_playbook(
            PLAYBOOK,
            self.inventory,
            self.tmp / ("run%d" % self.runs),
            extravars={"mps_systemctl": self.systemctl},
            check=check,
        )

    def slurm(self):
        return json.loads(self.state.read_text())

    def log(self):
        return [(entry[2], entry[3]) for entry in self.slurm()["log"]]

    def mps_lines(self):
        return [line for line in self.conf.read_text().splitlines() if line.startswith("Name=mps")]


def in_service():
    return {"drain": False, "reason": "", "gres": "gpu:2,mps:200"}


def changed_tasks(run):
    return [result.task for result in run.changed]


def test_an_mps_count_change_drains_the_node_writes_gres_conf_and_gives_it_back_then_nothing(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch, in_service())
    first = node.run()
    assert first.rc == 0, first.stdout[-3000:]
    assert node.mps_lines() == ["Name=mps Count=100 File=/dev/nvidia0", "Name=mps Count=100 File=/dev/nvidia1"]
    assert node.conf.read_text().startswith(OPERATORS + BEGIN)  # the operator's lines kept
    assert [action for action, _reason in node.log()] == ["drain", "resume"]  # the first gres/mps is a change too

    # the count changes on the node in service: predicted in check mode, nothing changed
    node.declare(slurm_count=200)
    before = node.conf.read_text()
    checked = node.run(check=True)
    assert checked.rc != 0  # as the run will: slurm.conf does not give the node the new count yet
    assert "Slurm schedules its own count until slurm.conf says" in checked.results_for(task=MISMATCH)[0].result["msg"]
    assert [result.changed for result in checked.results_for(task=DRAIN)] == [True]
    assert "Write this node's gres/mps lines in gres.conf" in changed_tasks(checked)
    assert node.conf.read_text() == before
    assert len(node.log()) == 2  # no drain, no resume
    assert node.slurm()["nodes"]["gpu07"]["drain"] is False

    # a higher count: gres.conf first (slurmd keeps running, Slurm schedules slurm.conf's mps:200), then slurm.conf
    run = node.run()
    assert run.rc != 0
    log = node.log()[2:]
    assert [action for action, _reason in log] == ["drain", "resume"]
    assert log[0][1].startswith("gpuops-mps[")
    assert log[0][1].endswith("]: gres/mps mps:400 (was mps:200) being written (gpuops.cluster mps)")
    assert node.mps_lines() == ["Name=mps Count=200 File=/dev/nvidia0", "Name=mps Count=200 File=/dev/nvidia1"]
    assert node.slurm()["nodes"]["gpu07"] == {**in_service(), "drain": False, "reason": ""}
    # slurmd was not running: not restarted
    restart = run.results_for(task="Restart slurmd so that it reads the new gres/mps records (only where it runs)")
    assert [result.event for result in restart] == ["runner_on_skipped"]
    (mismatch,) = run.results_for(task=MISMATCH)
    assert mismatch.result["msg"].startswith(
        "gpu07: slurm.conf gives the node mps:200 (Slurm's Gres=gpu:2,mps:200), the gres/mps lines in gres.conf give "
        "mps:400: Slurm schedules its own count until slurm.conf says NodeName=gpu07 Gres=<its gpu>,mps:400"
    )

    # the operator gives slurm.conf the count: the run passes, changing nothing
    state = node.slurm()
    state["nodes"]["gpu07"]["gres"] = "gpu:2,mps:400"
    node.state.write_text(json.dumps(state))
    again = node.run()
    assert again.rc == 0, again.stdout[-3000:]
    assert len(node.log()) == 4  # nothing changed: no drain, no resume
    assert changed_tasks(again) == []
    assert [result.event for result in again.results_for(task=DRAIN)] == ["runner_on_skipped"]

    # the daemons' settings alone leave the block, and the node in service, alone
    node.declare(log_directory="/var/log/mps-other", active_thread_percentage=40)
    settings = node.run()
    assert settings.rc == 0, settings.stdout[-3000:]
    assert len(node.log()) == 4
    assert changed_tasks(settings) == []


def test_a_change_waits_for_the_nodes_job_and_one_that_outlasts_the_wait_changes_nothing(tmp_path, monkeypatch):
    now = time.time()
    # a job that ends 2 s after the drain: waited for, then the change
    short = {"job_id": 41, "nodes": "gpu07", "end": now + 3600, "real_end": None, "after_drain": 2}
    node = Node(tmp_path, monkeypatch, in_service(), [short])
    started = time.time()
    run = node.run()
    assert run.rc == 0, run.stdout[-3000:]
    assert time.time() - started > 2
    assert [action for action, _reason in node.log()] == ["drain", "resume"]
    assert len(node.mps_lines()) == 2

    # a job that runs on past the wait: the node is given back, gres.conf is not changed, the host fails
    long = {"job_id": 42, "nodes": "gpu07", "end": now + 86400, "real_end": now + 86400}
    state = node.slurm()
    state["jobs"] = [long]
    node.state.write_text(json.dumps(state))
    node.declare(slurm_count=300)
    node.vars["mps_drain_timeout"] = 2
    before = node.conf.read_text()
    outlasted = node.run()
    assert outlasted.rc != 0
    failure = outlasted.results_for(task="Fail a node whose jobs outlasted the wait, nothing changed")[0].result["msg"]
    assert "gres/mps mps:600 of gpuops_mps not applied on gpu07: its jobs in Slurm (gpu07) still ran after 2 s" in (
        failure
    )
    assert "nothing was changed" in failure
    assert node.conf.read_text() == before
    assert [action for action, _reason in node.log()] == ["drain", "resume", "drain", "resume"]
    assert node.slurm()["nodes"]["gpu07"]["drain"] is False


def test_a_node_drained_by_someone_else_is_changed_and_keeps_that_drain(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch, {"drain": True, "reason": "HW-1234 fan, ticket open", "gres": "gpu:2,mps:200"})
    run = node.run()
    assert run.rc == 0, run.stdout[-3000:]
    assert node.log() == []  # neither drained again nor resumed
    assert node.slurm()["nodes"]["gpu07"]["reason"] == "HW-1234 fan, ticket open"
    assert len(node.mps_lines()) == 2


def test_a_drain_of_ours_an_earlier_run_left_is_given_back_with_nothing_to_change(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch, in_service())
    assert node.run().rc == 0
    state = node.slurm()
    state["nodes"]["gpu07"].update(drain=True, reason="gpuops-mps[20261205T080000Z]: gres/mps mps:200 being written")
    node.state.write_text(json.dumps(state))
    run = node.run()
    assert run.rc == 0, run.stdout[-3000:]
    assert [action for action, _reason in node.log()] == ["drain", "resume", "resume"]
    assert node.slurm()["nodes"]["gpu07"]["drain"] is False


def test_a_count_lower_than_slurm_confs_is_refused_with_nothing_drained_or_written(tmp_path, monkeypatch):
    """slurmd stops at its start when gres.conf gives the node fewer gres/mps than slurm.conf: slurm.conf first."""
    node = Node(tmp_path, monkeypatch, in_service())
    assert node.run().rc == 0
    node.declare(slurm_count=50)
    before = node.conf.read_text()
    for check in (True, False):
        refused = node.run(check=check)
        assert refused.rc != 0
        assert "slurm.conf gives gpu07 mps:200 (Gres=gpu:2,mps:200), more than the mps:100" in refused.stdout
        assert node.conf.read_text() == before
        assert [action for action, _reason in node.log()] == ["drain", "resume"]  # the first run's only


def test_a_configless_slurmd_is_refused_before_anything_changes(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch, in_service())
    (node.conf.parent / "slurm.conf").unlink()
    run = node.run()
    assert run.rc != 0
    assert "a configless slurmd takes gres.conf from the controller" in run.stdout
    assert node.conf.read_text() == OPERATORS
    assert node.log() == []


def test_mps_on_one_of_two_gpus_needs_a_typed_gpu_line(tmp_path, monkeypatch):
    """Slurm spreads gres/mps evenly over untyped GPUs without Cores= (measured on 22.05.8): refused, then accepted
    once the operator's gpu line has a Type=."""
    node = Node(tmp_path, monkeypatch, {"drain": False, "reason": "", "gres": "gpu:h100:2,mps:100"})
    node.declare(devices=[1])
    refused = node.run()
    assert refused.rc != 0
    assert "gpuops_mps devices shares GPU 1 of the node's 2, but its Name=gpu line(s) have neither" in refused.stdout
    assert node.conf.read_text() == OPERATORS
    assert node.log() == []
    node.conf.write_text(OPERATORS.replace("Name=gpu File=", "Name=gpu Type=h100 File="))
    run = node.run()
    assert run.rc == 0, run.stdout[-3000:]
    assert node.mps_lines() == ["Name=mps Count=100 File=/dev/nvidia1"]
