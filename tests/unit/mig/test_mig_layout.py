"""gpuops_mig validation: mig-parted v1 configs checked against matrix/mig_profiles.yml before any host is contacted."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_layout, mig_profiles
from ansible_collections.gpuops.cluster.plugins.module_utils.stack.stack_matrix import default_matrix

PROFILES = mig_profiles.default_profiles()
MATRIX = default_matrix()

# A config in mig-parted's v1 schema, the way NVIDIA's deployments/systemd/config-default.yaml writes one:
# per-model entries told apart by device-filter, so one file serves a mixed fleet.
FLEET = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
        "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        "inference": [
            {
                "device-filter": ["0x233010DE", "0x233110DE"],
                "devices": [0, 1, 2, 3],
                "mig-enabled": True,
                "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
            },
            {"device-filter": "0x233010DE", "devices": [4, 5, 6, 7], "mig-enabled": False},
            {
                "device-filter": ["0x233510DE"],
                "devices": "all",
                "mig-enabled": True,
                "mig-devices": {"1g.18gb": 7},
            },
        ],
    },
}


def check(spec=None, config="all-1g.10gb", gpu="h100-sxm"):
    return mig_layout.problems(FLEET if spec is None else spec, config, gpu, MATRIX, PROFILES)


def test_an_operators_per_model_file_passes_for_each_model_it_names():
    assert check(config="inference", gpu="h100-sxm") == []
    assert check(config="inference", gpu="NVIDIA H200") == []
    assert check(config="all-disabled", gpu="l40s") == []


def test_unknown_profile_names_the_model_and_what_it_holds():
    (problem,) = check(config="all-1g.10gb", gpu="h200-sxm")
    assert problem.startswith("gpuops_mig config all-1g.10gb entry 0 on h200-sxm (gpuops_gpu 'h200-sxm'): 1g.10gb:")
    assert "holds 1g.18gb (id 19) x7, 1g.18gb+me (id 20) x1, 1g.35gb (id 15) x4" in problem
    assert "7g.141gb (id 0) x1" in problem


def test_more_instances_than_the_profile_allows():
    spec = {
        "version": "v1",
        "mig-configs": {"c": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 8}}]},
    }
    problems = check(spec, "c")
    assert problems[0].startswith(
        "gpuops_mig config c entry 0 on h100-sxm (gpuops_gpu 'h100-sxm'): 8 x 1g.10gb, at most 7 fit;"
    )


def test_more_sm_or_memory_slices_than_the_model_has():
    spec = {
        "version": "v1",
        "mig-configs": {"c": [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "2g.20gb": 2}}]},
    }
    problems = check(spec, "c")
    assert any("8 SM slices of 7" in p for p in problems)
    spec["mig-configs"]["c"][0]["mig-devices"] = {"3g.40gb": 2, "1g.20gb": 1}
    assert any("10 memory slices of 8" in p for p in check(spec, "c"))


def test_placement_limits_of_the_guide():
    # 1g.20gb takes two memory slices from 0, 2, 4 or 6, each 1g.10gb one of 0-6: 7 SM and 8 memory slices fit.
    fits = {
        "version": "v1",
        "mig-configs": {"c": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.20gb": 1, "1g.10gb": 6}}]},
    }
    assert check(fits, "c") == []
    # On a fresh GPU every layout within the SM and memory slices has a placement (a brute force over the
    # h100-80gb set finds none without); instances that stay where they are fragment it: 1g.10gb kept at
    # slices 1 and 5 leave no start (0 or 4) for a 3g.40gb, though 5 SM and 6 memory slices fit the sums.
    h100 = PROFILES.sets["h100-80gb"]
    (problem,) = mig_layout.capacity_problems(["3g.40gb"], h100, "h100-sxm", fixed=[("1g.10gb", 1), ("1g.10gb", 5)])
    assert problem.startswith(
        "1g.10gb + 1g.10gb + 3g.40gb cannot be placed together on the 8 memory slices (nvidia-smi mig -lgipp); h100-sxm"
    )
    assert mig_layout.place(["3g.40gb"], h100, fixed=[("1g.10gb", 0), ("1g.10gb", 1)]) == [4]
    assert mig_layout.place(["4g.40gb", "3g.40gb"], h100) == [0, 4]


def test_compute_instances_pack_into_gpu_instances_as_mig_parted_does():
    assert mig_layout.gpu_instances({"1c.3g.40gb": 3, "1g.10gb": 1}, PROFILES.compute_instances) == [
        {"profile": "3g.40gb", "cis": [1, 1, 1]},
        {"profile": "1g.10gb", "cis": [1]},
    ]
    assert mig_layout.gpu_instances({"2c.3g.40gb": 2}, PROFILES.compute_instances) == [
        {"profile": "3g.40gb", "cis": [2]},
        {"profile": "3g.40gb", "cis": [2]},
    ]
    spec = {
        "version": "v1",
        "mig-configs": {"c": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3c.4g.40gb": 1}}]},
    }
    (problem,) = check(spec, "c")
    assert "3c.4g.40gb: a 4g GPU instance holds compute instances of 1/2/4 SM slices, not 3" in problem


def test_mig_on_a_gpu_without_mig():
    (problem,) = check(config="all-enabled", gpu="NVIDIA L40S")
    assert problem == (
        "gpuops_mig config all-enabled entry 0 enables MIG on l40s (gpuops_gpu 'NVIDIA L40S'), which has no MIG: "
        "set mig-enabled: false or unset gpuops_mig for this host"
    )


def test_a_key_covering_two_memory_sizes_needs_the_product_name():
    (problem,) = check(config="all-enabled", gpu="a100-sxm4")
    assert "names GPUs of different MIG profiles" in problem
    assert "NVIDIA A100-SXM4-80GB" in problem
    assert check(config="all-1g.10gb", gpu="NVIDIA A100-SXM4-80GB") == []
    problems = check(config="all-1g.10gb", gpu="NVIDIA A100-SXM4-40GB")
    assert any("7 x 1g.10gb, at most 4 fit; a100-sxm4 (a100-40gb" in problem for problem in problems)


def test_mig_capable_model_without_recorded_profiles_is_refused():
    (problem,) = check(config="all-enabled", gpu="gh200")
    assert "whose MIG profiles matrix/mig_profiles.yml does not record yet" in problem


def test_config_whose_filters_name_other_gpus():
    assert check(config="inference", gpu="b200") == [
        "gpuops_mig config inference has no entry for b200 (gpuops_gpu 'b200'): its device-filters name other GPUs"
    ]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("all-1g.10gb", "gpuops_mig is not a mapping: give a mig-parted v1 config (version: v1, mig-configs: {...})"),
        (
            {"version": "v2", "mig-configs": {"c": [{"devices": "all", "mig-enabled": False}]}},
            "gpuops_mig has version 'v2'",
        ),
        ({"version": "v1", "mig-configs": {"c": []}}, "gpuops_mig config c needs at least one entry"),
        (
            {"version": "v1", "mig-configs": {"c": [{"devices": "all"}]}},
            "gpuops_mig config c entry 0: needs mig-enabled",
        ),
        (
            {"version": "v1", "config": "c", "mig-configs": {"c": [{"devices": "all", "mig-enabled": False}]}},
            "gpuops_mig has the unknown key 'config'",
        ),
        (
            {"version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": False, "mig-device": {}}]}},
            "gpuops_mig config c entry 0: has the unknown key 'mig-device'",
        ),
        (
            {"version": "v1", "mig-configs": {"c": [{"devices": "some", "mig-enabled": False}]}},
            "gpuops_mig config c entry 0: devices is 'some': give all or a list of GPU indexes",
        ),
        (
            {"version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": True}]}},
            "gpuops_mig config c entry 0: enables MIG without mig-devices",
        ),
        (
            {
                "version": "v1",
                "mig-configs": {"c": [{"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}]},
            },
            "gpuops_mig config c entry 0: disables MIG but lists mig-devices",
        ),
        (
            {
                "version": "v1",
                "mig-configs": {"c": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g10gb": 1}}]},
            },
            "gpuops_mig config c entry 0: mig-devices has '1g10gb'",
        ),
        (
            {
                "version": "v1",
                "mig-configs": {"c": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 0}}]},
            },
            "gpuops_mig config c entry 0: mig-devices counts are all 0",
        ),
        (
            {
                "version": "v1",
                "mig-configs": {"c": [{"devices": "all", "device-filter": "H100", "mig-enabled": False}]},
            },
            "gpuops_mig config c entry 0: device-filter is 'H100'",
        ),
    ],
)
def test_structure_follows_mig_parteds_parser(spec, expected):
    problems = check(spec, "c")
    assert problems, spec
    assert problems[0].startswith(expected), problems


def test_selected_config():
    assert check(config=None) == [
        "gpuops_mig_config is not set: name the config of gpuops_mig to apply "
        "(all-1g.10gb, all-disabled, all-enabled, inference)"
    ]
    assert check(config="balanced")[0].startswith("gpuops_mig_config is 'balanced', which gpuops_mig does not hold")
    assert mig_layout.problems(None, "c", "h100-sxm", MATRIX, PROFILES)[0].startswith(
        "gpuops_mig_config is set but gpuops_mig is not"
    )
    assert mig_layout.problems(None, None, "h100-sxm", MATRIX, PROFILES) == []
    assert check(gpu=None)[0].startswith("gpuops_mig is set but gpuops_gpu is not")
