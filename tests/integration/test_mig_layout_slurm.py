"""roles/mig_layout on a node that runs slurmd (issue 29 item 4), on a stand-in node through ansible-playbook.

nvidia-smi is the lab's simulator (2 H100 SXM, MIG off at first); scontrol, sinfo and squeue are the stand-in Slurm
of test_upgrade_window (one state file; drains and resumes change it), each node's gres as slurm.conf would give it.
slurmd is installed and not running (no systemd here): the restart is not run, the rest is.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import gres_conf_block

from tests.integration.playbook_run import run_playbook
from tests.integration.test_upgrade_window import STATEFUL_SLURM, stateful_slurm
from tests.unit.mig.test_gpu_mig_module import MIXED, SIM, Lab, gpu0, spec

pytestmark = pytest.mark.integration

PLAYBOOK = "tests/integration/playbooks/mig_layout_slurm.yml"
LAYOUT_GRES = "gpu:1g.10gb:2,gpu:2g.20gb:1,gpu:3g.40gb:1,gpu:h100_80gb_hbm3:1"
# Slurm's own reason prefix set by the role; the rolling upgrade's is gpuops-upgrade
PREFIX = "gpuops-mig["


class Node:
    """The stand-in node: its lab state, its gres.conf and the stand-in Slurm's state."""

    def __init__(self, tmp_path, monkeypatch, slurm_node):
        self.tmp = tmp_path
        root = tmp_path / "node"
        root.mkdir()
        self.lab = Lab(root)
        tools = tmp_path / "bin"
        tools.mkdir()
        (tools / "nvidia-smi").symlink_to(SIM)
        # the node's Gres as its state says (the layout's, once the test gives it), none until then
        text = STATEFUL_SLURM.replace('"gres": node.get("gres", "gpu:8")', '"gres": node.get("gres")')
        _paths, self.state = stateful_slurm(tmp_path, {"gpu07": slurm_node}, [], text)
        monkeypatch.setenv("PATH", "%s:%s:%s" % (tools, self.state.parent, os.environ["PATH"]))
        monkeypatch.setenv("GPUOPS_LAB_ROOT", str(root))
        self.conf = root / "etc/slurm/gres.conf"
        self.conf.parent.mkdir(parents=True)
        (self.conf.parent / "slurm.conf").write_text("# the node's slurm.conf (configless nodes have none)\n")
        self.inventory = tmp_path / "inventory.yml"
        self.inventory.write_text(
            yaml.safe_dump(
                {
                    "all": {
                        "hosts": {"gpu07": {}},
                        "children": {"node": {"hosts": {"gpu07": {}}}},
                        "vars": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                            "gpuops_gpu": "h100-sxm",
                            "gpuops_mig": spec(chosen=gpu0(MIXED)),
                            "gpuops_mig_config": "chosen",
                            "mig_layout_gres_conf": str(self.conf),
                            "mig_layout_gres_nvml": "never",
                            "mig_layout_gres_mig_minors": str(
                                root / "run/gpuops-lab/proc/driver/nvidia-caps/mig-minors"
                            ),
                            "mig_layout_resume_wait": 5,
                            "mig_layout_drain_poll_interval": 1,
                            # slurmd installed, not running (tasks/main.yml reads it with systemctl show)
                            "__mig_layout_slurmd": {"stdout_lines": ["LoadState=loaded", "ActiveState=inactive"]},
                        },
                    }
                }
            )
        )
        self.runs = 0

    def run(self, check=False):
        self.runs += 1
        return run_playbook(PLAYBOOK, self.inventory, self.tmp / ("run%d" % self.runs), check=check)

    def slurm(self):
        return json.loads(self.state.read_text())

    def set_gres(self, gres):
        state = self.slurm()
        state["nodes"]["gpu07"]["gres"] = gres
        self.state.write_text(json.dumps(state))

    def mig_devices(self):
        return self.lab.layout()[sorted(self.lab.layout())[0]]["mig_devices"]


