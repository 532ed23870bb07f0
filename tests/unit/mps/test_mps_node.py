"""One node's MPS daemons and gres/mps lines, planned from its real nvidia-smi -q -x (tests/fixtures/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.mps import mps_node_plan, mps_settings
from ansible_collections.gpuops.cluster.plugins.module_utils.mig.mig_state import node_state
from ansible_collections.gpuops.cluster.plugins.module_utils.mps import mps_node
from ansible_collections.gpuops.cluster.plugins.module_utils.mps.mps_settings import settings

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi"
H100_8X = (FIXTURES / "h100-sxm-8x-healthy.xml").read_text()
H200_MIG = (FIXTURES / "h200-1x-mig-3211.xml").read_text()
H200 = (FIXTURES / "h200-1x-vm-idle.xml").read_text()
UUID_0 = "GPU-1c7a6f02-8d2e-4b71-9a55-0e4f3b7c2d10"
UUID_5 = "GPU-d7a3b5c9-0e2f-4168-a4d6-3b9f7c1e5a65"
# the operator's GPU line with a type: Slurm keeps each GPU's own gres/mps count (mps_node.subset_problem)
TYPED_GPUS = "Name=gpu Type=h100 File=/dev/nvidia[0-7]\n"


def test_kubernetes_gets_one_daemon_for_every_gpu_with_its_defaults_for_each_device():
    plan = mps_node_plan(
        mps_settings({"active_thread_percentage": 25, "pinned_device_memory_limit": "20G"}, "kubernetes"), H100_8X
    )
    assert plan["gpus"] == list(range(8))
    assert plan["gres_lines"] == []
    assert plan["gres"] == ""
    (daemon,) = plan["daemons"]
    assert daemon["unit"] == "gpuops-mps@node.service"
    assert daemon["pipe_directory"] == "/run/nvidia-mps"
    assert daemon["log_directory"] == "/var/log/nvidia-mps"
    assert daemon["visible_devices"].split(",")[0] == UUID_0
    assert len(daemon["visible_devices"].split(",")) == 8
    assert daemon["commands"] == ["set_default_active_thread_percentage 25"] + [
        "set_default_device_pinned_mem_limit %d 20G" % device for device in range(8)
    ]
    assert plan["directories"] == ["/run/nvidia-mps", "/var/log/nvidia-mps"]


def test_without_defaults_no_command_is_sent():
    plan = mps_node_plan(mps_settings({"devices": [5]}), H100_8X)
    assert plan["daemons"][0]["commands"] == []
    assert plan["daemons"][0]["visible_devices"] == UUID_5


def test_slurm_gets_a_daemon_per_gpu_in_its_own_directories_and_a_gres_line_per_gpu():
    plan = mps_node_plan(
        mps_settings({"devices": [0, 5], "pinned_device_memory_limit": "512M"}, "slurm"), H100_8X, TYPED_GPUS
    )
    assert [d["unit"] for d in plan["daemons"]] == ["gpuops-mps@0.service", "gpuops-mps@5.service"]
    five = plan["daemons"][1]
    assert five["visible_devices"] == UUID_5
    assert five["pipe_directory"] == "/run/nvidia-mps/5"
    assert five["log_directory"] == "/var/log/nvidia-mps/5"
    # the daemon sees its one GPU as device 0
    assert five["commands"] == ["set_default_device_pinned_mem_limit 0 512M"]
    assert plan["gres_lines"] == ["Name=mps Count=100 File=/dev/nvidia0", "Name=mps Count=100 File=/dev/nvidia5"]
    assert plan["gres"] == "mps:200"
    assert plan["directories"] == [
        "/run/nvidia-mps",
        "/run/nvidia-mps/0",
        "/run/nvidia-mps/5",
        "/var/log/nvidia-mps",
        "/var/log/nvidia-mps/0",
        "/var/log/nvidia-mps/5",
    ]


def test_the_gres_line_names_the_device_file_by_minor_number_not_by_index():
    gpus = node_state(H100_8X)["gpus"]
    gpus[1]["minor"], gpus[2]["minor"] = 2, 1
    plan = mps_node.plan(settings({"devices": [1], "slurm_count": 400}, "slurm"), gpus, TYPED_GPUS)
    assert plan["gres_lines"] == ["Name=mps Count=400 File=/dev/nvidia2"]
    assert plan["gres"] == "mps:400"


def test_a_gpu_with_mig_on_is_refused_on_the_node_as_it_is():
    with pytest.raises(AnsibleFilterError) as caught:
        mps_node_plan(mps_settings({}, "slurm"), H200_MIG)
    assert "GPU 0 has MIG enabled (current or pending)" in str(caught.value)
    assert "File=" in str(caught.value)
    assert "nothing was changed" in str(caught.value)


def test_mig_pending_alone_is_refused_too():
    gpus = node_state(H200)["gpus"]
    gpus[0]["mig"] = {"current": False, "pending": True}
    with pytest.raises(mps_node.MpsNodeError, match="GPU 0 has MIG enabled"):
        mps_node.plan(settings({}, "kubernetes"), gpus)
    gpus[0]["mig"] = {"current": False, "pending": False}
    assert mps_node.plan(settings({}, "kubernetes"), gpus)["gpus"] == [0]


def test_a_gpu_the_node_does_not_have_is_named():
    with pytest.raises(AnsibleFilterError, match=r"devices names GPU 8, 9, which nvidia-smi does not list \(GPUs 0, 1"):
        mps_node_plan(mps_settings({"devices": [0, 8, 9]}), H100_8X)


def test_unreadable_output_fails_closed():
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.mps_node_plan"):
        mps_node_plan(mps_settings({}), "<nvidia_smi_log></nvidia_smi_log>")


def test_bad_settings_fail_in_the_filter_naming_the_key():
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.cluster\.mps_settings: gpuops_mps active_thread_percentage"):
        mps_settings({"active_thread_percentage": 0})


GRES_CONF = """AutoDetect=nvml
NodeName=gpu[01-04] Name=mps Count=400
# BEGIN gpuops.cluster: the gres/mps of this node (role mps; do not edit)
Name=mps Count=100 File=/dev/nvidia0
# END gpuops.cluster: the gres/mps of this node (role mps; do not edit)
"""


def test_a_gres_mps_line_of_this_node_outside_the_block_is_refused_naming_it():
    with pytest.raises(AnsibleFilterError) as caught:
        mps_node_plan(mps_settings({"devices": [0]}, "slurm"), H100_8X, GRES_CONF, ["gpu03"])
    assert "outside the block the role mps writes: NodeName=gpu[01-04] Name=mps Count=400" in str(caught.value)


def test_the_blocks_own_lines_and_other_nodes_lines_are_no_conflict():
    plan = mps_node_plan(mps_settings({"devices": [0]}, "slurm"), H100_8X, GRES_CONF, ["gpu05"])
    assert plan["gres_lines"] == ["Name=mps Count=100 File=/dev/nvidia0"]
    assert plan["gres_marker"].replace("{mark}", "BEGIN") in GRES_CONF.splitlines()
    # off Slurm gres.conf is not the role's: nothing in it is judged
    assert mps_node_plan(mps_settings({"devices": [0]}, "none"), H100_8X, GRES_CONF, ["gpu03"])["gres_lines"] == []


def test_a_commented_out_line_is_no_conflict():
    text = "# Name=mps Count=400\nName=gpu File=/dev/nvidia0  # Name=mps\n"
    assert mps_node.gres_conflicts(text, ["gpu01"]) == []
    assert mps_node.gres_conflicts("name = MPS count=200\n", ["gpu01"]) == ["name = MPS count=200"]


# The drain decision (roles/mps tasks/slurm_gres.yml): the node is drained where the block's lines change, only then.
def test_the_same_block_is_no_change_and_needs_no_drain():
    plan = mps_node_plan(mps_settings({"devices": [0]}, "slurm"), H100_8X, GRES_CONF, ["gpu05"])
    assert (plan["gres_changed"], plan["gres_before"], plan["gres"]) == (False, "mps:100", "mps:100")


def test_a_changed_count_is_a_change_naming_the_count_before():
    plan = mps_node_plan(mps_settings({"devices": [0], "slurm_count": 200}, "slurm"), H100_8X, GRES_CONF, ["gpu05"])
    assert (plan["gres_changed"], plan["gres_before"], plan["gres"]) == (True, "mps:100", "mps:200")


def test_another_gpu_is_a_change_of_the_records_at_the_same_count_per_gpu():
    plan = mps_node_plan(mps_settings({"devices": [0, 5]}, "slurm"), H100_8X, GRES_CONF, ["gpu05"])
    assert (plan["gres_changed"], plan["gres_before"], plan["gres"]) == (True, "mps:100", "mps:200")


def test_a_first_block_is_a_change_from_no_mps():
    plan = mps_node_plan(mps_settings({"devices": [0]}, "slurm"), H100_8X, "AutoDetect=nvml\n", ["gpu05"])
    assert (plan["gres_changed"], plan["gres_before"]) == (True, "")
    first = mps_node_plan(mps_settings({"devices": [0]}, "slurm"), H100_8X, TYPED_GPUS, ["gpu05"])
    assert first["gres_changed"] is True


def test_settings_outside_the_block_are_no_change():
    spec = {"devices": [0], "log_directory": "/var/log/mps-b", "pipe_directory": "/run/mps-b"}
    spec.update(active_thread_percentage=30, pinned_device_memory_limit="4G")
    plan = mps_node_plan(mps_settings(spec, "slurm"), H100_8X, GRES_CONF, ["gpu05"])
    assert plan["gres_changed"] is False


def test_off_slurm_nothing_is_drained_for():
    plan = mps_node_plan(mps_settings({"devices": [0]}, "kubernetes"), H100_8X, GRES_CONF, ["gpu05"])
    assert (plan["gres_changed"], plan["gres_before"]) == (False, "")


def test_a_block_edited_by_hand_is_a_change():
    edited = GRES_CONF.replace("Count=100 File=/dev/nvidia0", "Count=100 File=/dev/nvidia0 Flags=env_uuid")
    assert mps_node.gres_change(edited, ["Name=mps Count=100 File=/dev/nvidia0"]) == {
        "changed": True,
        "gres_before": "mps:100",
    }
    assert mps_node.gres_total(["Name=mps count = 50 File=/dev/nvidia0", "Name=mps Count=25 File=/dev/nvidia1"]) == (
        "mps:75"
    )


# Slurm's gres/mps for the node (slurm.conf's, read by slurm_fleet) against the block's (roles/mps tasks/plan.yml).
def test_slurms_mps_count_is_read_from_its_gres_typed_or_not():
    assert mps_node.slurm_mps_count("gpu:4,mps:400") == 400
    assert mps_node.slurm_mps_count("gpu:l40s:4(S:0),mps:l40s:200(S:0),mps:a10:100") == 300
    assert mps_node.slurm_mps_count("gpu:h100:8(S:0-1)") == 0
    assert mps_node.slurm_mps_count("") == 0
    assert mps_node.slurm_mps_count(None) == 0


def test_slurm_agreeing_with_the_block_or_not_read_is_no_mismatch():
    plan = mps_node_plan(mps_settings({"devices": [0]}, "slurm"), H100_8X, GRES_CONF, ["gpu05"], "gpu:8,mps:100")
    assert plan["slurm_mismatch"] is None
    assert (
        mps_node_plan(mps_settings({"devices": [0]}, "slurm"), H100_8X, GRES_CONF, ["gpu05"])["slurm_mismatch"] is None
    )
    off = mps_node_plan(mps_settings({"devices": [0]}, "kubernetes"), H100_8X, GRES_CONF, ["gpu05"], "gpu:8")
    assert off["slurm_mismatch"] is None


def test_slurm_without_the_blocks_mps_names_the_line_slurm_conf_needs():
    plan = mps_node_plan(mps_settings({"devices": [0, 5]}, "slurm"), H100_8X, GRES_CONF, ["gpu05"], "gpu:8(S:0-1)")
    assert plan["gres_changed"] is True  # a higher count: gres.conf first, slurm.conf after
    assert "slurm.conf gives the node mps:0 (Slurm's Gres=gpu:8(S:0-1))" in plan["slurm_mismatch"]
    assert "NodeName=gpu05 Gres=<its gpu>,mps:200 (and GresTypes with mps)" in plan["slurm_mismatch"]


def test_a_block_lower_than_slurm_conf_is_refused_before_anything_changes():
    with pytest.raises(AnsibleFilterError) as refused:
        mps_node_plan(
            mps_settings({"devices": [0], "slurm_count": 50}, "slurm"), H100_8X, GRES_CONF, ["gpu05"], "gpu:8,mps:100"
        )
    message = str(refused.value)
    assert "slurm.conf gives gpu05 mps:100 (Gres=gpu:8,mps:100), more than the mps:50" in message
    assert (
        "Lower the node's count in the controller's slurm.conf first (NodeName=gpu05 Gres=<its gpu>,mps:50" in message
    )
    assert "then run again; nothing was changed" in message


def test_a_block_already_lower_than_slurm_conf_is_named_not_refused():
    # nothing would change on the node: slurm.conf is the one to follow (the node's slurmd is what it is)
    plan = mps_node_plan(mps_settings({"devices": [0]}, "slurm"), H100_8X, GRES_CONF, ["gpu05"], "gpu:8,mps:400")
    assert plan["gres_changed"] is False
    assert "slurm.conf gives the node mps:400" in plan["slurm_mismatch"]


# MPS on some of the node's GPUs (mps_node.subset_problem): measured on Slurm 22.05.8, an untyped gpu line without
# Cores= makes slurmctld spread the node's gres/mps evenly, sending an mps:50 job to a GPU without MPS at 0 %.
def test_mps_on_some_gpus_over_untyped_gpu_lines_is_refused_naming_the_lines():
    untyped = "Name=gpu File=/dev/nvidia[0-3]\nNodeName=gpu05 Name=gpu File=/dev/nvidia[4-7]\n"
    with pytest.raises(AnsibleFilterError) as refused:
        mps_node_plan(mps_settings({"devices": [4, 5, 6, 7]}, "slurm"), H100_8X, untyped, ["gpu05"])
    message = str(refused.value)
    assert "gpuops_mps devices shares GPU 4, 5, 6, 7 of the node's 8, but its Name=gpu line(s) have neither" in message
    assert "(Name=gpu File=/dev/nvidia[0-3] | NodeName=gpu05 Name=gpu File=/dev/nvidia[4-7])" in message
    assert "or share every GPU (devices: all)" in message


def test_mps_on_some_gpus_without_any_gpu_line_for_the_node_is_refused():
    other = "NodeName=gpu09 Name=gpu Type=h100 File=/dev/nvidia[0-7]\n"
    with pytest.raises(AnsibleFilterError, match=r"its gres\.conf has no Name=gpu line for it"):
        mps_node_plan(mps_settings({"devices": [4]}, "slurm"), H100_8X, other, ["gpu05"])


def test_mps_on_some_gpus_is_accepted_over_typed_lines_cores_or_autodetect():
    for conf in (
        TYPED_GPUS,
        "Name=gpu File=/dev/nvidia[0-7] Cores=0-15\n",
        "AutoDetect=nvml\n",
        "NodeName=gpu[01-08] AutoDetect=nvml\n",
    ):
        plan = mps_node_plan(mps_settings({"devices": [4, 5]}, "slurm"), H100_8X, conf, ["gpu05"])
        assert plan["gpus"] == [4, 5], conf


def test_every_gpu_or_another_scheduler_needs_no_typed_line():
    untyped = "Name=gpu File=/dev/nvidia[0-7]\n"
    assert mps_node_plan(mps_settings({}, "slurm"), H100_8X, untyped, ["gpu05"])["gpus"] == list(range(8))
    assert mps_node_plan(mps_settings({"devices": [4]}, "kubernetes"), H100_8X, untyped, ["gpu05"])["gpus"] == [4]


def test_a_commented_type_does_not_count():
    with pytest.raises(AnsibleFilterError, match="neither Type= nor Cores="):
        mps_node_plan(
            mps_settings({"devices": [4]}, "slurm"), H100_8X, "Name=gpu File=/dev/nvidia[0-7]  # Type=h100\n", ["x"]
        )
