"""gres_sync: the gres.conf block from the node's devices (the module's and the boot command's one flow), and the
comparison with the node's gres as Slurm's controller has it.

Slurm's side: scontrol show nodes --json of Slurm 24.11 gives ``gres`` as ``gpu:4`` (tests/fixtures/slurm, captured in
the lab) and with a socket binding ``gpu:h100:8(S:0-1)`` (scontrol(1), NodeName Gres=: "Gres=gpu:4(S:0-1)").
"""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import gres_conf_block, gres_sync, mig_gres

from tests.unit.mig.test_mig_gres import read, split_gpu0


def test_the_block_for_whole_gpus_then_for_mig_devices_and_nothing_to_do_after(lab):
    lab.smi("-q", "-x")
    gpus, text = read(lab)
    first = gres_sync.plan(gpus, text, False, None, "", ["gpu07"])
    assert first["changed"] is True
    assert first["gres_changed"] is True
    assert first["gres"] == "gpu:h100_80gb_hbm3:2"
    assert first["after"].splitlines()[0] == gres_conf_block.BEGIN
    again = gres_sync.plan(gpus, text, False, None, first["after"], ["gpu07"])
    assert (again["changed"], again["gres_changed"], again["after"]) == (False, False, first["after"])

    split_gpu0(lab)
    gpus, text = read(lab)
    mig = gres_sync.plan(gpus, text, False, None, first["after"], ["gpu07"])
    assert mig["changed"] is True
    assert mig["gres_changed"] is True
    assert mig["gres"] == "gpu:1g.10gb:2,gpu:3g.40gb:1,gpu:h100_80gb_hbm3:1"
    assert sum("MultipleFiles=/dev/nvidia0," in line for line in mig["lines"]) == 3


def test_autodetect_keeps_the_file_but_records_the_new_gres(lab):
    lab.smi("-q", "-x")
    gpus, text = read(lab)
    whole = gres_sync.plan(gpus, text, True, None, "Name=nic File=/dev/infiniband/uverbs0\n", [])
    assert whole["lines"][1:] == ["AutoDetect=nvml"]
    assert whole["after"].startswith("Name=nic File=/dev/infiniband/uverbs0\n\n" + gres_conf_block.BEGIN)
    split_gpu0(lab)
    gpus, text = read(lab)
    mig = gres_sync.plan(gpus, text, True, None, whole["after"], [])
    assert mig["changed"] is True  # only the recorded Gres= line differs
    assert mig["gres_changed"] is True


def test_a_device_without_its_capability_minor_is_an_error(lab):
    split_gpu0(lab)
    gpus, _text = read(lab)
    with pytest.raises(mig_gres.GresError, match="gpu0/gi"):
        gres_sync.plan(gpus, "", False, None, "", [])


def test_the_nvml_plugin_is_looked_for_only_in_auto():
    found = {"/usr/lib64/slurm/gpu_nvml.so"}
    assert gres_sync.nvml_installed("auto", gres_sync.PLUGIN_DIRS, found.__contains__) is True
    assert gres_sync.nvml_installed("auto", ["/usr/lib/slurm"], found.__contains__) is False
    assert gres_sync.nvml_installed("never", gres_sync.PLUGIN_DIRS, found.__contains__) is False
    assert gres_sync.nvml_installed("always", [], found.__contains__) is True


@pytest.mark.parametrize(
    ("slurm", "wanted"),
    [
        (
            "gpu:1g.10gb:2(S:0),gpu:3g.40gb:1(S:0),gpu:h100_80gb_hbm3:1(S:1)",
            "gpu:1g.10gb:2,gpu:3g.40gb:1,gpu:h100_80gb_hbm3:1",
        ),
        ("gpu:3g.40gb:1,gpu:1g.10gb:2", "gpu:1g.10gb:2,gpu:3g.40gb:1"),  # order
        ("gpu:3(S:0-1)", "gpu:1g.10gb:2,gpu:3g.40gb:1"),  # slurm.conf untyped, the device count right
        ("gpu:h100:8,mps:800,nic:1", "gpu:h100:8"),  # other GRES left out
    ],
)
def test_slurms_gres_that_gives_the_layouts_devices_matches(slurm, wanted):
    assert gres_sync.slurm_gres_differs(slurm, wanted) is None


@pytest.mark.parametrize(
    ("slurm", "wanted"),
    [
        ("gpu:4", "gpu:1g.10gb:2,gpu:3g.40gb:1"),  # the lab's slurm.conf before the layout: one count too many
        ("gpu:h100_80gb_hbm3:2", "gpu:1g.10gb:2,gpu:3g.40gb:1,gpu:h100_80gb_hbm3:1"),  # the whole GPUs still
        ("gpu:1g.10gb:3,gpu:3g.40gb:1", "gpu:1g.10gb:2,gpu:3g.40gb:1"),  # a count
        ("gpu:1g.10gb:2,gpu:2g.20gb:1", "gpu:1g.10gb:2,gpu:3g.40gb:1"),  # a type, the same total
        (None, "gpu:h100:8"),  # no gres in Slurm
        ("(null)", "gpu:h100:8"),
    ],
)
def test_slurms_gres_that_does_not_give_them_says_both(slurm, wanted):
    message = gres_sync.slurm_gres_differs(slurm, wanted)
    assert message == "Slurm has Gres=%s for the node, the layout gives Gres=%s" % (slurm or "(none)", wanted)


def test_the_filter_names_a_wrong_input():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpuops.cluster.plugins.filter import mig

    assert mig.slurm_gres_differs("gpu:2", "gpu:1g.10gb:2") is None
    with pytest.raises(AnsibleFilterError, match="give the Gres= slurm_gres returned"):
        mig.slurm_gres_differs("gpu:2", None)
    with pytest.raises(AnsibleFilterError, match="as Slurm has it"):
        mig.slurm_gres_differs(["gpu:2"], "gpu:1g.10gb:2")
