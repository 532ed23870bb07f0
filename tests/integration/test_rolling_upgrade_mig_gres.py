"""roles/rolling_upgrade tasks/mig.yml on a node that runs slurmd (issue 29 items 3 and 4), through ansible-playbook.

The driver assigns GPU instance ids when it creates the instances: after the rolling upgrade's driver change (a
reload without a reboot) the re-created instances may have other ids, and other capability files, than the ones the
gres.conf block names. The stand-ins of test_mig_layout_slurm (the lab's simulated nvidia-smi, 2 H100 SXM; the
stand-in Slurm over a state file), plus a stand-in systemctl: slurmd installed and running, every call logged.
The lab's driver reload: /run is fresh (the simulator loads the module again: MIG modes kept, no instance left).
"""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import gres_conf_block

from tests.integration.playbook_run import run_playbook
from tests.integration.test_mig_layout_slurm import LAYOUT_GRES, Node, in_service
from tests.unit.mig.test_gpu_mig_module import MIXED

pytestmark = pytest.mark.integration

PLAYBOOK = "tests/integration/playbooks/rolling_upgrade_mig_gres.yml"
REWRITE = "Write the node's GPUs and MIG devices in gres.conf"
RESTART = "Restart slurmd so that it reads the new GPU records (only where it runs)"
# systemd as slurmd's node has it: slurmd installed and running, the DCGM units not running; every call logged.
SYSTEMCTL = """#!%(python)s
import json, sys
args = sys.argv[1:]
with open(%(log)r, "a") as handle:
    handle.write(json.dumps(args) + "\\n")
if args[0] == "is-active":
    print("\\n".join("inactive" for unit in args[1:]))
    sys.exit(3)
if args[0] == "show":
    print("Id=slurmd.service\\nLoadState=loaded\\nActiveState=active\\nSubState=running\\nUnitFileState=enabled")
    sys.exit(0)
sys.exit(0 if args[0] != "restart" or %(restart_rc)d == 0 else %(restart_rc)d)
"""
# Capability minors of the lab (nvidia_smi_mig.gi_minor, as /proc/driver/nvidia-caps/mig-minors lists them):
# gpu0/gi<g>/access is 3 + 9 g, gpu0/gi<g>/ci0/access the next one.
# The layout in other placements: the 2g.20gb at memory slice 0 and the 1g.10gb at 2 and 3 (GPU instance ids 3, 9
# and 10 in the lab, which numbers them by placement), made by creating a second 2g.20gb and removing the first.
OTHER_PLACEMENTS = (
    ["-cgi", "3g.40gb,2g.20gb,2g.20gb", "-C"],
    ["-dci", "-gi", "4"],
    ["-dgi", "-gi", "4"],
    ["-cgi", "1g.10gb,1g.10gb", "-C"],
)
CAPS = re.compile(r"/dev/nvidia-caps/nvidia-cap(\d+)")


class UpgradedNode(Node):
    """The stand-in node of test_mig_layout_slurm, its slurmd read through the stand-in systemctl."""

    def __init__(self, tmp_path, monkeypatch, restart_rc=0):
        super().__init__(tmp_path, monkeypatch, in_service("gpu:5"))  # slurm.conf untyped: Gres=gpu:5
        self.systemctl_log = tmp_path / "systemctl.log"
        script = tmp_path / "bin" / "systemctl"
        script.write_text(
            SYSTEMCTL % {"python": sys.executable, "log": str(self.systemctl_log), "restart_rc": restart_rc}
        )
        script.chmod(0o755)
        inventory = yaml.safe_load(self.inventory.read_text())
        del inventory["all"]["vars"]["__mig_layout_slurmd"]  # read here with systemctl show, as the role reads it
        self.inventory.write_text(yaml.safe_dump(inventory))

    def run(self, check=False):
        self.runs += 1
        return run_playbook(PLAYBOOK, self.inventory, self.tmp / ("run%d" % self.runs), check=check)

    def reload_driver(self):
        shutil.rmtree(self.lab.root / "run")

    def restarts(self):
        calls = [json.loads(line) for line in self.systemctl_log.read_text().splitlines()]
        return [call for call in calls if call[0] == "restart"]

    def gi_ids(self):
        return sorted(gi for gi, _profile, _start in self.lab.gpu_instances())

    def named_gis(self):
        return named(self.conf.read_text())


