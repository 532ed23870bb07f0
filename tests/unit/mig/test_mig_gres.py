"""Slurm's view of a node's GPUs and MIG devices, from the lab's simulated nvidia-smi (run in-process).

The simulator's mig-minors follows the MIG user guide's numbering (its docstring); gres.conf's device files follow
SchedMD/slurm src/plugins/gpu/nvml/gpu_nvml.c (/dev/nvidia<minor>, then the GPU and compute instances'
/dev/nvidia-caps/nvidia-cap<n> from /proc/driver/nvidia-caps/mig-minors).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_gres, mig_state

# nvidia-smi mig -lci of an A100-PCIE-40GB (tests/fixtures/mig/README.md says where it was captured)
FIXTURE_LCI = (Path(__file__).resolve().parents[2] / "fixtures" / "mig" / "lci-a100-pcie-40gb.txt").read_text()


def read(lab):
    state = lab.state()
    text = (lab.root / "run/gpuops-lab/proc/driver/nvidia-caps/mig-minors").read_text()
    return state["gpus"], text


def split_gpu0(lab, profiles="9,19,19"):
    assert lab.smi("-i", "0", "-mig", "1")[0] == 0
    assert lab.smi("-i", "0", "-r")[0] == 0
    code, out, _err = lab.smi("mig", "-i", "0", "-cgi", profiles, "-C")
    assert code == 0, out


def test_whole_gpus_get_one_file_each_and_their_product_as_type(lab):
    lab.smi("-q", "-x")  # the driver loads: mig-minors is written
    gpus, text = read(lab)
    records = mig_gres.devices(gpus, text)
    assert mig_gres.gres_conf_lines(records) == [
        "Name=gpu Type=h100_80gb_hbm3 File=/dev/nvidia0",
        "Name=gpu Type=h100_80gb_hbm3 File=/dev/nvidia1",
    ]
    assert mig_gres.node_gres(records) == "gpu:h100_80gb_hbm3:2"
    assert mig_gres.node_gres(mig_gres.devices(gpus, text, whole_type="h100")) == "gpu:h100:2"


def test_mig_devices_name_their_gpu_and_both_capability_files(lab):
    split_gpu0(lab)
    gpus, text = read(lab)
    caps = mig_gres.parse_mig_minors(text)
    records = mig_gres.devices(gpus, text)
    lines = mig_gres.gres_conf_lines(records)
    assert len(lines) == 4  # three MIG devices on GPU 0, GPU 1 whole
    by_type = {}
    for gi in gpus[0]["gpu_instances"]:
        ci = gi["compute_instances"][0]
        files = "/dev/nvidia0,/dev/nvidia-caps/nvidia-cap%d,/dev/nvidia-caps/nvidia-cap%d" % (
            caps[(0, gi["id"], None)],
            caps[(0, gi["id"], ci["id"])],
        )
        by_type.setdefault(ci["profile"], []).append("Name=gpu Type=%s MultipleFiles=%s" % (ci["profile"], files))
    assert sorted(lines[:3]) == sorted(by_type["3g.40gb"] + by_type["1g.10gb"])
    assert lines[3] == "Name=gpu Type=h100_80gb_hbm3 File=/dev/nvidia1"
    assert mig_gres.node_gres(records) == "gpu:1g.10gb:2,gpu:3g.40gb:1,gpu:h100_80gb_hbm3:1"


def test_the_nvml_plugin_finds_the_devices_itself(lab):
    split_gpu0(lab)
    gpus, text = read(lab)
    assert mig_gres.gres_conf_lines(mig_gres.devices(gpus, text), autodetect_nvml=True) == ["AutoDetect=nvml"]


def test_a_mig_device_without_its_capability_minor_is_refused(lab):
    split_gpu0(lab, "19")
    gpus, text = read(lab)
    with pytest.raises(mig_gres.GresError, match="mig-minors lists no gpu0/gi"):
        mig_gres.devices(gpus, "config 1\nmonitor 2\n")
    gpus[1]["minor"] = None
    with pytest.raises(mig_gres.GresError, match="GPU 1: nvidia-smi -q -x gave no minor number"):
        mig_gres.devices(gpus, text)


def test_types_follow_slurm_naming():
    assert mig_gres.mig_type("1g.10gb+me") == "1g.10gb_me"
    assert mig_gres.gpu_type("NVIDIA H200") == "h200"
    assert mig_gres.gpu_type("NVIDIA A100-SXM4-80GB") == "a100-sxm4-80gb"


def test_compute_instances_of_one_gpu_instance_are_one_record_each():
    """The A100 PCIe capture: a 3g.20gb GPU instance split in three 1c.3g.20gb compute instances."""
    state = {
        "index": 0,
        "minor": 0,
        "product": "NVIDIA A100-PCIE-40GB",
        "mig": {"current": True, "pending": True},
        "gpu_instances": [
            {
                "id": 2,
                "compute_instances": [
                    ci for ci in mig_state.parse_compute_instances(FIXTURE_LCI) if ci["gpu_instance"] == 2
                ],
            }
        ],
    }
    text = "gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\ngpu0/gi2/ci1/access 23\ngpu0/gi2/ci2/access 24\n"
    lines = mig_gres.gres_conf_lines(mig_gres.devices([state], text))
    assert lines == [
        "Name=gpu Type=1c.3g.20gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,"
        "/dev/nvidia-caps/nvidia-cap%d" % minor
        for minor in (22, 23, 24)
    ]