def in_service(gres):
    return {"drain": False, "reason": "", "gres": gres}


def drains_and_resumes(node):
    return [(entry[2], entry[3]) for entry in node.slurm()["log"]]


def test_a_node_in_service_is_drained_changed_and_given_back_then_left_alone(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch, in_service("gpu:5"))  # slurm.conf untyped: Gres=gpu:5

    checked = node.run(check=True)
    assert checked.rc == 0, checked.stdout[-3000:]
    assert node.slurm()["log"] == []  # check mode: no drain
    assert not node.conf.exists()
    assert node.mig_devices() == {}
    predicted = checked.results_for(task="Drain the node in Slurm before the change, and wait for its jobs")
    assert predicted[0].changed is True

    run = node.run()
    assert run.rc == 0, run.stdout[-3000:]
    log = drains_and_resumes(node)
    assert [action for action, _reason in log] == ["drain", "resume"]
    assert log[0][1].startswith(PREFIX)
    assert log[0][1].endswith("]: MIG layout chosen being applied (gpuops.cluster mig_layout)")
    assert node.mig_devices() == MIXED
    assert gres_conf_block.recorded_gres(node.conf.read_text()) == LAYOUT_GRES
    assert node.conf.read_text().count("MultipleFiles=/dev/nvidia0,") == 4
    assert node.slurm()["nodes"]["gpu07"]["drain"] is False
    # slurmd was not running: not restarted
    restart = run.results_for(task="Restart slurmd so that it reads the new GPU records (only where it runs)")
    assert [result.event for result in restart] == ["runner_on_skipped"]

    again = node.run()
    assert again.rc == 0, again.stdout[-3000:]
    assert len(node.slurm()["log"]) == 2  # nothing changed: no drain, no resume
    assert [result.task for result in again.changed] == []


def test_a_slurm_conf_without_the_layouts_gres_keeps_the_node_drained_until_it_has_it(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch, in_service("gpu:h100_80gb_hbm3:2"))
    run = node.run()
    assert run.rc != 0
    failure = run.results_for(task="Fail a node whose Gres in Slurm is not its layout's")[0].result["msg"]
    assert "Slurm has Gres=gpu:h100_80gb_hbm3:2 for the node, the layout gives Gres=%s" % LAYOUT_GRES in failure
    assert "give NodeName=gpu07 Gres=%s in the controller's slurm.conf" % LAYOUT_GRES in failure
    assert "scontrol reconfigure" in failure
    slurm = node.slurm()["nodes"]["gpu07"]
    assert slurm["drain"] is True
    assert slurm["reason"].startswith(PREFIX)
    assert slurm["reason"].endswith("]: MIG layout chosen: slurm.conf must give the node Gres=%s" % LAYOUT_GRES)
    assert node.mig_devices() == MIXED  # the layout and gres.conf are in place

    # the operator gives slurm.conf the Gres= and reconfigures; the next run has nothing to change and resumes
    node.set_gres(LAYOUT_GRES.replace(",", "(S:0),") + "(S:0)")
    again = node.run()
    assert again.rc == 0, again.stdout[-3000:]
    assert [action for action, _reason in drains_and_resumes(node)] == ["drain", "drain", "resume"]
    assert node.slurm()["nodes"]["gpu07"]["drain"] is False


def test_a_node_drained_by_someone_else_is_changed_and_stays_drained_with_its_reason(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch, {"drain": True, "reason": "HW-1234 fan, ticket open", "gres": "gpu:5"})
    run = node.run()
    assert run.rc == 0, run.stdout[-3000:]
    assert node.slurm()["log"] == []  # neither drained again nor resumed
    assert node.slurm()["nodes"]["gpu07"]["reason"] == "HW-1234 fan, ticket open"
    assert node.mig_devices() == MIXED
    assert gres_conf_block.recorded_gres(node.conf.read_text()) == LAYOUT_GRES