def named(gres_conf):
    """The GPU instance ids whose capability files the MultipleFiles= lines of ``gres_conf`` name."""
    minors = {int(minor) for minor in CAPS.findall(gres_conf)}
    return sorted((minor - 3) // 9 for minor in minors if (minor - 3) % 9 == 0)


def test_after_a_driver_reload_the_same_instance_ids_change_nothing_in_slurm(tmp_path, monkeypatch):
    node = UpgradedNode(tmp_path, monkeypatch)
    first = node.run()  # MIG off before: the layout applied, the block written, slurmd restarted
    assert first.rc == 0, first.stdout[-3000:]
    assert node.mig_devices() == MIXED
    assert gres_conf_block.recorded_gres(node.conf.read_text()) == LAYOUT_GRES
    assert node.named_gis() == node.gi_ids()
    assert len(node.restarts()) == 1
    before = node.conf.read_text()

    node.reload_driver()
    assert node.mig_devices() == {}
    again = node.run()
    assert again.rc == 0, again.stdout[-3000:]
    assert node.mig_devices() == MIXED  # re-created, with the ids they had
    assert node.conf.read_text() == before
    assert again.results_for(task=REWRITE)[0].changed is False
    assert [result.event for result in again.results_for(task=RESTART)] == ["runner_on_skipped"]
    assert len(node.restarts()) == 1
    assert node.slurm()["log"] == []  # the rolling upgrade drains and resumes the node, not this


def test_instances_recreated_under_new_ids_get_their_capability_files_in_gres_conf_and_slurmd_restarted(
    tmp_path, monkeypatch
):
    node = UpgradedNode(tmp_path, monkeypatch)
    assert node.run().rc == 0
    upgrade_ids = node.gi_ids()
    # The node's last boot created the instances in another order (other placements, so other GPU instance ids),
    # and the block names their capability files.
    node.reload_driver()
    for argv in OTHER_PLACEMENTS:
        assert node.lab.smi("mig", "-i", "0", *argv)[0] == 0, argv
    boot_ids = node.gi_ids()
    assert boot_ids != upgrade_ids
    assert node.run().rc == 0  # the layout is the declared one: the block for these devices is written
    assert node.named_gis() == boot_ids
    restarts = len(node.restarts())
    before = node.conf.read_text()

    # check mode on a node whose instances have ids other than the block's: the rewrite and the restart predicted
    node.reload_driver()
    assert node.lab.smi("mig", "-i", "0", "-cgi", "3g.40gb,2g.20gb,1g.10gb,1g.10gb", "-C")[0] == 0
    assert node.gi_ids() == upgrade_ids
    monkeypatch.setenv("ANSIBLE_DIFF_ALWAYS", "1")  # --diff
    predicted = node.run(check=True)
    assert predicted.rc == 0, predicted.stdout[-3000:]
    rewrite = predicted.results_for(task=REWRITE)[0]
    assert rewrite.changed is True
    assert rewrite.result["diff"]["before"] == before
    assert named(rewrite.result["diff"]["after"]) == upgrade_ids
    assert predicted.results_for(task=RESTART)[0].changed is True
    assert node.conf.read_text() == before
    assert len(node.restarts()) == restarts

    # the driver change: reloaded, the layout applied again by the rolling upgrade, under the ids it gives them
    node.reload_driver()
    run = node.run()
    assert run.rc == 0, run.stdout[-3000:]
    assert node.mig_devices() == MIXED
    assert node.gi_ids() == upgrade_ids
    assert node.named_gis() == upgrade_ids
    assert gres_conf_block.recorded_gres(node.conf.read_text()) == LAYOUT_GRES  # the same Gres=, other files
    assert run.results_for(task=REWRITE)[0].changed is True
    assert len(node.restarts()) == restarts + 1
    assert node.restarts()[-1] == ["restart", "slurmd"]


def test_a_slurmd_that_does_not_restart_fails_the_node(tmp_path, monkeypatch):
    node = UpgradedNode(tmp_path, monkeypatch, restart_rc=1)
    run = node.run()
    assert run.rc != 0
    failed = [result for result in run.results if result.failed]
    assert [result.task for result in failed] == [RESTART]
    assert gres_conf_block.recorded_gres(node.conf.read_text()) == LAYOUT_GRES


def test_gpuops_slurm_gres_false_leaves_gres_conf_and_slurmd_alone(tmp_path, monkeypatch):
    node = UpgradedNode(tmp_path, monkeypatch)
    inventory = yaml.safe_load(node.inventory.read_text())
    inventory["all"]["vars"]["gpuops_slurm_gres"] = False
    node.inventory.write_text(yaml.safe_dump(inventory))
    run = node.run()
    assert run.rc == 0, run.stdout[-3000:]
    assert node.mig_devices() == MIXED
    assert not node.conf.exists()
    assert run.results_for(task=REWRITE) == []
    calls = [json.loads(line) for line in node.systemctl_log.read_text().splitlines()]
    assert [call[0] for call in calls] == ["is-active"]  # gpu_mig's read of the DCGM units; slurmd not read
