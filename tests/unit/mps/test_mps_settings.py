"""gpuops_mps checked before any host is contacted: values, defaults, and no MPS on a GPU the MIG layout enables."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.mps import mps_settings

H100 = {"0x233010de"}
LAYOUT = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        "half": [
            {"devices": [0, 1, 2, 3], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
            {"devices": [4, 5, 6, 7], "mig-enabled": False},
        ],
        "h200-only": [
            {"device-filter": ["0x233510DE"], "devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}
        ],
        "all-then-two-off": [
            {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
            {"devices": [6, 7], "mig-enabled": False},
        ],
    },
}


def test_settings_fill_the_defaults_and_take_the_scheduler_from_the_drain_adapter():
    whole = mps_settings.settings({"active_thread_percentage": 50}, drain="slurm")
    assert whole == {
        "devices": "all",
        "scheduler": "slurm",
        "active_thread_percentage": 50,
        "pinned_device_memory_limit": None,
        "pipe_directory": "/run/nvidia-mps",
        "log_directory": "/var/log/nvidia-mps",
        "slurm_count": 100,
    }
    assert mps_settings.settings({"scheduler": "kubernetes"}, drain="slurm")["scheduler"] == "kubernetes"
    assert mps_settings.settings({})["scheduler"] == "none"
    assert mps_settings.settings({"pipe_directory": "/run/mps/"})["pipe_directory"] == "/run/mps"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"active_thread_percentage": 0}, "active_thread_percentage is 0: give a whole number from 1 to 100"),
        ({"active_thread_percentage": 101}, "active_thread_percentage is 101"),
        ({"active_thread_percentage": True}, "active_thread_percentage is True"),
        ({"active_thread_percentage": "50"}, "active_thread_percentage is '50'"),
        ({"pinned_device_memory_limit": "20GB"}, "pinned_device_memory_limit is '20GB': give a whole number"),
        ({"pinned_device_memory_limit": "0G"}, "pinned_device_memory_limit is '0G'"),
        ({"pinned_device_memory_limit": 20}, "pinned_device_memory_limit is 20"),
        ({"pinned_device_memory_limit": "1.5G"}, "pinned_device_memory_limit is '1.5G'"),
        ({"devices": "0,1"}, "devices is '0,1': give all or a list of GPU indexes"),
        ({"devices": []}, "devices is []"),
        ({"devices": [0, -1]}, "devices is [0, -1]"),
        ({"devices": [1, 1]}, "devices [1, 1] names a GPU twice"),
        ({"scheduler": "pbs"}, "scheduler is 'pbs': give one of slurm, kubernetes, none"),
        ({"pipe_directory": "run/mps"}, "pipe_directory is 'run/mps': give an absolute path"),
        ({"pipe_directory": "/run/mps;rm -rf /"}, "pipe_directory is '/run/mps;rm -rf /'"),
        ({"log_directory": "/var/log/../../etc"}, "log_directory is '/var/log/../../etc'"),
        ({"pipe_directory": "/tmp"}, "pipe_directory is '/tmp': give a directory of its own under it"),
        ({"pipe_directory": "/srv/mps", "log_directory": "/srv/mps/"}, "are the same"),
        ({"slurm_count": 0}, "slurm_count is 0"),
        ({"percentage": 50}, "unknown key 'percentage'"),
    ],
)
def test_each_bad_value_is_named_with_its_fix(spec, expected):
    found = mps_settings.problems(spec)
    assert len(found) == 1, found
    assert expected in found[0], found
    with pytest.raises(mps_settings.MpsSettingsError, match="gpuops_mps"):
        mps_settings.settings(spec)


def test_a_drain_adapter_the_collection_does_not_know_is_refused_as_a_scheduler():
    assert mps_settings.problems({}, drain="lsf") == [
        "gpuops_mps scheduler is 'lsf': give one of slurm, kubernetes, none"
    ]


def test_not_a_mapping():
    assert mps_settings.problems("on")[0].startswith("gpuops_mps is 'on': set a mapping")


def test_good_settings_pass_whatever_the_layout_when_mig_is_off():
    spec = {"devices": "all", "active_thread_percentage": 25, "pinned_device_memory_limit": "20G"}
    assert mps_settings.problems(spec, "kubernetes", LAYOUT, "all-disabled", H100) == []
    assert mps_settings.problems(spec, "kubernetes") == []


@pytest.mark.parametrize("scheduler", ["kubernetes", "slurm", "none"])
def test_mps_on_every_gpu_of_a_node_whose_layout_enables_mig_everywhere_is_refused(scheduler):
    found = mps_settings.problems({"scheduler": scheduler}, None, LAYOUT, "all-1g.10gb", H100)
    assert len(found) == 1
    assert found[0].startswith(
        "gpuops_mps shares every GPU by MPS, and the MIG layout gpuops_mig_config selects enables MIG on every GPU: "
    )
    assert mps_settings.WHY_NOT_ON_MIG[scheduler] in found[0]
    assert "(scheduler %s)" % scheduler in found[0]


def test_the_kubernetes_reason_is_the_device_plugins():
    found = mps_settings.problems({}, "kubernetes", LAYOUT, "all-1g.10gb", H100)
    assert "the Kubernetes device plugin does not support MPS on devices with MIG enabled" in found[0]


def test_mps_on_the_gpus_whose_mig_is_off_passes_and_on_one_with_mig_is_refused():
    assert mps_settings.problems({"devices": [4, 5, 6, 7]}, "slurm", LAYOUT, "half", H100) == []
    found = mps_settings.problems({"devices": [3, 4]}, "slurm", LAYOUT, "half", H100)
    assert "shares GPU 3, 4 by MPS" in found[0]
    assert "enables MIG on GPU 3:" in found[0]
    found = mps_settings.problems({}, "slurm", LAYOUT, "half", H100)
    assert "enables MIG on GPU 0, 1, 2, 3:" in found[0]


def test_a_later_entry_turning_mig_off_frees_those_gpus():
    assert mps_settings.problems({"devices": [6, 7]}, "slurm", LAYOUT, "all-then-two-off", H100) == []
    assert mps_settings.problems({"devices": [5, 6]}, "slurm", LAYOUT, "all-then-two-off", H100) != []
    # every GPU but 6 and 7 has MIG: "all" is refused, naming every GPU (the count of GPUs is not known here)
    assert "enables MIG on every GPU" in mps_settings.problems({}, "slurm", LAYOUT, "all-then-two-off", H100)[0]


def test_an_entry_filtered_for_another_model_does_not_apply_and_an_unknown_model_counts_as_applying():
    assert mps_settings.problems({}, "kubernetes", LAYOUT, "h200-only", H100) == []
    assert mps_settings.problems({}, "kubernetes", LAYOUT, "h200-only", {"0x233510de"}) != []
    assert mps_settings.problems({}, "kubernetes", LAYOUT, "h200-only", None) != []


def test_no_mig_layout_declared_or_no_config_selected_enables_nothing():
    assert mps_settings.mig_enabled_devices(None, None) == {"default": False, "listed": {}}
    assert mps_settings.mig_enabled_devices(LAYOUT, None) == {"default": False, "listed": {}}
    assert mps_settings.mig_enabled_devices(LAYOUT, "missing") == {"default": False, "listed": {}}
