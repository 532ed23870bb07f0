"""mig_apply: the nvidia-smi commands of a plan, the ids -cgi prints, layouts and the profile set option."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.mig import mig_profile_set
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_apply, mig_plan, mig_profiles

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "mig"


def creation(profile, profile_id, sizes, default):
    return {
        "profile": profile,
        "profile_id": profile_id,
        "compute_instances": [{"compute": size, "profile_id": mig_plan.COMPUTE_PROFILE_IDS[size]} for size in sizes],
        "default_compute_instance": default,
    }


def gpu_plan(**changes):
    base = {"index": 1, "uuid": "GPU-x", "set_mode": None, "reset": False, "destroy": [], "grow": [], "create": []}
    return dict(base, **changes)


def test_the_gpu_instance_ids_cgi_printed_on_a_real_h100():
    # nvidia-smi mig -cgi 19,19,19,19,19,19,19 -C on an H100 PCIe, driver 570 (tests/fixtures/mig/README.md)
    text = (FIXTURES / "cgi-C-h100-pcie-570.txt").read_text()
    assert mig_apply.created_gpu_instances(text) == [9, 7, 8, 11, 12, 13, 14]
    assert mig_apply.created_gpu_instances("Unable to create a GPU instance ...") == []


def test_destroy_then_mode_then_reset():
    plan = gpu_plan(
        set_mode=False,
        reset=True,
        destroy=[
            {"gpu_instance": 5, "profile": "2g.20gb", "compute_instances": [0]},
            {"gpu_instance": 7, "profile": "1g.10gb", "compute_instances": []},
        ],
    )
    assert mig_apply.destroy_commands(plan) == [
        ["mig", "-i", "1", "-dci", "-gi", "5"],
        ["mig", "-i", "1", "-dgi", "-gi", "5"],
        ["mig", "-i", "1", "-dgi", "-gi", "7"],  # no compute instance: -dci would fail with Not Found
    ]
    assert mig_apply.mode_command(plan) == ["-i", "1", "-mig", "0"]
    assert mig_apply.reset_command(plan) == ["-i", "1", "-r"]
    assert mig_apply.mode_command(gpu_plan()) is None
    assert mig_apply.reset_command(gpu_plan()) is None


def test_creations_keep_the_plans_order_and_batch_default_compute_instances():
    plan = gpu_plan(
        create=[
            creation("4g.40gb", 5, [4], True),
            creation("3g.40gb", 9, [1, 1, 1], False),
            creation("1g.10gb", 19, [1], True),
            creation("1g.10gb+me", None, [1], True),
        ],
        grow=[{"gpu_instance": 2, "profile": "2g.20gb", "compute_instances": [{"compute": 1, "profile_id": 0}]}],
    )
    assert mig_apply.create_batches(plan) == [
        (["mig", "-i", "1", "-cgi", "5", "-C"], None),
        (["mig", "-i", "1", "-cgi", "9"], plan["create"][1]["compute_instances"]),
        (["mig", "-i", "1", "-cgi", "19,1g.10gb+me", "-C"], None),  # no id known: by name
    ]
    assert mig_apply.compute_command(1, 2, plan["create"][1]["compute_instances"]) == [
        "mig",
        "-i",
        "1",
        "-cci",
        "0,0,0",
        "-gi",
        "2",
    ]
    assert mig_apply.grow_commands(plan) == [["mig", "-i", "1", "-cci", "0", "-gi", "2"]]
    assert mig_apply.describe(plan) == [
        "add compute instances 1c to GPU instance 2 (2g.20gb)",
        "create 4g.40gb (compute instances 4c)",
        "create 3g.40gb (compute instances 1c+1c+1c)",
        "create 1g.10gb (compute instances 1c)",
        "create 1g.10gb+me (compute instances 1c)",
    ]


def test_declared_and_current_layouts_name_devices_alike():
    entry = {"devices": "all", "mig-enabled": True, "mig-devices": {"1c.3g.40gb": 3, "2g.20gb": 1, "1g.10gb": 0}}
    assert mig_apply.declared_layout(entry) == {
        "mig_enabled": True,
        "pending_mig": True,
        "mig_devices": {"1c.3g.40gb": 3, "2g.20gb": 1},
    }
    gpu = {
        "index": 0,
        "uuid": "GPU-a",
        "mig": {"current": True, "pending": True},
        "gpu_instances": [
            {"profile": "3g.40gb", "compute_instances": [{"compute": 1}, {"compute": 1}, {"compute": 1}]},
            {"profile": "2g.20gb", "compute_instances": [{"compute": 2}]},
            {"profile": "1g.10gb", "compute_instances": []},
        ],
    }
    assert mig_apply.current_layout(gpu)["mig_devices"] == {
        "1c.3g.40gb": 3,
        "1g.10gb (no compute instance)": 1,
        "2g.20gb": 1,
    }
    expected = {"GPU 0 (GPU-a)": mig_apply.declared_layout(entry)}
    assert mig_apply.differences({"gpus": [gpu]}, expected) == [
        "GPU 0 (GPU-a): declared MIG on: 1c.3g.40gb x3, 2g.20gb x1, found MIG on: 1c.3g.40gb x3, "
        "1g.10gb (no compute instance) x1, 2g.20gb x1"
    ]
    pending = dict(gpu, mig={"current": True, "pending": True})
    off = {"GPU 0 (GPU-a)": mig_apply.declared_layout({"devices": "all", "mig-enabled": False})}
    assert mig_apply.pending_differences({"gpus": [pending]}, off, {0}) == [
        "GPU 0 (GPU-a): the MIG mode pending for the reboot is on, not the declared off"
    ]


def test_the_profile_set_as_the_matrix_file_writes_it():
    raw = yaml.safe_load(mig_profiles.DEFAULT_PROFILES_PATH.read_text())["profile_sets"]["h200-141gb"]
    found, problems = mig_apply.profile_set_of(raw)
    assert problems == []
    loaded = mig_profiles.default_profiles().sets["h200-141gb"]["profiles"]
    assert found["profiles"] == {
        name: {key: profile[key] for key in ("id", "compute", "memory", "placements")}
        for name, profile in loaded.items()
    }
    assert mig_apply.profile_set_of({"profiles": loaded})[0] == found
    assert mig_apply.profile_set_of(None) == (None, [])
    assert mig_apply.profile_set_of({"profiles": []})[1] == [
        "profile_set needs profiles, as matrix/mig_profiles.yml lists them for the GPU model"
    ]
    bad = mig_apply.profile_set_of({"profiles": [{"name": "1g.10gb", "id": "19", "compute": 1, "memory": 1}]})
    assert bad[0] is None
    assert "needs a MIG profile name, id, compute, memory" in bad[1][0]


def test_the_mig_profile_set_filter_feeds_the_module_option():
    chosen = mig_profile_set("h100-sxm")
    assert chosen["name"] == "h100-80gb"
    found, problems = mig_apply.profile_set_of(chosen)
    assert problems == []
    assert found["profiles"]["3g.40gb"] == {"id": 9, "compute": 3, "memory": 4, "placements": [0, 4]}
    assert mig_profile_set("l40s") is None
    assert mig_profile_set("NVIDIA A100-SXM4-80GB")["name"] == "a100-80gb"
    for gpu, message in (
        ("a100-sxm4", "names GPUs of different MIG profiles"),
        ("a30", "not recorded in matrix/mig_profiles.yml yet"),
        ("x9000", "is no GPU of the compatibility matrix"),
        (None, "give the host's gpuops_gpu"),
    ):
        with pytest.raises(AnsibleFilterError, match=message):
            mig_profile_set(gpu)
